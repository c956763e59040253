/* A turn: work that reads a source file and runs one thread at a time (a
 * memo parsed once) is done by the thread holding the turn, which holds no
 * lock meanwhile. A source that stops answering then holds only the threads
 * waiting for that very work, on a condition, never a lock that other work
 * takes (docs/architecture.md, "Locks"). Not recursive. */
#ifndef SF_TURN_H
#define SF_TURN_H

#include <pthread.h>
#include <stdbool.h>

struct sf_turn {
	pthread_mutex_t lock; /* `busy`; never held while the turn's work runs */
	pthread_cond_t done;
	bool busy;
};

#define SF_TURN_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false }

static inline void sf_turn_init(struct sf_turn *t)
{
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->done, NULL);
	t->busy = false;
}

static inline void sf_turn_fini(struct sf_turn *t)
{
	pthread_cond_destroy(&t->done);
	pthread_mutex_destroy(&t->lock);
}

/* Waits until no other thread has the turn, and takes it. */
static inline void sf_turn_take(struct sf_turn *t)
{
	pthread_mutex_lock(&t->lock);
	while (t->busy)
		pthread_cond_wait(&t->done, &t->lock);
	t->busy = true;
	pthread_mutex_unlock(&t->lock);
}

static inline void sf_turn_give(struct sf_turn *t)
{
	pthread_mutex_lock(&t->lock);
	t->busy = false;
	pthread_cond_signal(&t->done);
	pthread_mutex_unlock(&t->lock);
}

#endif
