/* An open-addressed table of pointers, for sets keyed by something each
 * item holds (a name, a number): the fnodes of a directory, the nodes a
 * directory made on demand. Deleted slots are reused, and the table is
 * rebuilt smaller when it empties, so names that come and go (rolling
 * checkpoints) keep it the size of what it holds now. */
#ifndef SF_PTAB_H
#define SF_PTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sf_ptab {
	void **slot;
	size_t cap;  /* 0 or a power of two */
	size_t n;    /* items */
	size_t dead; /* deleted slots not reused yet */
	/* the hash of an item, for rebuilding */
	uint64_t (*hash)(const void *item);
};

/* The item whose hash is h and for which eq(item, key) holds, or NULL. */
void *sf_ptab_find(const struct sf_ptab *t, uint64_t h,
		   bool (*eq)(const void *item, const void *key), const void *key);
/* Adds an item not in the table. 0 or -ENOMEM (the table is unchanged). */
int sf_ptab_put(struct sf_ptab *t, void *item);
/* Removes an item if present. */
void sf_ptab_del(struct sf_ptab *t, const void *item);
/* The item in slot i (0 <= i < cap), or NULL: for visiting every item. */
void *sf_ptab_at(const struct sf_ptab *t, size_t i);
void sf_ptab_free(struct sf_ptab *t);

#endif
