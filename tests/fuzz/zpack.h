/* One stream of each codec tx_z.c reads, made by the codec's own library,
 * for the tests that write compressed tars of their own (test_taridx_z,
 * fuzz_taridx_z). Not a decoder: the format code has that. */
#ifndef ZPACK_H
#define ZPACK_H

#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

#include "taridx/tx_z.h"

/* Compresses in[0 .. n) as one stream of codec c into *out (malloc'd):
 * its length, or 0 when the library fails. */
static inline size_t zpack(enum tx_zcodec c, const uint8_t *in, size_t n, uint8_t **out)
{
	size_t cap = n + n / 2 + (1u << 16), got = 0;
	uint8_t *o = malloc(cap);
	if (!o)
		abort();
	switch (c) {
	case TX_Z_GZIP: {
		z_stream z = { 0 };
		if (deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
			break;
		z.next_in = (uint8_t *)in;
		z.avail_in = (uInt)n;
		z.next_out = o;
		z.avail_out = (uInt)cap;
		if (deflate(&z, Z_FINISH) == Z_STREAM_END)
			got = z.total_out;
		deflateEnd(&z);
		break;
	}
	case TX_Z_ZSTD:
		got = ZSTD_compress(o, cap, in, n, 3);
		got = ZSTD_isError(got) ? 0 : got;
		break;
	case TX_Z_XZ:
		if (lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, NULL, in, n, o, &got, cap) != LZMA_OK)
			got = 0;
		break;
	case TX_Z_BZIP2: {
		unsigned int len = (unsigned int)cap;
		got = BZ2_bzBuffToBuffCompress((char *)o, &len, (char *)in, (unsigned)n, 1, 0, 0) == BZ_OK ? len : 0;
		break;
	}
	case TX_Z_LZ4:
		got = LZ4F_compressFrame(o, cap, in, n, NULL);
		got = LZ4F_isError(got) ? 0 : got;
		break;
	case TX_Z_NONE:
		break;
	}
	*out = o;
	return got;
}

#endif
