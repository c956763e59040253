/* FUSE over io_uring: one queue per possible CPU. The kernel puts each
 * request on the queue of the CPU its caller runs on; each queue is an
 * io_uring of entries registered with the kernel, served by its own pool
 * of threads (loop.c) pinned to that CPU, so a request is taken and
 * answered without waking another CPU. */
#ifndef FS_URING_H
#define FS_URING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

struct transport_host;
struct uring;

/* Whether this machine could run the queues (the CPUs are numbered
 * without holes, a ring with 128-byte entries can be made): 0, or -1 with
 * the reason in `why`. */
int uring_probe(char *why, size_t n);
/* Makes the queues of the connection on `dev_fd`, whose requests and
 * replies carry up to `payload` bytes, each queue allowed `threads`
 * threads, logging problems through `host`; NULL with the reason in
 * `why`. Nothing is registered yet. */
struct uring *uring_new(struct fuse_session *se, int dev_fd, size_t payload,
			unsigned threads, const struct transport_host *host, char *why, size_t n);
/* Starts every queue, which registers its entries (the INIT reply asking
 * for io_uring must have been written). Returns 0 once all are registered,
 * or the negative errno the kernel failed a queue with. */
int uring_start(struct uring *u);
/* Whether a registered queue failed (the session was ended then). */
bool uring_failed(struct uring *u);
/* Stops the queues (waiting for requests being served) and frees them. */
void uring_free(struct uring *u);
/* When the calling thread serves a ring request and `iov` is its reply,
 * sends it through the request's entry, sets *res and returns true. */
bool uring_reply(const struct iovec *iov, int count, ssize_t *res);
/* Whether the calling thread serves a request that came through a ring.
 * Such a request must not store into the page cache: the store waits for
 * any READ of the same pages, which only an entry of the same queue can
 * take, and every entry may be held by a request waiting the same way. */
bool uring_serving(void);
/* The requests each queue took (queue i serves CPU i), `*n` counters. */
atomic_uint_fast64_t *uring_counts(struct uring *u, unsigned *n);

#endif
