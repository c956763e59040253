/* Open-addressing hash maps from 64-bit hashes: sf_hash to pointers,
 * sf_ids to 32-bit ids in half or a quarter of the memory. One
 * implementation serves both.
 *
 * The caller hashes its keys (XXH3 of a name, an id, ...; the hash's top
 * bits choose the slot, so it must be well mixed) and, where two keys may
 * share a hash, says how to tell them apart: eq(key, val) says whether the
 * stored value `val` belongs to the caller's `key`. A NULL eq lets the hash
 * alone decide. The map owns neither keys nor values. Not thread-safe: the
 * caller locks.
 *
 * Linear probing. Deleting shifts the later entries of the probe run back
 * into the hole, so a deleted slot is free at once and no tombstones pile
 * up; a map under an eighth full shrinks.
 */
#ifndef SF_HASH_H
#define SF_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The map of either kind: `slot` holds cap slots of 16 bytes (sf_hash) or
 * 8 (sf_ids). A zeroed struct is an empty map. */
struct sf_hash {
	void *slot;
	size_t cap; /* 0, or a power of two */
	size_t n;   /* values held */
};

/* ---- pointers: at most half full; values must not be NULL ---------------- */

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

/* ---- ids ------------------------------------------------------------------
 *
 * For tables of millions keyed by row numbers or indexes into the caller's
 * array (ids below UINT32_MAX). A slot keeps the hash's top 32 bits and
 * the id, 8 bytes, and the table fills up to three quarters: two keys whose
 * hashes share their top 32 bits are told apart by eq alone, so give one
 * wherever keys may differ. A zeroed struct is an empty map of this kind.
 *
 * With hash_of, a slot keeps the id alone, 4 bytes, at most half full:
 * every id of a key's probe run goes to eq (give one), and growing the
 * table asks hash_of(ctx, id) for each id's hash again. For an index whose
 * eq is cheap (names in an arena). No deletion in either kind. */
struct sf_ids {
	struct sf_hash map;
	uint64_t (*hash_of)(const void *ctx, uint32_t id);
	const void *ctx;
};

typedef bool (*sf_ids_eq_fn)(const void *key, uint32_t id);

/* Where the id under `hash` that eq accepts for `key` is stored, or NULL.
 * The caller may overwrite it with the id of an equal key; the place is
 * good until the next sf_ids_put or sf_ids_reset. */
uint32_t *sf_ids_find(struct sf_ids *m, uint64_t hash, sf_ids_eq_fn eq, const void *key);
/* Adds `id` under `hash` (it does not look for an equal key first).
 * 0, -ENOMEM with the map unchanged, or -EINVAL for UINT32_MAX. */
int sf_ids_put(struct sf_ids *m, uint64_t hash, uint32_t id);
/* Empties the map and makes room for n ids, so that as many puts cannot
 * fail or move the table; memory is reused when it is about the size
 * needed. 0, or -ENOMEM with the map empty. */
int sf_ids_reset(struct sf_ids *m, size_t n);
/* Frees the slots, leaving an empty map. */
void sf_ids_free(struct sf_ids *m);

#endif
