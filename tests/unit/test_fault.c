/* Unit tests of reading a source that shrinks under its mapping: the copies
 * parsers read (sf_map_read, sf_map_copy, sf_win_get) and the copies made
 * for the kernel (sf_readv_copy, sf_readv_fit) fail with EIO, with no
 * signal; the source-fault guard (format/sf_fault.c, still around the
 * formats not yet reading through copies): a mapped file truncated under
 * its mapping faults inside guarded code, which then fails with EIO and
 * leaves the guard stack as it found it; a change in place is noticed
 * before mapped bytes are served; a fault outside a guard still kills the
 * process. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "sf_buf.h"
#include "sf_fault.h"
#include "sf_map.h"
#include "sf_read.h"
#include "sf_view.h"

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

struct touch {
	const volatile uint8_t *p;
	int sum;
	struct sf_map *inner; /* run a nested guard on this */
};

static int touch(void *ctx, struct sf_err *e)
{
	struct touch *t = ctx;
	if (t->inner) {
		struct touch in = { t->p, 0, NULL };
		int rc = sf_guard_run(NULL, NULL, touch, &in, e);
		t->sum = in.sum;
		return rc;
	}
	t->sum = t->p[0];
	return 0;
}

/* A decode's pattern: its output made first, then the stored bytes read. */
static int decode(void *ctx, struct sf_err *e)
{
	struct touch *t = ctx;
	struct sf_buf *kept = sf_buf_new(8), *spent = sf_buf_new(8);
	sf_buf_unref(spent);
	kept->data[0] = t->p[0];
	t->sum = kept->data[0];
	sf_buf_unref(kept);
	return 0;
}

/* A text rendering's pattern: a string grown, then the stored bytes read. */
static int render(void *ctx, struct sf_err *e)
{
	struct touch *t = ctx;
	struct sf_str s = { 0 };
	for (int i = 0; i < 100; i++)
		sf_str_addf(&s, "line %d\n", i);
	sf_str_addc(&s, (char)t->p[0]);
	t->sum = s.p[s.len - 1] & 0xFF;
	sf_str_free(&s);
	return 0;
}

static void test_guard(void)
{
	char path[] = "/tmp/sf_fault_XXXXXX";
	struct sf_map *m = mapped_then_cut(path, (off_t)page);
	struct sf_err e;
	for (int i = 0; i < 1000; i++) {
		/* the third page lies past the new end: SIGBUS, contained */
		struct touch t = { m->data + 2 * page, -1, NULL };
		CHECK(sf_guard_run(NULL, NULL, touch, &t, &e) == -EIO);
		/* the first page is still there */
		t = (struct touch){ m->data, -1, NULL };
		CHECK(sf_guard_run(NULL, NULL, touch, &t, &e) == 0 && t.sum == 0xAB);
	}
	/* the buffers and strings the fault orphans are dropped
	 * (LeakSanitizer would say) */
	for (int i = 0; i < 100; i++) {
		struct touch t = { m->data + 2 * page, -1, NULL };
		CHECK(sf_guard_run(NULL, NULL, decode, &t, &e) == -EIO && t.sum == -1);
		t = (struct touch){ m->data + 2 * page, -1, NULL };
		CHECK(sf_guard_run(NULL, NULL, render, &t, &e) == -EIO && t.sum == -1);
	}
	struct touch r = { m->data, -1, NULL };
	CHECK(sf_guard_run(NULL, NULL, render, &r, &e) == 0 && r.sum == 0xAB);
	/* nested: the inner guard takes the fault, the outer one goes on */
	struct touch t = { m->data + 2 * page, -1, m };
	CHECK(sf_guard_run(NULL, NULL, touch, &t, &e) == -EIO);
	t = (struct touch){ m->data, -1, m };
	CHECK(sf_guard_run(NULL, NULL, touch, &t, &e) == 0 && t.sum == 0xAB);
	/* a guard given the mapping checks it first: the change is final */
	t = (struct touch){ m->data, -1, NULL };
	CHECK(sf_guard_run(NULL, m, touch, &t, &e) == -EIO && t.sum == -1);
	CHECK(strstr(e.msg, "changed in place") != NULL);
	CHECK(atomic_load(&m->changed));
	sf_map_unref(m);
	unlink(path);
}

/* A fault on a mapping the guard does not cover is not ours to contain. */
static void test_not_ours(void)
{
	char a[] = "/tmp/sf_fault_XXXXXX", b[] = "/tmp/sf_fault_XXXXXX";
	struct sf_map *cut = mapped_then_cut(a, 0);
	struct sf_map *other = mapped_then_cut(b, -1);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 2);
		struct touch t = { cut->data, -1, NULL };
		struct sf_err e;
		sf_guard_run(NULL, other, touch, &t, &e);
		_exit(0);
	}
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	/* killed by SIGBUS, or (under ASan) reported and exited non-zero */
	CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
	      (WIFEXITED(status) && WEXITSTATUS(status) != 0));
	sf_map_unref(cut);
	sf_map_unref(other);
	unlink(a);
	unlink(b);
}

/* A mapping cut inside a page reads zeros past the new end without a
 * fault: a read of a view file over those bytes fails instead. */
static void test_zeros_past_end(void)
{
	char path[] = "/tmp/sf_fault_XXXXXX";
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
	CHECK(sf_view_refused(v, &e) == -EIO);
	sf_view_unref(v);
	sf_map_unref(m);
	unlink(path);
}

/* The copies out of a cut file: what is still there reads, the bytes past
 * the new end are EIO naming the file; a range past the mapped size is
 * EINVAL. No signal is raised: nothing here touches the lost pages. */
static void test_copies(void)
{
	char path[] = "/tmp/sf_fault_XXXXXX";
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
	test_copies();
	test_guard();
	test_not_ours();
	test_zeros_past_end();
	CHECK_DONE();
}
