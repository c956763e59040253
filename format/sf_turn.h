/* A turn: work that reads a source file and runs once while others wait
 * (a memo parsed once, a view's lazy work, a directory's listing, the
 * opening of a container) is done by the thread holding the turn, which
 * holds no lock meanwhile. A source that stops answering then holds only
 * the threads waiting for that very work, on a condition, never a lock that
 * other work takes (docs/architecture.md, "Turns"). Not recursive.
 *
 * A turn is one flag in its object, so that objects counted by the million
 * (directories, listing entries) carry one: the threads waiting for it wait
 * in one of a fixed set of buckets (a lock and a condition) chosen by the
 * turn's address, and a turn given back wakes only the waiters of its bucket,
 * which look again at their own turn. */
#ifndef SF_TURN_H
#define SF_TURN_H

#include <stdatomic.h>
#include <stdbool.h>

struct sf_turn {
	atomic_bool busy; /* written under its bucket's lock */
};

#define SF_TURN_INIT { false }

static inline void sf_turn_init(struct sf_turn *t)
{
	atomic_init(&t->busy, false);
}

static inline void sf_turn_fini(struct sf_turn *t)
{
	(void)t;
}

/* Waits until no other thread has the turn, and takes it. */
void sf_turn_take(struct sf_turn *t);
/* Takes the turn when nobody has it: false, without waiting, otherwise. */
bool sf_turn_try(struct sf_turn *t);
void sf_turn_give(struct sf_turn *t);
/* Whether some thread has the turn now (it may be given back at once:
 * certain only to the thread holding it). */
static inline bool sf_turn_held(const struct sf_turn *t)
{
	return atomic_load_explicit(&t->busy, memory_order_relaxed);
}

#endif
