#include "section.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "waits.h"

struct section {
	struct sections *w;
	struct section *prev, *next;
	pthread_mutex_t lock;       /* what it waits for (op, path, since) */
	unsigned depth;             /* nested sections */
	uint64_t start_ns;          /* monotonic; 0 while not at the source */
	const char *op;
	char path[512];
};

/* This thread's record, made at its first section. Per thread: it is what
 * the thread is doing, reached from deep inside handlers, and read by
 * whoever lists the stuck requests. */
static _Thread_local struct section *me;

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void unlink_section(void *arg)
{
	struct section *r = arg;
	pthread_mutex_lock(&r->w->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		r->w->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	pthread_mutex_unlock(&r->w->lock);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

void sections_init(struct sections *w)
{
	memset(w, 0, sizeof *w);
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->left_lock, NULL);
	pthread_cond_init(&w->left, NULL);
	pthread_key_create(&w->key, unlink_section);
}

void sections_fini(struct sections *w)
{
	/* threads still holding records (the main thread's) */
	while (w->head) {
		struct section *r = w->head;
		w->head = r->next;
		pthread_mutex_destroy(&r->lock);
		free(r);
	}
	me = NULL;
	pthread_key_delete(w->key);
	pthread_cond_destroy(&w->left);
	pthread_mutex_destroy(&w->left_lock);
	pthread_mutex_destroy(&w->lock);
}

static struct section *mine(struct sections *w)
{
	if (me && me->w == w)
		return me;
	struct section *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->w = w;
	pthread_mutex_init(&r->lock, NULL);
	pthread_mutex_lock(&w->lock);
	r->next = w->head;
	if (w->head)
		w->head->prev = r;
	w->head = r;
	pthread_mutex_unlock(&w->lock);
	pthread_setspecific(w->key, r);
	return me = r;
}

/* Copies `path` into `dst` of `cap` bytes, cut to fit. */
static void copy_path(char *dst, size_t cap, const char *path)
{
	size_t n = strnlen(path, cap - 1);
	memcpy(dst, path, n);
	dst[n] = 0;
}

/* Whether some request has been at the source STUCK_NS or more. */
static bool any_stuck(struct sections *w)
{
	uint64_t now = mono_ns();
	bool stuck = false;
	pthread_mutex_lock(&w->lock);
	for (struct section *r = w->head; r && !stuck; r = r->next) {
		pthread_mutex_lock(&r->lock);
		stuck = r->start_ns && now - r->start_ns >= STUCK_NS;
		pthread_mutex_unlock(&r->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return stuck;
}

/* Asks the loop again as sections close, for LAST_WAIT_NS at most, while
 * it has only its last thread to give and nothing is stuck: on_open's
 * answer. Counted as waiting before it asks again, so that a section
 * closing after that question wakes it. */
static int wait_last(struct sections *w, bool may_refuse)
{
	uint64_t end = mono_ns() + LAST_WAIT_NS, now;
	atomic_fetch_add(&w->last_waits, 1);
	pthread_mutex_lock(&w->left_lock);
	atomic_fetch_add(&w->waiting, 1);
	int rc = w->on_open(may_refuse);
	while (rc == -EBUSY && (now = mono_ns()) < end && !any_stuck(w)) {
		wait_at_most(&w->left, &w->left_lock, (long)(end - now));
		rc = w->on_open(may_refuse);
	}
	atomic_fetch_sub(&w->waiting, 1);
	pthread_mutex_unlock(&w->left_lock);
	return rc;
}

int section_open(struct sections *w, const char *op, const char *path, const char *name,
		 bool may_refuse)
{
	struct section *r = mine(w);
	if (!r)
		return 0; /* out of memory: the request runs unrecorded */
	if (r->depth++)
		return 0;
	/* a full pool refuses only while the source is stuck: a burst of
	 * quick requests (thousands of releases) just waits */
	int rc = w->on_open ? w->on_open(may_refuse) : 0;
	if (rc == -EBUSY)
		rc = wait_last(w, may_refuse);
	if (rc) {
		if (rc == -EBUSY || any_stuck(w)) {
			r->depth--;
			return rc == -EBUSY ? -EBUSY : -EIO;
		}
		w->on_open(false);
	}
	pthread_mutex_lock(&r->lock);
	r->op = op;
	/* every request passes here: a plain copy unless there is a name to
	 * join, and only the monotonic clock (the wall clock of "since" is
	 * worked out when a stuck request is reported) */
	if (name && strcmp(path, ".") != 0)
		snprintf(r->path, sizeof r->path, "%s/%s", path, name);
	else
		copy_path(r->path, sizeof r->path, name ? name : path);
	r->start_ns = mono_ns();
	pthread_mutex_unlock(&r->lock);
	return 0;
}

void section_close(struct sections *w)
{
	struct section *r = me && me->w == w ? me : NULL;
	if (!r || !r->depth || --r->depth)
		return;
	pthread_mutex_lock(&r->lock);
	r->start_ns = 0;
	pthread_mutex_unlock(&r->lock);
	if (w->on_close)
		w->on_close();
	if (atomic_load(&w->waiting)) {
		pthread_mutex_lock(&w->left_lock);
		pthread_cond_broadcast(&w->left);
		pthread_mutex_unlock(&w->left_lock);
	}
}

static int older(const void *a, const void *b)
{
	const struct stuck *x = a, *y = b;
	return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : 0;
}

size_t sections_stuck(struct sections *w, struct stuck *out, size_t max, size_t *total)
{
	size_t n = 0;
	*total = 0;
	uint64_t now = mono_ns();
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	uint64_t wall_ns = (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec;
	pthread_mutex_lock(&w->lock);
	for (struct section *r = w->head; r; r = r->next) {
		pthread_mutex_lock(&r->lock);
		if (r->start_ns) {
			++*total;
			if (now - r->start_ns >= STUCK_NS && n < max) {
				struct stuck *s = &out[n++];
				memcpy(s->path, r->path, sizeof s->path);
				s->op = r->op;
				uint64_t since = wall_ns - (now - r->start_ns);
				s->since = (struct timespec){ (time_t)(since / 1000000000u),
							     (long)(since % 1000000000u) };
				s->seconds = (double)(now - r->start_ns) / 1e9;
			}
		}
		pthread_mutex_unlock(&r->lock);
	}
	pthread_mutex_unlock(&w->lock);
	qsort(out, n, sizeof *out, older);
	return n;
}
