#include "src.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon.h"
#include "sf_map.h"
#include "sf_open.h"
#include "stats.h"

bool same_version(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_mode == b->st_mode &&
	       a->st_uid == b->st_uid && a->st_gid == b->st_gid &&
	       a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The fnode for SRC entry `name` of `dir` as it is now (the tree's lock held). */
static struct fnode *src_child(struct ftree *t, struct fnode *dir, const char *name,
			       const struct stat *st)
{
	struct fnode *n = fnode_child(dir, name);
	if (n && n->kind != FK_VIEW && S_ISDIR(st->st_mode) && S_ISDIR(n->st.st_mode) &&
	    n->st.st_dev == st->st_dev && n->st.st_ino == st->st_ino) {
		/* a directory stays the same node as its entries change */
		n->st = *st;
		return n;
	}
	if (n && n->kind != FK_VIEW && same_version(&n->st, st))
		return n;
	enum fkind k = S_ISDIR(st->st_mode) ? FK_SRC_DIR :
		       S_ISREG(st->st_mode) ? FK_SRC_FILE : FK_SRC_OTHER;
	n = fnode_new(t, k, dir, name);
	if (!n)
		return NULL;
	n->st = *st;
	if (!(n->rel = sf_path_join(dir->rel, name))) {
		fnode_discard(t, n);
		return NULL;
	}
	fnode_attach(n);
	return n;
}

/* src_find once: the node for `name` as lstat finds it now. */
static int find_once(struct daemon *dm, struct fnode *dir, const char *name, struct fnode **out)
{
	*out = NULL;
	char *rel = sf_path_join(dir->rel, name);
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

/* With --no-open no OPEN comes between the lookup of a file and its first
 * READ to pin its version: a file replaced in between would fail that READ
 * with ESTALE, which the kernel passes on to the reader. So the lookup maps
 * the file (what OPEN does otherwise), while SRC files hold fewer mappings,
 * each a descriptor, than the budget (docs/options.md); past it a file is
 * mapped at its first READ. Tries are bounded: a file replaced again and
 * again between lstat and open is left to its READ. */
#define PIN_TRIES 3

int src_find(struct daemon *dm, struct fnode *dir, const char *name, struct fnode **out)
{
	for (int i = 1;; i++) {
		int rc = find_once(dm, dir, name, out);
		if (rc || !dm->no_open || (*out)->kind != FK_SRC_FILE || i == PIN_TRIES ||
		    atomic_load(&dm->tree.src_maps) >= dm->src_pin_max)
			return rc;
		/* any other failure is the READ's to report */
		if (src_map_file(dm, *out) != -ESTALE)
			return 0;
		/* replaced since the lstat: this node stands for a version gone */
		fnode_forget(&dm->tree, *out, 1);
	}
}

int src_map_file(struct daemon *dm, struct fnode *n)
{
	pthread_mutex_lock(&n->map_lock);
	bool mapped = n->map != NULL;
	pthread_mutex_unlock(&n->map_lock);
	if (mapped)
		return 0;
	/* mapped without the lock, which a stalled source would hold: a
	 * racing open maps it too, and the first to finish is kept */
	struct sf_err e = { { 0 } };
	struct sf_map *m = NULL;
	int rc = sf_map_beneath(dm->src_fd, n->rel, n->rel, &m, &e);
	/* out of descriptors: views nobody uses give theirs back */
	if (openviews_short(rc) && openviews_reclaim(&dm->views))
		rc = sf_map_beneath(dm->src_fd, n->rel, n->rel, &m, &e);
	if (rc == -ELOOP || rc == -EXDEV || rc == -EINVAL)
		errlog_add(&dm->stats, n->rel, e.msg); /* replaced by what is not served */
	if (rc)
		return rc;
	if (!same_version(&m->st, &n->st)) {
		/* replaced between lookup and open: the version this inode
		 * stands for is gone */
		sf_map_unref(m);
		return -ESTALE;
	}
	pthread_mutex_lock(&n->map_lock);
	if (!n->map) {
		n->map = m;
		m = NULL;
		atomic_fetch_add(&dm->tree.src_maps, 1);
	}
	pthread_mutex_unlock(&n->map_lock);
	sf_map_unref(m);
	return 0;
}

int src_read(struct daemon *dm, struct fnode *n, uint64_t off, uint64_t size,
	     struct sf_readv *rv)
{
	int rc = src_map_file(dm, n);
	if (rc)
		return rc;
	/* a page past a file's new end would be served as zeros */
	struct sf_err e = { { 0 } };
	if ((rc = sf_map_check(n->map, &e))) {
		errlog_add(&dm->stats, n->rel, e.msg);
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
	int fd = sf_open_beneath(dm->src_fd, n->rel, SF_WANT_ENTRY, n->rel, &e);
	if (fd < 0)
		return fd;
	ssize_t k = readlinkat(fd, "", buf, PATH_MAX);
	int rc = k < 0 ? -errno : 0;
	close(fd);
	if (k >= 0)
		buf[k] = 0;
	return rc;
}
