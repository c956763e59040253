/* The fold view F/ (docs/design.md §3.7): the flat-name lookup through the
 * index, the lazy listing built from the tar headers, and .shardfs/rows/
 * (samples.jsonl is tx_samples.c's; opening F.taridx is tx_format.c's). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <xxhash.h>

#include "sf_big.h"
#include "sf_bytes.h"
#include "sf_hash.h"
#include "sf_name.h"
#include "sf_recent.h"
#include "tx.h"
#include "tx_z.h"
#include "sf_view_impl.h"

static bool bit_get(const uint8_t *bits, uint64_t i)
{
	return bits[i / 8] >> (i % 8) & 1;
}

static void bit_set(uint8_t *bits, uint64_t i)
{
	bits[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void bit_clear(uint8_t *bits, uint64_t i)
{
	bits[i / 8] &= (uint8_t)~(1u << (i % 8));
}

/* The listing reads every header, and lookups the index rows: pages read
 * need not stay in our page tables, where a fold of a million small
 * members would hold its every tar page and its whole index. The page
 * cache keeps them, so a later read faults them back cheaply. Called once
 * per row read (in the view's turn), it drops them every
 * view->host.drop_every rows. */
static void read_rows(struct tx_fold *f)
{
	if (++f->rows_read % f->view->host.drop_every)
		return;
	for (size_t i = 0; i < f->view->nmaps; i++)
		sf_map_drop_pages(f->view->maps[i]);
}

/* ---- file content ----------------------------------------------------- */

static int build_payload(struct sf_node *n, struct sf_cache *c, struct sf_err *e)
{
	struct tx_fold *f = n->arg;
	struct tx_row row;
	/* lazy work may come after a shed (tx_lone.c): the index first */
	int rc = tx_fold_ready(f, e);
	if (!rc)
		rc = tx_row_get(&f->ix, n->aux, &row, e);
	if (rc)
		return rc;
	uint64_t at;
	if (!tx_payload_at(f, &row, &at))
		return sf_fail(e, -EIO, "%s: row %llu: payload outside its tar", f->view->path,
			       (unsigned long long)n->aux);
	return tx_add_bytes(n, f->shards[row.fid].map, at, row.size);
}

/* Gives a file the payload of row r, or marks it broken (listed with the
 * row's size, reads fail EIO) when the payload is not inside its tar: so
 * only rows/ entries, since a member's row verifies (tx_member_check). */
static int set_payload(struct tx_fold *f, struct sf_node *n, uint64_t r, struct sf_err *e)
{
	struct tx_row row;
	int rc = tx_row_get(&f->ix, r, &row, e);
	if (rc)
		return rc;
	n->aux = r;
	if (tx_payload_at(f, &row, &(uint64_t){ 0 })) {
		sf_file_set_build_sized(n, build_payload, f, row.size);
		return 0;
	}
	char why[400];
	if (row.fid >= f->nshards || !f->shards[row.fid].map)
		snprintf(why, sizeof why, "%s: row %llu: fid %u names no readable shard", f->view->path,
			 (unsigned long long)r, row.fid);
	else
		snprintf(why, sizeof why, "%s: row %llu: payload of %llu bytes at %llu runs past the end of %s (%zu bytes)",
			 f->view->path, (unsigned long long)r, (unsigned long long)row.size,
			 (unsigned long long)row.off + TX_BLOCK, f->shards[row.fid].name,
			 f->shards[row.fid].map->size);
	return sf_file_set_broken(n, row.size, why) ? sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path) : 0;
}

/* ---- .shardfs/rows/ ---------------------------------------------------- */

/* An entry of rows/ is keyed by its row. */
static int make_row(struct sf_node *n, struct sf_err *e)
{
	int rc = tx_fold_ready(n->view->state, e);
	if (rc)
		return rc;
	read_rows(n->view->state);
	return set_payload(n->view->state, n, n->key, e);
}

static int rows_lookup(struct sf_node *dir, const char *name, struct sf_node **out,
		       struct sf_err *e)
{
	struct tx_fold *f = dir->view->state;
	*out = NULL;
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	uint64_t r = 0;
	size_t i = 0;
	/* canonical decimal only: "007" is not row 7 */
	for (; name[i] >= '0' && name[i] <= '9' && i < 11; i++)
		r = r * 10 + (uint64_t)(name[i] - '0');
	if (!i || name[i] || (name[0] == '0' && i > 1) || r >= f->ix.n_rows)
		return 0;
	return sf_dir_lazy_node(dir, SF_FILE, name, (uint32_t)r, (uint32_t)r, out, e);
}

static int rows_populate(struct sf_node *dir, struct sf_err *e)
{
	struct tx_fold *f = dir->view->state;
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	for (uint64_t r = 0; r < f->ix.n_rows; r++) {
		char name[24];
		int len = snprintf(name, sizeof name, "%llu", (unsigned long long)r);
		rc = sf_dir_add_lazy(dir, name, (size_t)len, SF_FILE, (uint32_t)r, (uint32_t)r);
		if (rc)
			return sf_fail(e, rc, "%s: out of memory listing rows", dir->view->path);
	}
	return 0;
}

/* ---- members ------------------------------------------------------------ */

/* A member entry is keyed by its row; aux is the row whose payload a file
 * shows (a hard link's target), or TX_NO_ROW for a hard link to nothing. */
#define TX_NO_ROW UINT32_MAX

static int make_member(struct sf_node *n, struct sf_err *e)
{
	struct tx_fold *f = n->view->state;
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	read_rows(f);
	if (n->kind == SF_FILE && n->aux != TX_NO_ROW)
		return tx_member_set_content(f, n, n->aux, e);
	/* a symlink, or a hard link to nothing: the header names the target */
	/* (a symlink's aux is the row it shows: itself, or for a hard link to
	 * a symlink, that symlink) */
	uint32_t r = n->kind == SF_LINK ? (uint32_t)n->aux : n->key;
	struct tx_member m;
	struct tx_str link = { 0 };
	size_t plen;
	uint8_t *path = malloc(TX_PATH_MAX);
	struct tx_window w = { 0 };
	rc = tx_member_check(f, r, &m, &w, e);
	if (rc) {
		free(path);
		tx_window_free(&w);
		return rc;
	}
	rc = path ? tx_member_names(f, r, &m, path, TX_PATH_MAX, &plen, &link) : -ENOMEM;
	free(path);
	if (rc) {
		tx_window_free(&w);
		return sf_fail(e, rc == -ENOMEM ? rc : -EIO, "%s: row %u: its names cannot be read again%s%s",
			       f->view->path, r, m.bad ? ": " : "", m.bad ? m.bad : "");
	}
	if (n->kind == SF_LINK) {
		n->u.target = strndup((const char *)link.p, link.len);
		tx_window_free(&w);
		return n->u.target ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	}
	tx_window_free(&w);
	char why[400];
	snprintf(why, sizeof why, "%s: row %u: hard link to %.*s, which is no member stored before it",
		 f->view->path, r, (int)(link.len < 200 ? link.len : 200), (const char *)link.p);
	return sf_file_set_broken(n, 0, why) ? sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path) : 0;
}

struct flat_probe {
	const struct tx_fold *f;
	uint8_t raw[SF_NAME_MAX + 16]; /* the name unescaped */
	size_t len;
	uint64_t tag;       /* the name's (tx_fold.named), or 0 */
	long best;
	struct tx_member m; /* the best's row and kind */
	bool known;         /* best is the row the name's tag was left on */
	struct tx_window w;
	int rc;             /* the index's rows could not be read (e says why) */
	struct sf_err *e;
};

static bool probe_row(void *arg, uint32_t r)
{
	struct flat_probe *p = arg;
	struct tx_member m;
	if (p->tag && atomic_load_explicit(&p->f->named[r], memory_order_relaxed) == p->tag) {
		/* this name's lookup found this row before, of all its rows */
		p->rc = tx_rows_get(&p->f->ix, &p->w.rows, r, &p->m.row, p->e);
		p->m.kind = TX_FILE;
		p->best = r;
		p->known = true;
		return true;
	}
	if ((p->rc = tx_member_check(p->f, r, &m, &p->w, p->e)))
		return true;
	if (m.bad || m.kind == TX_OTHER)
		return false;
	/* a flat name has at most 100 bytes: a longer path cannot equal it */
	uint8_t path[128];
	size_t plen;
	struct tx_str link;
	if (tx_member_names(p->f, r, &m, path, sizeof path, &plen, &link) || plen != p->len ||
	    memcmp(path, p->raw, plen) != 0)
		return false;
	/* the later member of a path wins (fid, then offset) */
	if (p->best < 0 || m.row.fid > p->m.row.fid ||
	    (m.row.fid == p->m.row.fid && m.row.off > p->m.row.off)) {
		p->best = r;
		p->m = m;
	}
	return false;
}

static int populate_root(struct sf_node *root, struct sf_err *e);

/* Whether the lookup keeps the rows of the index file whole (a host that
 * keeps copies): only when the host's cache takes the charge, which the
 * fold holds until it is freed; otherwise rows are copied as read. */
static bool keep_rows(struct tx_fold *f)
{
	struct sf_cache *c = f->view->cache;
	uint64_t bytes = f->ix.n_rows * TX_ROW_SIZE;
	struct sf_err ignored = { { 0 } };
	if (!f->view->host.keep_copies || !f->ix.map || f->charged ||
	    sf_cache_charge(c, bytes, f->view->path, "keeping its index rows", &ignored))
		return false;
	f->charged_to = c;
	f->charged = bytes;
	return true;
}

/* Room for a tag per row (tx_fold.named) in a host that keeps copies,
 * when its cache takes the charge; none otherwise (names are checked at
 * each lookup). */
static void keep_names(struct tx_fold *f)
{
	struct sf_cache *c = f->view->cache;
	uint64_t bytes = f->ix.n_rows * sizeof *f->named;
	struct sf_err ignored = { { 0 } };
	if (!f->view->host.keep_copies || f->named || !f->ix.n_rows ||
	    getrandom(&f->named_seed, sizeof f->named_seed, 0) != sizeof f->named_seed ||
	    sf_cache_charge(c, bytes, f->view->path, "keeping the names it looked up", &ignored))
		return;
	if (!(f->named = sf_big_alloc((size_t)f->ix.n_rows, sizeof *f->named))) {
		sf_cache_uncharge(c, bytes);
		return;
	}
	f->named_charged_to = c;
	f->named_charged = bytes;
}

int tx_fold_lookup(struct tx_fold *f, struct sf_err *e)
{
	sf_turn_take(&f->lookup_turn);
	int rc = f->ix.start ? 0 : tx_lookup_build(&f->ix, keep_rows(f), e);
	if (!rc)
		keep_names(f);
	sf_turn_give(&f->lookup_turn);
	return rc;
}

/* ---- names the index cannot key ---------------------------------------- */

/* One pass over the rows with its buffers: the listing's (populate_root)
 * and the one that finds the root names the index cannot key. */
struct walk {
	struct tx_fold *f;
	/* the index's rows could not be read: the pass stops, e says why */
	int rc;
	struct sf_err *e;
	/* the listing's: full paths of members map to the latest row with
	 * each path so far (fid, then offset) in 4 bytes a slot, a bit per row
	 * says whether the row is the one shown, the row each hard link shows
	 * and the directories made; all dropped after the listing */
	struct sf_ids winner;
	uint8_t *won;
	uint32_t *link_to;
	struct sf_hash dirs;
	/* copies of the tars: of the row being listed (its member's names
	 * point into it), and of the rows it is compared with */
	struct tx_window cur, cmp;
	/* the path being listed, the path of a row it is compared with, and
	 * the path a hard link names */
	uint8_t path[TX_PATH_MAX], other[TX_PATH_MAX], target[TX_PATH_MAX];
};

static struct walk *walk_new(struct tx_fold *f, struct sf_err *e)
{
	struct walk *k = calloc(1, sizeof *k);
	if (k) {
		k->f = f;
		k->e = e;
	}
	return k;
}

/* Checks row r through w for the walk: false when the index's rows cannot
 * be read (k->rc set) or could not before. */
static bool walk_check(struct walk *k, uint32_t r, struct tx_member *m, struct tx_window *w)
{
	return !k->rc && !(k->rc = tx_member_check(k->f, r, m, w, k->e));
}

static void walk_free(struct walk *k)
{
	size_t pos = 0;
	void *d;
	while ((d = sf_hash_next(&k->dirs, &pos)))
		free(d);
	sf_hash_free(&k->dirs);
	sf_ids_free(&k->winner);
	tx_window_free(&k->cur);
	tx_window_free(&k->cmp);
	free(k->won);
	free(k->link_to);
	free(k);
}

/* Whether a member that is no file, link or symlink is a directory (the
 * reader made old-style ones '5'); the only such kind member_at admits. */
static bool is_dir(const struct tx_member *m)
{
	return m->kind == TX_OTHER && m->en.type == '5';
}

/* True when member m (row r) is a file, link, symlink or directory with a
 * path. */
static bool member_at(struct walk *k, uint32_t r, struct tx_member *m, size_t *plen,
		      struct tx_str *link)
{
	if (!k->rc)
		k->rc = tx_window_plan(k->f, &k->cur, r, false, k->e);
	return walk_check(k, r, m, &k->cur) && !m->bad && (m->kind != TX_OTHER || is_dir(m)) &&
	       !tx_member_names(k->f, r, m, k->path, TX_PATH_MAX, plen, link);
}

/* Whether the root lookup's probe finds member m by its full path: a flat
 * name the row's key, crash id and extension are derived from, and not a
 * hard link (which the probe leaves to the listing). */
static bool keyed(const struct tx_fold *f, const struct tx_member *m, const uint8_t *path,
		  size_t plen)
{
	if (m->kind == TX_HARDLINK || is_dir(m) || plen > 100 || memchr(path, '/', plen))
		return false;
	struct tx_key key;
	tx_key_from(path, plen, &key);
	return !key.cut && key.stem_len && key.hash == m->row.keyhash &&
	       tx_ext_id(&f->ix, key.ext, key.ext_len) == m->row.extid &&
	       tx_crash_id(&f->ix, key.stem, key.stem_len, key.hash) == m->row.crashid;
}

/* The header of row r into *hdr when it lies inside its tar, else NULL: 0,
 * or as tx_rows_get and tx_window_get. */
static int row_header(const struct tx_fold *f, struct tx_window *w, uint32_t r,
		      const uint8_t **hdr, struct sf_err *e)
{
	struct tx_row row;
	*hdr = NULL;
	int rc = tx_rows_get(&f->ix, &w->rows, r, &row, e);
	if (rc || row.fid >= f->nshards || !f->shards[row.fid].map)
		return rc;
	const struct sf_map *map = f->shards[row.fid].map;
	if (!sf_range_ok(map->size, row.off, TX_BLOCK))
		return 0;
	/* where the next headers lie apart, the header alone: the check needs
	 * no more, and 16 KiB a header was most of the pass over a fold of
	 * 100 KiB members */
	if ((rc = tx_window_plan(f, w, r, true, e)))
		return rc;
	return tx_window_get(w, map, row.off, TX_BLOCK, hdr, e);
}

/* Whether row r, if a member, is keyed by its name field alone, seen from
 * a few bytes of its header: a regular file with no records before it
 * (the row before is no record), no ustar prefix, and a name field with a
 * stem and no '/'. Its path is then its name field, from which its row's
 * key was derived (a row whose key differs does not verify, so is no
 * member). A row it says no for gets the full check. */
static bool plainly_keyed(const uint8_t *hdr, bool after_record)
{
	uint8_t t = hdr[156];
	if (after_record || (t != '0' && t != '\0' && t != '7') || hdr[345] || hdr[0] == '.' || !hdr[0])
		return false;
	return !memchr(hdr, '/', tx_field_len(hdr, 100));
}

/* find_unkeyed's pass takes rows in chunks of this many, from a counter
 * both its threads share (a second where there is a second CPU and two
 * chunks at least): the pass is mostly the kernel copying tar stretches,
 * which a second thread nearly halves, and chunks keep both busy to the
 * end whatever else one of them does first (tx_fold_lookup). */
#define UNKEYED_CHUNK 4096

static const char UNKEYED_WHAT[] = "the root names its index cannot key";

/* What one thread of find_unkeyed's pass found: hashes of root names in
 * `hash`, sorted and each kept once whenever it fills (so it holds at most
 * about twice the names it found), charged to the view's cache as it
 * grows. */
struct unkeyed_part {
	struct tx_fold *f;
	/* the first row no thread has taken: 64 bits, since each thread adds
	 * a chunk past the last row before it stops */
	_Atomic uint64_t *next;
	bool drops; /* the thread that drops pages read (read_rows) */
	uint64_t *hash;
	size_t n, cap;
	uint64_t charged;
	bool refused; /* by the budget */
	int rc;
	struct sf_err e;
};

/* Doubles p's room, the old array counted beside the new while it is
 * copied. 0, or as sf_cache_charge, or -ENOMEM; p->e says why. */
static int part_grow(struct unkeyed_part *p)
{
	struct sf_view *v = p->f->view;
	size_t cap = p->cap ? 2 * p->cap : 512;
	int rc = sf_cache_charge(v->cache, 8 * (uint64_t)cap, v->path, UNKEYED_WHAT, &p->e);
	if (rc) {
		p->refused = true;
		return rc;
	}
	uint64_t *b = realloc(p->hash, cap * sizeof *b);
	if (!b) {
		sf_cache_uncharge(v->cache, 8 * (uint64_t)cap);
		return sf_fail(&p->e, -ENOMEM, "%s: out of memory looking up in the fold", v->path);
	}
	if (p->charged)
		sf_cache_uncharge(v->cache, p->charged);
	p->hash = b;
	p->cap = cap;
	p->charged = 8 * (uint64_t)cap;
	return 0;
}

static int part_note(struct unkeyed_part *p, uint64_t h)
{
	/* the members of one directory follow each other */
	if (p->n && p->hash[p->n - 1] == h)
		return 0;
	if (p->n == p->cap) {
		p->n = tx_unkeyed_sort(p->hash, p->n);
		int rc = p->n >= p->cap / 2 ? part_grow(p) : 0;
		if (rc)
			return rc;
	}
	p->hash[p->n++] = h;
	return 0;
}

/* Scans rows [from, to) for part p through k and w. Only rows that are not
 * plainly keyed get the full check: for most folds the pass reads a few
 * bytes of each header. The row before `from` is read too, for whether the
 * first row comes after a record. */
static int part_rows(struct unkeyed_part *p, struct walk *k, struct tx_window *w, uint32_t from,
		     uint32_t to)
{
	struct tx_fold *f = p->f;
	struct tx_member m;
	struct tx_str link;
	size_t plen;
	int rc = 0;
	bool after_record = false;
	for (uint32_t r = from ? from - 1 : 0; !rc && r < to; r++) {
		if (p->drops)
			read_rows(f);
		const uint8_t *hdr;
		if ((rc = row_header(f, w, r, &hdr, &p->e)))
			break;
		if (!hdr) {
			after_record = false;
			continue;
		}
		bool plain = plainly_keyed(hdr, after_record);
		after_record = tx_is_record(hdr[156]);
		if (r < from || plain || !member_at(k, r, &m, &plen, &link) ||
		    keyed(f, &m, k->path, plen)) {
			rc = k->rc;
			continue;
		}
		const uint8_t *slash = memchr(k->path, '/', plen);
		rc = part_note(p, XXH64(k->path, slash ? (size_t)(slash - k->path) : plen, 0));
	}
	return rc;
}

/* One thread of the pass: chunks of rows until none is left. A failure
 * ends the other thread's pass too, at its next chunk. */
static void *part_scan(void *arg)
{
	struct unkeyed_part *p = arg;
	struct tx_fold *f = p->f;
	uint32_t n = (uint32_t)f->ix.n_rows;
	struct walk *k = walk_new(f, &p->e);
	struct tx_window w = { 0 };
	int rc = k ? 0 : sf_fail(&p->e, -ENOMEM, "%s: out of memory looking up in the fold", f->view->path);
	while (!rc) {
		uint64_t from = atomic_fetch_add(p->next, UNKEYED_CHUNK);
		if (from >= n)
			break;
		rc = part_rows(p, k, &w, (uint32_t)from,
			       n - from < UNKEYED_CHUNK ? n : (uint32_t)from + UNKEYED_CHUNK);
	}
	if (rc)
		atomic_store(p->next, n);
	tx_window_free(&w);
	if (k)
		walk_free(k);
	p->rc = rc;
	return NULL;
}

static void part_free(struct unkeyed_part *p)
{
	free(p->hash);
	if (p->charged)
		sf_cache_uncharge(p->f->view->cache, p->charged);
}

/* Starts the pass's second thread with every signal blocked, as the
 * daemon's own threads are: signals go to the threads that expect them
 * (a host of the C API or the module has its own). */
static bool start_part(pthread_t *t, struct unkeyed_part *p)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	bool ok = pthread_create(t, NULL, part_scan, p) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ok;
}

/* Keeps the names both threads found as f->unkeyed, sorted, each once,
 * charged while the fold lives. *refused when the budget refuses them. */
static int keep_unkeyed(struct tx_fold *f, const struct unkeyed_part *part, bool *refused,
			struct sf_err *e)
{
	struct sf_cache *c = f->view->cache;
	size_t n = part[0].n + part[1].n;
	uint64_t bytes = 8 * (uint64_t)(n ? n : 1);
	int rc = sf_cache_charge(c, bytes, f->view->path, UNKEYED_WHAT, e);
	if ((*refused = rc != 0))
		return rc;
	uint64_t *h = malloc(bytes);
	struct sf_buf *b = h ? sf_buf_wrap((uint8_t *)h, 0) : NULL;
	if (!b) {
		free(h);
		sf_cache_uncharge(c, bytes);
		return sf_fail(e, -ENOMEM, "%s: out of memory looking up in the fold", f->view->path);
	}
	for (size_t i = 0, at = 0; i < 2; at += part[i++].n)
		if (part[i].n)
			memcpy(h + at, part[i].hash, part[i].n * sizeof *h);
	b->len = 8 * tx_unkeyed_sort(h, n);
	/* names found by both threads, or by one in several chunks, go */
	uint64_t kept = b->len ? b->len : 8;
	uint8_t *less = kept < bytes ? realloc(b->data, kept) : NULL;
	if (less) {
		b->data = less;
		sf_cache_uncharge(c, bytes - kept);
		bytes = kept;
	}
	f->unkeyed = b;
	f->unkeyed_charged = bytes;
	f->unkeyed_charged_to = c;
	return 0;
}

/* Finds, once, the raw names of root entries the probe cannot find: the
 * root's directories and the flat members that are not keyed (renamed by
 * a pax path or GNU long name, hard links, names with no stem). Kept by
 * hash alone: a hash that matches by chance only costs a listing. Pax
 * records that rename nothing (WebDataset's float mtimes) add nothing, so
 * such a fold answers misses as cheaply as one without them. The index
 * cannot spare a header: a member's row is keyed by its base name alone,
 * so any row may be one under a directory (`N/x`), and a record that
 * renames the member after it is a row keyed by whatever its name field
 * says. So every header is read, on two threads where there are two CPUs;
 * `first` (when not NULL: the lookup's build) runs on this one while the
 * other starts on the rows. The set found is the same whichever thread
 * takes which chunk: each chunk reads the row before it, and the names
 * are sorted when both threads end. */
static int find_unkeyed(struct tx_fold *f, int (*first)(struct tx_fold *, struct sf_err *),
			struct sf_err *e)
{
	if (f->unkeyed || f->noted)
		return first ? first(f, e) : 0;
	struct sf_cache *c = f->view->cache;
	if (f->unkeyed_why && f->unkeyed_why_at == atomic_load(&c->freed))
		return sf_fail(e, -EIO, "%s", f->unkeyed_why);
	uint32_t n = (uint32_t)f->ix.n_rows;
	_Atomic uint64_t next = 0;
	struct unkeyed_part part[2] = { { .f = f, .next = &next, .drops = true },
					{ .f = f, .next = &next } };
	pthread_t t;
	bool two = n >= 2 * UNKEYED_CHUNK && sysconf(_SC_NPROCESSORS_ONLN) > 1 &&
		   start_part(&t, &part[1]);
	int rc = first ? first(f, e) : 0;
	if (rc)
		atomic_store(&next, n);
	else
		part_scan(&part[0]);
	if (two)
		pthread_join(t, NULL);
	bool refused = false;
	for (int i = 0; i < 2 && !rc; i++)
		if ((rc = part[i].rc)) {
			*e = part[i].e;
			refused = part[i].refused;
		}
	if (!rc)
		rc = keep_unkeyed(f, part, &refused, e);
	part_free(&part[0]);
	part_free(&part[1]);
	/* counted after the parts' own charges went */
	if (refused) {
		free(f->unkeyed_why);
		f->unkeyed_why = strdup(e->msg);
		f->unkeyed_why_at = atomic_load(&c->freed);
	}
	return rc;
}

/* Whether the root name of hash h is one find_unkeyed found. */
static bool unkeyed(struct tx_fold *f, uint64_t h)
{
	return tx_unkeyed_has(f->noted ? f->noted : f->unkeyed, h);
}

/* Whether a shown name may be one the listing made up: "#<n>" added to
 * tell names apart, or a name cut to 255 bytes ("~" and 16 hex digits). */
static bool made_up(const char *name)
{
	size_t len = strlen(name), d = len;
	while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
		d--;
	if (d < len && d > 0 && name[d - 1] == '#')
		return true;
	if (len < 17 || name[len - 17] != '~')
		return false;
	for (size_t i = len - 16; i < len; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return true;
}

/* A flat key path "<stem>.<ext>" resolves through the index: key hash,
 * crash table, rows, then the tar header's full path confirms (or the tag
 * a lookup of the name left, tx_fold.named). 0 with p->best the row that
 * shows `name` (a file or a symlink), or -1 (none, or one only the listing
 * can tell); 1 when the name is no flat key path; or a negative errno. The
 * caller frees p->w. */
static int flat_find(struct tx_fold *f, const char *name, size_t along, struct flat_probe *p,
		     struct sf_err *e)
{
	*p = (struct flat_probe){ .f = f, .best = -1, .e = e, .w.along = along };
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	const uint8_t *raw = p->raw;
	size_t n = p->len = sf_name_unescape(name, p->raw);
	struct tx_key k;
	tx_key_from(raw, n, &k);
	long extid = tx_ext_id(&f->ix, k.ext, k.ext_len);
	if (n > 100 || memchr(raw, '/', n) || k.cut || !k.stem_len || extid < 0)
		return 1;
	/* the lookup's build and the pass over the headers (needed below for
	 * a hit, and by root_lookup for a miss) at once */
	if ((rc = find_unkeyed(f, tx_fold_lookup, e)))
		return rc;
	size_t len = strlen(name);
	if (f->named)
		p->tag = XXH3_64bits_withSeed(name, len, f->named_seed) | 1;
	rc = tx_lookup_each(&f->ix, &p->w.rows, k.hash, tx_crash_id(&f->ix, k.stem, k.stem_len, k.hash),
			    (uint16_t)extid, probe_row, p, e);
	if (rc || (rc = p->rc))
		return rc;
	if (p->best < 0 || p->known)
		return 0;
	char esc[SF_NAME_MAX + 1];
	sf_name_escape(raw, n, SF_NAME_MAX, esc);
	if (p->m.kind == TX_HARDLINK || strcmp(esc, name) != 0) {
		p->best = -1;
		return 0;
	}
	/* a member the index cannot key (renamed by a pax path or a GNU long
	 * name, a hard link, a directory) may show the name instead, later in
	 * the tar: only the listing weighs them all. Known once per fold, so a
	 * name's answer never depends on what was looked up or listed before. */
	if (unkeyed(f, XXH64(raw, n, 0))) {
		p->best = -1;
		return 0;
	}
	bit_set(f->hooked_member, (uint64_t)p->best);
	if (p->tag && p->m.kind == TX_FILE && tx_row_plain(f, (uint64_t)p->best))
		atomic_store_explicit(&f->named[p->best], p->tag, memory_order_relaxed);
	return 0;
}

/* Hands the copy the check of the found member made to the read waiting
 * on this locate (*pre), when the member's payload is in it. */
static void keep_along(const struct tx_fold *f, struct flat_probe *p, struct sf_recent *pre)
{
	if (p->best >= 0 && p->w.along && p->w.len &&
	    p->w.map == f->shards[p->m.row.fid].map && p->m.en.data >= p->w.off &&
	    p->m.en.size <= p->w.len && p->m.en.data - p->w.off <= p->w.len - p->m.en.size) {
		sf_recent_free(pre);
		*pre = (struct sf_recent){ p->w.map, p->w.off, (size_t)p->w.len, p->w.buf };
		p->w.buf = NULL;
		p->w.len = p->w.cap = 0;
	}
}

/* A name the index resolves is a member; any other is absent unless it is
 * a root name the index cannot key (find_unkeyed) or one the listing may
 * have made up: only those list the fold. */
static int root_lookup(struct sf_node *root, const char *name, struct sf_node **out,
		       struct sf_err *e)
{
	struct tx_fold *f = root->view->state;
	*out = NULL;
	struct flat_probe p;
	int rc = flat_find(f, name, 0, &p, e);
	tx_window_free(&p.w);
	if (rc < 0)
		return rc;
	if (rc == 0 && p.best >= 0)
		return sf_dir_lazy_node(root, p.m.kind == TX_SYMLINK ? SF_LINK : SF_FILE, name,
					(uint32_t)p.best, (uint32_t)p.best, out, e);
	if (!made_up(name)) {
		if ((rc = find_unkeyed(f, NULL, e)))
			return rc;
		if (!unkeyed(f, XXH64(p.raw, p.len, 0)))
			return 0;
	}
	return SF_LOOKUP_LIST;
}

/* The root's names that resolve to files stored as-is (not sparse),
 * without a node: a member found by its tag is a plain one, its payload
 * right after its header; one just checked has its data's place from its
 * headers. */
static int root_locate(struct sf_node *root, const char *name, struct sf_stored *out,
		       struct sf_err *e)
{
	struct tx_fold *f = root->view->state;
	struct flat_probe p;
	/* a compressed tar's bytes are decoded, never stored as-is */
	if (f->nshards && f->shards[0].map && f->shards[0].map->read)
		return SF_LOOKUP_LIST;
	int rc = flat_find(f, name, out->along, &p, e);
	if (rc == 0 && p.best >= 0 && p.m.kind == TX_FILE && p.known) {
		out->map = f->shards[p.m.row.fid].map;
		out->off = p.m.row.off + TX_BLOCK;
		out->size = p.m.row.size;
	} else if (rc == 0 && p.best >= 0 && p.m.kind == TX_FILE && !p.m.en.sparse) {
		keep_along(f, &p, &out->pre);
		out->map = f->shards[p.m.row.fid].map;
		out->off = p.m.en.data;
		out->size = p.m.en.size;
	} else if (rc == 0) {
		rc = SF_LOOKUP_LIST;
	}
	tx_window_free(&p.w);
	return rc;
}

/* ---- listing ------------------------------------------------------------ */

struct path_key {
	struct walk *k;
	const uint8_t *path;
	size_t len;
};

static bool same_path(const void *key, uint32_t r)
{
	const struct path_key *p = key;
	struct walk *k = p->k;
	struct tx_member m;
	struct tx_str link;
	size_t olen;
	return walk_check(k, r, &m, &k->cmp) && !tx_member_names(k->f, r, &m, k->other, TX_PATH_MAX, &olen, &link) &&
	       olen == p->len && memcmp(k->other, p->path, olen) == 0;
}

/* Where the row that shows `path` is kept, or NULL; *hash is the path's. */
static uint32_t *winner_of(struct walk *k, const uint8_t *path, size_t len, uint64_t *hash)
{
	struct path_key key = { k, path, len };
	*hash = XXH64(path, len, 0);
	return sf_ids_find(&k->winner, *hash, same_path, &key);
}

/* A directory the listing made, found again by its parent and raw name
 * (its shown name may have gained "#<n>"). Each keeps one component, not
 * its path, so that a path of 32,000 levels costs linear memory. */
struct made_dir {
	struct sf_node *parent, *node;
	size_t len;
	uint8_t raw[];
};

struct made_key {
	const struct sf_node *parent;
	const uint8_t *raw;
	size_t len;
};

static bool made_is(const void *key, const void *val)
{
	const struct made_key *a = key;
	const struct made_dir *d = val;
	return d->parent == a->parent && d->len == a->len && memcmp(d->raw, a->raw, a->len) == 0;
}

/* The directory `raw` in dir, made on first use. Names are escaped and
 * made unique as every name is (docs/design.md §3.3): one taken by a file,
 * by ".shardfs" or by another directory pushes this one to "<name>#<n>",
 * and it is never merged with a directory of another raw name. */
static struct sf_node *subdir(struct walk *k, struct sf_node *dir, const uint8_t *raw, size_t len)
{
	struct made_key key = { dir, raw, len };
	uint64_t h = XXH64(raw, len, (uint64_t)(uintptr_t)dir);
	struct made_dir *d = sf_hash_get(&k->dirs, h, made_is, &key);
	if (d)
		return d->node;
	if (!(d = malloc(sizeof *d + len)))
		return NULL;
	*d = (struct made_dir){ .parent = dir, .len = len };
	memcpy(d->raw, raw, len);
	if (!(d->node = sf_dir_add_dir(dir, raw, len)) || sf_dir_set_lazy(d->node, make_member) ||
	    sf_hash_put(&k->dirs, h, d)) {
		free(d);
		return NULL;
	}
	return d->node;
}

/* The row hard link `link` shows: the latest member stored before it at
 * the path it names (so a file stored twice, whose second copy tar writes
 * as a link to itself, shows the first copy's bytes, and a link to a path
 * overwritten later keeps the older bytes, as tar extracts them); for a
 * link to a link, that link's row. TX_NO_ROW when there is none. */
static uint32_t link_row(struct walk *k, struct tx_str link)
{
	size_t tlen = 0;
	if (tx_path_append(k->target, TX_PATH_MAX, &tlen, link.p, link.len) || !tlen)
		return TX_NO_ROW;
	uint64_t h;
	uint32_t *w = winner_of(k, k->target, tlen, &h);
	if (!w)
		return TX_NO_ROW;
	struct tx_member m;
	if (!walk_check(k, *w, &m, &k->cmp))
		return TX_NO_ROW;
	return m.kind == TX_HARDLINK ? k->link_to[*w] : *w;
}

/* Pass one, in row order: the row that shows each path, and what each
 * hard link shows (resolved when it is met, before later versions). */
static void pick_rows(struct walk *k)
{
	struct tx_fold *f = k->f;
	struct tx_member m;
	struct tx_str link;
	size_t plen;
	for (uint32_t r = 0; !k->rc && r < f->ix.n_rows; r++) {
		read_rows(f);
		if (!member_at(k, r, &m, &plen, &link))
			continue;
		/* a directory record is listed unless a file takes its path */
		if (is_dir(&m)) {
			bit_set(k->won, r);
			continue;
		}
		if (m.kind == TX_HARDLINK)
			k->link_to[r] = link_row(k, link);
		uint64_t h;
		uint32_t *w = winner_of(k, k->path, plen, &h);
		if (!w) {
			(void)sf_ids_put(&k->winner, h, r);
			bit_set(k->won, r);
			continue;
		}
		struct tx_row prev;
		if ((k->rc = tx_rows_get(&f->ix, &k->cmp.rows, *w, &prev, k->e)))
			return;
		if (m.row.fid > prev.fid || (m.row.fid == prev.fid && m.row.off >= prev.off)) {
			bit_clear(k->won, *w);
			bit_set(k->won, r);
			*w = r;
		}
	}
}

/* The directory that holds the path being listed (plen bytes), made with
 * its parents on first use; *from is where its last component starts. */
static struct sf_node *parent_of(struct walk *k, struct sf_node *root, size_t plen, size_t *from)
{
	struct sf_node *dir = root;
	*from = 0;
	for (const uint8_t *slash; dir && (slash = memchr(k->path + *from, '/', plen - *from));) {
		size_t end = (size_t)(slash - k->path);
		dir = subdir(k, dir, k->path + *from, end - *from);
		*from = end + 1;
	}
	return dir;
}

/* Pass two: adds the entry of row r (shown at its path) to the tree. */
static int add_entry(struct walk *k, struct sf_node *root, uint32_t r, const struct tx_member *m,
		     size_t plen)
{
	enum sf_kind kind = m->kind == TX_SYMLINK ? SF_LINK : SF_FILE;
	uint32_t aux = r;
	if (m->kind == TX_HARDLINK) {
		aux = k->link_to[r];
		struct tx_member t;
		if (aux != TX_NO_ROW) {
			if (!walk_check(k, aux, &t, &k->cmp))
				return k->rc;
			if (t.kind == TX_SYMLINK)
				kind = SF_LINK;
		}
	}
	size_t from;
	struct sf_node *dir = parent_of(k, root, plen, &from);
	return dir ? sf_dir_add_lazy(dir, k->path + from, plen - from, kind, r, aux) : -ENOMEM;
}

/* Pass two for a directory record: the directory at its path, empty or
 * not, unless a member's path is its own (the file is shown). */
static int add_dir(struct walk *k, struct sf_node *root, size_t plen)
{
	uint64_t h;
	if (winner_of(k, k->path, plen, &h))
		return 0;
	size_t from;
	struct sf_node *dir = parent_of(k, root, plen, &from);
	return dir && subdir(k, dir, k->path + from, plen - from) ? 0 : -ENOMEM;
}

static int populate_root(struct sf_node *root, struct sf_err *e)
{
	struct tx_fold *f = root->view->state;
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	/* entries can now be searched without coming back to the lookup hook */
	root->u.dir.populated = true;
	struct walk *k = walk_new(f, e);
	/* room for every row, so that no put below fails */
	if (!k || !(k->won = calloc(f->ix.n_rows / 8 + 1, 1)) ||
	    !(k->link_to = calloc(f->ix.n_rows + 1, sizeof *k->link_to)) ||
	    sf_ids_reset(&k->winner, f->ix.n_rows)) {
		if (k)
			walk_free(k);
		return sf_fail(e, -ENOMEM, "%s: out of memory listing the fold", root->view->path);
	}
	pick_rows(k);
	rc = k->rc;
	struct tx_member m;
	struct tx_str link;
	size_t plen;
	/* the names the lookup hook gave out come first, as they were given */
	for (int hooked = 1; hooked >= 0; hooked--) {
		for (uint32_t r = 0; !rc && r < f->ix.n_rows; r++) {
			read_rows(f);
			if (bit_get(f->hooked_member, r) != hooked || !bit_get(k->won, r) ||
			    !member_at(k, r, &m, &plen, &link)) {
				rc = k->rc;
				continue;
			}
			if (is_dir(&m) ? add_dir(k, root, plen) : add_entry(k, root, r, &m, plen))
				rc = k->rc ? k->rc : sf_fail(e, -ENOMEM, "%s: out of memory listing the fold", root->view->path);
		}
	}
	walk_free(k);
	return rc;
}

/* ---- the tree ----------------------------------------------------------- */

int tx_fold_build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e)
{
	struct tx_fold *f = state;
	if (!(f->rows_dir = sf_dir_add_exact(meta, SF_DIR, "rows")) || tx_samples_add(f, meta) ||
	    sf_dir_set_lazy(f->rows_dir, make_row) || sf_dir_set_lazy(v->root, make_member))
		return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
	sf_dir_set_populate(f->rows_dir, rows_populate, f);
	sf_dir_set_lookup(f->rows_dir, rows_lookup);
	sf_dir_set_populate(v->root, populate_root, f);
	sf_dir_set_lookup(v->root, root_lookup);
	sf_dir_set_locate(v->root, root_locate);
	return 0;
}
