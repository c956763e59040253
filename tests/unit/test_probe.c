/* The listing's check of many containers at once (format/sf_probe.c) must
 * say of every file what sf_format_check says of it alone: the same result,
 * the same message and the same stat. A directory of upstream files, small
 * .tet ones (read whole) and large .tsumugi ones (head and tail, whose
 * trailer the check reads), enough for two threads, with broken ones among
 * them and entries that are not regular files. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sf_big.h"
#include "sf_format.h"

static char dir_path[64];
static int dirfd_ = -1;

static void put(const char *name, const uint8_t *data, size_t len)
{
	int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, data, len) == (ssize_t)len);
	close(fd);
}

static uint8_t *fixture(const char *name, size_t *len)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", fixtures_dir(), name);
	uint8_t *b = slurp(path, len);
	CHECK(b != NULL);
	return b;
}

/* What `failed` heard, by name. */
#define MAXF 1024
static char names[MAXF][32];
static char heard[MAXF][512];

static void failed(void *arg, const char *path, const char *msg)
{
	(void)path;
	size_t i = (size_t)(uintptr_t)arg;
	(void)i;
	for (size_t k = 0; k < MAXF; k++)
		if (strcmp(names[k], path) == 0) {
			snprintf(heard[k], sizeof heard[k], "%s", msg);
			return;
		}
	CHECK(!"a failure for a file not asked about");
}

static void test_many(size_t n)
{
	struct sf_check *c = calloc(n, sizeof *c);
	struct stat *st = calloc(n, sizeof *st);
	for (size_t i = 0; i < n; i++) {
		c[i] = (struct sf_check){ .f = sf_format_for(".", names[i]), .name = names[i],
					  .st = &st[i] };
		heard[i][0] = 0;
	}
	sf_format_check_many(dirfd_, ".", c, n, failed, NULL);
	int ok = 0;
	for (size_t i = 0; i < n; i++) {
		struct sf_err e = { { 0 } };
		struct stat one;
		int rc = sf_format_check(c[i].f, dirfd_, names[i], names[i], &one, &e);
		CHECK_EQ_U(c[i].rc, rc);
		if (rc) {
			if (strcmp(heard[i], sf_err_msg(&e, rc)) != 0)
				fprintf(stderr, "%s: \"%s\" against \"%s\"\n", names[i], heard[i],
					sf_err_msg(&e, rc));
			CHECK(strcmp(heard[i], sf_err_msg(&e, rc)) == 0);
		} else {
			ok++;
			CHECK(heard[i][0] == 0);
			CHECK(st[i].st_ino == one.st_ino && st[i].st_size == one.st_size &&
			      st[i].st_mtim.tv_nsec == one.st_mtim.tv_nsec &&
			      S_ISREG(st[i].st_mode));
		}
	}
	/* all but the broken seven pass */
	CHECK_EQ_U(ok, n - 7);
	free(c);
	free(st);
}

static void test_big(void)
{
	/* below SF_BIG_MIN from malloc, above from a mapping of its own: both
	 * zeroed, aligned, and kept across growth */
	size_t cap = 0;
	uint64_t *a = NULL;
	for (size_t i = 0; i < 300000; i++) {
		CHECK(sf_big_grow(&a, &cap, i, sizeof *a, 8) == 0);
		if (i == 0 || i == 299999)
			CHECK(a[i] == 0 && ((uintptr_t)a & 63) == 0);
		a[i] = i * 7;
	}
	size_t bad = 0;
	for (size_t i = 0; i < 300000; i++)
		bad += a[i] != i * 7;
	CHECK_EQ_U(bad, 0);
	CHECK(cap >= 300000);
	sf_big_free(a);
	CHECK(sf_big_alloc(SIZE_MAX / 8, 16) == NULL);
	sf_big_free(NULL);
}

int main(void)
{
	test_big();
	check_tmp(dir_path, sizeof dir_path, "sf-probe");
	CHECK(mkdtemp(dir_path) != NULL);
	dirfd_ = open(dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	size_t small_len, large_len;
	uint8_t *small = fixture("tet/sample.tet", &small_len);
	uint8_t *large = fixture("tsumugi/gold_dict.tsumugi", &large_len);
	CHECK(large_len > 2 * SF_PROBE_BYTES && small_len < SF_PROBE_BYTES);
	size_t n = 0;
	/* the broken seven first, so that the small run below has them too */
	const char *broken[] = { "bad.tet", "short.tet", "empty.tet", "link.tet", "fifo.tet",
				 "dir.tet", "gone.tet" };
	for (size_t i = 0; i < 7; i++)
		snprintf(names[n++], sizeof names[0], "%s", broken[i]);
	put("bad.tet", (const uint8_t *)"not a tet file at all\n", 22);
	put("short.tet", small, 100);
	put("empty.tet", small, 0);
	CHECK(symlinkat("s100.tet", dirfd_, "link.tet") == 0);
	CHECK(mkfifoat(dirfd_, "fifo.tet", 0644) == 0);
	CHECK(mkdirat(dirfd_, "dir.tet", 0755) == 0);
	for (size_t i = 0; i < 40; i++) {
		snprintf(names[n], sizeof names[0], "l%03zu.tsumugi", i);
		put(names[n++], large, large_len);
	}
	while (n < 700) {
		snprintf(names[n], sizeof names[0], "s%03zu.tet", n);
		put(names[n++], small, small_len);
	}
	test_many(9);   /* one at a time */
	test_many(100); /* one ring */
	test_many(n);   /* two threads */
	free(small);
	free(large);
	close(dirfd_);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_path);
	CHECK(system(cmd) == 0);
	CHECK_DONE();
}
