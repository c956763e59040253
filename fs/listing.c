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

#include "daemon.h"
#include "loop.h"
#include "sf_hash.h"
#include "sf_fault.h"
#include "sf_format.h"
#include "sf_map.h"
#include "sf_open.h"
#include "sf_report.h"
#include "src.h"
#include "stats.h"

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++) {
		/* first: the closing thread reads a linked entry's name */
		openviews_drop(l->views, &l->e[i].open);
		free(l->e[i].name);
		free(l->e[i].file);
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
	return e && e->fmt ? e : NULL;
}

const struct lentry *listing_view_now(struct daemon *dm, struct fnode *dir, const char *name,
				      struct listing **l)
{
	const struct lentry *e = listing_view(*l, name);
	struct sf_err err;
	/* a view not opened yet (only checked) has nothing to go stale */
	struct sf_view *v = e ? openviews_get(&dm->views, &e->open, false) : NULL;
	if (!v)
		return e;
	/* the container itself is checked (one fstat); a change found by
	 * reads (a fold's tar) is remembered. A check that fails without
	 * finding a change (storage failing) keeps the view: its reads fail
	 * until the source is back. */
	if (sf_view_source(v))
		sf_map_check(sf_view_source(v), &err);
	bool refused = sf_view_refused(v, &err);
	sf_view_unref(v);
	if (!refused)
		return e;
	atomic_store(&(*l)->stale, true);
	listing_unref(*l);
	*l = NULL;
	return listing_get(dm, dir, l) ? NULL : listing_view(*l, name);
}

static unsigned char dtype_of(mode_t m)
{
	return S_ISDIR(m) ? DT_DIR : S_ISREG(m) ? DT_REG : S_ISLNK(m) ? DT_LNK :
	       S_ISFIFO(m) ? DT_FIFO : S_ISSOCK(m) ? DT_SOCK : S_ISCHR(m) ? DT_CHR :
	       S_ISBLK(m) ? DT_BLK : DT_UNKNOWN;
}

/* The view entry of the old listing that still stands for the same file
 * (checked, or opened): it was named after the file, with its extension
 * stripped or ".d" added. */
static const struct lentry *reuse(const struct listing *old, const char *file,
				  const struct sf_format *f, const struct stat *st)
{
	if (!old || f->uses_siblings)
		return NULL;
	char *names[2] = { strndup(file, strlen(file) - strlen(f->ext)), NULL };
	if (asprintf(&names[1], "%s.d", file) < 0)
		names[1] = NULL;
	const struct lentry *hit = NULL;
	for (int i = 0; i < 2 && !hit; i++) {
		const struct lentry *e = names[i] ? find(old, names[i]) : NULL;
		if (e && e->fmt == f && strcmp(e->file, file) == 0 && same_version(&e->st, st))
			hit = e;
	}
	free(names[0]);
	free(names[1]);
	return hit;
}

/* The listing's cheap check of a container (docs/design.md §3.1); a
 * failure goes to the error log. */
static bool check_container(struct daemon *dm, const struct sf_format *f, int dirfd,
			    const char *rel, const char *name)
{
	char *path = sf_path_join(rel, name);
	struct sf_err e = { { 0 } };
	int rc = path ? sf_format_check(f, dirfd, name, path, &e) : -ENOMEM;
	if (rc) {
		stat_add(&dm->stats.containers_failed, 1);
		errlog_add(&dm->stats, path ? path : name, sf_err_msg(&e, rc));
	}
	free(path);
	return rc == 0;
}

/* Opens one container; failures go to the error log. One that passed the
 * cheap check (`checked`) and fails now gets a view that says why. */
static struct sf_view *open_container(struct daemon *dm, const struct sf_format *f, int dirfd,
				      const char *rel, const char *name, char **names,
				      size_t nnames, bool checked)
{
	char *path = sf_path_join(rel, name);
	if (!path)
		return NULL;
	struct sf_err e = { { 0 } };
	struct sf_map *map = NULL;
	struct sf_view *v = NULL;
	int rc = sf_map_beneath(dirfd, name, path, &map, &e);
	if (rc == 0) {
		struct sf_open_args a = {
			.topfd = dm->src_fd, .dirrel = rel, .dirpath = rel, .name = name,
			.path = path, .map = map, .siblings = (const char *const *)names, .nsiblings = nnames,
		};
		rc = sf_format_open(f, &a, &v, &e);
		sf_map_unref(map);
	}
	if (rc) {
		stat_add(&dm->stats.containers_failed, 1);
		errlog_add(&dm->stats, path, sf_err_msg(&e, rc));
		v = checked ? sf_view_failed(f, path, sf_err_msg(&e, rc)) : NULL;
		if (v)
			sf_view_set_cache(v, dm->view_cache);
	} else {
		stat_add(&dm->stats.containers_opened, 1);
		sf_view_set_cache(v, dm->view_cache);
		listing_report_warnings(dm, v);
	}
	free(path);
	return v;
}

static void log_warning(void *stats, const char *path, const char *msg)
{
	errlog_add(stats, path, msg);
}

void listing_report_warnings(struct daemon *dm, struct sf_view *v)
{
	sf_view_take_warnings(v, log_warning, &dm->stats);
}

static int push(struct listing *l, size_t *cap, struct lentry x)
{
	if (sf_grow(&l->e, cap, l->n, sizeof *l->e, 32))
		return -ENOMEM;
	l->e[l->n++] = x;
	return 0;
}

/* The names views took so far while a listing is built (sf_hash of the
 * names, not owned), so that a clash is found in constant time: a
 * directory may hold many thousands of containers. */
static uint64_t name_hash(const char *name)
{
	return XXH3_64bits(name, strlen(name));
}

static bool named(const void *key, const void *val)
{
	return strcmp(key, val) == 0;
}

/* Whether `name` is a SRC entry (the first nsrc entries, sorted) or a view. */
static bool taken(const struct listing *l, size_t nsrc, const struct sf_hash *views,
		  const char *name)
{
	struct lentry key = { .name = (char *)name };
	return (nsrc && bsearch(&key, l->e, nsrc, sizeof *l->e, cmp_entry)) ||
	       sf_hash_get(views, name_hash(name), named, name);
}

/* Names the view of `file` (ext stripped, else "<file>.d"); NULL on a clash.
 * "." and ".." are taken in every directory ("..sidx" must not name its
 * view "."). */
static char *view_name(const struct listing *l, size_t nsrc, const struct sf_hash *views,
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

/* Whether `file` in `rel` is a regular file some format claims (*fmt). */
static bool container_at(struct daemon *dm, const char *rel, const char *file,
			 const struct sf_format **fmt, struct stat *st)
{
	char *path = sf_path_join(rel, file);
	bool yes = path && sf_lstat_beneath(dm->src_fd, path, st) == 0 &&
		   S_ISREG(st->st_mode) && (*fmt = sf_format_for(rel, file));
	free(path);
	return yes;
}

/* The files of `rel` that could place a view under `name` (not a SRC
 * entry): `name` plus a format's extension, or `name` = "<file>.d".
 * Returns how many (2 meaning two or more); with exactly one, and that one
 * taking `name` as its own view name, *file, *fmt and *st describe it. A
 * view of a file ending in `.d` needs the file's own view name taken, which
 * only a full listing knows, so it counts as two. */
static int candidates(struct daemon *dm, const char *rel, const char *name, char **file,
		      const struct sf_format **fmt, struct stat *st)
{
	int found = 0;
	const struct sf_format *f;
	*file = NULL;
	for (size_t i = 0; found < 2 && (f = sf_format_nth(i)); i++) {
		char *c = NULL;
		const struct sf_format *g = NULL;
		struct stat cst;
		if (asprintf(&c, "%s%s", name, f->ext) < 0) {
			found = 2;
			break;
		}
		if (container_at(dm, rel, c, &g, &cst) && g == f && found++ == 0) {
			*file = c;
			*fmt = g;
			*st = cst;
			continue;
		}
		if (g && g != f)
			found = 2; /* claimed under another extension: the listing decides */
		free(c);
	}
	size_t n = strlen(name);
	struct stat dst;
	const struct sf_format *g = NULL;
	char *c = n > 2 && strcmp(name + n - 2, ".d") == 0 ? strndup(name, n - 2) : NULL;
	if (c && container_at(dm, rel, c, &g, &dst))
		found = 2;
	free(c);
	if (found != 1) {
		free(*file);
		*file = NULL;
	}
	return found;
}

/* Makes the views the entries of `l` hold closable, once the entries no
 * longer move; `dir` is the directory's inode. */
static void hold_views(struct listing *l, uint64_t dir)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->e[i].open)
			openviews_link(l->views, &l->e[i].open, dir, l->e[i].name);
}

static int build(struct daemon *dm, int dirfd, const char *rel, uint64_t dir,
		 const struct listing *old, struct listing *l)
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
	struct sf_hash views = { 0 };
	char **names = malloc((nsrc ? nsrc : 1) * sizeof *names);
	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < nsrc; i++)
		names[i] = l->e[i].name;
	/* Views are placed in byte order of their files' names, so an earlier
	 * file's view wins a clash (docs/design.md §3.1). */
	for (size_t i = 0; i < nsrc && rc == 0; i++) {
		const struct lentry *src = &l->e[i];
		if (!S_ISREG(src->st.st_mode))
			continue;
		const struct sf_format *f = sf_format_for(rel, src->name);
		if (!f)
			continue;
		/* a container is checked now and opened when its view is entered
		 * (listing_open); a format without a check is opened now */
		const struct lentry *was = reuse(old, src->name, f, &src->st);
		struct sf_view *v = NULL;
		if (was) {
			v = openviews_get(&dm->views, &was->open, false);
		} else if (f->check) {
			if (!check_container(dm, f, dirfd, rel, src->name))
				continue;
		} else if (!(v = open_container(dm, f, dirfd, rel, src->name, names, nsrc,
						false))) {
			continue;
		}
		char *vname = view_name(l, nsrc, &views, src->name, f->ext);
		if (!vname) {
			char *path = sf_path_join(rel, src->name);
			errlog_add(&dm->stats, path ? path : src->name,
				   "no view: its name and the .d name are both taken");
			free(path);
			sf_view_unref(v);
			continue;
		}
		struct lentry x = {
			.name = vname, .fmt = f, .st = src->st,
			.type = v && sf_node_kind(sf_view_root(v)) == SF_LINK ? DT_LNK : DT_DIR,
			.file = strdup(src->name),
		};
		/* out of memory for the holder: the view is opened again
		 * when entered */
		x.open = v ? openviews_new(v) : NULL;
		/* push may move l->e: src is not used after this */
		if (!x.file || (rc = push(l, &cap, x))) {
			free(x.name);
			free(x.file);
			openviews_drop(l->views, &x.open);
			rc = rc ? rc : -ENOMEM;
		} else {
			rc = sf_hash_put(&views, name_hash(x.name), x.name);
		}
	}
	free(names);
	sf_hash_free(&views);
	if (rc == 0 && l->n)
		qsort(l->e, l->n, sizeof *l->e, cmp_entry);
	hold_views(l, dir);
	return rc;
}

/* Opens SRC directory `dir` and takes its listing lock (another thread may
 * be listing it: the request loop is handed on meanwhile). */
static int lock_dir(struct daemon *dm, struct fnode *dir, int *dirfd, struct stat *st)
{
	struct sf_err e = { { 0 } };
	*dirfd = sf_open_beneath(dm->src_fd, dir->rel, SF_WANT_DIR, dir->rel, &e);
	if (*dirfd == -ELOOP || *dirfd == -EXDEV)
		/* swapped for a symlink since looked up */
		errlog_add(&dm->stats, dir->rel, e.msg);
	if (*dirfd < 0)
		return *dirfd;
	if (fstat(*dirfd, st) < 0) {
		int rc = -errno;
		close(*dirfd);
		return rc;
	}
	if (pthread_mutex_trylock(&dir->map_lock)) {
		loop_hand_off();
		pthread_mutex_lock(&dir->map_lock);
	}
	return 0;
}

static void unlock_dir(struct fnode *dir, int dirfd)
{
	pthread_mutex_unlock(&dir->map_lock);
	close(dirfd);
}

/* Whether `l` is the whole current listing of a directory now `st`. A
 * directory changed within a second of its listing may change again within
 * the same timestamp tick: it is listed anew until it settles. */
static bool fresh(const struct listing *l, const struct stat *st)
{
	return l && !l->partial && !atomic_load(&l->stale) && l->ino == st->st_ino &&
	       l->mtime.tv_sec == st->st_mtim.tv_sec && l->mtime.tv_nsec == st->st_mtim.tv_nsec &&
	       l->listed_at > st->st_mtim.tv_sec + 1;
}

static struct listing *ref(struct listing *l)
{
	atomic_fetch_add(&l->refs, 1);
	return l;
}

/* The whole listing (lock held), reusing the views of the last one. */
static int relist(struct daemon *dm, struct fnode *dir, int dirfd, const struct stat *st,
		  struct listing **out)
{
	struct listing *old = dir->listing;
	if (fresh(old, st)) {
		*out = ref(old);
		return 0;
	}
	struct listing *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	atomic_init(&l->refs, 2); /* the directory's and the caller's */
	l->views = &dm->views;
	l->mtime = st->st_mtim;
	l->listed_at = time(NULL);
	l->ino = st->st_ino;
	loop_hand_off();
	int rc = build(dm, dirfd, dir->rel, fnode_ino(dir), old, l);
	if (rc) {
		listing_free(l);
		return rc;
	}
	dir->listing = l;
	listing_unref(old);
	*out = l;
	return 0;
}

int listing_get(struct daemon *dm, struct fnode *dir, struct listing **out)
{
	int dirfd;
	struct stat st;
	int rc = lock_dir(dm, dir, &dirfd, &st);
	if (rc)
		return rc;
	rc = relist(dm, dir, dirfd, &st, out);
	unlock_dir(dir, dirfd);
	return rc;
}

/* Views placed one lookup at a time before the whole directory is listed. */
#define PARTIAL_MAX 64

/* A copy of partial listing `old` (may be NULL) with `x` in place of any
 * entry of its name. */
static struct listing *partial_with(struct daemon *dm, const struct listing *old,
				    struct lentry x, uint64_t dir)
{
	struct listing *l = calloc(1, sizeof *l);
	size_t n = old ? old->n : 0;
	if (!l || !(l->e = calloc(n + 1, sizeof *l->e))) {
		free(l);
		return NULL;
	}
	atomic_init(&l->refs, 2);
	l->views = &dm->views;
	l->partial = true;
	for (size_t i = 0; i < n; i++) {
		const struct lentry *e = &old->e[i];
		if (strcmp(e->name, x.name) == 0)
			continue;
		struct lentry c = *e;
		c.name = strdup(e->name);
		c.file = strdup(e->file);
		struct sf_view *v = openviews_get(&dm->views, &e->open, false);
		c.open = v ? openviews_new(v) : NULL;
		l->e[l->n++] = c;
		if (!c.name || !c.file) {
			listing_free(l);
			return NULL;
		}
	}
	l->e[l->n++] = x;
	qsort(l->e, l->n, sizeof *l->e, cmp_entry);
	hold_views(l, dir);
	return l;
}

int listing_for_name(struct daemon *dm, struct fnode *dir, const char *name,
		     struct listing **out)
{
	*out = NULL;
	char *file;
	const struct sf_format *f = NULL;
	struct stat fst;
	int k = candidates(dm, dir->rel, name, &file, &f, &fst);
	if (k == 0)
		return 0;
	int dirfd;
	struct stat st;
	int rc = lock_dir(dm, dir, &dirfd, &st);
	if (rc) {
		free(file);
		return rc;
	}
	struct listing *old = dir->listing;
	/* the whole listing when it is at hand, is needed (several files could
	 * take the name, or the format reads its siblings), was made before
	 * (its views are to be reused, not opened again beside it), or when
	 * many views were placed one by one (each copies the partial listing) */
	if (k > 1 || f->uses_siblings || fresh(old, &st) ||
	    (old && (!old->partial || old->n >= PARTIAL_MAX))) {
		rc = relist(dm, dir, dirfd, &st, out);
		goto done;
	}
	const struct lentry *e = old ? find(old, name) : NULL;
	if (e && e->fmt && strcmp(e->file, file) == 0 && same_version(&e->st, &fst)) {
		*out = ref(old);
		goto done;
	}
	/* one file alone could take the name: no earlier view can have it */
	if (f->check && !check_container(dm, f, dirfd, dir->rel, file))
		goto done;
	struct sf_view *v = open_container(dm, f, dirfd, dir->rel, file, NULL, 0,
					   f->check != NULL);
	if (!v)
		goto done;
	struct lentry x = {
		.name = strdup(name), .fmt = f, .st = fst, .file = file,
		.type = sf_node_kind(sf_view_root(v)) == SF_LINK ? DT_LNK : DT_DIR,
	};
	x.open = openviews_new(v);
	struct listing *l = x.name && x.open ? partial_with(dm, old, x, fnode_ino(dir)) : NULL;
	if (!l) {
		free(x.name);
		openviews_drop(&dm->views, &x.open);
		rc = -ENOMEM;
		goto done;
	}
	file = NULL; /* the listing has it */
	dir->listing = l;
	listing_unref(old);
	*out = l;
done:
	unlock_dir(dir, dirfd);
	free(file);
	return rc;
}

struct sf_view *listing_opened(struct daemon *dm, const struct lentry *e)
{
	return openviews_get(&dm->views, &e->open, true);
}

struct sf_view *listing_open(struct daemon *dm, struct fnode *dir, const struct listing *l,
			     const struct lentry *e)
{
	struct sf_view *v = listing_opened(dm, e);
	if (v)
		return v;
	int dirfd;
	struct stat st;
	if (lock_dir(dm, dir, &dirfd, &st))
		return NULL;
	/* opened by another thread meanwhile? */
	if (!(v = listing_opened(dm, e))) {
		/* the SRC entries of the listing, sorted: the siblings of a
		 * format that reads them */
		bool sib = e->fmt->uses_siblings;
		char **names = malloc((sib && l->n ? l->n : 1) * sizeof *names);
		size_t n = 0;
		for (size_t i = 0; sib && names && i < l->n; i++)
			if (!l->e[i].fmt)
				names[n++] = l->e[i].name;
		loop_hand_off(); /* an open may wait for the disk */
		if (names)
			v = open_container(dm, e->fmt, dirfd, dir->rel, e->file, names, n, true);
		free(names);
		if (v)
			v = openviews_put(&dm->views, (struct vopen **)&e->open, v, fnode_ino(dir),
					  e->name);
	}
	unlock_dir(dir, dirfd);
	return v;
}
