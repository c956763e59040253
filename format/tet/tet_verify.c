/* .shardfs/verify: the checks of upstream `tet verify --deep` (spec §11.2)
 * plus the mount's own per-dataset rules (§11.3). First line "status: ok"
 * or "status: failed", then one "error: …" or "warning: …" per finding. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_report.h"
#include "tet.h"

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void check_offsets(struct sf_report *r, const struct tet_file *tf)
{
	uint64_t n = tf->entry_count;
	uint64_t *off = malloc((n ? n : 1) * sizeof *off);
	if (!off) {
		sf_report_add(r, true, "payload_offsets: out of memory");
		return;
	}
	for (uint64_t k = 0; k < n; k++)
		off[k] = tf->entries[k].off;
	qsort(off, n, sizeof *off, by_u64);
	for (uint64_t k = 1; k < n; k++)
		if (off[k] == off[k - 1]) {
			sf_report_add(r, true, "payload_offsets: several chunks start at offset %llu",
				      (unsigned long long)off[k]);
			break;
		}
	free(off);
	for (uint64_t k = 1; k < n; k++) {
		const struct tet_entry *a = &tf->entries[k - 1], *b = &tf->entries[k];
		if (a->off + a->stored != b->off) {
			sf_report_add(r, false, "payload_order: chunk %llu ends at %llu but chunk %llu starts at %llu (non_contiguous_payloads)",
				      (unsigned long long)k - 1, (unsigned long long)(a->off + a->stored),
				      (unsigned long long)k, (unsigned long long)b->off);
			break;
		}
	}
}

static void check_decode(struct sf_report *r, const struct tet_file *tf, uint64_t limit)
{
	for (uint64_t k = 0; k < tf->entry_count; k++) {
		const struct tet_entry *en = &tf->entries[k];
		if (en->codec != TET_ZSTD || en->dataset_id >= tf->dataset_count)
			continue;
		const struct tet_dataset *ds = &tf->ds[en->dataset_id];
		struct sf_err e = { { 0 } };
		/* counted, not held: a tile may decode to more than memory allows */
		if (tet_tile_check(ds, en, limit, &e))
			sf_report_add(r, true, "chunk_decode: chunk %llu: %s", (unsigned long long)k, e.msg);
	}
}

/* Every string of the footer (keys too) is 1..1024 bytes (§9.2). */
static const char *string_limits(const json_t *j)
{
	size_t i;
	const char *k;
	json_t *v;
	const char *bad;
	if (!j)
		return NULL;
	switch (json_typeof(j)) {
	case JSON_STRING:
		return json_string_length(j) >= 1 && json_string_length(j) <= 1024 ? NULL
			: "a string is empty or longer than 1024 bytes";
	case JSON_ARRAY:
		json_array_foreach(j, i, v)
			if ((bad = string_limits(v)))
				return bad;
		return NULL;
	case JSON_OBJECT:
		json_object_foreach((json_t *)j, k, v) {
			size_t n = strlen(k);
			if (n < 1 || n > 1024)
				return "a key is empty or longer than 1024 bytes";
			if ((bad = string_limits(v)))
				return bad;
		}
		return NULL;
	default:
		return NULL;
	}
}

/* The count limits of upstream's MetadataLimitsV1 (§9.2). */
static const char *count_limits(const struct tet_file *tf)
{
	if (tf->json_len > 65536)
		return "footer JSON is over 65536 bytes";
	if (json_array_size(tf->history) > 4096)
		return "more than 4096 history rows";
	size_t i;
	json_t *row;
	json_array_foreach(tf->history, i, row)
		if (json_array_size(json_object_get(row, "parents")) > 16 ||
		    json_object_size(json_object_get(row, "params")) > 32)
			return "a history row has more than 16 parents or 32 params";
	const json_t *dss = json_object_get(tf->metadata, "datasets");
	if (json_object_size(dss) > 256)
		return "metadata for more than 256 datasets";
	const char *k;
	json_t *d;
	json_object_foreach((json_t *)dss, k, d) {
		const json_t *coords = json_object_get(d, "coords");
		if (json_object_size(json_object_get(d, "attrs")) > 64 ||
		    json_array_size(json_object_get(d, "dim_names")) > 8 || json_object_size(coords) > 8)
			return "a dataset has more than 64 attrs, 8 dim_names or 8 coord axes";
		const char *axis;
		json_t *c;
		json_object_foreach((json_t *)coords, axis, c)
			if (json_array_size(json_object_get(c, "labels")) > 64)
				return "a coordinate axis has more than 64 labels";
	}
	return NULL;
}

int tet_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_file *tf = p->arg;
	struct sf_report r = { 0 };
	if (tf->orphans)
		sf_report_add(&r, true, "chunk_dataset_ids: %llu chunk index entries name no dataset",
			      (unsigned long long)tf->orphans);
	for (uint32_t i = 0; i < tf->dataset_count; i++)
		if (tf->ds[i].problem)
			sf_report_add(&r, true, "dataset_tensor_bytes: dataset %u (%s): %s", i, tf->ds[i].esc,
				      tf->ds[i].problem);
	check_offsets(&r, tf);
	check_decode(&r, tf, cache->limit);
	const char *bad;
	if (tf->footer_error)
		sf_report_add(&r, true, "footer: %s (footer_invalid)", tf->footer_error);
	else if (tf->footer_json && ((bad = count_limits(tf)) || (bad = string_limits(tf->history)) ||
				     (bad = string_limits(tf->metadata))))
		sf_report_add(&r, true, "footer_metadata: %s", bad);
	*out = sf_report_take(&r);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: verify: out of memory", tf->path);
}
