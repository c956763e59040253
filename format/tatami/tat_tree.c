/* The view of a .tatami file (docs/design.md §3.6): columns/, rowgroups/, rows.jsonl
 * and blobs/, every directory populated on first use and every file built
 * on first use, all slicing the same decoded chunk parts. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tat.h"
#include "sf_view_impl.h"

enum view_kind { V_VALID, V_VALUES, V_NPY, V_OFFSETS, V_DATA, V_JSONL, V_CHUNK };

static struct tat_file *file_of(struct sf_node *n)
{
	return n->view->state;
}

/* Parts are made when a file first needs them, so that opening allocates
 * nothing per chunk; builds run in the view's turn. */
static int chunk_parts(struct tat_file *tf, struct tat_chunk *ch)
{
	if (ch->part)
		return 0;
	uint8_t type = tf->fields[ch->column].type;
	ch->part = sf_view_part(tf->view, tat_chunk_produce, ch, tat_chunk_size(ch, type), ch->what);
	ch->text = sf_view_part(tf->view, tat_text_produce, ch, SF_SIZE_UNKNOWN, ch->what);
	return ch->part && ch->text ? 0 : -ENOMEM;
}

int tat_build_whole(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct sf_part *p = f->arg;
	struct sf_buf *b = NULL;
	int rc = sf_part_get(c, p, &b, e);
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		return sf_file_set_broken(f, 0, e->msg);
	uint64_t len = b->len;
	sf_buf_unref(b);
	return sf_file_add_part(f, p, 0, len);
}

static const char *npy_descr(uint8_t type)
{
	static const char *const d[] = {
		[TAT_BOOL] = "|b1", [TAT_INT8] = "|i1", [TAT_INT16] = "<i2", [TAT_INT32] = "<i4",
		[TAT_INT64] = "<i8", [TAT_UINT8] = "|u1", [TAT_UINT16] = "<u2", [TAT_UINT32] = "<u4",
		[TAT_UINT64] = "<u8", [TAT_FLOAT32] = "<f4", [TAT_FLOAT64] = "<f8",
		[TAT_TIMESTAMP] = "<M8[us]",
	};
	return d[type];
}

/* A .npy v1.0 header for a 1-D array, padded so the data starts 64-byte
 * aligned (what numpy writes, and what mmap_mode wants). */
static int add_npy_header(struct sf_node *f, uint8_t type, uint64_t rows)
{
	char dict[160];
	int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }",
			 npy_descr(type), rows);
	size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
	uint8_t h[256];
	memcpy(h, "\x93NUMPY\x01\x00", 8);
	sf_put_le16(h + 8, (uint16_t)(total - 10));
	memcpy(h + 10, dict, (size_t)n);
	memset(h + 10 + n, ' ', total - 10 - (size_t)n - 1);
	h[total - 1] = '\n';
	return sf_file_set_bytes(f, h, total);
}

/* Learns a produced part's size through the cache. */
static int part_len(struct sf_part *p, struct sf_cache *c, uint64_t *len, struct sf_err *e)
{
	struct sf_buf *b = NULL;
	int rc = sf_part_get(c, p, &b, e);
	if (rc == 0) {
		*len = b->len;
		sf_buf_unref(b);
	}
	return rc;
}

/* Whole-column offsets.bin: each group's local offsets shifted by where its
 * data starts in the column's data.bin. */
static int gen_offsets(void *arg, uint64_t off, uint8_t *out, size_t len,
		       struct sf_cache *c, struct sf_err *e)
{
	struct tat_chunk *ch = arg;
	struct sf_buf *b = NULL;
	int rc = sf_part_get(c, ch->part, &b, e);
	if (rc)
		return rc;
	uint64_t R = ch->num_values;
	for (size_t i = 0; i < len; i++) {
		uint64_t q = off + i;
		uint64_t v = sf_le64(b->data + R + 8 * (q / 8)) + ch->data_base;
		out[i] = (uint8_t)(v >> (8 * (q % 8)));
	}
	sf_buf_unref(b);
	return 0;
}

/* Adds chunk ch's share of a view to f; `whole` when f is the column over
 * the whole file (offsets then come from gen_offsets). *data_at advances by
 * the chunk's data bytes. */
static int add_chunk_view(struct sf_node *f, struct tat_chunk *ch, enum view_kind kind, bool whole,
			  uint64_t *data_at, struct sf_cache *c, struct sf_err *e)
{
	struct tat_file *tf = ch->tf;
	uint8_t type = tf->fields[ch->column].type;
	uint64_t R = ch->num_values, w = tat_width(type), len = 0;
	int rc = 0;
	/* the footer's row count sizes every decoded view: the page headers
	 * must agree with it first, or a hostile count makes sizes wrap */
	if (kind != V_CHUNK && ((rc = tat_chunk_rows(ch, e)) || (rc = chunk_parts(tf, ch))))
		return rc;
	switch (kind) {
	case V_VALID:
		return sf_file_add_part(f, ch->part, 0, R);
	case V_VALUES:
	case V_NPY:
		return sf_file_add_part(f, ch->part, R, R * w);
	case V_OFFSETS:
		if (!whole)
			return sf_file_add_part(f, ch->part, R, 8 * (R + 1));
		if ((rc = part_len(ch->part, c, &len, e)))
			return rc;
		ch->data_base = *data_at;
		*data_at += len - R - 8 * (R + 1);
		return sf_file_add_gen(f, gen_offsets, ch, 0, 8 * R);
	case V_DATA:
		if ((rc = part_len(ch->part, c, &len, e)))
			return rc;
		*data_at += len - R - 8 * (R + 1);
		return sf_file_add_part(f, ch->part, R + 8 * (R + 1), len - R - 8 * (R + 1));
	case V_JSONL:
		if ((rc = part_len(ch->text, c, &len, e)))
			return rc;
		return sf_file_add_part(f, ch->text, 0, len);
	case V_CHUNK:
		if ((rc = tat_chunk_extent(ch, &len, e)))
			return rc;
		return sf_file_add_map(f, tf->map->data + ch->first_page, len);
	}
	return -EINVAL;
}

/* A source problem makes the file unreadable, not unlistable. */
static int build_failed(struct sf_node *f, int rc, struct sf_err *e)
{
	if (rc == -ENOMEM)
		return rc;
	return sf_file_set_broken(f, 0, e->msg);
}

static int build_chunk_file(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tat_chunk *ch = f->arg;
	enum view_kind kind = (enum view_kind)f->aux;
	uint8_t type = ch->tf->fields[ch->column].type;
	uint64_t at = 0;
	int rc = 0;
	if (kind == V_NPY)
		rc = add_npy_header(f, type, ch->num_values);
	if (rc == 0)
		rc = add_chunk_view(f, ch, kind, false, &at, c, e);
	return rc ? build_failed(f, rc, e) : 0;
}

static int build_column_file(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tat_file *tf = file_of(f);
	struct tat_field *fd = f->arg;
	size_t col = (size_t)(fd - tf->fields);
	enum view_kind kind = (enum view_kind)f->aux;
	uint64_t rows = 0, at = 0;
	int rc = 0;
	for (size_t g = 0; g < tf->ngroups && rc == 0; g++) {
		struct tat_chunk *ch = tat_chunk_of(&tf->groups[g], col);
		if (!ch)
			rc = sf_fail(e, -EIO, "%s: column %zu missing in group %zu", tf->view->path, col, g);
		else
			rows += ch->num_values;
	}
	if (rc == 0 && kind == V_NPY)
		rc = add_npy_header(f, fd->type, rows);
	for (size_t g = 0; g < tf->ngroups && rc == 0; g++)
		rc = add_chunk_view(f, tat_chunk_of(&tf->groups[g], col), kind, true, &at, c, e);
	if (rc == 0 && kind == V_OFFSETS) {
		uint8_t last[8];
		sf_put_le64(last, at);
		rc = sf_file_set_bytes(f, last, 8);
	}
	return rc ? build_failed(f, rc, e) : 0;
}

static const char *const view_names[] = {
	[V_VALID] = "valid.bin", [V_VALUES] = "values.bin", [V_NPY] = "values.npy",
	[V_OFFSETS] = "offsets.bin", [V_DATA] = "data.bin", [V_JSONL] = "values.jsonl",
	[V_CHUNK] = "chunk.bin",
};

/* The files of one column directory: `arg` is the chunk (per group) or the
 * field (whole column). */
static int add_views(struct sf_node *dir, uint8_t type, sf_build_fn build, void *arg, bool chunk)
{
	enum view_kind kinds[8];
	size_t n = 0;
	kinds[n++] = V_VALID;
	if (tat_is_var(type)) {
		kinds[n++] = V_OFFSETS;
		kinds[n++] = V_DATA;
	} else if (type != TAT_LIST) {
		kinds[n++] = V_VALUES;
		kinds[n++] = V_NPY;
	}
	kinds[n++] = V_JSONL;
	if (chunk)
		kinds[n++] = V_CHUNK;
	for (size_t i = 0; i < n; i++) {
		struct sf_node *f = sf_dir_add_exact(dir, SF_FILE, view_names[kinds[i]]);
		if (!f)
			return -ENOMEM;
		sf_file_set_build(f, build, arg);
		f->aux = kinds[i];
	}
	return 0;
}

static int populate_columns(struct sf_node *dir, struct sf_err *e)
{
	struct tat_file *tf = file_of(dir);
	for (size_t i = 0; i < tf->nfields; i++) {
		struct tat_field *fd = &tf->fields[i];
		struct sf_node *d = sf_dir_add_dir(dir, fd->name.p, fd->name.len);
		if (!d || add_views(d, fd->type, build_column_file, fd, false))
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	}
	return 0;
}

static int populate_group(struct sf_node *dir, struct sf_err *e)
{
	struct tat_file *tf = file_of(dir);
	struct tat_group *g = dir->arg;
	for (size_t i = 0; i < tf->nfields; i++) {
		struct tat_field *fd = &tf->fields[i];
		struct sf_node *d = sf_dir_add_dir(dir, fd->name.p, fd->name.len);
		if (!d)
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
		struct tat_chunk *ch = tat_chunk_of(g, i);
		if (ch) {
			if (add_views(d, fd->type, build_chunk_file, ch, true))
				return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
			continue;
		}
		/* upstream fails reading a column its group lacks: so do we */
		char why[200];
		snprintf(why, sizeof why, "%s: column %zu missing in %s", tf->view->path, i, g->what);
		struct sf_node *f = sf_dir_add_exact(d, SF_FILE, view_names[V_CHUNK]);
		if (!f || sf_file_set_broken(f, 0, why))
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	}
	return 0;
}

static int populate_groups(struct sf_node *dir, struct sf_err *e)
{
	struct tat_file *tf = file_of(dir);
	for (size_t g = 0; g < tf->ngroups; g++) {
		char name[24];
		snprintf(name, sizeof name, "%zu", g);
		struct sf_node *d = sf_dir_add_exact(dir, SF_DIR, name);
		if (!d)
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
		sf_dir_set_populate(d, populate_group, &tf->groups[g]);
	}
	return 0;
}

static int build_rows(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tat_file *tf = file_of(f);
	for (size_t g = 0; g < tf->ngroups; g++) {
		struct tat_group *gr = &tf->groups[g];
		if (!gr->rows_text &&
		    !(gr->rows_text = sf_view_part(tf->view, tat_rows_produce, gr, SF_SIZE_UNKNOWN, gr->what)))
			return -ENOMEM;
		gr->rows_text->arg2 = tf;
		uint64_t len = 0;
		int rc = part_len(gr->rows_text, c, &len, e);
		if (rc == 0)
			rc = sf_file_add_part(f, gr->rows_text, 0, len);
		if (rc)
			return build_failed(f, rc, e);
	}
	return 0;
}

static int populate_blobs(struct sf_node *dir, struct sf_err *e)
{
	struct tat_file *tf = file_of(dir);
	for (size_t i = 0; i < tf->nfields; i++) {
		struct tat_field *fd = &tf->fields[i];
		if (fd->type != TAT_BLOBREF)
			continue;
		struct sf_node *d = sf_dir_add_dir(dir, fd->name.p, fd->name.len);
		if (!d)
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
		sf_dir_set_populate(d, tat_blobdir_populate, fd);
	}
	return 0;
}

int tat_build_tree(struct tat_file *tf, struct sf_err *e)
{
	struct sf_view *v = tf->view;
	struct sf_node *cols = sf_dir_add_exact(v->root, SF_DIR, "columns");
	struct sf_node *groups = sf_dir_add_exact(v->root, SF_DIR, "rowgroups");
	struct sf_node *rows = sf_dir_add_exact(v->root, SF_FILE, "rows.jsonl");
	if (!cols || !groups || !rows)
		return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
	sf_dir_set_populate(cols, populate_columns, NULL);
	sf_dir_set_populate(groups, populate_groups, NULL);
	sf_file_set_build(rows, build_rows, NULL);
	bool blobs = false;
	for (size_t i = 0; i < tf->nfields; i++)
		blobs |= tf->fields[i].type == TAT_BLOBREF;
	if (blobs) {
		struct sf_node *b = sf_dir_add_exact(v->root, SF_DIR, "blobs");
		if (!b)
			return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
		sf_dir_set_populate(b, populate_blobs, NULL);
	}
	if ((tf->hflags & TAT_H_SEARCH) && tf->inv.present)
		return tat_search_add(tf, v->root);
	return 0;
}
