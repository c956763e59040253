/* Indexing tars into a .taridx the way upstream's parse_folder does (spec
 * §2.3, §5, §7.2), so that the result is byte-identical to its output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_bytes.h"
#include "taridx.h"

/* An open-addressed set of strings keyed by a 64-bit hash. */
struct strset {
	struct entry {
		uint64_t hash;
		uint8_t *p;
		size_t len;
		uint32_t id;
	} *e;
	size_t cap, n;
};

static struct entry *set_find(struct strset *s, uint64_t hash, const uint8_t *p, size_t len,
			      bool any_with_hash)
{
	for (size_t i = hash & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		struct entry *x = &s->e[i];
		if (!x->p)
			return x;
		if (x->hash == hash && (any_with_hash || (x->len == len && memcmp(x->p, p, len) == 0)))
			return x;
	}
}

static int set_grow(struct strset *s)
{
	if (s->cap && s->n * 2 < s->cap)
		return 0;
	struct strset t = { calloc(s->cap ? s->cap * 2 : 64, sizeof *t.e), s->cap ? s->cap * 2 : 64, s->n };
	if (!t.e)
		return -ENOMEM;
	for (size_t i = 0; i < s->cap; i++)
		if (s->e[i].p)
			*set_find(&t, s->e[i].hash, s->e[i].p, s->e[i].len, false) = s->e[i];
	free(s->e);
	*s = t;
	return 0;
}

/* Adds (hash, p) at the free slot x found by set_find; the string is copied
 * with a spare byte so that empty strings still have a pointer. */
static int set_put(struct strset *s, struct entry *x, uint64_t hash, const uint8_t *p,
		   size_t len, uint32_t id)
{
	uint8_t *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, p, len);
	*x = (struct entry){ hash, copy, len, id };
	s->n++;
	return set_grow(s);
}

static void set_free(struct strset *s)
{
	for (size_t i = 0; i < s->cap; i++)
		free(s->e[i].p);
	free(s->e);
}

struct state {
	struct strset canon;  /* first stem seen per key hash */
	struct strset crash;  /* crash stems, by stem hash; id = crash id */
	struct strset ext;    /* extensions; id = extension id */
	struct sf_str rows;
	struct sf_str crash_block, ext_block;
	uint64_t nrows, runs;
	uint64_t last_hash;
	uint32_t last_crash;
	uint16_t last_fid;
};

static int add_row(struct state *st, uint16_t fid, uint64_t off, uint64_t size, const struct tx_key *k)
{
	struct entry *x = set_find(&st->canon, k->hash, NULL, 0, true);
	uint32_t crashid = 0;
	int rc = 0;
	if (!x->p) {
		rc = set_put(&st->canon, x, k->hash, k->stem, k->stem_len, 0);
	} else if (x->len != k->stem_len || memcmp(x->p, k->stem, k->stem_len) != 0) {
		/* a genuine XXH64 collision: the later stem gets a crash id */
		uint64_t h = XXH3_64bits(k->stem, k->stem_len);
		struct entry *c = set_find(&st->crash, h, k->stem, k->stem_len, false);
		if (!c->p) {
			uint32_t id = (uint32_t)st->crash.n + 1;
			if (id > 1)
				sf_str_addc(&st->crash_block, '\n');
			sf_str_add(&st->crash_block, k->stem, k->stem_len);
			rc = set_put(&st->crash, c, h, k->stem, k->stem_len, id);
			crashid = id;
		} else {
			crashid = c->id;
		}
	}
	uint64_t eh = XXH64(k->ext, k->ext_len, 0);
	struct entry *ex = set_find(&st->ext, eh, k->ext, k->ext_len, false);
	if (!rc && !ex->p) {
		if (st->ext.n >= 65536)
			return -E2BIG;
		if (st->ext.n)
			sf_str_addc(&st->ext_block, '\n');
		sf_str_add(&st->ext_block, k->ext, k->ext_len);
		rc = set_put(&st->ext, ex, eh, k->ext, k->ext_len, (uint32_t)st->ext.n);
		ex = set_find(&st->ext, eh, k->ext, k->ext_len, false);
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

/* Walks one tar: every header block until the end or the first zero block
 * becomes a row, whatever its type. */
static int scan_tar(struct state *st, const struct sf_map *m, const char *name, uint16_t fid,
		    struct sf_err *e)
{
	uint64_t pos = 0;
	while (pos < m->size) {
		if (m->size - pos < TX_BLOCK)
			return sf_fail(e, -EINVAL, "%s: malformed tar: %llu stray bytes at offset %llu (truncated?)",
				       name, (unsigned long long)(m->size - pos), (unsigned long long)pos);
		const uint8_t *hdr = m->data + pos;
		if (tx_block_is_zero(hdr))
			break;
		uint64_t size;
		if (tx_hdr_size(hdr, &size))
			return sf_fail(e, -EINVAL, "%s: malformed tar: header at offset %llu has no octal size (base-256 sizes and non-tar data cannot be indexed)",
				       name, (unsigned long long)pos);
		uint64_t blocks = size / TX_BLOCK + (size % TX_BLOCK != 0), next;
		if (!sf_range_ok(m->size - pos - TX_BLOCK, 0, size) ||
		    !sf_add_ok(pos + TX_BLOCK, blocks * TX_BLOCK, &next))
			return sf_fail(e, -EINVAL, "%s: malformed tar: member at offset %llu claims %llu bytes, past the end of the file (truncated?)",
				       name, (unsigned long long)pos, (unsigned long long)size);
		struct tx_key k;
		tx_key_from(hdr, tx_field_len(hdr, 100), &k);
		int rc = add_row(st, fid, pos, size, &k);
		if (rc)
			return sf_fail(e, rc, "%s: %s", name,
				       rc == -E2BIG ? "more than 65536 extensions" : "out of memory");
		pos = next;
	}
	return 0;
}

int tx_build_index(const struct sf_map *const *tars, const char *const *names, size_t n,
		   bool rank_fids, tx_progress_fn progress, void *parg,
		   void (*warn)(void *arg, const char *msg), struct sf_buf **out,
		   struct sf_err *e)
{
	struct state st = { 0 };
	int rc = set_grow(&st.canon);
	if (!rc)
		rc = set_grow(&st.crash);
	if (!rc)
		rc = set_grow(&st.ext);
	if (rc)
		rc = sf_fail(e, rc, "out of memory");
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
