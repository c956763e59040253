/* Chunk bytes: stored tiles, zero-padded zarr chunks, and the whole
 * dataset in C order (spec §7), served from the mapping where the bytes
 * are already right and from decoded parts otherwise; what is decoded or
 * rearranged here is read out of the file first (sf_map_read), a window
 * at a time for a tile decoded as it is read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_codec.h"
#include "sf_json.h"
#include "sf_map.h"
#include "sf_name.h"
#include "tet.h"
#include "sf_view_impl.h"

static const struct tet_entry *cell_entry(const struct tet_dataset *ds, uint64_t cell)
{
	return &ds->file->entries[ds->cell[cell]];
}

/* Names a tile in messages. */
static void tile_what(const struct tet_dataset *ds, const struct tet_entry *en, char *out,
		      size_t n)
{
	snprintf(out, n, "%s: %s: chunk at %llu", ds->file->path, ds->esc,
		 (unsigned long long)en->off);
}

int tet_tile_load(const struct tet_dataset *ds, const struct tet_entry *en, uint8_t **src,
		  struct sf_err *e)
{
	return sf_map_copy(ds->file->map, en->off, en->stored, src, ds->esc, e);
}

int tet_tile_check(const struct tet_dataset *ds, const struct tet_entry *en, uint64_t limit,
		   struct sf_err *e)
{
	if (en->codec == TET_RAW)
		return 0;
	char what[SF_NAME_MAX + 300];
	tile_what(ds, en, what, sizeof what);
	uint8_t *src;
	int rc = tet_tile_load(ds, en, &src, e);
	if (rc)
		return rc;
	rc = sf_zstd_check(src, en->stored, en->raw, NULL, 0, limit, what, e);
	free(src);
	return rc;
}

int tet_tile_fits(const struct tet_dataset *ds, const struct tet_entry *en, struct sf_err *e)
{
	if (en->codec == TET_RAW)
		return 0;
	/* the frames' block count bounds their output: a hostile raw_byte_len
	 * is refused before a buffer of that size is allocated */
	char what[SF_NAME_MAX + 300];
	tile_what(ds, en, what, sizeof what);
	uint64_t bound = 0;
	int rc = sf_zstd_bound_map(ds->file->map, en->off, en->stored, &bound, ds->esc, what, e);
	if (rc == 0 && bound < en->raw)
		rc = sf_fail(e, -EIO, "%s: %s: zstd chunk at %llu cannot decode to its %llu bytes",
			     ds->file->path, ds->esc, (unsigned long long)en->off,
			     (unsigned long long)en->raw);
	return rc;
}

/* The tile as stored, decoded (zstd tiles only) as it is read from the
 * file, a window at a time: its stored bytes are never copied whole. */
static int produce_tile(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_dataset *ds = p->arg;
	const struct tet_entry *en = &ds->file->entries[p->aux];
	int rc = tet_tile_fits(ds, en, e);
	if (rc)
		return rc;
	struct sf_buf *b = sf_buf_new(en->raw);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", ds->file->path, p->what);
	char what[SF_NAME_MAX + 300];
	tile_what(ds, en, what, sizeof what);
	rc = sf_zstd_decode_map(ds->file->map, en->off, en->stored, b->data, en->raw, ds->esc,
				what, e);
	if (rc) {
		sf_buf_unref(b);
		return rc;
	}
	*out = b;
	return 0;
}

static bool is_edge(const struct tet_dataset *ds, const struct tet_entry *en)
{
	uint64_t ext[TET_MAX_DIM];
	tet_tile_ext(ds, en, ext);
	for (uint32_t d = 0; d < ds->ndim; d++)
		if (ext[d] != ds->zchunk[d])
			return true;
	return false;
}

int tet_make_parts(struct sf_view *v, struct tet_dataset *ds)
{
	if (ds->tile || !ds->nchunks)
		return 0;
	if (!ds->refs && !(ds->refs = calloc(ds->nchunks, sizeof *ds->refs)))
		return -ENOMEM;
	struct sf_part **tile = calloc(ds->nchunks, sizeof *tile);
	int rc = tile ? 0 : -ENOMEM;
	for (uint64_t c = 0; rc == 0 && c < ds->nchunks; c++) {
		const struct tet_entry *en = cell_entry(ds, c);
		ds->refs[c] = (struct tet_cellref){ ds, c };
		if (en->codec == TET_ZSTD &&
		    !(tile[c] = sf_view_part(v, produce_tile, ds, en->raw, ds->entry)))
			rc = -ENOMEM;
		else if (tile[c])
			tile[c]->aux = ds->cell[c];
	}
	if (rc) {
		/* parts already made stay owned by the view, unused */
		free(tile);
		return rc;
	}
	ds->tile = tile;
	return 0;
}

/* The tile exactly: mapped when raw, the decoded part when zstd. */
static int add_tile(struct sf_node *f, struct tet_dataset *ds, uint64_t cell)
{
	const struct tet_entry *en = cell_entry(ds, cell);
	if (en->codec == TET_RAW)
		return sf_file_add_map(f, ds->file->map->data + en->off, en->raw);
	return sf_file_add_part(f, ds->tile[cell], 0, en->raw);
}

/* The bytes of a cell's tile: NULL for raw tiles (read from the file),
 * else the decoded part, held in *hold until the caller drops it. */
static int tile_bytes(struct tet_dataset *ds, uint64_t cell, struct sf_cache *c,
		      struct sf_buf **hold, const uint8_t **out, struct sf_err *e)
{
	const struct tet_entry *en = cell_entry(ds, cell);
	if (en->codec == TET_RAW) {
		*out = NULL;
		return 0;
	}
	int rc = sf_part_get(c, ds->tile[cell], hold, e);
	if (rc == 0)
		*out = (*hold)->data;
	return rc;
}

/* An edge chunk as zarr wants it: the tile at the corner of a zero-filled
 * chunk of the full zarr chunk shape, computed per read so that a large
 * chunk never needs a padded copy. */
static int gen_padded(void *arg, uint64_t off, uint8_t *out, size_t len,
		      struct sf_cache *c, struct sf_err *e)
{
	const struct tet_cellref *ref = arg;
	struct tet_dataset *ds = ref->ds;
	uint32_t n = ds->ndim;
	uint64_t es = ds->esize, ext[TET_MAX_DIM];
	const struct tet_entry *en = cell_entry(ds, ref->cell);
	tet_tile_ext(ds, en, ext);
	struct sf_buf *hold = NULL;
	const uint8_t *tile = NULL;
	int rc = tile_bytes(ds, ref->cell, c, &hold, &tile, e);
	while (len && rc == 0) {
		uint64_t rem = off / es, within = off % es, l[TET_MAX_DIM], src = 0;
		for (uint32_t d = n; d-- > 0;) {
			l[d] = rem % ds->zchunk[d];
			rem /= ds->zchunk[d];
		}
		bool inside = true;
		for (uint32_t d = 0; d < n; d++) {
			inside &= l[d] < ext[d];
			src = src * ext[d] + l[d];
		}
		/* up to the end of the tile row, or of the padding after it */
		uint64_t end = inside ? ext[n - 1] : ds->zchunk[n - 1];
		uint64_t run = (end - l[n - 1]) * es - within;
		if (run > len)
			run = len;
		if (inside && tile)
			memcpy(out, tile + src * es + within, run);
		else if (inside)
			rc = sf_map_read(ds->file->map, en->off + src * es + within, run, out, ds->esc, e);
		else
			memset(out, 0, run);
		out += run;
		off += run;
		len -= run;
	}
	sf_buf_unref(hold);
	return rc;
}

int tet_build_chunk(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tet_dataset *ds = f->arg;
	int rc = tet_make_parts(f->view, ds);
	if (rc)
		return sf_fail(e, rc, "%s: out of memory", ds->file->path);
	if (is_edge(ds, cell_entry(ds, f->aux)))
		return sf_file_add_gen(f, gen_padded, &ds->refs[f->aux], 0, ds->zbytes);
	return add_tile(f, ds, f->aux);
}

int tet_build_tile(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tet_dataset *ds = f->arg;
	int rc = tet_make_parts(f->view, ds);
	if (rc)
		return sf_fail(e, rc, "%s: out of memory", ds->file->path);
	return add_tile(f, ds, f->aux);
}

int tet_build_stored(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tet_dataset *ds = f->arg;
	const struct tet_entry *en = cell_entry(ds, f->aux);
	return sf_file_add_map(f, ds->file->map->data + en->off, en->stored);
}

/* Decoded tiles a single read keeps at hand, so that a read crossing the
 * same tiles row after row fetches each once. */
#define HELD 16

struct held {
	uint64_t cell[HELD];
	struct sf_buf *buf[HELD];
	unsigned next;
};

static int held_get(struct held *h, struct tet_dataset *ds, uint64_t cell,
		    struct sf_cache *c, const uint8_t **out, struct sf_err *e)
{
	for (unsigned i = 0; i < HELD; i++)
		if (h->buf[i] && h->cell[i] == cell) {
			*out = h->buf[i]->data;
			return 0;
		}
	struct sf_buf *b = NULL;
	int rc = sf_part_get(c, ds->tile[cell], &b, e);
	if (rc)
		return rc;
	unsigned i = h->next++ % HELD;
	sf_buf_unref(h->buf[i]);
	h->buf[i] = b;
	h->cell[i] = cell;
	*out = b->data;
	return 0;
}

int tet_assemble(struct tet_dataset *ds, uint64_t off, uint8_t *out, size_t len,
		 struct sf_cache *c, struct sf_err *e)
{
	uint32_t n = ds->ndim;
	uint64_t es = ds->esize;
	struct held h = { { 0 }, { NULL }, 0 };
	int rc = 0;
	while (len && rc == 0) {
		uint64_t rem = off / es, within = off % es, g[TET_MAX_DIM];
		for (uint32_t d = n; d-- > 0;) {
			g[d] = rem % ds->shape[d];
			rem /= ds->shape[d];
		}
		uint64_t cell = 0;
		for (uint32_t d = 0; d < n; d++)
			cell = cell * ds->grid[d] + g[d] / ds->cshape[d];
		const struct tet_entry *en = cell_entry(ds, cell);
		uint64_t ext[TET_MAX_DIM], local = 0, l = 0;
		tet_tile_ext(ds, en, ext);
		for (uint32_t d = 0; d < n; d++) {
			l = g[d] - en->coords[d] * ds->cshape[d];
			local = local * ext[d] + l;
		}
		/* the run goes to the end of this tile row */
		uint64_t run = (ext[n - 1] - l) * es - within;
		if (run > len)
			run = len;
		const uint8_t *tile;
		if (en->codec != TET_RAW && (rc = held_get(&h, ds, cell, c, &tile, e)) == 0)
			memcpy(out, tile + local * es + within, run);
		else if (en->codec == TET_RAW)
			rc = sf_map_read(ds->file->map, en->off + local * es + within, run, out,
					 ds->esc, e);
		if (rc == 0) {
			out += run;
			off += run;
			len -= run;
		}
	}
	for (unsigned i = 0; i < HELD; i++)
		sf_buf_unref(h.buf[i]);
	return rc;
}

static int gen_array(void *arg, uint64_t off, uint8_t *out, size_t len,
		     struct sf_cache *c, struct sf_err *e)
{
	return tet_assemble(arg, off, out, len, c, e);
}

int tet_build_npy(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tet_dataset *ds = f->arg;
	struct sf_str s = { 0 };
	int rc = sf_npy_header(&s, ds->descr, ds->shape, ds->ndim);
	if (rc == 0)
		rc = sf_file_add_str(f, &s);
	sf_str_free(&s);
	if (rc == 0 && ds->zero_copy)
		rc = sf_file_add_map(f, ds->file->map->data + ds->zero_copy_off, ds->nbytes);
	else if (rc == 0 && (rc = tet_make_parts(f->view, ds)) == 0)
		rc = sf_file_add_gen(f, gen_array, ds, 0, ds->nbytes);
	return rc ? sf_fail(e, rc, "%s: out of memory", ds->file->path) : 0;
}
