/* passfs BACKING MNT [fuse options]: a read-mostly passthrough FUSE
 * filesystem over directory BACKING, used as shardfs's SRC in tests of a
 * source that stops answering (SIGSTOP on this process: every system call
 * on its files then waits, as on a hard NFS mount whose server is gone).
 * It uses libfuse's high-level API on purpose: a file unlinked while open
 * is renamed to .fuse_hidden<N> and removed at its last release, as FUSE
 * clients (and NFS clients, as .nfs<N>) do. */
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* the backing directory, set once in main */
static const char *backing;

static void full(char out[PATH_MAX], const char *path)
{
	snprintf(out, PATH_MAX, "%s%s", backing, path);
}

static int pf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	char p[PATH_MAX];
	full(p, path);
	int rc = fi ? fstat((int)fi->fh, st) : lstat(p, st);
	return rc < 0 ? -errno : 0;
}

static int pf_readlink(const char *path, char *buf, size_t size)
{
	char p[PATH_MAX];
	full(p, path);
	ssize_t n = readlink(p, buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

static int pf_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	char p[PATH_MAX];
	full(p, path);
	DIR *d = opendir(p);
	if (!d)
		return -errno;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st = { .st_ino = de->d_ino, .st_mode = (mode_t)DTTOIF(de->d_type) };
		if (fill(buf, de->d_name, &st, 0, 0))
			break;
	}
	closedir(d);
	return 0;
}

static int pf_open(const char *path, struct fuse_file_info *fi)
{
	char p[PATH_MAX];
	full(p, path);
	int fd = open(p, fi->flags);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int pf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	ssize_t n = pread((int)fi->fh, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int pf_release(const char *path, struct fuse_file_info *fi)
{
	close((int)fi->fh);
	return 0;
}

static int pf_flush(const char *path, struct fuse_file_info *fi)
{
	return 0;
}

static int pf_unlink(const char *path)
{
	char p[PATH_MAX];
	full(p, path);
	return unlink(p) < 0 ? -errno : 0;
}

static int pf_rename(const char *from, const char *to, unsigned int flags)
{
	if (flags)
		return -EINVAL;
	char a[PATH_MAX], b[PATH_MAX];
	full(a, from);
	full(b, to);
	return rename(a, b) < 0 ? -errno : 0;
}

static int pf_statfs(const char *path, struct statvfs *sv)
{
	char p[PATH_MAX];
	full(p, path);
	return statvfs(p, sv) < 0 ? -errno : 0;
}

static const struct fuse_operations ops = {
	.getattr = pf_getattr,
	.readlink = pf_readlink,
	.readdir = pf_readdir,
	.open = pf_open,
	.read = pf_read,
	.release = pf_release,
	.flush = pf_flush,
	.unlink = pf_unlink,
	.rename = pf_rename,
	.statfs = pf_statfs,
};

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: passfs BACKING MNT [fuse options]\n");
		return 2;
	}
	backing = realpath(argv[1], NULL);
	if (!backing) {
		perror(argv[1]);
		return 1;
	}
	/* libfuse sees the arguments without BACKING */
	argv[1] = argv[0];
	return fuse_main(argc - 1, argv + 1, &ops, NULL);
}
