#include "sf_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sf_buf.h"
#include "sf_map.h"
#include "sf_open.h"
#include "sf_view_impl.h"

/* Each format defines its descriptors in its own folder; one left out of
 * the build (-Dformats) is a null weak reference, skipped. */
#define SF_FORMAT(folder, descriptor) extern const struct sf_format descriptor __attribute__((weak));
#include "formats.h"
#undef SF_FORMAT

static const struct sf_format *all[] = {
#define SF_FORMAT(folder, descriptor) &descriptor,
#include "formats.h"
#undef SF_FORMAT
};

const struct sf_format *sf_format_for(const char *dirpath, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		const struct sf_format *f = all[i];
		if (!f)
			continue;
		size_t k = strlen(f->ext);
		if (n <= k || memcmp(name + n - k, f->ext, k) != 0)
			continue;
		if (f->match && !f->match(dirpath, name))
			continue;
		return f;
	}
	return NULL;
}

const struct sf_format *sf_format_nth(size_t i)
{
	for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
		if (all[k] && i-- == 0)
			return all[k];
	return NULL;
}

int sf_check_file(int (*check)(const struct sf_probe *p, struct sf_err *e),
		  const struct sf_map *m, const char *path, struct sf_err *e)
{
	uint8_t *b = malloc(2 * SF_PROBE_BYTES);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	size_t n = m->size < SF_PROBE_BYTES ? m->size : SF_PROBE_BYTES;
	int rc = sf_map_read(m, 0, n, b, "header", e);
	if (!rc)
		rc = sf_map_read(m, m->size - n, n, b + SF_PROBE_BYTES, "tail", e);
	if (!rc) {
		struct sf_probe p = { .head = b, .tail = b + SF_PROBE_BYTES, .nhead = n, .ntail = n,
				      .size = m->size, .path = path };
		rc = check(&p, e);
	}
	free(b);
	return rc;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Lists a directory's entry names, sorted bytewise. */
static int list_names(int dirfd, char ***out, size_t *n, struct sf_err *e, const char *path)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return sf_fail(e, -errno, "%s: cannot list: %s", path, strerror(errno));
	}
	rewinddir(d);
	char **names = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *de;
	int rc = 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (sf_grow(&names, &cap, cnt, sizeof *names, 32)) {
			rc = -ENOMEM;
			break;
		}
		if (!(names[cnt] = strdup(de->d_name))) {
			rc = -ENOMEM;
			break;
		}
		cnt++;
	}
	closedir(d);
	if (rc) {
		for (size_t i = 0; i < cnt; i++)
			free(names[i]);
		free(names);
		return sf_fail(e, rc, "%s: out of memory", path);
	}
	if (cnt)
		qsort(names, cnt, sizeof *names, cmp_names);
	*out = names;
	*n = cnt;
	return 0;
}

int sf_format_view(const struct sf_format *f, const struct sf_open_args *a,
		   struct sf_view **out, struct sf_err *e)
{
	*out = NULL;
	struct sf_view *v = sf_view_new(f, a->path);
	if (!v)
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	/* the open's long work counts as the host's */
	v->host.progress = a->host ? a->host->progress : NULL;
	/* a link view reads nothing of the file once made: it holds no mapping */
	if (!f->link && sf_view_hold_map(v, a->map)) {
		sf_view_unref(v);
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	}
	void *state = NULL;
	int rc = f->parse(a, v, &state, e);
	v->state = state;
	v->free_state = f->free_state;
	if (rc == 0 && f->link) {
		if (sf_view_set_link(v, f->link(state)))
			rc = sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	} else if (rc == 0) {
		struct sf_node *meta = sf_view_add_meta(v, f->info_txt, f->info_json, f->verify,
							state);
		rc = meta ? f->build(v, state, meta, e)
			  : sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	}
	if (rc) {
		sf_view_unref(v);
		return rc;
	}
	*out = v;
	return 0;
}

int sf_format_open(const struct sf_format *f, const struct sf_open_args *a,
		   struct sf_view **out, struct sf_err *e)
{
	*out = NULL;
	/* what was read counts only if the file is still as mapped */
	int rc = sf_format_view(f, a, out, e);
	if (rc == 0)
		rc = sf_map_check(a->map, e);
	for (size_t i = 0; rc == 0 && i < (*out)->nmaps; i++)
		if ((*out)->maps[i] == a->map)
			(*out)->source = a->map;
	if (rc) {
		sf_view_unref(*out);
		*out = NULL;
	} else {
		sf_view_use_host(*out, a->host);
	}
	return rc;
}

bool sf_view_shed(struct sf_view *v)
{
	return v->format && v->format->shed && v->format->shed(v->state);
}

int sf_map_beside(const struct sf_open_args *a, const char *rel, struct sf_map **out,
		  struct sf_err *e)
{
	char *at = sf_path_join(a->dirrel, rel), *shown = sf_path_join(a->dirpath, rel);
	int rc = at && shown ? sf_map_beneath(a->topfd, at, shown, out, e)
			     : sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	free(at);
	free(shown);
	return rc;
}

bool sf_dir_beside(const struct sf_open_args *a, const char *rel)
{
	char *at = sf_path_join(a->dirrel, rel);
	struct stat st;
	bool yes = at && sf_lstat_beneath(a->topfd, at, &st) == 0 && S_ISDIR(st.st_mode);
	free(at);
	return yes;
}

/* The top a tool finds side files beneath, for directory `real` (a real
 * path): the highest directory above it on the same mount, as the daemon
 * finds them beneath SRC without crossing a mount point. Returns a
 * descriptor and sets *rel to real's path below it ("." for itself). */
static int mount_top(char *real, const char **rel)
{
	int fd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
	size_t len = strlen(real);
	*rel = ".";
	while (fd >= 0 && len > 1) {
		char *slash = memrchr(real, '/', len);
		size_t up = slash == real ? 1 : (size_t)(slash - real);
		char keep = real[up];
		real[up] = 0;
		int parent = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
		real[up] = keep;
		if (parent < 0 || !sf_same_mount(fd, parent)) {
			if (parent >= 0)
				close(parent);
			break;
		}
		close(fd);
		fd = parent;
		len = up;
		*rel = real + (up == 1 ? 1 : up + 1);
	}
	if (!**rel)
		*rel = ".";
	return fd;
}

int sf_open_path(const char *path, const struct sf_host *host, struct sf_view **out,
		 struct sf_err *e)
{
	char *copy = strdup(path);
	if (!copy)
		return sf_fail(e, -ENOMEM, "out of memory");
	char *slash = strrchr(copy, '/');
	const char *dirpath = ".", *name = copy;
	if (slash) {
		*slash = 0;
		dirpath = slash == copy ? "/" : copy;
		name = slash + 1;
	}
	int rc;
	char **names = NULL;
	size_t nnames = 0;
	struct sf_map *map = NULL;
	const struct sf_format *f = sf_format_for(dirpath, name);
	int dirfd = open(dirpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char *real = realpath(dirpath, NULL);
	const char *dirrel = ".";
	int topfd = real ? mount_top(real, &dirrel) : -1;
	if (!f) {
		rc = sf_fail(e, -EPROTONOSUPPORT, "%s: not a file shardfs recognises", path);
		goto out;
	}
	if (dirfd < 0 || topfd < 0 || !real) {
		rc = sf_fail(e, -errno, "%s: %s", dirpath, strerror(errno));
		goto out;
	}
	if ((rc = list_names(dirfd, &names, &nnames, e, dirpath)))
		goto out;
	if ((rc = sf_map_open(path, &map, e)))
		goto out;
	struct sf_open_args a = {
		.topfd = topfd, .dirrel = dirrel, .dirpath = dirpath,
		.name = name, .path = path, .map = map,
		.siblings = (const char *const *)names, .nsiblings = nnames, .host = host,
	};
	rc = sf_format_open(f, &a, out, e);
out:
	sf_map_unref(map);
	for (size_t i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	if (dirfd >= 0)
		close(dirfd);
	if (topfd >= 0)
		close(topfd);
	free(real);
	free(copy);
	return rc;
}
