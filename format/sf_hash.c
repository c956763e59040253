/* The maps of sf_hash.h: one open-addressing table whose slots hold a hash
 * and a pointer (sf_hash), a hash's top 32 bits and an id (sf_ids), or an
 * id alone (sf_ids with hash_of). `x` says which: NULL for pointers, else
 * the sf_ids; the probing, growth and resizing are the same. */
#include "sf_hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct wide {
	uint64_t hash;
	void *val; /* NULL: empty */
};

struct narrow {
	uint32_t top, id; /* id EMPTY_ID: empty */
};

#define EMPTY_ID UINT32_MAX
#define NONE SIZE_MAX

enum layout { WIDE, NARROW, BARE };

static enum layout layout(const struct sf_ids *x)
{
	return !x ? WIDE : x->hash_of ? BARE : NARROW;
}

/* What a slot keeps of a hash. */
static uint64_t kept(const struct sf_ids *x, uint64_t hash)
{
	return x ? hash >> 32 << 32 : hash;
}

/* Where a hash's probe starts: its top bits, which a NARROW slot keeps
 * (an id table has at most 2^32 slots). */
static size_t home(size_t cap, uint64_t hash)
{
	return (size_t)(hash >> (64 - __builtin_ctzll(cap)));
}

static size_t slot_size(const struct sf_ids *x)
{
	static const size_t size[] = { [WIDE] = sizeof(struct wide),
				       [NARROW] = sizeof(struct narrow),
				       [BARE] = sizeof(uint32_t) };
	return size[layout(x)];
}

/* The id in an id slot (EMPTY_ID: none). */
static uint32_t id_at(const struct sf_hash *h, const struct sf_ids *x, size_t i)
{
	return layout(x) == BARE ? ((const uint32_t *)h->slot)[i]
				 : ((const struct narrow *)h->slot)[i].id;
}

static bool used(const struct sf_hash *h, const struct sf_ids *x, size_t i)
{
	return x ? id_at(h, x, i) != EMPTY_ID : ((const struct wide *)h->slot)[i].val != NULL;
}

static uint64_t hash_at(const struct sf_hash *h, const struct sf_ids *x, size_t i)
{
	switch (layout(x)) {
	case WIDE:
		return ((const struct wide *)h->slot)[i].hash;
	case NARROW:
		return (uint64_t)((const struct narrow *)h->slot)[i].top << 32;
	default:
		return x->hash_of(x->ctx, id_at(h, x, i));
	}
}

static uintptr_t val_at(const struct sf_hash *h, const struct sf_ids *x, size_t i)
{
	return x ? id_at(h, x, i) : (uintptr_t)((const struct wide *)h->slot)[i].val;
}

/* From slot i on, the next slot of the probe run that may hold `hash` (any
 * BARE slot may), or NONE at the run's end. */
static size_t match(const struct sf_hash *h, const struct sf_ids *x, uint64_t hash, size_t i)
{
	uint64_t k = kept(x, hash);
	for (size_t mask = h->cap - 1; used(h, x, i); i = (i + 1) & mask)
		if (layout(x) == BARE || hash_at(h, x, i) == k)
			return i;
	return NONE;
}

static void place(struct sf_hash *h, const struct sf_ids *x, uint64_t hash, uintptr_t val)
{
	size_t i = home(h->cap, hash);
	while (used(h, x, i))
		i = (i + 1) & (h->cap - 1);
	switch (layout(x)) {
	case WIDE:
		((struct wide *)h->slot)[i] = (struct wide){ hash, (void *)val };
		break;
	case NARROW:
		((struct narrow *)h->slot)[i] = (struct narrow){ (uint32_t)(hash >> 32), (uint32_t)val };
		break;
	default:
		((uint32_t *)h->slot)[i] = (uint32_t)val;
	}
}

/* Whether n values may share cap slots: a NARROW table fills further, its
 * slots telling most keys apart without eq. */
static bool fits(const struct sf_ids *x, size_t n, size_t cap)
{
	return layout(x) == NARROW ? n <= cap / 4 * 3 : n * 2 <= cap;
}

/* Empty slots, or NULL. */
static void *empty_slots(const struct sf_ids *x, size_t cap)
{
	if (!x)
		return cap > SIZE_MAX / 2 / sizeof(struct wide) ? NULL : calloc(cap, sizeof(struct wide));
	void *s = cap > (size_t)1 << 32 ? NULL : malloc(cap * slot_size(x));
	if (s)
		memset(s, 0xFF, cap * slot_size(x));
	return s;
}

static int resize(struct sf_hash *h, const struct sf_ids *x, size_t cap)
{
	struct sf_hash old = *h;
	void *slot = empty_slots(x, cap);
	if (!slot)
		return -ENOMEM;
	h->slot = slot;
	h->cap = cap;
	for (size_t i = 0; i < old.cap; i++)
		if (used(&old, x, i))
			place(h, x, hash_at(&old, x, i), val_at(&old, x, i));
	free(old.slot);
	return 0;
}

static int put(struct sf_hash *h, const struct sf_ids *x, uint64_t hash, uintptr_t val)
{
	if (!fits(x, h->n + 1, h->cap)) {
		int rc = resize(h, x, h->cap ? h->cap * 2 : 16);
		if (rc)
			return rc;
	}
	place(h, x, hash, val);
	h->n++;
	return 0;
}

/* ---- pointers ------------------------------------------------------------ */

static size_t find(const struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key)
{
	if (!h->n)
		return NONE;
	const struct wide *s = h->slot;
	for (size_t i = home(h->cap, hash); (i = match(h, NULL, hash, i)) != NONE;
	     i = (i + 1) & (h->cap - 1))
		if (!eq || eq(key, s[i].val))
			return i;
	return NONE;
}

void *sf_hash_get(const struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key)
{
	size_t i = find(h, hash, eq, key);
	return i == NONE ? NULL : ((const struct wide *)h->slot)[i].val;
}

int sf_hash_put(struct sf_hash *h, uint64_t hash, void *val)
{
	return put(h, NULL, hash, (uintptr_t)val);
}

void *sf_hash_del(struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key)
{
	size_t hole = find(h, hash, eq, key);
	if (hole == NONE)
		return NULL;
	struct wide *s = h->slot;
	void *val = s[hole].val;
	size_t mask = h->cap - 1;
	/* Pull back each later entry of the run that may sit in the hole:
	 * one whose home is not cyclically in (hole, j]. */
	for (size_t j = (hole + 1) & mask; s[j].val; j = (j + 1) & mask) {
		size_t at = home(h->cap, s[j].hash);
		if (((j - at) & mask) >= ((j - hole) & mask)) {
			s[hole] = s[j];
			hole = j;
		}
	}
	s[hole] = (struct wide){ 0, NULL };
	h->n--;
	/* a map that emptied gives its memory back (a million inodes the
	 * kernel forgot); on failure it stays as it is, still correct */
	if (!h->n)
		sf_hash_free(h);
	else if (h->cap > 16 && h->n * 8 < h->cap)
		(void)resize(h, NULL, h->cap / 4);
	return val;
}

void *sf_hash_next(const struct sf_hash *h, size_t *pos)
{
	const struct wide *s = h->slot;
	while (*pos < h->cap) {
		void *val = s[(*pos)++].val;
		if (val)
			return val;
	}
	return NULL;
}

void sf_hash_free(struct sf_hash *h)
{
	free(h->slot);
	*h = (struct sf_hash){ 0 };
}

/* ---- ids ----------------------------------------------------------------- */

uint32_t *sf_ids_find(struct sf_ids *m, uint64_t hash, sf_ids_eq_fn eq, const void *key)
{
	struct sf_hash *h = &m->map;
	if (!h->n)
		return NULL;
	for (size_t i = home(h->cap, hash); (i = match(h, m, hash, i)) != NONE;
	     i = (i + 1) & (h->cap - 1)) {
		uint32_t *id = layout(m) == BARE ? &((uint32_t *)h->slot)[i]
						 : &((struct narrow *)h->slot)[i].id;
		if (!eq || eq(key, *id))
			return id;
	}
	return NULL;
}

int sf_ids_put(struct sf_ids *m, uint64_t hash, uint32_t id)
{
	return id == EMPTY_ID ? -EINVAL : put(&m->map, m, hash, id);
}

int sf_ids_reset(struct sf_ids *m, size_t n)
{
	struct sf_hash *h = &m->map;
	size_t cap = 16;
	while (!fits(m, n, cap) && cap <= (size_t)1 << 32)
		cap *= 2;
	h->n = 0;
	if (h->cap >= cap && h->cap <= 4 * cap) {
		memset(h->slot, 0xFF, h->cap * slot_size(m));
		return 0;
	}
	sf_ids_free(m);
	if (!(h->slot = empty_slots(m, cap)))
		return -ENOMEM;
	h->cap = cap;
	return 0;
}

void sf_ids_free(struct sf_ids *m)
{
	sf_hash_free(&m->map);
}
