/* The decode cache (docs/design.md §2): decoded parts held within a byte budget,
 * least recently used first out. A part asked for by several readers at
 * once is decoded by one of them while the others wait, so it is decoded
 * at most once while it stays cached. Decodes running count against the
 * budget by the size their part declares; a part that cannot fit in the
 * whole budget is refused (EIO) instead of decoded. */
#ifndef FS_CACHE_H
#define FS_CACHE_H

#include <stdint.h>

#include "sf_view.h"
#include "stats.h"

struct dcache;

/* `stats`: where its counters go. */
struct dcache *dcache_new(uint64_t budget, struct stats *stats);
void dcache_free(struct dcache *c);
/* The sf_cache interface the views read through. */
struct sf_cache *dcache_iface(struct dcache *c);
/* The calling thread has dropped every part its read got from the cache
 * (after sf_readv_release): its next decodes may wait for room again. */
void dcache_read_done(void);
uint64_t dcache_bytes(struct dcache *c);
uint64_t dcache_budget(struct dcache *c);
/* `fn` is called before the cache decodes a part or waits for another
 * reader's decode of it: work that may take long. */
void dcache_on_slow(struct dcache *c, void (*fn)(void));

#endif
