#include "sf_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sf_open.h"

/* Maps the regular file open at `fd` (closed here). */
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
	*out = m;
	m = NULL;
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
	free(m->path);
	free(m);
}
