/* Opening source files without leaving the tree being served.
 *
 * Every file the daemon reads, and every directory on the way, is opened
 * beneath one top directory (the mount's SRC): resolved without following a
 * symlink anywhere on the path, without ".." climbing above the top, and
 * without crossing a mount point (another filesystem mounted inside SRC,
 * maybe this daemon's own mount, is never crossed into).
 * Only regular files and directories are opened for reading, and a file is
 * looked at (O_PATH, fstat) before it is opened, so a FIFO, socket or device
 * fails from its type instead of blocking or waking a driver (the
 * listing's batched check, sf_probe.c, takes readdir's d_type as that look).
 * openat2(2) does the resolving where the kernel has it (Linux 5.6 on); where
 * it answers ENOSYS (older kernels, some seccomp filters) an equivalent walk
 * does, one component at a time. */
#ifndef SF_OPEN_H
#define SF_OPEN_H

#include <stdbool.h>
#include <sys/stat.h>

#include "sf_err.h"

enum sf_want {
	SF_WANT_FILE,  /* a regular file, opened for reading */
	SF_WANT_DIR,   /* a directory, opened for reading (listing, openat) */
	SF_WANT_ENTRY, /* the entry itself, whatever it is (O_PATH: fstat, readlinkat) */
};

/* Opens `path` (relative; may hold "/" and "..") beneath directory `top`.
 * Returns the descriptor, or a negative errno with e->msg naming `shown`:
 * -ELOOP for a symlink on the way (or as the file), -EXDEV for a path
 * leading above `top` or through a mount point, -EINVAL (-EISDIR, -ENOTDIR) for an entry of another
 * type than wanted. */
int sf_open_beneath(int top, const char *path, enum sf_want want, const char *shown,
		    struct sf_err *e);

/* Like fstatat(top, path, st, AT_SYMLINK_NOFOLLOW), resolved beneath `top`
 * with no symlink followed on the way. 0 or a negative errno. */
int sf_lstat_beneath(int top, const char *path, struct stat *st);

/* Whether descriptors a and b lie on the same mount. */
bool sf_same_mount(int a, int b);

/* "dir/name", or `name` when dir is "."; malloc'd (NULL when out of memory). */
char *sf_path_join(const char *dir, const char *name);

/* The walk used where openat2 is missing: `flags` for openat(2), O_NOFOLLOW
 * implied. Returns a descriptor or a negative errno (for the unit tests,
 * which run on kernels that have openat2). */
int sf_open_walk(int top, const char *path, int flags);

#endif
