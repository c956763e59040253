#include "sf_codec.h"

#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <stdlib.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "sf_bytes.h"
#include "sf_map.h"

#define ZSTD_MAGIC 0xFD2FB528u

/* One decompression context per thread: creating one costs more than
 * decoding a small frame. With it, the window a streamed decode reads the
 * file through (sf_zstd_decode_map), kept so that its pages stay mapped
 * and in the CPU's cache from one decode to the next. */
struct thread_codec {
	ZSTD_DCtx *d;
	uint8_t *win;
};

static pthread_key_t codec_key;
static pthread_once_t codec_once = PTHREAD_ONCE_INIT;

static void codec_free(void *p)
{
	struct thread_codec *t = p;
	ZSTD_freeDCtx(t->d);
	free(t->win);
	free(t);
}

static void codec_init(void)
{
	pthread_key_create(&codec_key, codec_free);
}

static struct thread_codec *thread_codec(void)
{
	pthread_once(&codec_once, codec_init);
	struct thread_codec *t = pthread_getspecific(codec_key);
	if (!t) {
		if (!(t = calloc(1, sizeof *t)))
			return NULL;
		if (pthread_setspecific(codec_key, t)) {
			free(t);
			return NULL;
		}
	}
	if (!t->d && !(t->d = ZSTD_createDCtx()))
		return NULL;
	return t;
}

/* The most a thread's context keeps once its decode is over. A context
 * grows to hold what a frame asked for (the window of a decode that is not
 * into a stable buffer, up to what the caller allowed; a dictionary's
 * tables), and every thread of the daemon's pool keeps its own: one that
 * grew past this is freed, the next decode making a new one. */
#define DCTX_KEEP ((size_t)1 << 20)

static void codec_trim(struct thread_codec *t)
{
	if (ZSTD_sizeof_DCtx(t->d) > DCTX_KEEP) {
		ZSTD_freeDCtx(t->d);
		t->d = NULL;
	}
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
static int decode_frames(ZSTD_DCtx *d, const uint8_t *src, size_t srclen, ZSTD_outBuffer *ob,
			 uint64_t *flushed, int wlog, const void *dict, size_t dictlen,
			 const char *what, struct sf_err *e)
{
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

static int decode_all(const uint8_t *src, size_t srclen, ZSTD_outBuffer *ob,
		      uint64_t *flushed, int wlog, const void *dict, size_t dictlen,
		      const char *what, struct sf_err *e)
{
	struct thread_codec *t = thread_codec();
	if (!t)
		return sf_fail(e, -ENOMEM, "%s: cannot create a zstd context", what);
	int rc = decode_frames(t->d, src, srclen, ob, flushed, wlog, dict, dictlen, what, e);
	codec_trim(t);
	return rc;
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

/* The window a streamed decode reads at a time: a few zstd blocks (128 KiB
 * at most each), so few blocks straddle two reads (zstd copies those
 * aside), and small enough to stay in the CPU's cache. */
#define STREAM_WIN ((size_t)512 << 10)

static int decode_map(struct thread_codec *t, const struct sf_map *m, uint64_t off,
		      uint64_t srclen, uint8_t *dst, size_t want, const char *part,
		      const char *what, struct sf_err *e)
{
	ZSTD_DCtx *d = t->d;
	ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
	ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 31);
	/* dst stays put: zstd decodes straight into it (see decode_all) */
	ZSTD_DCtx_setParameter(d, ZSTD_d_stableOutBuffer, 1);
	ZSTD_outBuffer ob = { dst, want, 0 };
	size_t r = 1;
	for (uint64_t at = 0; at < srclen;) {
		size_t n = srclen - at < STREAM_WIN ? (size_t)(srclen - at) : STREAM_WIN;
		int rc = sf_map_read(m, off + at, n, t->win, part, e);
		if (rc)
			return rc;
		ZSTD_inBuffer in = { t->win, n, 0 };
		while (in.pos < in.size) {
			size_t before_in = in.pos, before_out = ob.pos;
			r = ZSTD_decompressStream(d, &ob, &in);
			if (ZSTD_isError(r)) {
				rc = stream_error(r, what, e);
				break;
			}
			if (in.pos == before_in && ob.pos == before_out) {
				rc = -ENOSPC; /* stalled: only a full output does that */
				break;
			}
		}
		if (rc == -ENOSPC)
			return sf_fail(e, -EIO, "%s: zstd output is larger than the recorded %zu bytes",
				       what, want);
		if (rc)
			return rc == -E2BIG ? sf_fail(e, -EIO, "%s: zstd window too large", what) : rc;
		at += n;
	}
	if (r != 0)
		return sf_fail(e, -EIO, "%s: zstd frame is truncated", what);
	if (ob.pos != want)
		return sf_fail(e, -EIO, "%s: zstd output is %zu bytes, the container records %zu",
			       what, ob.pos, want);
	return 0;
}

int sf_zstd_decode_map(const struct sf_map *m, uint64_t off, uint64_t srclen, uint8_t *dst,
		       size_t want, const char *part, const char *what, struct sf_err *e)
{
	struct thread_codec *t = thread_codec();
	if (t && !t->win)
		t->win = malloc(STREAM_WIN);
	if (!t || !t->win)
		return sf_fail(e, -ENOMEM, "%s: cannot create a zstd context", what);
	int rc = decode_map(t, m, off, srclen, dst, want, part, what, e);
	codec_trim(t);
	return rc;
}

/* Block headers read at a time by sf_zstd_bound_map: one read covers a
 * run of small blocks; a large block costs one read. */
#define HEAD_WIN 4096

/* Points *p at `need` bytes at `at` (of srclen) through the small buffer
 * buf (HEAD_WIN bytes, holding [*boff, *boff + *blen)), reading it anew
 * when they are not there. */
static int head_get(const struct sf_map *m, uint64_t off, uint64_t srclen, uint64_t at,
		    size_t need, uint8_t *buf, uint64_t *boff, size_t *blen, const uint8_t **p,
		    const char *part, const char *what, struct sf_err *e)
{
	if (need > srclen || at > srclen - need)
		return sf_fail(e, -EIO, "%s: zstd frame is truncated", what);
	if (at < *boff || at - *boff + need > *blen) {
		size_t n = srclen - at < HEAD_WIN ? (size_t)(srclen - at) : HEAD_WIN;
		*blen = 0;
		int rc = sf_map_read(m, off + at, n, buf, part, e);
		if (rc)
			return rc;
		*boff = at;
		*blen = n;
	}
	*p = buf + (at - *boff);
	return 0;
}

int sf_zstd_bound_map(const struct sf_map *m, uint64_t off, uint64_t srclen, uint64_t *bound,
		      const char *part, const char *what, struct sf_err *e)
{
	uint8_t buf[HEAD_WIN];
	uint64_t boff = 0, at = 0, total = 0;
	size_t blen = 0;
	const uint8_t *p = buf;
	int rc = 0;
	while (at < srclen && !rc) {
		size_t hn = srclen - at < ZSTD_FRAMEHEADERSIZE_MAX ? (size_t)(srclen - at)
								     : ZSTD_FRAMEHEADERSIZE_MAX;
		if ((rc = head_get(m, off, srclen, at, hn, buf, &boff, &blen, &p, part, what, e)))
			break;
		if (hn >= 8 && (sf_le32(p) & 0xFFFFFFF0u) == 0x184D2A50u) {
			at += 8 + (uint64_t)sf_le32(p + 4); /* skippable: no output */
			if (at > srclen)
				rc = sf_fail(e, -EIO, "%s: skippable zstd frame runs past the end", what);
			continue;
		}
		ZSTD_frameHeader fh;
		size_t r = ZSTD_getFrameHeader(&fh, p, hn);
		if (ZSTD_isError(r) || r != 0 || fh.frameType != ZSTD_frame)
			return sf_fail(e, -EIO, "%s: not a zstd frame at byte %llu", what,
				       (unsigned long long)at);
		at += fh.headerSize;
		uint64_t blocks = 0;
		for (bool last = false; !last && !rc; blocks++) {
			if ((rc = head_get(m, off, srclen, at, 3, buf, &boff, &blen, &p, part, what, e)))
				break;
			uint32_t bh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
			uint32_t type = bh >> 1 & 3, size = bh >> 3;
			last = bh & 1;
			if (type == 3)
				rc = sf_fail(e, -EIO, "%s: zstd block of the reserved type", what);
			at += 3 + (type == 1 ? 1 : size);
		}
		at += fh.checksumFlag ? 4 : 0;
		if (!rc && at > srclen)
			rc = sf_fail(e, -EIO, "%s: zstd frame is truncated", what);
		/* as ZSTD_decompressBound: the recorded size, else the blocks' most */
		uint64_t most = fh.frameContentSize != ZSTD_CONTENTSIZE_UNKNOWN
					? fh.frameContentSize
					: blocks * fh.blockSizeMax;
		total = most > UINT64_MAX - total ? UINT64_MAX : total + most;
	}
	*bound = total;
	return rc;
}

int sf_zstd_check(const uint8_t *src, size_t srclen, uint64_t want, const void *dict,
		  size_t dictlen, uint64_t limit, const char *what, struct sf_err *e)
{
	/* the output's sink, allocated per call: as a thread-local array it
	 * was zeroed at every thread's start, 128 KiB resident in each request
	 * thread whether it checked a frame or not */
	enum { SCRATCH = 1 << 17 };
	uint8_t *scratch = malloc(SCRATCH);
	if (!scratch)
		return sf_fail(e, -ENOMEM, "%s: out of memory", what);
	/* the window is allocated whole as the frame declares it: never more
	 * than the budget, nor than the output needs (a frame of a few bytes
	 * may declare 2 GiB); a frame asking for more is decoded whole below */
	int wlog = 31;
	while (wlog > 10 && ((limit && (1ull << wlog) > limit) || (1ull << (wlog - 1)) >= want))
		wlog--;
	uint64_t flushed = 0;
	ZSTD_outBuffer ob = { scratch, SCRATCH, 0 };
	int rc = decode_all(src, srclen, &ob, &flushed, wlog, dict, dictlen, what, e);
	free(scratch);
	if (rc == -E2BIG) {
		/* a window over the limit: the whole output is smaller, if it fits */
		if (limit && want > limit)
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
