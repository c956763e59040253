/* The decode cache (docs/design.md §2): decoded parts held within a byte budget,
 * least recently used first out. A part asked for by several readers at
 * once is decoded by one of them while the others wait, so it is decoded
 * at most once while it stays cached. Decodes running count against the
 * budget by the size their part declares; a part that cannot fit in the
 * whole budget fails with EIO instead of being decoded. */
#ifndef SF_DCACHE_H
#define SF_DCACHE_H

#include <stdatomic.h>
#include <stdint.h>

#include "sf_view.h"

struct sf_dcache;

/* What a cache counts (the daemon's stats.json shows them). */
struct sf_dcache_counts {
	atomic_uint_fast64_t hits, misses, evictions;
	atomic_uint_fast64_t bytes_decoded, parts_decoded;
	atomic_uint_fast64_t parts_ahead;   /* of parts_decoded: decoded ahead */
};

/* `counts`: where its counters go. The daemon makes one for its mount
 * (--cache-size), the C API one for its process (shardfs.c). */
struct sf_dcache *sf_dcache_new(uint64_t budget, struct sf_dcache_counts *counts);
/* Stops the thread that decodes ahead (waiting for its decode to end),
 * then frees the cache. */
void sf_dcache_free(struct sf_dcache *c);
/* The sf_cache interface the views read through. */
struct sf_cache *sf_dcache_iface(struct sf_dcache *c);
/* The calling thread's read is over: it has dropped every part it got from
 * the cache (after sf_readv_release), or handed them to what outlives the
 * read (a shardfs_hold): its next decodes may wait for room again. */
void sf_dcache_read_done(void);
uint64_t sf_dcache_bytes(struct sf_dcache *c);
uint64_t sf_dcache_budget(struct sf_dcache *c);
/* Sets the budget (the C API's shardfs_set_cache_size): parts and charges
 * made from then on keep within it; parts unheld past it go at once, the
 * rest as their readers let go. */
void sf_dcache_set_budget(struct sf_dcache *c, uint64_t budget);
/* The bytes charges hold (sf_cache_charge: working memory, a tar's index). */
uint64_t sf_dcache_charged(struct sf_dcache *c);
/* `fn` is called before the cache decodes a part or waits for another
 * reader's decode of it: work that may take long. */
void sf_dcache_on_slow(struct sf_dcache *c, void (*fn)(void));
/* `fn(arg)` is called, with no lock of the cache held, at each poll while
 * a reader waits for room that evicting parts cannot make: the daemon
 * closes idle views then (fs/openviews.h, openviews_press), the C API
 * sheds what its idle handles hold (shardfs.c). */
void sf_dcache_on_short(struct sf_dcache *c, void (*fn)(void *arg), void *arg);

#endif
