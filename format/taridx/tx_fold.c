/* The fold view F/ (docs/design.md §3.7): the flat-name lookup through the
 * index, the lazy listing built from the tar headers, and .shardfs/rows/
 * (samples.jsonl is tx_samples.c's; opening F.taridx is tx_format.c's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_fault.h"
#include "sf_hash.h"
#include "sf_name.h"
#include "tx.h"

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
 * per row read (under the view's lock), it drops them every few thousand. */
#define DROP_EVERY 4096

static void read_rows(struct tx_fold *f)
{
	if (++f->rows_read % DROP_EVERY)
		return;
	for (size_t i = 0; i < f->view->nmaps; i++)
		sf_map_drop_pages(f->view->maps[i]);
}

/* ---- file content ----------------------------------------------------- */

static int build_payload(struct sf_node *n, struct sf_cache *c, struct sf_err *e)
{
	struct tx_fold *f = n->arg;
	struct tx_row row;
	tx_row_get(&f->ix, n->aux, &row);
	const uint8_t *p = tx_payload(f, &row);
	if (!p)
		return sf_fail(e, -EIO, "%s: row %llu: payload outside its tar", f->view->path,
			       (unsigned long long)n->aux);
	return sf_file_add_map(n, p, row.size);
}

/* Gives a file the payload of row r, or marks it broken (listed with the
 * row's size, reads fail EIO) when the payload is not inside its tar: so
 * only rows/ entries, since a member's row verifies (tx_member_check). */
static int set_payload(struct tx_fold *f, struct sf_node *n, uint64_t r)
{
	struct tx_row row;
	tx_row_get(&f->ix, r, &row);
	n->aux = r;
	if (tx_payload(f, &row)) {
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
	return sf_file_set_broken(n, row.size, why);
}

/* ---- .shardfs/rows/ ---------------------------------------------------- */

/* An entry of rows/ is keyed by its row. */
static int make_row(struct sf_node *n, struct sf_err *e)
{
	read_rows(n->view->state);
	if (set_payload(n->view->state, n, n->key))
		return sf_fail(e, -ENOMEM, "%s: out of memory", n->view->path);
	return 0;
}

static int rows_lookup(struct sf_node *dir, const char *name, struct sf_node **out,
		       struct sf_err *e)
{
	struct tx_fold *f = dir->view->state;
	*out = NULL;
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
	for (uint64_t r = 0; r < f->ix.n_rows; r++) {
		char name[24];
		int len = snprintf(name, sizeof name, "%llu", (unsigned long long)r);
		int rc = sf_dir_add_lazy(dir, name, (size_t)len, SF_FILE, (uint32_t)r, (uint32_t)r);
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
	read_rows(f);
	if (n->kind == SF_FILE && n->aux != TX_NO_ROW)
		return tx_member_set_content(f, n, n->aux) ? sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path) : 0;
	/* a symlink, or a hard link to nothing: the header names the target */
	struct tx_member m;
	struct tx_str link = { 0 };
	size_t plen;
	uint8_t *path = malloc(TX_PATH_MAX);
	tx_member_check(f, n->key, &m);
	int rc = path ? tx_member_names(f, n->key, &m, path, TX_PATH_MAX, &plen, &link) : -ENOMEM;
	free(path);
	if (rc)
		return sf_fail(e, rc == -ENOMEM ? rc : -EIO, "%s: row %u: its names cannot be read again",
			       f->view->path, n->key);
	if (n->kind == SF_LINK) {
		if (!(n->u.target = strndup((const char *)link.p, link.len)))
			return sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
		return 0;
	}
	char why[400];
	snprintf(why, sizeof why, "%s: row %u: hard link to %.*s, which is not a member",
		 f->view->path, n->key, (int)(link.len < 200 ? link.len : 200), (const char *)link.p);
	return sf_file_set_broken(n, 0, why) ? sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path) : 0;
}

struct flat_probe {
	const struct tx_fold *f;
	const uint8_t *raw;
	size_t len;
	long best;
	struct tx_member m;
};

static bool probe_row(void *arg, uint32_t r)
{
	struct flat_probe *p = arg;
	struct tx_member m;
	tx_member_check(p->f, r, &m);
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

static int lookup_build(void *ctx, struct sf_err *e)
{
	return tx_lookup_build(ctx, e);
}

/* The index is read in a guard of its own, inside the lock, so that a
 * fault cannot leave the lock held. */
int tx_fold_lookup(struct tx_fold *f, struct sf_err *e)
{
	pthread_mutex_lock(&f->lookup_lock);
	int rc = sf_guard_run(f->view, NULL, lookup_build, &f->ix, e);
	pthread_mutex_unlock(&f->lookup_lock);
	return rc;
}

static bool any_row(void *arg, uint32_t row)
{
	(void)row;
	*(bool *)arg = true;
	return true;
}

/* Whether the fold root may hold an entry that no row's key names: a
 * directory, or a member whose pax path or GNU long name differs from the
 * name field its key was hashed from (Python's tarfile writes '?' there for
 * each non-ASCII character). Tar tools store those as directory records
 * (empty stem and extension) and "@PaxHeader" / "@LongLink" records, which
 * the index keys like members, so telling needs no header read. Needs the
 * lookup. */
static bool has_unkeyed_names(struct tx_fold *f)
{
	static const char *const records[] = { "", "@PaxHeader", "@LongLink" };
	if (f->unkeyed >= 0)
		return f->unkeyed;
	long extid = tx_ext_id(&f->ix, (const uint8_t *)"", 0);
	bool found = false;
	for (size_t i = 0; extid >= 0 && !found && i < sizeof records / sizeof *records; i++) {
		const uint8_t *stem = (const uint8_t *)records[i];
		size_t len = strlen(records[i]);
		uint64_t h = XXH64(stem, len, 0);
		tx_lookup_each(&f->ix, h, tx_crash_id(&f->ix, stem, len, h), (uint16_t)extid, any_row,
			       &found);
	}
	f->unkeyed = found;
	return found;
}

/* A flat key path "<stem>.<ext>" resolves through the index: key hash,
 * crash table, rows, then the tar header's name confirms; a key path with an
 * extension and no row is absent, unless the fold may show names no row
 * keys (has_unkeyed_names). Any other name (directories, hard links, escaped or cut
 * names) needs the listing. */
static int root_lookup(struct sf_node *root, const char *name, struct sf_node **out,
		       struct sf_err *e)
{
	struct tx_fold *f = root->view->state;
	*out = NULL;
	uint8_t raw[SF_NAME_MAX + 16];
	size_t n = sf_name_unescape(name, raw);
	struct tx_key k;
	tx_key_from(raw, n, &k);
	long extid = tx_ext_id(&f->ix, k.ext, k.ext_len);
	if (n <= 100 && !memchr(raw, '/', n) && !k.cut && k.stem_len && extid >= 0) {
		int rc = tx_fold_lookup(f, e);
		if (rc)
			return rc;
		struct flat_probe p = { .f = f, .raw = raw, .len = n, .best = -1 };
		tx_lookup_each(&f->ix, k.hash, tx_crash_id(&f->ix, k.stem, k.stem_len, k.hash),
			       (uint16_t)extid, probe_row, &p);
		char esc[SF_NAME_MAX + 1];
		sf_name_escape(raw, n, SF_NAME_MAX, esc);
		if (p.best >= 0 && p.m.kind != TX_HARDLINK && strcmp(esc, name) == 0) {
			bit_set(f->hooked_member, (uint64_t)p.best);
			return sf_dir_lazy_node(root, p.m.kind == TX_SYMLINK ? SF_LINK : SF_FILE, name,
						(uint32_t)p.best, (uint32_t)p.best, out, e);
		}
		/* A key path the index does not hold is absent: answering without
		 * the listing keeps misses fast on folds of millions of members.
		 * Only folds that may show names the index does not key list. */
		if (p.best < 0 && k.ext_len && !has_unkeyed_names(f))
			return 0;
	}
	int rc = populate_root(root, e);
	if (rc)
		return rc;
	return sf_dir_find(root, name, out, e);
}

/* ---- listing ------------------------------------------------------------ */

/* One listing's walk. Full paths of members map to the row that shows each
 * (the last one in fid, offset order) in 8 bytes a slot, and a bit per row
 * says whether the row is that one; both are dropped after the listing. */
struct walk {
	struct tx_fold *f;
	struct sf_ids winner;
	uint8_t *won;
	/* the path being listed, the path of a row it is compared with, and
	 * the path a hard link names */
	uint8_t path[TX_PATH_MAX], other[TX_PATH_MAX], target[TX_PATH_MAX];
};

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
	tx_member_check(k->f, r, &m);
	return !tx_member_names(k->f, r, &m, k->other, TX_PATH_MAX, &olen, &link) &&
	       olen == p->len && memcmp(k->other, p->path, olen) == 0;
}

/* Where the row that shows `path` is kept, or NULL; *hash is the path's. */
static uint32_t *winner_of(struct walk *k, const uint8_t *path, size_t len, uint64_t *hash)
{
	struct path_key key = { k, path, len };
	*hash = XXH64(path, len, 0);
	return sf_ids_find(&k->winner, *hash, same_path, &key);
}

/* True when member m (row r) is a file, link or symlink with a path. */
static bool member_at(struct walk *k, uint32_t r, struct tx_member *m, size_t *plen,
		      struct tx_str *link)
{
	tx_member_check(k->f, r, m);
	return !m->bad && m->kind != TX_OTHER &&
	       !tx_member_names(k->f, r, m, k->path, TX_PATH_MAX, plen, link);
}

/* The directory `raw` (escaped per component) in dir, created if absent.
 * A file of the same name pushes the directory to "<name>#<n>". */
static struct sf_node *subdir(struct sf_node *dir, const uint8_t *raw, size_t len)
{
	char esc[SF_NAME_MAX + 1], cand[SF_NAME_MAX + 32];
	sf_name_escape(raw, len, SF_NAME_MAX, esc);
	for (unsigned long i = 0;; i++) {
		if (i)
			snprintf(cand, sizeof cand, "%s#%lu", esc, i);
		else
			strcpy(cand, esc);
		if (!cand[0] || strcmp(cand, ".") == 0 || strcmp(cand, "..") == 0)
			continue;
		struct sf_dirent hit;
		if (!sf_dir_peek(dir, cand, &hit)) {
			struct sf_node *d = sf_dir_add_dir(dir, raw, len);
			return d && sf_dir_set_lazy(d, make_member) == 0 ? d : NULL;
		}
		if (hit.kind == SF_DIR && hit.node)
			return hit.node;
	}
}

/* The row a hard link ends at (following links to links), or -1. */
static long link_target(struct walk *k, struct tx_str link)
{
	for (int depth = 0; depth < 8; depth++) {
		size_t tlen = 0;
		if (tx_path_append(k->target, TX_PATH_MAX, &tlen, link.p, link.len) || !tlen)
			return -1;
		uint64_t h;
		uint32_t *w = winner_of(k, k->target, tlen, &h);
		if (!w)
			return -1;
		uint32_t r = *w;
		struct tx_member m;
		size_t plen;
		if (!member_at(k, r, &m, &plen, &link))
			return -1;
		if (m.kind == TX_FILE)
			return (long)r;
		if (m.kind != TX_HARDLINK)
			return -1;
	}
	return -1;
}

static int populate_root(struct sf_node *root, struct sf_err *e)
{
	struct tx_fold *f = root->view->state;
	/* entries can now be searched without coming back to the lookup hook */
	root->u.dir.populated = true;
	struct walk *k = calloc(1, sizeof *k);
	/* room for every row, so that no put below fails */
	if (!k || !(k->won = calloc(f->ix.n_rows / 8 + 1, 1)) ||
	    sf_ids_reset(&k->winner, f->ix.n_rows)) {
		if (k)
			free(k->won);
		free(k);
		return sf_fail(e, -ENOMEM, "%s: out of memory listing the fold", root->view->path);
	}
	k->f = f;
	struct tx_member m;
	struct tx_str link;
	size_t plen;
	for (uint32_t r = 0; r < f->ix.n_rows; r++) {
		read_rows(f);
		if (!member_at(k, r, &m, &plen, &link))
			continue;
		uint64_t h;
		uint32_t *w = winner_of(k, k->path, plen, &h);
		if (!w) {
			(void)sf_ids_put(&k->winner, h, r);
			bit_set(k->won, r);
			continue;
		}
		struct tx_row prev;
		tx_row_get(&f->ix, *w, &prev);
		if (m.row.fid > prev.fid || (m.row.fid == prev.fid && m.row.off >= prev.off)) {
			bit_clear(k->won, *w);
			bit_set(k->won, r);
			*w = r;
		}
	}
	int rc = 0;
	/* the names the lookup hook gave out come first, as they were given */
	for (int hooked = 1; hooked >= 0; hooked--) {
		for (uint32_t r = 0; !rc && r < f->ix.n_rows; r++) {
			read_rows(f);
			if (bit_get(f->hooked_member, r) != hooked || !bit_get(k->won, r) ||
			    !member_at(k, r, &m, &plen, &link))
				continue;
			uint32_t aux = r;
			if (m.kind == TX_HARDLINK) {
				long target = link_target(k, link);
				aux = target < 0 ? TX_NO_ROW : (uint32_t)target;
				/* link_target reuses k->path */
				member_at(k, r, &m, &plen, &link);
			}
			struct sf_node *dir = root;
			size_t from = 0;
			for (;;) {
				const uint8_t *slash = memchr(k->path + from, '/', plen - from);
				if (!slash)
					break;
				size_t end = (size_t)(slash - k->path);
				if (!(dir = subdir(dir, k->path + from, end - from)))
					break;
				from = end + 1;
			}
			enum sf_kind kind = m.kind == TX_SYMLINK ? SF_LINK : SF_FILE;
			if (!dir || sf_dir_add_lazy(dir, k->path + from, plen - from, kind, r, aux))
				rc = sf_fail(e, -ENOMEM, "%s: out of memory listing the fold", root->view->path);
		}
	}
	sf_ids_free(&k->winner);
	free(k->won);
	free(k);
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
	return 0;
}
