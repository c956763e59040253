/* How requests reach us: /dev/fuse alone, or FUSE over io_uring queues
 * (uring.c) with /dev/fuse still carrying INIT, FORGET, INTERRUPT and
 * our notifications (--io-uring, docs/options.md). This is the folder's
 * one interface: main.c sets the transport up and runs it, and request
 * handlers know only transport_hand_off and transport_may_store, whichever
 * transport serves them. */
#ifndef FS_TRANSPORT_H
#define FS_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "host.h"

struct uring;

/* The session's userdata (what fuse_session_new was given) must begin with
 * its struct transport: libfuse hands our device reads and writes only
 * that userdata. */
struct transport {
	bool uring_required;       /* io_uring not taken ends the mount */
	bool hooked;               /* we own the device's reads and writes */
	struct fuse_session *se;
	const struct transport_host *host;
	unsigned threads;
	atomic_bool init_pending;  /* INIT read, its reply not yet written */
	uint64_t init_unique;
	bool offered;              /* the kernel offered io_uring at INIT */
	struct uring *u;           /* the queues, once registered */
	bool failed;               /* the mount ended: io_uring not taken */
};

/* Before mounting: whether io_uring will be tried (`want`: --io-uring on
 * or auto). When it is `required` (on), a failure to take it (the kernel's
 * switch is off, io_uring is disabled...) is an error: returns -1 with the reason in
 * `why`. */
int transport_check(struct transport *t, bool want, bool required, char *why, size_t n);
/* Once mounted, before the session runs: takes over the device's reads and
 * writes when io_uring will be tried. `host` must outlive the session.
 * Returns 0 or -1. */
int transport_attach(struct transport *t, struct fuse_session *se, unsigned threads,
		     const struct transport_host *host);
/* Serves the session until it ends (loop.c on the device, and the
 * io_uring queues once the kernel accepted them), then stops the queues.
 * Prints what failed; returns 0 or 1. */
int transport_run(struct transport *t, unsigned threads, unsigned spin_us);

/* For request handlers. Called before work that may take long or wait for
 * other requests (a decode, a listing, a read from disk): another thread
 * takes the next request meanwhile. Does nothing the second time within a
 * request, or on a thread that serves none. */
void transport_hand_off(void);
/* Whether the request the calling thread serves may store into the
 * kernel's page cache (fuse_lowlevel_notify_store): a store waits for any
 * READ of the same pages, and over io_uring only an entry of the same
 * queue can take that READ, while every entry may be held by a request
 * waiting the same way. */
bool transport_may_store(void);

/* A request thread opens or closes a section at the source (fs/section.h).
 * A pool of `threads` lets the source hold up to twice as many, starting
 * threads beyond `threads` as needed, and always keeps two for requests
 * that need no source: opening returns -EAGAIN when `may_refuse` and only
 * those are left (fs/section.c then refuses the request if one is stuck at
 * the source, else opens it without refusal), and -EBUSY when only the last
 * is left (refused: a burst in the second before anything counts as stuck
 * must not take every thread). Does nothing outside the loop (main.c
 * hands these to fs/section.c). */
int transport_section_open(bool may_refuse);
void transport_section_close(void);

#endif
