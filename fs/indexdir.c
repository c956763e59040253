#include "indexdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "sf_open.h"

static int cmp_index(const void *a, const void *b)
{
	return strcmp(((const struct dir_index *)a)->name, ((const struct dir_index *)b)->name);
}

int indexdir_open(struct daemon *dm, const char *rel)
{
	struct sf_err e = { { 0 } };
	return sf_open_beneath(dm->index_fd, rel, SF_WANT_DIR, rel, &e);
}

int indexdir_keep(struct daemon *dm, const char *rel)
{
	int fd = fcntl(dm->index_fd, F_DUPFD_CLOEXEC, 0);
	char *path = strdup(rel), *save = NULL;
	if (fd < 0 || !path) {
		if (fd >= 0)
			close(fd);
		free(path);
		return -ENOMEM;
	}
	for (char *c = strtok_r(path, "/", &save); c && fd >= 0; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		int next = -EINVAL;
		if (strcmp(c, "..") && (mkdirat(fd, c, 0755) == 0 || errno == EEXIST))
			next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && next != -EINVAL)
			next = -errno;
		close(fd);
		fd = next;
	}
	free(path);
	return fd;
}

int indexdir_lstat(struct daemon *dm, const char *rel, const char *name, struct stat *st)
{
	char *path = sf_path_join(rel, name);
	int rc = path ? sf_lstat_beneath(dm->index_fd, path, st) : -ENOMEM;
	free(path);
	return rc;
}

bool indexdir_has_view(struct daemon *dm, const char *rel, const char *name)
{
	char *file = NULL;
	struct stat st;
	bool yes = asprintf(&file, "%s.taridx", name) >= 0 &&
		   indexdir_lstat(dm, rel, file, &st) == 0 && S_ISREG(st.st_mode);
	free(file);
	return yes;
}

void indexdir_free(struct dir_indexes *di)
{
	for (size_t i = 0; i < di->n; i++)
		free(di->ix[i].name);
	free(di->ix);
	free(di->cover);
	*di = (struct dir_indexes){ 0 };
}

static bool is_index(const char *name)
{
	size_t n = strlen(name);
	return n > 7 && strcmp(name + n - 7, ".taridx") == 0;
}

int indexdir_find(struct daemon *dm, const char *rel, struct dir_indexes *di)
{
	*di = (struct dir_indexes){ 0 };
	int fd = indexdir_open(dm, rel);
	if (fd < 0)
		return fd == -ENOMEM ? fd : 0; /* no such directory: no indexes */
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	size_t cap = 0;
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		struct stat st;
		if (!is_index(de->d_name) || sf_lstat_beneath(dirfd(d), de->d_name, &st) || !S_ISREG(st.st_mode))
			continue;
		if (di->n == cap) {
			cap = cap ? 2 * cap : 8;
			struct dir_index *more = realloc(di->ix, cap * sizeof *more);
			if (!more) {
				rc = -ENOMEM;
				break;
			}
			di->ix = more;
		}
		if (!(di->ix[di->n].name = strdup(de->d_name)))
			rc = -ENOMEM;
		else
			di->ix[di->n++].st = st;
	}
	closedir(d);
	if (rc)
		indexdir_free(di);
	else if (di->n)
		qsort(di->ix, di->n, sizeof *di->ix, cmp_index);
	return rc;
}

const char *const *indexdir_cover(struct dir_indexes *di, char *const *src, size_t n,
				  size_t *total)
{
	if (!di->cover) {
		if (!(di->cover = malloc((n + di->n + 1) * sizeof *di->cover)))
			return NULL;
		size_t i = 0, j = 0, k = 0;
		while (i < n || j < di->n)
			di->cover[k++] = j == di->n || (i < n && strcmp(src[i], di->ix[j].name) <= 0) ?
					 src[i++] : di->ix[j++].name;
		di->ncover = k;
	}
	*total = di->ncover;
	return di->cover;
}
