/* Kernel notification of SRC changes. Entries of SRC are trusted by the
 * kernel for a second; when inotify reports that a name changed in a
 * directory the mount has shown, the kernel's entry for it (and for the view
 * beside it) is dropped at once, so the next open looks the new file up
 * instead of reaching an inode whose file is gone. Without inotify (limits,
 * unsupported file systems) the one-second timeout still applies. */
#ifndef FS_WATCH_H
#define FS_WATCH_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "fnode.h"

struct wdir;

/* The daemon's (fs/daemon.h). */
struct watch {
	struct fuse_session *se;
	int src_fd;        /* SRC's root (the daemon's) */
	int fd;
	int stop[2];
	pthread_t thread;
	bool running;
	pthread_mutex_t lock;
	struct wdir *dirs; /* indexed by watch descriptor */
	size_t ndirs;
	atomic_ulong removed; /* watches removed (watch_forget) so far */
	/* called (no lock held) when container name `name` in watched
	 * directory `dir` stops naming its file (deleted, renamed, replaced);
	 * NULL: nothing more to do than drop the kernel's entries */
	void (*gone)(void *arg, uint64_t dir, const char *name);
	void *gone_arg;
};

/* Before any other call: nothing watched yet. */
void watch_init(struct watch *w);
/* Starts the watcher thread for SRC, open as `src_fd`. Returns 0, or a
 * negative errno when inotify is unavailable (the mount works without it). */
int watch_start(struct watch *w, struct fuse_session *se, int src_fd);
/* Watches SRC directory `dir` (once; cheap when already watched). */
void watch_dir(struct watch *w, struct fnode *dir);
/* The kernel forgot watched directory `dir`: its watch is removed unless
 * a newer node of the same directory took it over (ftree's dir_gone). */
void watch_forget(void *w, const struct fnode *dir);
void watch_stop(struct watch *w);

#endif
