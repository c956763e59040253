/* The views that listings hold open, bounded by --max-open. A view entered
 * through a listing stays open while its entry holds it; past the bound,
 * the least recently entered ones are closed: at once when nothing but the
 * entry holds them, else after the kernel was told to drop the view's
 * entry (its nodes are forgotten, and with them their references). A
 * closed entry is opened again when next entered, as a new view: a reader
 * holding a node of the old one keeps reading it (docs/architecture.md). */
#ifndef FS_OPENVIEWS_H
#define FS_OPENVIEWS_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "sf_view.h"

struct stats;

/* One open view held by one listing entry (the entry's slot points to it). */
struct vopen;

/* The open views of a mount: the daemon's (fs/daemon.h). */
struct openviews {
	pthread_mutex_t lock;      /* the list, and every slot */
	pthread_cond_t wake;
	struct vopen *head, *tail; /* most and least recently entered */
	size_t n;                  /* linked */
	size_t fds;                /* the descriptors their mappings keep */
	unsigned max;
	size_t max_fds;
	struct stats *stats;
	struct fuse_session *se;
	pthread_t thread;
	bool running, stop;
	struct gone *gone;         /* entries to tell the kernel about soon */
	uint64_t press_until;      /* ms (monotonic): openviews_press */
};

/* No bound until openviews_start. */
void openviews_init(struct openviews *ov, struct stats *stats);
/* Starts the thread that closes views past `max`, or past `max_fds`
 * descriptors kept by their mappings; 0 or -errno (the mount works
 * without it, holding every view as before). */
int openviews_start(struct openviews *ov, struct fuse_session *se, unsigned max,
		    size_t max_fds);
/* Whether an open failed for lack of descriptors or memory: something to
 * try again once views are closed, not a property of the file. */
static inline bool openviews_short(int rc)
{
	return rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM;
}
/* Closes now every view only its entry holds (least recently entered
 * first, up to a batch), for an open that failed for lack of descriptors
 * or memory to try again; returns how many. */
size_t openviews_reclaim(struct openviews *ov);
/* The budget (--cache-size) has no room for a reader: for a while, views
 * not entered for a second are closed (those held by the kernel's nodes
 * after it was told to drop their entries), least recently entered first,
 * so that what an idle view holds in the budget (a tar's index) goes
 * before the reader waits long or fails; a closed view is opened again,
 * and its index rebuilt, when next entered. Only wakes the thread: called
 * under the cache's lock. */
void openviews_press(struct openviews *ov);
void openviews_stop(struct openviews *ov);

/* Wraps view `v` (its reference taken over) for an entry being built; not
 * yet counted or closable. NULL when out of memory (v is then unreffed). */
struct vopen *openviews_new(struct sf_view *v);
/* Makes the open view in `*slot` (the entry's field, which no longer
 * moves) closable: the entry is `name` in the directory the kernel knows as
 * inode `dir`. `name` must live as long as the slot holds it. */
void openviews_link(struct openviews *ov, struct vopen **slot, uint64_t dir, const char *name);
/* The view the entry holds (a new reference), or NULL when it holds none.
 * `used` marks it as just entered (least recently used goes first). */
struct sf_view *openviews_get(struct openviews *ov, struct vopen *const *slot, bool used);
/* Holds `v` in an empty slot (linked as above; a reference taken over)
 * and returns a new reference to what the slot holds then: another
 * thread's view when it filled the slot first. */
struct sf_view *openviews_put(struct openviews *ov, struct vopen **slot, struct sf_view *v,
			      uint64_t dir, const char *name);
/* View `v`'s container is gone from SRC (deleted, or renamed by a client
 * that keeps it for its holders): the entry holding it lets it go, and the
 * kernel is told to drop the `n` entries (dirs[i], names[i]) that lead to
 * the node just released (the node's, then its parents' up to the view's
 * root), so that their nodes are forgotten and nothing keeps the file open
 * but readers still reading. Takes over the names. */
void openviews_gone(struct openviews *ov, struct sf_view *v, const uint64_t *dirs, char **names,
		    size_t n);
/* Calls fn(arg, v) for the view v of every linked entry of the directory
 * the kernel knows as inode `dir` (the list's lock held: fn takes a
 * reference to keep v). */
void openviews_each(struct openviews *ov, uint64_t dir, void (*fn)(void *arg, struct sf_view *v),
		    void *arg);
/* Empties the slot, dropping its view (the entry is freed). */
void openviews_drop(struct openviews *ov, struct vopen **slot);

#endif
