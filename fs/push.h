/* Pushing ahead (--push-ahead SIZE): after a READDIRPLUS of a view
 * directory, a thread of its own stores the content of the small files
 * it listed into the kernel's page cache (FUSE_NOTIFY_STORE), in listing
 * order, so that a loader reading the files it listed sends no READ for
 * them. Within a window: each listing of a directory pushes at most SIZE
 * bytes (a file counts at least a page), and at most SIZE bytes wait to
 * be pushed at any time. What waits is dropped when pushing would hurt
 * readers: parts decoded while it pushes pass half the decode cache's
 * budget, or a request is stuck at the source. */
#ifndef FS_PUSH_H
#define FS_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct daemon;
struct fnode;

/* Starts the thread when `window` (--push-ahead) is not 0, after
 * daemonizing; 0 or a negative errno. */
int push_start(struct daemon *dm, uint64_t window);
/* Stops it, dropping what waits (before the session ends). */
void push_stop(struct daemon *dm);

/* A READDIRPLUS reply gave the kernel `nodes`: queues the small view
 * files among them, in order, while `*used` (what this listing of the
 * directory queued so far) and the queue stay within the window. Called
 * before the reply is written (the kernel may release the handle `used`
 * lives in once it is: a store that comes before the kernel made the
 * inode is tried again), no lock held. */
void push_listed(struct daemon *dm, struct fnode *const *nodes, size_t n, uint64_t *used);

#endif
