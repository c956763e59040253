/* Live counters for .shardfs/stats.json and the problem log for
 * .shardfs/errors (docs/design.md §3.2). */
#ifndef FS_STATS_H
#define FS_STATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sf_buf.h"
#include "sf_hash.h"
#include "stall.h"

enum req_kind {
	REQ_LOOKUP, REQ_FORGET, REQ_GETATTR, REQ_READLINK, REQ_OPEN, REQ_READ,
	REQ_RELEASE, REQ_OPENDIR, REQ_READDIR, REQ_RELEASEDIR, REQ_STATFS,
	REQ_GETXATTR, REQ_LISTXATTR, REQ_ACCESS, REQ_WRITE_LIKE, REQ_IOCTL,
	REQ_KINDS
};

struct stats {
	atomic_uint_fast64_t requests[REQ_KINDS];
	atomic_uint_fast64_t bytes_from_map, bytes_from_cache, bytes_synthesized;
	atomic_uint_fast64_t bytes_pushed; /* of those, sent ahead of reads */
	atomic_uint_fast64_t cache_hits, cache_misses, cache_evictions;
	atomic_uint_fast64_t bytes_decoded, parts_decoded;
	atomic_uint_fast64_t errors;
	atomic_uint_fast64_t containers_opened, containers_failed;
	/* views listings hold open now, at most so far, and closed as unused
	 * past --max-open (fs/openviews.h) */
	atomic_uint_fast64_t views_open, views_open_peak, views_closed;
	atomic_uint_fast64_t device_requests; /* taken from /dev/fuse */

	/* the problem log: its text, and the hashes of the (path, message)
	 * pairs logged, to log each problem once (log_lock) */
	pthread_mutex_t log_lock;
	struct sf_str log_text;
	struct sf_hash seen;

	/* the transport (transport_lock): its name, and with io_uring the
	 * counters of its queues */
	pthread_mutex_t transport_lock;
	const char *transport;
	atomic_uint_fast64_t *queues;
	unsigned nqueues;

	struct waits waits;  /* the requests at the source now */
};

void stats_init(struct stats *s);
void stats_fini(struct stats *s);

static inline void stat_add(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* The transport for stats.json: "dev_fuse" (the default) or "io_uring"
 * with the `n` counters of requests its queues took (queue i: CPU i). */
void stats_set_transport(struct stats *s, const char *name, atomic_uint_fast64_t *queues,
			 unsigned n);

/* Records a problem once: the same (path, message) pair is logged only the
 * first time. `path` is relative to the mount root. */
void errlog_add(struct stats *s, const char *path, const char *msg);
/* The log's text (one line per problem, then one per request stuck at the
 * source now) and stats.json, as new buffers. */
struct sf_buf *errlog_text(struct stats *s);
struct sf_buf *stats_json(struct stats *s, uint64_t cache_bytes, uint64_t cache_budget);

#endif
