/* The strided views of a shard: ids, vectors or codes copied out of the
 * records, and PQ codes decoded through the codebook. Each read copies only
 * its own range out of the file, a window of records at a time: a gathered
 * array held whole could exceed the cache budget, and would then be
 * gathered again for every read of it. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#include "sf_bytes.h"
#include "sf_read.h"
#include "sl_codebook.h"
#include "sl.h"
#include "sf_view_impl.h"

/* Copies bytes [off, off + len) of the array made of the `width` bytes at
 * `skip` in every record. The daemon keeps the range inside N * width, and
 * the header check kept every record inside the file. */
static int gather(const struct sl_sidx *s, uint64_t skip, uint64_t width, uint64_t off,
		  uint8_t *out, size_t len, struct sf_err *e)
{
	const struct sl_shard *h = &s->hdr;
	struct sf_win w = { .m = s->map };
	uint64_t rec = h->records_off + off / width * h->record_size + skip, end = sl_records_end(h);
	uint64_t at = off % width;
	int rc = 0;
	while (len && !rc) {
		size_t k = width - at < len ? (size_t)(width - at) : len;
		const uint8_t *p;
		if (!(rc = sf_win_get(&w, rec + at, k, end, &p, "records", e)))
			memcpy(out, p, k);
		out += k;
		len -= k;
		rec += h->record_size;
		at = 0;
	}
	sf_win_free(&w);
	return rc;
}

int sl_gen_ids(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c,
	       struct sf_err *e)
{
	return gather(arg, 0, 8, off, out, len, e);
}

int sl_gen_payload(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c,
		   struct sf_err *e)
{
	const struct sl_sidx *s = arg;
	return gather(s, 8, s->hdr.record_size - 8, off, out, len, e);
}

int sl_ids_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	struct sf_str t = { 0 };
	struct sf_win w = { .m = s->map };
	uint64_t rec = h->records_off;
	const uint8_t *id;
	int rc = 0;
	for (uint64_t i = 0; i < h->nrecords && !rc; i++, rec += h->record_size)
		if (!(rc = sf_win_get(&w, rec, 8, sl_records_end(h), &id, "records", e)))
			sf_str_addf(&t, "%" PRIu64 "\n", sf_le64(id));
	sf_win_free(&w);
	if (rc) {
		sf_str_free(&t);
		return rc;
	}
	struct sf_buf *b = sf_str_take(&t);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}

int sl_codebook_for(const struct sl_sidx *s, struct sl_codebook *cb, struct sf_err *e)
{
	const struct sf_map *m = s->codebook;
	uint8_t head[SL_CODEBOOK_HEAD] = { 0 };
	int rc = sf_map_read(m, 0, m->size < sizeof head ? m->size : sizeof head, head, "header", e);
	if (!rc)
		rc = sl_codebook_parse(head, m->size, m->path, cb, e);
	if (rc)
		return rc;
	if (cb->dims != s->hdr.dims || cb->m != s->hdr.pq_m)
		return sf_fail(e, -EIO, "%s: codebook has dims=%u M=%u, the shard dims=%u M=%u",
			       m->path, cb->dims, cb->m, s->hdr.dims, s->hdr.pq_m);
	return 0;
}

int sl_centroids_load(const struct sl_sidx *s, struct sf_cache *c, struct sl_codebook *cb,
		      struct sf_err *e)
{
	int rc = sl_codebook_for(s, cb, e);
	if (!rc)
		rc = sf_cache_charge(c, cb->len, s->codebook->path, "its centroids", e);
	if (rc)
		return rc;
	rc = sf_map_copy(s->codebook, SL_CODEBOOK_HEAD, cb->len, &cb->own, "centroids", e);
	if (rc)
		sf_cache_uncharge(c, cb->len);
	cb->centroids = cb->own;
	return rc;
}

void sl_centroids_free(struct sl_codebook *cb, struct sf_cache *c)
{
	free(cb->own);
	sf_cache_uncharge(c, cb->len);
}

int sl_bad_codes(const struct sl_sidx *s, uint32_t limit, uint64_t *bad, uint64_t *rec,
		 uint32_t *sub, uint8_t *code, struct sf_err *e)
{
	const struct sl_shard *h = &s->hdr;
	struct sf_win w = { .m = s->map };
	uint64_t r = h->records_off;
	const uint8_t *p;
	int rc = 0;
	*bad = 0;
	for (uint64_t i = 0; i < h->nrecords && !rc; i++, r += h->record_size)
		for (uint32_t m = 0; m < h->pq_m && !rc; m++)
			if (!(rc = sf_win_get(&w, r + 8 + m, 1, sl_records_end(h), &p, "records", e)) &&
			    *p >= limit && (*bad)++ == 0) {
				*rec = i;
				*sub = m;
				*code = *p;
			}
	sf_win_free(&w);
	return rc;
}

/* Every code must be below both the shard's and the codebook's K before any
 * of reconstructed.npy is served: a bad code anywhere fails every read, so
 * the array is never seen in part. Checked once when all codes fit; a shard
 * with a bad code is scanned again by each (failing) read. */
static int codes_fit(struct sl_sidx *s, const struct sl_codebook *cb, struct sf_err *e)
{
	const struct sl_shard *h = &s->hdr;
	if (atomic_load(&s->codes_fit))
		return 0;
	uint32_t limit = h->pq_k < cb->k ? h->pq_k : cb->k, sub = 0;
	uint64_t rec = 0, bad;
	uint8_t code = 0;
	int rc = sl_bad_codes(s, limit, &bad, &rec, &sub, &code, e);
	if (rc)
		return rc;
	if (bad == 0) {
		atomic_store(&s->codes_fit, true);
		return 0;
	}
	return sf_fail(e, -EIO, "%s: reconstructed.npy: record %" PRIu64 " sub-space %u: code %u is not below K=%u",
		       s->map->path, rec, sub, code, limit);
}

/* vector[m*sub_dims + j] = codebook[m][code[m]][j] (spec §5.2), for the
 * bytes [off, off + len) of the N x dims array. */
int sl_gen_reconstructed(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c,
			 struct sf_err *e)
{
	struct sl_sidx *s = arg;
	const struct sl_shard *h = &s->hdr;
	struct sl_codebook cb;
	int rc = sl_centroids_load(s, c, &cb, e);
	if (rc)
		return rc;
	rc = codes_fit(s, &cb, e);
	/* sl_codebook_for made dims = M * sub_dims, so a row is M sub-vectors */
	uint64_t row = (uint64_t)h->dims * 4, sub = (uint64_t)cb.sub_dims * 4;
	uint64_t rec = h->records_off + off / row * h->record_size;
	uint64_t at = off % row;
	struct sf_win w = { .m = s->map };
	const uint8_t *code;
	while (len && !rc) {
		uint64_t m = at / sub, in = at % sub;
		size_t k = sub - in < len ? (size_t)(sub - in) : len;
		if ((rc = sf_win_get(&w, rec + 8 + m, 1, sl_records_end(h), &code, "records", e)))
			break;
		memcpy(out, cb.centroids + (m * cb.k + *code) * sub + in, k);
		out += k;
		len -= k;
		at += k;
		if (at == row) {
			rec += h->record_size;
			at = 0;
		}
	}
	sf_win_free(&w);
	sl_centroids_free(&cb, c);
	return rc;
}
