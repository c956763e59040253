#include "sf_codec.h"

#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <stdlib.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "sf_bytes.h"

#define ZSTD_MAGIC 0xFD2FB528u

/* One decompression context per thread: creating one costs more than
 * decoding a small frame. */
static pthread_key_t dctx_key;
static pthread_once_t dctx_once = PTHREAD_ONCE_INIT;

static void dctx_free(void *p)
{
	ZSTD_freeDCtx(p);
}

static void dctx_init(void)
{
	pthread_key_create(&dctx_key, dctx_free);
}

static ZSTD_DCtx *thread_dctx(void)
{
	pthread_once(&dctx_once, dctx_init);
	ZSTD_DCtx *d = pthread_getspecific(dctx_key);
	if (!d) {
		d = ZSTD_createDCtx();
		if (d)
			pthread_setspecific(dctx_key, d);
	}
	return d;
}

/* Where the Dictionary_ID field sits in a frame header, and its width. */
static int did_field(const uint8_t *src, size_t srclen, size_t *pos, size_t *width)
{
	static const size_t widths[4] = { 0, 1, 2, 4 };
	if (srclen < 5 || sf_le32(src) != ZSTD_MAGIC)
		return -EINVAL;
	uint8_t fhd = src[4];
	*pos = (fhd & 0x20) ? 5 : 6;
	*width = widths[fhd & 3];
	if (*pos + *width > srclen)
		return -EINVAL;
	return 0;
}

int sf_zstd_frame_dict_id(const uint8_t *src, size_t srclen, uint32_t *id)
{
	size_t pos, w;
	int rc = did_field(src, srclen, &pos, &w);
	if (rc)
		return rc;
	uint32_t v = 0;
	for (size_t i = 0; i < w; i++)
		v |= (uint32_t)src[pos + i] << (8 * i);
	*id = v;
	return 0;
}

/* Output that does not fit the stable output buffer is an error of its own:
 * ENOSPC, like a stream that stalls on a full buffer; so is a window larger
 * than allowed: E2BIG. */
static int stream_error(size_t r, const char *what, struct sf_err *e)
{
	if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall)
		return -ENOSPC;
	if (ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge)
		return -E2BIG;
	return sf_fail(e, -EIO, "%s: zstd: %s", what, ZSTD_getErrorName(r));
}

/* Streams one frame (header possibly patched) into out; returns bytes of src
 * consumed via *used. */
static int decode_frame(ZSTD_DCtx *d, const uint8_t *src, size_t srclen,
			ZSTD_outBuffer *ob, uint64_t *flushed, bool has_dict, size_t *used,
			const char *what, struct sf_err *e)
{
	size_t fsize = ZSTD_findFrameCompressedSize(src, srclen);
	if (ZSTD_isError(fsize))
		return sf_fail(e, -EIO, "%s: zstd frame: %s", what, ZSTD_getErrorName(fsize));
	size_t pos = 0, w = 0;
	uint8_t hdr[32];
	ZSTD_inBuffer first = { src, fsize, 0 };
	size_t skip = 0;
	if (has_dict && did_field(src, fsize, &pos, &w) == 0 && w) {
		/* Drop the Dictionary_ID bytes from a private copy of the header;
		 * the rest of the frame is fed from the mapping. */
		memcpy(hdr, src, pos);
		hdr[4] &= (uint8_t)~3u;
		first.src = hdr;
		first.size = pos;
		skip = pos + w;
	}
	if (ZSTD_isError(ZSTD_DCtx_reset(d, ZSTD_reset_session_only)))
		return sf_fail(e, -EIO, "%s: zstd reset failed", what);
	size_t r = 1;
	while (skip && first.pos < first.size) {
		r = ZSTD_decompressStream(d, ob, &first);
		if (ZSTD_isError(r))
			return stream_error(r, what, e);
	}
	ZSTD_inBuffer in = { src + skip, fsize - skip, 0 };
	while (in.pos < in.size || r != 0) {
		if (flushed && ob->pos == ob->size) {
			/* counting only: the full buffer is emptied and reused */
			*flushed += ob->pos;
			ob->pos = 0;
		}
		size_t before_in = in.pos, before_out = ob->pos;
		r = ZSTD_decompressStream(d, ob, &in);
		if (ZSTD_isError(r))
			return stream_error(r, what, e);
		if (r == 0)
			break;
		if (in.pos == before_in && ob->pos == before_out) {
			if (ob->pos == ob->size)
				return -ENOSPC;
			return sf_fail(e, -EIO, "%s: zstd frame is truncated", what);
		}
	}
	*used = fsize;
	return 0;
}

/* Decodes every frame into ob; with `flushed`, output that does not fit is
 * counted there and dropped (a size check that needs no full buffer, but a
 * window of up to 2^wlog bytes). */
static int decode_all(const uint8_t *src, size_t srclen, ZSTD_outBuffer *ob,
		      uint64_t *flushed, int wlog, const void *dict, size_t dictlen,
		      const char *what, struct sf_err *e)
{
	ZSTD_DCtx *d = thread_dctx();
	if (!d)
		return sf_fail(e, -ENOMEM, "%s: cannot create a zstd context", what);
	ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
	/* Frames may be larger than the default window limit allows. */
	ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, wlog);
	/* ob stays put for the whole frame: zstd then decodes straight into it
	 * instead of into its window buffer and copying out */
	ZSTD_DCtx_setParameter(d, ZSTD_d_stableOutBuffer, flushed ? 0 : 1);
	if (dict && dictlen) {
		size_t r = ZSTD_DCtx_loadDictionary_advanced(d, dict, dictlen, ZSTD_dlm_byRef,
							     ZSTD_dct_rawContent);
		if (ZSTD_isError(r))
			return sf_fail(e, -EIO, "%s: zstd dictionary: %s", what, ZSTD_getErrorName(r));
	}
	size_t off = 0;
	while (off < srclen) {
		size_t left = srclen - off;
		if (left >= 8 && (sf_le32(src + off) & 0xFFFFFFF0u) == 0x184D2A50u) {
			uint32_t n = sf_le32(src + off + 4);
			if (n > left - 8)
				return sf_fail(e, -EIO, "%s: skippable zstd frame runs past the end", what);
			off += 8 + (size_t)n;
			continue;
		}
		size_t used = 0;
		int rc = decode_frame(d, src + off, left, ob, flushed, dict && dictlen, &used, what, e);
		if (rc)
			return rc;
		off += used;
	}
	return 0;
}

int sf_zstd_decode(const uint8_t *src, size_t srclen, uint8_t *dst, size_t want,
		   const void *dict, size_t dictlen, const char *what,
		   struct sf_err *e)
{
	ZSTD_outBuffer ob = { dst, want, 0 };
	int rc = decode_all(src, srclen, &ob, NULL, 31, dict, dictlen, what, e);
	/* A frame with output left over once dst is full stalls: ENOSPC. */
	if (rc == -ENOSPC)
		return sf_fail(e, -EIO, "%s: zstd output is larger than the recorded %zu bytes",
			       what, want);
	if (rc)
		return rc;
	if (ob.pos != want)
		return sf_fail(e, -EIO, "%s: zstd output is %zu bytes, the container records %zu",
			       what, ob.pos, want);
	return 0;
}

int sf_zstd_check(const uint8_t *src, size_t srclen, uint64_t want, const void *dict,
		  size_t dictlen, uint64_t limit, const char *what, struct sf_err *e)
{
	static _Thread_local uint8_t scratch[1 << 17];
	int wlog = 31;
	while (limit && wlog > 10 && (1ull << wlog) > limit)
		wlog--;
	uint64_t flushed = 0;
	ZSTD_outBuffer ob = { scratch, sizeof scratch, 0 };
	int rc = decode_all(src, srclen, &ob, &flushed, wlog, dict, dictlen, what, e);
	if (rc == -E2BIG) {
		/* a window over the limit: the whole output is smaller, if it fits */
		if (want > limit)
			return sf_fail(e, -EIO, "%s: not checked: decodes to %llu bytes with a window "
				       "over %llu bytes, more than --cache-size holds", what,
				       (unsigned long long)want, (unsigned long long)limit);
		uint8_t *all = malloc(want ? want : 1);
		if (!all)
			return sf_fail(e, -ENOMEM, "%s: out of memory", what);
		rc = sf_zstd_decode(src, srclen, all, want, dict, dictlen, what, e);
		free(all);
		return rc;
	}
	if (rc)
		return rc;
	if (flushed + ob.pos != want)
		return sf_fail(e, -EIO, "%s: zstd output is %llu bytes, the container records %llu",
			       what, (unsigned long long)(flushed + ob.pos), (unsigned long long)want);
	return 0;
}

int sf_zstd_decode_alloc(const uint8_t *src, size_t srclen, size_t limit,
			 const void *dict, size_t dictlen, const char *what,
			 uint8_t **out, size_t *outlen, struct sf_err *e)
{
	size_t cap = srclen * 4 + 64;
	for (;;) {
		if (cap > limit)
			cap = limit;
		uint8_t *buf = malloc(cap ? cap : 1);
		if (!buf)
			return sf_fail(e, -ENOMEM, "%s: out of memory", what);
		ZSTD_outBuffer ob = { buf, cap, 0 };
		int rc = decode_all(src, srclen, &ob, NULL, 31, dict, dictlen, what, e);
		if (rc == 0) {
			*out = buf;
			*outlen = ob.pos;
			return 0;
		}
		free(buf);
		if (rc != -ENOSPC)
			return rc;
		if (cap >= limit)
			return sf_fail(e, -EIO, "%s: zstd output exceeds %zu bytes", what, limit);
		cap = cap > limit / 2 ? limit : cap * 2;
	}
}

int sf_lz4_decode(const uint8_t *src, size_t srclen, uint8_t *dst, size_t want,
		  const char *what, struct sf_err *e)
{
	if (srclen > INT32_MAX || want > INT32_MAX)
		return sf_fail(e, -EIO, "%s: lz4 block too large", what);
	int n = LZ4_decompress_safe((const char *)src, (char *)dst, (int)srclen, (int)want);
	if (n < 0 || (size_t)n != want)
		return sf_fail(e, -EIO, "%s: lz4 block does not decode to %zu bytes", what, want);
	return 0;
}
