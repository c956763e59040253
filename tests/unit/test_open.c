/* Opening beneath a top directory (format/sf_open.c): every path of a small
 * tree with symlinks, a FIFO and a socket, through openat2 and through the
 * walk used where the kernel lacks it, which must agree; and mapping a FIFO
 * returns at once, refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"
#include "sf_map.h"
#include "sf_open.h"

static char top_path[64];
static int top = -1;

static void put(const char *rel, const char *text)
{
	int fd = openat(top, rel, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

/* top/ holds d/f, d/e/g, ln -> d, d/lf -> f, d/up -> ../.., fifo, sock;
 * and beside top an outside file that only a symlink or ".." could reach. */
static void make_tree(void)
{
	check_tmp(top_path, sizeof top_path, "sf-open");
	CHECK(mkdtemp(top_path) != NULL);
	char outside[96];
	snprintf(outside, sizeof outside, "%s.outside", top_path);
	FILE *o = fopen(outside, "w");
	CHECK(o && fputs("secret\n", o) >= 0);
	if (o)
		fclose(o);
	top = open(top_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	CHECK(top >= 0);
	CHECK(mkdirat(top, "d", 0755) == 0 && mkdirat(top, "d/e", 0755) == 0);
	put("d/f", "f\n");
	put("d/e/g", "g\n");
	CHECK(symlinkat("d", top, "ln") == 0);
	CHECK(symlinkat("f", top, "d/lf") == 0);
	CHECK(symlinkat("../..", top, "d/up") == 0);
	CHECK(symlinkat(outside, top, "abs") == 0);
	CHECK(mkfifoat(top, "fifo", 0644) == 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sock", top_path);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0);
	close(s);
}

static void remove_tree(void)
{
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.outside'", top_path, top_path);
	CHECK(system(cmd) == 0);
	close(top);
}

/* The errno (0 for success) of opening `path` both ways, which must agree
 * (-1 when they do not). */
static int open_both(const char *path, int flags)
{
	int a = sf_open_walk(top, path, flags);
	struct sf_err e = { { 0 } };
	enum sf_want want = flags & O_PATH ? SF_WANT_ENTRY :
			    flags & O_DIRECTORY ? SF_WANT_DIR : SF_WANT_FILE;
	int b = sf_open_beneath(top, path, want, path, &e);
	int ra = a < 0 ? -a : 0, rb = b < 0 ? -b : 0;
	if (ra != rb)
		fprintf(stderr, "%s: walk %d, openat2 %d (%s)\n", path, ra, rb, e.msg);
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
	return ra == rb ? ra : -1;
}

static void test_resolution(void)
{
	CHECK_EQ_U(open_both("d/f", O_RDONLY), 0);
	CHECK_EQ_U(open_both("d/e/g", O_RDONLY), 0);
	CHECK_EQ_U(open_both("d/e/../f", O_RDONLY), 0);
	CHECK_EQ_U(open_both("./d//e/./g", O_RDONLY), 0);
	CHECK_EQ_U(open_both("d/e/..", O_RDONLY | O_DIRECTORY), 0);
	CHECK_EQ_U(open_both(".", O_RDONLY | O_DIRECTORY), 0);
	/* symlinks: on the way, as the file, as a directory */
	CHECK_EQ_U(open_both("ln/f", O_RDONLY), ELOOP);
	CHECK_EQ_U(open_both("d/lf", O_RDONLY), ELOOP);
	CHECK_EQ_U(open_both("ln", O_RDONLY | O_DIRECTORY), ELOOP);
	CHECK_EQ_U(open_both("d/up/etc/passwd", O_RDONLY), ELOOP);
	CHECK_EQ_U(open_both("abs", O_RDONLY), ELOOP);
	/* the entry itself, symlink or not */
	CHECK_EQ_U(open_both("d/lf", O_PATH), 0);
	CHECK_EQ_U(open_both("ln/lf", O_PATH), ELOOP);
	/* above the top */
	CHECK_EQ_U(open_both("..", O_RDONLY | O_DIRECTORY), EXDEV);
	CHECK_EQ_U(open_both("d/../../x", O_RDONLY), EXDEV);
	CHECK_EQ_U(open_both("/etc/passwd", O_RDONLY), EXDEV);
	CHECK_EQ_U(open_both("d/missing", O_RDONLY), ENOENT);
	CHECK_EQ_U(open_both("d/f/x", O_RDONLY), ENOTDIR);
}

static void test_types(void)
{
	struct sf_err e = { { 0 } };
	/* refused from their type, before any open could block */
	CHECK_EQ_U(-sf_open_beneath(top, "fifo", SF_WANT_FILE, "fifo", &e), EINVAL);
	CHECK(strstr(e.msg, "a FIFO") != NULL);
	CHECK_EQ_U(-sf_open_beneath(top, "sock", SF_WANT_FILE, "sock", &e), EINVAL);
	CHECK(strstr(e.msg, "a socket") != NULL);
	CHECK_EQ_U(-sf_open_beneath(top, "fifo", SF_WANT_DIR, "fifo", &e), ENOTDIR);
	CHECK_EQ_U(-sf_open_beneath(top, "d", SF_WANT_FILE, "d", &e), EISDIR);
	struct sf_map *m = NULL;
	CHECK_EQ_U(-sf_map_beneath(top, "fifo", "fifo", &m, &e), EINVAL);
	CHECK(m == NULL);
	CHECK_EQ_U(-sf_map_beneath(top, "ln/f", "ln/f", &m, &e), ELOOP);
	CHECK(strstr(e.msg, "symlink") != NULL);
	CHECK_EQ_U(sf_map_beneath(top, "d/e/../f", "f", &m, &e), 0);
	CHECK(m && m->size == 2 && memcmp(m->data, "f\n", 2) == 0);
	sf_map_unref(m);
	/* a tool's own argument: symlinks followed, a FIFO still refused */
	char p[128];
	snprintf(p, sizeof p, "%s/fifo", top_path);
	m = NULL;
	CHECK_EQ_U(-sf_map_open(p, &m, &e), EINVAL);
	snprintf(p, sizeof p, "%s/ln/f", top_path);
	CHECK_EQ_U(sf_map_open(p, &m, &e), 0);
	sf_map_unref(m);
	struct stat st;
	CHECK_EQ_U(sf_lstat_beneath(top, "d/lf", &st), 0);
	CHECK(S_ISLNK(st.st_mode));
	CHECK_EQ_U(-sf_lstat_beneath(top, "ln/f", &st), ELOOP);
}

/* A filesystem mounted inside the top is never entered (it may be the
 * daemon's own mount): the mount point and what lies under it are EXDEV,
 * both ways. Mounting needs root; the integration tests, run as root, mount
 * the daemon inside SRC too (test_hostile_mounts.py). */
static void test_mount_inside(void)
{
	if (geteuid() != 0)
		return;
	char m[96];
	snprintf(m, sizeof m, "%s/d/m", top_path);
	CHECK(mkdirat(top, "d/m", 0755) == 0);
	if (mount("tmpfs", m, "tmpfs", 0, "size=64k") != 0) {
		fprintf(stderr, "test_open: cannot mount a tmpfs (%s): mounts not checked\n",
			strerror(errno));
		return;
	}
	put("d/m/x", "x\n");
	CHECK_EQ_U(open_both("d/m", O_RDONLY | O_DIRECTORY), EXDEV);
	CHECK_EQ_U(open_both("d/m", O_PATH), EXDEV);
	CHECK_EQ_U(open_both("d/m/x", O_RDONLY), EXDEV);
	CHECK_EQ_U(open_both("d/m/..", O_RDONLY | O_DIRECTORY), EXDEV);
	struct stat st;
	CHECK_EQ_U(-sf_lstat_beneath(top, "d/m", &st), EXDEV);
	CHECK(umount(m) == 0);
	CHECK_EQ_U(open_both("d/m", O_RDONLY | O_DIRECTORY), 0);
}

int main(void)
{
	make_tree();
	test_resolution();
	test_types();
	test_mount_inside();
	remove_tree();
	CHECK_DONE();
}
