/* A compressed tar's header blocks kept apart (tx_z.h, "heads"): what the
 * walk read to index it, zstd-compressed in chunks. The buffer, little-
 * endian, is also how --index-dir keeps them (tx_zkeep.c):
 *
 *   u64 nr, u64 nc
 *   nr ranges of 16 bytes: u64 decoded offset, u32 length, u32 chunk;
 *      ascending, apart, each in one chunk, chunks in order
 *   nc chunks of 16 bytes: u64 offset in the data, u32 compressed length,
 *      u32 length (its ranges' bytes, one after the other)
 *   the chunks' compressed bytes, in order
 */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "sf_buf.h"
#include "sf_bytes.h"
#include "tx.h"
#include "tx_z.h"

/* a chunk is cut at about CHUNK bytes, so that a lookup decodes little;
 * stretches that touch (headers of empty members) are one range up to
 * RAW_MAX, and a stretch longer than that is not kept */
#define CHUNK (64u << 10)
#define RAW_MAX (256u << 10)
#define HEAD 16u
#define REC 16u
#define LEVEL 1
/* the compressor's memory at LEVEL for RAW_MAX bytes is about 1 MB */
#define CCTX_MAX (3u << 19)

struct tx_zheads_make {
	struct sf_str ranges, chunks, data;
	uint8_t *raw;    /* the chunk being filled, RAW_MAX bytes */
	size_t rawlen;
	uint64_t nr, nc;
	uint64_t end, kept_end; /* where the last stretch noted, kept or not, ends */
	ZSTD_CCtx *cc;
	bool failed;
};

struct tx_zheads_make *tx_zheads_begin(void)
{
	struct tx_zheads_make *h = calloc(1, sizeof *h);
	if (h && (!(h->raw = malloc(RAW_MAX)) || !(h->cc = ZSTD_createCCtx()))) {
		tx_zheads_abort(h);
		h = NULL;
	}
	return h;
}

void tx_zheads_abort(struct tx_zheads_make *h)
{
	if (!h)
		return;
	sf_str_free(&h->ranges);
	sf_str_free(&h->chunks);
	sf_str_free(&h->data);
	free(h->raw);
	ZSTD_freeCCtx(h->cc);
	free(h);
}

static void put_rec(struct sf_str *s, uint64_t a, uint32_t b, uint32_t c)
{
	uint8_t r[REC];
	sf_put_le64(r, a);
	sf_put_le32(r + 8, b);
	sf_put_le32(r + 12, c);
	sf_str_add(s, r, REC);
}

static void flush(struct tx_zheads_make *h)
{
	if (!h->rawlen || h->failed)
		return;
	size_t at = h->data.len, bound = ZSTD_compressBound(h->rawlen);
	if (!sf_str_reserve(&h->data, bound)) {
		h->failed = true;
		return;
	}
	size_t k = ZSTD_compressCCtx(h->cc, h->data.p + at, bound, h->raw, h->rawlen, LEVEL);
	if (ZSTD_isError(k)) {
		h->failed = true;
		return;
	}
	h->data.len += k;
	put_rec(&h->chunks, at, (uint32_t)k, (uint32_t)h->rawlen);
	h->nc++;
	h->rawlen = 0;
}

void tx_zheads_note(struct tx_zheads_make *h, uint64_t off, const uint8_t *p, uint64_t len)
{
	if (!h || h->failed || !len)
		return;
	if (off < h->end || len > RAW_MAX || len < TX_BLOCK) {
		/* a walk goes forward; a stretch too long (or not an entry's) is
		 * read from the archive */
		h->end = off + len > h->end ? off + len : h->end;
		return;
	}
	bool join = h->nr && off == h->kept_end && h->rawlen + len <= RAW_MAX;
	if (!join && h->rawlen + len > CHUNK)
		flush(h);
	if (h->failed)
		return;
	memcpy(h->raw + h->rawlen, p, (size_t)len);
	h->rawlen += (size_t)len;
	if (join) {
		uint8_t *last = h->ranges.p + (h->nr - 1) * REC;
		sf_put_le32(last + 8, sf_le32(last + 8) + (uint32_t)len);
	} else {
		put_rec(&h->ranges, off, (uint32_t)len, (uint32_t)h->nc);
		h->nr++;
	}
	h->end = h->kept_end = off + len;
	h->failed = h->ranges.oom || h->chunks.oom;
}

uint64_t tx_zheads_after(const struct tx_zheads_make *h)
{
	/* what it holds, and one more chunk with its records */
	if (!h)
		return 0;
	size_t cc = ZSTD_sizeof_CCtx(h->cc);
	return RAW_MAX + h->ranges.cap + h->chunks.cap + h->data.cap + ZSTD_compressBound(RAW_MAX) +
	       2 * REC + (cc > CCTX_MAX ? cc : CCTX_MAX);
}

struct sf_buf *tx_zheads_end(struct tx_zheads_make *h)
{
	if (!h)
		return NULL;
	flush(h);
	struct sf_buf *b = NULL;
	if (!h->failed && h->nr && (b = sf_buf_new(HEAD + h->ranges.len + h->chunks.len + h->data.len))) {
		sf_put_le64(b->data, h->nr);
		sf_put_le64(b->data + 8, h->nc);
		memcpy(b->data + HEAD, h->ranges.p, h->ranges.len);
		memcpy(b->data + HEAD + h->ranges.len, h->chunks.p, h->chunks.len);
		memcpy(b->data + HEAD + h->ranges.len + h->chunks.len, h->data.p, h->data.len);
	}
	tx_zheads_abort(h);
	return b;
}

static uint64_t count(const struct sf_buf *b, int i)
{
	return sf_le64(b->data + 8 * i);
}

static const uint8_t *range(const struct sf_buf *b, uint64_t i)
{
	return b->data + HEAD + i * REC;
}

static const uint8_t *chunk(const struct sf_buf *b, uint64_t i)
{
	return b->data + HEAD + count(b, 0) * REC + i * REC;
}

bool tx_zheads_ok(const struct sf_buf *b, uint64_t size)
{
	if (b->len < HEAD)
		return false;
	uint64_t nr = count(b, 0), nc = count(b, 1), room = (b->len - HEAD) / REC;
	if (!nr || !nc || nr > room || nc > room - nr)
		return false;
	uint64_t data = b->len - HEAD - (nr + nc) * REC, end = 0, sum = 0, c = 0, at = 0;
	for (uint64_t i = 0; i <= nr; i++) {
		uint64_t off = i < nr ? sf_le64(range(b, i)) : 0, len = i < nr ? sf_le32(range(b, i) + 8) : 0;
		uint64_t ci = i < nr ? sf_le32(range(b, i) + 12) : nc;
		/* a stretch is a tar block at least, so a chunk's search back
		 * (tx_zheads_find) goes over RAW_MAX / TX_BLOCK ranges at most */
		if (i < nr && (len < TX_BLOCK || off < end || off > size || len > size - off || ci > nc - 1))
			return false;
		if (ci != c) { /* chunk c ends: its length, the next one's place */
			const uint8_t *k = chunk(b, c);
			if (ci != c + 1 || sf_le32(k + 12) != sum || sum > RAW_MAX || sf_le64(k) != at ||
			    sf_le32(k + 8) > data - at)
				return false;
			at += sf_le32(k + 8);
			c = ci;
			sum = 0;
		}
		sum += len;
		end = off + len;
	}
	return c == nc;
}

bool tx_zheads_find(const struct sf_buf *b, uint64_t at, uint64_t need, uint64_t *ci, uint64_t *pos,
		    uint64_t *end)
{
	uint64_t lo = 0, hi = b ? count(b, 0) : 0;
	while (lo < hi) { /* the first range starting after `at` */
		uint64_t mid = lo + (hi - lo) / 2;
		if (sf_le64(range(b, mid)) <= at)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return false;
	const uint8_t *r = range(b, lo - 1);
	uint64_t off = sf_le64(r), len = sf_le32(r + 8);
	if (at - off > len || need > len - (at - off))
		return false;
	*ci = sf_le32(r + 12);
	*pos = at - off;
	*end = off + len;
	/* the ranges before it in its chunk: 512 at most (tx_zheads_ok) */
	for (uint64_t i = lo - 1; i > 0 && sf_le32(range(b, i - 1) + 12) == *ci; i--)
		*pos += sf_le32(range(b, i - 1) + 8);
	return true;
}

struct sf_buf *tx_zheads_chunk(const struct sf_buf *b, uint64_t ci)
{
	const uint8_t *k = chunk(b, ci);
	const uint8_t *data = chunk(b, count(b, 1));
	uint32_t clen = sf_le32(k + 8), len = sf_le32(k + 12);
	struct sf_buf *out = sf_buf_new(len);
	if (out && ZSTD_decompress(out->data, len, data + sf_le64(k), clen) != len) {
		sf_buf_unref(out);
		out = NULL;
	}
	return out;
}
