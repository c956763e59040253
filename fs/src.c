#include "src.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "daemon.h"
#include "sf_map.h"
#include "sf_open.h"
#include "stats.h"

static const struct stat *src_st(const struct fnode *n)
{
	return &src_of(n)->st;
}

static const char *src_rel(const struct fnode *n)
{
	return src_of(n)->rel;
}

static void file_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		      struct stat *st)
{
	st->st_mode = S_IFREG;
	st->st_nlink = 1;
	st->st_size = src_of(n)->st.st_size;
}

static void other_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		       struct stat *st)
{
	const struct stat *was = &src_of(n)->st;
	st->st_mode = was->st_mode & S_IFMT;
	st->st_nlink = 1;
	st->st_size = was->st_size;
	st->st_rdev = was->st_rdev;
}

static struct sf_hash *dir_kids(struct fnode *n)
{
	return &src_dir_of(n)->kids;
}

/* The kernel has forgotten the directory: its inotify watch can go, so
 * that watches follow the directories the kernel holds. */
static void dir_detach(struct ftree *t, struct fnode *n)
{
	if (atomic_load(&src_dir_of(n)->watched) && t->dir_gone)
		t->dir_gone(t->dir_gone_arg, n);
}

static bool file_holds_src(struct fnode *n)
{
	return src_file_of(n)->map != NULL;
}

static bool dir_holds_src(struct fnode *n)
{
	return src_dir_of(n)->listing != NULL;
}

static void src_free(struct src_node *s)
{
	free(s->n.name);
	free(s->rel);
	free(s);
}

static void other_drop(struct ftree *t, struct fnode *n)
{
	src_free(src_of(n));
}

static void file_drop(struct ftree *t, struct fnode *n)
{
	struct src_file *f = src_file_of(n);
	if (f->map)
		atomic_fetch_sub(&t->src_maps, 1);
	sf_map_unref(f->map);
	pthread_mutex_destroy(&f->map_lock);
	src_free(&f->s);
}

static void dir_drop(struct ftree *t, struct fnode *n)
{
	struct src_dir *d = src_dir_of(n);
	listing_unref(d->listing);
	sf_hash_free(&d->kids);
	src_free(&d->s);
}

static const struct fnode_ops dir_ops = {
	.kind = FK_SRC_DIR, .st_in_place = true, .st = src_st, .attr = fnode_dir_attr,
	.access = access_src, .kids = dir_kids, .rel = src_rel, .detach = dir_detach,
	.holds_src = dir_holds_src, .drop = dir_drop,
};

static const struct fnode_ops file_ops = {
	.kind = FK_SRC_FILE, .st = src_st, .attr = file_attr, .access = access_src,
	.rel = src_rel, .holds_src = file_holds_src, .drop = file_drop,
};

static const struct fnode_ops other_ops = {
	.kind = FK_SRC_OTHER, .st = src_st, .attr = other_attr, .access = access_src,
	.rel = src_rel, .drop = other_drop,
};

int src_init_root(struct ftree *t, const char *src, struct sf_err *e)
{
	fnode_init(t);
	/* no other thread runs yet: the root is made without the lock */
	struct fnode *root = t->root = fnode_new(t, &dir_ops, sizeof(struct src_dir), NULL, "");
	if (!root || !(src_of(root)->rel = strdup(".")))
		return sf_fail(e, -ENOMEM, "out of memory");
	if (stat(src, &src_of(root)->st) < 0)
		return sf_fail(e, -errno, "%s: %s", src, strerror(errno));
	root->nlookup = 1;
	return 0;
}

/* A new node for SRC entry `name` of `dir`, version `st` (the tree's lock held). */
static struct fnode *src_new(struct ftree *t, struct fnode *dir, const char *name,
			     const struct stat *st)
{
	bool isdir = S_ISDIR(st->st_mode), isreg = S_ISREG(st->st_mode);
	struct fnode *n = fnode_new(t, isdir ? &dir_ops : isreg ? &file_ops : &other_ops,
				    isdir ? sizeof(struct src_dir) :
				    isreg ? sizeof(struct src_file) : sizeof(struct src_node),
				    dir, name);
	if (!n)
		return NULL;
	if (isreg)
		pthread_mutex_init(&src_file_of(n)->map_lock, NULL);
	src_of(n)->st = *st;
	if (!(src_of(n)->rel = sf_path_join(src_of(dir)->rel, name))) {
		fnode_discard(t, n);
		return NULL;
	}
	return n;
}

/* The fnode for SRC entry `name` of `dir` as it is now (the tree's lock held). */
static struct fnode *src_child(struct ftree *t, struct fnode *dir, const char *name,
			       const struct stat *st)
{
	struct fnode *n = fnode_child(dir, name);
	struct src_node *was = n && is_src(n) ? src_of(n) : NULL;
	if (was && S_ISDIR(st->st_mode) && S_ISDIR(was->st.st_mode) &&
	    was->st.st_dev == st->st_dev && was->st.st_ino == st->st_ino) {
		/* a directory stays the same node as its entries change */
		was->st = *st;
		return n;
	}
	if (was && same_version(&was->st, st))
		return n;
	if ((n = src_new(t, dir, name, st)))
		fnode_attach(n);
	return n;
}

/* src_find once: the node for `name` as lstat finds it now. */
static int find_once(struct daemon *dm, struct fnode *dir, const char *name, struct fnode **out)
{
	*out = NULL;
	char *rel = sf_path_join(src_of(dir)->rel, name);
	if (!rel)
		return -ENOMEM;
	struct stat st;
	int rc = sf_lstat_beneath(dm->src_fd, rel, &st);
	if (rc == -ELOOP) /* a directory on the way swapped for a symlink */
		errlog_add(&dm->stats, rel,
			   "a symlink on its path: shardfs follows no symlink in SRC");
	else if (rc == -EXDEV) /* not crossed into: it may be this very mount */
		errlog_add(&dm->stats, rel,
			   "a mount point: shardfs resolves no path through another mount "
			   "inside SRC, not shown (EXDEV)");
	free(rel);
	if (rc)
		return rc;
	fnode_find(&dm->tree);
	*out = fnode_found(&dm->tree, src_child(&dm->tree, dir, name, &st));
	return *out ? 0 : -ENOMEM;
}

/* With no-open no OPEN comes between the lookup of a file and its first
 * READ to pin its version: a file replaced in between would fail that READ
 * with ESTALE, which the kernel passes on to the reader. So the lookup maps
 * the file (what OPEN does otherwise), while SRC files hold fewer mappings,
 * each a descriptor, than the budget (docs/options.md); past it a file is
 * mapped at its first READ, and so is a file kept for its holders, which
 * a lookup (a stat) must not keep. Tries are bounded: a file replaced
 * again and again between lstat and open is left to its READ. */
#define PIN_TRIES 3

int src_find(struct daemon *dm, struct fnode *dir, const char *name, struct fnode **out)
{
	for (int i = 1;; i++) {
		int rc = find_once(dm, dir, name, out);
		if (rc || !dm->no_open || fnode_kind(*out) != FK_SRC_FILE || i == PIN_TRIES ||
		    atomic_load(&dm->tree.src_maps) >= dm->src_pin_max || kept_for_holders(name))
			return rc;
		/* any other failure is the READ's to report */
		if (src_map_file(dm, *out) != -ESTALE)
			return 0;
		/* replaced since the lstat: this node stands for a version gone */
		fnode_forget(&dm->tree, *out, 1);
	}
}

int src_map_file(struct daemon *dm, struct fnode *node)
{
	struct src_file *n = src_file_of(node);
	pthread_mutex_lock(&n->map_lock);
	bool mapped = n->map != NULL;
	pthread_mutex_unlock(&n->map_lock);
	if (mapped)
		return 0;
	/* mapped without the lock, which a stalled source would hold: a
	 * racing open maps it too, and the first to finish is kept */
	struct sf_err e = { { 0 } };
	struct sf_map *m = NULL;
	int rc = sf_map_beneath(dm->src_fd, n->s.rel, n->s.rel, &m, &e);
	/* out of descriptors: views nobody uses give theirs back */
	if (openviews_short(rc) && openviews_reclaim(&dm->views))
		rc = sf_map_beneath(dm->src_fd, n->s.rel, n->s.rel, &m, &e);
	if (rc == -ELOOP || rc == -EXDEV || rc == -EINVAL)
		errlog_add(&dm->stats, n->s.rel, e.msg); /* replaced by what is not served */
	if (rc)
		return rc;
	if (!same_version(&m->st, &n->s.st)) {
		/* replaced between lookup and open: the version this inode
		 * stands for is gone */
		sf_map_unref(m);
		return -ESTALE;
	}
	pthread_mutex_lock(&n->map_lock);
	bool crowded = false;
	if (!n->map) {
		n->map = m;
		m = NULL;
		size_t maps = atomic_fetch_add(&dm->tree.src_maps, 1) + 1;
		crowded = dm->tree.maps_cap && maps > dm->tree.maps_cap;
	}
	pthread_mutex_unlock(&n->map_lock);
	sf_map_unref(m);
	if (crowded) {
		pthread_mutex_lock(&dm->tree.lock);
		pthread_cond_signal(&dm->tree.crowded);
		pthread_mutex_unlock(&dm->tree.lock);
	}
	return 0;
}

int src_read(struct daemon *dm, struct fnode *node, uint64_t off, uint64_t size,
	     struct sf_readv *rv)
{
	struct src_file *n = src_file_of(node);
	int rc = src_map_file(dm, node);
	if (rc)
		return rc;
	/* a page past a file's new end would be served as zeros */
	struct sf_err e = { { 0 } };
	if ((rc = sf_map_check(n->map, &e))) {
		errlog_add(&dm->stats, n->s.rel, e.msg);
		return rc;
	}
	uint64_t len = off >= n->map->size ? 0 : n->map->size - off;
	if (len > size)
		len = size;
	if (!len)
		return 0;
	if (!(rv->iov = malloc(sizeof *rv->iov)))
		return -ENOMEM;
	rv->iov[0] = (struct iovec){ (uint8_t *)n->map->data + off, len };
	rv->n = rv->cap = 1;
	rv->bytes = rv->from_map = len;
	return 0;
}

int src_readlink(struct daemon *dm, struct fnode *n, char *buf)
{
	struct sf_err e;
	const char *rel = src_of(n)->rel;
	int fd = sf_open_beneath(dm->src_fd, rel, SF_WANT_ENTRY, rel, &e);
	if (fd < 0)
		return fd;
	ssize_t k = readlinkat(fd, "", buf, PATH_MAX);
	int rc = k < 0 ? -errno : 0;
	close(fd);
	if (k >= 0)
		buf[k] = 0;
	return rc;
}
