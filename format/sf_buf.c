/* Reference-counted buffers and growable strings. */
#include "sf_buf.h"
#include "sf_big.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct sf_buf *sf_buf_wrap(uint8_t *data, size_t len)
{
	struct sf_buf *b = malloc(sizeof *b);
	if (!b)
		return NULL;
	atomic_init(&b->refs, 1);
	b->len = b->cap = len;
	b->data = data;
	b->big = false;
	b->give = NULL;
	b->to = NULL;
	return b;
}

struct sf_buf *sf_buf_new(size_t len)
{
	uint8_t *d = calloc(1, len ? len : 1);
	if (!d)
		return NULL;
	struct sf_buf *b = sf_buf_wrap(d, len);
	if (!b)
		free(d);
	return b;
}

struct sf_buf *sf_buf_ref(struct sf_buf *b)
{
	atomic_fetch_add(&b->refs, 1);
	return b;
}

void sf_buf_unref(struct sf_buf *b)
{
	if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
		if (b->give && b->give(b->to, b->data, b->cap))
			;
		else if (b->big)
			sf_big_free(b->data);
		else
			free(b->data);
		free(b);
	}
}

static void str_release(struct sf_str *s)
{
	if (s->big)
		sf_big_free(s->p);
	else
		free(s->p);
}

bool sf_str_reserve(struct sf_str *s, size_t more)
{
	if (s->oom)
		return false;
	if (s->len + more <= s->cap)
		return true;
	size_t cap = s->cap ? s->cap : 256;
	while (cap < s->len + more) {
		if (cap > SIZE_MAX / 2) {
			s->oom = true;
			return false;
		}
		cap *= 2;
	}
	uint8_t *p;
	if (cap >= SF_STR_BIG) {
		p = sf_big_alloc(cap, 1);
		if (p && s->len)
			memcpy(p, s->p, s->len);
		if (p)
			str_release(s);
	} else {
		p = realloc(s->p, cap);
	}
	if (!p) {
		s->oom = true;
		return false;
	}
	s->p = p;
	s->cap = cap;
	s->big = cap >= SF_STR_BIG;
	return true;
}

void sf_str_addc(struct sf_str *s, char c)
{
	sf_str_add(s, &c, 1);
}

void sf_str_vaddf(struct sf_str *s, const char *fmt, va_list ap)
{
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	if (n >= 0 && sf_str_reserve(s, (size_t)n + 1)) {
		vsnprintf((char *)s->p + s->len, (size_t)n + 1, fmt, again);
		s->len += (size_t)n;
	}
	va_end(again);
}

void sf_str_addf(struct sf_str *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sf_str_vaddf(s, fmt, ap);
	va_end(ap);
}

struct sf_buf *sf_str_take(struct sf_str *s)
{
	if (s->oom) {
		sf_str_free(s);
		return NULL;
	}
	struct sf_buf *b = s->p ? sf_buf_wrap(s->p, s->len) : sf_buf_new(0);
	if (!b) {
		sf_str_free(s);
		return NULL;
	}
	b->big = s->big;
	memset(s, 0, sizeof *s);
	return b;
}

void sf_str_free(struct sf_str *s)
{
	str_release(s);
	memset(s, 0, sizeof *s);
}

int sf_grow_by(void *pp, size_t *cap, size_t n, size_t size, size_t first,
	       void *(*resize)(void *old, size_t had, size_t want))
{
	if (n < *cap)
		return 0;
	size_t c = *cap ? *cap : first;
	while (c <= n) {
		if (c > SIZE_MAX / 2)
			return -ENOMEM;
		c *= 2;
	}
	if (c > SIZE_MAX / size)
		return -ENOMEM;
	void *old;
	memcpy(&old, pp, sizeof old);
	void *p = resize(old, *cap * size, c * size);
	if (!p)
		return -ENOMEM;
	memcpy(pp, &p, sizeof p);
	*cap = c;
	return 0;
}

static void *re_alloc(void *old, size_t had, size_t want)
{
	(void)had;
	return realloc(old, want);
}

int sf_grow(void *pp, size_t *cap, size_t n, size_t size, size_t first)
{
	return sf_grow_by(pp, cap, n, size, first, re_alloc);
}
