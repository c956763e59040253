/* The integer encodings of spec §10.5 (also used by posting blocks, §15.4).
 * Each decodes exactly n values into a dense uint64 array, or fails with
 * -EIO when the bytes run short or a field is impossible. */
#include <errno.h>

#include "tat.h"

int tat_unpack(struct sf_cursor *c, unsigned width, size_t n, uint64_t *out)
{
	if (width > 64)
		return -EIO;
	uint64_t bits;
	if (!sf_mul_ok(n, width, &bits) || bits > UINT64_MAX - 7)
		return -EIO;
	uint64_t nbytes = (bits + 7) / 8;
	if (nbytes > sf_cur_left(c))
		return -EIO;
	const uint8_t *p = sf_cur_take(c, (size_t)nbytes);
	uint64_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = 0;
		unsigned got = 0;
		while (got < width) {
			unsigned sh = pos & 7, take = 8 - sh;
			if (take > width - got)
				take = width - got;
			uint64_t b = (uint64_t)(p[pos >> 3] >> sh) & ((1u << take) - 1);
			v |= b << got;
			got += take;
			pos += take;
		}
		out[i] = v;
	}
	return 0;
}

int tat_dec_bitpack(struct sf_cursor *c, size_t n, uint64_t *out)
{
	if (n == 0)
		return 0;
	unsigned width = sf_cur_u8(c);
	uint64_t base = sf_cur_uvarint(c);
	if (c->bad || tat_unpack(c, width, n, out))
		return -EIO;
	for (size_t i = 0; i < n; i++)
		out[i] += base;
	return 0;
}

int tat_dec_delta(struct sf_cursor *c, size_t n, uint64_t *out)
{
	if (n == 0)
		return 0;
	out[0] = sf_cur_uvarint(c);
	if (c->bad || tat_dec_bitpack(c, n - 1, out + 1))
		return -EIO;
	for (size_t i = 1; i < n; i++) {
		uint64_t zz = out[i];
		uint64_t d = (zz >> 1) ^ (0 - (zz & 1));
		out[i] = out[i - 1] + d;
	}
	return 0;
}

int tat_dec_rle(struct sf_cursor *c, size_t n, uint64_t *out)
{
	unsigned width = sf_cur_u8(c);
	if (c->bad || width > 64)
		return -EIO;
	size_t done = 0;
	while (done < n) {
		uint64_t ctrl = sf_cur_uvarint(c);
		if (c->bad)
			return -EIO;
		uint64_t cnt = ctrl >> 1;
		size_t take = cnt < n - done ? (size_t)cnt : n - done;
		if (ctrl & 1) {
			/* one value in ceil(width/8) bytes, repeated */
			uint64_t v;
			if (tat_unpack(c, width, 1, &v))
				return -EIO;
			for (size_t i = 0; i < take; i++)
				out[done + i] = v;
		} else if (tat_unpack(c, width, take, out + done)) {
			return -EIO;
		}
		done += take;
	}
	return 0;
}

int tat_dec_groupvarint(struct sf_cursor *c, size_t n, uint64_t *out)
{
	for (size_t i = 0; i < n; i += 4) {
		unsigned ctrl = sf_cur_u8(c);
		for (size_t j = 0; j < 4 && i + j < n; j++) {
			size_t len = ((ctrl >> (2 * j)) & 3) + 1;
			const uint8_t *p = sf_cur_take(c, len);
			if (!p)
				return -EIO;
			uint64_t v = 0;
			for (size_t k = 0; k < len; k++)
				v |= (uint64_t)p[k] << (8 * k);
			out[i + j] = v;
		}
	}
	return c->bad ? -EIO : 0;
}

int tat_dec_pfordelta(struct sf_cursor *c, size_t n, uint64_t *out)
{
	unsigned width = sf_cur_u8(c);
	unsigned nexc = sf_cur_u8(c);
	uint8_t pos[256];
	uint64_t val[256];
	for (unsigned i = 0; i < nexc; i++) {
		pos[i] = sf_cur_u8(c);
		val[i] = sf_cur_uvarint(c);
	}
	if (c->bad || tat_unpack(c, width, n, out))
		return -EIO;
	for (unsigned i = 0; i < nexc; i++) {
		if (pos[i] >= n)
			return -EIO;
		out[pos[i]] = val[i];
	}
	return 0;
}
