#include "sf_bytes.h"

const uint8_t *sf_cur_take(struct sf_cursor *c, size_t n)
{
	if (c->bad || n > c->len - c->pos) {
		c->bad = true;
		return NULL;
	}
	const uint8_t *p = c->p + c->pos;
	c->pos += n;
	return p;
}

uint8_t sf_cur_u8(struct sf_cursor *c)
{
	const uint8_t *p = sf_cur_take(c, 1);
	return p ? p[0] : 0;
}

uint16_t sf_cur_u16(struct sf_cursor *c)
{
	const uint8_t *p = sf_cur_take(c, 2);
	return p ? sf_le16(p) : 0;
}

uint32_t sf_cur_u32(struct sf_cursor *c)
{
	const uint8_t *p = sf_cur_take(c, 4);
	return p ? sf_le32(p) : 0;
}

uint64_t sf_cur_u64(struct sf_cursor *c)
{
	const uint8_t *p = sf_cur_take(c, 8);
	return p ? sf_le64(p) : 0;
}

uint64_t sf_cur_uvarint(struct sf_cursor *c)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 70; shift += 7) {
		const uint8_t *p = sf_cur_take(c, 1);
		if (!p)
			return 0;
		if (shift == 63 && *p > 1) {
			c->bad = true;
			return 0;
		}
		v |= (uint64_t)(*p & 0x7f) << shift;
		if (!(*p & 0x80))
			return v;
	}
	c->bad = true;
	return 0;
}
