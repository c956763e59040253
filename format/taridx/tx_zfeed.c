/* A first use's walk of a compressed tar beside its pass (tx_z.h): the
 * walk reads the bytes the pass decodes, through a ring, instead of
 * decoding the archive a second time through the pieces. Its map's size
 * is unknown until the pass ends: the walk sees zeros past the decoded
 * end, which is why its result stands only when it ended at end blocks
 * that are the tar's own bytes (tx_zfeed_end). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tx.h"
#include "tx_z.h"

/* what the pass may decode ahead of the walk's last read (a walk reads
 * TX_WINDOW_BYTES at a time, records and headers far less) */
#define RING (8u << 20)
#define READ_MAX (RING / 2)
/* and the ring takes at most this share of the cache budget */
#define RING_SHARE 4u

struct tx_zfeed {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t *ring;
	uint64_t hi;        /* bytes pushed */
	uint64_t need;      /* where the walk's last read began: kept */
	uint64_t size;      /* the decoded size, once done */
	bool done, failed;  /* the pass ended; without its decoded size */
	bool quit;          /* the walk ended: nothing more to keep */
	struct sf_map map;
	struct sf_cache *cache;
	struct tx_zbeside *beside;
	struct sf_progress pr;
	struct sf_err e;
	int rc;
	pthread_t thread;
};

/* The walk's reads: what the pass decoded, waited for; zeros past its end. */
static int feed_read(const struct sf_map *m, uint64_t off, uint64_t len, void *dst,
		     const char *what, struct sf_err *e)
{
	struct tx_zfeed *f = m->src;
	pthread_mutex_lock(&f->lock);
	if (len > READ_MAX || off + len < off || (f->hi > RING && off < f->hi - RING)) {
		pthread_mutex_unlock(&f->lock);
		return sf_fail(e, -EIO, "%s: %s: a read the walk beside the pass cannot make", m->path, what);
	}
	f->need = off;
	pthread_cond_broadcast(&f->cond);
	while (!f->done && f->hi < off + len)
		pthread_cond_wait(&f->cond, &f->lock);
	int rc = f->failed ? sf_fail(e, -EIO, "%s: %s: the pass failed", m->path, what) : 0;
	uint64_t have = !rc && f->hi > off ? f->hi - off : 0;
	have = have < len ? have : len;
	for (uint64_t k = 0; k < have;) {
		uint64_t o = (off + k) % RING, n = have - k < RING - o ? have - k : RING - o;
		memcpy((uint8_t *)dst + k, f->ring + o, (size_t)n);
		k += n;
	}
	pthread_mutex_unlock(&f->lock);
	if (!rc)
		memset((uint8_t *)dst + have, 0, (size_t)(len - have));
	return rc;
}

static void *walker(void *arg)
{
	struct tx_zfeed *f = arg;
	f->rc = f->beside->walk(&f->map, &f->pr, f->beside->arg, &f->e);
	pthread_mutex_lock(&f->lock);
	f->quit = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

struct tx_zfeed *tx_zfeed_start(struct tx_zbeside *beside, struct sf_cache *cache, const char *path)
{
	/* a small budget keeps its room for the pass's own index and decoder:
	 * the walk then follows the pass, through the pieces */
	if (cache->limit && RING > cache->limit / RING_SHARE)
		return NULL;
	struct tx_zfeed *f = calloc(1, sizeof *f);
	struct sf_err ignored;
	if (!f || sf_cache_charge(cache, RING, path, "a walk beside the pass", &ignored)) {
		free(f);
		return NULL;
	}
	f->cache = cache;
	f->beside = beside;
	f->map = (struct sf_map){ .size = SIZE_MAX / 2, .path = (char *)path, .fd = -1,
				  .read = feed_read, .src = f };
	atomic_init(&f->map.refs, 1);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	if (!(f->ring = malloc(RING)) || pthread_create(&f->thread, NULL, walker, f)) {
		pthread_mutex_destroy(&f->lock);
		pthread_cond_destroy(&f->cond);
		free(f->ring);
		sf_cache_uncharge(cache, cache->charge ? RING : 0);
		free(f);
		return NULL;
	}
	return f;
}

void tx_zfeed_push(struct tx_zfeed *f, const uint8_t *p, size_t n)
{
	pthread_mutex_lock(&f->lock);
	while (n && !f->quit) {
		/* the bytes from the walk's last read on are kept (it may
		 * wait further on, past a member's data) */
		while (!f->quit && f->hi >= f->need + RING)
			pthread_cond_wait(&f->cond, &f->lock);
		uint64_t room = f->need + RING - f->hi, o = f->hi % RING;
		size_t k = n < room ? n : (size_t)room;
		k = k < RING - o ? k : (size_t)(RING - o);
		if (f->quit || !k)
			continue;
		memcpy(f->ring + o, p, k);
		f->hi += k;
		p += k;
		n -= k;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
}

void tx_zfeed_end(struct tx_zfeed *f, uint64_t size, bool ok)
{
	pthread_mutex_lock(&f->lock);
	f->done = true;
	f->failed = !ok;
	f->size = size;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	pthread_join(f->thread, NULL);
	/* the walk ended at a zero block (the tar's end) at `end`: where a
	 * walk of the whole map ends too when that block is the tar's own
	 * bytes, or is the decoded end itself; past it the walk read zeros
	 * the tar does not hold */
	uint64_t end = atomic_load(&f->pr.bytes_walked);
	f->beside->walked = !f->rc && !f->failed && (end == size || (end < size && size - end >= TX_BLOCK));
	f->beside->headers = atomic_load(&f->pr.headers_walked);
	f->beside->bytes = end;
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f->ring);
	sf_cache_uncharge(f->cache, f->cache->charge ? RING : 0);
	free(f);
}
