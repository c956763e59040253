/* A minimal assertion kit for the C unit tests: each failed CHECK prints its
 * place and counts; main returns the count so meson sees the failure. */
#ifndef CHECK_H
#define CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			check_failures++;                                        \
		}                                                                \
	} while (0)

#define CHECK_EQ_U(a, b)                                                         \
	do {                                                                     \
		uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                 \
		if (a_ != b_) {                                                  \
			fprintf(stderr, "%s:%d: %s == %s failed: %" PRIu64 " != %" PRIu64 "\n", \
				__FILE__, __LINE__, #a, #b, a_, b_);             \
			check_failures++;                                        \
		}                                                                \
	} while (0)

#define CHECK_STR(a, b)                                                          \
	do {                                                                     \
		const char *a_ = (a), *b_ = (b);                                 \
		if (strcmp(a_, b_) != 0) {                                       \
			fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", \
				__FILE__, __LINE__, #a, #b, a_, b_);             \
			check_failures++;                                        \
		}                                                                \
	} while (0)

#define CHECK_DONE()                                                             \
	do {                                                                     \
		if (check_failures)                                              \
			fprintf(stderr, "%d check(s) failed\n", check_failures); \
		return check_failures ? 1 : 0;                                   \
	} while (0)

/* Where the upstream-written fixtures are: $SHARDFS_FIXTURES, else
 * tests/fixtures in the checkout. */
static inline const char *fixtures_dir(void)
{
	const char *d = getenv("SHARDFS_FIXTURES");
	return d ? d : SHARDFS_SOURCE_ROOT "/tests/fixtures";
}

/* The whole file at `path` in a malloc'd buffer (*len bytes), or NULL (and
 * *len 0) if it does not open. */
static inline uint8_t *slurp(const char *path, size_t *len)
{
	*len = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
	*len = fread(p, 1, (size_t)n, f);
	fclose(f);
	return p;
}

/* Writes `len` bytes as the file at `path`, CHECKing that it worked. */
static inline void spit(const char *path, const void *p, size_t len)
{
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (f) {
		CHECK(fwrite(p, 1, len, f) == len);
		fclose(f);
	}
}

/* A mkstemp/mkdtemp template "<dir>/<name>-XXXXXX" in out: dir is $TMPDIR
 * when set and short (the tests build longer paths, and a socket path, in
 * small buffers from it), else /tmp. */
static inline void check_tmp(char *out, size_t cap, const char *name)
{
	const char *dir = getenv("TMPDIR");
	if (!dir || !dir[0] || strlen(dir) > 40)
		dir = "/tmp";
	snprintf(out, cap, "%s/%s-XXXXXX", dir, name);
}

#endif
