/* Large arrays in huge pages.
 *
 * The first touch of a 4 KiB page of fresh memory costs 8-15 µs on the VMs
 * shardfs is measured on (docs/performance.md, lever 15), and listing a
 * directory of 100,000 containers touches tens of megabytes. An array of
 * SF_BIG_MIN bytes or more gets a mapping of its own, aligned to 2 MiB and
 * advised for transparent huge pages, where one fault of about 150 µs fills
 * 2 MiB. Where the kernel has no huge page to give, the advice is ignored
 * and the mapping works as any other. Smaller arrays come from malloc. */
#ifndef SF_BIG_H
#define SF_BIG_H

#include <stddef.h>

#define SF_BIG_MIN ((size_t)512 << 10)

/* n elements of `size` bytes, zero-filled; NULL when out of memory. */
void *sf_big_alloc(size_t n, size_t size);
void sf_big_free(void *p);
/* As sf_grow (sf_buf.h), for an array from sf_big_alloc, or NULL. */
int sf_big_grow(void *pp, size_t *cap, size_t n, size_t size, size_t first);

/* Strings that are freed together (a listing's names): copied one after
 * another into blocks from sf_big_alloc, each twice the last, instead of a
 * malloc each. A zeroed struct is empty. */
struct sf_strs {
	struct sf_strs_block *last;
};
/* A copy of the `len` bytes at s, NUL-terminated; NULL when out of memory. */
char *sf_strs_add(struct sf_strs *a, const char *s, size_t len);
void sf_strs_free(struct sf_strs *a);

#endif
