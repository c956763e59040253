#include "fnode.h"
#include "stats.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void fnode_init(struct ftree *t)
{
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->crowded, NULL);
}

/* Takes n out of the list of all nodes (lock held). */
static void unlink_all(struct ftree *t, struct fnode *n)
{
	if (n->all_prev)
		n->all_prev->all_next = n->all_next;
	else
		t->all = n->all_next;
	if (n->all_next)
		n->all_next->all_prev = n->all_prev;
	else
		t->oldest = n->all_prev;
}

/* Puts n first in the list of all nodes (lock held). */
static void link_first(struct ftree *t, struct fnode *n)
{
	n->all_prev = NULL;
	n->all_next = t->all;
	if (t->all)
		t->all->all_prev = n;
	else
		t->oldest = n;
	t->all = n;
}

struct fnode *fnode_new(struct ftree *t, const struct fnode_ops *ops, size_t size,
			struct fnode *parent, const char *name)
{
	struct fnode *n = calloc(1, size);
	if (!n)
		return NULL;
	n->ops = ops;
	n->ino = ++t->made;
	if (name && !(n->name = strdup(name))) {
		free(n);
		return NULL;
	}
	link_first(t, n);
	if (++t->live > t->cap && t->cap)
		pthread_cond_signal(&t->crowded);
	if (parent) {
		n->parent = parent;
		parent->refs++;
	}
	return n;
}

static uint64_t name_hash(const char *name)
{
	return XXH3_64bits(name, strlen(name));
}

static bool kid_named(const void *name, const void *kid)
{
	return strcmp(((const struct fnode *)kid)->name, name) == 0;
}

static bool is(const void *key, const void *kid)
{
	return key == kid;
}

struct fnode *fnode_child(struct fnode *dir, const char *name)
{
	return sf_hash_get(dir->ops->kids(dir), name_hash(name), kid_named, name);
}

void fnode_attach(struct fnode *n)
{
	struct sf_hash *k = n->parent->ops->kids(n->parent);
	uint64_t h = name_hash(n->name);
	sf_hash_del(k, h, kid_named, n->name);
	/* out of memory: the node still works, it just is not reused */
	(void)sf_hash_put(k, h, n);
}

/* Takes a node out of the tree (the tree's lock held). */
static void detach(struct ftree *t, struct fnode *n)
{
	if (n->ops->detach)
		n->ops->detach(t, n);
	unlink_all(t, n);
	t->live--;
}

/* Memory is given back to the system once the nodes freed since the last
 * trim are an eighth of those still live, and at least TRIM_LEAST: a trim
 * walks the whole heap, so as the kernel forgets N nodes it runs about
 * log(N) times, and what stays untrimmed when the forgets stop is small
 * beside what is live (a fixed count left up to that many nodes' worth
 * of the heap behind, however few stayed live). */
#define TRIM_LEAST 1024

/* Detaches n and the parents it was the last to hold, onto *dead (linked
 * through all_next) for drop() once the lock is let go (lock held). */
static void fnode_free(struct ftree *t, struct fnode *n, struct fnode **dead)
{
	while (n && n != t->root && n->nlookup == 0 && n->refs == 0) {
		struct fnode *p = n->parent;
		/* a node with no name of its own is never a named child */
		if (p && p->ops->kids && n->name)
			sf_hash_del(p->ops->kids(p), name_hash(n->name), is, n);
		detach(t, n);
		n->all_next = *dead;
		*dead = n;
		t->freed_since_trim++;
		if (p)
			p->refs--;
		n = p;
	}
}

static void drop_all(struct ftree *t, struct fnode *dead)
{
	bool src = false;
	for (struct fnode *x = dead; x; x = x->all_next)
		src |= x->ops->holds_src && x->ops->holds_src(x);
	if (src && t->open_section)
		t->open_section(t->section_arg);
	while (dead) {
		struct fnode *next = dead->all_next;
		dead->ops->drop(t, dead);
		dead = next;
	}
	if (src && t->open_section)
		t->close_section(t->section_arg);
}

void fnode_discard(struct ftree *t, struct fnode *n)
{
	struct fnode *dead = NULL;
	fnode_free(t, n, &dead);
	drop_all(t, dead);
}

void fnode_lookup_ref(struct fnode *n)
{
	n->nlookup++;
}

void fnode_find(struct ftree *t)
{
	pthread_mutex_lock(&t->lock);
}

struct fnode *fnode_found(struct ftree *t, struct fnode *n)
{
	if (n) {
		fnode_lookup_ref(n);
		/* the list runs from the node looked up last to the one
		 * looked up longest ago, which the kernel is asked to drop
		 * first (fnode_oldest_leaves) */
		unlink_all(t, n);
		link_first(t, n);
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

void fnode_forget(struct ftree *t, struct fnode *n, uint64_t k)
{
	pthread_mutex_lock(&t->lock);
	if (k > n->nlookup) /* a reply that took no reference: a bug (tests look for this) */
		fprintf(stderr, "shardfs: forget %llu of %s with %llu lookups\n",
			(unsigned long long)k, fnode_name(n), (unsigned long long)n->nlookup);
	n->nlookup = k > n->nlookup ? 0 : n->nlookup - k;
	struct fnode *dead = NULL;
	fnode_free(t, n, &dead);
	bool trim = t->freed_since_trim >= TRIM_LEAST && t->freed_since_trim >= t->live / 8;
	if (trim)
		t->freed_since_trim = 0;
	pthread_mutex_unlock(&t->lock);
	drop_all(t, dead);
	/* When the kernel forgets many inodes (memory pressure, drop_caches),
	 * what they held is scattered over the heap: free() keeps it, and
	 * only a trim returns the emptied pages. */
	if (trim)
		malloc_trim(0);
}

/* Prepends `len` bytes of s before buf[*at], as far as they fit. */
static bool prepend(char *buf, size_t *at, const char *s, size_t len)
{
	if (len > *at) {
		memcpy(buf, s + len - *at, *at);
		*at = 0;
		return false;
	}
	*at -= len;
	memcpy(buf + *at, s, len);
	return true;
}

const char *fnode_path(const struct fnode *n, char *buf, size_t cap)
{
	size_t at = cap - 1;
	buf[at] = 0;
	bool whole = true;
	/* names and parents never change while a node lives, and a node holds
	 * its parent: no lock needed */
	for (; whole && n && fnode_kind(n) == FK_VIEW; n = n->parent) {
		const char *name = fnode_name(n);
		whole = prepend(buf, &at, name, strlen(name));
		const struct fnode *p = n->parent;
		const char *prel = p && p->ops->rel ? p->ops->rel(p) : NULL;
		if (whole && p && (fnode_kind(p) == FK_VIEW || (prel && strcmp(prel, ".") != 0)))
			whole = prepend(buf, &at, "/", 1);
	}
	const char *top = !n ? NULL : n->ops->rel ? n->ops->rel(n) : n->name;
	if (whole && top && strcmp(top, ".") != 0)
		whole = prepend(buf, &at, top, strlen(top));
	if (!whole && cap > 4)
		memcpy(buf, "...", 3);
	return buf + (whole ? at : 0);
}

void fnode_errlog(struct stats *s, const struct fnode *n, const char *msg)
{
	char buf[FNODE_PATH_MAX];
	errlog_add(s, fnode_path(n, buf, sizeof buf), msg);
}

size_t fnode_oldest_leaves(struct ftree *t, struct fnode_leaf *out, size_t max)
{
	size_t k = 0;
	/* each node looked at goes first: the next call goes on from where
	 * this one stopped, over directories still holding children and
	 * leaves the kernel keeps (open, a cwd) */
	for (size_t seen = 0; k < max && seen < 4 * max && t->oldest; seen++) {
		struct fnode *n = t->oldest;
		unlink_all(t, n);
		link_first(t, n);
		if (!n->parent || n->refs || n->nlookup == 0)
			continue;
		out[k].dir = fnode_ino(n->parent);
		if ((out[k].name = strdup(fnode_name(n))))
			k++;
	}
	return k;
}

void fnode_dir_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		    struct stat *st)
{
	st->st_mode = S_IFDIR;
	st->st_nlink = 2;
}

void fnode_fini(struct ftree *t)
{
	if (!t->root)
		return; /* never made */
	pthread_mutex_lock(&t->lock);
	while (t->all) {
		struct fnode *n = t->all;
		detach(t, n);
		n->ops->drop(t, n);
	}
	t->root = NULL;
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->crowded);
}
