#include "loop.h"
#include "listing.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "sf_format.h"
#include "stats.h"

int src_fd = -1;
static struct sf_cache *view_cache = &sf_nocache;

void listing_use_cache(struct sf_cache *c)
{
	view_cache = c;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->e[i].name);
		free(l->e[i].file);
		sf_view_unref(l->e[i].view);
	}
	free(l->e);
	free(l);
}

void listing_unref(struct listing *l)
{
	if (l && atomic_fetch_sub(&l->refs, 1) == 1)
		listing_free(l);
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct lentry *)a)->name, ((const struct lentry *)b)->name);
}

static const struct lentry *find(const struct listing *l, const char *name)
{
	struct lentry key = { .name = (char *)name };
	return l->n ? bsearch(&key, l->e, l->n, sizeof *l->e, cmp_entry) : NULL;
}

const struct lentry *listing_view(const struct listing *l, const char *name)
{
	const struct lentry *e = find(l, name);
	return e && e->view ? e : NULL;
}

bool same_version(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_mode == b->st_mode &&
	       a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static unsigned char dtype_of(mode_t m)
{
	return S_ISDIR(m) ? DT_DIR : S_ISREG(m) ? DT_REG : S_ISLNK(m) ? DT_LNK :
	       S_ISFIFO(m) ? DT_FIFO : S_ISSOCK(m) ? DT_SOCK : S_ISCHR(m) ? DT_CHR :
	       S_ISBLK(m) ? DT_BLK : DT_UNKNOWN;
}

char *src_join(const char *dir, const char *name)
{
	char *p = NULL;
	if (strcmp(dir, ".") == 0)
		return strdup(name);
	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* The view of the old listing that still stands for the same file: it was
 * named after the file, with its extension stripped or ".d" added. */
static struct sf_view *reuse(const struct listing *old, const char *file, const char *ext,
			     const struct stat *st)
{
	if (!old)
		return NULL;
	char *names[2] = { strndup(file, strlen(file) - strlen(ext)), NULL };
	if (asprintf(&names[1], "%s.d", file) < 0)
		names[1] = NULL;
	struct sf_view *v = NULL;
	for (int i = 0; i < 2 && !v; i++) {
		const struct lentry *e = names[i] ? find(old, names[i]) : NULL;
		if (e && e->view && strcmp(e->file, file) == 0 && same_version(&e->st, st) &&
		    !e->view->format->uses_siblings)
			v = sf_view_ref(e->view);
	}
	free(names[0]);
	free(names[1]);
	return v;
}

/* Opens one container; failures go to the error log. */
static struct sf_view *open_container(const struct sf_format *f, int dirfd, const char *rel,
				      const char *name, char **names, size_t nnames)
{
	char *path = src_join(rel, name);
	if (!path)
		return NULL;
	struct sf_err e = { { 0 } };
	struct sf_map *map = NULL;
	struct sf_view *v = NULL;
	int rc = sf_map_openat(dirfd, name, path, &map, &e);
	if (rc == 0) {
		struct sf_open_args a = {
			.dirfd = dirfd, .dirpath = rel, .name = name, .path = path, .map = map,
			.siblings = (const char *const *)names, .nsiblings = nnames,
			.top = strcmp(rel, ".") == 0,
		};
		rc = f->open(&a, &v, &e);
		sf_map_unref(map);
	}
	if (rc) {
		stat_add(&stats.containers_failed, 1);
		errlog_add(path, e.msg[0] ? e.msg : strerror(-rc));
		v = NULL;
	} else {
		stat_add(&stats.containers_opened, 1);
		v->cache = view_cache;
		listing_report_warnings(v);
	}
	free(path);
	return v;
}

void listing_report_warnings(struct sf_view *v)
{
	if (v->nreported == v->nwarnings)
		return;
	pthread_mutex_lock(&v->lock);
	for (; v->nreported < v->nwarnings; v->nreported++)
		errlog_add(v->path, v->warnings[v->nreported]);
	pthread_mutex_unlock(&v->lock);
}

static int push(struct listing *l, size_t *cap, struct lentry x)
{
	if (l->n == *cap) {
		size_t c = *cap ? *cap * 2 : 32;
		struct lentry *p = realloc(l->e, c * sizeof *p);
		if (!p)
			return -ENOMEM;
		l->e = p;
		*cap = c;
	}
	l->e[l->n++] = x;
	return 0;
}

/* The names views took so far while a listing is built, so that a clash
 * is found in constant time: a directory may hold many thousands of
 * containers. Sized for every SRC entry having a view; never grows. */
struct nameset {
	const char **slot;
	size_t cap;
};

static size_t name_slot(const struct nameset *s, const char *name)
{
	return XXH3_64bits(name, strlen(name)) & (s->cap - 1);
}

static bool nameset_has(const struct nameset *s, const char *name)
{
	for (size_t i = name_slot(s, name); s->slot[i]; i = (i + 1) & (s->cap - 1))
		if (strcmp(s->slot[i], name) == 0)
			return true;
	return false;
}

static void nameset_add(struct nameset *s, const char *name)
{
	size_t i = name_slot(s, name);
	while (s->slot[i])
		i = (i + 1) & (s->cap - 1);
	s->slot[i] = name;
}

/* Whether `name` is a SRC entry (the first nsrc entries, sorted) or a view. */
static bool taken(const struct listing *l, size_t nsrc, const struct nameset *views,
		  const char *name)
{
	struct lentry key = { .name = (char *)name };
	return (nsrc && bsearch(&key, l->e, nsrc, sizeof *l->e, cmp_entry)) ||
	       nameset_has(views, name);
}

/* Names the view of `file` (ext stripped, else "<file>.d"); NULL on a clash.
 * "." and ".." are taken in every directory ("..sidx" must not name its
 * view "."). */
static char *view_name(const struct listing *l, size_t nsrc, const struct nameset *views,
		       const char *file, const char *ext)
{
	size_t n = strlen(file) - strlen(ext);
	char *a = strndup(file, n);
	if (a && n && strcmp(a, ".") != 0 && strcmp(a, "..") != 0 && !taken(l, nsrc, views, a))
		return a;
	free(a);
	char *b = NULL;
	if (asprintf(&b, "%s.d", file) < 0)
		return NULL;
	if (!taken(l, nsrc, views, b))
		return b;
	free(b);
	return NULL;
}

/* Whether `file` in `rel` is a regular file some format claims. */
static bool container_at(const char *rel, const char *file)
{
	char *path = src_join(rel, file);
	struct stat st;
	bool yes = path && fstatat(src_fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		   S_ISREG(st.st_mode) && sf_format_for(rel, file);
	free(path);
	return yes;
}

bool listing_may_have_view(const char *rel, const char *name)
{
	const struct sf_format *f;
	for (size_t i = 0; (f = sf_format_nth(i)); i++) {
		char *file = NULL;
		if (asprintf(&file, "%s%s", name, f->ext) < 0)
			return true;
		bool yes = container_at(rel, file);
		free(file);
		if (yes)
			return true;
	}
	size_t n = strlen(name);
	if (n > 2 && strcmp(name + n - 2, ".d") == 0) {
		char *file = strndup(name, n - 2);
		bool yes = !file || container_at(rel, file);
		free(file);
		return yes;
	}
	return false;
}

static int build(int dirfd, const char *rel, const struct listing *old, struct listing *l)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	size_t cap = 0;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		struct lentry x = { .name = strdup(de->d_name) };
		if (!x.name) {
			rc = -ENOMEM;
			break;
		}
		if (fstatat(dirfd, x.name, &x.st, AT_SYMLINK_NOFOLLOW) < 0) {
			free(x.name); /* vanished while listing */
			continue;
		}
		x.type = dtype_of(x.st.st_mode);
		if ((rc = push(l, &cap, x))) {
			free(x.name);
			break;
		}
	}
	closedir(d);
	if (rc)
		return rc;
	if (l->n)
		qsort(l->e, l->n, sizeof *l->e, cmp_entry);

	size_t nsrc = l->n;
	struct nameset views = { .cap = 2 };
	while (views.cap < 2 * nsrc + 2)
		views.cap *= 2;
	views.slot = calloc(views.cap, sizeof *views.slot);
	char **names = malloc((nsrc ? nsrc : 1) * sizeof *names);
	if (!names || !views.slot) {
		free(names);
		free(views.slot);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nsrc; i++)
		names[i] = l->e[i].name;
	/* Views are placed in byte order of their files' names, so an earlier
	 * file's view wins a clash (DESIGN §3.1). */
	for (size_t i = 0; i < nsrc && rc == 0; i++) {
		const struct lentry *src = &l->e[i];
		if (!S_ISREG(src->st.st_mode))
			continue;
		const struct sf_format *f = sf_format_for(rel, src->name);
		if (!f)
			continue;
		struct sf_view *v = reuse(old, src->name, f->ext, &src->st);
		if (!v)
			v = open_container(f, dirfd, rel, src->name, names, nsrc);
		if (!v)
			continue;
		char *vname = view_name(l, nsrc, &views, src->name, f->ext);
		if (!vname) {
			char *path = src_join(rel, src->name);
			errlog_add(path ? path : src->name,
				   "no view: its name and the .d name are both taken");
			free(path);
			sf_view_unref(v);
			continue;
		}
		struct lentry x = {
			.name = vname, .view = v, .st = src->st,
			.type = v->root->kind == SF_LINK ? DT_LNK : DT_DIR,
			.file = strdup(src->name),
		};
		/* push may move l->e: src is not used after this */
		if (!x.file || (rc = push(l, &cap, x))) {
			free(x.name);
			free(x.file);
			sf_view_unref(v);
			rc = rc ? rc : -ENOMEM;
		} else {
			nameset_add(&views, x.name);
		}
	}
	free(names);
	free(views.slot);
	if (rc == 0 && l->n)
		qsort(l->e, l->n, sizeof *l->e, cmp_entry);
	return rc;
}

int listing_get(struct fnode *dir, struct listing **out)
{
	int dirfd = openat(src_fd, dir->rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	struct stat st;
	if (fstat(dirfd, &st) < 0) {
		int rc = -errno;
		close(dirfd);
		return rc;
	}
	if (pthread_mutex_trylock(&dir->map_lock)) {
		/* another thread is listing it */
		loop_hand_off();
		pthread_mutex_lock(&dir->map_lock);
	}
	struct listing *old = dir->listing;
	int rc = 0;
	/* A directory changed within a second of its listing may change again
	 * within the same timestamp tick: list it anew until it settles. */
	if (old && old->ino == st.st_ino && old->mtime.tv_sec == st.st_mtim.tv_sec &&
	    old->mtime.tv_nsec == st.st_mtim.tv_nsec && old->listed_at > st.st_mtim.tv_sec + 1) {
		*out = old;
		atomic_fetch_add(&old->refs, 1);
		goto done;
	}
	struct listing *l = calloc(1, sizeof *l);
	if (!l) {
		rc = -ENOMEM;
		goto done;
	}
	atomic_init(&l->refs, 2); /* the directory's and the caller's */
	l->mtime = st.st_mtim;
	l->listed_at = time(NULL);
	l->ino = st.st_ino;
	loop_hand_off();
	rc = build(dirfd, dir->rel, old, l);
	if (rc) {
		listing_free(l);
		goto done;
	}
	dir->listing = l;
	listing_unref(old);
	*out = l;
done:
	pthread_mutex_unlock(&dir->map_lock);
	close(dirfd);
	return rc;
}
