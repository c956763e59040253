/* .shardfs/ of a tatami view: info.txt in the shape of `tatami inspect`
 * (spec §18) and info.json with the same facts. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "sf_json.h"
#include "tat.h"
#include "sf_view_impl.h"

/* Go's %-Ns pads by runes, not bytes. */
static void add_padded(struct sf_str *s, const uint8_t *p, size_t len, size_t width)
{
	size_t runes = 0;
	for (size_t i = 0; i < len; i++)
		runes += (p[i] & 0xC0) != 0x80;
	sf_str_add(s, p, len);
	for (; runes < width; runes++)
		sf_str_addc(s, ' ');
}

struct colsum {
	uint64_t values, nulls, pages, raw, stored;
	uint8_t enc, codec, flags;
};

static struct colsum column_sum(const struct tat_file *tf, size_t col)
{
	struct colsum cs = { 0 };
	for (size_t g = 0; g < tf->ngroups; g++) {
		const struct tat_chunk *ch = tat_chunk_of(&tf->groups[g], col);
		if (!ch)
			continue;
		cs.values += ch->num_values;
		cs.nulls += ch->null_count;
		cs.pages += ch->num_pages;
		cs.raw += ch->total_uncompressed;
		cs.stored += ch->total_compressed;
		cs.enc = ch->encoding;
		cs.codec = ch->codec;
		cs.flags |= ch->flags;
	}
	return cs;
}

int tat_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tat_file *tf = p->arg;
	struct sf_str s = { 0 };
	char b1[16], b2[16];
	sf_str_addf(&s, "file:    %s\nversion: %u.%u\nrows:    %" PRIu64 "\ngroups:  %zu\n", tf->name,
		    tf->vmajor, tf->vminor, tf->st_rows, tf->ngroups);
	sf_str_addf(&s, "role:    %s\n", tf->hflags & TAT_H_SEARCH ? "search-segment" : "document-store");
	sf_str_addf(&s, "size:    %" PRIu64 " compressed / %" PRIu64 " uncompressed (%.2fx)\ncolumns:\n",
		    tf->st_stored, tf->st_raw,
		    tf->st_stored ? (double)tf->st_raw / (double)tf->st_stored : 1.0);
	for (size_t c = 0; c < tf->nfields; c++) {
		const struct tat_field *fd = &tf->fields[c];
		struct colsum cs = column_sum(tf, c);
		sf_str_add(&s, "  ", 2);
		add_padded(&s, fd->name.p, fd->name.len, 20);
		sf_str_addc(&s, ' ');
		const char *tn = tat_type_name(fd->type, b1);
		add_padded(&s, (const uint8_t *)tn, strlen(tn), 16);
		sf_str_addf(&s, " enc=%s codec=%s values=%" PRIu64 " nulls=%" PRIu64 " pages=%" PRIu64
			    " %" PRIu64 "->%" PRIu64 " bytes\n",
			    tat_enc_name(cs.enc, b1), tat_codec_name(cs.codec, b2), cs.values, cs.nulls,
			    cs.pages, cs.raw, cs.stored);
		if (fd->type == TAT_BLOBREF && fd->blob && fd->blob->nruns) {
			uint64_t raw = 0, stored = 0;
			for (size_t r = 0; r < fd->blob->nruns; r++) {
				raw += fd->blob->runs[r].usize;
				stored += fd->blob->runs[r].csize;
			}
			sf_str_addf(&s, "%25sblob region: %" PRIu64 "->%" PRIu64 " bytes in %zu runs%s\n", "",
				    raw, stored, fd->blob->nruns, fd->blob->dict_index ? ", shared dict" : "");
		}
		const char *idx[4];
		size_t n = 0;
		if (cs.flags & 1)
			idx[n++] = "zone-map";
		if (cs.flags & 4)
			idx[n++] = "page-index";
		if (cs.flags & 2)
			idx[n++] = "bloom";
		if (fd->flags & TAT_F_SORT_KEY)
			idx[n++] = "sort-key";
		if (n) {
			sf_str_addf(&s, "%25sindex: ", "");
			for (size_t i = 0; i < n; i++)
				sf_str_addf(&s, "%s%s", i ? ", " : "", idx[i]);
			sf_str_addc(&s, '\n');
		}
	}
	if (tf->sort_col >= 0) {
		const struct tat_field *fd = &tf->fields[tf->sort_col];
		sf_str_add(&s, "sorted:  by ", 12);
		sf_str_add(&s, fd->name.p, fd->name.len);
		sf_str_add(&s, " (sparse primary-key index)\n", 28);
	}
	if (tf->nblooms)
		sf_str_addf(&s, "blooms:  %zu membership filters\n", tf->nblooms);
	if (tf->ndicts) {
		uint64_t sum = 0;
		for (size_t i = 0; i < tf->ndicts; i++)
			sum += tf->dicts[i].length;
		sf_str_addf(&s, "dicts:   %zu (%" PRIu64 " uncompressed bytes)\n", tf->ndicts, sum);
	}
	sf_str_add(&s, "metadata:\n", 10);
	for (size_t i = 0; i < tf->nkv; i++) {
		sf_str_add(&s, "  ", 2);
		sf_str_add(&s, tf->kv[2 * i].p, tf->kv[2 * i].len);
		sf_str_add(&s, " = ", 3);
		sf_str_add(&s, tf->kv[2 * i + 1].p, tf->kv[2 * i + 1].len);
		sf_str_addc(&s, '\n');
	}
	*out = sf_str_take(&s);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
}

static json_t *hex_of(const uint8_t *p, size_t len)
{
	struct sf_str s = { 0 };
	for (size_t i = 0; i < len; i++)
		sf_str_addf(&s, "%02x", p[i]);
	json_t *j = json_stringn(s.p ? (const char *)s.p : "", s.len);
	sf_str_free(&s);
	return j;
}

static json_t *record_json(uint64_t off, uint64_t len)
{
	return json_pack("{s:I,s:I}", "offset", (json_int_t)off, "length", (json_int_t)len);
}

static json_t *chunk_json(const struct tat_chunk *ch)
{
	char b1[16], b2[16];
	json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s}",
		"column_id", (json_int_t)ch->column, "first_page_offset", (json_int_t)ch->first_page,
		"total_compressed", (json_int_t)ch->total_compressed,
		"total_uncompressed", (json_int_t)ch->total_uncompressed,
		"num_values", (json_int_t)ch->num_values, "null_count", (json_int_t)ch->null_count,
		"num_pages", (json_int_t)ch->num_pages, "encoding", tat_enc_name(ch->encoding, b1),
		"codec", tat_codec_name(ch->codec, b2));
	if (ch->flags & 1) {
		json_object_set_new(j, "zone_min", hex_of(ch->zmin.p, ch->zmin.len));
		json_object_set_new(j, "zone_max", hex_of(ch->zmax.p, ch->zmax.len));
	}
	if (ch->flags & 2)
		json_object_set_new(j, "bloom_ref", json_integer((json_int_t)ch->bloom_ref));
	if (ch->flags & 4)
		json_object_set_new(j, "page_index_offset", json_integer((json_int_t)ch->page_index));
	return j;
}

int tat_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tat_file *tf = p->arg;
	static const char *const flag_names[6] = {
		"sorted", "has_blob_region", "has_dict_region", "has_index_region",
		"role_search_segment", "block_tree_dict",
	};
	char b1[16];
	json_t *root = json_object(), *flags = json_array(), *schema = json_array();
	json_t *groups = json_array(), *blobs = json_array(), *dicts = json_array();
	json_t *blooms = json_array(), *kv = json_array();
	for (int i = 0; i < 6; i++)
		if (tf->hflags >> i & 1)
			json_array_append_new(flags, json_string(flag_names[i]));
	json_t *header = json_pack("{s:i,s:i,s:i,s:o,s:i,s:i,s:i,s:o,s:I,s:I,s:I,s:I}",
		"version_major", tf->vmajor, "version_minor", tf->vminor, "flags", tf->hflags,
		"flag_names", flags, "checksum_algo", tf->checksum_algo,
		"default_codec", tf->default_codec, "page_size_hint", (int)tf->page_hint,
		"uuid", hex_of(tf->uuid, 16), "row_count", (json_int_t)tf->row_count,
		"footer_offset", (json_int_t)tf->footer_off, "created_millis", (json_int_t)tf->created_ms,
		"creator_id", (json_int_t)tf->creator);
	for (size_t c = 0; c < tf->nfields; c++) {
		const struct tat_field *fd = &tf->fields[c];
		json_array_append_new(schema, json_pack("{s:o,s:s,s:i,s:i}",
			"name", sf_json_bytes_as_text(fd->name.p, fd->name.len),
			"type", tat_type_name(fd->type, b1), "flags", fd->flags, "element", fd->element));
	}
	for (size_t g = 0; g < tf->ngroups; g++) {
		const struct tat_group *gr = &tf->groups[g];
		json_t *chunks = json_array();
		for (size_t i = 0; i < gr->nchunks; i++)
			json_array_append_new(chunks, chunk_json(&gr->chunks[i]));
		json_t *jg = json_pack("{s:I,s:I,s:I,s:o}", "first_row", (json_int_t)gr->first_row,
			"num_rows", (json_int_t)gr->num_rows, "total_bytes", (json_int_t)gr->total_bytes,
			"chunks", chunks);
		if (gr->flags & 1) {
			json_object_set_new(jg, "sort_min", hex_of(gr->smin.p, gr->smin.len));
			json_object_set_new(jg, "sort_max", hex_of(gr->smax.p, gr->smax.len));
		}
		json_array_append_new(groups, jg);
	}
	for (size_t i = 0; i < tf->nblobs; i++) {
		const struct tat_blobcol *bc = &tf->blobs[i];
		json_t *runs = json_array();
		for (size_t r = 0; r < bc->nruns; r++)
			json_array_append_new(runs, json_pack("{s:I,s:I,s:I,s:I}",
				"record_offset", (json_int_t)bc->runs[r].offset,
				"compressed_size", (json_int_t)bc->runs[r].csize,
				"uncompressed_size", (json_int_t)bc->runs[r].usize,
				"num_values", (json_int_t)bc->runs[r].nvals));
		json_array_append_new(blobs, json_pack("{s:I,s:I,s:s,s:o}",
			"column_id", (json_int_t)bc->column, "dict_index", (json_int_t)bc->dict_index,
			"record_codec", tat_codec_name(bc->record_codec, b1), "runs", runs));
	}
	for (size_t i = 0; i < tf->ndicts; i++)
		json_array_append_new(dicts, record_json(tf->dicts[i].offset, tf->dicts[i].length));
	for (size_t i = 0; i < tf->nblooms; i++)
		json_array_append_new(blooms, record_json(tf->blooms[i].offset, tf->blooms[i].length));
	for (size_t i = 0; i < tf->nkv; i++)
		json_array_append_new(kv, json_pack("[o,o]",
			sf_json_bytes_as_text(tf->kv[2 * i].p, tf->kv[2 * i].len),
			sf_json_bytes_as_text(tf->kv[2 * i + 1].p, tf->kv[2 * i + 1].len)));
	json_object_set_new(root, "format", json_string("tatami"));
	json_object_set_new(root, "file", json_string(tf->name));
	json_object_set_new(root, "size", json_integer((json_int_t)tf->size));
	json_object_set_new(root, "header", header);
	json_object_set_new(root, "footer", record_json(tf->footer_off, tf->footer_len));
	json_object_set_new(root, "schema", schema);
	json_object_set_new(root, "row_groups", groups);
	json_object_set_new(root, "blob_columns", blobs);
	json_object_set_new(root, "dictionaries", dicts);
	json_object_set_new(root, "blooms", blooms);
	json_object_set_new(root, "key_value", kv);
	json_object_set_new(root, "stats", json_pack("{s:I,s:I,s:I}",
		"row_count", (json_int_t)tf->st_rows, "uncompressed_total", (json_int_t)tf->st_raw,
		"compressed_total", (json_int_t)tf->st_stored));
	if (tf->inv.present) {
		const struct tat_invert *v = &tf->inv;
		json_object_set_new(root, "inverted", json_pack("{s:o,s:o,s:o,s:o,s:I,s:I}",
			"term_dict", record_json(v->dict_off, v->dict_len),
			"postings", record_json(v->post_off, v->post_len),
			"skips", record_json(v->skip_off, v->skip_len),
			"live_docs", record_json(v->live_off, v->live_len),
			"num_terms", (json_int_t)v->num_terms, "num_docs", (json_int_t)v->num_docs));
	}
	*out = sf_json_pretty(root);
	json_decref(root);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
}
