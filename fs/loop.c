/* The request loop.
 *
 * Why not libfuse's multithreaded loop: every request costs the requesting
 * process a round trip to us, and a round trip that wakes a sleeping daemon
 * thread on another CPU pays for a cross-CPU wake-up on top of the work. On
 * virtual machines that wake-up dominates (docs/performance.md: 20-25 us
 * per wake-up on a 2-vCPU VM, against a few for the work). So one thread at
 * a time, the leader, waits on the device: it polls it without sleeping for
 * a short while after its last request (shorter when polling keeps
 * missing), and sleeps in poll() only when nothing came. It serves the
 * requests it takes itself: most take a few microseconds, less than waking
 * another thread would. Before work that may take long or wait (a decode, a
 * first listing, a copy of mapped bytes not in memory) the handler calls
 * loop_hand_off(), which passes the lead to an idle thread (or starts one,
 * up to the limit), so slow requests never hold up the others. The other
 * threads wait for the lead on a condition variable, not on the device: a
 * request wakes no thread that would not take it.
 *
 * A handler can still be held up where nobody called loop_hand_off(): a
 * fault mincore() did not foresee, or a store into the page cache that
 * waits for a READ queued behind it (which would never be served). So while
 * requests come, one waiting thread keeps watch: it wakes every WATCH_NS
 * and takes the lead if nobody has it. It sleeps untimed once requests stop
 * for IDLE_NS, and is woken by the first request after that. */
#include "loop.h"

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
#define IDLE_NS 1000000000u  /* 1 s */

struct loop {
	struct fuse_session *se;
	int fd, stop_fd;
	/* how long the leader polls: adapted between spin_max_ns / 16 and
	 * spin_max_ns (--spin-us), see next_request */
	uint64_t spin_ns, spin_max_ns;
	unsigned max_threads;
	pthread_mutex_t lock;
	pthread_cond_t turn;   /* the lead is free, or the loop is done */
	bool leading, done;
	bool watching;         /* a waiting thread keeps watch */
	uint64_t last_take;    /* when the last request was taken */
	unsigned threads, idle;
	int error;
	sem_t finished;        /* posted once the loop is done */
	pthread_t *tids;
};

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Ends the loop (lock held): wakes every thread and the caller of loop_run. */
static void finish(struct loop *l, int err)
{
	if (l->done)
		return;
	l->done = true;
	l->error = err;
	pthread_cond_broadcast(&l->turn);
	eventfd_write(l->stop_fd, 1);
	sem_post(&l->finished);
}

/* The poll doubles (up to --spin-us) each time a request came while
 * polling and halves each time none did, so a slow trickle of requests
 * (one every millisecond, say) does not keep a CPU busy polling in vain.
 * Only the leader calls this; the lead passes under the loop's lock. */
static void adapt(struct loop *l, bool caught)
{
	uint64_t floor = l->spin_max_ns / 16;
	if (caught)
		l->spin_ns = l->spin_ns * 2 < l->spin_max_ns ? l->spin_ns * 2 : l->spin_max_ns;
	else
		l->spin_ns = l->spin_ns / 2 > floor ? l->spin_ns / 2 : floor;
}

/* The leader's wait: > 0 a request is in fb, 0 the session is over, < 0
 * the device failed. */
static int next_request(struct loop *l, struct fuse_buf *fb)
{
	uint64_t until = now_ns() + l->spin_ns;
	bool slept = false;
	for (;;) {
		int r = fuse_session_receive_buf(l->se, fb);
		if (r != -EAGAIN && r != -EINTR) {
			adapt(l, !slept);
			return r;
		}
		if (fuse_session_exited(l->se))
			return 0;
		if (now_ns() < until) {
			/* a reader of this CPU may run meanwhile */
			sched_yield();
			continue;
		}
		slept = true;
		struct pollfd p[2] = { { l->fd, POLLIN, 0 }, { l->stop_fd, POLLIN, 0 } };
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents)
			return 0;
		until = now_ns();
	}
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
static void wait_turn(struct loop *l)
{
	l->idle++;
	if (!l->watching && now_ns() - l->last_take < IDLE_NS) {
		l->watching = true;
		struct timespec t = in_ns(WATCH_NS);
		pthread_cond_timedwait(&l->turn, &l->lock, &t);
		l->watching = false;
	} else {
		pthread_cond_wait(&l->turn, &l->lock);
	}
	l->idle--;
}

/* The loop whose lead this thread gave up to serve the request it took,
 * until it hands the lead on (or finishes the request). */
static _Thread_local struct loop *serving;

/* Starts a request thread (lock held) with every signal blocked: signals go
 * to the thread in loop_run. Failing is not fatal, the pool stays smaller. */
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
	struct fuse_buf fb = { 0 };
	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (l->leading && !l->done)
			wait_turn(l);
		if (l->done)
			break;
		l->leading = true;
		pthread_mutex_unlock(&l->lock);
		int r = next_request(l, &fb);
		pthread_mutex_lock(&l->lock);
		l->leading = false;
		if (r <= 0) {
			finish(l, r);
			break;
		}
		uint64_t t = now_ns();
		if (!l->idle && !l->done && l->threads < l->max_threads)
			spawn(l); /* someone must be there to keep watch */
		else if (t - l->last_take >= IDLE_NS && l->idle)
			pthread_cond_signal(&l->turn); /* the watch resumes */
		l->last_take = t;
		pthread_mutex_unlock(&l->lock);
		serving = l;
		fuse_session_process_buf(l->se, &fb);
		serving = NULL;
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	free(fb.mem);
	return NULL;
}

void loop_hand_off(void)
{
	struct loop *l = serving;
	if (!l)
		return;
	serving = NULL;
	pthread_mutex_lock(&l->lock);
	if (!l->leading && !l->done) {
		if (l->idle)
			pthread_cond_signal(&l->turn);
		else if (l->threads < l->max_threads)
			spawn(l);
	}
	pthread_mutex_unlock(&l->lock);
}

int loop_run(struct fuse_session *se, unsigned threads, unsigned spin_us)
{
	struct loop l = {
		.se = se,
		.fd = fuse_session_fd(se),
		.spin_ns = (uint64_t)spin_us * 1000u,
		.spin_max_ns = (uint64_t)spin_us * 1000u,
		.max_threads = threads ? threads : 1,
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.turn = PTHREAD_COND_INITIALIZER,
	};
	int fl = fcntl(l.fd, F_GETFL);
	if (fl < 0 || fcntl(l.fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	l.stop_fd = eventfd(0, EFD_CLOEXEC);
	if (l.stop_fd < 0)
		return -errno;
	l.tids = calloc(l.max_threads, sizeof *l.tids);
	if (!l.tids || sem_init(&l.finished, 0, 0)) {
		int err = l.tids ? -errno : -ENOMEM;
		close(l.stop_fd);
		free(l.tids);
		return err;
	}
	pthread_mutex_lock(&l.lock);
	spawn(&l);
	if (!l.threads)
		finish(&l, -EAGAIN);
	pthread_mutex_unlock(&l.lock);
	/* libfuse's signal handlers end the session from this thread; the
	 * timeout covers a signal that lands between the check and the wait */
	while (!fuse_session_exited(se)) {
		struct timespec t = in_ns(1000000000u);
		if (sem_timedwait(&l.finished, &t) == 0)
			break;
	}
	pthread_mutex_lock(&l.lock);
	finish(&l, 0);
	unsigned n = l.threads;
	pthread_mutex_unlock(&l.lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(l.tids[i], NULL);
	free(l.tids);
	close(l.stop_fd);
	sem_destroy(&l.finished);
	return l.error;
}
