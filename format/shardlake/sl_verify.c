/* A shard's .shardfs/verify: fingerprint and cross-checks against the
 * manifest (spec shardlake §2.5 and §3). */
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
#include "sf_view_impl.h"

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
	struct sf_win w = { .m = s->map };
	uint64_t end = h->centroids_off + h->centroids_len;
	for (uint32_t i = 0; i < h->dims; i++) {
		json_t *x = json_array_get(c, i);
		const uint8_t *sc;
		struct sf_err e;
		if (sf_win_get(&w, h->centroids_off + 4 * (uint64_t)i, 4, end, &sc, "centroids", &e)) {
			sf_report_add(r, true, "centroids: %s", e.msg);
			break;
		}
		float have = sf_lef32(sc);
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
			break;
		}
	}
	sf_win_free(&w);
}

static void check_manifest(struct sf_report *r, const struct sl_sidx *s, const struct sl_mf *m,
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
	bool pq = strcmp(sl_mf_codec(m), "pq8") == 0;
	if (pq != (h->version == 2))
		sf_report_add(r, true, "the manifest codec is %s, but the shard has format version %u",
			      sl_mf_codec(m), h->version);
	if (pq && h->version == 2) {
		json_t *comp = json_object_get(m->root, "compression");
		check_count(r, comp, "pq_num_subspaces", h->pq_m, true, "PQ M");
		check_count(r, comp, "pq_codebook_size", h->pq_k, true, "PQ K");
	}
}

static void check_codes(struct sf_report *r, const struct sl_sidx *s)
{
	const struct sl_shard *h = &s->hdr;
	uint64_t first = 0, bad = 0;
	uint32_t sub = 0;
	uint8_t code;
	struct sf_err be;
	if (sl_bad_codes(s, h->pq_k, &bad, &first, &sub, &code, &be))
		sf_report_add(r, true, "PQ codes: %s", be.msg);
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
	uint64_t fp = SL_FNV_INIT, size = s->map->size;
	struct sf_win w = { .m = s->map };
	int rc = 0;
	for (uint64_t at = 0, k; at < size && !rc; at += k) {
		const uint8_t *b;
		k = size - at < 65536 ? size - at : 65536;
		if (!(rc = sf_win_get(&w, at, (size_t)k, size, &b, "fingerprint", e)))
			fp = sl_fnv1a(fp, b, k);
	}
	sf_win_free(&w);
	struct sl_mf m;
	if (!rc)
		rc = sl_mf_load(s, cache, &m, e);
	if (rc)
		return rc;
	if (m.absent)
		sf_report_add(&r, false, "no manifest (%s): fingerprint %016" PRIx64 " not compared", m.err, fp);
	else if (!m.entry)
		sf_report_add(&r, true, "manifest: %s", m.err);
	else
		check_manifest(&r, s, &m, fp);
	sl_mf_free(&m);
	if (h->version == 2)
		check_codes(&r, s);
	if (h->trailing)
		sf_report_add(&r, false, "%" PRIu64 " trailing bytes after the records (upstream ignores them)",
			      h->trailing);
	*out = sf_report_take(&r);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
}
