/* The nodes the kernel makes the daemon hold, kept under --max-nodes, and
 * the SRC files among them holding a mapping under `maps_cap` (fs/fnode.h). The
 * kernel keeps an entry, and so its node, as long as it likes (a view's for
 * a day): a walk over ten million files would hold ten million nodes. Past
 * the cap a thread of its own asks the kernel to drop the entries looked up
 * longest ago (fuse_lowlevel_notify_inval_entry), holding no lock: libfuse
 * forbids calling it in the path of a related request (a lookup in the
 * entry's directory...) or under a lock such a request needs, which could
 * deadlock. The FORGETs that follow free the nodes, and a later lookup
 * makes them again. Entries in use (an open file, a cwd) stay until they
 * are let go. */
#ifndef FS_PRUNE_H
#define FS_PRUNE_H

#include <pthread.h>
#include <stdbool.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "fnode.h"

struct prune {
	struct ftree *tree;
	struct fuse_session *se;
	pthread_t thread;
	bool running, stop;   /* stop: under the tree's lock */
};

/* Starts the thread keeping `t` under its cap (none without a cap):
 * 0 or -errno. */
int prune_start(struct prune *p, struct ftree *t, struct fuse_session *se);
/* Stops it (nothing if not started). */
void prune_stop(struct prune *p);

#endif
