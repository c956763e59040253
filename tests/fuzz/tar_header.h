/* A ustar header as tar writers make it, for tests that write tars of
 * their own (the unit tests' hostile folds, fuzz_taridx_tree): fields as
 * octal, the checksum computed. Not a reader: the format code has that. */
#ifndef TAR_HEADER_H
#define TAR_HEADER_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct tar_names {
	const void *name, *prefix, *link;
	size_t nlen, plen, llen;
};

/* Writes v as width-1 octal digits and a NUL (v fits: tests keep it small). */
static inline void put_octal(uint8_t *p, size_t width, uint64_t v)
{
	char digits[24];
	snprintf(digits, sizeof digits, "%0*llo", (int)width - 1, (unsigned long long)v);
	memcpy(p, digits, width - 1);
	p[width - 1] = 0;
}

/* Fills h (512 bytes) for a member of `type` and `size` payload bytes;
 * names longer than their fields are cut. */
static inline void tar_header(uint8_t h[512], const struct tar_names *n, char type, uint64_t size)
{
	memset(h, 0, 512);
	if (n->nlen)
		memcpy(h, n->name, n->nlen < 100 ? n->nlen : 100);
	put_octal(h + 100, 8, 0644);
	put_octal(h + 108, 8, 0);
	put_octal(h + 116, 8, 0);
	put_octal(h + 124, 12, size);
	put_octal(h + 136, 12, 0);
	h[156] = (uint8_t)type;
	if (n->llen)
		memcpy(h + 157, n->link, n->llen < 100 ? n->llen : 100);
	memcpy(h + 257, "ustar\0" "00", 8);
	if (n->plen)
		memcpy(h + 345, n->prefix, n->plen < 155 ? n->plen : 155);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

#endif
