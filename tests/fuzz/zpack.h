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
	case TX_Z_ZSTD: {
		/* no content size, as zstd writes from a pipe: a frame of
		 * blocks whose walk (tx_zblock.c) the pass makes; level 1's
		 * window (512 KiB) puts a start point every 4 MiB in it */
		ZSTD_CCtx *z = ZSTD_createCCtx();
		got = z && !ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_contentSizeFlag, 0)) &&
		      !ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 1)) ?
		      ZSTD_compress2(z, o, cap, in, n) : 0;
		got = ZSTD_isError(got) ? 0 : got;
		ZSTD_freeCCtx(z);
		break;
	}
	case TX_Z_XZ:
		if (lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, NULL, in, n, o, &got, cap) != LZMA_OK)
			got = 0;
		break;
	case TX_Z_BZIP2: {
		unsigned int len = (unsigned int)cap;
		got = BZ2_bzBuffToBuffCompress((char *)o, &len, (char *)in, (unsigned)n, 1, 0, 0) == BZ_OK ? len : 0;
		break;
	}
	case TX_Z_LZ4: {
		/* independent blocks, as the lz4 tool writes (of 64 KiB here) */
		LZ4F_preferences_t p = { .frameInfo = { .blockSizeID = LZ4F_max64KB,
							.blockMode = LZ4F_blockIndependent } };
		got = LZ4F_compressFrame(o, cap, in, n, &p);
		got = LZ4F_isError(got) ? 0 : got;
		break;
	}
	case TX_Z_NONE:
		break;
	}
	*out = o;
	return got;
}

#endif
