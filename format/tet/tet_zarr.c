/* The zarr v2 metadata documents of the view (docs/design.md §3.9): .zgroup,
 * the root's .zattrs (the footer), per array .zarray and .zattrs, per
 * coordinate array the same, and per group .zmetadata gathering them all.
 * Every file and .zmetadata are made by tet_doc_json, so they agree. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "tet.h"
#include "sf_view_impl.h"

static json_t *zgroup_json(void)
{
	return json_pack("{s:i}", "zarr_format", 2);
}

/* The footer as stored (spill resolved), or why it could not be read. */
static json_t *group_attrs_json(const struct tet_file *tf)
{
	json_t *j = json_object();
	if (j && tf->footer_error) {
		json_object_set_new(j, "footer_error", json_string(tf->footer_error));
	} else if (j && tf->footer_json) {
		json_object_set_new(j, "history", tf->history ? json_copy(tf->history) : json_array());
		json_object_set_new(j, "metadata", tf->metadata ? json_copy(tf->metadata) : json_object());
	}
	return j;
}

/* fill_value null: xarray would mask a stored fill value as _FillValue,
 * and every chunk file exists, so zarr never needs one. */
static json_t *zarray_json(json_t *chunks, const char *dtype, json_t *shape)
{
	return json_pack("{s:o, s:n, s:s, s:s, s:n, s:n, s:s, s:o, s:i}",
			 "chunks", chunks,
			 "compressor",
			 "dimension_separator", ".",
			 "dtype", dtype,
			 "fill_value",
			 "filters",
			 "order", "C",
			 "shape", shape,
			 "zarr_format", 2);
}

bool tet_dims_usable(const json_t *dims, uint32_t ndim)
{
	if (!json_is_array(dims) || json_array_size(dims) != ndim)
		return false;
	for (size_t i = 0; i < ndim; i++) {
		if (!json_is_string(json_array_get(dims, i)))
			return false;
		for (size_t k = 0; k < i; k++)
			if (json_equal(json_array_get(dims, i), json_array_get(dims, k)))
				return false;
	}
	return true;
}

static json_t *array_attrs_json(const struct tet_dataset *ds)
{
	json_t *attrs = json_object_get(ds->meta, "attrs");
	json_t *j = json_is_object(attrs) ? json_deep_copy(attrs) : json_object();
	if (j && json_object_set(j, "_ARRAY_DIMENSIONS", ds->dims)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static json_t *coord_zarray_json(const struct tet_coord *c)
{
	char dtype[32];
	snprintf(dtype, sizeof dtype, "<U%llu", (unsigned long long)c->width);
	uint64_t chunk = c->n ? c->n : 1;
	return zarray_json(tet_json_u64s(&chunk, 1), dtype, tet_json_u64s(&c->n, 1));
}

static json_t *doc_json(enum tet_doc kind, const void *arg);

/* Adds KEY -> document to m; `key` is the path prefix, `name` the file. */
static int put(json_t *m, struct sf_str *key, const char *name, enum tet_doc kind, const void *arg)
{
	size_t at = key->len;
	sf_str_add(key, name, strlen(name));
	sf_str_addc(key, '\0');
	json_t *d = doc_json(kind, arg);
	int rc = d && !key->oom ? json_object_set_new(m, (const char *)key->p, d) : (json_decref(d), -1);
	key->len = at;
	return rc ? -ENOMEM : 0;
}

/* An array's two documents under "<name>/". */
static int put_array(json_t *m, struct sf_str *key, const char *name, enum tet_doc zarray,
		     enum tet_doc attrs, const void *arg)
{
	size_t at = key->len;
	sf_str_addf(key, "%s/", name);
	int rc = put(m, key, ".zarray", zarray, arg);
	if (rc == 0)
		rc = put(m, key, ".zattrs", attrs, arg);
	key->len = at;
	return rc;
}

/* Every document under g, keyed by its path after `key` (g's prefix). */
static int gather(json_t *m, const struct tet_group *g, struct sf_str *key)
{
	int rc = put(m, key, ".zgroup", TET_ZGROUP, g);
	if (rc == 0 && !g->parent)
		rc = put(m, key, ".zattrs", TET_GROUP_ATTRS, g->file);
	for (const struct tet_dataset *ds = g->ds; rc == 0 && ds; ds = ds->next)
		rc = put_array(m, key, ds->entry, TET_ZARRAY, TET_ARRAY_ATTRS, ds);
	for (const struct tet_coord *c = g->coords; rc == 0 && c; c = c->next)
		rc = put_array(m, key, c->name, TET_COORD_ZARRAY, TET_COORD_ATTRS, c);
	size_t at = key->len;
	for (const struct tet_group *k = g->kids; rc == 0 && k; k = k->next) {
		sf_str_addf(key, "%s/", k->name);
		rc = gather(m, k, key);
		key->len = at;
	}
	return rc;
}

static json_t *zmetadata_json(const struct tet_group *g)
{
	json_t *m = json_object();
	struct sf_str key = { 0 };
	if (m && gather(m, g, &key)) {
		json_decref(m);
		m = NULL;
	}
	sf_str_free(&key);
	return m ? json_pack("{s:o, s:i}", "metadata", m, "zarr_consolidated_format", 1) : NULL;
}

static json_t *doc_json(enum tet_doc kind, const void *arg)
{
	switch (kind) {
	case TET_ZGROUP:
		return zgroup_json();
	case TET_GROUP_ATTRS:
		return group_attrs_json(arg);
	case TET_ZARRAY: {
		const struct tet_dataset *ds = arg;
		return zarray_json(tet_json_u64s(ds->zchunk, ds->ndim), ds->descr,
				   tet_json_u64s(ds->shape, ds->ndim));
	}
	case TET_ARRAY_ATTRS:
		return array_attrs_json(arg);
	case TET_COORD_ZARRAY:
		return coord_zarray_json(arg);
	case TET_COORD_ATTRS:
		return json_pack("{s:[s]}", "_ARRAY_DIMENSIONS", ((const struct tet_coord *)arg)->name);
	case TET_ZMETADATA:
		return zmetadata_json(arg);
	}
	return NULL;
}

int tet_produce_doc(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_group *g = p->aux == TET_ZMETADATA ? p->arg : NULL;
	if (g && cache->limit && g->zbytes > cache->limit)
		return sf_fail(e, -EIO, "%s: %s/.zmetadata: up to %llu bytes, past the cache limit of %llu",
			       p->view->path, g->path, (unsigned long long)g->zbytes,
			       (unsigned long long)cache->limit);
	json_t *j = doc_json((enum tet_doc)p->aux, p->arg);
	struct sf_buf *b = j ? sf_json_pretty_ascii(j) : NULL;
	json_decref(j);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}

/* One UTF-8 sequence of a valid string (jansson checked it) as a code point. */
static uint32_t next_code_point(const unsigned char **pp)
{
	const unsigned char *p = *pp;
	uint32_t c = *p++;
	int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
	c &= more ? 0x3F >> more : 0x7F;
	while (more--)
		c = c << 6 | (*p++ & 0x3F);
	*pp = p;
	return c;
}

/* zarr's fixed-width unicode: width UTF-32LE code points per label, zero-padded. */
int tet_produce_coord_chunk(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_coord *c = p->arg;
	struct sf_buf *b = sf_buf_new(c->n * c->width * 4);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	for (uint64_t i = 0; i < c->n; i++) {
		const json_t *s = json_array_get(c->labels, i);
		const unsigned char *q = (const unsigned char *)json_string_value(s);
		const unsigned char *end = q + json_string_length(s);
		uint8_t *dst = b->data + i * c->width * 4;
		while (q < end) {
			uint32_t cp = next_code_point(&q);
			for (int k = 0; k < 4; k++)
				*dst++ = (uint8_t)(cp >> 8 * k);
		}
	}
	*out = b;
	return 0;
}
