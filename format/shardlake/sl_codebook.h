/* The PQ codebook file pq_codebook.bin (spec shardlake §5.2). */
#ifndef SL_CODEBOOK_H
#define SL_CODEBOOK_H

#include <stdint.h>

#include "sf_err.h"

/* The header's size: the centroids follow it. */
#define SL_CODEBOOK_HEAD 28

struct sl_codebook {
	uint32_t dims, m, k, sub_dims;
	uint64_t len;             /* of the centroids */
	/* f32[m][k][sub_dims], little-endian, when copied (sl_centroids_load) */
	const uint8_t *centroids;
	uint8_t *own;
};

/* Parses the header `p` (SL_CODEBOOK_HEAD bytes, or the whole file when
 * shorter) of a codebook of `size` bytes and bounds-checks it (trailing
 * bytes are allowed, as upstream allows them). */
int sl_codebook_parse(const uint8_t *p, uint64_t size, const char *path,
		      struct sl_codebook *out, struct sf_err *e);

#endif
