/* The request loop.
 *
 * Why not libfuse's multithreaded loop: every request costs the requesting
 * process a round trip to us, and a round trip that wakes a sleeping daemon
 * thread on another CPU pays for a cross-CPU wake-up on top of the work. On
 * virtual machines that wake-up dominates (docs/performance.md: 20-25 us
 * per wake-up on a 2-vCPU VM, against a few for the work). So one thread at
 * a time, the leader, waits on the source and serves the requests it takes
 * itself: most take a few microseconds, less than waking another thread
 * would. Before work that may take long or wait (a decode, a first listing,
 * a copy of mapped bytes not in memory) the handler calls loop_hand_off(),
 * which passes the lead to an idle thread (or starts one, up to the limit),
 * so slow requests never hold up the others. The other threads wait for the
 * lead on a condition variable, not on the source: a request wakes no
 * thread that would not take it.
 *
 * A handler can still be held up where nobody called loop_hand_off(): a
 * fault mincore() did not foresee, or a store into the page cache that
 * waits for a READ queued behind it (which would never be served). So while
 * requests come, one waiting thread keeps watch: it wakes every WATCH_NS
 * and takes the lead if nobody has it. It sleeps untimed once requests stop
 * for IDLE_NS, and is woken by the first request after that.
 *
 * The pool is the same for every source: the FUSE device (below, where the
 * leader polls the device briefly before it sleeps) or one io_uring queue
 * (uring.c, one pool per CPU). */
#include "loop.h"
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define WATCH_NS 10000000u   /* 10 ms */
#define MUST_QUICK_NS 100000000u /* 100 ms */
#define IDLE_NS 1000000000u  /* 1 s */
/* A yield longer than this gave the CPU to a task that is no reader (a
 * reader's turn between two requests takes microseconds; a CPU-bound task's
 * time slice, a millisecond or more), and the leader then polls for none
 * for CALM_NS, see device_take. */
#define YIELD_LOST_NS 500000u  /* 0.5 ms */
/* short: a reader that works over 0.5 ms between two requests (a Python
 * harness, a JPEG decode) loses the yield too, and polls again soon; a
 * CPU-bound task takes every yield that ends the pause */
#define CALM_NS 20000000u      /* 20 ms */

struct loop {
	const struct loop_source *ops;
	void *src;
	unsigned max_threads;
	pthread_mutex_t lock;
	pthread_cond_t lead_free; /* the lead is free, or the loop is done */
	bool leading, done;
	bool watching;         /* a waiting thread keeps watch */
	uint64_t last_take;    /* when the last request was taken */
	unsigned threads, idle;
	/* threads in a section at the source (fs/section.h): beyond
	 * max_threads, the pool grows by as many as the source holds, up to
	 * ceiling, so that requests needing no source find a thread */
	unsigned at_src, ceiling;
	/* of those, the sections that may be refused, and when each that may
	 * not (a RELEASEDIR, a FORGET) began, in a slot of its own (0: free):
	 * those count toward refusing others only once they have run
	 * MUST_QUICK_NS, as they are quick unless the source holds them */
	unsigned refusable;
	uint64_t *must_since;
	int error;
	pthread_t *tids;
};

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Ends the loop (lock held): wakes every thread; `by_itself` when the
 * source ended it rather than loop_stop. */
static void finish(struct loop *l, int err, bool by_itself)
{
	if (l->done)
		return;
	l->done = true;
	l->error = err;
	pthread_cond_broadcast(&l->lead_free);
	l->ops->wake(l->src);
	if (by_itself && l->ops->ended)
		l->ops->ended(l->src, err);
}

static void *worker(void *arg);

static struct timespec in_ns(uint64_t ns)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	uint64_t x = (uint64_t)t.tv_nsec + ns;
	t.tv_sec += (time_t)(x / 1000000000u);
	t.tv_nsec = (long)(x % 1000000000u);
	return t;
}

/* Waits (lock held) until the lead may be free; see the watch above. */
static void wait_for_lead(struct loop *l)
{
	l->idle++;
	if (!l->watching && now_ns() - l->last_take < IDLE_NS) {
		l->watching = true;
		struct timespec t = in_ns(WATCH_NS);
		pthread_cond_timedwait(&l->lead_free, &l->lock, &t);
		l->watching = false;
	} else {
		pthread_cond_wait(&l->lead_free, &l->lock);
	}
	l->idle--;
}

/* The loop whose lead this thread gave up to serve the request it took,
 * until it hands the lead on (or finishes the request). Per thread: it is
 * what the thread is doing, and loop_hand_off() is called from deep inside
 * handlers (the cache, a view's populate) that are not handed the loop. */
static _Thread_local struct loop *serving;
/* The pool this thread belongs to, for its sections at the source: per
 * thread for the same reason. */
static _Thread_local struct loop *home;
/* The slot of this thread's section that may not be refused, or -1. */
static _Thread_local int must_slot = -1;

/* Threads the source holds, as refusals count them (lock held). */
static unsigned held(const struct loop *l)
{
	unsigned n = l->refusable;
	uint64_t now = now_ns();
	for (unsigned i = 0; i < l->ceiling; i++)
		n += l->must_since[i] && now - l->must_since[i] >= MUST_QUICK_NS;
	return n;
}

/* Whether one more thread may start (lock held). */
static bool may_spawn(const struct loop *l)
{
	return l->threads < l->max_threads ||
	       (l->threads - l->at_src < LOOP_FREE_KEPT && l->threads < l->ceiling);
}

/* Starts a request thread (lock held) with every signal blocked: signals go
 * to the main thread. Failing is not fatal, the pool stays smaller. */
static void spawn(struct loop *l)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	if (pthread_create(&l->tids[l->threads], NULL, worker, l) == 0)
		l->threads++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void *worker(void *arg)
{
	struct loop *l = arg;
	struct loop_slot s = { .req = NULL };
	home = l;
	pthread_mutex_lock(&l->lock);
	for (;;) {
		/* a watcher takes over a lead left by a request that runs
		 * long (it may be stuck at the source) */
		while (l->leading && !l->done)
			wait_for_lead(l);
		if (l->done)
			break;
		l->leading = true;
		pthread_mutex_unlock(&l->lock);
		int r = l->ops->take(l->src, &s);
		pthread_mutex_lock(&l->lock);
		l->leading = false;
		if (r <= 0) {
			finish(l, r, true);
			break;
		}
		uint64_t t = now_ns();
		if (!l->idle && !l->done && may_spawn(l))
			spawn(l); /* someone must be there to keep watch */
		else if (l->idle && !l->watching)
			/* the watch resumes: idle for a while, its watcher took
			 * the lead, or was woken to lead (a hand-off) while the
			 * others sleep untimed. Not while one watches: the woken
			 * thread would lead while this one serves, for every
			 * request. Without it, three readers stuck in a fstat of
			 * a stopped source left a pool of four with nobody
			 * leading (--threads 1, ASan, load 5: 2 of 25 runs). */
			pthread_cond_signal(&l->lead_free);
		l->last_take = t;
		pthread_mutex_unlock(&l->lock);
		serving = l;
		l->ops->serve(l->src, &s);
		serving = NULL;
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	free(s.fb.mem);
	return NULL;
}

void loop_hand_off(void)
{
	struct loop *l = serving;
	if (!l)
		return;
	serving = NULL;
	if (l->ops->handed_off)
		l->ops->handed_off(l->src);
	pthread_mutex_lock(&l->lock);
	if (!l->leading && !l->done) {
		if (l->idle)
			pthread_cond_signal(&l->lead_free);
		else if (may_spawn(l))
			spawn(l);
	}
	pthread_mutex_unlock(&l->lock);
}

int transport_section_open(bool may_refuse)
{
	struct loop *l = home;
	if (!l)
		return 0;
	pthread_mutex_lock(&l->lock);
	/* the source may hold every thread but those kept free (-EAGAIN:
	 * the caller refuses while the source is stuck), and never the last
	 * one (-EBUSY: refused) */
	unsigned busy = may_refuse ? held(l) : 0;
	if (may_refuse && busy + LOOP_FREE_KEPT >= l->ceiling) {
		pthread_mutex_unlock(&l->lock);
		return busy + 1 >= l->ceiling ? -EBUSY : -EAGAIN;
	}
	l->at_src++;
	if (may_refuse) {
		l->refusable++;
	} else {
		/* at most ceiling threads: a slot is free */
		unsigned i = 0;
		while (i + 1 < l->ceiling && l->must_since[i])
			i++;
		l->must_since[i] = now_ns() | 1;
		must_slot = (int)i;
	}
	/* someone must be left to take requests, should this one be held:
	 * a thread is started only when nobody leads or waits and the source
	 * holds all but LOOP_FREE_KEPT. Not sooner: quick sections (a burst of
	 * FORGETs) would grow the pool, and every thread keeps its stack and
	 * malloc arena. A leader that takes a request starts one in the same
	 * case (worker()). */
	if (!l->leading && !l->idle && !l->done && l->threads - l->at_src < LOOP_FREE_KEPT &&
	    l->threads < l->ceiling)
		spawn(l);
	pthread_mutex_unlock(&l->lock);
	return 0;
}

void transport_section_close(void)
{
	struct loop *l = home;
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->at_src--;
	if (must_slot >= 0)
		l->must_since[must_slot] = 0;
	else
		l->refusable--;
	must_slot = -1;
	pthread_mutex_unlock(&l->lock);
}

struct loop *loop_start(const struct loop_source *ops, void *src, unsigned threads)
{
	struct loop *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->ops = ops;
	l->src = src;
	l->max_threads = threads ? threads : 1;
	l->ceiling = LOOP_CEILING(l->max_threads);
	l->tids = calloc(l->ceiling, sizeof *l->tids);
	l->must_since = calloc(l->ceiling, sizeof *l->must_since);
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->lead_free, NULL);
	pthread_mutex_lock(&l->lock);
	if (l->tids && l->must_since)
		spawn(l);
	/* read under the lock: the first thread may already be starting more */
	bool started = l->threads > 0;
	pthread_mutex_unlock(&l->lock);
	if (!started) {
		free(l->tids);
		free(l->must_since);
		free(l);
		return NULL;
	}
	return l;
}

int loop_stop(struct loop *l)
{
	pthread_mutex_lock(&l->lock);
	finish(l, 0, false);
	unsigned n = l->threads;
	pthread_mutex_unlock(&l->lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(l->tids[i], NULL);
	int err = l->error;
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->lead_free);
	free(l->tids);
	free(l->must_since);
	free(l);
	return err;
}

/* The FUSE device as a source. */
struct device {
	struct fuse_session *se;
	atomic_uint_fast64_t *taken; /* counts the requests taken */
	atomic_uint_fast64_t *skipped; /* and the waits that did not poll */
	int fd, stop_fd;
	/* how long the leader polls: adapted between spin_max_ns / 16 and
	 * spin_max_ns (--spin-us), see device_take */
	uint64_t spin_ns, spin_max_ns;
	uint64_t calm_until;   /* no poll before then, see device_take */
	sem_t finished;        /* posted once the loop ended by itself */
};

/* The poll doubles (up to --spin-us) each time a request came while
 * polling and halves each time none did, so a slow trickle of requests
 * (one every millisecond, say) does not keep a CPU busy polling in vain.
 * Only the leader calls this. */
static void adapt(struct device *d, bool caught)
{
	uint64_t floor = d->spin_max_ns / 16;
	if (caught)
		d->spin_ns = d->spin_ns * 2 < d->spin_max_ns ? d->spin_ns * 2 : d->spin_max_ns;
	else
		d->spin_ns = d->spin_ns / 2 > floor ? d->spin_ns / 2 : floor;
}

static int device_take(void *src, struct loop_slot *s)
{
	struct device *d = src;
	uint64_t now = now_ns();
	bool spin = d->spin_max_ns && now >= d->calm_until;
	uint64_t until = spin ? now + d->spin_ns : 0;
	bool slept = false;
	for (;;) {
		int r = fuse_session_receive_buf(d->se, &s->fb);
		if (r != -EAGAIN && r != -EINTR) {
			/* a wait that did not poll says nothing of the poll's length */
			if (spin || !slept)
				adapt(d, !slept);
			return r;
		}
		if (fuse_session_exited(d->se))
			return 0;
		uint64_t t = now_ns();
		if (t < until) {
			/* a reader of this CPU may run meanwhile */
			sched_yield();
			/* Someone else held the CPU: a task competing for it.
			 * A thread that polls is runnable, not waiting, so a
			 * request gets it no wake-up preemption and waits out
			 * that task's time slice, a yield after a yield pushing
			 * the poller further back (two CPU hogs on 2 vCPUs: a
			 * small file's open took 2.8-12 ms at the 99th percentile
			 * against 0.5-1.4 ms with this). So sleep at once for a
			 * while. The cost is one clock read
			 * per yield, no system call. */
			uint64_t back = now_ns();
			if (back - t > YIELD_LOST_NS) {
				d->calm_until = back + CALM_NS;
				spin = false;
				until = 0;
			}
			continue;
		}
		if (!spin && !slept && d->spin_max_ns)
			atomic_fetch_add_explicit(d->skipped, 1, memory_order_relaxed);
		slept = true;
		struct pollfd p[2] = { { d->fd, POLLIN, 0 }, { d->stop_fd, POLLIN, 0 } };
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents)
			return 0;
		until = now_ns();
	}
}

static void device_serve(void *src, struct loop_slot *s)
{
	struct device *d = src;
	atomic_fetch_add_explicit(d->taken, 1, memory_order_relaxed);
	fuse_session_process_buf(d->se, &s->fb);
}

static void device_wake(void *src)
{
	struct device *d = src;
	eventfd_write(d->stop_fd, 1);
}

static void device_ended(void *src, int err)
{
	struct device *d = src;
	sem_post(&d->finished);
}

static const struct loop_source device_ops = {
	.take = device_take,
	.serve = device_serve,
	.wake = device_wake,
	.ended = device_ended,
};

int loop_run(struct fuse_session *se, unsigned threads, unsigned spin_us,
	     atomic_uint_fast64_t *taken, atomic_uint_fast64_t *skipped)
{
	struct device d = {
		.se = se,
		.taken = taken,
		.skipped = skipped,
		.fd = fuse_session_fd(se),
		.spin_ns = (uint64_t)spin_us * 1000u,
		.spin_max_ns = (uint64_t)spin_us * 1000u,
	};
	int fl = fcntl(d.fd, F_GETFL);
	if (fl < 0 || fcntl(d.fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	d.stop_fd = eventfd(0, EFD_CLOEXEC);
	if (d.stop_fd < 0)
		return -errno;
	if (sem_init(&d.finished, 0, 0)) {
		int err = -errno;
		close(d.stop_fd);
		return err;
	}
	struct loop *l = loop_start(&device_ops, &d, threads);
	/* libfuse's signal handlers end the session from this thread; the
	 * timeout covers a signal that lands between the check and the wait */
	while (l && !fuse_session_exited(se)) {
		struct timespec t = in_ns(1000000000u);
		if (sem_timedwait(&d.finished, &t) == 0)
			break;
	}
	int err = l ? loop_stop(l) : -EAGAIN;
	close(d.stop_fd);
	sem_destroy(&d.finished);
	return err;
}
