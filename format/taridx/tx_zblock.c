/* The blocks of a zstd or lz4 frame, walked by their headers (tx_z.h), so
 * that a pass can make start points inside one frame: what `zstd` and
 * `lz4` write when they compress a whole tar is a single frame. The walk
 * only names where blocks begin; whether a decoder started there gives the
 * frame's bytes is checked by the pass (tx_z.c), so a walk misled by
 * hostile headers costs start points, never bytes. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "sf_bytes.h"
#include "tx_z.h"

#define NONE UINT64_MAX

static int peek(const struct sf_map *src, uint64_t at, uint8_t *p, size_t n)
{
	struct sf_err ignored;
	return at > src->size || src->size - at < n ? -EIO : sf_map_read(src, at, n, p, "frame header", &ignored);
}

void tx_zwalk_frame(struct tx_zwalk *w, const struct sf_map *src, enum tx_zcodec c, uint64_t at)
{
	uint8_t h[6];
	*w = (struct tx_zwalk){ .next = NONE };
	if (peek(src, at, h, sizeof h))
		return;
	if (c == TX_Z_ZSTD) {
		/* magic, descriptor, window descriptor unless in one segment,
		 * dictionary id (0, 1, 2, 4), content size (0, 2, 4, 8) */
		uint8_t fhd = h[4], wd = h[5];
		static const uint8_t did[] = { 0, 1, 2, 4 }, fcs[] = { 0, 2, 4, 8 };
		if (fhd & 0x20 || fhd & 0x08)
			return;
		uint64_t log = 10 + (wd >> 3), base = 1ull << log;
		w->window = base + (base >> 3) * (wd & 7);
		if (w->window > TX_Z_ZSTD_WINDOW_MAX)
			return;
		w->bd = wd;
		w->next = at + 6 + did[fhd & 3] + fcs[fhd >> 6];
	} else if (c == TX_Z_LZ4) {
		/* magic, FLG (version 1, independent blocks), BD, content
		 * size, dictionary id, header checksum */
		uint8_t flg = h[4];
		if ((flg & 0xc0) != 0x40 || !(flg & 0x20))
			return;
		w->flg = flg;
		w->bd = h[5];
		w->next = at + 7 + (flg & 0x08 ? 8 : 0) + (flg & 0x01 ? 4 : 0);
	}
}

/* The size of the block whose header is at `at`, header included, and
 * whether it is the frame's last: 0 when there is none to start at (no
 * header there, the lz4 end mark, a zstd block reserved or empty). */
static uint64_t block_at(const struct tx_zwalk *w, const struct sf_map *src, enum tx_zcodec c,
			 uint64_t at, bool *last)
{
	uint8_t h[4];
	*last = false;
	if (c == TX_Z_ZSTD && !peek(src, at, h, 3)) {
		/* last flag, type (raw, RLE, compressed), size: RLE holds one byte */
		uint32_t b = h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16, type = (b >> 1) & 3;
		*last = b & 1;
		return type == 3 || !(b >> 3) ? 0 : 3 + (type == 1 ? 1 : b >> 3);
	}
	if (c == TX_Z_LZ4 && !peek(src, at, h, 4)) {
		/* size (high bit: stored), 0 the end mark; then a checksum */
		uint32_t b = sf_le32(h) & 0x7fffffffu;
		return b ? 4 + (uint64_t)b + (w->flg & 0x10 ? 4 : 0) : 0;
	}
	return 0;
}

void tx_zwalk_step(struct tx_zwalk *w, const struct sf_map *src, enum tx_zcodec c)
{
	bool last;
	uint64_t n = block_at(w, src, c, w->next, &last), at = w->next + n;
	w->next = NONE;
	if (n && !last && block_at(w, src, c, at, &last))
		w->next = at;
}
