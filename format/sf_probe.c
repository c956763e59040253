/* The listing's cheap check (docs/design.md §3.1), for one container and
 * for all the containers of a directory at once.
 *
 * Checked one at a time, a container costs about ten system calls (look,
 * open, stat, two reads, close), and on a VM each costs a microsecond or more
 * before it does any work: listing 100,000 containers took seconds. A
 * directory's containers are therefore checked in batches through io_uring:
 * the opens of a batch go to the kernel in one submission, then each opened
 * file is fstat'ed (io_uring would hand a statx to a worker thread), then
 * the reads and closes go in one submission, and the reads of files not in
 * the page cache wait for the disk side by side. Two threads take batches
 * one after another. A file that fails anywhere in a batch is checked again alone, so
 * that every failure is said in the same words (docs/performance.md, lever
 * 15). */
#include "sf_format.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sf_big.h"
#include "sf_open.h"

/* Files a batch holds: its buffers take 2 * SF_PROBE_BYTES each. */
#define BATCH 64
/* Fewer files than this are checked one at a time: a ring costs more to set
 * up than it saves. */
#define BATCH_MIN 16
/* From this many files on, two threads share the work. */
#define PARALLEL_MIN 512

static struct sf_probe probe_of(const uint8_t *head, const uint8_t *tail, uint64_t size,
				const char *path)
{
	size_t n = size < SF_PROBE_BYTES ? (size_t)size : SF_PROBE_BYTES;
	return (struct sf_probe){ .head = head, .tail = tail, .nhead = n, .ntail = n,
				  .size = size, .path = path };
}

int sf_format_check(const struct sf_format *f, int dirfd, const char *name, const char *path,
		    struct stat *st, struct sf_err *e)
{
	uint8_t head[SF_PROBE_BYTES], tail[SF_PROBE_BYTES];
	/* a regular file, no symlink followed (sf_open.h) */
	int fd = sf_open_beneath(dirfd, name, SF_WANT_FILE, path, e);
	if (fd < 0)
		return fd;
	struct stat own;
	st = st ? st : &own;
	if (fstat(fd, st) < 0) {
		int rc = -errno;
		close(fd);
		return sf_fail(e, rc, "%s: %s", path, strerror(-rc));
	}
	uint64_t size = (uint64_t)st->st_size;
	struct sf_probe p = probe_of(head, tail, size, path);
	ssize_t a = pread(fd, head, p.nhead, 0);
	ssize_t b = a == (ssize_t)p.nhead ? pread(fd, tail, p.ntail, (off_t)(size - p.ntail)) : -1;
	int err = errno;
	close(fd);
	if (a != (ssize_t)p.nhead || b != (ssize_t)p.ntail)
		return sf_fail(e, a < 0 || b < 0 ? -err : -EIO, "%s: short read of its header", path);
	return f->check(&p, e);
}

/* One file of a batch on its way through the ring. */
struct slot {
	int fd;          /* or a negative errno: checked again alone */
	struct stat st;
	/* head, then tail; a file of up to twice SF_PROBE_BYTES is read whole */
	uint8_t buf[2 * SF_PROBE_BYTES];
	size_t want[2];  /* bytes asked of each read */
	int got[2];      /* what each read returned */
};

struct batch {
	struct io_uring ring;
	struct slot *s;
	struct sf_check *c;
	size_t n;
};

/* The ring has four entries a file and a step queues at most three a file:
 * there is always room. */
static struct io_uring_sqe *sqe(struct batch *b, uint64_t tag)
{
	struct io_uring_sqe *q = io_uring_get_sqe(&b->ring);
	io_uring_sqe_set_data64(q, tag);
	return q;
}

/* Submits what was queued and hands each of the `n` completions to `take`
 * (tag, result). A signal only interrupts the waiting. */
static int complete(struct batch *b, unsigned n, void (*take)(struct batch *b, uint64_t, int))
{
	int rc;
	while ((rc = io_uring_submit(&b->ring)) == -EINTR)
		;
	if (rc < 0)
		return rc;
	while (n) {
		struct io_uring_cqe *cqe;
		if ((rc = io_uring_wait_cqe(&b->ring, &cqe)) == -EINTR)
			continue;
		if (rc < 0)
			return rc;
		take(b, io_uring_cqe_get_data64(cqe), cqe->res);
		io_uring_cqe_seen(&b->ring, cqe);
		n--;
	}
	return 0;
}

static void opened(struct batch *b, uint64_t i, int res)
{
	b->s[i].fd = res;
}

/* tags of the reads and closes: file index * 4 + what */
enum { T_HEAD, T_TAIL, T_CLOSE };

static void read_or_closed(struct batch *b, uint64_t tag, int res)
{
	if (tag % 4 != T_CLOSE)
		b->s[tag / 4].got[tag % 4] = res;
}

/* Opens, stats, reads and closes the files of one batch: c->rc is 0 for
 * each file whose probe was read, -EAGAIN for one to check alone. */
static int run_batch(struct batch *b, int dirfd)
{
	/* as sf_open_beneath opens a file it looked at: no symlink, nothing
	 * above dirfd, no mount point crossed, and a FIFO or device swapped in since neither blocks
	 * nor becomes a terminal */
	struct open_how how = {
		.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV,
	};
	for (size_t i = 0; i < b->n; i++) {
		/* not the buffer: it is only read where a read filled it */
		b->s[i].fd = -EAGAIN;
		b->s[i].got[0] = b->s[i].got[1] = 0;
		b->s[i].want[0] = b->s[i].want[1] = 0;
		io_uring_prep_openat2(sqe(b, i), dirfd, b->c[i].name, &how);
	}
	int rc = complete(b, (unsigned)b->n, opened);
	/* io_uring hands every statx to a worker thread, which costs more
	 * than fstat here: each is a cross-CPU wake-up */
	for (size_t i = 0; i < b->n; i++) {
		struct slot *s = &b->s[i];
		/* not a regular file (swapped in since the listing looked): it
		 * is closed and checked alone, which says what it is */
		if (s->fd >= 0 && (fstat(s->fd, &s->st) < 0 || !S_ISREG(s->st.st_mode)))
			s->got[0] = -EINVAL;
	}
	unsigned n = 0;
	for (size_t i = 0; i < b->n; i++) {
		struct slot *s = &b->s[i];
		if (s->fd < 0)
			continue;
		uint64_t size = (uint64_t)s->st.st_size;
		bool whole = size <= sizeof s->buf;
		s->want[0] = whole ? (size_t)size : SF_PROBE_BYTES;
		s->want[1] = whole ? 0 : SF_PROBE_BYTES;
		/* a hard link: the close follows the reads whatever they return */
		for (int k = 0; rc == 0 && s->got[0] == 0 && k < 2 && s->want[k]; k++, n++) {
			struct io_uring_sqe *q = sqe(b, i * 4 + (uint64_t)k);
			io_uring_prep_read(q, s->fd, s->buf + k * SF_PROBE_BYTES, (unsigned)s->want[k],
					   k ? size - SF_PROBE_BYTES : 0);
			q->flags |= IOSQE_IO_HARDLINK;
		}
		if (rc == 0) {
			io_uring_prep_close(sqe(b, i * 4 + T_CLOSE), s->fd);
			n++;
		} else {
			close(s->fd);
		}
	}
	if (rc == 0)
		rc = complete(b, n, read_or_closed);
	for (size_t i = 0; i < b->n; i++) {
		struct slot *s = &b->s[i];
		bool read = s->fd >= 0 && s->got[0] == (int)s->want[0] && s->got[1] == (int)s->want[1];
		b->c[i].rc = rc == 0 && read ? 0 : -EAGAIN;
	}
	return rc;
}

/* "dir/name" in buf (PATH_MAX): every probe carries its path for the
 * check's messages, so it is made without an allocation. */
static const char *path_in(char *buf, const char *dir, const char *name)
{
	size_t d = strcmp(dir, ".") == 0 ? 0 : strlen(dir), n = strlen(name);
	if (d + n + 2 > PATH_MAX)
		return NULL;
	if (d) {
		memcpy(buf, dir, d);
		buf[d++] = '/';
	}
	memcpy(buf + d, name, n + 1);
	return buf;
}

/* Runs the format's check on a batch's probes; files left with -EAGAIN
 * are checked alone. */
static void check_batch(struct batch *b, int dirfd, const char *dir, sf_check_failed failed,
			void *arg)
{
	char buf[PATH_MAX];
	for (size_t i = 0; i < b->n; i++) {
		struct sf_check *c = &b->c[i];
		const char *path = path_in(buf, dir, c->name);
		struct sf_err e = { { 0 } };
		if (!path) {
			c->rc = sf_fail(&e, -ENAMETOOLONG, "%s/%s: path too long", dir, c->name);
		} else if (c->rc == 0) {
			const struct slot *s = &b->s[i];
			*c->st = s->st;
			bool whole = s->want[1] == 0;
			const uint8_t *tail = whole ? s->buf + s->want[0] : s->buf + 2 * SF_PROBE_BYTES;
			struct sf_probe p = probe_of(s->buf, 0, (uint64_t)s->st.st_size, path);
			p.tail = tail - p.ntail;
			c->rc = c->f->check(&p, &e);
		} else {
			c->rc = sf_format_check(c->f, dirfd, c->name, path, c->st, &e);
		}
		if (c->rc)
			failed(arg, path ? path : c->name, sf_err_msg(&e, c->rc));
	}
}

/* The work of one sf_format_check_many: threads take batches one after another. */
struct share {
	int dirfd;
	const char *dir;
	struct sf_check *c;
	size_t n;
	sf_check_failed failed;
	void *arg;
	atomic_size_t next;  /* the first file no thread has taken */
};

/* The next batch of `w` to check (b->n = 0 when all are taken). */
static void take(struct share *w, struct batch *b)
{
	size_t at = atomic_fetch_add(&w->next, BATCH);
	b->c = w->c + (at < w->n ? at : w->n);
	b->n = at < w->n ? (w->n - at < BATCH ? w->n - at : BATCH) : 0;
}

static void *check_share(void *p)
{
	struct share *w = p;
	struct batch b = { .s = NULL };
	/* no io_uring here (too old, or turned off): one at a time */
	bool have = w->n >= BATCH_MIN && (b.s = sf_big_alloc(BATCH, sizeof *b.s)) &&
		    io_uring_queue_init(4 * BATCH, &b.ring, 0) == 0;
	bool ring = have;
	for (take(w, &b); b.n; take(w, &b)) {
		if (!ring || run_batch(&b, w->dirfd) < 0) {
			/* a ring that fails leaves its files to be checked alone */
			ring = false;
			for (size_t i = 0; i < b.n; i++)
				b.c[i].rc = -EAGAIN;
		}
		check_batch(&b, w->dirfd, w->dir, w->failed, w->arg);
	}
	if (have)
		io_uring_queue_exit(&b.ring);
	sf_big_free(b.s);
	return NULL;
}

void sf_format_check_many(int dirfd, const char *dir, struct sf_check *c, size_t n,
			  sf_check_failed failed, void *arg)
{
	struct share w = { dirfd, dir, c, n, failed, arg, 0 };
	/* Most of a check is the kernel's work on behalf of the thread: a
	 * second thread with a ring of its own nearly halves the time where
	 * there is a second CPU. */
	pthread_t t;
	bool two = n >= PARALLEL_MIN && sysconf(_SC_NPROCESSORS_ONLN) > 1 &&
		   pthread_create(&t, NULL, check_share, &w) == 0;
	check_share(&w);
	if (two)
		pthread_join(t, NULL);
}
