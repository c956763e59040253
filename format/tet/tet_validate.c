/* The per-dataset checks of spec §11.3: a dataset that fails one is not
 * shown (and is reported); the rest of the container still is. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "sf_bytes.h"
#include "tet.h"

/* Records the first problem of a dataset. */
static void __attribute__((format(printf, 2, 3)))
ds_problem(struct tet_dataset *ds, const char *fmt, ...)
{
	if (ds->problem)
		return;
	char buf[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	ds->problem = strdup(buf);
	if (!ds->problem)
		ds->problem = strdup("out of memory");
}

static bool ds_ok(const struct tet_dataset *ds)
{
	return !ds->problem;
}

/* dtype, chunk extents, grid and overflow-checked sizes (§5.3, §5.4, §7.1). */
static void check_shape(struct tet_dataset *ds)
{
	ds->esize = tet_dtype_size(ds->dtype);
	ds->descr = tet_dtype_descr(ds->dtype);
	ds->dtype_name = tet_dtype_name(ds->dtype);
	if (!ds->esize) {
		ds_problem(ds, "unknown dtype %u", ds->dtype);
		return;
	}
	uint64_t nchunks = 1, nelem = 1, zelem = 1;
	bool over = false;
	for (uint32_t d = 0; d < ds->ndim; d++) {
		uint64_t s = ds->shape[d], cs = ds->cshape[d];
		if (cs == 0) {
			ds_problem(ds, "chunk_shape[%u] is 0", d);
			return;
		}
		ds->grid[d] = s / cs + (s % cs != 0);
		ds->zchunk[d] = cs < s ? cs : (s ? s : 1);
		over |= !sf_mul_ok(nchunks, ds->grid[d], &nchunks);
		over |= !sf_mul_ok(nelem, s, &nelem);
		over |= !sf_mul_ok(zelem, ds->zchunk[d], &zelem);
	}
	over |= !sf_mul_ok(nelem, ds->esize, &ds->nbytes);
	over |= !sf_mul_ok(zelem, ds->esize, &ds->zbytes);
	/* extents and sizes must also fit the signed 64-bit integers of JSON
	 * readers and file offsets */
	for (uint32_t d = 0; d < ds->ndim; d++)
		over |= ds->shape[d] > INT64_MAX || ds->cshape[d] > INT64_MAX;
	over |= ds->nbytes > INT64_MAX || ds->zbytes > INT64_MAX;
	if (over) {
		ds_problem(ds, "array or chunk size overflows 63 bits");
		return;
	}
	ds->nchunks = nchunks;
	ds->nelem = nelem;
}

void tet_tile_ext(const struct tet_dataset *ds, const struct tet_entry *en, uint64_t *ext)
{
	for (uint32_t d = 0; d < ds->ndim; d++) {
		uint64_t lo = en->coords[d] * ds->cshape[d];
		uint64_t left = ds->shape[d] - lo;
		ext[d] = left < ds->cshape[d] ? left : ds->cshape[d];
	}
}

/* Places one entry in its dataset's grid (coordinates, duplicates, tile
 * size, span after the index). */
static void place_entry(struct tet_file *tf, uint64_t k)
{
	const struct tet_entry *en = &tf->entries[k];
	struct tet_dataset *ds = &tf->ds[en->dataset_id];
	if (!ds_ok(ds))
		return;
	uint64_t cell = 0, ext[TET_MAX_DIM], tile = ds->esize;
	for (uint32_t d = 0; d < ds->ndim; d++) {
		if (en->coords[d] >= ds->grid[d]) {
			ds_problem(ds, "chunk %llu: coordinate %llu on axis %u is past the grid (%llu)",
				   (unsigned long long)k, (unsigned long long)en->coords[d], d,
				   (unsigned long long)ds->grid[d]);
			return;
		}
		cell = cell * ds->grid[d] + en->coords[d];
	}
	if (ds->cell[cell] != TET_NO_ENTRY) {
		ds_problem(ds, "chunks %llu and %llu have the same coordinates",
			   (unsigned long long)ds->cell[cell], (unsigned long long)k);
		return;
	}
	ds->cell[cell] = k;
	tet_tile_ext(ds, en, ext);
	for (uint32_t d = 0; d < ds->ndim; d++)
		tile *= ext[d]; /* bounded by nbytes, which did not overflow */
	if (en->raw != tile)
		ds_problem(ds, "chunk %llu: raw_byte_len %llu, but its tile holds %llu bytes",
			   (unsigned long long)k, (unsigned long long)en->raw,
			   (unsigned long long)tile);
	else if (en->off < tf->index_off + tf->index_len)
		ds_problem(ds, "chunk %llu: payload at %llu starts before the end of the chunk index",
			   (unsigned long long)k, (unsigned long long)en->off);
}

struct span {
	uint64_t off, end, k;
};

static int by_offset(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* No two stored spans may overlap (§11.3): both datasets are refused. */
static int check_overlaps(struct tet_file *tf, struct sf_err *e)
{
	struct span *s = malloc((tf->entry_count ? tf->entry_count : 1) * sizeof *s);
	if (!s)
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->path);
	uint64_t n = 0;
	for (uint64_t k = 0; k < tf->entry_count; k++) {
		const struct tet_entry *en = &tf->entries[k];
		/* spans are inside the file (checked at parse): no overflow */
		if (en->dataset_id < tf->dataset_count && en->stored)
			s[n++] = (struct span){ en->off, en->off + en->stored, k };
	}
	qsort(s, n, sizeof *s, by_offset);
	struct span far = { 0, 0, 0 };
	for (uint64_t i = 0; i < n; i++) {
		if (i && s[i].off < far.end) {
			const char *why = "its payload overlaps the payload of chunk";
			ds_problem(&tf->ds[tf->entries[s[i].k].dataset_id], "chunk %llu: %s %llu",
				   (unsigned long long)s[i].k, why, (unsigned long long)far.k);
			ds_problem(&tf->ds[tf->entries[far.k].dataset_id], "chunk %llu: %s %llu",
				   (unsigned long long)far.k, why, (unsigned long long)s[i].k);
		}
		if (s[i].end > far.end)
			far = s[i];
	}
	free(s);
	return 0;
}

/* Spec §7.6: all raw, row-contiguous tiling, payloads back to back in grid
 * order. Then the C-order array is one span of the file. */
static void check_zero_copy(struct tet_dataset *ds)
{
	const struct tet_entry *en = ds->file->entries;
	if (!ds->nbytes)
		return;
	int j = -1;
	for (uint32_t d = 0; d < ds->ndim; d++)
		if (ds->cshape[d] < ds->shape[d])
			j = (int)d;
	for (int d = 0; d < j; d++)
		if (ds->cshape[d] != 1 && ds->shape[d] != 1)
			return;
	for (uint64_t c = 0; c < ds->nchunks; c++) {
		const struct tet_entry *x = &en[ds->cell[c]];
		if (x->codec != TET_RAW)
			return;
		if (c && en[ds->cell[c - 1]].off + en[ds->cell[c - 1]].raw != x->off)
			return;
	}
	ds->zero_copy = true;
	ds->zero_copy_off = en[ds->cell[0]].off;
}

int tet_validate(struct tet_file *tf, struct sf_err *e)
{
	for (uint32_t i = 0; i < tf->dataset_count; i++)
		check_shape(&tf->ds[i]);
	for (uint64_t k = 0; k < tf->entry_count; k++) {
		uint64_t id = tf->entries[k].dataset_id;
		if (id < tf->dataset_count)
			tf->ds[id].nentries++;
		else
			tf->orphans++;
	}
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		if (!ds_ok(ds))
			continue;
		if (ds->nentries != ds->nchunks) {
			ds_problem(ds, "%llu chunks in the index, the grid has %llu cells",
				   (unsigned long long)ds->nentries, (unsigned long long)ds->nchunks);
			continue;
		}
		/* nchunks == nentries <= entry_count: bounded by the file size */
		ds->cell = malloc((ds->nchunks ? ds->nchunks : 1) * sizeof *ds->cell);
		if (!ds->cell)
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->path);
		for (uint64_t c = 0; c < ds->nchunks; c++)
			ds->cell[c] = TET_NO_ENTRY;
	}
	for (uint64_t k = 0; k < tf->entry_count; k++)
		if (tf->entries[k].dataset_id < tf->dataset_count)
			place_entry(tf, k);
	int rc = check_overlaps(tf, e);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < tf->dataset_count; i++)
		if (ds_ok(&tf->ds[i]))
			check_zero_copy(&tf->ds[i]);
	return 0;
}
