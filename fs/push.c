/* Pushing ahead: the queue a READDIRPLUS of a view directory fills and the
 * thread that drains it (fs/push.h). A thread of its own, never a request
 * handler: a store waits for any READ of the same pages, which the request
 * threads answer meanwhile, over /dev/fuse as over io_uring. */
#include "push.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "daemon.h"
#include "reading.h"
#include "vnode.h"
#include "waits.h"

struct push {
	uint64_t window;          /* --push-ahead: 0 is off */
	pthread_mutex_t lock;     /* over what follows */
	pthread_cond_t wake;
	/* the files to push, oldest first: each holds a lookup reference on
	 * its node, so that a FORGET meanwhile frees nothing */
	struct push_item {
		struct fnode *n;
		uint64_t cost;
		uint64_t retry_at;    /* CLOCK_MONOTONIC ns; 0: first try */
		unsigned tries;       /* stores refused so far (ENOENT) */
	} *q;
	size_t head, len, cap;
	uint64_t queued;          /* the costs in q */
	bool stop;
	pthread_t thread;
};

/* the kernel holds a page per file at least */
#define PAGE_COST 4096
/* A store the kernel refused for an inode it has not made yet (the lister
 * links a READDIRPLUS reply's entries once it runs again, which a busy
 * machine delays: over io_uring under ASan, past 126 ms once in a CI run)
 * is tried again after 2 ms, then twice as long each time up to RETRY_MAX,
 * RETRIES times at most (about 2 s in all). */
#define RETRY_NS (2 * 1000 * 1000)
#define RETRY_MAX (128 * 1000 * 1000)
#define RETRIES 20

/* Whether `n` is a small view file with content the kernel may take: its
 * size known (a listing never builds), not pushed or read already. */
static uint64_t cost_of(struct fnode *n)
{
	if (!fnode_view_is(n, SF_FILE) || atomic_load(&n->pushed))
		return 0;
	struct sf_file_size sz = sf_file_size(fnode_vn(n));
	if (!sz.known || sz.size == 0 || sz.size > PUSH_MAX)
		return 0;
	return sz.size < PAGE_COST ? PAGE_COST : sz.size;
}

/* Appends under the lock; false when out of memory. */
static bool enqueue(struct push *p, struct fnode *n, uint64_t cost, uint64_t retry_at,
		    unsigned tries)
{
	if (p->len == p->cap) {
		/* unrolled into a larger array: the ring's oldest first */
		size_t cap = p->cap ? 2 * p->cap : 64;
		struct push_item *q = malloc(cap * sizeof *q);
		if (!q)
			return false;
		for (size_t i = 0; i < p->len; i++)
			q[i] = p->q[(p->head + i) % p->cap];
		free(p->q);
		p->q = q;
		p->cap = cap;
		p->head = 0;
	}
	p->q[(p->head + p->len) % p->cap] = (struct push_item){ n, cost, retry_at, tries };
	p->len++;
	p->queued += cost;
	return true;
}

void push_listed(struct daemon *dm, struct fnode *const *nodes, size_t n, uint64_t *used)
{
	struct push *p = dm->push;
	if (!p)
		return;
	size_t added = 0;
	pthread_mutex_lock(&dm->tree.lock);
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < n && !p->stop; i++) {
		uint64_t c = cost_of(nodes[i]);
		if (!c)
			continue;
		if (c > p->window - *used || c > p->window - p->queued)
			break; /* in listing order: none past the window */
		if (!enqueue(p, nodes[i], c, 0, 0))
			break;
		fnode_lookup_ref(nodes[i]);
		*used += c;
		added++;
	}
	if (added)
		pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&dm->tree.lock);
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Lets go of every file waiting (their references dropped with no lock
 * held: a FORGET may close views). */
static void drop_waiting(struct daemon *dm)
{
	struct push *p = dm->push;
	pthread_mutex_lock(&p->lock);
	struct push_item *q = p->q;
	size_t head = p->head, len = p->len, cap = p->cap;
	p->q = NULL;
	p->head = p->len = p->cap = 0;
	p->queued = 0;
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < len; i++)
		fnode_forget(&dm->tree, q[(head + i) % cap].n, 1);
	free(q);
}

/* Whether a request has been stuck at the source a second or more: a
 * push would likely wait there too, and what it decodes competes with
 * that request's work. Pushing waits instead of giving up, since the
 * stall is not the listed files' doing. */
static bool source_stuck(struct daemon *dm)
{
	struct stuck one;
	size_t at_source;
	return sections_stuck(&dm->stats.sections, &one, 1, &at_source) > 0;
}

/* how often a paused pusher looks again */
#define PAUSE_NS (50 * 1000 * 1000L)

static void *pusher(void *arg)
{
	struct daemon *dm = arg;
	struct push *p = dm->push;
	uint64_t decoded = 0; /* since the queue was last empty */
	pthread_mutex_lock(&p->lock);
	for (;;) {
		if (p->len == 0)
			decoded = 0;
		while (!p->stop && p->len == 0)
			pthread_cond_wait(&p->wake, &p->lock);
		if (p->stop)
			break;
		/* looked at with no lock held: the sections' locks come
		 * before this one in the lock order */
		pthread_mutex_unlock(&p->lock);
		bool paused = source_stuck(dm);
		pthread_mutex_lock(&p->lock);
		if (paused) {
			wait_at_most(&p->wake, &p->lock, PAUSE_NS);
			continue;
		}
		struct push_item it = p->q[p->head];
		p->head = (p->head + 1) % p->cap;
		p->len--;
		p->queued -= it.cost;
		pthread_mutex_unlock(&p->lock);
		uint64_t t = now_ns();
		if (it.retry_at > t) {
			struct timespec d = { 0, (long)(it.retry_at - t) };
			nanosleep(&d, NULL);
		}
		uint64_t before = atomic_load(&dm->stats.cache.bytes_decoded);
		int rc = push_file(dm, it.n, false);
		decoded += atomic_load(&dm->stats.cache.bytes_decoded) - before;
		/* parts decoded since the queue was last empty (the pushes'
		 * and the readers' meanwhile) beyond half the cache's budget:
		 * the window is more than the budget holds, and going on would
		 * evict parts pushed files need before their readers come,
		 * and what readers decode */
		bool stop = decoded > sf_dcache_budget(dm->cache) / 2;
		bool again = false;
		pthread_mutex_lock(&p->lock);
		if (rc == -ENOENT && it.tries < RETRIES && !p->stop) {
			uint64_t wait = (uint64_t)RETRY_NS << it.tries;
			again = enqueue(p, it.n, it.cost,
					now_ns() + (wait < RETRY_MAX ? wait : RETRY_MAX), it.tries + 1);
		}
		pthread_mutex_unlock(&p->lock);
		if (!again)
			fnode_forget(&dm->tree, it.n, 1);
		if (stop) {
			drop_waiting(dm);
			stat_add(&dm->stats.push_stops, 1);
		}
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int push_start(struct daemon *dm, uint64_t window)
{
	if (!window)
		return 0;
	struct push *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->window = window;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	dm->push = p; /* before the thread, which reads it */
	int rc = pthread_create(&p->thread, NULL, pusher, dm);
	if (rc) {
		dm->push = NULL;
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->wake);
		free(p);
		return -rc;
	}
	return 0;
}

void push_stop(struct daemon *dm)
{
	struct push *p = dm->push;
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	drop_waiting(dm);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->wake);
	dm->push = NULL;
	free(p);
}
