/* The PQ codebook file pq_codebook.bin (spec shardlake §5.2). */
#ifndef SL_CODEBOOK_H
#define SL_CODEBOOK_H

#include <stdint.h>

#include "sf_err.h"

struct sl_codebook {
	uint32_t dims, m, k, sub_dims;
	const uint8_t *centroids; /* f32[m][k][sub_dims], little-endian */
};

/* Parses and bounds-checks a codebook of `size` bytes (trailing bytes are
 * allowed, as upstream allows them). */
int sl_codebook_parse(const uint8_t *p, uint64_t size, const char *path,
		      struct sl_codebook *out, struct sf_err *e);

#endif
