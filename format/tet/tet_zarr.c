/* The zarr v2 metadata documents of the view (docs/design.md §3.9): .zgroup, the
 * group's .zattrs (the footer), and per dataset .zarray and .zattrs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sf_json.h"
#include "tet.h"

/* Pretty-prints j into *out and drops j. */
static int emit(const struct sf_part *p, json_t *j, struct sf_buf **out, struct sf_err *e)
{
	struct sf_buf *b = j ? sf_json_pretty(j) : NULL;
	json_decref(j);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}

int tet_produce_zgroup(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return emit(p, json_pack("{s:i}", "zarr_format", 2), out, e);
}

/* The footer as stored (spill resolved), or why it could not be read. */
int tet_produce_group_attrs(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_file *tf = p->arg;
	json_t *j = json_object();
	if (j && tf->footer_error) {
		json_object_set_new(j, "footer_error", json_string(tf->footer_error));
	} else if (j && tf->footer_json) {
		json_object_set_new(j, "history", tf->history ? json_copy(tf->history) : json_array());
		json_object_set_new(j, "metadata", tf->metadata ? json_copy(tf->metadata) : json_object());
	}
	return emit(p, j, out, e);
}

int tet_produce_zarray(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_dataset *ds = p->arg;
	json_t *j = json_pack("{s:o, s:n, s:s, s:s, s:i, s:n, s:s, s:o, s:i}",
			      "chunks", tet_json_u64s(ds->zchunk, ds->ndim),
			      "compressor",
			      "dimension_separator", ".",
			      "dtype", ds->descr,
			      "fill_value", 0,
			      "filters",
			      "order", "C",
			      "shape", tet_json_u64s(ds->shape, ds->ndim),
			      "zarr_format", 2);
	return emit(p, j, out, e);
}

/* Footer dim_names usable as xarray dimensions: one distinct string per
 * axis. */
static bool dims_usable(const json_t *dims, uint32_t ndim)
{
	if (!json_is_array(dims) || json_array_size(dims) != ndim)
		return false;
	for (size_t i = 0; i < ndim; i++)
		for (size_t k = 0; k < i; k++)
			if (json_equal(json_array_get(dims, i), json_array_get(dims, k)))
				return false;
	return true;
}

int tet_produce_array_attrs(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_dataset *ds = p->arg;
	json_t *attrs = json_object_get(ds->meta, "attrs");
	json_t *dims = json_object_get(ds->meta, "dim_names");
	json_t *j = attrs ? json_deep_copy(attrs) : json_object();
	if (!j)
		return emit(p, NULL, out, e);
	if (dims_usable(dims, ds->ndim)) {
		json_object_set(j, "_ARRAY_DIMENSIONS", dims);
	} else {
		json_t *a = json_array();
		for (uint32_t d = 0; a && d < ds->ndim; d++) {
			char name[16];
			snprintf(name, sizeof name, "dim_%u", d);
			json_array_append_new(a, json_string(name));
		}
		json_object_set_new(j, "_ARRAY_DIMENSIONS", a);
	}
	return emit(p, j, out, e);
}
