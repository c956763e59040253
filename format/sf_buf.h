/* Reference-counted byte buffers, growable strings and the doubling growth
 * of arrays. */
#ifndef SF_BUF_H
#define SF_BUF_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A reference-counted byte buffer. */
struct sf_buf {
	atomic_uint refs;
	size_t len;
	uint8_t *data;
	bool big; /* data is from sf_big_alloc (sf_big.h), not malloc */
	/* where data goes at the last unref instead of being freed (a
	 * cache's spare buffers, sf_cache_buf), which takes it unless it
	 * returns false; `cap` its room. NULL: freed. */
	bool (*give)(void *to, uint8_t *data, size_t cap);
	void *to;
	size_t cap;
};

struct sf_buf *sf_buf_new(size_t len);            /* zero-filled; NULL on ENOMEM */
struct sf_buf *sf_buf_wrap(uint8_t *data, size_t len); /* takes a malloc'd block */
struct sf_buf *sf_buf_ref(struct sf_buf *b);
void sf_buf_unref(struct sf_buf *b);

/* Makes room for element `n` of the growing array whose address is `pp`
 * (a pointer to its first element), holding *cap elements of `size` bytes:
 * the capacity doubles, starting at `first`. 0, or -ENOMEM with the array
 * and *cap unchanged. */
int sf_grow(void *pp, size_t *cap, size_t n, size_t size, size_t first);
/* The same growth, the array moved by resize(old, bytes it had, bytes
 * wanted), which returns the new array (the old one given up) or NULL
 * (the old one kept). */
int sf_grow_by(void *pp, size_t *cap, size_t n, size_t size, size_t first,
	       void *(*resize)(void *old, size_t had, size_t want));

/* A growable byte string for building text and JSON views. One of
 * SF_STR_BIG bytes or more moves to huge pages (sf_big.h): a fold's
 * samples.jsonl is tens of megabytes of fresh memory. */
struct sf_str {
	uint8_t *p;
	size_t len, cap;
	bool oom;
	bool big; /* p is from sf_big_alloc */
};
#define SF_STR_BIG ((size_t)4 << 20)
/* Appends n bytes; a string that cannot grow is marked oom (sf_str_take
 * then gives NULL). Inline: renders of millions of lines (samples.jsonl)
 * append a few bytes at a time. */
bool sf_str_reserve(struct sf_str *s, size_t more);
static inline void sf_str_add(struct sf_str *s, const void *p, size_t n)
{
	if (n && (s->len + n <= s->cap || sf_str_reserve(s, n))) {
		memcpy(s->p + s->len, p, n);
		s->len += n;
	}
}
void sf_str_addf(struct sf_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sf_str_vaddf(struct sf_str *s, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
void sf_str_addc(struct sf_str *s, char c);
/* Moves the string into a buffer (the string is left empty). NULL on OOM. */
struct sf_buf *sf_str_take(struct sf_str *s);
void sf_str_free(struct sf_str *s);

#endif
