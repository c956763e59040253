#include "sf_map.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sf_open.h"

/* Maps the regular file open at `fd`, which the mapping keeps (closed here
 * on failure). */
static int map_fd(int fd, const char *path, struct sf_map **out, struct sf_err *e)
{
	struct sf_map *m = calloc(1, sizeof *m);
	int rc = 0;
	if (!m) {
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if (fstat(fd, &m->st) < 0) {
		rc = sf_fail(e, -errno, "%s: stat: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(m->st.st_mode)) {
		rc = sf_fail(e, -EINVAL, "%s: not a regular file", path);
		goto out;
	}
	m->size = (size_t)m->st.st_size;
	if (m->size) {
		void *p = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			rc = sf_fail(e, -errno, "%s: mmap: %s", path, strerror(errno));
			goto out;
		}
		m->data = p;
	}
	m->path = strdup(path);
	if (!m->path) {
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	atomic_init(&m->refs, 1);
	atomic_init(&m->changed, false);
	m->fd = fd;
	*out = m;
	return 0;
out:
	if (m) {
		if (m->data)
			munmap((void *)m->data, m->size);
		free(m);
	}
	close(fd);
	return rc;
}

int sf_map_beneath(int top, const char *path, const char *shown,
		   struct sf_map **out, struct sf_err *e)
{
	int fd = sf_open_beneath(top, path, SF_WANT_FILE, shown, e);
	return fd < 0 ? fd : map_fd(fd, shown, out, e);
}

int sf_map_open(const char *path, struct sf_map **out, struct sf_err *e)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return sf_fail(e, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return sf_fail(e, -EINVAL, "%s: not a regular file", path);
	/* O_NONBLOCK: replaced by a FIFO since the stat, it still cannot block */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return sf_fail(e, -errno, "%s: open: %s", path, strerror(errno));
	return map_fd(fd, path, out, e);
}

struct sf_map *sf_map_ref(struct sf_map *m)
{
	atomic_fetch_add(&m->refs, 1);
	return m;
}

int sf_map_read(const struct sf_map *m, uint64_t off, uint64_t len, void *dst,
		const char *what, struct sf_err *e)
{
	if (off > m->size || len > m->size - off)
		return sf_fail(e, -EINVAL, "%s: %s: [%llu, +%llu) is past the end (%zu bytes)",
			       m->path, what, (unsigned long long)off, (unsigned long long)len,
			       m->size);
	if (m->read)
		return m->read(m, off, len, dst, what, e);
	uint8_t *at = dst;
	while (len) {
		size_t k = len < SSIZE_MAX ? (size_t)len : SSIZE_MAX;
		ssize_t got = pread(m->fd, at, k, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return sf_fail(e, -EIO, "%s: %s: reading byte %llu failed: %s", m->path, what,
				       (unsigned long long)off, strerror(errno));
		if (got == 0)
			return sf_fail(e, -EIO, "%s: %s: the file ends at byte %llu, was %zu bytes "
				       "(truncated)", m->path, what, (unsigned long long)off, m->size);
		at += got;
		off += (uint64_t)got;
		len -= (uint64_t)got;
	}
	return 0;
}

int sf_map_copy(const struct sf_map *m, uint64_t off, uint64_t len, uint8_t **out,
		const char *what, struct sf_err *e)
{
	*out = NULL;
	if (len > SIZE_MAX - 1)
		return sf_fail(e, -ENOMEM, "%s: %s: %llu bytes is too much", m->path, what,
			       (unsigned long long)len);
	uint8_t *p = malloc(len ? (size_t)len : 1);
	if (!p)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", m->path, what);
	int rc = sf_map_read(m, off, len, p, what, e);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	return 0;
}

/* What a window reads ahead: large enough that a walk costs few system
 * calls, small enough to stay in the cache of the CPU. */
#define WIN_AHEAD ((size_t)64 << 10)

int sf_win_get(struct sf_win *w, uint64_t off, size_t need, uint64_t end, const uint8_t **p,
	       const char *what, struct sf_err *e)
{
	if (w->len && off >= w->off && need <= w->len && off - w->off <= w->len - need) {
		*p = w->buf + (off - w->off);
		return 0;
	}
	if (end > w->m->size || off > end || need > end - off)
		return sf_fail(e, -EINVAL, "%s: %s: [%llu, +%zu) is past the end of its region",
			       w->m->path, what, (unsigned long long)off, need);
	size_t want = end - off < WIN_AHEAD ? (size_t)(end - off) : WIN_AHEAD;
	if (want < need)
		want = need;
	if (want > w->cap) {
		uint8_t *b = realloc(w->buf, want ? want : 1);
		if (!b)
			return sf_fail(e, -ENOMEM, "%s: %s: out of memory", w->m->path, what);
		w->buf = b;
		w->cap = want;
	}
	w->len = 0;
	int rc = sf_map_read(w->m, off, want, w->buf, what, e);
	if (rc)
		return rc;
	w->off = off;
	w->len = want;
	*p = w->buf;
	return 0;
}

void sf_win_free(struct sf_win *w)
{
	free(w->buf);
	w->buf = NULL;
	w->len = w->cap = 0;
}

void sf_map_drop_pages(const struct sf_map *m)
{
	/* a shared read-only file mapping: dropping loses nothing */
	if (m && m->data)
		madvise((void *)m->data, m->size, MADV_DONTNEED);
}

void sf_map_unref(struct sf_map *m)
{
	if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
		return;
	if (m->data)
		munmap((void *)m->data, m->size);
	if (m->src_free)
		m->src_free(m->src);
	close(m->fd);
	free(m->path);
	free(m);
}

/* How many mappings have been found changed in place (sf_map_changes). */
static _Atomic uint64_t changes;

uint64_t sf_map_changes(void)
{
	return atomic_load(&changes);
}

void sf_map_set_recheck(struct sf_map *m, uint64_t ns)
{
	m->recheck_ns = ns;
}

/* CLOCK_MONOTONIC_COARSE in ns: the vDSO answers it without a system call. */
static uint64_t coarse_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int sf_map_check(struct sf_map *m, struct sf_err *e)
{
	struct stat now;
	if (!atomic_load(&m->changed)) {
		/* taken before the fstat: a pass counts from no later than it */
		uint64_t t = m->recheck_ns ? coarse_ns() : 0;
		if (t && t - atomic_load(&m->passed_at) < m->recheck_ns)
			return 0;
		if (fstat(m->fd, &now) < 0)
			return sf_fail(e, -EIO, "%s: stat: %s", m->path, strerror(errno));
		if (now.st_size == m->st.st_size && now.st_mtim.tv_sec == m->st.st_mtim.tv_sec &&
		    now.st_mtim.tv_nsec == m->st.st_mtim.tv_nsec) {
			atomic_store(&m->passed_at, t);
			return 0;
		}
		if (!atomic_exchange(&m->changed, true))
			atomic_fetch_add(&changes, 1);
	}
	return sf_fail(e, -EIO, "%s: changed in place since it was opened (was %llu bytes)",
		       m->path, (unsigned long long)m->size);
}
