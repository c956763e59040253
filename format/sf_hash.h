/* A small open-addressing hash map from 64-bit hashes to pointers.
 *
 * The caller hashes its keys (XXH3 of a name, an id, ...) and, where two
 * keys may share a hash, says how to tell them apart: eq(key, val) says
 * whether the stored value `val` belongs to the caller's `key`. A NULL eq
 * lets the hash alone decide. The map owns neither keys nor values; values
 * must not be NULL (an empty slot holds NULL).
 *
 * Linear probing, at most half full. Deleting shifts the later entries of
 * the probe run back into the hole, so a deleted slot is free at once and
 * no tombstones pile up. A zeroed struct is an empty map. Not thread-safe:
 * the caller locks.
 */
#ifndef SF_HASH_H
#define SF_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sf_hash_slot {
	uint64_t hash;
	void *val; /* NULL: empty */
};

struct sf_hash {
	struct sf_hash_slot *slot;
	size_t cap; /* 0, or a power of two */
	size_t n;   /* values held */
};

typedef bool (*sf_hash_eq_fn)(const void *key, const void *val);

/* The value stored under `hash` that eq accepts for `key`, or NULL. */
void *sf_hash_get(const struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key);
/* Adds `val` under `hash` (it does not look for an equal key first).
 * 0, or -ENOMEM with the map unchanged. */
int sf_hash_put(struct sf_hash *h, uint64_t hash, void *val);
/* Removes the value sf_hash_get would find and returns it (NULL if none). */
void *sf_hash_del(struct sf_hash *h, uint64_t hash, sf_hash_eq_fn eq, const void *key);
/* Walks the values in no particular order, the map unchanged meanwhile:
 *     size_t pos = 0; void *v;
 *     while ((v = sf_hash_next(h, &pos))) ...   */
void *sf_hash_next(const struct sf_hash *h, size_t *pos);
/* Frees the slots (not the values), leaving an empty map. */
void sf_hash_free(struct sf_hash *h);

#endif
