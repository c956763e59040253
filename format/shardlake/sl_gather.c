/* The strided views of a shard: ids, vectors or codes copied out of the
 * records, and PQ codes decoded through the codebook. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "sl_codebook.h"
#include "sl_sidx.h"

int sl_produce_field(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	uint64_t skip = p->aux == SL_FIELD_ID ? 0 : 8;
	uint64_t width = p->aux == SL_FIELD_ID ? 8 : h->record_size - 8;
	/* N*width <= N*record_size, which the header check bounded by the file */
	struct sf_buf *b = sf_buf_new((size_t)(h->nrecords * width));
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	const uint8_t *rec = s->map->data + h->records_off + skip;
	for (uint64_t i = 0; i < h->nrecords; i++, rec += h->record_size)
		memcpy(b->data + i * width, rec, width);
	*out = b;
	return 0;
}

int sl_produce_ids_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	struct sf_str t = { 0 };
	const uint8_t *rec = s->map->data + h->records_off;
	for (uint64_t i = 0; i < h->nrecords; i++, rec += h->record_size)
		sf_str_addf(&t, "%" PRIu64 "\n", sf_le64(rec));
	struct sf_buf *b = sf_str_take(&t);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	*out = b;
	return 0;
}

int sl_codebook_for(const struct sl_sidx *s, struct sl_codebook *cb, struct sf_err *e)
{
	const struct sf_map *m = s->codebook;
	int rc = sl_codebook_parse(m->data, m->size, m->path, cb, e);
	if (rc)
		return rc;
	if (cb->dims != s->hdr.dims || cb->m != s->hdr.pq_m)
		return sf_fail(e, -EIO, "%s: codebook has dims=%u M=%u, the shard dims=%u M=%u",
			       m->path, cb->dims, cb->m, s->hdr.dims, s->hdr.pq_m);
	return 0;
}

/* vector[m*sub_dims + j] = codebook[m][code[m]][j] (spec §5.2). */
int sl_produce_reconstructed(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct sl_sidx *s = p->arg;
	const struct sl_shard *h = &s->hdr;
	struct sl_codebook cb;
	int rc = sl_codebook_for(s, &cb, e);
	if (rc)
		return rc;
	uint64_t row = (uint64_t)h->dims * 4, sub = (uint64_t)cb.sub_dims * 4;
	struct sf_buf *b = sf_buf_new((size_t)(h->nrecords * row));
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", p->view->path, p->what);
	const uint8_t *rec = s->map->data + h->records_off;
	for (uint64_t i = 0; i < h->nrecords; i++, rec += h->record_size) {
		for (uint32_t m = 0; m < h->pq_m; m++) {
			uint8_t code = rec[8 + m];
			if (code >= h->pq_k || code >= cb.k) {
				sf_buf_unref(b);
				return sf_fail(e, -EIO, "%s: %s: record %" PRIu64 " sub-space %u: code %u is not below K=%u",
					       p->view->path, p->what, i, m, code,
					       h->pq_k < cb.k ? h->pq_k : cb.k);
			}
			memcpy(b->data + i * row + m * sub,
			       cb.centroids + ((uint64_t)m * cb.k + code) * sub, sub);
		}
	}
	*out = b;
	return 0;
}
