/* A shard's .shardfs/ files: info.txt, info.json (header, layout, the
 * manifest entry it belongs to) and verify (fingerprint and cross-checks
 * against the manifest, spec shardlake §2.5 and §3). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sf_bytes.h"
#include "sf_json.h"
#include "sf_report.h"
#include "sl_codebook.h"
#include "sl_manifest.h"
#include "sl.h"

/* The shard's manifest and its entry there, loaded per use (these files are
 * read rarely, and a parsed manifest is not worth keeping per shard). */
struct mf {
	json_t *root;  /* NULL when absent or unparseable */
	json_t *entry; /* NULL when the manifest has none for this shard */
	bool absent;   /* no manifest file at all */
	char err[sizeof(struct sf_err)];
};

static void mf_load(const struct sl_sidx *s, struct mf *m)
{
	memset(m, 0, sizeof *m);
	if (!s->manifest) {
		m->absent = true;
		memcpy(m->err, s->manifest_err.msg, sizeof m->err);
		return;
	}
	struct sf_err e = { { 0 } };
	if (sl_manifest_parse(s->manifest, s->manifest->path, &m->root, &e)) {
		memcpy(m->err, e.msg, sizeof m->err);
		return;
	}
	m->entry = sl_manifest_entry(m->root, s->name);
	if (!m->entry)
		snprintf(m->err, sizeof m->err, "%s: no shards[] entry whose artifact_key names %s",
			 s->manifest->path, s->name);
}

static const char *mf_codec(const struct mf *m)
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
	struct mf m;
	mf_load(s, &m);
	if (!m.root) {
		sf_str_addf(&t, "manifest         %s\n", m.err);
	} else {
		json_t *r = m.root;
		sf_str_addf(&t, "manifest         %s\n", s->manifest->path);
		sf_str_addf(&t, "  index version  %s\n", json_string_value(json_object_get(r, "index_version")) ?: "?");
		sf_str_addf(&t, "  dataset        %s\n", json_string_value(json_object_get(r, "dataset_version")) ?: "?");
		sf_str_addf(&t, "  metric         %s\n", json_string_value(json_object_get(r, "distance_metric")) ?: "?");
		sf_str_addf(&t, "  dims           %" JSON_INTEGER_FORMAT "\n", json_integer_value(json_object_get(r, "dims")));
		sf_str_addf(&t, "  codec          %s\n", mf_codec(&m));
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
	json_decref(m.root);
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
	struct mf m;
	mf_load(s, &m);
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
		json_object_set_new(mj, "codec", json_string(mf_codec(&m)));
		json_object_set(mj, "entry", m.entry ? m.entry : json_null());
	}
	if (!m.root || !m.entry)
		json_object_set_new(mj, "error", sf_json_bytes_as_text(m.err, strlen(m.err)));
	json_object_set_new(j, "manifest", mj);
	json_decref(m.root);
	struct sf_buf *b = sf_json_pretty(j);
	json_decref(j);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}

/* ---- verify ------------------------------------------------------------ */

/* Each manifest number the shard must agree with (absent keys are not
 * checked: older manifests lack some). */
static void check_count(struct sf_report *r, json_t *obj, const char *key, uint64_t have,
			bool error, const char *what)
{
	json_t *v = json_object_get(obj, key);
	if (v && (!json_is_integer(v) || (uint64_t)json_integer_value(v) != have))
		sf_report_add(r, error, "%s mismatch: manifest %s is %" JSON_INTEGER_FORMAT ", the shard has %" PRIu64,
			      what, key, json_integer_value(v), have);
}

/* The manifest's centroid (f32 printed as JSON) must be bit-equal to the
 * shard's first centroid; null is what serde writes for a non-finite one. */
static void check_centroid(struct sf_report *r, const struct sl_sidx *s, json_t *c)
{
	const struct sl_shard *h = &s->hdr;
	if (!json_is_array(c) || json_array_size(c) != h->dims) {
		sf_report_add(r, true, "centroid mismatch: the manifest centroid has %zu values, dims is %u",
			      json_array_size(c), h->dims);
		return;
	}
	if (h->ncentroids == 0) {
		sf_report_add(r, true, "centroid mismatch: the manifest has a centroid, the shard none");
		return;
	}
	const uint8_t *sc = s->map->data + h->centroids_off;
	for (uint32_t i = 0; i < h->dims; i++) {
		json_t *x = json_array_get(c, i);
		float have = sf_lef32(sc + 4 * (uint64_t)i);
		bool same;
		if (json_is_null(x)) {
			same = !isfinite(have);
		} else {
			float want = (float)json_number_value(x);
			same = json_is_number(x) && memcmp(&want, &have, 4) == 0;
		}
		if (!same) {
			char a[32], b[32];
			sf_fmt_f32(a, (float)json_number_value(x));
			sf_fmt_f32(b, have);
			sf_report_add(r, true, "centroid mismatch at dimension %u: manifest %s, shard %s", i, a, b);
			return;
		}
	}
}

static void check_manifest(struct sf_report *r, const struct sl_sidx *s, const struct mf *m,
			   uint64_t fp)
{
	const struct sl_shard *h = &s->hdr;
	const char *want = sl_entry_fingerprint(m->entry);
	char have[17];
	snprintf(have, sizeof have, "%016" PRIx64, fp);
	/* upstream compares the texts exactly */
	if (!want)
		sf_report_add(r, true, "the manifest entry has no fingerprint (sha256) to compare with %s", have);
	else if (strcmp(want, have) != 0)
		sf_report_add(r, true, "fingerprint mismatch: manifest %s, actual %s", want, have);
	check_count(r, m->root, "dims", h->dims, true, "dimension");
	check_count(r, m->entry, "vector_count", h->nrecords, true, "vector count");
	check_count(r, m->entry, "shard_id", h->shard_id, false, "shard id");
	json_t *c = json_object_get(m->entry, "centroid");
	if (c)
		check_centroid(r, s, c);
	bool pq = strcmp(mf_codec(m), "pq8") == 0;
	if (pq != (h->version == 2))
		sf_report_add(r, true, "the manifest codec is %s, but the shard has format version %u",
			      mf_codec(m), h->version);
	if (pq && h->version == 2) {
		json_t *comp = json_object_get(m->root, "compression");
		check_count(r, comp, "pq_num_subspaces", h->pq_m, true, "PQ M");
		check_count(r, comp, "pq_codebook_size", h->pq_k, true, "PQ K");
	}
}

static void check_codes(struct sf_report *r, const struct sl_sidx *s)
{
	const struct sl_shard *h = &s->hdr;
	uint64_t first = 0;
	uint32_t sub = 0;
	uint64_t bad = sl_bad_codes(s, h->pq_k, &first, &sub);
	if (bad)
		sf_report_add(r, true, "%" PRIu64 " PQ codes are not below K=%u (first in record %" PRIu64 ")",
			      bad, h->pq_k, first);
	struct sl_codebook cb;
	struct sf_err e = { { 0 } };
	if (!s->codebook)
		sf_report_add(r, false, "no PQ codebook beside the index (%s): reconstructed.npy is not offered",
			      s->codebook_err.msg);
	else if (sl_codebook_for(s, &cb, &e))
		sf_report_add(r, true, "codebook: %s", e.msg);
}

int sl_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	struct sf_report r = { 0 };
	uint64_t fp = sl_fnv1a(SL_FNV_INIT, s->map->data, s->map->size);
	struct mf m;
	mf_load(s, &m);
	if (m.absent)
		sf_report_add(&r, false, "no manifest (%s): fingerprint %016" PRIx64 " not compared", m.err, fp);
	else if (!m.entry)
		sf_report_add(&r, true, "manifest: %s", m.err);
	else
		check_manifest(&r, s, &m, fp);
	json_decref(m.root);
	if (h->version == 2)
		check_codes(&r, s);
	if (h->trailing)
		sf_report_add(&r, false, "%" PRIu64 " trailing bytes after the records (upstream ignores them)",
			      h->trailing);
	*out = sf_report_take(&r);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
}
