/* Parsing a .tet container: superblock, dataset directory, chunk index and
 * footer tail (spec §3-§6, §9.3), then the per-dataset checks of §11.3. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_bytes.h"
#include "sf_format.h"
#include "sf_map.h"
#include "sf_name.h"
#include "tet.h"

static const struct {
	size_t size;
	const char *descr, *name;
} dtypes[] = {
	[1] = { 4, "<f4", "f32" }, [2] = { 8, "<f8", "f64" }, [3] = { 4, "<i4", "i32" },
	[4] = { 8, "<i8", "i64" }, [5] = { 1, "|u1", "u8" },  [6] = { 2, "<u2", "u16" },
	[7] = { 2, "<i2", "i16" }, [8] = { 4, "<u4", "u32" }, [9] = { 2, "<f2", "f16" },
	[10] = { 8, "<u8", "u64" },
};

size_t tet_dtype_size(uint32_t dtype)
{
	return dtype < sizeof dtypes / sizeof dtypes[0] ? dtypes[dtype].size : 0;
}

const char *tet_dtype_descr(uint32_t dtype)
{
	return tet_dtype_size(dtype) ? dtypes[dtype].descr : NULL;
}

const char *tet_dtype_name(uint32_t dtype)
{
	return tet_dtype_size(dtype) ? dtypes[dtype].name : "?";
}

void tet_free(struct tet_file *tf)
{
	if (!tf)
		return;
	tet_tree_free(tf);
	for (uint32_t i = 0; tf->ds && i < tf->dataset_count; i++) {
		free(tf->ds[i].cell);
		free(tf->ds[i].problem);
		free(tf->ds[i].tile);
		free(tf->ds[i].refs);
	}
	free(tf->ds);
	free(tf->entries);
	free(tf->blob);
	json_decref(tf->footer_json);
	json_decref(tf->spill_json);
	free(tf->footer_error);
	free(tf);
}

/* Names are UTF-8 like Rust's str; jansson validates exactly that. */
static bool utf8_ok(const uint8_t *p, size_t n)
{
	json_t *s = json_stringn((const char *)p, n);
	json_decref(s);
	return s != NULL;
}

static int parse_records(struct tet_file *tf, struct sf_err *e)
{
	const char *path = tf->path;
	if (tf->len < 40)
		return sf_fail(e, -EINVAL, "%s: dataset_count is %u but the dataset directory is missing",
			       path, tf->dataset_count);
	uint8_t n[8];
	int rc = sf_map_read(tf->map, 32, 8, n, "dataset directory", e);
	if (rc)
		return rc;
	tf->blob_len = sf_le64(n);
	if (!sf_range_ok(tf->len, 40, tf->blob_len))
		return sf_fail(e, -EINVAL, "%s: file too short for a dataset blob of %llu bytes",
			       path, (unsigned long long)tf->blob_len);
	/* every record takes at least 32 bytes: bounds the allocation */
	if (tf->dataset_count > tf->blob_len / 32)
		return sf_fail(e, -EINVAL, "%s: file too short for %u dataset records",
			       path, tf->dataset_count);
	tf->ds = calloc(tf->dataset_count, sizeof *tf->ds);
	if (!tf->ds)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	if ((rc = sf_map_copy(tf->map, 40, tf->blob_len, &tf->blob, "dataset blob", e)))
		return rc;
	struct sf_cursor c = sf_cursor(tf->blob, (size_t)tf->blob_len);
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		struct tet_dataset *ds = &tf->ds[i];
		size_t start = c.pos;
		ds->file = tf;
		ds->id = i;
		ds->name_len = sf_cur_u32(&c);
		ds->dtype = sf_cur_u32(&c);
		ds->ndim = sf_cur_u32(&c);
		sf_cur_u32(&c);
		if (c.bad)
			return sf_fail(e, -EINVAL, "%s: file too short for dataset record %u", path, i);
		if (ds->ndim < 1 || ds->ndim > TET_MAX_DIM)
			return sf_fail(e, -EINVAL, "%s: dataset %u: ndim %u out of range (1..8)",
				       path, i, ds->ndim);
		ds->name = sf_cur_take(&c, ds->name_len);
		if (!ds->name)
			return sf_fail(e, -EINVAL, "%s: dataset %u: name runs past the dataset blob", path, i);
		if (!utf8_ok(ds->name, ds->name_len))
			return sf_fail(e, -EINVAL, "%s: dataset %u: invalid UTF-8 in dataset name", path, i);
		/* shapes start at a multiple of 8 from the record start */
		sf_cur_take(&c, (8 - (c.pos - start) % 8) % 8);
		for (uint32_t d = 0; d < ds->ndim; d++)
			ds->shape[d] = sf_cur_u64(&c);
		for (uint32_t d = 0; d < ds->ndim; d++)
			ds->cshape[d] = sf_cur_u64(&c);
		if (c.bad)
			return sf_fail(e, -EINVAL, "%s: dataset %u: shapes run past the dataset blob", path, i);
		sf_name_escape(ds->name, ds->name_len, TET_ENTRY_MAX, ds->esc);
	}
	if (c.pos != c.len)
		return sf_fail(e, -EINVAL, "%s: dataset blob length mismatch: declared %llu, parsed %zu",
			       path, (unsigned long long)tf->blob_len, c.pos);
	return 0;
}

static int parse_index(struct tet_file *tf, struct sf_err *e)
{
	const char *path = tf->path;
	uint64_t want = (40 + tf->blob_len + 7) & ~(uint64_t)7;
	if (tf->index_off != want)
		return sf_fail(e, -EINVAL, "%s: chunk index offset mismatch: %llu, expected %llu", path,
			       (unsigned long long)tf->index_off, (unsigned long long)want);
	if (tf->index_len < 32)
		return sf_fail(e, -EINVAL, "%s: file too short for the chunk index header", path);
	uint8_t h[32];
	int rc = sf_map_read(tf->map, tf->index_off, sizeof h, h, "chunk index", e);
	if (rc)
		return rc;
	if (memcmp(h, "TIDX", 4) != 0)
		return sf_fail(e, -EINVAL, "%s: bad chunk index magic", path);
	if (sf_le32(h + 4) != 1)
		return sf_fail(e, -EINVAL, "%s: unsupported chunk index version: %u", path, sf_le32(h + 4));
	tf->entry_count = sf_le64(h + 8);
	tf->budget_bps = sf_le16(h + 16);
	tf->budget_bytes = sf_le32(h + 20);
	uint64_t n;
	if (!sf_mul_ok(tf->entry_count, TET_ENTRY_SIZE, &n) || !sf_add_ok(n, 32, &n) ||
	    n != tf->index_len)
		return sf_fail(e, -EINVAL, "%s: chunk index entry count %llu does not fit in region length %llu",
			       path, (unsigned long long)tf->entry_count,
			       (unsigned long long)tf->index_len);
	return 0;
}

/* The THST tail and the payload bound P (§9.1, §9.3). */
static int parse_footer(struct tet_file *tf, struct sf_err *e)
{
	/* the tail was checked with the superblock (tet_check) */
	uint8_t t[16];
	int rc = sf_map_read(tf->map, tf->len - 16, 16, t, "footer tail", e);
	if (rc)
		return rc;
	tf->payload_bound = tf->len;
	if (!(tf->flags & 1) || memcmp(t + 12, "THST", 4) != 0)
		return 0;
	tf->footer = true;
	tf->json_len = sf_le64(t);
	rc = tet_footer_parse(tf, tf->len - 16 - tf->json_len, e);
	tf->payload_bound = tf->len - 16 - tf->json_len - tf->spill_len;
	return rc;
}

static int parse_entries(struct tet_file *tf, struct sf_err *e)
{
	if (!tf->entry_count)
		return 0;
	tf->entries = calloc(tf->entry_count, sizeof *tf->entries);
	if (!tf->entries)
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->path);
	struct sf_win w = { .m = tf->map };
	int rc = 0;
	for (uint64_t k = 0; k < tf->entry_count && !rc; k++) {
		const uint8_t *p;
		if ((rc = sf_win_get(&w, tf->index_off + 32 + k * TET_ENTRY_SIZE, TET_ENTRY_SIZE,
				     tf->index_off + tf->index_len, &p, "chunk index", e)))
			break;
		struct tet_entry *en = &tf->entries[k];
		en->dataset_id = sf_le64(p);
		for (int d = 0; d < TET_MAX_DIM; d++)
			en->coords[d] = sf_le64(p + 8 + 8 * d);
		en->off = sf_le64(p + 72);
		en->raw = sf_le64(p + 80);
		en->stored = sf_le64(p + 88);
		en->codec = sf_le32(p + 96);
		if (en->codec != TET_RAW && en->codec != TET_ZSTD)
			rc = sf_fail(e, -EINVAL, "%s: chunk %llu: unsupported codec %u (supported: 0 = raw, 1 = zstd)",
				       tf->path, (unsigned long long)k, en->codec);
		else if (en->codec == TET_RAW && en->raw != en->stored)
			rc = sf_fail(e, -EINVAL, "%s: chunk %llu: raw/stored length mismatch for codec=0 (%llu != %llu)",
				       tf->path, (unsigned long long)k, (unsigned long long)en->raw,
				       (unsigned long long)en->stored);
		else if (!sf_range_ok(tf->payload_bound, en->off, en->stored))
			rc = sf_fail(e, -EINVAL, "%s: chunk %llu: payload [%llu, +%llu) out of bounds for payload limit %llu",
				       tf->path, (unsigned long long)k, (unsigned long long)en->off,
				       (unsigned long long)en->stored,
				       (unsigned long long)tf->payload_bound);
	}
	sf_win_free(&w);
	return rc;
}

/* The superblock: magic, version and where the chunk index lies. */
int tet_check(const struct sf_probe *p, struct sf_err *e)
{
	if (p->size < 32)
		return sf_fail(e, -EINVAL, "%s: file too short for a superblock (%llu bytes)", p->path,
			       (unsigned long long)p->size);
	if (memcmp(p->head, "TETR", 4) != 0)
		return sf_fail(e, -EINVAL, "%s: bad magic: expected TETR", p->path);
	if (sf_le32(p->head + 4) != 1)
		return sf_fail(e, -EINVAL, "%s: unsupported layout_version: %u (only 1 is supported)",
			       p->path, sf_le32(p->head + 4));
	uint64_t off = sf_le64(p->head + 16), len = sf_le64(p->head + 24);
	if (!sf_range_ok(p->size, off, len))
		return sf_fail(e, -EINVAL, "%s: chunk index region [%llu, +%llu) is out of bounds for file length %llu",
			       p->path, (unsigned long long)off, (unsigned long long)len,
			       (unsigned long long)p->size);
	/* the history footer's tail, in the last 16 bytes */
	const uint8_t *t = p->tail + p->ntail - 16;
	if (memcmp(t + 12, "THST", 4) == 0) {
		/* upstream checks a tail even when the flag is clear */
		if (sf_le32(t + 8) != 1)
			return sf_fail(e, -EINVAL, "%s: unsupported history footer version %u", p->path,
				       sf_le32(t + 8));
		if (sf_le64(t) > p->size - 16)
			return sf_fail(e, -EINVAL, "%s: footer json_len %llu is larger than the file",
				       p->path, (unsigned long long)sf_le64(t));
	} else if ((sf_le32(p->head + 12) & 1) && sf_le32(p->head + 8) != 0) {
		return sf_fail(e, -EINVAL, "%s: superblock history flag set but footer missing", p->path);
	}
	return 0;
}

int tet_parse(const struct sf_map *m, const char *path, struct tet_file **out,
	      struct sf_err *e)
{
	int rc = sf_check_file(tet_check, m, path, e);
	if (rc)
		return rc;
	uint8_t data[32];
	if ((rc = sf_map_read(m, 0, sizeof data, data, "superblock", e)))
		return rc;
	struct tet_file *tf = calloc(1, sizeof *tf);
	if (!tf)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	tf->map = m;
	tf->len = m->size;
	tf->path = path;
	tf->version = sf_le32(data + 4);
	tf->dataset_count = sf_le32(data + 8);
	tf->flags = sf_le32(data + 12);
	tf->index_off = sf_le64(data + 16);
	tf->index_len = sf_le64(data + 24);
	if (tf->dataset_count > 0)
		rc = parse_records(tf, e);
	if (rc == 0 && tf->dataset_count > 0)
		rc = parse_index(tf, e);
	if (rc == 0)
		rc = parse_footer(tf, e);
	if (rc == 0)
		rc = parse_entries(tf, e);
	if (rc == 0)
		rc = tet_validate(tf, e);
	if (rc) {
		tet_free(tf);
		return rc;
	}
	*out = tf;
	return 0;
}
