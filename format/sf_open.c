#include "sf_open.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Where an opened entry lies: its mount's id where the kernel gives one
 * (Linux 5.8 on), else its device. Asked without its filesystem being
 * asked (AT_STATX_DONT_SYNC): that filesystem may be this very mount. */
struct where {
	bool has_mnt;
	uint64_t mnt;
	dev_t dev;
	mode_t mode;
};

static int where_of(int fd, struct where *p)
{
	struct statx sx;
	if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC,
		  STATX_TYPE | STATX_MNT_ID, &sx) < 0)
		return -errno;
	*p = (struct where){ .has_mnt = sx.stx_mask & STATX_MNT_ID, .mnt = sx.stx_mnt_id,
			    .dev = makedev(sx.stx_dev_major, sx.stx_dev_minor),
			    .mode = sx.stx_mode };
	return 0;
}

static bool same_mount(const struct where *a, const struct where *b)
{
	return a->has_mnt && b->has_mnt ? a->mnt == b->mnt : a->dev == b->dev;
}

bool sf_same_mount(int a, int b)
{
	struct where pa = { 0 }, pb = { 0 };
	return where_of(a, &pa) == 0 && where_of(b, &pb) == 0 && same_mount(&pa, &pb);
}

/* Opens component `comp` of directory `dir` as an O_PATH descriptor,
 * failing on one on another mount than `top` (-EXDEV: as RESOLVE_NO_XDEV). */
static int step(int dir, const char *comp, const struct where *top, struct where *p)
{
	int fd = openat(dir, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = where_of(fd, p);
	if (rc == 0 && !same_mount(p, top))
		rc = -EXDEV;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

int sf_open_walk(int top, const char *path, int flags)
{
	if (path[0] == '/')
		return -EXDEV;
	if (!path[0])
		return -ENOENT;
	struct where at_top = { 0 }, p = { 0 };
	int rc = where_of(top, &at_top);
	if (rc)
		return rc;
	char *s = strdup(path);
	/* the directories opened on the way; dirs[0] is `top` (the caller's) */
	int *dirs = malloc((strlen(path) / 2 + 2) * sizeof *dirs);
	if (!s || !dirs) {
		free(s);
		free(dirs);
		return -ENOMEM;
	}
	size_t depth = 0;
	dirs[0] = top;
	char *save = NULL, *comp = strtok_r(s, "/", &save);
	while (comp) {
		char *next = strtok_r(NULL, "/", &save);
		if (strcmp(comp, "..") == 0) {
			if (depth == 0) {
				rc = -EXDEV;
				break;
			}
			close(dirs[depth--]);
		} else if (strcmp(comp, ".") != 0) {
			if (!next)
				break; /* the last component: opened below */
			int fd = step(dirs[depth], comp, &at_top, &p);
			rc = fd < 0 ? fd : S_ISLNK(p.mode) ? -ELOOP : S_ISDIR(p.mode) ? 0 : -ENOTDIR;
			if (rc) {
				if (fd >= 0)
					close(fd);
				break;
			}
			dirs[++depth] = fd;
		}
		comp = next;
	}
	int fd = rc;
	if (rc == 0) {
		/* a path ending in "." or ".." names the directory reached; the
		 * last component is looked at before it is opened (a mount
		 * point is not crossed), and what was opened must lie where
		 * the look found it */
		const char *last = comp ? comp : ".";
		fd = step(dirs[depth], last, &at_top, &p);
		if (fd >= 0 && !(flags & O_PATH)) {
			close(fd);
			struct where q = { 0 };
			fd = S_ISLNK(p.mode) ? -ELOOP : openat(dirs[depth], last, flags | O_NOFOLLOW | O_CLOEXEC);
			if (fd == -1)
				fd = -errno;
			else if (fd >= 0 && (where_of(fd, &q) || !same_mount(&q, &at_top))) {
				close(fd);
				fd = -EXDEV;
			}
		}
	}
	while (depth > 0)
		close(dirs[depth--]);
	free(dirs);
	free(s);
	return fd;
}

/* Opens `path` beneath `top` with no symlink followed and no mount point
 * crossed (a mount inside SRC may be this daemon's own: resolving through
 * it would wait on itself): openat2 while the kernel has it, the walk once
 * it answers ENOSYS. */
static int resolve(int top, const char *path, int flags)
{
	static atomic_bool no_openat2;
	if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
		struct open_how how = {
			.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV,
		};
		/* EAGAIN: a rename raced a ".." on the way; it settles */
		for (int tries = 0; tries < 8; tries++) {
			long fd = syscall(SYS_openat2, top, path, &how, sizeof how);
			if (fd >= 0)
				return (int)fd;
			if (errno != EAGAIN)
				break;
		}
		if (errno != ENOSYS)
			return -errno;
		atomic_store_explicit(&no_openat2, true, memory_order_relaxed);
	}
	return sf_open_walk(top, path, flags);
}

static const char *type_name(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISDIR(m) ? "a directory" :
	       S_ISLNK(m) ? "a symlink" : "not a regular file";
}

/* The message for an open not done or failed (rc), `m` the type seen. */
static int not_opened(struct sf_err *e, int rc, const char *shown, mode_t m)
{
	if (m)
		return sf_fail(e, rc, "%s: %s, not a regular file: not opened", shown, type_name(m));
	if (rc == -ELOOP)
		return sf_fail(e, rc, "%s: a symlink, or one on its path: shardfs follows no "
			       "symlink in SRC, not opened", shown);
	if (rc == -EXDEV)
		return sf_fail(e, rc, "%s: outside the mounted directory, or through a mount "
			       "point inside it (shardfs enters no other mount): not opened", shown);
	return sf_fail(e, rc, "%s: open: %s", shown, strerror(-rc));
}

int sf_open_beneath(int top, const char *path, enum sf_want want, const char *shown,
		    struct sf_err *e)
{
	if (want == SF_WANT_DIR) {
		/* O_DIRECTORY fails on anything else before opening it */
		int fd = resolve(top, path, O_RDONLY | O_DIRECTORY);
		struct stat st;
		if (fd == -ENOTDIR && sf_lstat_beneath(top, path, &st) == 0 && S_ISLNK(st.st_mode))
			fd = -ELOOP; /* the directory itself is a symlink: say so */
		return fd >= 0 ? fd : not_opened(e, fd, shown, 0);
	}
	int fd = resolve(top, path, O_PATH);
	if (fd < 0)
		return not_opened(e, fd, shown, 0);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int rc = -errno;
		close(fd);
		return not_opened(e, rc, shown, 0);
	}
	if (want == SF_WANT_ENTRY)
		return fd;
	close(fd);
	if (!S_ISREG(st.st_mode))
		return not_opened(e, S_ISDIR(st.st_mode) ? -EISDIR : S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL,
			       shown, st.st_mode);
	/* The entry may be replaced between the look and the open: O_NONBLOCK
	 * keeps a FIFO put in its place from blocking, and the type is checked
	 * again on what was opened. */
	fd = resolve(top, path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return not_opened(e, fd, shown, 0);
	int rc = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
	if (rc) {
		close(fd);
		return not_opened(e, rc, shown, rc == -EINVAL ? st.st_mode : 0);
	}
	return fd;
}

char *sf_path_join(const char *dir, const char *name)
{
	char *p = NULL;
	if (strcmp(dir, ".") == 0)
		return strdup(name);
	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

int sf_lstat_beneath(int top, const char *path, struct stat *st)
{
	int fd = resolve(top, path, O_PATH);
	if (fd < 0)
		return fd;
	int rc = fstat(fd, st) < 0 ? -errno : 0;
	close(fd);
	return rc;
}
