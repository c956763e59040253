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
#include "sf_view_impl.h"

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
static int add_doc(struct sf_node *dir, const char *name, enum tet_doc kind, void *arg,
		   const char *what)
{
	struct sf_part *p = sf_view_part(dir->view, tet_produce_doc, arg, SF_SIZE_UNKNOWN, what);
	struct sf_node *f = p ? sf_dir_add_exact(dir, SF_FILE, name) : NULL;
	if (!f)
		return -ENOMEM;
	p->aux = kind;
	sf_file_set_whole(f, p);
	return 0;
}

/* A grid cell's files are on-demand entries (about 30 bytes each, a node
 * made when looked up): a dataset may have millions of tiles. Entry key
 * `key`, aux the cell. */
static int add_cell_file(struct sf_node *dir, const char *name, uint64_t key, uint64_t cell)
{
	if (key >= UINT32_MAX)
		return -EOVERFLOW;
	return sf_dir_add_lazy(dir, name, strlen(name), SF_FILE, (uint32_t)key, (uint32_t)cell);
}

/* <dataset>/<coords>: entry key is the cell */
static int make_chunk(struct sf_node *n, struct sf_err *e)
{
	(void)e;
	sf_file_set_build(n, tet_build_chunk, n->parent->arg);
	return 0;
}

/* .shardfs/tiles/<dataset>/<coords>[.zst]: key 2 * cell, + 1 for .zst */
static int make_tile(struct sf_node *n, struct sf_err *e)
{
	(void)e;
	sf_file_set_build(n, n->key & 1 ? tet_build_stored : tet_build_tile, n->parent->arg);
	return 0;
}

static int cells_failed(const struct tet_dataset *ds, const char *what, int rc, struct sf_err *e)
{
	return sf_fail(e, rc == -EOVERFLOW ? -EIO : rc, "%s: %s%s: %s", ds->file->path, what, ds->path,
		       rc == -EOVERFLOW ? "too many tiles" : "out of memory");
}

/* <dataset>/: .zarray, .zattrs and one chunk file per grid cell. */
static int populate_array(struct sf_node *dir, struct sf_err *e)
{
	struct tet_dataset *ds = dir->arg;
	int rc = add_doc(dir, ".zarray", TET_ZARRAY, ds, ds->path);
	if (rc == 0)
		rc = add_doc(dir, ".zattrs", TET_ARRAY_ATTRS, ds, ds->path);
	for (uint64_t c = 0; rc == 0 && c < ds->nchunks; c++) {
		char name[TET_MAX_DIM * 21];
		cell_name(ds, c, name, sizeof name);
		rc = add_cell_file(dir, name, c, c);
	}
	return rc ? cells_failed(ds, "", rc, e) : 0;
}

/* <dim>/: a coordinate array's .zarray, .zattrs and its one chunk. */
static int populate_coord(struct sf_node *dir, struct sf_err *e)
{
	struct tet_coord *c = dir->arg;
	int rc = add_doc(dir, ".zarray", TET_COORD_ZARRAY, c, c->path);
	if (rc == 0)
		rc = add_doc(dir, ".zattrs", TET_COORD_ATTRS, c, c->path);
	if (rc == 0 && c->n) {
		struct sf_part *p = sf_view_part(dir->view, tet_produce_coord_chunk, c,
						 c->n * c->width * 4, c->path);
		struct sf_node *f = p ? sf_dir_add_exact(dir, SF_FILE, "0") : NULL;
		if (f)
			sf_file_set_whole(f, p);
		rc = f ? 0 : -ENOMEM;
	}
	return rc ? sf_fail(e, rc, "%s: %s: out of memory", dir->view->path, c->path) : 0;
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
		rc = add_cell_file(dir, name, 2 * c, c);
		if (rc == 0 && ds->file->entries[ds->cell[c]].codec == TET_ZSTD) {
			strcat(name, ".zst");
			rc = add_cell_file(dir, name, 2 * c + 1, c);
		}
	}
	return rc ? cells_failed(ds, "tiles of ", rc, e) : 0;
}

/* .shardfs/tiles/<group>/: the group's datasets and nested groups. */
static int populate_tiles(struct sf_node *dir, struct sf_err *e)
{
	struct tet_group *g = dir->arg;
	for (struct tet_group *k = g->kids; k; k = k->next) {
		struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, k->name);
		if (!d)
			return sf_fail(e, -ENOMEM, "%s: out of memory", dir->view->path);
		sf_dir_set_populate(d, populate_tiles, k);
	}
	for (struct tet_dataset *ds = g->ds; ds; ds = ds->next) {
		struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, ds->entry);
		if (!d || sf_dir_set_lazy(d, make_tile))
			return sf_fail(e, -ENOMEM, "%s: out of memory", dir->view->path);
		sf_dir_set_populate(d, populate_ds_tiles, ds);
	}
	return 0;
}

static int add_dataset(struct sf_node *dir, struct tet_dataset *ds)
{
	struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, ds->entry);
	if (!d || sf_dir_set_lazy(d, make_chunk))
		return -ENOMEM;
	sf_dir_set_populate(d, populate_array, ds);
	char npy[SF_NAME_MAX + 32];
	snprintf(npy, sizeof npy, "%s.npy", ds->entry);
	struct sf_node *f = sf_dir_add_exact(dir, SF_FILE, npy);
	if (!f)
		return -ENOMEM;
	sf_file_set_build(f, tet_build_npy, ds);
	return 0;
}

static int populate_group(struct sf_node *dir, struct sf_err *e);

/* A group's entries (names from tet_tree.c): metadata, nested groups made
 * on first use, arrays with their .npy twins, coordinate arrays. */
static int fill_group(struct sf_node *dir, struct tet_group *g)
{
	const char *what = g->parent ? g->path : ".";
	int rc = add_doc(dir, ".zgroup", TET_ZGROUP, g, what);
	if (rc == 0 && !g->parent)
		rc = add_doc(dir, ".zattrs", TET_GROUP_ATTRS, g->file, ".zattrs");
	if (rc == 0)
		rc = add_doc(dir, ".zmetadata", TET_ZMETADATA, g, what);
	for (struct tet_group *k = g->kids; rc == 0 && k; k = k->next) {
		struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, k->name);
		if (d)
			sf_dir_set_populate(d, populate_group, k);
		rc = d ? 0 : -ENOMEM;
	}
	for (struct tet_dataset *ds = g->ds; rc == 0 && ds; ds = ds->next)
		rc = add_dataset(dir, ds);
	for (struct tet_coord *c = g->coords; rc == 0 && c; c = c->next) {
		struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, c->name);
		if (d)
			sf_dir_set_populate(d, populate_coord, c);
		rc = d ? 0 : -ENOMEM;
	}
	return rc;
}

static int populate_group(struct sf_node *dir, struct sf_err *e)
{
	struct tet_group *g = dir->arg;
	int rc = fill_group(dir, g);
	return rc ? sf_fail(e, rc, "%s: %s: out of memory", dir->view->path, g->path) : 0;
}

static int build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e)
{
	struct tet_file *tf = state;
	for (uint32_t i = 0; i < tf->dataset_count; i++)
		if (tf->ds[i].problem)
			sf_view_warn(v, "dataset %u (%s) not shown: %s", i, tf->ds[i].esc,
				     tf->ds[i].problem);
	int rc = tet_tree_build(v, tf, e);
	if (rc)
		return rc;
	struct sf_node *tiles = sf_dir_add_exact(meta, SF_DIR, "tiles");
	if (!tiles)
		return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
	sf_dir_set_populate(tiles, populate_tiles, tf->root);
	rc = fill_group(v->root, tf->root);
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
	int rc = tet_parse(a->map, a->path, &tf, e);
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
