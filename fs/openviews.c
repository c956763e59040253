#include "openviews.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stats.h"
#include "waits.h"

struct vopen {
	struct sf_view *view;
	struct vopen **slot;       /* the entry's field; NULL until linked */
	uint64_t dir;
	const char *name;
	size_t fds;                /* the descriptors its mappings keep */
	struct vopen *prev, *next; /* prev: entered more recently */
	/* When the kernel was told to drop the entry (0: not told): its
	 * forgets are on their way for a while, then the view is in use. */
	time_t told_at;
	uint64_t used_ms;          /* last entered (monotonic) */
};

/* Views closed and told about in one pass, outside the lock. */
#define BATCH 256
/* How long the kernel's forgets of a told entry are waited for before its
 * view counts as in use (an open file, a working directory inside). */
#define TOLD_GRACE_S 2
#define POLL_TOLD_NS 20000000L /* 20 ms */
/* Short of budget (openviews_press), views not entered for IDLE_MS are
 * closed, PRESS_BATCH a pass, until PRESS_MS after the last call (a
 * reader calls it while it waits for room). */
#define IDLE_MS 1000u
#define PRESS_MS 100u
#define PRESS_BATCH 8

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

void openviews_init(struct openviews *ov, struct stats *stats)
{
	memset(ov, 0, sizeof *ov);
	pthread_mutex_init(&ov->lock, NULL);
	pthread_cond_init(&ov->wake, NULL);
	ov->max = UINT_MAX;
	ov->max_fds = SIZE_MAX;
	ov->stats = stats;
}

/* Links o in after `prev`, or at the head when prev is NULL. */
static void insert_after(struct openviews *ov, struct vopen *prev, struct vopen *o)
{
	o->prev = prev;
	o->next = prev ? prev->next : ov->head;
	if (o->next)
		o->next->prev = o;
	else
		ov->tail = o;
	if (prev)
		prev->next = o;
	else
		ov->head = o;
}

static void unlink_one(struct openviews *ov, struct vopen *o)
{
	if (o->prev)
		o->prev->next = o->next;
	else
		ov->head = o->next;
	if (o->next)
		o->next->prev = o->prev;
	else
		ov->tail = o->prev;
}

/* Whether more views are open than --max-open, or their mappings keep
 * more descriptors than their share (lock held). */
static bool over(const struct openviews *ov)
{
	return ov->n > ov->max || ov->fds > ov->max_fds;
}

/* `o` linked (+1) or unlinked (-1) (lock held). */
static void tally(struct openviews *ov, const struct vopen *o, int dir)
{
	size_t n = dir > 0 ? ov->n + 1 : ov->n - 1;
	ov->n = n;
	ov->fds = dir > 0 ? ov->fds + o->fds : ov->fds - o->fds;
	atomic_store(&ov->stats->views_open, n);
	if (n > atomic_load(&ov->stats->views_open_peak))
		atomic_store(&ov->stats->views_open_peak, n);
	if (over(ov) && ov->running)
		pthread_cond_signal(&ov->wake);
}

/* Lock held. */
static void link_slot(struct openviews *ov, struct vopen *o, struct vopen **slot, uint64_t dir,
		      const char *name)
{
	o->slot = slot;
	o->dir = dir;
	o->name = name;
	o->fds = sf_view_nmaps(o->view);
	/* a view a listing made anew adopts from the old one's entry keeps
	 * the position it had: it was not entered now */
	struct vopen *had = ov->head;
	while (had && had->view != o->view)
		had = had->next;
	o->used_ms = had ? had->used_ms : now_ms();
	insert_after(ov, had, o);
	tally(ov, o, +1);
}

struct vopen *openviews_new(struct sf_view *v)
{
	struct vopen *o = calloc(1, sizeof *o);
	if (o)
		o->view = v;
	else
		sf_view_unref(v);
	return o;
}

void openviews_link(struct openviews *ov, struct vopen **slot, uint64_t dir, const char *name)
{
	pthread_mutex_lock(&ov->lock);
	if (*slot && !(*slot)->slot)
		link_slot(ov, *slot, slot, dir, name);
	pthread_mutex_unlock(&ov->lock);
}

/* Lock held. */
static void use(struct openviews *ov, struct vopen *o)
{
	o->used_ms = now_ms();
	/* entered again (at the head too): told about anew when idle again */
	o->told_at = 0;
	if (!o->slot || o == ov->head)
		return;
	unlink_one(ov, o);
	insert_after(ov, NULL, o);
}

struct sf_view *openviews_get(struct openviews *ov, struct vopen *const *slot, bool used)
{
	pthread_mutex_lock(&ov->lock);
	struct vopen *o = *slot;
	struct sf_view *v = o ? sf_view_ref(o->view) : NULL;
	if (o && used)
		use(ov, o);
	pthread_mutex_unlock(&ov->lock);
	return v;
}

struct sf_view *openviews_put(struct openviews *ov, struct vopen **slot, struct sf_view *v,
			      uint64_t dir, const char *name)
{
	struct vopen *o = calloc(1, sizeof *o);
	pthread_mutex_lock(&ov->lock);
	struct vopen *had = *slot;
	struct sf_view *r = had ? sf_view_ref(had->view) : v;
	if (had) {
		use(ov, had);
	} else if (o) {
		/* the slot's reference, and the caller's */
		o->view = sf_view_ref(v);
		*slot = o;
		link_slot(ov, o, slot, dir, name);
		o = NULL;
	}
	pthread_mutex_unlock(&ov->lock);
	free(o);
	if (had)
		sf_view_unref(v);
	return r;
}

void openviews_each(struct openviews *ov, uint64_t dir, void (*fn)(void *arg, struct sf_view *v),
		    void *arg)
{
	pthread_mutex_lock(&ov->lock);
	for (struct vopen *o = ov->head; o; o = o->next)
		if (o->dir == dir)
			fn(arg, o->view);
	pthread_mutex_unlock(&ov->lock);
}

void openviews_drop(struct openviews *ov, struct vopen **slot)
{
	pthread_mutex_lock(&ov->lock);
	struct vopen *o = *slot;
	*slot = NULL;
	if (o && o->slot) {
		unlink_one(ov, o);
		tally(ov, o, -1);
	}
	pthread_mutex_unlock(&ov->lock);
	if (o) {
		sf_view_unref(o->view);
		free(o);
	}
}

struct tell {
	uint64_t dir;
	char *name;
};

/* Closes `o` when only its entry holds its view (lock held): into
 * `closed`, to be dropped outside the lock. Refs go from 1 to 2 only under
 * the lock (openviews_get): any other holder got its reference from one
 * that has one. */
static bool close_unused(struct openviews *ov, struct vopen *o, struct sf_view **closed,
			 size_t *nc)
{
	if (!sf_view_held_once(o->view))
		return false;
	unlink_one(ov, o);
	*o->slot = NULL;
	closed[(*nc)++] = o->view;
	tally(ov, o, -1);
	free(o);
	return true;
}

/* An entry of a view whose container is gone, to be told about. */
struct gone {
	struct gone *next;
	struct tell t;
};

/* Tells the kernel to drop entries (outside the lock: the kernel may call
 * back into the daemon while it drops them; ENOENT: it had none). */
static void tell_kernel(struct fuse_session *se, const struct tell *t)
{
	fuse_lowlevel_notify_inval_entry(se, t->dir, t->name, strlen(t->name));
}

void openviews_gone(struct openviews *ov, struct sf_view *v, const uint64_t *dirs, char **names,
		    size_t n)
{
	struct sf_view *closed = NULL;
	pthread_mutex_lock(&ov->lock);
	for (struct vopen *o = ov->tail; o; o = o->prev) {
		if (o->view != v || !o->slot)
			continue;
		unlink_one(ov, o);
		*o->slot = NULL;
		closed = o->view;
		tally(ov, o, -1);
		free(o);
		break;
	}
	/* in order: the node's entry first, so that it dies with its
	 * reader's last hold, then its parents' */
	struct gone **tail = &ov->gone;
	while (*tail)
		tail = &(*tail)->next;
	bool queued = ov->running;
	for (size_t i = 0; i < n; i++) {
		struct gone *g = queued ? malloc(sizeof *g) : NULL;
		if (!g) {
			/* no thread to tell it (or out of memory): told now */
			struct tell t = { dirs[i], names[i] };
			pthread_mutex_unlock(&ov->lock);
			if (ov->se)
				tell_kernel(ov->se, &t);
			free(names[i]);
			pthread_mutex_lock(&ov->lock);
			continue;
		}
		*g = (struct gone){ NULL, { dirs[i], names[i] } };
		*tail = g;
		tail = &g->next;
	}
	if (ov->gone)
		pthread_cond_signal(&ov->wake);
	pthread_mutex_unlock(&ov->lock);
	if (closed) {
		sf_view_unref(closed);
		stat_add(&ov->stats->views_closed, 1);
	}
}

/* What let_go made of a view. */
enum letgo { LG_CLOSED, LG_TOLD, LG_WAITING, LG_IN_USE, LG_NOMEM };

/* Lets `o` go (lock held): a view only its entry holds is closed (into
 * `closed`; `o` is freed); one held by the kernel's nodes is told about
 * (into `tell`) once, and counts as in use TOLD_GRACE_S after that. A view
 * whose lazy work runs (a walk of a tar may take seconds after its root was
 * entered) is in use: told about then, the kernel would keep the entry the
 * work answers under the one it dropped, out of reach of any later telling,
 * and the view open for good. */
static enum letgo let_go(struct openviews *ov, struct vopen *o, time_t now,
			 struct sf_view **closed, size_t *nc, struct tell *tell, size_t *nt)
{
	if (close_unused(ov, o, closed, nc))
		return LG_CLOSED;
	if (sf_view_busy(o->view))
		return LG_IN_USE;
	if (o->told_at)
		return now - o->told_at <= TOLD_GRACE_S ? LG_WAITING : LG_IN_USE;
	char *name = strdup(o->name);
	if (!name)
		return LG_NOMEM;
	tell[(*nt)++] = (struct tell){ o->dir, name };
	o->told_at = now;
	return LG_TOLD;
}

/* One pass from the least recently entered view while over the bounds
 * (lock held): views are let go, one told about closed by a later pass
 * once the kernel forgot it. Returns whether views told about are still
 * waited for. */
static bool pass(struct openviews *ov, struct sf_view **closed, size_t *nc, struct tell *tell,
		 size_t *nt)
{
	time_t now = time(NULL);
	bool waiting = false;
	/* what stays open once the views closed and told about are gone */
	size_t n = ov->n, fds = ov->fds;
	for (struct vopen *o = ov->tail, *prev; o && (n > ov->max || fds > ov->max_fds) &&
	     *nc < BATCH && *nt < BATCH; o = prev) {
		prev = o->prev;
		size_t k = o->fds;
		enum letgo g = let_go(ov, o, now, closed, nc, tell, nt);
		if (g == LG_NOMEM)
			break;
		if (g == LG_IN_USE)
			continue; /* passed over */
		/* closed, or counted out like one closed */
		waiting = waiting || g == LG_WAITING;
		n--;
		fds -= k;
	}
	return waiting || *nt;
}

/* One pass while the budget is short (lock held): views not entered for
 * IDLE_MS, least recently entered first, are let go, PRESS_BATCH at
 * most. Returns whether told views are waited for. */
static bool press_pass(struct openviews *ov, struct sf_view **closed, size_t *nc,
		       struct tell *tell, size_t *nt)
{
	uint64_t ms = now_ms();
	if (ms >= ov->press_until)
		return false;
	time_t now = time(NULL);
	bool waiting = false;
	size_t done = 0;
	for (struct vopen *o = ov->tail, *prev; o && done < PRESS_BATCH && *nc < BATCH &&
	     *nt < BATCH; o = prev) {
		prev = o->prev;
		if (ms - o->used_ms < IDLE_MS)
			break; /* the rest were entered later still */
		enum letgo g = let_go(ov, o, now, closed, nc, tell, nt);
		if (g == LG_NOMEM)
			break;
		done += g == LG_CLOSED || g == LG_TOLD;
		waiting = waiting || g == LG_WAITING;
	}
	return waiting || done;
}

void openviews_press(struct openviews *ov)
{
	pthread_mutex_lock(&ov->lock);
	ov->press_until = now_ms() + PRESS_MS;
	if (ov->running)
		pthread_cond_signal(&ov->wake);
	pthread_mutex_unlock(&ov->lock);
}

size_t openviews_reclaim(struct openviews *ov)
{
	struct sf_view *closed[BATCH];
	size_t nc = 0;
	pthread_mutex_lock(&ov->lock);
	for (struct vopen *o = ov->tail, *prev; o && nc < BATCH; o = prev) {
		prev = o->prev;
		close_unused(ov, o, closed, &nc);
	}
	pthread_mutex_unlock(&ov->lock);
	for (size_t i = 0; i < nc; i++)
		sf_view_unref(closed[i]);
	stat_add(&ov->stats->views_closed, nc);
	return nc;
}

static void *run(void *arg)
{
	struct openviews *ov = arg;
	struct sf_view *closed[BATCH];
	struct tell tell[BATCH];
	pthread_mutex_lock(&ov->lock);
	while (!ov->stop) {
		size_t nc = 0, nt = 0;
		bool waiting = pass(ov, closed, &nc, tell, &nt);
		waiting = press_pass(ov, closed, &nc, tell, &nt) || waiting;
		struct gone *gone = ov->gone;
		ov->gone = NULL;
		pthread_mutex_unlock(&ov->lock);
		while (gone) {
			struct gone *next = gone->next;
			tell_kernel(ov->se, &gone->t);
			free(gone->t.name);
			free(gone);
			gone = next;
		}
		for (size_t i = 0; i < nc; i++)
			sf_view_unref(closed[i]);
		stat_add(&ov->stats->views_closed, nc);
		/* outside the lock: the kernel may call back into the daemon
		 * while it drops the entries (ENOENT: it had none) */
		for (size_t i = 0; i < nt; i++) {
			tell_kernel(ov->se, &tell[i]);
			free(tell[i].name);
		}
		pthread_mutex_lock(&ov->lock);
		if (ov->stop || nc == BATCH || nt == BATCH || ov->gone)
			continue;
		if (!over(ov) && !waiting) {
			pthread_cond_wait(&ov->wake, &ov->lock);
			continue;
		}
		/* over the bound: soon when forgets are on their way, else
		 * when a reader may have let a view go */
		wait_at_most(&ov->wake, &ov->lock, waiting ? POLL_TOLD_NS : 1000000000L);
	}
	pthread_mutex_unlock(&ov->lock);
	return NULL;
}

int openviews_start(struct openviews *ov, struct fuse_session *se, unsigned max, size_t max_fds)
{
	ov->se = se;
	ov->max = max;
	ov->max_fds = max_fds;
	ov->stop = false;
	int rc = pthread_create(&ov->thread, NULL, run, ov);
	if (rc)
		return -rc;
	pthread_mutex_lock(&ov->lock);
	ov->running = true;
	if (over(ov))
		pthread_cond_signal(&ov->wake);
	pthread_mutex_unlock(&ov->lock);
	return 0;
}

void openviews_stop(struct openviews *ov)
{
	pthread_mutex_lock(&ov->lock);
	bool running = ov->running;
	ov->stop = true;
	ov->running = false;
	pthread_cond_signal(&ov->wake);
	pthread_mutex_unlock(&ov->lock);
	if (running)
		pthread_join(ov->thread, NULL);
	while (ov->gone) {
		struct gone *g = ov->gone;
		ov->gone = g->next;
		free(g->t.name);
		free(g);
	}
}
