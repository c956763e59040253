/* The view of a .tet file: a zarr v2 group (docs/design.md §3.9). Opening parses
 * the header, directory, index and footer; directories and file contents
 * are made on first use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_map.h"
#include "sf_name.h"
#include "tet.h"

/* Writes the chunk coordinates "i0.i1..." of a grid cell. */
static void cell_name(const struct tet_dataset *ds, uint64_t cell, char *out, size_t n)
{
	const struct tet_entry *en = &ds->file->entries[ds->cell[cell]];
	size_t k = 0;
	for (uint32_t d = 0; d < ds->ndim && k < n; d++)
		k += (size_t)snprintf(out + k, n - k, "%s%llu", d ? "." : "",
				      (unsigned long long)en->coords[d]);
}

/* A file whose content is one metadata document made on first read. */
static int add_doc(struct sf_node *dir, const char *name, sf_produce_fn fn, void *arg,
		   const char *what)
{
	struct sf_part *p = sf_view_part(dir->view, fn, arg, SF_SIZE_UNKNOWN, what);
	struct sf_node *f = p ? sf_dir_add_exact(dir, SF_FILE, name) : NULL;
	if (!f)
		return -ENOMEM;
	sf_file_set_whole(f, p);
	return 0;
}

static int add_cell_file(struct sf_node *dir, const char *name, sf_build_fn fn,
			 struct tet_dataset *ds, uint64_t cell)
{
	struct sf_node *f = sf_dir_add_exact(dir, SF_FILE, name);
	if (!f)
		return -ENOMEM;
	sf_file_set_build(f, fn, ds);
	f->aux = cell;
	return 0;
}

/* <dataset>/: .zarray, .zattrs and one chunk file per grid cell. */
static int populate_array(struct sf_node *dir, struct sf_err *e)
{
	struct tet_dataset *ds = dir->arg;
	int rc = add_doc(dir, ".zarray", tet_produce_zarray, ds, ds->entry);
	if (rc == 0)
		rc = add_doc(dir, ".zattrs", tet_produce_array_attrs, ds, ds->entry);
	for (uint64_t c = 0; rc == 0 && c < ds->nchunks; c++) {
		char name[TET_MAX_DIM * 21];
		cell_name(ds, c, name, sizeof name);
		rc = add_cell_file(dir, name, tet_build_chunk, ds, c);
	}
	return rc ? sf_fail(e, rc, "%s: %s: out of memory", ds->file->path, ds->entry) : 0;
}

/* .shardfs/tiles/<dataset>/: each stored tile, and the stored bytes of the
 * zstd ones as <coords>.zst. */
static int populate_ds_tiles(struct sf_node *dir, struct sf_err *e)
{
	struct tet_dataset *ds = dir->arg;
	int rc = 0;
	for (uint64_t c = 0; rc == 0 && c < ds->nchunks; c++) {
		char name[TET_MAX_DIM * 21 + 4];
		cell_name(ds, c, name, sizeof name - 4);
		rc = add_cell_file(dir, name, tet_build_tile, ds, c);
		if (rc == 0 && ds->file->entries[ds->cell[c]].codec == TET_ZSTD) {
			strcat(name, ".zst");
			rc = add_cell_file(dir, name, tet_build_stored, ds, c);
		}
	}
	return rc ? sf_fail(e, rc, "%s: tiles of %s: out of memory", ds->file->path, ds->entry) : 0;
}

static int populate_tiles(struct sf_node *dir, struct sf_err *e)
{
	struct tet_file *tf = dir->arg;
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		if (ds->problem)
			continue;
		struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, ds->entry);
		if (!d)
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->path);
		sf_dir_set_populate(d, populate_ds_tiles, ds);
	}
	return 0;
}

/* Reserved in the group besides the entries it already holds: zarr's other
 * metadata names, and every dataset's .npy twin (docs/design.md §3.9). */
static bool group_taken(struct sf_node *dir, const char *name)
{
	if (strcmp(name, ".zarray") == 0 || strcmp(name, ".zmetadata") == 0)
		return true;
	char twin[SF_NAME_MAX + 32];
	snprintf(twin, sizeof twin, "%s.npy", name);
	struct sf_node *hit = NULL;
	struct sf_err e;
	return sf_dir_find(dir, twin, &hit, &e) == 0 && hit;
}

static int add_dataset(struct sf_node *root, struct tet_dataset *ds)
{
	sf_dir_unique(root, ds->esc, ds->entry, group_taken);
	if (strlen(ds->entry) > TET_ENTRY_MAX) {
		/* "#<n>" took a name near the cut past it, and its .npy twin past
		 * 255 bytes: such a name takes its cut form (200 bytes, "~",
		 * hash) before "#<n>" is added, as a longer one does */
		char cut[SF_NAME_MAX + 1];
		sf_name_escape(ds->name, ds->name_len, 200, cut);
		sf_dir_unique(root, cut, ds->entry, group_taken);
	}
	struct sf_node *dir = sf_dir_add_exact(root, SF_DIR, ds->entry);
	if (!dir)
		return -ENOMEM;
	sf_dir_set_populate(dir, populate_array, ds);
	char npy[SF_NAME_MAX + 32];
	snprintf(npy, sizeof npy, "%s.npy", ds->entry);
	struct sf_node *f = sf_dir_add_exact(root, SF_FILE, npy);
	if (!f)
		return -ENOMEM;
	sf_file_set_build(f, tet_build_npy, ds);
	return 0;
}

static int build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e)
{
	struct tet_file *tf = state;
	struct sf_node *tiles = sf_dir_add_exact(meta, SF_DIR, "tiles");
	if (!tiles)
		return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
	sf_dir_set_populate(tiles, populate_tiles, tf);
	int rc = add_doc(v->root, ".zgroup", tet_produce_zgroup, tf, ".zgroup");
	if (rc == 0)
		rc = add_doc(v->root, ".zattrs", tet_produce_group_attrs, tf, ".zattrs");
	const json_t *meta_ds = json_object_get(tf->metadata, "datasets");
	for (uint32_t i = 0; rc == 0 && i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		ds->meta = json_object_getn(meta_ds, (const char *)ds->name, ds->name_len);
		if (ds->problem)
			sf_view_warn(v, "dataset %u (%s) not shown: %s", i, ds->esc, ds->problem);
		else
			rc = add_dataset(v->root, ds);
	}
	return rc ? sf_fail(e, rc, "%s: out of memory", v->path) : 0;
}

static void free_state(void *state)
{
	tet_free(state);
}

static int parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		 struct sf_err *e)
{
	struct tet_file *tf = NULL;
	int rc = tet_parse(a->map->data, a->map->size, a->path, &tf, e);
	if (rc)
		return rc;
	*state = tf;
	tf->path = v->path;
	if (tf->footer_error)
		sf_view_warn(v, "%s", tf->footer_error);
	if (tf->orphans)
		sf_view_warn(v, "%llu chunk index entries name no dataset",
			     (unsigned long long)tf->orphans);
	return 0;
}

const struct sf_format tet_format = {
	.name = "tet",
	.ext = ".tet",
	.check = tet_check,
	.parse = parse,
	.free_state = free_state,
	.info_txt = tet_info_txt,
	.info_json = tet_info_json,
	.verify = tet_verify,
	.build = build,
};
