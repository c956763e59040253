/* FUSE over io_uring (Linux 6.14+, fuse.enable_uring on).
 *
 * The kernel makes one queue per possible CPU and puts each request on the
 * queue of the CPU its caller runs on; a queue never lends its requests to
 * another. So each queue has its own ring and its own pool of threads
 * (loop.c), pinned to its CPU while they wait: the caller and the
 * thread serving it share a CPU.
 *
 * An entry is a pair of buffers registered with the kernel: the headers and
 * the payload. A request arrives as a completion on the entry; the reply
 * goes back in the same buffers with COMMIT_AND_FETCH, which also gives the
 * entry back for the next request. libfuse still parses requests and
 * builds replies: the request is laid out the way /dev/fuse would deliver
 * it (headers copied in front of the payload, which stays in place), and
 * the reply, written by libfuse through our writev hook (fs/transport.c),
 * is copied into the entry when it answers the request this thread serves.
 *
 * Only the queue's ring thread touches the ring: the kernel completes a
 * command in the task that submitted it, and a request thread stuck on SRC
 * (a hard NFS mount whose server is gone) would keep every request the
 * kernel hands to the entries it committed, stats.json's included. The
 * ring thread reaps requests into the ready list, where the pool's leader
 * takes them (loop.c); a finished reply joins the pending list, and the
 * ring thread, woken through an eventfd whose read is always in the ring,
 * commits pending replies before it waits. A queue has an entry for every
 * thread its pool may run, so requests stuck on SRC never hold them all.
 * A thread doing slow work (loop_hand_off) is unpinned, so it may run on
 * another CPU and leave this one to the callers and the new leader. */
#include "uring.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "host.h"
#include "loop.h"
#include "sf_err.h"
#include "sf_read.h"
#include "uring_abi.h"

/* Room in front of the payload for fuse_in_header and the op header, so a
 * request is contiguous without copying its payload. */
#define SLACK 256
_Static_assert(SLACK >= sizeof(struct fuse_in_header) +
	       sizeof(((struct fuse_uring_req_header *)0)->op_in), "SLACK");
/* Threads per queue at most: each serves one entry at a time, and entries
 * are memory (a payload each, resident once used). */
#define MAX_QUEUE_THREADS 8
/* Entries per queue: one for every thread its pool may run (fs/loop.h),
 * so that requests stuck at the source, each holding its entry, never
 * hold all of them: the kernel hands a request only to a free entry of
 * its CPU's queue, and .shardfs/stats.json must still get one. */
#define MAX_DEPTH LOOP_CEILING(MAX_QUEUE_THREADS)
/* REGISTER before the kernel saw the INIT reply fails with EAGAIN */
#define REGISTER_TRIES 100

struct queue;

struct entry {
	struct queue *q;
	struct fuse_uring_req_header *hdr;
	char *block;             /* SLACK bytes, then the payload */
	struct iovec iov[2];     /* given to REGISTER: headers, payload */
	uint64_t commit_id, unique;
	bool unregistered;       /* REGISTER still to be sent */
	struct entry *next;      /* in the ready or pending list */
};

struct queue {
	struct uring *u;
	unsigned qid;
	struct io_uring ring;
	bool ring_ok;
	int evfd;
	uint64_t evbuf;
	struct entry ents[MAX_DEPTH];
	/* The ring's own thread, the only one that submits to it: the
	 * kernel completes a command in the task that submitted it, so a
	 * request thread stuck on SRC would keep every request the kernel
	 * hands to the entries it had committed. */
	pthread_t ring_thread;
	bool ring_started, ev_armed;
	pthread_mutex_t lock;
	pthread_cond_t got;      /* a request is ready, or the queue ended */
	/* under lock: */
	bool registered, ended;
	int error;               /* a completion failed with it */
	struct entry *ready, **ready_tail;     /* requests reaped, not yet taken */
	struct entry *pending, **pending_tail; /* replies to commit */
	bool waiting, stopping;
	struct loop *loop;
};

struct uring {
	struct fuse_session *se;
	unsigned nq, depth, threads;
	size_t payload;
	cpu_set_t all;           /* every CPU: for threads doing slow work */
	struct queue *qs;
	atomic_uint_fast64_t *counts;
	pthread_mutex_t lock;
	pthread_cond_t reported; /* a queue registered or failed to */
	unsigned nreported;
	int reg_error;
	atomic_bool failed;      /* a registered queue failed */
	const struct transport_host *host; /* the problem log */
};

/* The entry whose request this thread serves, until it is answered: then
 * the entry is the kernel's again (and may already carry a new request).
 * Per thread: libfuse's write of a reply (uring_reply) does not say which
 * request it answers, only the thread that serves it knows. */
static _Thread_local struct entry *current;
/* The CPU this thread is pinned to, -1 none. */
static _Thread_local int pinned = -1;

/* The possible CPUs, which must be 0..n-1: the kernel makes one queue per
 * possible CPU and numbers them by CPU. */
static int possible_cpus(unsigned *n)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
	char line[256];
	bool got = f && fgets(line, sizeof line, f);
	if (f)
		fclose(f);
	unsigned first, last;
	char end;
	if (!got)
		return -1;
	if (sscanf(line, "%u-%u%c", &first, &last, &end) == 3 && end == '\n' && first == 0)
		*n = last + 1;
	else if (sscanf(line, "%u%c", &first, &end) == 2 && end == '\n' && first == 0)
		*n = 1;
	else
		return -1;
	return *n <= CPU_SETSIZE ? 0 : -1;
}

int uring_probe(char *why, size_t n)
{
	unsigned cpus;
	if (possible_cpus(&cpus)) {
		snprintf(why, n, "the possible CPUs (/sys/devices/system/cpu/possible) are not "
			 "numbered 0..N-1, which the kernel's queues need");
		return -1;
	}
	struct io_uring r;
	int err = io_uring_queue_init(2, &r, IORING_SETUP_SQE128);
	if (err) {
		snprintf(why, n, "io_uring is not available (%s)%s", strerror(-err),
			 err == -EPERM ? ": see sysctl kernel.io_uring_disabled" : "");
		return -1;
	}
	io_uring_queue_exit(&r);
	return 0;
}

/* A cleared 128-byte SQE. The ring has a slot per entry and one for the
 * eventfd, so it is never full; were it, submitting frees the slots. */
static struct io_uring_sqe *new_sqe(struct queue *q)
{
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&q->ring)))
		io_uring_submit(&q->ring);
	memset(sqe, 0, 2 * sizeof *sqe);
	return sqe;
}

static void prep_cmd(struct queue *q, struct entry *e, uint32_t op)
{
	struct io_uring_sqe *sqe = new_sqe(q);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = 0; /* /dev/fuse, registered */
	sqe->flags = IOSQE_FIXED_FILE;
	sqe->cmd_op = op;
	if (op == FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uintptr_t)e->iov;
		sqe->len = 2;
	}
	struct fuse_uring_cmd_req *c = (struct fuse_uring_cmd_req *)sqe->cmd;
	c->commit_id = op == FUSE_IO_URING_CMD_COMMIT_AND_FETCH ? e->commit_id : 0;
	c->qid = (uint16_t)q->qid;
	io_uring_sqe_set_data(sqe, e);
}

/* Moves the completions into the ready list (or q->error). The ring's
 * thread only. */
static void reap(struct queue *q)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	pthread_mutex_lock(&q->lock);
	io_uring_for_each_cqe(&q->ring, head, cqe) {
		struct entry *e = io_uring_cqe_get_data(cqe);
		seen++;
		if (!e) {
			q->ev_armed = false;
		} else if (cqe->res == 0) {
			e->next = NULL;
			*q->ready_tail = e;
			q->ready_tail = &e->next;
		} else if (!q->registered && cqe->res == -EAGAIN) {
			e->unregistered = true;
		} else if (!q->error) {
			q->error = cqe->res;
		}
	}
	io_uring_cq_advance(&q->ring, seen);
	if (q->ready || q->error)
		pthread_cond_broadcast(&q->got);
	pthread_mutex_unlock(&q->lock);
}

static bool gone(int err)
{
	return err == -ENOTCONN || err == -ECONNABORTED || err == -ENODEV;
}

/* Registers every entry. A failure comes back as a completion by the time
 * the submission returns; success gives none until a request comes. */
static int enter_queue(struct queue *q)
{
	for (int i = 0; i < REGISTER_TRIES; i++) {
		bool sent = false;
		for (unsigned k = 0; k < q->u->depth; k++)
			if (q->ents[k].unregistered) {
				q->ents[k].unregistered = false;
				prep_cmd(q, &q->ents[k], FUSE_IO_URING_CMD_REGISTER);
				sent = true;
			}
		if (!sent)
			return 0;
		int r = io_uring_submit(&q->ring);
		if (r < 0)
			return r;
		reap(q);
		/* gone: registered, and the mount went since (take sees it) */
		if (q->error && !gone(q->error))
			return q->error;
		nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
	}
	return -EAGAIN;
}

static void report(struct uring *u, int err)
{
	pthread_mutex_lock(&u->lock);
	u->nreported++;
	if (err && !u->reg_error)
		u->reg_error = err;
	pthread_cond_broadcast(&u->reported);
	pthread_mutex_unlock(&u->lock);
}

static void pin(int cpu)
{
	if (pinned == cpu)
		return;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	/* an offline CPU cannot take the thread; it sends no requests either */
	sched_setaffinity(0, sizeof one, &one);
	pinned = cpu;
}

/* Queues the commits of finished replies and the eventfd read (lock held). */
static void prepare_wait(struct queue *q)
{
	for (struct entry *e = q->pending; e; e = e->next)
		prep_cmd(q, e, FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
	q->pending = NULL;
	q->pending_tail = &q->pending;
	if (!q->ev_armed) {
		struct io_uring_sqe *sqe = new_sqe(q);
		io_uring_prep_read(sqe, q->evfd, &q->evbuf, sizeof q->evbuf, 0);
		io_uring_sqe_set_data(sqe, NULL);
		q->ev_armed = true;
	}
}

/* The ring's thread: registers the entries, then commits replies and
 * reaps requests until the queue stops or fails. Never serves a request. */
static void *ring_run(void *arg)
{
	struct queue *q = arg;
	pin((int)q->qid);
	int err = enter_queue(q);
	pthread_mutex_lock(&q->lock);
	q->registered = !err;
	pthread_mutex_unlock(&q->lock);
	report(q->u, err);
	for (bool stopping = err != 0; !stopping;) {
		pthread_mutex_lock(&q->lock);
		stopping = q->stopping || q->error;
		prepare_wait(q);
		q->waiting = !stopping;
		pthread_mutex_unlock(&q->lock);
		/* replies finished as the loop ends still go out */
		int r = stopping ? io_uring_submit(&q->ring) : io_uring_submit_and_wait(&q->ring, 1);
		pthread_mutex_lock(&q->lock);
		q->waiting = false;
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && !q->error)
			q->error = r;
		pthread_mutex_unlock(&q->lock);
		if (!stopping)
			reap(q);
	}
	pthread_mutex_lock(&q->lock);
	if (err && !q->error)
		q->error = err;
	q->ended = true;
	pthread_cond_broadcast(&q->got);
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

static int queue_take(void *src, struct loop_slot *s)
{
	struct queue *q = src;
	pin((int)q->qid);
	pthread_mutex_lock(&q->lock);
	while (!q->ready && !q->ended && !q->stopping && !q->error)
		pthread_cond_wait(&q->got, &q->lock);
	int r = 0;
	if (q->ready) {
		s->req = q->ready;
		q->ready = q->ready->next;
		if (!q->ready)
			q->ready_tail = &q->ready;
		r = 1;
	} else if (q->error && !gone(q->error)) {
		r = q->error;
	}
	pthread_mutex_unlock(&q->lock);
	return r;
}

/* Hands a filled entry to the ring's thread. */
static void commit(struct entry *e)
{
	struct queue *q = e->q;
	pthread_mutex_lock(&q->lock);
	e->next = NULL;
	*q->pending_tail = e;
	q->pending_tail = &e->next;
	bool poke = q->waiting;
	pthread_mutex_unlock(&q->lock);
	if (poke)
		eventfd_write(q->evfd, 1);
}

static void reply_error(struct entry *e, int err)
{
	struct fuse_out_header oh = { .len = sizeof oh, .error = -err, .unique = e->unique };
	memcpy(e->hdr->in_out, &oh, sizeof oh);
	e->hdr->ring_ent_in_out.payload_sz = 0;
	commit(e);
}

static void queue_serve(void *src, struct loop_slot *s)
{
	struct queue *q = src;
	struct entry *e = s->req;
	struct fuse_in_header in;
	memcpy(&in, e->hdr->in_out, sizeof in);
	uint32_t psz = e->hdr->ring_ent_in_out.payload_sz;
	e->commit_id = e->hdr->ring_ent_in_out.commit_id;
	e->unique = in.unique;
	atomic_fetch_add_explicit(&q->u->counts[q->qid], 1, memory_order_relaxed);
	/* the kernel's word, but a wrong length must not make us read astray */
	size_t head = in.len >= psz ? in.len - psz : 0;
	if (head < sizeof in || head - sizeof in > sizeof e->hdr->op_in || psz > q->u->payload) {
		reply_error(e, EIO);
		return;
	}
	char *start = e->block + SLACK - head;
	memcpy(start, &in, sizeof in);
	memcpy(start + sizeof in, e->hdr->op_in, head - sizeof in);
	struct fuse_buf fb = { .mem = start, .size = in.len };
	current = e;
	fuse_session_process_buf(q->u->se, &fb);
	/* every request must give its entry back, answered or not */
	if (current) {
		current = NULL;
		reply_error(e, EIO);
	}
}

bool uring_reply(const struct iovec *iov, int count, ssize_t *res)
{
	struct entry *e = current;
	struct fuse_out_header oh;
	if (!e || count < 1 || iov[0].iov_len != sizeof oh)
		return false;
	memcpy(&oh, iov[0].iov_base, sizeof oh);
	if (oh.unique != e->unique)
		return false;
	size_t body = 0;
	for (int i = 1; i < count; i++)
		body += iov[i].iov_len;
	*res = (ssize_t)(sizeof oh + body);
	current = NULL;
	if (body > e->q->u->payload) {
		/* the kernel never asks for more than the payload holds */
		reply_error(e, EIO);
		return true;
	}
	/* The body may point into mapped source bytes: copied through the
	 * kernel (as /dev/fuse would), so that a source whose storage fails
	 * under the mapping fails the request, not the daemon. */
	struct sf_readv rv = { .iov = (struct iovec *)&iov[1], .n = (size_t)count - 1,
			       .bytes = body };
	struct sf_err err = { { 0 } };
	if (sf_readv_copy(&rv, e->block + SLACK, &err)) {
		e->q->u->host->log(e->q->u->host->arg, err.msg);
		reply_error(e, EIO);
		return true;
	}
	memcpy(e->hdr->in_out, &oh, sizeof oh);
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)body;
	commit(e);
	return true;
}

bool uring_serving(void)
{
	return current != NULL;
}

static void queue_handed_off(void *src)
{
	struct queue *q = src;
	sched_setaffinity(0, sizeof q->u->all, &q->u->all);
	pinned = -1;
}

static void queue_wake(void *src)
{
	struct queue *q = src;
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	pthread_cond_broadcast(&q->got);
	pthread_mutex_unlock(&q->lock);
	eventfd_write(q->evfd, 1);
}

/* A queue that failed once registered cannot be replaced: the kernel
 * keeps its requests. End the session (the mount goes, it does not hang). */
static void queue_ended(void *src, int err)
{
	struct queue *q = src;
	pthread_mutex_lock(&q->lock);
	bool registered = q->registered;
	pthread_mutex_unlock(&q->lock);
	if (!registered)
		return;
	if (err) {
		fprintf(stderr, "shardfs: io_uring queue %u failed: %s\n", q->qid, strerror(-err));
		atomic_store(&q->u->failed, true);
	}
	fuse_session_exit(q->u->se);
}

static const struct loop_source queue_ops = {
	.take = queue_take,
	.serve = queue_serve,
	.handed_off = queue_handed_off,
	.wake = queue_wake,
	.ended = queue_ended,
};

static int queue_init(struct uring *u, struct queue *q, unsigned qid, int dev_fd)
{
	q->u = u;
	q->qid = qid;
	q->evfd = -1;
	q->ready_tail = &q->ready;
	q->pending_tail = &q->pending;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->got, NULL);
	struct io_uring_params p = { .flags = IORING_SETUP_SQE128 };
	int err = io_uring_queue_init_params(u->depth + 1, &q->ring, &p);
	if (err)
		return err;
	q->ring_ok = true;
	err = io_uring_register_files(&q->ring, &dev_fd, 1);
	if (err)
		return err;
	q->evfd = eventfd(0, EFD_CLOEXEC);
	if (q->evfd < 0)
		return -errno;
	for (unsigned k = 0; k < u->depth; k++) {
		struct entry *e = &q->ents[k];
		e->q = q;
		e->unregistered = true;
		e->hdr = calloc(1, sizeof *e->hdr);
		e->block = malloc(SLACK + u->payload);
		if (!e->hdr || !e->block)
			return -ENOMEM;
		e->iov[0] = (struct iovec){ e->hdr, sizeof *e->hdr };
		e->iov[1] = (struct iovec){ e->block + SLACK, u->payload };
	}
	return 0;
}

static void queue_fini(struct queue *q)
{
	if (q->ring_started) {
		queue_wake(q);
		pthread_join(q->ring_thread, NULL);
	}
	if (q->ring_ok)
		io_uring_queue_exit(&q->ring);
	if (q->evfd >= 0)
		close(q->evfd);
	for (unsigned k = 0; k < MAX_DEPTH; k++) {
		free(q->ents[k].hdr);
		free(q->ents[k].block);
	}
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->got);
}

struct uring *uring_new(struct fuse_session *se, int dev_fd, size_t payload,
			unsigned threads, const struct transport_host *host, char *why, size_t n)
{
	unsigned nq;
	if (possible_cpus(&nq)) {
		snprintf(why, n, "cannot number the possible CPUs");
		return NULL;
	}
	struct uring *u = calloc(1, sizeof *u);
	if (!u) {
		snprintf(why, n, "out of memory");
		return NULL;
	}
	u->se = se;
	u->host = host;
	u->nq = nq;
	u->payload = payload;
	/* a thread serving slow work keeps its entry: one for each thread
	 * the queue's pool may run, those kept free included */
	u->threads = threads / nq < 1 ? 1 : threads / nq > MAX_QUEUE_THREADS ? MAX_QUEUE_THREADS
									   : threads / nq;
	u->depth = LOOP_CEILING(u->threads);
	CPU_ZERO(&u->all);
	for (unsigned i = 0; i < nq; i++)
		CPU_SET(i, &u->all);
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->reported, NULL);
	u->qs = calloc(nq, sizeof *u->qs);
	u->counts = calloc(nq, sizeof *u->counts);
	if (!u->qs || !u->counts) {
		snprintf(why, n, "out of memory");
		uring_free(u);
		return NULL;
	}
	for (unsigned i = 0; i < nq; i++) {
		int err = queue_init(u, &u->qs[i], i, dev_fd);
		if (err) {
			snprintf(why, n, "cannot set up the queue of CPU %u: %s", i, strerror(-err));
			u->nq = i + 1;
			uring_free(u);
			return NULL;
		}
	}
	return u;
}

int uring_start(struct uring *u)
{
	unsigned started = 0;
	for (unsigned i = 0; i < u->nq; i++) {
		struct queue *q = &u->qs[i];
		q->ring_started = pthread_create(&q->ring_thread, NULL, ring_run, q) == 0;
		if (!q->ring_started) {
			report(u, -EAGAIN);
			continue;
		}
		q->loop = loop_start(&queue_ops, q, u->threads);
		if (q->loop)
			started++;
	}
	/* each queue reports within milliseconds: registering needs no
	 * request, only the kernel's word */
	pthread_mutex_lock(&u->lock);
	while (u->nreported < u->nq)
		pthread_cond_wait(&u->reported, &u->lock);
	int err = u->reg_error;
	pthread_mutex_unlock(&u->lock);
	return started ? err : -EAGAIN;
}

bool uring_failed(struct uring *u)
{
	return atomic_load(&u->failed);
}

void uring_free(struct uring *u)
{
	if (!u)
		return;
	for (unsigned i = 0; u->qs && i < u->nq; i++)
		if (u->qs[i].loop)
			loop_stop(u->qs[i].loop);
	for (unsigned i = 0; u->qs && i < u->nq; i++)
		queue_fini(&u->qs[i]);
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->reported);
	free(u->qs);
	free(u->counts);
	free(u);
}

atomic_uint_fast64_t *uring_counts(struct uring *u, unsigned *n)
{
	*n = u->nq;
	return u->counts;
}
