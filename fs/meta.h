/* The root's live files, .shardfs/stats.json and .shardfs/errors. Each open
 * reads one snapshot of the content: a reader never sees two versions
 * mixed. With no-open (the default) no OPEN comes, and each snapshot is
 * an inode of its own (meta_snapshot_node below); with --open it is taken
 * when the file opens and kept in its handle until it is released, as
 * follows.
 *
 * The size a stat shows is that of the snapshot the caller reads. FUSE's
 * GETATTR does not say which handle a stat is for (fstat and stat look
 * alike), but it does say which thread asks: a stat (or lookup) takes a
 * snapshot for the thread (reused by the requests of one path walk and of
 * the open after it), and its next open within 5 s reads that very one; a
 * GETATTR with no such snapshot in use is shown the size of the thread's
 * latest open handle (fstat). So stat-then-open and open-then-fstat agree with the bytes
 * read, in every thread, whatever other readers do meanwhile (so it is
 * with no-open too: a stat's lookup and the open's find the same node).
 * The attribute timeout is 0, so the kernel asks at every stat; the files are
 * opened with direct_io (no page cache shared between handles of different
 * snapshots, and reads not clipped to a size another thread's stat set).
 * They are not mmapped by anyone: direct_io costs nothing there. */
#ifndef FS_META_H
#define FS_META_H

#include <pthread.h>
#include <sys/types.h>
#include <time.h>

#include "daemon.h"
#include "fnode.h"
#include "sf_buf.h"

struct meta_live;

enum meta_file { META_STATS, META_ERRORS };

/* FK_META_DIR and FK_META_FILE: few, made at first lookup (no-open: a
 * file node for each snapshot a lookup hands out). */
struct meta_node {
	struct fnode n;
	struct stat st;               /* the root's at its first lookup */
	struct sf_hash kids;          /* .shardfs/: its files by name */
	pthread_mutex_t snap_lock;    /* .shardfs/: over `live` */
	/* .shardfs/: each file's snapshots, made at first use */
	struct meta_live *live[2];
	enum meta_file which;         /* a file: which */
	/* a file, no-open: the one snapshot it reads and shows, and when
	 * it was taken */
	struct sf_buf *snap;
	struct timespec snap_at;
};

static inline struct meta_node *meta_of(const struct fnode *n)
{
	return (struct meta_node *)n;
}

/* The root's .shardfs/ (isdir) or its file `which`, found or made in `dir`,
 * with a lookup reference taken; NULL when out of memory. */
struct fnode *meta_node(struct ftree *t, struct fnode *dir, const char *name, bool isdir,
			enum meta_file which);

/* One open of a live file: its snapshot. */
struct meta_handle {
	struct sf_buf *snap;
	struct timespec at;        /* when it was taken: the file's mtime */
	pid_t tid;                 /* the thread that opened it */
	/* its thread closed it (FLUSH, which close() waits for, unlike the
	 * RELEASE that comes later): a stat of that thread no longer means it */
	bool closed;
	struct meta_handle *prev, *next;
};

/* The size and time a stat by thread `tid` shows (`lookup`: a lookup,
 * which reuses the thread's snapshot of the last second rather than take
 * another, since it comes between a stat and the open that follows). */
void meta_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, off_t *size,
	       struct timespec *at);
/* Opens a handle for thread `tid`; NULL when out of memory. */
struct meta_handle *meta_open(struct daemon *dm, struct fnode *n, pid_t tid);
/* no-open: no OPEN comes, so a handle is its inode. A lookup of file
 * `which` in `dir` by thread `tid` gives the node of the thread's pending
 * snapshot (the one a stat just measured; the entry timeout is 0, so every
 * path walk looks the name up), else of a new one kept as the thread's:
 * the current node of the name when it stands for that snapshot, else a
 * new node, made current (the kernel sees another inode and looks the name
 * up again; an open handle keeps its own inode). Each node shows and
 * reads its one snapshot, and the kernel keeps each one's pages apart, so
 * every open reads one snapshot whole, whatever other readers do. With a
 * lookup reference taken; NULL when out of memory. */
struct fnode *meta_snapshot_node(struct daemon *dm, struct fnode *dir, const char *name,
				 enum meta_file which, pid_t tid);
/* A READ of such a node up to offset `end`: its snapshot (a reference).
 * Read to its end (or at its end: fnode_ops.read_end), the thread that
 * took it takes a new one at its next path walk. */
struct sf_buf *meta_node_read(struct fnode *n, uint64_t end);
/* The handle's thread closed it (FLUSH). */
void meta_closed(struct fnode *n, struct meta_handle *h);
void meta_release(struct fnode *n, struct meta_handle *h);

#endif
