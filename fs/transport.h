/* How requests reach us: /dev/fuse alone, or FUSE over io_uring queues
 * (fs/uring.c) with /dev/fuse still carrying INIT, FORGET, INTERRUPT and
 * our notifications (--io-uring, docs/options.md). */
#ifndef FS_TRANSPORT_H
#define FS_TRANSPORT_H

#include <stddef.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "options.h"

/* Before mounting: whether io_uring will be tried. With --io-uring on a
 * refusal (the kernel's switch is off, io_uring is disabled...) is an
 * error: returns -1 with the reason in `why`. */
int transport_check(enum io_uring_mode mode, char *why, size_t n);
/* Once mounted, before the session runs: takes over the device's reads and
 * writes when io_uring will be tried. Returns 0 or -1. */
int transport_attach(struct fuse_session *se, unsigned threads);
/* Serves the session until it ends (fs/loop.c on the device, and the
 * io_uring queues once the kernel accepted them), then stops the queues.
 * Prints what failed; returns 0 or 1. */
int transport_run(struct fuse_session *se, unsigned threads, unsigned spin_us);

#endif
