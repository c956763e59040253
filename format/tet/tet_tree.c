/* The shape of a tet view (docs/formats/tet.md, Names and Coordinates):
 * which dataset names nest as zarr groups, every entry's unique name in its
 * group, and the coordinate arrays. Names are untrusted: every table here
 * is a hash, and a name's checks cost at most TET_MAX_DEPTH times its
 * length, so the work is linear in the names' bytes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_view_impl.h"
#include "tet.h"

/* Deeper names stay escaped: this bounds the prefix checks per name. */
#define TET_MAX_DEPTH 32
/* A coordinate array larger than this is left out (spill limit, spec §9.2). */
#define TET_COORD_MAX (16u << 20)

/* A name taken in a group (g NULL: a shown dataset's whole name). */
struct tet_name {
	const struct tet_group *g;
	struct tet_group *child;  /* the nested group of that name */
	uint64_t next;            /* the next #<n> to try with this name as a base */
	uint64_t bytes;           /* g NULL: at most its documents' bytes in a .zmetadata */
	bool entry;               /* an entry of g, not only a base's counter */
	size_t len;
	char name[];
};

struct name_key {
	const struct tet_group *g;
	const void *p;
	size_t len;
};

static uint64_t name_hash(const struct name_key *k)
{
	return XXH3_64bits_withSeed(k->p, k->len, (uint64_t)(uintptr_t)k->g);
}

static bool name_eq(const void *key, const void *val)
{
	const struct name_key *k = key;
	const struct tet_name *n = val;
	return n->g == k->g && n->len == k->len && memcmp(n->name, k->p, k->len) == 0;
}

static struct tet_name *name_get(struct tet_file *tf, const struct tet_group *g,
				 const void *p, size_t len)
{
	struct name_key k = { g, p, len };
	return sf_hash_get(&tf->names, name_hash(&k), name_eq, &k);
}

/* The record of a name, made (not yet an entry) when missing. */
static struct tet_name *name_put(struct tet_file *tf, const struct tet_group *g,
				 const void *p, size_t len)
{
	struct tet_name *n = name_get(tf, g, p, len);
	if (n)
		return n;
	struct name_key k = { g, p, len };
	n = calloc(1, sizeof *n + len + 1);
	if (!n)
		return NULL;
	n->g = g;
	n->next = 1;
	n->len = len;
	memcpy(n->name, p, len);
	if (sf_hash_put(&tf->names, name_hash(&k), n)) {
		free(n);
		return NULL;
	}
	return n;
}

static int mark(struct tet_file *tf, const struct tet_group *g, const char *name)
{
	struct tet_name *n = name_put(tf, g, name, strlen(name));
	if (!n)
		return -ENOMEM;
	n->entry = true;
	return 0;
}

static bool reserved(const void *p, size_t len)
{
	static const char *const names[] = { "", ".", "..", ".zgroup", ".zattrs", ".zarray",
					     ".zmetadata", ".shardfs" };
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
			return true;
	return false;
}

static bool is_entry(struct tet_file *tf, const struct tet_group *g, const char *name)
{
	const struct tet_name *n = name_get(tf, g, name, strlen(name));
	return n && n->entry;
}

/* A name is taken when it or its .npy twin is (docs/design.md §3.9). */
static bool taken(struct tet_file *tf, const struct tet_group *g, const char *name)
{
	char twin[SF_NAME_MAX + 32];
	snprintf(twin, sizeof twin, "%s.npy", name);
	return reserved(name, strlen(name)) || is_entry(tf, g, name) || is_entry(tf, g, twin);
}

/* `base` made unique in g with "#<n>", the smallest n that is free. The
 * base's record remembers where its search ended: names are only added, so
 * the numbers below stay taken, and k duplicates cost k tries, not k². */
static int unique(struct tet_file *tf, const struct tet_group *g, const char *base,
		  char out[SF_NAME_MAX + 16])
{
	if (!taken(tf, g, base)) {
		strcpy(out, base);
		return 0;
	}
	struct tet_name *b = name_put(tf, g, base, strlen(base));
	if (!b)
		return -ENOMEM;
	for (;; b->next++) {
		snprintf(out, SF_NAME_MAX + 16, "%s#%llu", base, (unsigned long long)b->next);
		if (!taken(tf, g, out))
			return 0;
	}
}

/* A name that is one entry as it is: what every component of a nesting
 * name, and a coordinate array's name, must be. */
static bool plain(const uint8_t *p, size_t len)
{
	if (len == 0 || len > TET_ENTRY_MAX || reserved(p, len))
		return false;
	for (size_t i = 0; i < len; i++)
		if (p[i] == '/' || p[i] == '%' || p[i] == '\\' || p[i] < 0x20 || p[i] == 0x7F)
			return false;
	return true;
}

/* The ends of a name's components when it nests, else 0 components. */
static uint32_t components(const uint8_t *p, size_t n, size_t ends[TET_MAX_DEPTH])
{
	if (!memchr(p, '/', n))
		return 0;
	uint32_t k = 0;
	for (size_t start = 0; start <= n; start = ends[k - 1] + 1) {
		const uint8_t *slash = memchr(p + start, '/', n - start);
		size_t end = slash ? (size_t)(slash - p) : n;
		if (k == TET_MAX_DEPTH || !plain(p + start, end - start))
			return 0;
		ends[k++] = end;
	}
	return k;
}

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *s = malloc(a + b + 2);
	if (s)
		snprintf(s, a + b + 2, "%s%s%s", dir, a ? "/" : "", name);
	return s;
}

static struct tet_group *group_new(struct tet_file *tf, struct tet_group *parent,
				   const char *name, size_t len)
{
	struct tet_group *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	g->file = tf;
	g->parent = parent;
	g->all_next = tf->groups;
	tf->groups = g;
	g->name = strndup(name, len);
	g->path = g->name && parent ? join(parent->path, g->name) : g->name ? strdup("") : NULL;
	if (!g->path)
		return NULL;
	if (parent) {
		*(parent->kids ? &parent->last_kid->next : &parent->kids) = g;
		parent->last_kid = g;
	}
	return g;
}

/* The group a nesting name's leaf goes in, made along the way. */
static int nest(struct tet_file *tf, struct tet_dataset *ds, const size_t *ends, uint32_t k)
{
	const char *p = (const char *)ds->name;
	struct tet_group *g = tf->root;
	size_t start = 0;
	for (uint32_t j = 0; j + 1 < k; j++) {
		struct tet_name *n = name_put(tf, g, p + start, ends[j] - start);
		if (!n)
			return -ENOMEM;
		if (!n->child && !(n->child = group_new(tf, g, p + start, ends[j] - start)))
			return -ENOMEM;
		n->entry = true;
		g = n->child;
		start = ends[j] + 1;
	}
	ds->group = g;
	ds->leaf_off = (uint32_t)start;
	return 0;
}

/* At most the pretty-printed bytes of footer metadata in a .zmetadata:
 * compact, times 4 for indenting at that depth. Measured once per
 * distinct name. */
static uint64_t doc_bytes(const json_t *meta)
{
	return meta ? 4 * (uint64_t)json_dumpb(meta, NULL, 0, JSON_COMPACT | JSON_ENSURE_ASCII) : 0;
}

/* A .zarray and the fixed part of a .zattrs (8 axes of 20-digit sizes,
 * phony dimension names), pretty-printed, are under this. */
#define TET_DOC_FIXED 2048

/* Charges a document of `bytes` to the .zmetadata of g and its parents. */
static void charge(struct tet_group *g, uint64_t bytes)
{
	for (; g; g = g->parent)
		g->zbytes += bytes;
}

/* A dataset's entry in its group: escaped (the identity for a nested leaf),
 * cut at 250 bytes, unique; "#<n>" may not take it past the cut, so such a
 * name takes its cut form (200 bytes, "~", hash) first. */
static int place(struct tet_file *tf, struct tet_group *g, struct tet_dataset *ds)
{
	const uint8_t *raw = ds->name + ds->leaf_off;
	size_t len = ds->name_len - ds->leaf_off;
	char esc[SF_NAME_MAX + 1];
	sf_name_escape(raw, len, TET_ENTRY_MAX, esc);
	int rc = unique(tf, g, esc, ds->entry);
	if (rc == 0 && strlen(ds->entry) > TET_ENTRY_MAX) {
		sf_name_escape(raw, len, 200, esc);
		rc = unique(tf, g, esc, ds->entry);
	}
	char twin[SF_NAME_MAX + 32];
	snprintf(twin, sizeof twin, "%s.npy", ds->entry);
	if (rc == 0)
		rc = mark(tf, g, ds->entry);
	if (rc == 0)
		rc = mark(tf, g, twin);
	if (rc == 0 && !(ds->path = join(g->path, ds->entry)))
		rc = -ENOMEM;
	ds->group = g;
	if (rc == 0)
		charge(g, name_get(tf, NULL, ds->name, ds->name_len)->bytes + TET_DOC_FIXED +
			   2 * (uint64_t)strlen(ds->path));
	*(g->ds ? &g->last_ds->next : &g->ds) = ds;
	g->last_ds = ds;
	return rc;
}

/* The dataset's dimension names: its footer dim_names when there is one
 * distinct name per axis, else phony_dim_<n> as netCDF and h5netcdf name
 * HDF5 dimensions without scales: one per distinct size in the group (an
 * axis whose size an earlier axis of the dataset has takes the next one),
 * numbered in file order. So datasets of a group never disagree on a
 * dimension's size, which would stop xarray opening the group. */
static int name_dims(struct tet_dataset *ds)
{
	const json_t *names = json_object_get(ds->meta, "dim_names");
	if (tet_dims_usable(names, ds->ndim)) {
		ds->dims = json_incref((json_t *)names);
		return 0;
	}
	struct tet_group *g = ds->group;
	if (!g->phony && !(g->phony = json_object()))
		return -ENOMEM;
	if (!(ds->dims = json_array()))
		return -ENOMEM;
	for (uint32_t d = 0; d < ds->ndim; d++) {
		uint32_t k = 0;
		for (uint32_t i = 0; i < d; i++)
			k += ds->shape[i] == ds->shape[d];
		char key[48], name[32];
		snprintf(key, sizeof key, "%llu:%u", (unsigned long long)ds->shape[d], k);
		json_t *n = json_object_get(g->phony, key);
		if (!n) {
			n = json_integer((json_int_t)json_object_size(g->phony));
			if (json_object_set_new(g->phony, key, n))
				return -ENOMEM;
		}
		snprintf(name, sizeof name, "phony_dim_%lld", (long long)json_integer_value(n));
		if (json_array_append_new(ds->dims, json_string(name)))
			return -ENOMEM;
	}
	return 0;
}

/* Offers the labels of each axis the footer labels to the dataset's group:
 * one label per position, under one of its dimension names. */
static int offer_coords(struct sf_view *v, struct tet_dataset *ds)
{
	const json_t *dims = json_object_get(ds->meta, "dim_names");
	const json_t *coords = json_object_get(ds->meta, "coords");
	if (!coords || !tet_dims_usable(dims, ds->ndim))
		return 0;
	struct tet_group *g = ds->group;
	if (!g->cand && !(g->cand = json_object()))
		return -ENOMEM;
	for (uint32_t d = 0; d < ds->ndim; d++) {
		const char *dim = json_string_value(json_array_get(dims, d));
		const json_t *labels = json_object_get(json_object_get(coords, dim), "labels");
		if (!dim || !labels)
			continue;
		if (json_array_size(labels) != ds->shape[d]) {
			sf_view_warn(v, "dataset %s: coordinate %s not shown: %zu labels for %llu positions",
				     ds->esc, dim, json_array_size(labels),
				     (unsigned long long)ds->shape[d]);
			continue;
		}
		const json_t *had = json_object_get(g->cand, dim);
		if (!had) {
			if (json_object_set(g->cand, dim, (json_t *)labels))
				return -ENOMEM;
		} else if (!json_is_null(had) && !json_equal(had, labels)) {
			sf_view_warn(v, "group /%s: coordinate %s not shown: datasets give it different labels",
				     g->path, dim);
			if (json_object_set_new(g->cand, dim, json_null()))
				return -ENOMEM;
		}
	}
	return 0;
}

/* Code points of a valid UTF-8 string (continuation bytes do not count). */
static uint64_t code_points(const json_t *s)
{
	const unsigned char *p = (const unsigned char *)json_string_value(s);
	size_t n = json_string_length(s);
	uint64_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += (p[i] & 0xC0) != 0x80;
	return k;
}

/* The group's coordinate arrays, from the labels its datasets agree on. */
static int make_coords(struct sf_view *v, struct tet_file *tf, struct tet_group *g)
{
	const char *dim;
	json_t *labels;
	json_object_foreach(g->cand, dim, labels) {
		if (json_is_null(labels))
			continue;
		if (!plain((const uint8_t *)dim, strlen(dim)) || taken(tf, g, dim)) {
			sf_view_warn(v, "group /%s: coordinate %s not shown: its name is taken or not a plain name",
				     g->path, dim);
			continue;
		}
		uint64_t width = 1;
		for (size_t i = 0; i < json_array_size(labels); i++) {
			uint64_t w = code_points(json_array_get(labels, i));
			width = w > width ? w : width;
		}
		uint64_t n = json_array_size(labels);
		if (width > TET_COORD_MAX / 4 / (n ? n : 1)) {
			sf_view_warn(v, "group /%s: coordinate %s not shown: larger than %u bytes",
				     g->path, dim, TET_COORD_MAX);
			continue;
		}
		struct tet_coord *c = calloc(1, sizeof *c);
		if (!c)
			return -ENOMEM;
		c->next = g->coords;
		g->coords = c;
		c->group = g;
		c->labels = labels;
		c->n = n;
		c->width = width;
		if (!(c->name = strdup(dim)) || !(c->path = join(g->path, dim)) || mark(tf, g, dim))
			return -ENOMEM;
		charge(g, TET_DOC_FIXED + 2 * strlen(c->path));
	}
	return 0;
}

/* Groups first (all of them), then each dataset's entry in file order,
 * then the coordinates: so a group's name never depends on a later
 * dataset, and entries are numbered as docs/formats/tet.md says. */
static int build(struct sf_view *v, struct tet_file *tf)
{
	if (!(tf->root = group_new(tf, NULL, "", 0)))
		return -ENOMEM;
	charge(tf->root, doc_bytes(tf->history) + doc_bytes(tf->metadata) + TET_DOC_FIXED +
			 (tf->footer_error ? 2 * strlen(tf->footer_error) : 0));
	const json_t *meta_ds = json_object_get(tf->metadata, "datasets");
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		ds->meta = json_object_getn(meta_ds, (const char *)ds->name, ds->name_len);
		struct tet_name *n = ds->problem ? NULL : name_put(tf, NULL, ds->name, ds->name_len);
		if (!ds->problem && !n)
			return -ENOMEM;
		if (n && !n->entry)
			n->bytes = doc_bytes(ds->meta);
		if (n)
			n->entry = true;
	}
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		size_t ends[TET_MAX_DEPTH];
		uint32_t k = ds->problem ? 0 : components(ds->name, ds->name_len, ends);
		bool prefix_is_dataset = false;
		for (uint32_t j = 0; j + 1 < k && !prefix_is_dataset; j++) {
			const struct tet_name *n = name_get(tf, NULL, ds->name, ends[j]);
			prefix_is_dataset = n && n->entry;
		}
		if (k && !prefix_is_dataset && nest(tf, ds, ends, k))
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		int rc = ds->problem ? 0 : place(tf, ds->group ? ds->group : tf->root, ds);
		if (rc == 0 && !ds->problem)
			rc = name_dims(ds);
		if (rc == 0 && !ds->problem)
			rc = offer_coords(v, ds);
		if (rc)
			return rc;
	}
	for (struct tet_group *g = tf->groups; g; g = g->all_next) {
		int rc = g->cand ? make_coords(v, tf, g) : 0;
		if (rc)
			return rc;
	}
	return 0;
}

int tet_tree_build(struct sf_view *v, struct tet_file *tf, struct sf_err *e)
{
	int rc = build(v, tf);
	return rc ? sf_fail(e, rc, "%s: out of memory", v->path) : 0;
}

void tet_tree_free(struct tet_file *tf)
{
	size_t pos = 0;
	void *n;
	while ((n = sf_hash_next(&tf->names, &pos)))
		free(n);
	sf_hash_free(&tf->names);
	while (tf->groups) {
		struct tet_group *g = tf->groups;
		tf->groups = g->all_next;
		while (g->coords) {
			struct tet_coord *c = g->coords;
			g->coords = c->next;
			free(c->name);
			free(c->path);
			free(c);
		}
		json_decref(g->cand);
		json_decref(g->phony);
		free(g->name);
		free(g->path);
		free(g);
	}
	for (uint32_t i = 0; tf->ds && i < tf->dataset_count; i++) {
		free(tf->ds[i].path);
		json_decref(tf->ds[i].dims);
	}
}
