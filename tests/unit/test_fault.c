/* Unit tests of reading a source that shrinks under its mapping: the copies
 * parsers read (sf_map_read, sf_map_copy, sf_win_get) and the copies made
 * for the kernel (sf_readv_copy, sf_readv_fit) fail with EIO, with no
 * signal; lazy work runs between checks of its view's mappings
 * (sf_checked_run), so that a change in place before or during it fails
 * it; a change in place is noticed before mapped bytes are served; and
 * the library leaves the process's SIGBUS disposition as it found it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "sf_buf.h"
#include "sf_map.h"
#include "sf_mapcheck.h"
#include "sf_read.h"
#include "sf_view_impl.h"

static size_t page;

/* A file of three pages of 0xAB, mapped; then cut to `keep` bytes (left
 * alone when keep < 0: even a cut to the same size is a change). */
static struct sf_map *mapped_then_cut(char *path, off_t keep)
{
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	uint8_t *b = malloc(3 * page);
	memset(b, 0xAB, 3 * page);
	CHECK(write(fd, b, 3 * page) == (ssize_t)(3 * page));
	free(b);
	struct sf_map *m = NULL;
	struct sf_err e;
	CHECK(sf_map_open(path, &m, &e) == 0);
	CHECK(sf_map_check(m, &e) == 0);
	CHECK(keep < 0 || ftruncate(fd, keep) == 0);
	close(fd);
	return m;
}

struct work {
	int runs;
	int cut_fd; /* >= 0: the work truncates this file */
};

static int work(void *ctx, struct sf_err *e)
{
	struct work *w = ctx;
	w->runs++;
	CHECK(w->cut_fd < 0 || ftruncate(w->cut_fd, 10) == 0);
	return 0;
}

/* Lazy work over a view: run while its file is as mapped; failed with EIO
 * naming the file when the file changes in place during the work (its
 * result would be of another file), and not run at all once it has. */
static void test_checked_run(void)
{
	char path[64];
	check_tmp(path, sizeof path, "sf_fault");
	struct sf_map *m = mapped_then_cut(path, -1);
	struct sf_view *v = sf_view_new(NULL, "t");
	CHECK(sf_view_hold_map(v, m) == 0);
	struct sf_err e = { { 0 } };
	struct work w = { 0, -1 };
	CHECK(sf_checked_run(v, work, &w, &e) == 0 && w.runs == 1);
	w.cut_fd = open(path, O_WRONLY);
	CHECK(w.cut_fd >= 0);
	CHECK(sf_checked_run(v, work, &w, &e) == -EIO && w.runs == 2);
	CHECK(strstr(e.msg, path) && strstr(e.msg, "changed in place"));
	close(w.cut_fd);
	w.cut_fd = -1;
	CHECK(sf_checked_run(v, work, &w, &e) == -EIO && w.runs == 2);
	CHECK(atomic_load(&m->changed) && sf_view_failed_by_change(v, &e) == -EIO);
	sf_view_unref(v);
	sf_map_unref(m);
	unlink(path);
}

/* A mapping cut inside a page reads zeros past the new end without a
 * fault: a read of a view file over those bytes fails instead. */
static void test_zeros_past_end(void)
{
	char path[64];
	check_tmp(path, sizeof path, "sf_fault");
	struct sf_map *m = mapped_then_cut(path, (off_t)page + 10);
	struct sf_view *v = sf_view_new(NULL, "t");
	CHECK(sf_view_hold_map(v, m) == 0);
	struct sf_node *f = sf_dir_add_file(v->root, "f", 1);
	CHECK(sf_file_add_map(f, m->data + page, 100) == 0);
	struct sf_err e;
	struct sf_readv rv = { 0 };
	CHECK(sf_file_read(f, 0, 100, &sf_nocache, &rv, &e) == -EIO);
	sf_readv_release(&rv);
	/* from now on the whole view refuses, without a system call */
	CHECK(sf_view_failed_by_change(v, &e) == -EIO);
	sf_view_unref(v);
	sf_map_unref(m);
	unlink(path);
}

/* The copies out of a cut file: what is still there reads, the bytes past
 * the new end are EIO naming the file; a range past the mapped size is
 * EINVAL. No signal is raised: nothing here touches the lost pages. */
static void test_copies(void)
{
	char path[64];
	check_tmp(path, sizeof path, "sf_fault");
	struct sf_map *m = mapped_then_cut(path, (off_t)page);
	struct sf_err e = { { 0 } };
	uint8_t b[16];
	CHECK(sf_map_read(m, page - 16, 16, b, "head", &e) == 0 && b[0] == 0xAB && b[15] == 0xAB);
	CHECK(sf_map_read(m, page - 8, 16, b, "index", &e) == -EIO);
	CHECK(strstr(e.msg, path) && strstr(e.msg, "index") && strstr(e.msg, "truncated"));
	CHECK(sf_map_read(m, 2 * page, 16, b, "index", &e) == -EIO);
	CHECK(sf_map_read(m, 3 * page - 8, 16, b, "index", &e) == -EINVAL);
	uint8_t *copy = NULL;
	CHECK(sf_map_copy(m, 0, 2 * page, &copy, "blob", &e) == -EIO && !copy);
	CHECK(sf_map_copy(m, 0, page, &copy, "blob", &e) == 0 && copy[page - 1] == 0xAB);
	free(copy);
	/* a window: inside the file, then past its new end */
	struct sf_win w = { .m = m };
	const uint8_t *p;
	CHECK(sf_win_get(&w, 10, 4, 3 * page, &p, "records", &e) == -EIO);
	CHECK(sf_win_get(&w, 10, 4, page, &p, "records", &e) == 0 && p[3] == 0xAB);
	CHECK(sf_win_get(&w, 20, 4, page, &p, "records", &e) == 0 && p[0] == 0xAB);
	CHECK(sf_win_get(&w, page + 4, 4, 3 * page, &p, "records", &e) == -EIO);
	CHECK(sf_win_get(&w, 0, 4, 4 * page, &p, "records", &e) == -EINVAL);
	sf_win_free(&w);
	/* the kernel's copies: the mapped pages past the end fail the copy */
	struct sf_view *v = sf_view_new(NULL, "t");
	CHECK(sf_view_hold_map(v, m) == 0);
	struct iovec iov[3] = { { (void *)m->data, 8 }, { b, 8 }, { (void *)(m->data + 2 * page), 8 } };
	struct sf_readv rv = { .iov = iov, .n = 3, .bytes = 24, .view = v };
	uint8_t out[24];
	CHECK(sf_readv_copy(&rv, out, &e) == -EIO && strstr(e.msg, "t:"));
	rv.n = 2;
	rv.bytes = 16;
	CHECK(sf_readv_copy(&rv, out, &e) == 0 && out[0] == 0xAB);
	sf_view_unref(v);
	sf_map_unref(m);
	unlink(path);
}

int main(void)
{
	page = (size_t)sysconf(_SC_PAGESIZE);
	struct sigaction before, after;
	CHECK(sigaction(SIGBUS, NULL, &before) == 0);
	test_copies();
	test_checked_run();
	test_zeros_past_end();
	/* no handler installed: an embedding process keeps its own */
	CHECK(sigaction(SIGBUS, NULL, &after) == 0);
	CHECK(after.sa_flags == before.sa_flags &&
	      (after.sa_flags & SA_SIGINFO ? after.sa_sigaction == before.sa_sigaction :
	       after.sa_handler == before.sa_handler));
	CHECK_DONE();
}
