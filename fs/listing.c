#include "listing.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "access.h"
#include "daemon.h"
#include "transport.h"
#include "sf_big.h"
#include "sf_hash.h"
#include "sf_mapcheck.h"
#include "sf_format.h"
#include "sf_map.h"
#include "sf_open.h"
#include "sf_report.h"
#include "srcnode.h"
#include "stats.h"

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++) {
		/* first: the closing thread reads a linked entry's name */
		openviews_drop(l->views, &l->e[i].open);
		if (l->partial) {
			free(l->e[i].name);
			free(l->e[i].file);
			free(l->e[i].st);
		}
	}
	sf_strs_free(&l->names);
	sf_big_free(l->stats);
	indexdir_free(&l->index_dir);
	sf_big_free(l->e);
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

static bool in_order(const struct lentry *e, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (strcmp(e[i - 1].name, e[i].name) >= 0)
			return false;
	return true;
}

/* An entry of `l`, which may be written only where a listing's entries
 * change while it is shared: its view (openviews) and its opening turn. */
static struct lentry *find(const struct listing *l, const char *name)
{
	struct lentry key = { .name = (char *)name };
	struct lentry *e = NULL;
	if (l->nsrc)
		e = bsearch(&key, l->e, l->nsrc, sizeof *l->e, cmp_entry);
	if (!e && l->n > l->nsrc)
		e = bsearch(&key, l->e + l->nsrc, l->n - l->nsrc, sizeof *l->e, cmp_entry);
	return e;
}

struct lentry *listing_view(const struct listing *l, const char *name)
{
	struct lentry *e = find(l, name);
	return e && e->fmt ? e : NULL;
}

bool listing_container_now(struct daemon *dm, const struct fnode *dir, const struct lentry *e)
{
	char *path = sf_path_join(src_of(dir)->rel, e->file);
	struct stat st;
	bool same = path && (e->in_index_dir ? indexdir_lstat(dm, src_of(dir)->rel, e->file, &st) :
			     sf_lstat_beneath(dm->src_fd, path, &st)) == 0 && same_version(e->st, &st);
	free(path);
	return same;
}

struct lentry *listing_view_now(struct daemon *dm, struct fnode *dir, const char *name,
				struct listing **l)
{
	struct lentry *e = listing_view(*l, name);
	struct sf_err err;
	if (!e)
		return NULL;
	/* the container's version: a chown, chgrp or chmod changes neither
	 * its directory nor its mtime, and its view shows its owner, group
	 * and mode */
	bool changed = !listing_container_now(dm, dir, e);
	/* a view not opened yet (only checked) has nothing else to go stale */
	struct sf_view *v = changed ? NULL : openviews_get(&dm->views, &e->open, false);
	if (v) {
		/* the container itself is checked (one fstat); a change found
		 * by reads (a fold's tar) is remembered. A check that fails
		 * without finding a change (storage failing) keeps the view:
		 * its reads fail until the source is back. */
		if (sf_view_source(v))
			sf_map_check(sf_view_source(v), &err);
		changed = sf_view_failed_by_change(v, &err);
		/* a file it reads besides its container (a fold's shard, a
		 * manifest) given another owner, group or mode: its mode is
		 * narrowed anew by a new view, opened when entered next */
		bool narrowed = !changed && !access_unchanged(v);
		sf_view_unref(v);
		if (narrowed)
			openviews_drop(&dm->views, &e->open);
	}
	if (!changed)
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
 * stripped or ".d" added. The file is looked at only when the old listing
 * has such an entry. */
static const struct lentry *reuse(const struct listing *old, int dirfd, const char *file,
				  const struct sf_format *f)
{
	if (!old || f->uses_siblings)
		return NULL;
	char *names[2] = { strndup(file, strlen(file) - strlen(f->ext)), NULL };
	if (asprintf(&names[1], "%s.d", file) < 0)
		names[1] = NULL;
	const struct lentry *hit = NULL;
	struct stat st;
	bool looked = false;
	for (int i = 0; i < 2 && !hit; i++) {
		const struct lentry *e = names[i] ? find(old, names[i]) : NULL;
		if (!e || e->fmt != f || strcmp(e->file, file) != 0)
			continue;
		if (!looked && sf_lstat_beneath(dirfd, file, &st) < 0)
			break;
		looked = true;
		if (same_version(e->st, &st))
			hit = e;
	}
	free(names[0]);
	free(names[1]);
	return hit;
}

/* A container that failed its check, for the error log. */
static void check_failed(void *arg, const char *path, const char *msg)
{
	struct daemon *dm = arg;
	stat_add(&dm->stats.containers_failed, 1);
	errlog_add(&dm->stats, path, msg);
}

/* The listing's cheap check of one container (docs/design.md §3.1); *st
 * is the file's. 0 or the check's negative errno. */
static int check_container(struct daemon *dm, const struct sf_format *f, int dirfd,
			   const char *name, const char *rel, struct stat *st)
{
	struct sf_check c = { .f = f, .name = name, .st = st };
	sf_format_check_many(dirfd, rel, &c, 1, check_failed, dm);
	if (openviews_short(c.rc) && openviews_reclaim(&dm->views))
		sf_format_check_many(dirfd, rel, &c, 1, check_failed, dm);
	return c.rc;
}

/* Whether container `name` of dirfd, which failed its check or open with
 * `rc`, still gets a view (*st set to its stat): when some user may not
 * read it, whether a view shows beside it must not tell that user whether
 * its bytes pass the format's check (docs/security.md). Its view then
 * holds only .shardfs/, saying why, for those who may read it. Not for a
 * file gone, or not a regular file any more. */
static bool shown_anyway(int dirfd, const char *name, int rc, struct stat *st)
{
	struct stat now;
	if (rc == 0 || sf_lstat_beneath(dirfd, name, &now) || !S_ISREG(now.st_mode) ||
	    (now.st_mode & 0444) == 0444)
		return false;
	*st = now;
	return true;
}

/* Maps container `name` (of dirfd, or `in_index_dir`: in --index-dir) and opens
 * its view into *v. */
static int open_view(struct daemon *dm, const struct sf_format *f, int dirfd, const char *rel,
		     const char *name, const char *path, char **names, size_t nnames,
		     bool in_index_dir, struct sf_view **v, struct sf_err *e)
{
	struct sf_map *map = NULL;
	int fd = in_index_dir ? indexdir_open(dm, rel) : dirfd;
	int rc = fd < 0 ? sf_fail(e, fd, "%s: its directory in --index-dir cannot be opened", path) :
		 sf_map_beneath(fd, name, path, &map, e);
	if (in_index_dir && fd >= 0)
		close(fd);
	if (rc == 0) {
		/* a format that keeps what it derives keeps it in --index-dir */
		int keep = !in_index_dir && f->keeps && dm->index_fd >= 0 ? indexdir_keep(dm, rel) : -1;
		struct sf_open_args a = {
			.topfd = dm->src_fd, .dirrel = rel, .dirpath = rel, .name = name,
			.path = path, .map = map, .siblings = (const char *const *)names, .nsiblings = nnames,
			.other_dir = in_index_dir, .has_keepdir = keep >= 0, .keepdir = keep,
			.keeptop = dm->index_fd,
			.host = &dm->host,
		};
		rc = sf_format_open(f, &a, v, e);
		sf_map_unref(map);
		if (keep >= 0)
			close(keep);
	}
	return rc;
}

/* Opens one container; failures go to the error log. One that passed the
 * cheap check (`checked`) and fails now gets a view that says why; one
 * short of descriptors or memory gets none, and sets *retry (if given). */
static struct sf_view *open_container(struct daemon *dm, const struct sf_format *f, int dirfd,
				      const char *rel, const char *name, char **names,
				      size_t nnames, bool checked, bool in_index_dir, atomic_bool *retry)
{
	char *path = sf_path_join(rel, name);
	if (!path)
		return NULL;
	struct sf_err e = { { 0 } };
	struct sf_view *v = NULL;
	int rc = open_view(dm, f, dirfd, rel, name, path, names, nnames, in_index_dir, &v, &e);
	/* once more after the views nobody uses are closed */
	if (openviews_short(rc) && openviews_reclaim(&dm->views))
		rc = open_view(dm, f, dirfd, rel, name, path, names, nnames, in_index_dir, &v, &e);
	struct stat st;
	if (openviews_short(rc)) {
		/* not the file's fault: no failed view is kept, the next entry
		 * (or listing: *retry) tries again */
		errlog_add(&dm->stats, path, sf_err_msg(&e, rc));
		if (retry)
			atomic_store(retry, true);
		v = NULL;
	} else if (rc) {
		stat_add(&dm->stats.containers_failed, 1);
		errlog_add(&dm->stats, path, sf_err_msg(&e, rc));
		v = checked || shown_anyway(dirfd, name, rc, &st) ?
		    sf_view_failed(f, path, sf_err_msg(&e, rc), &dm->host) : NULL;
	} else {
		stat_add(&dm->stats.containers_opened, 1);
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
	if (sf_big_grow(&l->e, cap, l->n, sizeof *l->e, 32))
		return -ENOMEM;
	l->e[l->n++] = x;
	return 0;
}

/* The names taken while a listing is built, its SRC entries' and its
 * views' so far, as indexes into l->e: a directory may hold many thousands
 * of containers, and a clash is found in constant time. */
static uint64_t name_hash(const char *name)
{
	return XXH3_64bits(name, strlen(name));
}

static uint64_t entry_hash(const void *l, uint32_t id)
{
	return name_hash(((const struct listing *)l)->e[id].name);
}

struct name_key {
	const struct listing *l;
	const char *name;
};

static bool names_entry(const void *key, uint32_t id)
{
	const struct name_key *k = key;
	return strcmp(k->name, k->l->e[id].name) == 0;
}

static bool taken(struct sf_ids *names, const struct listing *l, const char *name)
{
	struct name_key k = { l, name };
	return sf_ids_find(names, name_hash(name), names_entry, &k) != NULL;
}

/* Names the view of `file` (ext stripped, else "<file>.d"), in l->names;
 * NULL on a clash (*clash) or when out of memory. "." and ".." are taken in
 * every directory ("..sidx" must not name its view "."). */
static char *view_name(struct sf_ids *names, struct listing *l, const char *file,
		       const char *ext, bool *clash)
{
	char name[NAME_MAX + 3]; /* file is an entry's name: NAME_MAX at most */
	size_t n = strlen(file) - strlen(ext);
	*clash = false;
	memcpy(name, file, n);
	name[n] = 0;
	if (n && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && !taken(names, l, name))
		return sf_strs_add(&l->names, name, n);
	n = (size_t)snprintf(name, sizeof name, "%s.d", file);
	if (taken(names, l, name)) {
		*clash = true;
		return NULL;
	}
	return sf_strs_add(&l->names, name, n);
}

/* The format that claims SRC file `name` of `rel`, if any. A file kept
 * for its holders shows through as the plain file it is: a view would keep
 * it open. */
static const struct sf_format *claim(const char *rel, const char *name)
{
	if (kept_for_holders(name))
		return NULL;
	return sf_format_for(rel, name);
}

/* Whether `file` in `rel` is a regular file some format claims (*fmt). */
static bool container_at(struct daemon *dm, const char *rel, const char *file,
			 const struct sf_format **fmt, struct stat *st)
{
	char *path = sf_path_join(rel, file);
	bool yes = path && sf_lstat_beneath(dm->src_fd, path, st) == 0 &&
		   S_ISREG(st->st_mode) && (*fmt = claim(rel, file));
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

/* The SRC entries of directory dirfd, sorted. An entry's type and inode
 * (for readdir) come from the directory itself where the filesystem gives
 * them: a container is looked at when it is checked. */
static int list_src(int dirfd, struct listing *l, size_t *cap)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		struct lentry x = { .type = de->d_type, .ino = de->d_ino };
		struct stat st;
		if (de->d_type == DT_UNKNOWN) {
			/* beneath: a mount point is not crossed, and not listed */
			if (sf_lstat_beneath(dirfd, de->d_name, &st) < 0)
				continue; /* vanished while listing */
			x.type = dtype_of(st.st_mode);
			x.ino = st.st_ino;
		}
		if (!(x.name = sf_strs_add(&l->names, de->d_name, strlen(de->d_name)))) {
			rc = -ENOMEM;
			break;
		}
		if ((rc = push(l, cap, x)))
			break;
	}
	closedir(d);
	if (rc == 0 && l->n)
		qsort(l->e, l->n, sizeof *l->e, cmp_entry);
	return rc;
}

static char **siblings(const struct listing *l, char ***names);

/* A SRC file some format claims, on its way to a view. */
struct claim {
	const struct sf_format *f;  /* NULL once it is known to get none */
	const struct lentry *was;   /* the old listing's view, still standing */
	struct stat *st;            /* the container's, in l->stats */
};

/* Finds the containers among the SRC entries of `l` and looks at them:
 * those the old listing has a view for are taken as they were, the rest
 * are checked, all together (sf_format_check_many). Returns how many
 * containers there are, or -ENOMEM. */
static ssize_t claim_containers(struct daemon *dm, int dirfd, const char *rel,
				const struct listing *old, struct listing *l, struct claim *cl,
				char ***names)
{
	/* which entries are containers: a directory of a million plain files
	 * touches no claim, and stats and checks are made for containers only */
	size_t k = 0, n = 0;
	for (size_t i = 0; i < l->nsrc; i++) {
		const struct lentry *src = &l->e[i];
		if (src->type != DT_REG || !(cl[i].f = claim(rel, src->name)))
			continue;
		if (cl[i].f->covered) {
			/* the names of SRC and of its indexes in --index-dir */
			size_t nc = l->nsrc;
			const char *const *cover = !siblings(l, names) ? NULL :
						   l->index_dir.n ? indexdir_cover(&l->index_dir, *names, l->nsrc, &nc) :
						   (const char *const *)*names;
			if (!cover)
				return -ENOMEM;
			/* another container shows it (a fold, its shard) */
			if (cl[i].f->covered(src->name, cover, nc))
				cl[i].f = NULL;
		}
		k += cl[i].f != NULL;
	}
	struct sf_check *checks = sf_big_alloc(k, sizeof *checks);
	l->stats = sf_big_alloc(k, sizeof *l->stats);
	if (!checks || !l->stats) {
		sf_big_free(checks);
		return -ENOMEM;
	}
	for (size_t i = 0, j = 0; j < k; i++) {
		struct claim *c = &cl[i];
		const char *name = l->e[i].name;
		if (!c->f)
			continue;
		c->st = &l->stats[j++];
		if ((c->was = reuse(old, dirfd, name, c->f)))
			*c->st = *c->was->st;
		else if (c->f->check)
			checks[n++] = (struct sf_check){ .f = c->f, .name = name, .st = c->st };
		else if (sf_lstat_beneath(dirfd, name, c->st) < 0)
			c->f = NULL; /* vanished (a format without a check opens when placed) */
	}
	sf_format_check_many(dirfd, rel, checks, n, check_failed, dm);
	/* the checks are in the order of the claims; one that failed for
	 * lack of descriptors or memory is checked again at the next listing */
	for (size_t i = 0, j = 0; j < n; i++) {
		int rc = cl[i].st == checks[j].st ? checks[j++].rc : 0;
		if (openviews_short(rc))
			atomic_store(&l->stale, true);
		if (rc && (openviews_short(rc) || !shown_anyway(dirfd, l->e[i].name, rc, cl[i].st)))
			cl[i].f = NULL;
	}
	sf_big_free(checks);
	return (ssize_t)k;
}

/* The SRC entries' names, sorted: what a format that reads its siblings
 * gets when it is opened as it is listed (NULL when out of memory). */
static char **siblings(const struct listing *l, char ***names)
{
	if (!*names && (*names = malloc((l->nsrc ? l->nsrc : 1) * sizeof **names)))
		for (size_t i = 0; i < l->nsrc; i++)
			(*names)[i] = l->e[i].name;
	return *names;
}

/* Room for the entries of a large directory of `size` bytes (its
 * st_size), SRC entries and views: a directory entry takes at least 12
 * bytes on ext4, a little more for most names. Growing the array instead
 * touches fresh memory at each doubling, and a page first touched costs
 * microseconds on a VM, while room of a mapping of its own that is never
 * used costs nothing (sf_big.h). A small directory, or another filesystem's
 * size, only starts the array: it grows as needed. */
static size_t room_for(off_t size)
{
	size_t n = size > 0 ? (size_t)size / 16 * 2 : 0;
	n = n > ((size_t)1 << 22) ? (size_t)1 << 22 : n;
	return n * sizeof(struct lentry) < SF_BIG_MIN ? 32 : n;
}

/* The views of the folds whose indexes lie in --index-dir (after SRC's
 * own: a SRC entry's name or view takes a name first, and an index beside
 * its tars is read instead of one in --index-dir), each checked as a listing checks
 * a container. */
static int place_from_index_dir(struct daemon *dm, const char *rel, struct listing *l, size_t *cap,
		       struct sf_ids *taken_names)
{
	int fd = l->index_dir.n ? indexdir_open(dm, rel) : -1;
	int rc = 0;
	for (size_t i = 0; fd >= 0 && rc == 0 && i < l->index_dir.n; i++) {
		struct dir_index *ix = &l->index_dir.ix[i];
		const struct sf_format *f = claim(rel, ix->name);
		bool clash;
		char *vname;
		if (!f || taken(taken_names, l, ix->name))
			continue;
		char *path = sf_path_join(rel, ix->name);
		struct sf_err e = { { 0 } };
		int crc = path ? sf_format_check(f, fd, ix->name, path, &ix->st, &e) : -ENOMEM;
		if (crc && path)
			check_failed(dm, path, sf_err_msg(&e, crc));
		else if (!crc && !(vname = view_name(taken_names, l, ix->name, f->ext, &clash)))
			errlog_add(&dm->stats, path, clash ? "no view: its name and the .d name are both taken"
							   : "no view: out of memory");
		else if (!crc) {
			struct lentry x = { .name = vname, .fmt = f, .st = &ix->st, .file = ix->name,
					    .type = DT_DIR, .in_index_dir = true };
			if (!(rc = push(l, cap, x)))
				rc = sf_ids_put(taken_names, name_hash(x.name), (uint32_t)(l->n - 1));
		}
		free(path);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

static int build(struct daemon *dm, int dirfd, const char *rel, uint64_t dir, off_t size,
		 const struct listing *old, struct listing *l)
{
	size_t cap = 0;
	int rc = sf_big_grow(&l->e, &cap, room_for(size), sizeof *l->e, 32);
	if (rc == 0)
		rc = list_src(dirfd, l, &cap);
	if (rc)
		return rc;
	size_t nsrc = l->nsrc = l->n;
	if (dm->index_fd >= 0 && (rc = indexdir_find(dm, rel, &l->index_dir)))
		return rc;
	struct sf_ids taken_names = { .hash_of = entry_hash, .ctx = l };
	struct claim *cl = sf_big_alloc(nsrc, sizeof *cl);
	char **names = NULL;
	ssize_t k = cl ? claim_containers(dm, dirfd, rel, old, l, cl, &names) : -ENOMEM;
	/* the names taken: every SRC entry's, and room for a view a container */
	size_t views = k < 0 ? 0 : (size_t)k + l->index_dir.n;
	if (k < 0 || (views > 0 && sf_ids_reset(&taken_names, nsrc + views)))
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && views > 0 && i < nsrc; i++)
		rc = sf_ids_put(&taken_names, name_hash(l->e[i].name), (uint32_t)i);
	/* Views are placed in byte order of their files' names, so an earlier
	 * file's view wins a clash (docs/design.md §3.1). A view names its file
	 * by the SRC entry's name, and its container's stat is in l->stats. */
	for (size_t i = 0; i < nsrc && rc == 0; i++) {
		char *file = l->e[i].name;
		const struct sf_format *f = cl[i].f;
		if (!f)
			continue;
		/* a container is checked now and opened when its view is entered
		 * (listing_open); a format without a check is opened now */
		struct sf_view *v = NULL;
		if (cl[i].was)
			v = openviews_get(&dm->views, &cl[i].was->open, false);
		else if (!f->check &&
			 (!siblings(l, &names) ||
			  !(v = open_container(dm, f, dirfd, rel, file, names, nsrc, false, false,
						 &l->stale))))
			continue;
		bool clash;
		char *vname = view_name(&taken_names, l, file, f->ext, &clash);
		if (!vname) {
			char *path = sf_path_join(rel, file);
			errlog_add(&dm->stats, path ? path : file,
				   clash ? "no view: its name and the .d name are both taken"
					 : "no view: out of memory");
			free(path);
			sf_view_unref(v);
			continue;
		}
		struct lentry x = {
			.name = vname, .fmt = f, .st = cl[i].st, .file = file,
			.type = v && sf_node_kind(sf_view_root(v)) == SF_LINK ? DT_LNK : DT_DIR,
		};
		/* out of memory for the holder: the view is opened again
		 * when entered */
		x.open = v ? openviews_new(v) : NULL;
		if ((rc = push(l, &cap, x))) {
			openviews_drop(l->views, &x.open);
		} else {
			rc = sf_ids_put(&taken_names, name_hash(x.name), (uint32_t)(l->n - 1));
		}
	}
	if (rc == 0)
		rc = place_from_index_dir(dm, rel, l, &cap, &taken_names);
	free(names);
	sf_big_free(cl);
	sf_ids_free(&taken_names);
	/* the views follow the SRC entries, sorted on their own: named after their
	 * files, they mostly come in order already */
	if (rc == 0 && !in_order(l->e + nsrc, l->n - nsrc))
		qsort(l->e + nsrc, l->n - nsrc, sizeof *l->e, cmp_entry);
	hold_views(l, dir);
	return rc;
}

/* Opens SRC directory `dir` (no lock: it may wait on the source). */
static int open_dir(struct daemon *dm, struct fnode *dir, int *dirfd, struct stat *st)
{
	struct sf_err e = { { 0 } };
	const char *rel = src_of(dir)->rel;
	*dirfd = sf_open_beneath(dm->src_fd, rel, SF_WANT_DIR, rel, &e);
	if (openviews_short(*dirfd) && openviews_reclaim(&dm->views))
		*dirfd = sf_open_beneath(dm->src_fd, rel, SF_WANT_DIR, rel, &e);
	if (*dirfd == -ELOOP || *dirfd == -EXDEV)
		/* swapped for a symlink since looked up */
		errlog_add(&dm->stats, rel, e.msg);
	if (*dirfd < 0)
		return *dirfd;
	if (fstat(*dirfd, st) < 0) {
		int rc = -errno;
		close(*dirfd);
		return rc;
	}
	return 0;
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

void listings_init(struct listings *ls)
{
	pthread_mutex_init(&ls->lock, NULL);
}

void listings_fini(struct listings *ls)
{
	pthread_mutex_destroy(&ls->lock);
}

/* What answers a request without a new listing: a whole one fresh for the
 * directory now (`st`), or, when `name` is given, a partial one holding a
 * view `name` of `file` as it is (`fst`). */
struct want {
	const struct stat *st;
	const char *name, *file;
	const struct stat *fst;
};

static bool answers(const struct listing *l, const struct want *w)
{
	if (fresh(l, w->st))
		return true;
	const struct lentry *e = l && l->partial && w->name ? find(l, w->name) : NULL;
	return e && e->fmt && strcmp(e->file, w->file) == 0 && same_version(e->st, w->fst);
}

/* Takes turn `t`; when another thread has it, hands the request loop on
 * first (that turn may wait on the source). */
static void take_turn(struct sf_turn *t)
{
	if (sf_turn_try(t))
		return;
	transport_hand_off();
	sf_turn_take(t);
}

/* Whether the current listing of `dir` answers `w`; *l a new reference to
 * it, or NULL. */
static bool listed(struct listings *ls, struct fnode *dir, const struct want *w,
		   struct listing **l)
{
	pthread_mutex_lock(&ls->lock);
	bool yes = answers(src_dir_of(dir)->listing, w);
	*l = src_dir_of(dir)->listing ? ref(src_dir_of(dir)->listing) : NULL;
	pthread_mutex_unlock(&ls->lock);
	return yes;
}

/* A listing of `dir` that answers `w` (true: a new reference in *l), or
 * the turn to make one (false: *l is a reference to the current listing,
 * or NULL). A listing reads SRC, so it is made outside any lock, by one
 * thread a directory at a time: the others wait for it, in their
 * request's section. */
static bool current(struct daemon *dm, struct fnode *dir, const struct want *w,
		    struct listing **l)
{
	struct listings *ls = &dm->listings;
	if (listed(ls, dir, w, l))
		return true;
	listing_unref(*l);
	take_turn(&src_dir_of(dir)->listing_turn);
	/* the listing made while this thread waited may answer */
	if (!listed(ls, dir, w, l))
		return false;
	sf_turn_give(&src_dir_of(dir)->listing_turn);
	return true;
}

/* Views of `old` entered while `l` was made from it (listing_open takes no
 * turn: it must not wait for a listing stuck on the source) go to the
 * entries of `l` that stand for the same containers, so that a container
 * is not opened twice beside itself. */
static void adopt(struct daemon *dm, const struct listing *old, struct listing *l,
		  uint64_t dir)
{
	for (size_t i = l->nsrc; old && i < l->n; i++) {
		struct lentry *e = &l->e[i];
		const struct lentry *o = e->open || e->fmt->uses_siblings ? NULL : find(old, e->name);
		if (!o || o->fmt != e->fmt || strcmp(o->file, e->file) != 0 ||
		    !same_version(o->st, e->st))
			continue;
		struct sf_view *v = openviews_get(&dm->views, &o->open, false);
		if (v)
			sf_view_unref(openviews_put(&dm->views, &e->open, v, dir, e->name));
	}
}

/* Ends the turn current() gave: `l` (when not NULL; made from `old`,
 * which the caller holds) becomes the directory's listing. */
static void install(struct daemon *dm, struct fnode *dir, struct listing *old,
		    struct listing *l)
{
	struct listings *ls = &dm->listings;
	struct listing *was = NULL;
	pthread_mutex_lock(&ls->lock);
	if (l) {
		was = src_dir_of(dir)->listing;
		src_dir_of(dir)->listing = l;
	}
	pthread_mutex_unlock(&ls->lock);
	sf_turn_give(&src_dir_of(dir)->listing_turn);
	listing_unref(was);
	listing_unref(old);
}

/* A whole listing of `dir` (now `st`), reusing the views of `old`: two
 * references, the directory's and the caller's. */
static int make_whole(struct daemon *dm, struct fnode *dir, int dirfd, const struct stat *st,
		      const struct listing *old, struct listing **out)
{
	struct listing *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	atomic_init(&l->refs, 2);
	l->views = &dm->views;
	l->mtime = st->st_mtim;
	l->listed_at = time(NULL);
	l->ino = st->st_ino;
	transport_hand_off();
	int rc = build(dm, dirfd, src_of(dir)->rel, fnode_ino(dir), st->st_size, old, l);
	if (rc) {
		listing_free(l);
		return rc;
	}
	adopt(dm, old, l, fnode_ino(dir));
	*out = l;
	return 0;
}

/* The whole listing, made anew unless the current one is fresh. */
static int relist(struct daemon *dm, struct fnode *dir, int dirfd, const struct stat *st,
		  struct listing **out)
{
	struct want w = { .st = st };
	if (current(dm, dir, &w, out))
		return 0;
	struct listing *old = *out;
	*out = NULL;
	int rc = make_whole(dm, dir, dirfd, st, old, out);
	install(dm, dir, old, *out);
	return rc;
}

int listing_get(struct daemon *dm, struct fnode *dir, struct listing **out)
{
	int dirfd;
	struct stat st;
	*out = NULL;
	int rc = open_dir(dm, dir, &dirfd, &st);
	if (rc)
		return rc;
	rc = relist(dm, dir, dirfd, &st, out);
	close(dirfd);
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
	if (!l || !(l->e = sf_big_alloc(n + 1, sizeof *l->e))) {
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
		sf_turn_init(&c.opening); /* the copy's own: nobody opens it yet */
		c.name = strdup(e->name);
		c.file = strdup(e->file);
		if ((c.st = malloc(sizeof *c.st)))
			*c.st = *e->st;
		struct sf_view *v = openviews_get(&dm->views, &e->open, false);
		c.open = v ? openviews_new(v) : NULL;
		l->e[l->n++] = c;
		if (!c.name || !c.file || !c.st) {
			listing_free(l);
			return NULL;
		}
	}
	l->e[l->n++] = x;
	qsort(l->e, l->n, sizeof *l->e, cmp_entry);
	hold_views(l, dir);
	return l;
}

/* The partial listing `old` (may be NULL) with view `name` of container
 * `file` (`fst`) of format `f` placed by this lookup only (checked, and opened unless
 * listing_places_unopened): NULL with *rc 0 when it gets no view. */
static struct listing *place_one(struct daemon *dm, struct fnode *dir, int dirfd,
				 const struct listing *old, const char *name, char **file,
				 const struct sf_format *f, struct stat *fst, int *rc)
{
	*rc = 0;
	const char *rel = src_of(dir)->rel;
	int failed = f->check ? check_container(dm, f, dirfd, *file, rel, fst) : 0;
	if (failed && !shown_anyway(dirfd, *file, failed, fst))
		return NULL;
	struct sf_view *v = NULL;
	if (!listing_places_unopened(f) &&
	    !(v = open_container(dm, f, dirfd, rel, *file, NULL, 0, f->check != NULL, false,
					 NULL)))
		return NULL;
	struct lentry x = {
		.name = strdup(name), .fmt = f, .st = malloc(sizeof *fst), .file = *file,
		.type = v && sf_node_kind(sf_view_root(v)) == SF_LINK ? DT_LNK : DT_DIR,
	};
	x.open = v ? openviews_new(v) : NULL;
	if (x.st)
		*x.st = *fst;
	struct listing *l = x.name && (x.open || !v) && x.st ?
			    partial_with(dm, old, x, fnode_ino(dir)) : NULL;
	if (!l) {
		free(x.name);
		free(x.st);
		openviews_drop(&dm->views, &x.open);
		*rc = -ENOMEM;
		return NULL;
	}
	*file = NULL; /* the listing has it */
	return l;
}

int listing_for_name(struct daemon *dm, struct fnode *dir, const char *name,
		     struct listing **out)
{
	*out = NULL;
	char *file;
	const struct sf_format *f = NULL;
	struct stat fst;
	int k = candidates(dm, src_of(dir)->rel, name, &file, &f, &fst);
	/* a fold whose index is in --index-dir: placed by the whole listing */
	if (k == 0 && dm->index_fd >= 0 && indexdir_has_view(dm, src_of(dir)->rel, name))
		k = 2;
	if (k == 0)
		return 0;
	int dirfd;
	struct stat st;
	int rc = open_dir(dm, dir, &dirfd, &st);
	if (rc) {
		free(file);
		return rc;
	}
	/* the whole listing when it is needed (several files could take the
	 * name, or the format reads its siblings or is covered by them); the
	 * current one when it
	 * is fresh or already has the view */
	struct want w = { .st = &st, .name = name, .file = file, .fst = &fst };
	struct listing *old;
	if (k > 1 || f->uses_siblings || f->covered)
		rc = relist(dm, dir, dirfd, &st, out);
	else if (!current(dm, dir, &w, out)) {
		/* and when one was made before (its views are to be reused,
		 * not opened again beside it), or many views were placed one
		 * by one (each copies the partial listing) */
		old = *out;
		*out = NULL;
		if (old && (!old->partial || old->n >= PARTIAL_MAX))
			rc = make_whole(dm, dir, dirfd, &st, old, out);
		else
			/* only one file could take the name: no earlier view
			 * can have it */
			*out = place_one(dm, dir, dirfd, old, name, &file, f, &fst, &rc);
		install(dm, dir, old, *out);
	}
	close(dirfd);
	free(file);
	return rc;
}

bool listing_places_unopened(const struct sf_format *f)
{
	return f->check && !f->uses_siblings && !f->maps_beside && !f->link;
}

struct sf_view *listing_opened(struct daemon *dm, const struct lentry *e)
{
	return openviews_get(&dm->views, &e->open, true);
}

struct sf_view *listing_open(struct daemon *dm, struct fnode *dir, const struct listing *l,
			     struct lentry *e)
{
	struct sf_view *v = listing_opened(dm, e);
	if (v)
		return v;
	/* one thread opens it, outside any lock; the others wait for it. No
	 * turn at the directory's listing: entering a view whose container
	 * answers does not wait for a listing stuck on the source. */
	take_turn(&e->opening);
	if ((v = listing_opened(dm, e))) { /* opened while this thread waited */
		sf_turn_give(&e->opening);
		return v;
	}
	int dirfd;
	struct stat st;
	if (open_dir(dm, dir, &dirfd, &st) == 0) {
		/* the SRC entries of the listing, sorted: the siblings of a
		 * format that reads them */
		bool sib = e->fmt->uses_siblings;
		char **names = malloc((sib && l->nsrc ? l->nsrc : 1) * sizeof *names);
		size_t n = 0;
		for (size_t i = 0; sib && names && i < l->nsrc; i++)
			names[n++] = l->e[i].name;
		transport_hand_off(); /* an open may wait for the disk */
		if (names)
			v = open_container(dm, e->fmt, dirfd, src_of(dir)->rel, e->file, names, n, true,
					   e->in_index_dir, NULL);
		free(names);
		if (v)
			v = openviews_put(&dm->views, &e->open, v, fnode_ino(dir), e->name);
		close(dirfd);
	}
	sf_turn_give(&e->opening);
	return v;
}
