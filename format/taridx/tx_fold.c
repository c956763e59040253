/* The fold view F/ (docs/design.md §3.7): opening F.taridx with its shards, the
 * flat-name lookup through the index, the lazy listing built from the tar
 * headers, and .shardfs/rows/ (samples.jsonl is tx_samples.c's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_name.h"
#include "taridx.h"

static bool bit_get(const uint8_t *bits, uint64_t i)
{
	return bits[i / 8] >> (i % 8) & 1;
}

static void bit_set(uint8_t *bits, uint64_t i)
{
	bits[i / 8] |= (uint8_t)(1u << (i % 8));
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

static struct sf_node *add_row_node(struct tx_fold *f, uint64_t r)
{
	char name[24];
	snprintf(name, sizeof name, "%llu", (unsigned long long)r);
	struct sf_node *n = sf_dir_add_exact(f->rows_dir, SF_FILE, name);
	if (n && set_payload(f, n, r))
		return NULL;
	return n;
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
	if (!(*out = add_row_node(f, r)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", dir->view->path);
	bit_set(f->hooked_row, r);
	return 0;
}

static int rows_populate(struct sf_node *dir, struct sf_err *e)
{
	struct tx_fold *f = dir->view->state;
	for (uint64_t r = 0; r < f->ix.n_rows; r++)
		if (!bit_get(f->hooked_row, r) && !add_row_node(f, r))
			return sf_fail(e, -ENOMEM, "%s: out of memory", dir->view->path);
	return 0;
}

/* ---- members ------------------------------------------------------------ */

/* Adds member row r, a file or symlink, as `base` in dir. Hard links get
 * the payload of `target` (a file row), or are broken when it is absent. */
static struct sf_node *add_member(struct tx_fold *f, struct sf_node *dir, const uint8_t *base,
				  size_t blen, uint32_t r, const struct tx_member *m,
				  struct tx_str link, long target)
{
	if (m->kind == TX_SYMLINK) {
		char *t = strndup((const char *)link.p, link.len);
		struct sf_node *n = t ? sf_dir_add_link(dir, base, blen, t) : NULL;
		free(t);
		return n;
	}
	struct sf_node *n = sf_dir_add_file(dir, base, blen);
	if (!n)
		return NULL;
	int rc;
	if (m->kind == TX_FILE) {
		rc = set_payload(f, n, r);
	} else if (target >= 0) {
		rc = set_payload(f, n, (uint64_t)target);
	} else {
		char why[400];
		snprintf(why, sizeof why, "%s: row %u: hard link to %.*s, which is not a member",
			 f->view->path, r, (int)(link.len < 200 ? link.len : 200), (const char *)link.p);
		rc = sf_file_set_broken(n, 0, why);
	}
	return rc ? NULL : n;
}

struct flat_probe {
	const struct tx_fold *f;
	const uint8_t *raw;
	size_t len;
	long best;
	struct tx_member m;
	struct tx_str link;
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
		p->link = link;
	}
	return false;
}

static int populate_root(struct sf_node *root, struct sf_err *e);

int tx_fold_lookup(struct tx_fold *f, struct sf_err *e)
{
	pthread_mutex_lock(&f->lookup_lock);
	int rc = tx_lookup_build(&f->ix, e);
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
			*out = add_member(f, root, raw, n, (uint32_t)p.best, &p.m, p.link, -1);
			if (!*out)
				return sf_fail(e, -ENOMEM, "%s: out of memory", root->view->path);
			bit_set(f->hooked_member, (uint64_t)p.best);
			return 0;
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

/* Full paths of members mapped to the row that shows each (the last one in
 * fid, offset order), built for one listing and dropped after it. */
struct winners {
	struct slot {
		uint64_t hash;
		uint32_t row1; /* row + 1; 0 = free */
	} *slot;
	size_t mask;
};

struct walk {
	struct tx_fold *f;
	struct winners w;
	/* the path being listed, the path of a slot it is compared with, and
	 * the path a hard link names */
	uint8_t path[TX_PATH_MAX], other[TX_PATH_MAX], target[TX_PATH_MAX];
};

static bool same_path(struct walk *k, uint32_t r, const uint8_t *path, size_t len)
{
	struct tx_member m;
	struct tx_str link;
	size_t olen;
	tx_member_check(k->f, r, &m);
	return !tx_member_names(k->f, r, &m, k->other, TX_PATH_MAX, &olen, &link) && olen == len &&
	       memcmp(k->other, path, len) == 0;
}

/* The slot of `path`, or the free slot where it would go. */
static struct slot *winner_slot(struct walk *k, const uint8_t *path, size_t len)
{
	uint64_t h = XXH64(path, len, 0);
	for (size_t i = h & k->w.mask;; i = (i + 1) & k->w.mask) {
		struct slot *s = &k->w.slot[i];
		if (!s->row1 || (s->hash == h && same_path(k, s->row1 - 1, path, len))) {
			s->hash = h;
			return s;
		}
	}
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
static struct sf_node *subdir(struct sf_node *dir, const uint8_t *raw, size_t len, struct sf_err *e)
{
	char esc[SF_NAME_MAX + 1], cand[SF_NAME_MAX + 32];
	sf_name_escape(raw, len, SF_NAME_MAX, esc);
	for (unsigned long i = 0;; i++) {
		if (i)
			snprintf(cand, sizeof cand, "%s#%lu", esc, i);
		else
			strcpy(cand, esc);
		struct sf_node *hit = NULL;
		if (strcmp(cand, ".") && strcmp(cand, "..") && cand[0] &&
		    sf_dir_find(dir, cand, &hit, e))
			return NULL;
		if (hit && hit->kind == SF_DIR)
			return hit;
		if (!hit && cand[0] && strcmp(cand, ".") && strcmp(cand, ".."))
			return sf_dir_add_dir(dir, raw, len);
	}
}

/* The row a hard link ends at (following links to links), or -1. */
static long link_target(struct walk *k, struct tx_str link)
{
	for (int depth = 0; depth < 8; depth++) {
		size_t tlen = 0;
		if (tx_path_append(k->target, TX_PATH_MAX, &tlen, link.p, link.len) || !tlen)
			return -1;
		struct slot *s = winner_slot(k, k->target, tlen);
		if (!s->row1)
			return -1;
		struct tx_member m;
		size_t plen;
		if (!member_at(k, s->row1 - 1, &m, &plen, &link))
			return -1;
		if (m.kind == TX_FILE)
			return (long)(s->row1 - 1);
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
	size_t cap = 16;
	while (cap < 2 * f->ix.n_rows)
		cap *= 2;
	if (k)
		k->w.slot = calloc(cap, sizeof *k->w.slot);
	if (!k || !k->w.slot) {
		free(k);
		return sf_fail(e, -ENOMEM, "%s: out of memory listing the fold", root->view->path);
	}
	k->f = f;
	k->w.mask = cap - 1;
	struct tx_member m;
	struct tx_str link;
	size_t plen;
	for (uint32_t r = 0; r < f->ix.n_rows; r++) {
		if (!member_at(k, r, &m, &plen, &link))
			continue;
		struct slot *s = winner_slot(k, k->path, plen);
		struct tx_row prev;
		if (s->row1)
			tx_row_get(&f->ix, s->row1 - 1, &prev);
		if (!s->row1 || m.row.fid > prev.fid || (m.row.fid == prev.fid && m.row.off >= prev.off))
			s->row1 = r + 1;
	}
	int rc = 0;
	for (uint32_t r = 0; !rc && r < f->ix.n_rows; r++) {
		if (bit_get(f->hooked_member, r) || !member_at(k, r, &m, &plen, &link) ||
		    winner_slot(k, k->path, plen)->row1 != r + 1)
			continue;
		long target = m.kind == TX_HARDLINK ? link_target(k, link) : -1;
		/* link_target reuses k->path */
		if (m.kind == TX_HARDLINK)
			member_at(k, r, &m, &plen, &link);
		struct sf_node *dir = root;
		size_t from = 0;
		for (;;) {
			const uint8_t *slash = memchr(k->path + from, '/', plen - from);
			if (!slash)
				break;
			size_t end = (size_t)(slash - k->path);
			if (!(dir = subdir(dir, k->path + from, end - from, e)))
				break;
			from = end + 1;
		}
		if (!dir || !add_member(f, dir, k->path + from, plen - from, r, &m, link, target))
			rc = sf_fail(e, -ENOMEM, "%s: out of memory listing the fold", root->view->path);
	}
	free(k->w.slot);
	free(k);
	return rc;
}

/* ---- opening ------------------------------------------------------------ */

static void fold_free(void *state)
{
	struct tx_fold *f = state;
	if (!f)
		return;
	tx_index_free(&f->ix);
	pthread_mutex_destroy(&f->lookup_lock);
	tx_shards_free(f->shards, f->nshards);
	tx_samples_free(f->samples);
	free(f->hooked_member);
	free(f->hooked_row);
	free(f->fold);
	free(f);
}

static int map_shards(struct tx_fold *f, const struct sf_open_args *a, struct sf_err *e)
{
	int rc = tx_shards_find(f->fold, a->siblings, a->nsiblings, &f->shards, &f->nshards);
	if (rc)
		return sf_fail(e, rc, "%s: out of memory", a->path);
	if (!f->nshards)
		sf_view_warn(f->view, "%s: no shards %s_*.tar beside the index", a->path, f->fold);
	for (size_t i = 0; i < f->nshards; i++) {
		struct tx_shard *s = &f->shards[i];
		struct sf_err me = { { 0 } };
		if (sf_map_beside(a, s->name, &s->map, &me) == 0) {
			if ((rc = sf_view_hold_map(f->view, s->map)))
				return sf_fail(e, rc, "%s: out of memory", a->path);
			continue;
		}
		s->map = NULL;
		if (!(s->problem = strdup(me.msg)))
			return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
		sf_view_warn(f->view, "%s: shard %zu (%s): %s", a->path, i, s->name, me.msg);
	}
	return 0;
}

static int taridx_open(const struct sf_open_args *a, struct sf_view **out, struct sf_err *e)
{
	size_t nlen = strlen(a->name);
	struct tx_fold *f = calloc(1, sizeof *f);
	if (!f || !(f->fold = strndup(a->name, nlen - strlen(".taridx")))) {
		free(f);
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	}
	pthread_mutex_init(&f->lookup_lock, NULL);
	int rc = tx_index_parse(a->map->data, a->map->size, a->path, &f->ix, e);
	if (rc) {
		fold_free(f);
		return rc;
	}
	struct sf_view *v = sf_view_new(&sf_fmt_taridx, a->path);
	size_t nbits = f->ix.n_rows / 8 + 1;
	f->hooked_member = calloc(nbits, 1);
	f->hooked_row = calloc(nbits, 1);
	if (!v || !f->hooked_member || !f->hooked_row) {
		sf_view_unref(v);
		fold_free(f);
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	}
	f->unkeyed = -1;
	v->state = f;
	v->free_state = fold_free;
	f->view = v;
	if ((rc = sf_view_hold_map(v, a->map)) || (rc = map_shards(f, a, e)))
		goto fail;
	struct sf_node *meta = sf_view_add_meta(v, tx_info_txt, tx_info_json, tx_verify, f);
	if (!meta || !(f->rows_dir = sf_dir_add_exact(meta, SF_DIR, "rows")) ||
	    tx_samples_add(f, meta)) {
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
		goto fail;
	}
	sf_dir_set_populate(f->rows_dir, rows_populate, f);
	sf_dir_set_lookup(f->rows_dir, rows_lookup);
	sf_dir_set_populate(v->root, populate_root, f);
	sf_dir_set_lookup(v->root, root_lookup);
	*out = v;
	return 0;
fail:
	if (!e->msg[0])
		sf_fail(e, rc, "%s: out of memory", a->path);
	sf_view_unref(v);
	return rc;
}

const struct sf_format sf_fmt_taridx = {
	.name = "taridx",
	.ext = ".taridx",
	/* fids are ranks among the shards beside the index: a shard added or
	 * removed changes what every later row points at */
	.uses_siblings = true,
	.open = taridx_open,
};
