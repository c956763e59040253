#include "sf_turn.h"

#include <pthread.h>
#include <stdint.h>

/* Where the waiters of a turn wait. Held only to look at or set a flag:
 * below every other lock (docs/architecture.md, "Locks"). */
struct bucket {
	pthread_mutex_t lock;
	pthread_cond_t done;
};

#define BUCKET { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER }
#define BUCKETS4 BUCKET, BUCKET, BUCKET, BUCKET
#define BUCKETS16 BUCKETS4, BUCKETS4, BUCKETS4, BUCKETS4
#define NBUCKETS 64

/* Shared by every turn of the process: they hold no state but the waiters
 * of the moment, and a turn wakes only its bucket's. */
static struct bucket buckets[NBUCKETS] = { BUCKETS16, BUCKETS16, BUCKETS16, BUCKETS16 };

static struct bucket *bucket_of(const struct sf_turn *t)
{
	uint64_t a = (uint64_t)(uintptr_t)t * 0x9E3779B97F4A7C15ull;
	return &buckets[(a >> 32) % NBUCKETS];
}

void sf_turn_take(struct sf_turn *t)
{
	struct bucket *b = bucket_of(t);
	pthread_mutex_lock(&b->lock);
	while (atomic_load_explicit(&t->busy, memory_order_relaxed))
		pthread_cond_wait(&b->done, &b->lock);
	atomic_store_explicit(&t->busy, true, memory_order_relaxed);
	pthread_mutex_unlock(&b->lock);
}

bool sf_turn_try(struct sf_turn *t)
{
	struct bucket *b = bucket_of(t);
	pthread_mutex_lock(&b->lock);
	bool mine = !atomic_load_explicit(&t->busy, memory_order_relaxed);
	if (mine)
		atomic_store_explicit(&t->busy, true, memory_order_relaxed);
	pthread_mutex_unlock(&b->lock);
	return mine;
}

void sf_turn_give(struct sf_turn *t)
{
	struct bucket *b = bucket_of(t);
	pthread_mutex_lock(&b->lock);
	atomic_store_explicit(&t->busy, false, memory_order_relaxed);
	/* every waiter of the bucket: some may wait for other turns */
	pthread_cond_broadcast(&b->done);
	pthread_mutex_unlock(&b->lock);
}
