/* Indexing tars into a .taridx the way upstream's parse_folder does (spec
 * §2.3, §5, §7.2), so that the result is byte-identical to its output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_bytes.h"
#include "sf_hash.h"
#include "tx.h"

/* A string met while indexing (a stem, an extension) and the id it got. */
struct name {
	uint32_t id;
	size_t len;
	uint8_t p[];
};

struct bytes {
	const uint8_t *p;
	size_t len;
};

static bool same_bytes(const void *key, const void *val)
{
	const struct bytes *k = key;
	const struct name *v = val;
	return v->len == k->len && (!k->len || memcmp(v->p, k->p, k->len) == 0);
}

/* The names of one kind are an sf_hash of struct name, by a 64-bit hash. */
static struct name *set_get(const struct sf_hash *s, uint64_t hash, const uint8_t *p, size_t len)
{
	struct bytes k = { p, len };
	return sf_hash_get(s, hash, same_bytes, &k);
}

/* Adds a copy of (p, len) under `hash`. */
static int set_put(struct sf_hash *s, uint64_t hash, const uint8_t *p, size_t len, uint32_t id)
{
	struct name *x = malloc(sizeof *x + len);
	if (!x)
		return -ENOMEM;
	x->id = id;
	x->len = len;
	if (len)
		memcpy(x->p, p, len);
	if (sf_hash_put(s, hash, x)) {
		free(x);
		return -ENOMEM;
	}
	return 0;
}

static void set_free(struct sf_hash *s)
{
	size_t pos = 0;
	struct name *x;
	while ((x = sf_hash_next(s, &pos)))
		free(x);
	sf_hash_free(s);
}

struct state {
	struct sf_hash canon; /* first stem seen per key hash */
	struct sf_hash crash; /* crash stems, by stem hash; id = crash id */
	struct sf_hash ext;   /* extensions; id = extension id */
	struct sf_str rows;
	struct sf_str crash_block, ext_block;
	uint64_t nrows, runs;
	uint64_t last_hash;
	uint32_t last_crash;
	uint16_t last_fid;
	struct sf_progress *progress; /* or NULL */
};

static int add_row(struct state *st, uint16_t fid, uint64_t off, uint64_t size, const struct tx_key *k)
{
	struct name *x = sf_hash_get(&st->canon, k->hash, NULL, NULL);
	uint32_t crashid = 0;
	int rc = 0;
	if (!x) {
		rc = set_put(&st->canon, k->hash, k->stem, k->stem_len, 0);
	} else if (x->len != k->stem_len || memcmp(x->p, k->stem, k->stem_len) != 0) {
		if (memchr(k->stem, '\n', k->stem_len))
			return -EINVAL;
		/* a genuine XXH64 collision: the later stem gets a crash id */
		uint64_t h = XXH3_64bits(k->stem, k->stem_len);
		struct name *c = set_get(&st->crash, h, k->stem, k->stem_len);
		if (!c) {
			uint32_t id = (uint32_t)st->crash.n + 1;
			if (id > 1)
				sf_str_addc(&st->crash_block, '\n');
			sf_str_add(&st->crash_block, k->stem, k->stem_len);
			rc = set_put(&st->crash, h, k->stem, k->stem_len, id);
			crashid = id;
		} else {
			crashid = c->id;
		}
	}
	uint64_t eh = XXH64(k->ext, k->ext_len, 0);
	struct name *ex = set_get(&st->ext, eh, k->ext, k->ext_len);
	if (!rc && !ex) {
		if (st->ext.n >= 65536)
			return -E2BIG;
		if (st->ext.n)
			sf_str_addc(&st->ext_block, '\n');
		sf_str_add(&st->ext_block, k->ext, k->ext_len);
		rc = set_put(&st->ext, eh, k->ext, k->ext_len, (uint32_t)st->ext.n);
		ex = set_get(&st->ext, eh, k->ext, k->ext_len);
	}
	if (rc)
		return rc;
	uint8_t row[TX_ROW_SIZE];
	sf_put_le16(row, fid);
	sf_put_le64(row + 2, off);
	sf_put_le64(row + 10, size);
	sf_put_le16(row + 18, (uint16_t)ex->id);
	sf_put_le32(row + 20, crashid);
	sf_put_le64(row + 24, k->hash);
	sf_str_add(&st->rows, row, sizeof row);
	if (!st->nrows || k->hash != st->last_hash || crashid != st->last_crash)
		st->runs++;
	st->nrows++;
	st->last_hash = k->hash;
	st->last_crash = crashid;
	st->last_fid = fid;
	return st->rows.oom ? -ENOMEM : 0;
}

/* A row's key from a header's name field; refused when the index could not
 * hold it: its blocks are joined by newlines (spec §3.2, §3.3). */
static int key_of(const uint8_t *hdr, struct tx_key *k, const char *name, uint64_t at,
		  struct sf_err *e)
{
	tx_key_from(hdr, tx_field_len(hdr, 100), k);
	if (memchr(k->ext, '\n', k->ext_len))
		return sf_fail(e, -EINVAL, "%s: header at offset %llu: its name's extension holds a newline, which an index cannot store",
			       name, (unsigned long long)at);
	return 0;
}

static int add_header(struct state *st, uint16_t fid, uint64_t at, uint64_t size, const uint8_t *hdr,
		      const char *name, struct sf_err *e)
{
	struct tx_key k;
	int rc = key_of(hdr, &k, name, at, e);
	if (!rc && (rc = add_row(st, fid, at, size, &k)))
		return sf_fail(e, rc, "%s: %s", name,
			       rc == -E2BIG ? "more than 65536 extensions" :
			       rc == -EINVAL ? "a colliding stem holds a newline, which an index cannot store" :
			       "out of memory");
	return rc;
}

/* Walks one tar as tar readers do (tx_entry_read): each header block, the
 * extension records and the header they describe, becomes a row, as
 * upstream's indexer makes them; a row's size states the block's extent
 * (the records' data, or the member's stored data and sparse map blocks),
 * so the next row follows it. What readers could not read, or a view could
 * not show, is refused: an index never serves what the tar does not say. */
static int scan_tar(struct state *st, const struct sf_map *m, const char *name, uint16_t fid,
		    struct sf_err *e)
{
	uint8_t *path = malloc(TX_PATH_MAX);
	struct tx_window w = { .ahead = TX_WINDOW_BYTES };
	if (!path)
		return sf_fail(e, -ENOMEM, "out of memory");
	uint64_t pos = 0, boff;
	const uint8_t *base;
	int rc = 0;
	struct tx_entry en;
	while (!rc && !(rc = tx_entry_read_copy(&w, m, pos, &en, &base, &boff, e))) {
		const char *why = en.bad;
		if (!why && en.sparse)
			tx_sparse_each(base, boff, &en, NULL, NULL, &why);
		if (why) {
			rc = sf_fail(e, -EINVAL, "%s: cannot index the tar at offset %llu: %s", name,
				     (unsigned long long)(en.bad ? en.bad_at : en.hdr), why);
			break;
		}
		uint64_t at = en.first;
		for (uint32_t i = 0; !rc && i < en.nrec; i++) {
			uint64_t size;
			tx_num(base + (at - boff) + 124, 12, &size);
			rc = add_header(st, fid, at, size, base + (at - boff), name, e);
			at += TX_BLOCK + (size + TX_BLOCK - 1) / TX_BLOCK * TX_BLOCK;
		}
		const uint8_t *hdr = base + (en.hdr - boff);
		if (!rc)
			rc = add_header(st, fid, en.hdr, en.row_size, hdr, name, e);
		size_t plen;
		if (!rc && tx_kind_of(en.type) != TX_OTHER && tx_path_of(&en, hdr, path, TX_PATH_MAX, &plen))
			rc = sf_fail(e, -EINVAL, "%s: cannot index the tar at offset %llu: a member whose path is empty or longer than %d bytes, which the view cannot show",
				     name, (unsigned long long)en.hdr, TX_PATH_MAX);
		if (st->progress) {
			atomic_fetch_add_explicit(&st->progress->headers_walked, 1 + en.nrec, memory_order_relaxed);
			atomic_fetch_add_explicit(&st->progress->bytes_walked, en.next - pos, memory_order_relaxed);
		}
		pos = en.next;
	}
	tx_window_free(&w);
	free(path);
	return rc > 0 ? 0 : rc;
}

/* tx_build_index, counting what it walks in `walked` (if not NULL). */
static int build_index(const struct sf_map *const *tars, const char *const *names, size_t n,
		       bool rank_fids, tx_progress_fn progress, void *parg,
		       void (*warn)(void *arg, const char *msg), struct sf_progress *walked,
		       struct sf_buf **out, struct sf_err *e)
{
	struct state st = { .progress = walked };
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		/* upstream numbers a tar "fid of the last row + 1", so an empty
		 * tar takes no fid (spec §2.3) */
		size_t fid = rank_fids ? i : st.nrows ? (size_t)st.last_fid + 1 : 0;
		if (fid > UINT16_MAX) {
			rc = sf_fail(e, -E2BIG, "%s: more than 65536 tars in one fold", names[i]);
			break;
		}
		uint64_t before = st.nrows;
		rc = scan_tar(&st, tars[i], names[i], (uint16_t)fid, e);
		if (!rc && st.nrows == before && warn) {
			char msg[600];
			snprintf(msg, sizeof msg, rank_fids ? "%s holds no members" :
				 "%s holds no members: like upstream's indexer this gives it no fid, so the rows of later tars name fids one too low (use --rank-fids for an index readers can follow)",
				 names[i]);
			warn(parg, msg);
		}
		if (!rc && progress)
			progress(parg, i, st.nrows);
	}
	if (!rc) {
		uint8_t h[TX_HDR_SIZE] = { 'T', 'A', 'R', 'I', 'D', 'X' };
		uint64_t n_stems = st.canon.n + st.crash.n;
		sf_put_le16(h + 8, 1);
		sf_put_le16(h + 10, 0);
		sf_put_le16(h + 12, TX_ROW_SIZE);
		sf_put_le16(h + 14, TX_HDR_SIZE);
		sf_put_le64(h + 16, n_stems);
		sf_put_le64(h + 24, st.nrows);
		sf_put_le32(h + 32, (uint32_t)st.ext.n);
		sf_put_le32(h + 36, (uint32_t)st.crash.n);
		sf_put_le64(h + 40, TX_HDR_SIZE + st.ext_block.len);
		sf_put_le64(h + 48, TX_HDR_SIZE + st.ext_block.len + st.crash_block.len);
		h[56] = st.runs == n_stems;
		struct sf_str file = { 0 };
		sf_str_add(&file, h, sizeof h);
		sf_str_add(&file, st.ext_block.p, st.ext_block.len);
		sf_str_add(&file, st.crash_block.p, st.crash_block.len);
		sf_str_add(&file, st.rows.p, st.rows.len);
		if (st.ext_block.oom || st.crash_block.oom || !(*out = sf_str_take(&file)))
			rc = sf_fail(e, -ENOMEM, "out of memory");
	}
	set_free(&st.canon);
	set_free(&st.crash);
	set_free(&st.ext);
	sf_str_free(&st.rows);
	sf_str_free(&st.crash_block);
	sf_str_free(&st.ext_block);
	return rc;
}

int tx_build_index(const struct sf_map *const *tars, const char *const *names, size_t n,
		   bool rank_fids, tx_progress_fn progress, void *parg,
		   void (*warn)(void *arg, const char *msg), struct sf_buf **out,
		   struct sf_err *e)
{
	return build_index(tars, names, n, rank_fids, progress, parg, warn, NULL, out, e);
}

int tx_index_tar(const struct sf_map *tar, const char *name, struct sf_progress *walked,
		 struct sf_buf **out, struct sf_err *e)
{
	return build_index(&tar, &name, 1, true, NULL, NULL, NULL, walked, out, e);
}
