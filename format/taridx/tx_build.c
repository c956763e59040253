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
#include "tx_z.h"

/* A string met while indexing (a stem, an extension) and the id it got. */
struct name {
	uint32_t id;
	size_t len;
	uint8_t p[];
};

/* What a name costs: its record and the allocator's header. */
#define NAME_COST(len) (sizeof(struct name) + (len) + 16)

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

/* Adds a copy of (p, len) under `hash`, its cost added to *cost. */
static int set_put(struct sf_hash *s, uint64_t hash, const uint8_t *p, size_t len, uint32_t id,
		   uint64_t *cost)
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
	*cost += NAME_COST(len);
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
	/* The walk's memory charged to `cache` as it grows (or NULL: a tool's
	 * build, bounded by its machine): `charged` covers what is held and
	 * the next step's growth, never less; `names` the names' allocations. */
	struct sf_cache *cache;
	uint64_t charged, names;
	/* With `noting`, the hashes of the root names the fold's lookup
	 * cannot key (note_unkeyed), 8 bytes each, the last one in `last`. */
	bool noting;
	struct sf_str unkeyed;
	uint64_t last;
	/* The tar is a damaged archive's, cut short (tx_z.c salvage): it
	 * ends where its last whole entry does. */
	bool cut;
	/* a compressed tar's: the header blocks it reads, kept apart */
	struct tx_zheads_make *heads;
};

/* Charged at a time: charges are not made per row. */
#define CHARGE_CHUNK ((uint64_t)1 << 20)

/* The bytes a string holds once `more` bytes are added to it, counting
 * the old buffer beside the new while it is copied. */
static uint64_t str_after(const struct sf_str *s, size_t more)
{
	if (s->len + more <= s->cap)
		return s->cap;
	size_t cap = s->cap ? s->cap : 256;
	while (cap < s->len + more)
		cap *= 2;
	return s->cap + cap;
}

/* The same for a map of names given `more` names (its slots are 16 bytes,
 * the map doubles at half full: old and new slots live while it does). */
static uint64_t set_after(const struct sf_hash *h, size_t more)
{
	size_t cap = h->cap;
	while ((h->n + more) * 2 > cap)
		cap = cap ? cap * 2 : 16;
	return 16 * (uint64_t)(cap == h->cap ? cap : h->cap + cap);
}

/* Before a step that adds up to `rows` rows and `bytes` more bytes to the
 * rows: charges what the walk will hold after it (its rows, names and
 * their maps), a chunk at a time, and grows the rows in advance so that
 * their copy is counted. -EIO when the walk needs more than the whole
 * budget, -ENOBUFS when the budget has no room for it now; e names the tar
 * and what it needed. */
static int charge_step(struct state *st, uint64_t rows, size_t bytes, const char *name,
		       struct sf_err *e)
{
	size_t more_rows = (size_t)rows * TX_ROW_SIZE + bytes;
	/* each row may add a stem, a crash stem and an extension, each a
	 * name field's bytes at most */
	uint64_t need = str_after(&st->rows, more_rows) + st->names +
			rows * 3 * NAME_COST(100) + str_after(&st->crash_block, 101 * rows) +
			str_after(&st->ext_block, 101 * rows) + set_after(&st->canon, rows) +
			set_after(&st->crash, rows) + set_after(&st->ext, rows) +
			(st->noting ? str_after(&st->unkeyed, 8 * rows) : 0) + tx_zheads_after(st->heads);
	uint64_t limit = st->cache ? st->cache->limit : 0;
	if (st->cache && need > st->charged) {
		if (limit && need > limit)
			return sf_fail(e, -EIO, "%s: its index needs more memory than --cache-size (%llu bytes) holds: walk stopped after %llu rows, holding %llu bytes",
				       name, (unsigned long long)limit, (unsigned long long)st->nrows,
				       (unsigned long long)st->charged);
		uint64_t more = (need - st->charged + CHARGE_CHUNK - 1) / CHARGE_CHUNK * CHARGE_CHUNK;
		if (limit && st->charged + more > limit)
			more = limit - st->charged;
		if (sf_cache_charge(st->cache, more, name, "the walk that indexes it", e))
			return -ENOBUFS;
		st->charged += more;
	}
	return sf_str_reserve(&st->rows, more_rows) ? 0 : sf_fail(e, -ENOMEM, "out of memory");
}

static int add_row(struct state *st, uint16_t fid, uint64_t off, uint64_t size, const struct tx_key *k)
{
	struct name *x = sf_hash_get(&st->canon, k->hash, NULL, NULL);
	uint32_t crashid = 0;
	int rc = 0;
	if (!x) {
		rc = set_put(&st->canon, k->hash, k->stem, k->stem_len, 0, &st->names);
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
			rc = set_put(&st->crash, h, k->stem, k->stem_len, id, &st->names);
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
		rc = set_put(&st->ext, eh, k->ext, k->ext_len, (uint32_t)st->ext.n, &st->names);
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

/* Whether the fold's lookup finds member `path` (of kind `kind`, header
 * hdr) by its row's key (tx_fold.c, keyed): a flat file or symlink whose
 * path gives the stem and extension its name field gave the row. k holds
 * two keys of room. */
static bool keyed_by_name(enum tx_kind kind, const uint8_t *hdr, const uint8_t *path, size_t plen,
			  struct tx_key *k)
{
	if ((kind != TX_FILE && kind != TX_SYMLINK) || plen > 100 || memchr(path, '/', plen))
		return false;
	tx_key_from(path, plen, &k[0]);
	if (k[0].cut || !k[0].stem_len)
		return false;
	size_t nlen = tx_field_len(hdr, 100);
	if (nlen == plen && !memcmp(hdr, path, plen))
		return true;
	tx_key_from(hdr, nlen, &k[1]);
	return !k[1].cut && k[0].stem_len == k[1].stem_len && k[0].ext_len == k[1].ext_len &&
	       !memcmp(k[0].stem, k[1].stem, k[0].stem_len) && !memcmp(k[0].ext, k[1].ext, k[0].ext_len);
}

/* Notes the root name of member `path` when the fold's lookup cannot key
 * it (a directory, a hard link, a member renamed by a pax path or a GNU
 * long name), as the fold's pass over the headers would (tx_fold.c,
 * find_unkeyed): the walk has every header at hand, so an unindexed tar's first
 * lookup needs no second pass (a compressed tar's, no second decode). A
 * superset costs only listings: a name is kept by its hash alone. */
static void note_unkeyed(struct state *st, uint8_t type, const uint8_t *hdr, const uint8_t *path,
			 size_t plen, struct tx_key *k)
{
	enum tx_kind kind = tx_kind_of(type);
	if ((kind == TX_OTHER && type != '5') || keyed_by_name(kind, hdr, path, plen, k))
		return;
	const uint8_t *slash = memchr(path, '/', plen);
	uint64_t h = XXH64(path, slash ? (size_t)(slash - path) : plen, 0);
	/* the members of one directory follow each other */
	if (st->unkeyed.len && h == st->last)
		return;
	st->last = h;
	sf_str_add(&st->unkeyed, &h, sizeof h);
}

static int by_value(const void *a, const void *b)
{
	uint64_t x, y;
	memcpy(&x, a, sizeof x);
	memcpy(&y, b, sizeof y);
	return x < y ? -1 : x > y;
}

size_t tx_unkeyed_sort(uint64_t *h, size_t n)
{
	size_t k = 0;
	if (n)
		qsort(h, n, sizeof *h, by_value);
	for (size_t i = 0; i < n; i++)
		if (!k || h[i] != h[k - 1])
			h[k++] = h[i];
	return k;
}

/* The noted hashes sorted, each once, as an sf_buf (tx_unkeyed_has). */
static struct sf_buf *take_unkeyed(struct state *st)
{
	st->unkeyed.len = 8 * tx_unkeyed_sort((uint64_t *)(void *)st->unkeyed.p, st->unkeyed.len / 8);
	return sf_str_take(&st->unkeyed);
}

bool tx_unkeyed_has(const struct sf_buf *b, uint64_t h)
{
	size_t lo = 0, hi = b->len / 8;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t v;
		memcpy(&v, b->data + mid * 8, sizeof v);
		if (v == h)
			return true;
		if (v < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
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
	struct tx_key *k = st->noting ? malloc(2 * sizeof *k) : NULL;
	struct tx_window w = { .ahead = TX_WINDOW_BYTES };
	if (!path || (st->noting && !k)) {
		free(path);
		free(k);
		return sf_fail(e, -ENOMEM, "out of memory");
	}
	uint64_t pos = 0, boff;
	const uint8_t *base;
	int rc = 0;
	struct tx_entry en;
	bool unread = false; /* the entry at pos could not be read */
	while (!rc && !(rc = tx_entry_read_copy(&w, m, pos, &en, &base, &boff, e))) {
		const char *why = en.bad;
		if (!why && en.sparse)
			tx_sparse_each(base, boff, &en, NULL, NULL, &why);
		if (why) {
			rc = sf_fail(e, -EINVAL, "%s: cannot index the tar at offset %llu: %s", name,
				     (unsigned long long)(en.bad ? en.bad_at : en.hdr), why);
			unread = true;
			break;
		}
		if ((rc = charge_step(st, en.nrec + 1, 0, name, e)))
			break;
		/* what a listing reads of the entry again (tx_entry_read_copy) */
		uint64_t text = en.sparse == TX_SPARSE_10 ? en.stored < TX_MAP_TEXT_MAX ? en.stored : TX_MAP_TEXT_MAX : 0;
		tx_zheads_note(st->heads, en.first, base + (en.first - boff), en.data + text - en.first);
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
		bool member = tx_kind_of(en.type) != TX_OTHER;
		int bad = rc || (!member && en.type != '5') ? 1 : tx_path_of(&en, hdr, path, TX_PATH_MAX, &plen);
		if (!rc && member && bad)
			rc = sf_fail(e, -EINVAL, "%s: cannot index the tar at offset %llu: a member whose path is empty or longer than %d bytes, which the view cannot show",
				     name, (unsigned long long)en.hdr, TX_PATH_MAX);
		/* a directory with no path is no member of the view */
		if (!rc && !bad && st->noting)
			note_unkeyed(st, en.type, hdr, path, plen, k);
		if (st->progress) {
			atomic_fetch_add_explicit(&st->progress->headers_walked, 1 + en.nrec, memory_order_relaxed);
			atomic_fetch_add_explicit(&st->progress->bytes_walked, en.next - pos, memory_order_relaxed);
		}
		pos = en.next;
	}
	tx_window_free(&w);
	free(path);
	free(k);
	if (st->cut && unread)
		rc = 1;
	if (rc > 0)
		rc = st->unkeyed.oom ? sf_fail(e, -ENOMEM, "out of memory") : 0;
	return rc;
}

/* tx_build_index, counting what it walks in `walked` (if not NULL). */
static int build_index(const struct sf_map *const *tars, const char *const *names, size_t n,
		       bool rank_fids, tx_progress_fn progress, void *parg,
		       void (*warn)(void *arg, const char *msg), struct sf_progress *walked,
		       struct sf_cache *cache, uint64_t *charged, struct sf_buf **out,
		       struct sf_buf **unkeyed, struct sf_buf **heads, struct sf_err *e)
{
	struct tx_zinfo zi;
	tx_z_info(n == 1 ? tars[0] : NULL, &zi);
	struct state st = { .progress = walked, .cache = cache, .noting = unkeyed != NULL,
			    .cut = zi.damage != NULL,
			    /* a decoded map: a compressed tar, or the walk beside its
			     * pass (tx_zfeed.c) */
			    .heads = heads && n == 1 && tars[0]->read ? tx_zheads_begin() : NULL };
	uint64_t kept = 0;
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
		/* the file is the rows with the header and blocks put before
		 * them, in place: no second copy of the rows */
		size_t head = sizeof h + st.ext_block.len + st.crash_block.len;
		if (st.ext_block.oom || st.crash_block.oom)
			rc = sf_fail(e, -ENOMEM, "out of memory");
		else
			rc = charge_step(&st, 0, head, names[0], e);
		if (!rc) {
			uint8_t *p = st.rows.p;
			memmove(p + head, p, st.rows.len);
			memcpy(p, h, sizeof h);
			if (st.ext_block.len)
				memcpy(p + sizeof h, st.ext_block.p, st.ext_block.len);
			if (st.crash_block.len)
				memcpy(p + sizeof h + st.ext_block.len, st.crash_block.p,
				       st.crash_block.len);
			st.rows.len += head;
			uint64_t cap = st.rows.cap, ucap = st.unkeyed.cap;
			if (!(*out = sf_str_take(&st.rows))) {
				rc = sf_fail(e, -ENOMEM, "out of memory");
			} else if (unkeyed && !(*unkeyed = take_unkeyed(&st))) {
				sf_buf_unref(*out);
				*out = NULL;
				rc = sf_fail(e, -ENOMEM, "out of memory");
			} else {
				kept = cap + (unkeyed ? ucap : 0);
				if (heads && (*heads = tx_zheads_end(st.heads)))
					kept += (*heads)->len;
				st.heads = NULL;
			}
		}
	}
	set_free(&st.canon);
	set_free(&st.crash);
	set_free(&st.ext);
	sf_str_free(&st.rows);
	sf_str_free(&st.crash_block);
	sf_str_free(&st.ext_block);
	sf_str_free(&st.unkeyed);
	tx_zheads_abort(st.heads);
	/* what stays charged is the index's buffer */
	if (st.charged > kept)
		sf_cache_uncharge(cache, st.charged - kept);
	if (charged)
		*charged = kept < st.charged ? kept : st.charged;
	return rc;
}

int tx_build_index(const struct sf_map *const *tars, const char *const *names, size_t n,
		   bool rank_fids, tx_progress_fn progress, void *parg,
		   void (*warn)(void *arg, const char *msg), struct sf_buf **out,
		   struct sf_err *e)
{
	return build_index(tars, names, n, rank_fids, progress, parg, warn, NULL, NULL, NULL, out,
			   NULL, NULL, e);
}

int tx_index_tar(const struct sf_map *tar, const char *name, struct sf_progress *walked,
		 struct sf_cache *cache, uint64_t *charged, struct tx_built *out, struct sf_err *e)
{
	*out = (struct tx_built){ 0 };
	return build_index(&tar, &name, 1, true, NULL, NULL, NULL, walked, cache, charged,
			   &out->index, &out->unkeyed, &out->heads, e);
}

void tx_built_drop(struct tx_built *b)
{
	sf_buf_unref(b->index);
	sf_buf_unref(b->unkeyed);
	sf_buf_unref(b->heads);
	*b = (struct tx_built){ 0 };
}

uint64_t tx_built_bytes(const struct tx_built *b)
{
	return (b->index ? b->index->len : 0) + (b->unkeyed ? b->unkeyed->len : 0) +
	       (b->heads ? b->heads->len : 0);
}
