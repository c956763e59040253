#include "sl_shard.h"

#include <errno.h>
#include <string.h>

#include "sf_bytes.h"

int sl_shard_parse(const uint8_t *p, uint64_t size, const char *path,
		   struct sl_shard *s, struct sf_err *e)
{
	memset(s, 0, sizeof *s);
	if (size < 32)
		return sf_fail(e, -EINVAL, "%s: header: %llu bytes, a shard has at least 32",
			       path, (unsigned long long)size);
	if (memcmp(p, SL_SIDX_MAGIC, 8) != 0)
		return sf_fail(e, -EINVAL, "%s: header: bad magic (not SLKIDX)", path);
	struct sf_cursor c = sf_cursor(p + 8, 24);
	s->version = sf_cur_u32(&c);
	s->shard_id = sf_cur_u32(&c);
	s->dims = sf_cur_u32(&c);
	s->ncentroids = sf_cur_u32(&c);
	s->nrecords = sf_cur_u64(&c);
	s->file_size = size;
	if (s->version != 1 && s->version != 2)
		return sf_fail(e, -EINVAL, "%s: header: unknown format version %u", path, s->version);
	if (s->dims == 0)
		return sf_fail(e, -EINVAL, "%s: header: dims is 0", path);
	s->header_size = 32;
	/* a v1 record is the id and dims f32 values; a v2 record the id and M codes */
	uint64_t payload;
	if (s->version == 2) {
		if (size < 40)
			return sf_fail(e, -EINVAL, "%s: header: %llu bytes, a PQ shard has at least 40",
				       path, (unsigned long long)size);
		s->pq_m = sf_le32(p + 32);
		s->pq_k = sf_le32(p + 36);
		s->header_size = 40;
		if (s->pq_m == 0)
			return sf_fail(e, -EINVAL, "%s: header: PQ sub-space count M is 0", path);
		if (s->pq_k == 0 || s->pq_k > 256)
			return sf_fail(e, -EINVAL, "%s: header: PQ codebook size K is %u, not 1..256",
				       path, s->pq_k);
		payload = s->pq_m;
	} else {
		payload = (uint64_t)s->dims * 4;
	}
	s->record_size = 8 + payload;
	s->centroids_off = s->header_size;
	uint64_t need;
	if (!sf_mul_ok((uint64_t)s->ncentroids * s->dims, 4, &s->centroids_len) ||
	    !sf_add_ok(s->centroids_off, s->centroids_len, &s->records_off) ||
	    !sf_mul_ok(s->nrecords, s->record_size, &s->records_len) ||
	    !sf_add_ok(s->records_off, s->records_len, &need))
		return sf_fail(e, -EINVAL,
			       "%s: header: counts overflow (C=%u dims=%u N=%llu)", path,
			       s->ncentroids, s->dims, (unsigned long long)s->nrecords);
	if (need > size)
		return sf_fail(e, -EINVAL,
			       "%s: truncated: header says %llu bytes (C=%u dims=%u N=%llu), file has %llu",
			       path, (unsigned long long)need, s->ncentroids, s->dims,
			       (unsigned long long)s->nrecords, (unsigned long long)size);
	s->trailing = size - need;
	return 0;
}

uint64_t sl_fnv1a(uint64_t h, const uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= UINT64_C(0x00000100000001b3);
	}
	return h;
}
