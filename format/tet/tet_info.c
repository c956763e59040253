/* .shardfs/info.txt (modelled on `tet info --all -n 0`, spec §12.5) and
 * info.json (the same facts, laid out like `tet info --json`, plus what the
 * mount decided about each dataset and the footer). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sf_json.h"
#include "tet.h"

/* Appends s padded with spaces to `width` characters (UTF-8 aware, like
 * upstream's formatting); cut to width-1 characters and "…" when `cut`. */
static void cell(struct sf_str *o, const char *s, size_t width, bool right, bool cut)
{
	size_t chars = 0, bytes = 0, keep = 0, keep_chars = 0;
	for (; s[bytes]; bytes++) {
		if (((uint8_t)s[bytes] & 0xC0) == 0x80)
			continue;
		if (chars == width - 1) {
			keep = bytes;
			keep_chars = chars;
		}
		chars++;
	}
	if (cut && chars > width) {
		sf_str_add(o, s, keep);
		sf_str_add(o, "…", strlen("…"));
		chars = keep_chars + 1;
	} else {
		if (right)
			for (size_t i = chars; i < width; i++)
				sf_str_addc(o, ' ');
		sf_str_add(o, s, bytes);
		if (right)
			return;
	}
	for (size_t i = chars; i < width; i++)
		sf_str_addc(o, ' ');
}

static void join_u64(char *out, size_t n, const uint64_t *v, uint32_t k, const char *sep)
{
	size_t at = 0;
	out[0] = 0;
	for (uint32_t i = 0; i < k && at < n; i++)
		at += (size_t)snprintf(out + at, n - at, "%s%llu", i ? sep : "", (unsigned long long)v[i]);
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Footer metadata lines under a dataset row (7-space indent). */
static void dataset_meta_lines(struct sf_str *o, const json_t *m)
{
	const json_t *dims = json_object_get(m, "dim_names");
	const json_t *coords = json_object_get(m, "coords");
	const json_t *attrs = json_object_get(m, "attrs");
	size_t i;
	const char *k;
	json_t *v;
	if (json_array_size(dims)) {
		sf_str_add(o, "       dim_names: ", 18);
		json_array_foreach(dims, i, v)
			sf_str_addf(o, "%s%s", i ? ", " : "", json_string_value(v));
		sf_str_addc(o, '\n');
	}
	if (json_object_size(coords)) {
		sf_str_add(o, "       coords: ", 15);
		i = 0;
		json_object_foreach((json_t *)coords, k, v)
			sf_str_addf(o, "%s%s(%zu labels)", i++ ? ", " : "", k,
				    json_array_size(json_object_get(v, "labels")));
		sf_str_addc(o, '\n');
	}
	json_object_foreach((json_t *)attrs, k, v)
		sf_str_addf(o, "       %s: %s\n", k, json_string_value(v));
}

static void history_lines(struct sf_str *o, const json_t *hist)
{
	sf_str_add(o, "history:\n", 9);
	if (!json_array_size(hist)) {
		sf_str_add(o, "  (none)\n", 9);
		return;
	}
	size_t i;
	json_t *r;
	json_array_foreach(hist, i, r) {
		if (json_is_array(r)) {
			sf_str_addf(o, "  %3zu  %s  %s  at=%s\n", i, json_string_value(json_array_get(r, 0)),
				    json_string_value(json_array_get(r, 1)),
				    json_string_value(json_array_get(r, 2)));
			continue;
		}
		sf_str_addf(o, "  %3zu  %s  %s  at=%s\n", i, json_string_value(json_object_get(r, "op")),
			    json_string_value(json_object_get(r, "source")),
			    json_string_value(json_object_get(r, "at")));
		const json_t *parents = json_object_get(r, "parents");
		if (json_array_size(parents)) {
			size_t k;
			json_t *p;
			sf_str_add(o, "       parents: ", 16);
			json_array_foreach(parents, k, p)
				sf_str_addf(o, "%s%s", k ? ", " : "", json_string_value(p));
			sf_str_addc(o, '\n');
		}
		const char *key;
		json_t *val;
		json_object_foreach(json_object_get(r, "params"), key, val)
			sf_str_addf(o, "       %s: %s\n", key, json_string_value(val));
	}
}

static void chunk_lines(struct sf_str *o, const struct tet_file *tf)
{
	sf_str_add(o, "chunks:\n", 8);
	if (!tf->entry_count) {
		sf_str_add(o, "  (none)\n", 9);
		return;
	}
	sf_str_addf(o, "%6s  ", "#");
	cell(o, "dataset", 12, false, false);
	sf_str_add(o, "  ", 2);
	cell(o, "coords", 14, false, false);
	sf_str_addf(o, "  %4s  %10s  %5s  offset\n", "raw", "stored", "codec");
	for (uint64_t k = 0; k < tf->entry_count; k++) {
		const struct tet_entry *en = &tf->entries[k];
		const struct tet_dataset *ds =
			en->dataset_id < tf->dataset_count ? &tf->ds[en->dataset_id] : NULL;
		char coords[TET_MAX_DIM * 21];
		join_u64(coords, sizeof coords, en->coords, ds ? ds->ndim : TET_MAX_DIM, ",");
		sf_str_addf(o, "%6llu  ", (unsigned long long)k);
		cell(o, ds ? ds->esc : "?", 12, false, true);
		sf_str_add(o, "  ", 2);
		cell(o, coords, 14, false, false);
		sf_str_addf(o, "  %4llu  %10llu  %5s  %llu\n", (unsigned long long)en->raw,
			    (unsigned long long)en->stored,
			    en->codec == TET_RAW ? "raw" : en->codec == TET_ZSTD ? "zstd" : "?",
			    (unsigned long long)en->off);
	}
}

static void dataset_lines(struct sf_str *o, const struct tet_file *tf)
{
	if (!tf->dataset_count) {
		sf_str_add(o, "datasets: (empty file)\n", 23);
		return;
	}
	sf_str_add(o, "datasets:\n   id  ", 17);
	cell(o, "name", 20, false, false);
	sf_str_add(o, "  dtype  ", 9);
	cell(o, "shape", 16, false, false);
	sf_str_add(o, "  ", 2);
	cell(o, "chunk_shape", 12, false, false);
	sf_str_add(o, "  chunks\n", 9);
	for (uint32_t i = 0; i < tf->dataset_count; i++) {
		const struct tet_dataset *ds = &tf->ds[i];
		char shape[TET_MAX_DIM * 22], cshape[TET_MAX_DIM * 22];
		join_u64(shape, sizeof shape, ds->shape, ds->ndim, "×");
		join_u64(cshape, sizeof cshape, ds->cshape, ds->ndim, "×");
		sf_str_addf(o, "%5u  ", i);
		cell(o, ds->esc, 20, false, true);
		sf_str_add(o, "  ", 2);
		cell(o, ds->dtype_name, 5, false, false);
		sf_str_add(o, "  ", 2);
		cell(o, shape, 16, false, false);
		sf_str_add(o, "  ", 2);
		cell(o, cshape, 12, false, false);
		sf_str_addf(o, "  %llu\n", (unsigned long long)ds->nentries);
		dataset_meta_lines(o, ds->meta);
		if (ds->problem)
			sf_str_addf(o, "       not shown: %s\n", ds->problem);
	}
}

int tet_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_file *tf = p->arg;
	struct sf_str o = { 0 };
	sf_str_addf(&o, "file: %s\nsize: %llu bytes  layout_version: %u  datasets: %u  chunks: %llu\n\n",
		    base_name(tf->path), (unsigned long long)tf->len, tf->version,
		    tf->dataset_count, (unsigned long long)tf->entry_count);
	sf_str_addf(&o, "layout:\n  layout_version:    %u\n  dataset_count:     %u\n"
		    "  flags:             %u (history_footer=%s)\n  chunk_index_offset: %llu\n"
		    "  chunk_index_length: %llu\n\n", tf->version, tf->dataset_count, tf->flags,
		    tf->flags & 1 ? "true" : "false", (unsigned long long)tf->index_off,
		    (unsigned long long)tf->index_len);
	sf_str_add(&o, "execution (file defaults):\n", 27);
	if (!tf->budget_bps && !tf->budget_bytes)
		sf_str_addf(&o, "  (engine defaults — 25%% host RAM when unset in query JSON)\n");
	if (tf->budget_bps)
		sf_str_addf(&o, "  memory_budget_percent: %g\n", tf->budget_bps / 100.0);
	if (tf->budget_bytes)
		sf_str_addf(&o, "  memory_budget_bytes: %u\n", tf->budget_bytes);
	sf_str_addc(&o, '\n');
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(tf->metadata, "file"), k, v)
		sf_str_addf(&o, "file %s: %s\n", k, json_string_value(v));
	dataset_lines(&o, tf);
	sf_str_addc(&o, '\n');
	chunk_lines(&o, tf);
	sf_str_addc(&o, '\n');
	history_lines(&o, tf->history);
	if (tf->footer_error)
		sf_str_addf(&o, "\nfooter: damaged: %s\n", tf->footer_error);
	*out = sf_str_take(&o);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: info.txt: out of memory", tf->path);
}

json_t *tet_json_u64s(const uint64_t *v, uint32_t n)
{
	json_t *a = json_array();
	for (uint32_t i = 0; i < n; i++)
		json_array_append_new(a, sf_json_u64(v[i]));
	return a;
}

static json_t *dataset_json(const struct tet_dataset *ds)
{
	const struct tet_entry *en = ds->file->entries;
	bool raw = false, zstd = false;
	for (uint64_t k = 0; k < ds->file->entry_count; k++)
		if (en[k].dataset_id == ds->id)
			*(en[k].codec == TET_RAW ? &raw : &zstd) = true;
	json_t *codecs = json_array();
	if (raw)
		json_array_append_new(codecs, json_string("raw"));
	if (zstd)
		json_array_append_new(codecs, json_string("zstd"));
	json_t *zc = ds->zero_copy ? json_pack("[I,I]", (json_int_t)ds->zero_copy_off,
					       (json_int_t)ds->nbytes) : json_null();
	json_t *d = json_object();
	json_object_set_new(d, "chunk_count", json_integer((json_int_t)ds->nentries));
	json_object_set_new(d, "chunk_shape", tet_json_u64s(ds->cshape, ds->ndim));
	json_object_set_new(d, "codecs", codecs);
	json_object_set_new(d, "dtype", json_integer(ds->dtype));
	json_object_set_new(d, "dtype_name", json_string(ds->dtype_name));
	json_object_set_new(d, "entry", ds->problem ? json_null() : json_string(ds->path));
	json_object_set_new(d, "grid", ds->problem ? json_null() : tet_json_u64s(ds->grid, ds->ndim));
	json_object_set_new(d, "id", json_integer(ds->id));
	json_object_set_new(d, "name", sf_json_bytes_as_text(ds->name, ds->name_len));
	json_object_set_new(d, "numpy", ds->descr ? json_string(ds->descr) : json_null());
	json_object_set_new(d, "problem", ds->problem ? json_string(ds->problem) : json_null());
	json_object_set_new(d, "shape", tet_json_u64s(ds->shape, ds->ndim));
	json_object_set_new(d, "zero_copy_span", zc);
	return d;
}

static json_t *chunk_json(const struct tet_entry *en)
{
	return json_pack("{s:o, s:i, s:o, s:I, s:o, s:I}", "chunk_index",
			 tet_json_u64s(en->coords, TET_MAX_DIM), "codec", (int)en->codec, "dataset_id",
			 sf_json_u64(en->dataset_id), "payload_offset", (json_int_t)en->off,
			 "raw_byte_len", sf_json_u64(en->raw), "stored_byte_len", (json_int_t)en->stored);
}

int tet_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tet_file *tf = p->arg;
	json_t *chunks = json_array(), *dss = json_array();
	for (uint64_t k = 0; k < tf->entry_count; k++)
		json_array_append_new(chunks, chunk_json(&tf->entries[k]));
	for (uint32_t i = 0; i < tf->dataset_count; i++)
		json_array_append_new(dss, dataset_json(&tf->ds[i]));
	json_t *flags = json_array();
	if (tf->flags & 1)
		json_array_append_new(flags, json_string("history_footer"));
	json_t *footer = json_pack("{s:o, s:I, s:I, s:b, s:I, s:I}",
				   "error", tf->footer_error ? json_string(tf->footer_error) : json_null(),
				   "json_len", (json_int_t)tf->json_len,
				   "payload_limit", (json_int_t)tf->payload_bound,
				   "present", tf->footer,
				   "spill_len", (json_int_t)tf->spill_len,
				   "spill_offset", (json_int_t)tf->spill_off);
	json_t *summary = json_pack(
		"{s:o, s:o, s:{s:I, s:i}, s:o, s:o, s:{s:I, s:I, s:I, s:o, s:I, s:I}}",
		"chunks", chunks, "datasets", dss,
		"file_execution", "memory_budget_bytes", (json_int_t)tf->budget_bytes,
		"memory_budget_percent_bps", (int)tf->budget_bps,
		"history", tf->history ? json_copy(tf->history) : json_array(),
		"metadata", tf->metadata ? json_copy(tf->metadata) : json_object(),
		"superblock", "chunk_index_length", (json_int_t)tf->index_len,
		"chunk_index_offset", (json_int_t)tf->index_off, "dataset_count",
		(json_int_t)tf->dataset_count, "flag_names", flags, "flags", (json_int_t)tf->flags,
		"layout_version", (json_int_t)tf->version);
	json_t *j = json_pack("{s:I, s:n, s:o, s:o, s:o}", "file_len", (json_int_t)tf->len,
			      "filter", "footer", footer, "path",
			      sf_json_bytes_as_text(tf->path, strlen(tf->path)), "summary", summary);
	*out = j ? sf_json_pretty(j) : NULL;
	json_decref(j);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: info.json: out of memory", tf->path);
}
