/* The .sidx shard layout (spec shardlake §2): header fields and where the
 * centroid and record areas lie, checked against the mapped file. */
#ifndef SL_SHARD_H
#define SL_SHARD_H

#include <stdint.h>

#include "sf_err.h"

#define SL_SIDX_MAGIC "SLKIDX\0\0"
/* The longest header (a PQ shard's): what sl_shard_parse reads of `p`. */
#define SL_SIDX_HEAD 40

struct sl_shard {
	uint32_t version;     /* 1 = raw f32 vectors, 2 = PQ codes */
	uint32_t shard_id;
	uint32_t dims;
	uint32_t ncentroids;  /* C */
	uint64_t nrecords;    /* N */
	uint32_t pq_m, pq_k;  /* version 2 only */
	uint64_t header_size; /* 32 or 40 */
	uint64_t centroids_off, centroids_len;
	uint64_t records_off, record_size, records_len;
	uint64_t file_size, trailing;
};

/* Parses and bounds-checks the header `p` (SL_SIDX_HEAD bytes, or the
 * whole file when shorter) of a shard of `size` bytes. Fails
 * (naming `path`) on a bad magic or version, impossible fields, counts whose
 * areas overflow or do not fit the file. Trailing bytes are allowed. */
int sl_shard_parse(const uint8_t *p, uint64_t size, const char *path,
		   struct sl_shard *out, struct sf_err *e);

/* 64-bit FNV-1a, continued from `h` (start with SL_FNV_INIT). */
#define SL_FNV_INIT UINT64_C(0xcbf29ce484222325)
uint64_t sl_fnv1a(uint64_t h, const uint8_t *p, uint64_t len);

#endif
