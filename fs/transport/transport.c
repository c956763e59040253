/* The transport: /dev/fuse, or FUSE over io_uring set up at INIT.
 *
 * libfuse 3.14 cannot ask for io_uring, so when it may be used we own the
 * device's reads and writes (fuse_session_custom_io) and do three things
 * libfuse does not: note the kernel's INIT offer; in libfuse's INIT reply,
 * make every queue first (a queue that cannot be made costs nothing yet),
 * then ask for io_uring; once the kernel has the reply, register the
 * queues. Asking makes the kernel hold requests until every queue is
 * registered, so nothing that can fail comes between asking and
 * registering except the kernel's own word. A failure that leaves io_uring
 * off lets requests flow on /dev/fuse (with auto); one that leaves it on
 * (the switch turned off since INIT) ends the mount rather than hanging it.
 *
 * Replies to ring requests go through their entry (uring_reply); every
 * other write goes to /dev/fuse: replies to what came there (INIT, FORGET
 * and INTERRUPT always do), and notifications, which the ring does not carry. */
#include "transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "loop.h"
#include "uring.h"
#include "uring_abi.h"

#define ENABLE_URING "/sys/module/fuse/parameters/enable_uring"
#define HOW_TO_ENABLE "as root, echo Y > " ENABLE_URING ", or 'options fuse enable_uring=1' in /etc/modprobe.d"

/* The transport the device's reads and writes serve: the session's
 * userdata begins with it (transport.h). */
static struct transport *of(void *userdata)
{
	return userdata;
}

/* Why the kernel will not serve FUSE over io_uring; NULL when it may. */
static const char *kernel_says_no(char *why, size_t n)
{
	FILE *f = fopen(ENABLE_URING, "re");
	int c = f ? fgetc(f) : EOF;
	if (f)
		fclose(f);
	if (c == EOF)
		snprintf(why, n, "this kernel has no FUSE over io_uring (Linux 6.14+ built "
			 "with CONFIG_FUSE_IO_URING)");
	else if (c != 'Y' && c != 'y' && c != '1')
		snprintf(why, n, "FUSE over io_uring is switched off in the kernel: %s", HOW_TO_ENABLE);
	else if (uring_probe(why, n) == 0)
		return NULL;
	return why;
}

int transport_check(struct transport *t, bool want, bool required, char *why, size_t n)
{
	t->uring_required = required;
	t->hooked = want && !kernel_says_no(why, n);
	return required && !t->hooked ? -1 : 0;
}

static ssize_t dev_read(int fd, void *buf, size_t len, void *userdata)
{
	struct transport *t = of(userdata);
	ssize_t r = read(fd, buf, len);
	struct fuse_in_header in;
	struct fuse_init_in init;
	if (r >= (ssize_t)(sizeof in + sizeof init)) {
		memcpy(&in, buf, sizeof in);
		if (in.opcode == FUSE_INIT) {
			memcpy(&init, (char *)buf + sizeof in, sizeof init);
			t->offered = (init.flags & FUSE_INIT_EXT) && (init.flags2 & URING_INIT_FLAG2);
			t->init_unique = in.unique;
			atomic_store(&t->init_pending, true);
		}
	}
	return r;
}

/* The largest payload of a request or reply the kernel will ask entries to
 * hold, from what the INIT reply sets (the kernel's rule: at least 8 KiB,
 * max_write, and max_pages pages). */
static size_t payload_size(const struct fuse_init_out *o)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t pages = (o->flags & FUSE_MAX_PAGES) ? (o->max_pages ? o->max_pages : 1) : 32;
	size_t size = pages * page;
	if (size < o->max_write)
		size = o->max_write;
	return size < 8192 ? 8192 : size;
}

/* io_uring will not be used: with --io-uring on the mount ends. */
static void uring_not_taken(struct transport *t, const char *why)
{
	if (!t->uring_required)
		return;
	fprintf(stderr, "shardfs: --io-uring on: %s\n", why);
	t->failed = true;
	fuse_session_exit(t->se);
}

static ssize_t init_reply(struct transport *t, int fd, struct iovec *iov)
{
	struct fuse_out_header oh;
	struct fuse_init_out out = { 0 };
	size_t n = iov[1].iov_len;
	char why[256];
	memcpy(&oh, iov[0].iov_base, sizeof oh);
	if (oh.error || n < offsetof(struct fuse_init_out, unused) || n > sizeof out) {
		uring_not_taken(t, "libfuse's INIT reply cannot ask for it");
		return writev(fd, iov, 2);
	}
	memcpy(&out, iov[1].iov_base, n);
	if (!t->offered || !(out.flags & FUSE_INIT_EXT)) {
		uring_not_taken(t, "the kernel did not offer it at INIT");
		return writev(fd, iov, 2);
	}
	struct uring *u = uring_new(t->se, fd, payload_size(&out), t->threads, t->host, why,
				  sizeof why);
	if (!u) {
		uring_not_taken(t, why);
		return writev(fd, iov, 2);
	}
	out.flags2 |= URING_INIT_FLAG2;
	struct iovec v[2] = { iov[0], { &out, n } };
	ssize_t r = writev(fd, v, 2);
	if (r < 0) {
		int err = errno;
		uring_free(u);
		errno = err;
		return r;
	}
	/* named first: requests may come as soon as the last queue registers */
	unsigned nq;
	atomic_uint_fast64_t *counts = uring_counts(u, &nq);
	t->host->serving(t->host->arg, "io_uring", counts, nq);
	int err = uring_start(u);
	if (!err) {
		t->u = u;
		return r;
	}
	t->host->serving(t->host->arg, "dev_fuse", NULL, 0);
	uring_free(u);
	if (err == -EOPNOTSUPP) {
		/* the switch went off after INIT: the kernel still waits for the
		 * queues, so requests would hang */
		fprintf(stderr, "shardfs: io_uring was switched off while mounting: "
			"the mount ends\n");
		t->failed = true;
		fuse_session_exit(t->se);
	} else {
		snprintf(why, sizeof why, "the kernel refused a queue (%s)", strerror(-err));
		uring_not_taken(t, why);
	}
	return r;
}

static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct transport *t = of(userdata);
	ssize_t res;
	if (uring_reply(iov, count, &res))
		return res;
	struct fuse_out_header oh;
	if (count == 2 && iov[0].iov_len == sizeof oh && atomic_load(&t->init_pending)) {
		memcpy(&oh, iov[0].iov_base, sizeof oh);
		if (oh.unique == t->init_unique) {
			atomic_store(&t->init_pending, false);
			return init_reply(t, fd, iov);
		}
	}
	return writev(fd, iov, count);
}

int transport_attach(struct transport *t, struct fuse_session *se, unsigned threads,
		     const struct transport_host *host)
{
	t->se = se;
	t->host = host;
	t->threads = threads;
	if (!t->hooked)
		return 0;
	static const struct fuse_custom_io io = { .read = dev_read, .writev = dev_writev };
	return fuse_session_custom_io(se, &io, fuse_session_fd(se)) ? -1 : 0;
}

int transport_run(struct transport *t, unsigned threads, unsigned spin_us)
{
	int err = loop_run(t->se, threads, spin_us, t->host->device_requests,
			   t->host->polls_skipped);
	if (t->u) {
		t->failed |= uring_failed(t->u);
		t->host->serving(t->host->arg, "dev_fuse", NULL, 0);
		uring_free(t->u);
		t->u = NULL;
	}
	if (err)
		fprintf(stderr, "shardfs: serving requests failed: %s\n", strerror(-err));
	return err || t->failed ? 1 : 0;
}

void transport_hand_off(void)
{
	loop_hand_off();
}

bool transport_may_store(void)
{
	return !uring_serving();
}
