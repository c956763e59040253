/* A shard's .shardfs/info.txt and info.json: header, layout, the manifest
 * entry it belongs to. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "sl_manifest.h"
#include "sl.h"
#include "sf_view_impl.h"

int sl_mf_load(const struct sl_sidx *s, struct sf_cache *cache, struct sl_mf *m,
	       struct sf_err *e)
{
	memset(m, 0, sizeof *m);
	if (!s->manifest) {
		m->absent = true;
		memcpy(m->err, s->manifest_err.msg, sizeof m->err);
		return 0;
	}
	const struct sf_map *mf = s->manifest;
	/* the copy for as long as it is parsed, then the parse */
	int rc = sf_cache_charge(cache, mf->size, mf->path, "copying it", e);
	if (rc)
		return rc;
	uint8_t *p;
	rc = sf_map_copy(mf, 0, mf->size, &p, "manifest", e);
	uint64_t cost = rc ? 0 : sf_json_parse_cost(p, mf->size);
	if (!rc)
		rc = sf_cache_charge(cache, cost, mf->path, "parsing it", e);
	if (rc) {
		free(p);
		sf_cache_uncharge(cache, mf->size);
		return rc;
	}
	m->cache = cache;
	m->charged = cost;
	struct sf_err pe = { { 0 } };
	rc = sl_manifest_parse(p, mf->size, mf->path, &m->root, &pe);
	free(p);
	sf_cache_uncharge(cache, mf->size);
	if (rc) {
		memcpy(m->err, pe.msg, sizeof m->err);
		return 0;
	}
	m->entry = sl_manifest_entry(m->root, s->name);
	if (!m->entry)
		snprintf(m->err, sizeof m->err, "%s: no shards[] entry whose artifact_key names %s",
			 s->manifest->path, s->name);
	return 0;
}

void sl_mf_free(struct sl_mf *m)
{
	json_decref(m->root);
	m->root = m->entry = NULL;
	if (m->charged)
		sf_cache_uncharge(m->cache, m->charged);
	m->charged = 0;
}

const char *sl_mf_codec(const struct sl_mf *m)
{
	const char *c = json_string_value(json_object_get(json_object_get(m->root, "compression"), "codec"));
	return c ? c : "none";
}

static const char *version_text(uint32_t v)
{
	return v == 1 ? "raw f32 vectors" : "8-bit PQ codes";
}

static int take(struct sf_str *t, const struct sf_part *p, struct sf_buf **out, struct sf_err *e)
{
	struct sf_buf *b = sf_str_take(t);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}

int sl_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	struct sf_str t = { 0 };
	sf_str_addf(&t, "shardlake shard %s\n", p->view->path);
	sf_str_addf(&t, "format version   %u (%s)\n", h->version, version_text(h->version));
	sf_str_addf(&t, "shard id         %u\n", h->shard_id);
	sf_str_addf(&t, "dims             %u\n", h->dims);
	if (h->version == 2)
		sf_str_addf(&t, "pq               M=%u sub-spaces, K=%u codes\n", h->pq_m, h->pq_k);
	sf_str_addf(&t, "centroids        %u at offset %" PRIu64 " (%" PRIu64 " bytes)\n",
		    h->ncentroids, h->centroids_off, h->centroids_len);
	sf_str_addf(&t, "records          %" PRIu64 " x %" PRIu64 " bytes at offset %" PRIu64
		    " (%" PRIu64 " bytes)\n", h->nrecords, h->record_size, h->records_off, h->records_len);
	sf_str_addf(&t, "trailing bytes   %" PRIu64 "\n", h->trailing);
	sf_str_addf(&t, "file size        %" PRIu64 "\n", h->file_size);
	struct sl_mf m;
	int rc = sl_mf_load(s, cache, &m, e);
	if (rc) {
		sf_str_free(&t);
		return rc;
	}
	if (!m.root) {
		sf_str_addf(&t, "manifest         %s\n", m.err);
	} else {
		json_t *r = m.root;
		sf_str_addf(&t, "manifest         %s\n", s->manifest->path);
		sf_str_addf(&t, "  index version  %s\n", json_string_value(json_object_get(r, "index_version")) ?: "?");
		sf_str_addf(&t, "  dataset        %s\n", json_string_value(json_object_get(r, "dataset_version")) ?: "?");
		sf_str_addf(&t, "  metric         %s\n", json_string_value(json_object_get(r, "distance_metric")) ?: "?");
		sf_str_addf(&t, "  dims           %" JSON_INTEGER_FORMAT "\n", json_integer_value(json_object_get(r, "dims")));
		sf_str_addf(&t, "  codec          %s\n", sl_mf_codec(&m));
		if (!m.entry) {
			sf_str_addf(&t, "  entry          none: %s\n", m.err);
		} else {
			json_t *n = m.entry;
			sf_str_addf(&t, "  entry shard id %" JSON_INTEGER_FORMAT "\n", json_integer_value(json_object_get(n, "shard_id")));
			sf_str_addf(&t, "  artifact key   %s\n", json_string_value(json_object_get(n, "artifact_key")));
			sf_str_addf(&t, "  vector count   %" JSON_INTEGER_FORMAT "\n", json_integer_value(json_object_get(n, "vector_count")));
			sf_str_addf(&t, "  fingerprint    %s\n", sl_entry_fingerprint(n) ?: "(none)");
		}
	}
	sl_mf_free(&m);
	return take(&t, p, out, e);
}

static json_t *span(uint64_t off, uint64_t size)
{
	return json_pack("{s:I,s:I,s:s}", "offset", (json_int_t)off, "size", (json_int_t)size,
			 "codec", "none");
}

int sl_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	json_t *j = json_object();
	json_object_set_new(j, "format", json_string("shardlake sidx"));
	json_object_set_new(j, "path", sf_json_bytes_as_text(p->view->path, strlen(p->view->path)));
	json_t *hd = json_pack("{s:s,s:I,s:s,s:I,s:I,s:I,s:I}", "magic", "SLKIDX\\0\\0",
			       "format_version", (json_int_t)h->version, "layout", version_text(h->version),
			       "shard_id", (json_int_t)h->shard_id, "dims", (json_int_t)h->dims,
			       "centroid_count", (json_int_t)h->ncentroids,
			       "vector_count", (json_int_t)h->nrecords);
	if (h->version == 2) {
		json_object_set_new(hd, "pq_m", json_integer(h->pq_m));
		json_object_set_new(hd, "pq_k", json_integer(h->pq_k));
	}
	json_object_set_new(j, "header", hd);
	json_t *parts = json_object();
	json_object_set_new(parts, "header", span(0, h->header_size));
	json_object_set_new(parts, "centroids", span(h->centroids_off, h->centroids_len));
	json_t *rec = span(h->records_off, h->records_len);
	json_object_set_new(rec, "record_size", json_integer((json_int_t)h->record_size));
	json_object_set_new(parts, "records", rec);
	if (h->trailing)
		json_object_set_new(parts, "trailing", span(h->file_size - h->trailing, h->trailing));
	json_object_set_new(j, "parts", parts);
	json_object_set_new(j, "file_size", json_integer((json_int_t)h->file_size));
	struct sl_mf m;
	int rc = sl_mf_load(s, cache, &m, e);
	if (rc) {
		json_decref(j);
		return rc;
	}
	json_t *mj = json_object();
	if (s->manifest)
		json_object_set_new(mj, "path", sf_json_bytes_as_text(s->manifest->path, strlen(s->manifest->path)));
	if (m.root) {
		static const char *const keys[] = { "manifest_version", "index_version", "dataset_version",
						    "dims", "distance_metric" };
		for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
			json_t *v = json_object_get(m.root, keys[i]);
			if (v)
				json_object_set(mj, keys[i], v);
		}
		json_object_set_new(mj, "codec", json_string(sl_mf_codec(&m)));
		json_object_set(mj, "entry", m.entry ? m.entry : json_null());
	}
	if (!m.root || !m.entry)
		json_object_set_new(mj, "error", sf_json_bytes_as_text(m.err, strlen(m.err)));
	json_object_set_new(j, "manifest", mj);
	struct sf_buf *b = sf_json_pretty(j);
	json_decref(j);
	sl_mf_free(&m); /* the entry was part of j until now */
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}
