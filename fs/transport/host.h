/* What the transport tells the daemon above it, handed in at attach
 * (transport_attach): the transport has no other way up. */
#ifndef FS_TRANSPORT_HOST_H
#define FS_TRANSPORT_HOST_H

#include <stdatomic.h>

struct transport_host {
	void *arg;
	/* the transport serving now, "dev_fuse" or "io_uring" (stats.json),
	 * with io_uring the `n` counters of the requests its queues took
	 * (queue i: CPU i) */
	void (*serving)(void *arg, const char *name, atomic_uint_fast64_t *queues, unsigned n);
	/* a problem for .shardfs/errors */
	void (*log)(void *arg, const char *msg);
	/* counts the requests taken from /dev/fuse, and the waits for one
	 * that slept without polling as another task held the CPU (--spin-us) */
	atomic_uint_fast64_t *device_requests, *polls_skipped;
};

#endif
