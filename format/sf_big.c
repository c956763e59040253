#include "sf_big.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sf_buf.h"

#define HUGE ((size_t)2 << 20)
/* Before each array: how it was allocated. 64 bytes keep any element type
 * aligned. */
#define HEAD 64
struct head {
	size_t map_len; /* the mapping's length, or 0 for malloc */
};

void *sf_big_alloc(size_t n, size_t size)
{
	if (size && n > (SIZE_MAX - HUGE - HEAD) / size)
		return NULL;
	size_t bytes = HEAD + n * size;
	if (bytes < SF_BIG_MIN) {
		/* calloc aligns to 16 only; the head's 64 bytes keep an element
		 * aligned only if the block itself is */
		bytes = (bytes + HEAD - 1) & ~(size_t)(HEAD - 1);
		struct head *h = aligned_alloc(HEAD, bytes);
		if (!h)
			return NULL;
		memset(h, 0, bytes);
		return (char *)h + HEAD;
	}
	size_t len = (bytes + HUGE - 1) & ~(HUGE - 1);
	/* a 2 MiB boundary inside: what lies before it and after the array's
	 * last huge page is given back */
	char *raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	char *at = (char *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	if (at > raw)
		munmap(raw, (size_t)(at - raw));
	if (raw + HUGE > at)
		munmap(at + len, (size_t)(raw + HUGE - at));
	madvise(at, len, MADV_HUGEPAGE); /* advice: if not taken, it changes nothing */
	((struct head *)at)->map_len = len;
	return at + HEAD;
}

void sf_big_free(void *p)
{
	if (!p)
		return;
	struct head *h = (struct head *)((char *)p - HEAD);
	if (h->map_len)
		munmap(h, h->map_len);
	else
		free(h);
}

static void *big_resize(void *old, size_t had, size_t want)
{
	void *p = sf_big_alloc(want, 1);
	if (p && old) {
		memcpy(p, old, had);
		sf_big_free(old);
	}
	return p;
}

int sf_big_grow(void *pp, size_t *cap, size_t n, size_t size, size_t first)
{
	return sf_grow_by(pp, cap, n, size, first, big_resize);
}

struct sf_strs_block {
	struct sf_strs_block *prev;
	size_t used, cap;
	char data[];
};

char *sf_strs_add(struct sf_strs *a, const char *s, size_t len)
{
	struct sf_strs_block *b = a->last;
	if (!b || b->cap - b->used < len + 1) {
		size_t cap = b ? 2 * b->cap : (size_t)16 << 10;
		while (cap < len + 1)
			cap *= 2;
		struct sf_strs_block *nb = sf_big_alloc(1, sizeof *nb + cap);
		if (!nb)
			return NULL;
		nb->prev = b;
		nb->cap = cap;
		a->last = b = nb;
	}
	char *p = b->data + b->used;
	memcpy(p, s, len);
	p[len] = 0;
	b->used += len + 1;
	return p;
}

void sf_strs_free(struct sf_strs *a)
{
	while (a->last) {
		struct sf_strs_block *b = a->last;
		a->last = b->prev;
		sf_big_free(b);
	}
}
