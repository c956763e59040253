/* The request loop: a pool of threads taking requests from one source one
 * after another (the FUSE device, or one io_uring queue of uring.c), the one
 * waiting for the next request serving it itself unless it is slow. */
#ifndef FS_LOOP_H
#define FS_LOOP_H

#include <stdatomic.h>
#include <stdbool.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

/* What a thread of the pool holds while it serves one request. */
struct loop_slot {
	struct fuse_buf fb; /* the device's request buffer, kept per thread */
	void *req;          /* or the source's own handle of the request */
};

/* Where requests come from. Only the thread holding the lead calls take;
 * serve runs with the lead free, so another thread may take meanwhile. */
struct loop_source {
	/* Waits for the next request: > 0 one is in the slot, 0 the source
	 * is done, < 0 it failed. Returns 0 soon after wake. */
	int (*take)(void *src, struct loop_slot *s);
	void (*serve)(void *src, struct loop_slot *s);
	/* The serving thread gave up the lead for slow work (may be NULL). */
	void (*handed_off)(void *src);
	/* Makes a take in progress return (the loop ends). */
	void (*wake)(void *src);
	/* The loop ended by itself: take returned `err` (0: the source is
	 * done). Called once, from one of its threads (may be NULL). */
	void (*ended)(void *src, int err);
};

struct loop;
/* Starts a pool of at most `threads` threads on `src`; NULL when not even
 * one thread starts. */
struct loop *loop_start(const struct loop_source *ops, void *src, unsigned threads);
/* Ends the pool (waking its leader), waits for its threads and frees it.
 * Returns 0, or the negative errno that ended it. */
int loop_stop(struct loop *l);

/* Serves `se` from the FUSE device until it exits (unmount, or a signal
 * through libfuse's handlers) with at most `threads` request threads; the
 * waiting thread polls for `spin_us` microseconds before it sleeps, unless
 * another task held its CPU lately; each request taken is counted in
 * `taken`, each wait that slept without polling so in `skipped`. Returns 0, or a
 * negative errno when the device failed. */
int loop_run(struct fuse_session *se, unsigned threads, unsigned spin_us,
	     atomic_uint_fast64_t *taken, atomic_uint_fast64_t *skipped);

/* Called by a request handler before work that may take long or wait for
 * other requests: another thread waits for the next request meanwhile.
 * Does nothing the second time within a request, or outside the loop. */
void loop_hand_off(void);


/* Threads kept for requests that need no source: the one waiting for the
 * next request, and one to take over from it. */
#define LOOP_FREE_KEPT 2
/* The most threads a pool of `threads` runs at once: twice as many, while
 * the source holds them, and those kept free. A transport whose requests
 * each hold a slot of the kernel's (FUSE over io_uring) needs as many. */
#define LOOP_CEILING(threads) (2 * (threads) + LOOP_FREE_KEPT)

#endif
