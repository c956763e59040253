/* A wait on a condition variable of at most `ns` nanoseconds (on its
 * default clock, CLOCK_REALTIME), shared by the daemon's threads that look
 * again after a pause (prune.c, openviews.c, push.c) and by a request
 * waiting for the last thread (section.c). */
#ifndef FS_WAITS_H
#define FS_WAITS_H

#include <pthread.h>
#include <time.h>

static inline void wait_at_most(pthread_cond_t *cond, pthread_mutex_t *lock, long ns)
{
	struct timespec at;
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += ns / 1000000000L;
	at.tv_nsec += ns % 1000000000L;
	if (at.tv_nsec >= 1000000000L) {
		at.tv_sec++;
		at.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cond, lock, &at);
}

#endif
