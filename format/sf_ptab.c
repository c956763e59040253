#include "sf_ptab.h"

#include <errno.h>
#include <stdlib.h>

/* the table's own address marks a deleted slot */
#define DEAD(t) ((void *)(t))

void *sf_ptab_find(const struct sf_ptab *t, uint64_t h,
		   bool (*eq)(const void *item, const void *key), const void *key)
{
	if (!t->cap)
		return NULL;
	for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		void *s = t->slot[i];
		if (!s)
			return NULL;
		if (s != DEAD(t) && eq(s, key))
			return s;
	}
}

static int rebuild(struct sf_ptab *t, size_t cap)
{
	void **s = calloc(cap, sizeof *s);
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < t->cap; i++) {
		void *item = t->slot[i];
		if (!item || item == DEAD(t))
			continue;
		size_t j = t->hash(item) & (cap - 1);
		while (s[j])
			j = (j + 1) & (cap - 1);
		s[j] = item;
	}
	free(t->slot);
	t->slot = s;
	t->cap = cap;
	t->dead = 0;
	return 0;
}

/* The capacity for n items: at most half full. */
static size_t cap_for(size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n + 2)
		cap *= 2;
	return cap;
}

int sf_ptab_put(struct sf_ptab *t, void *item)
{
	/* deleted slots count as used so that probing always ends */
	if ((t->n + t->dead + 1) * 2 > t->cap) {
		int rc = rebuild(t, cap_for(t->n + 1));
		if (rc)
			return rc;
	}
	for (size_t i = t->hash(item) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		if (!t->slot[i] || t->slot[i] == DEAD(t)) {
			t->dead -= t->slot[i] == DEAD(t);
			t->slot[i] = item;
			t->n++;
			return 0;
		}
	}
}

void sf_ptab_del(struct sf_ptab *t, const void *item)
{
	if (!t->cap)
		return;
	for (size_t i = t->hash(item) & (t->cap - 1); t->slot[i]; i = (i + 1) & (t->cap - 1)) {
		if (t->slot[i] != item)
			continue;
		t->slot[i] = DEAD(t);
		t->n--;
		t->dead++;
		break;
	}
	if (!t->n) {
		sf_ptab_free(t);
	} else if (t->cap > 64 && t->n * 8 < t->cap) {
		/* shrink; on failure the table stays as it is, still correct */
		(void)rebuild(t, cap_for(t->n));
	}
}

void *sf_ptab_at(const struct sf_ptab *t, size_t i)
{
	return t->slot[i] == DEAD(t) ? NULL : t->slot[i];
}

void sf_ptab_free(struct sf_ptab *t)
{
	free(t->slot);
	t->slot = NULL;
	t->cap = t->n = t->dead = 0;
}
