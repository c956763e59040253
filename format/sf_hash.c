/* The open-addressing hash map of sf_hash.h. */
#include "sf_hash.h"

#include <errno.h>
#include <stdlib.h>

static struct sf_hash_slot *find(const struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq,
				 const void *key)
{
	if (!h->n)
		return NULL;
	size_t mask = h->cap - 1;
	for (size_t i = hash & mask; h->slot[i].val; i = (i + 1) & mask) {
		struct sf_hash_slot *s = &h->slot[i];
		if (s->hash == hash && (!eq || eq(key, s->val)))
			return s;
	}
	return NULL;
}

void *sf_hash_get(const struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key)
{
	struct sf_hash_slot *s = find(h, hash, eq, key);
	return s ? s->val : NULL;
}

static void place(struct sf_hash_slot *slot, size_t cap, uint64_t hash, void *val)
{
	size_t i = hash & (cap - 1);
	while (slot[i].val)
		i = (i + 1) & (cap - 1);
	slot[i] = (struct sf_hash_slot){ hash, val };
}

int sf_hash_put(struct sf_hash *h, uint64_t hash, void *val)
{
	if ((h->n + 1) * 2 > h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		if (cap > SIZE_MAX / 2 / sizeof *h->slot)
			return -ENOMEM;
		struct sf_hash_slot *slot = calloc(cap, sizeof *slot);
		if (!slot)
			return -ENOMEM;
		for (size_t i = 0; i < h->cap; i++)
			if (h->slot[i].val)
				place(slot, cap, h->slot[i].hash, h->slot[i].val);
		free(h->slot);
		h->slot = slot;
		h->cap = cap;
	}
	place(h->slot, h->cap, hash, val);
	h->n++;
	return 0;
}

void *sf_hash_del(struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key)
{
	struct sf_hash_slot *s = find(h, hash, eq, key);
	if (!s)
		return NULL;
	void *val = s->val;
	size_t mask = h->cap - 1, hole = (size_t)(s - h->slot);
	/* Pull back each later entry of the run that may sit in the hole:
	 * one whose home is not cyclically in (hole, j]. */
	for (size_t j = (hole + 1) & mask; h->slot[j].val; j = (j + 1) & mask) {
		size_t home = h->slot[j].hash & mask;
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			h->slot[hole] = h->slot[j];
			hole = j;
		}
	}
	h->slot[hole] = (struct sf_hash_slot){ 0, NULL };
	h->n--;
	return val;
}

void *sf_hash_next(const struct sf_hash *h, size_t *pos)
{
	while (*pos < h->cap) {
		void *val = h->slot[(*pos)++].val;
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
