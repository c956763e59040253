/* Live counters for .shardfs/stats.json and the problem log for
 * .shardfs/errors (docs/design.md §3.2). */
#ifndef FS_STATS_H
#define FS_STATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sf_buf.h"
#include "sf_dcache.h"
#include "sf_hash.h"
#include "sf_host.h"
#include "section.h"

/* What .shardfs/errors keeps (docs/tree-layout.md): the latest lines only,
 * so that a tree of bad files cannot grow the daemon's memory. */
#define ERRLOG_LINES 1000
#define ERRLOG_BYTES (256u << 10)

struct errline {
	uint64_t hash;
	size_t len;
};

enum req_kind {
	REQ_LOOKUP, REQ_FORGET, REQ_GETATTR, REQ_READLINK, REQ_OPEN, REQ_READ,
	REQ_RELEASE, REQ_OPENDIR, REQ_READDIR, REQ_RELEASEDIR, REQ_STATFS,
	REQ_GETXATTR, REQ_LISTXATTR, REQ_ACCESS, REQ_WRITE_LIKE, REQ_IOCTL, REQ_FLUSH,
	REQ_KINDS
};

struct stats {
	atomic_uint_fast64_t requests[REQ_KINDS];
	atomic_uint_fast64_t bytes_from_map, bytes_from_cache, bytes_synthesized;
	atomic_uint_fast64_t bytes_pushed; /* of those, sent ahead of reads at IOCTL */
	atomic_uint_fast64_t bytes_pushed_ahead; /* and after listings (fs/push.h) */
	atomic_uint_fast64_t push_stops; /* times what waited to be pushed was dropped */
	struct sf_dcache_counts cache; /* the decode cache's (sf_dcache.h) */
	struct sf_progress progress;   /* the views' long work (sf_host.h) */
	atomic_uint_fast64_t errors;
	atomic_uint_fast64_t containers_opened, containers_failed;
	/* views listings hold open now, at most so far, and closed as unused
	 * past --max-open (fs/openviews.h) */
	atomic_uint_fast64_t views_open, views_open_peak, views_closed;
	atomic_uint_fast64_t device_requests; /* taken from /dev/fuse */
	/* waits for a /dev/fuse request that slept without polling, another
	 * task having held the CPU (fs/transport/loop.c) */
	atomic_uint_fast64_t polls_skipped;
	/* lazy view directories whose entries a request had listed (a taridx
	 * fold root's first listing, or a lookup that needed it) */
	atomic_uint_fast64_t dirs_listed;

	/* the problem log (log_lock): the text of the latest lines, at most
	 * ERRLOG_LINES of them in ERRLOG_BYTES; each line's length and the
	 * hash of its (path, message) pair, oldest first from line0; the
	 * hashes of the lines kept, to log each problem once while its line
	 * is kept; and how many older lines were dropped */
	pthread_mutex_t log_lock;
	struct sf_str log_text;
	struct errline *lines;
	size_t line0, nlines, caplines;
	struct sf_hash seen;
	uint64_t dropped;

	/* the transport (transport_lock): its name, and with io_uring the
	 * counters of its queues */
	pthread_mutex_t transport_lock;
	const char *transport;
	atomic_uint_fast64_t *queues;
	unsigned nqueues;

	struct sections sections;  /* the requests at the source now */
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

/* Records a problem once: the same (path, message) pair is logged again
 * only after its line has been dropped for newer ones. `path` is relative
 * to the mount root. */
void errlog_add(struct stats *s, const char *path, const char *msg);
/* The log's text (one line per problem kept, after a line counting those
 * dropped, then one per request stuck at the source now) and stats.json,
 * as new buffers. */
struct sf_buf *errlog_text(struct stats *s);
struct sf_buf *stats_json(struct stats *s, uint64_t cache_bytes, uint64_t cache_charged,
			  uint64_t cache_budget);

#endif
