/* The daemon's state: everything one mount holds, made in main() and given
 * to the session as its userdata. Each request reaches it through
 * fuse_req_userdata() and hands it down to what serves it; no file of fs/
 * keeps state of its own beyond per-thread scratch. */
#ifndef FS_DAEMON_H
#define FS_DAEMON_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "sf_dcache.h"
#include "fnode.h"
#include "listing.h"
#include "openviews.h"
#include "options.h"
#include "stats.h"
#include "transport.h"
#include "watch.h"

struct push;

struct daemon {
	/* first: the session's userdata is also the transport's
	 * (fs/transport/transport.h) */
	struct transport transport;   /* /dev/fuse, or FUSE over io_uring */
	int src_fd;                   /* SRC's root: every access is beneath it */
	/* --index-dir: indexes of SRC's folds kept in another directory than their tars
	 * (fs/indexdir.h), every access beneath it; -1 without */
	int index_fd;
	struct ftree tree;            /* the inodes */
	struct openviews views;       /* the views listings hold open (--max-open) */
	struct listings listings;     /* making SRC directories' listings */
	struct watch watch;           /* inotify on the SRC directories shown */
	struct stats stats;           /* counters and the problem log */
	struct sf_dcache *cache;         /* decoded parts */
	struct sf_cache *view_cache;  /* what views read through (the cache) */
	struct sf_host host;          /* what views are opened with (that cache) */
	struct fuse_session *se;      /* for notifications */
	bool push_on_open;            /* small files are pushed at open */
	struct push *push;            /* --push-ahead (fs/push.h); NULL: off */
	/* no-open (the default; --open: off): OPEN and FLUSH are answered
	 * ENOSYS, which the kernel takes as "never ask again" for the whole
	 * mount (fs/reading.c) */
	bool no_open;
	/* no-open: SRC files are mapped at lookup while fewer than this
	 * hold a mapping (fs/src.c) */
	size_t src_pin_max;
	enum readdirplus readdirplus; /* --readdirplus (fs/ops.c, fs/dirs.c) */
	/* the directory handles open (fs/dirs.c), so that those the kernel
	 * never releases (a lazy unmount that ends the connection while a
	 * process holds one) are freed at the end */
	pthread_mutex_t dirs_lock;
	struct dirsnap *dirs_open;
	/* whether mincore() tells about SRC's pages (fs/reading.c): -1 until
	 * first asked */
	atomic_int residency_visible;
};
static_assert(offsetof(struct daemon, transport) == 0, "the transport comes first");

/* The daemon a request is served for. */
static inline struct daemon *daemon_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

#endif
