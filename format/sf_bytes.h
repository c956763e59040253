/* Little-endian loads and stores, overflow-safe range checks and a bounded
 * cursor: what every parser reads untrusted bytes with. */
#ifndef SF_BYTES_H
#define SF_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t sf_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t sf_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t sf_le64(const uint8_t *p)
{
	return (uint64_t)sf_le32(p) | (uint64_t)sf_le32(p + 4) << 32;
}

static inline float sf_lef32(const uint8_t *p)
{
	uint32_t u = sf_le32(p);
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline double sf_lef64(const uint8_t *p)
{
	uint64_t u = sf_le64(p);
	double d;
	memcpy(&d, &u, sizeof d);
	return d;
}

static inline void sf_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void sf_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void sf_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* True when [off, off+len) lies inside a buffer of `size` bytes, without
 * overflowing. */
static inline bool sf_range_ok(uint64_t size, uint64_t off, uint64_t len)
{
	return off <= size && len <= size - off;
}

/* a*b and a+b with overflow detection: return false on overflow. */
static inline bool sf_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

static inline bool sf_add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

/* A bounded reader over untrusted bytes: every get fails once past the end
 * and stays failed, so a parser can read a run of fields and check once. */
struct sf_cursor {
	const uint8_t *p;
	size_t len;
	size_t pos;
	bool bad;
};

static inline struct sf_cursor sf_cursor(const uint8_t *p, size_t len)
{
	struct sf_cursor c = { p, len, 0, false };
	return c;
}

/* Returns a pointer to the next n bytes and advances, or NULL (and marks the
 * cursor bad) if fewer remain. */
const uint8_t *sf_cur_take(struct sf_cursor *c, size_t n);
uint8_t sf_cur_u8(struct sf_cursor *c);
uint16_t sf_cur_u16(struct sf_cursor *c);
uint32_t sf_cur_u32(struct sf_cursor *c);
uint64_t sf_cur_u64(struct sf_cursor *c);
/* LEB128 unsigned varint (at most 10 bytes); bad on truncation or overlong. */
uint64_t sf_cur_uvarint(struct sf_cursor *c);

static inline size_t sf_cur_left(const struct sf_cursor *c)
{
	return c->bad ? 0 : c->len - c->pos;
}

#endif
