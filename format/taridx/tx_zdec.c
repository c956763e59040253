/* Decoders of each codec behind one shape (tx_z.h): starting at a stream's
 * start or, for gzip, inside a member from a kept window. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tx_z.h"

/* decoder memory allowed: zstd's default window limit (what `zstd -d`
 * accepts without --memory), and xz's largest preset with room */
#define ZSTD_WINDOW_LOG_MAX 27
#define XZ_MEMLIMIT (256u << 20)

enum tx_zcodec tx_z_sniff(const uint8_t *p, size_t n)
{
	if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
		return TX_Z_GZIP;
	if (n >= 4 && !memcmp(p, "\x28\xb5\x2f\xfd", 4))
		return TX_Z_ZSTD;
	if (n >= 6 && !memcmp(p, "\xfd" "7zXZ\0", 6))
		return TX_Z_XZ;
	if (n >= 4 && !memcmp(p, "BZh", 3) && p[3] >= '1' && p[3] <= '9')
		return TX_Z_BZIP2;
	if (n >= 4 && !memcmp(p, "\x04\x22\x4d\x18", 4))
		return TX_Z_LZ4;
	return TX_Z_NONE;
}

const char *tx_z_name(enum tx_zcodec c)
{
	static const char *const names[] = { "none", "gzip", "zstd", "xz", "bzip2", "lz4" };
	return names[c];
}

void tx_zdec_end(struct tx_zdec *d)
{
	if (!d->live)
		return;
	switch (d->c) {
	case TX_Z_GZIP: inflateEnd(&d->gz); break;
	case TX_Z_ZSTD:
		ZSTD_freeDStream(d->zs);
		free(d->pre);
		break;
	case TX_Z_XZ: lzma_end(&d->xz); break;
	case TX_Z_BZIP2:
		BZ2_bzDecompressEnd(&d->bz);
		free(d->bz_kept);
		break;
	case TX_Z_LZ4: LZ4F_freeDecompressionContext(d->lz); break;
	case TX_Z_NONE: break;
	}
	d->live = false;
}

/* bzip2's allocator: its largest block (the table of a stream's blocks,
 * allocated at the stream's header) is kept at its free for the stream
 * the decoder starts next, which asks the same size. */
#define BZ_KEEP_MIN ((size_t)1 << 20)

static void *bz_alloc(void *opaque, int items, int size)
{
	struct tx_zdec *d = opaque;
	size_t n = (size_t)items * (size_t)size;
	void *p;
	if (d->bz_kept && d->bz_kept_len == n) {
		p = d->bz_kept;
		d->bz_kept = NULL;
	} else {
		p = malloc(n);
	}
	if (p && n >= BZ_KEEP_MIN) {
		d->bz_big = p;
		d->bz_big_len = n;
	}
	return p;
}

static void bz_free(void *opaque, void *p)
{
	struct tx_zdec *d = opaque;
	if (!p || p != d->bz_big) {
		free(p);
		return;
	}
	free(d->bz_kept);
	d->bz_kept = p;
	d->bz_kept_len = d->bz_big_len;
	d->bz_big = NULL;
}

uint64_t tx_zdec_window(const uint8_t *win, uint32_t wlen)
{
	unsigned long long n = ZSTD_getFrameContentSize(win, wlen);
	return n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR || n > TX_Z_ZSTD_WINDOW_MAX ?
	       0 : n;
}

/* Gives the decoder the header of a frame like the one `at` lies in, for
 * the blocks after it: no content size (what follows is less) nor content
 * checksum (the pass checked the frame whole), no dictionary. */
static int frame_header(struct tx_zdec *d, const struct tx_zstart *at, const char **why)
{
	uint8_t h[7], none[1];
	size_t n, used = 0;
	if (d->c == TX_Z_ZSTD) {
		memcpy(h, "\x28\xb5\x2f\xfd", 4);
		h[4] = 0;          /* no content size, checksum or dictionary; a window */
		h[5] = at->byte;
		n = 6;
		ZSTD_inBuffer i = { h, n, 0 };
		ZSTD_outBuffer o = { none, 0, 0 };
		size_t r = ZSTD_decompressStream(d->zs, &o, &i);
		used = ZSTD_isError(r) ? 0 : i.pos;
	} else {
		memcpy(h, "\x04\x22\x4d\x18", 4);
		h[4] = (uint8_t)(0x60 | (at->check & 0x10)); /* version 1, independent blocks */
		h[5] = at->byte;
		h[6] = (uint8_t)(XXH32(h + 4, 2, 0) >> 8);
		n = 7;
		size_t no = 0;
		used = n;
		if (LZ4F_isError(LZ4F_decompress(d->lz, none, &no, h, &used, NULL)))
			used = 0;
	}
	if (used != n)
		return *why = "a start point inside a frame names a frame header the decoder refuses", -EIO;
	return 0;
}

int tx_zdec_begin(struct tx_zdec *d, enum tx_zcodec c, const struct tx_zstart *at, const char **why)
{
	bool again = d->live && d->c == c;
	d->need = 0;
	if (!again) {
		tx_zdec_end(d);
		memset(d, 0, sizeof *d);
	}
	d->c = c;
	int ok = 0;
	switch (c) {
	case TX_Z_GZIP: {
		/* a member's start reads its gzip header; inside one, raw deflate */
		uint32_t wlen = at ? at->wlen : 0;
		int bits = wlen ? -15 : 15 + 16;
		if ((again ? inflateReset2(&d->gz, bits) : inflateInit2(&d->gz, bits)) != Z_OK)
			return again ? (*why = "the decoder cannot start again", -EIO) : -ENOMEM;
		d->live = true;
		if (wlen) {
			uint8_t w[TX_Z_WINDOW];
			size_t n = ZSTD_decompress(w, sizeof w, at->win, wlen);
			if (n != TX_Z_WINDOW ||
			    (at->bits && inflatePrime(&d->gz, at->bits, at->byte >> (8 - at->bits)) != Z_OK) ||
			    inflateSetDictionary(&d->gz, w, TX_Z_WINDOW) != Z_OK) {
				*why = "a kept window cannot be restored";
				return -EIO;
			}
		}
		return 0;
	}
	case TX_Z_ZSTD:
		/* a reset forgets the prefix and the parameters too */
		ok = (again ? !ZSTD_isError(ZSTD_DCtx_reset(d->zs, ZSTD_reset_session_and_parameters)) :
			      (d->zs = ZSTD_createDStream()) != NULL) &&
		     !ZSTD_isError(ZSTD_DCtx_setParameter(d->zs, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX));
		d->live = d->zs != NULL;
		if (ok && at && at->block) {
			/* the frame's bytes before the point, as a prefix the
			 * blocks after it refer to (held until the decoder ends
			 * or starts again) */
			uint64_t n = tx_zdec_window(at->win, at->wlen);
			d->live = true;
			if (!n)
				return *why = "a kept window cannot be restored", -EIO;
			if (n > d->pre_cap) {
				free(d->pre);
				d->pre_cap = 0;
				if (!(d->pre = malloc(n)))
					return -ENOMEM;
				d->pre_cap = n;
			}
			if (ZSTD_decompress(d->pre, n, at->win, at->wlen) != n ||
			    ZSTD_isError(ZSTD_DCtx_refPrefix(d->zs, d->pre, n)))
				return *why = "a kept window cannot be restored", -EIO;
			return frame_header(d, at, why);
		}
		break;
	case TX_Z_XZ:
		/* liblzma starts a coder of the same kind in the memory it has */
		if (!again)
			d->xz = (lzma_stream)LZMA_STREAM_INIT;
		ok = lzma_stream_decoder(&d->xz, XZ_MEMLIMIT, 0) == LZMA_OK;
		break;
	case TX_Z_BZIP2:
		if (again)
			BZ2_bzDecompressEnd(&d->bz);
		d->bz = (bz_stream){ .bzalloc = bz_alloc, .bzfree = bz_free, .opaque = d };
		ok = BZ2_bzDecompressInit(&d->bz, 0, 0) == BZ_OK;
		if (!ok) {
			free(d->bz_kept);
			d->bz_kept = NULL;
			d->live = false;
		}
		break;
	case TX_Z_LZ4:
		if (again)
			LZ4F_resetDecompressionContext(d->lz);
		ok = again || !LZ4F_isError(LZ4F_createDecompressionContext(&d->lz, LZ4F_VERSION));
		d->live = ok;
		if (ok && at && at->block)
			return frame_header(d, at, why);
		break;
	case TX_Z_NONE:
		break;
	}
	/* a decoder started again that fails is still one to end */
	d->live = d->live || ok;
	return ok ? 0 : -ENOMEM;
}

int tx_zdec_step(struct tx_zdec *d, const uint8_t *in, size_t *inlen, uint8_t *out,
		    size_t *outlen, bool block, const char **why)
{
	size_t ni = *inlen, no = *outlen;
	switch (d->c) {
	case TX_Z_GZIP: {
		d->gz.next_in = (uint8_t *)in;
		d->gz.avail_in = (uInt)ni;
		d->gz.next_out = out;
		d->gz.avail_out = (uInt)no;
		int r = inflate(&d->gz, block ? Z_BLOCK : Z_NO_FLUSH);
		*inlen = ni - d->gz.avail_in;
		*outlen = no - d->gz.avail_out;
		if (r == Z_STREAM_END)
			return 1;
		if (r == Z_OK || r == Z_BUF_ERROR)
			return 0;
		*why = d->gz.msg ? d->gz.msg : "corrupt deflate data";
		return -EIO;
	}
	case TX_Z_ZSTD: {
		ZSTD_inBuffer i = { in, ni, 0 };
		ZSTD_outBuffer o = { out, no, 0 };
		size_t r = ZSTD_decompressStream(d->zs, &o, &i);
		*inlen = i.pos;
		*outlen = o.pos;
		if (ZSTD_isError(r)) {
			*why = ZSTD_getErrorName(r);
			return -EIO;
		}
		return r == 0;
	}
	case TX_Z_XZ: {
		d->xz.next_in = in;
		d->xz.avail_in = ni;
		d->xz.next_out = out;
		d->xz.avail_out = no;
		lzma_ret r = lzma_code(&d->xz, LZMA_RUN);
		*inlen = ni - d->xz.avail_in;
		*outlen = no - d->xz.avail_out;
		if (r == LZMA_STREAM_END)
			return 1;
		if (r == LZMA_OK || r == LZMA_BUF_ERROR)
			return 0;
		*why = r == LZMA_DATA_ERROR ? "corrupt xz data" : r == LZMA_MEMLIMIT_ERROR ?
		       "an xz stream needing more than 256 MiB to decode" : r == LZMA_FORMAT_ERROR ?
		       "no xz stream" : "an xz stream it cannot decode (check or options)";
		return -EIO;
	}
	case TX_Z_BZIP2: {
		d->bz.next_in = (char *)in;
		d->bz.avail_in = (unsigned)ni;
		d->bz.next_out = (char *)out;
		d->bz.avail_out = (unsigned)no;
		int r = BZ2_bzDecompress(&d->bz);
		*inlen = ni - d->bz.avail_in;
		*outlen = no - d->bz.avail_out;
		if (r == BZ_STREAM_END)
			return 1;
		if (r == BZ_OK)
			return 0;
		*why = r == BZ_DATA_ERROR ? "corrupt bzip2 data (a block fails its CRC)" :
		       "no bzip2 stream";
		return -EIO;
	}
	case TX_Z_LZ4: {
		size_t r = LZ4F_decompress(d->lz, out, outlen, in, inlen, NULL);
		d->need = r;
		if (LZ4F_isError(r)) {
			*why = LZ4F_getErrorName(r);
			return -EIO;
		}
		return r == 0;
	}
	case TX_Z_NONE:
		break;
	}
	*why = "no codec";
	return -EIO;
}

uint64_t tx_zdec_mem(const struct tx_zdec *d)
{
	switch (d->c) {
	case TX_Z_GZIP: return 48u << 10;
	case TX_Z_ZSTD: return ZSTD_sizeof_DStream(d->zs);
	case TX_Z_XZ: return lzma_memusage(&d->xz);
	case TX_Z_BZIP2: return 4u << 20;      /* a 900k block's tables */
	case TX_Z_LZ4: return 9u << 20;        /* two 4 MiB blocks */
	case TX_Z_NONE: break;
	}
	return 0;
}

