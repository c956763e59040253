#include "fnode.h"
#include "stats.h"

#include "listing.h"
#include "meta.h"
#include "section.h"
#include "sf_map.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct fnode *fnode_new(struct ftree *t, enum fkind kind, struct fnode *parent,
			const char *name)
{
	struct fnode *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->kind = kind;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	pthread_mutex_init(&n->map_lock, NULL); /* whichever job its kind gives it */
	n->all_next = t->all;
	if (t->all)
		t->all->all_prev = n;
	t->all = n;
	t->live++;
	if (parent) {
		n->parent = parent;
		parent->refs++;
	}
	return n;
}

int fnode_init_root(struct ftree *t, const char *src, struct sf_err *e)
{
	pthread_mutex_init(&t->lock, NULL);
	/* no other thread runs yet: the root is made without the lock */
	struct fnode *root = t->root = fnode_new(t, FK_SRC_DIR, NULL, "");
	if (!root || !(root->rel = strdup(".")))
		return sf_fail(e, -ENOMEM, "out of memory");
	if (stat(src, &root->st) < 0)
		return sf_fail(e, -errno, "%s: %s", src, strerror(errno));
	root->nlookup = 1;
	return 0;
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
	return sf_hash_get(&dir->kids, name_hash(name), kid_named, name);
}

void fnode_attach(struct fnode *n)
{
	struct sf_hash *k = &n->parent->kids;
	uint64_t h = name_hash(n->name);
	sf_hash_del(k, h, kid_named, n->name);
	/* out of memory: the node still works, it just is not reused */
	(void)sf_hash_put(k, h, n);
}

/* Takes a node out of the tree (the tree's lock held). */
static void detach(struct ftree *t, struct fnode *n)
{
	if (n->kind == FK_SRC_DIR && atomic_load(&n->watched) && t->dir_gone)
		t->dir_gone(t->dir_gone_arg, n);
	if (n->all_prev)
		n->all_prev->all_next = n->all_next;
	else
		t->all = n->all_next;
	if (n->all_next)
		n->all_next->all_prev = n->all_prev;
	t->live--;
	if (n->vn && sf_node_host(n->vn) == n)
		sf_node_set_host(n->vn, NULL);
}

/* Frees a detached node and drops what it held: a mapping or a view may
 * close a file of SRC, which can wait on a stalled source, so this runs
 * without the tree's lock. */
static void drop(struct ftree *t, struct fnode *n)
{
	if (n->map)
		atomic_fetch_sub(&t->src_maps, 1);
	sf_view_unref(n->view);
	sf_map_unref(n->map);
	meta_live_free(n->live);
	listing_unref(n->listing);
	pthread_mutex_destroy(&n->map_lock);
	sf_hash_free(&n->kids);
	free(n->name);
	free(n->rel);
	free(n->file);
	free(n);
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
		if (p)
			sf_hash_del(&p->kids, name_hash(n->name), is, n);
		detach(t, n);
		n->all_next = *dead;
		*dead = n;
		t->freed_since_trim++;
		if (p)
			p->refs--;
		n = p;
	}
}

/* Whether dropping n may close a file of SRC: a view's reference does
 * only if it is the last (most nodes of a view share it). */
static bool holds_src(struct fnode *n)
{
	if (n->view && sf_view_unref_shared(n->view))
		n->view = NULL;
	return n->view || n->map || n->listing;
}

static void drop_all(struct ftree *t, struct fnode *dead)
{
	bool src = false;
	for (struct fnode *x = dead; x; x = x->all_next)
		src |= holds_src(x);
	if (src && t->sections)
		section_open(t->sections, "forget", ".", NULL, false);
	while (dead) {
		struct fnode *next = dead->all_next;
		drop(t, dead);
		dead = next;
	}
	if (src && t->sections)
		section_close(t->sections);
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
	if (n)
		fnode_lookup_ref(n);
	pthread_mutex_unlock(&t->lock);
	return n;
}

void fnode_forget(struct ftree *t, struct fnode *n, uint64_t k)
{
	pthread_mutex_lock(&t->lock);
	if (k > n->nlookup) /* a reply that took no reference: a bug (tests look for this) */
		fprintf(stderr, "shardfs: forget %llu of %s with %llu lookups\n",
			(unsigned long long)k, n->name, (unsigned long long)n->nlookup);
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

static struct fnode *view_node(struct ftree *t, struct fnode *parent, const char *name)
{
	return fnode_new(t, FK_VIEW, parent, name);
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
	for (; whole && n && n->kind == FK_VIEW; n = n->parent) {
		whole = prepend(buf, &at, n->name, strlen(n->name));
		const struct fnode *p = n->parent;
		if (whole && p && (p->kind == FK_VIEW || (p->rel && strcmp(p->rel, ".") != 0)))
			whole = prepend(buf, &at, "/", 1);
	}
	const char *top = !n ? NULL : n->rel ? n->rel : n->name;
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

void fnode_enter(struct fnode *n, struct sf_node *vn)
{
	n->view = sf_view_ref(sf_node_view(vn));
	n->vn = vn;
	/* a root placed unopened may find its view's root hosted already */
	if (!sf_node_host(vn))
		sf_node_set_host(vn, n);
	atomic_store_explicit(&n->entered, true, memory_order_release);
}

struct fnode *fnode_for_view(struct ftree *t, struct fnode *parent, struct sf_node *vn,
			     const char *name)
{
	struct fnode *n = sf_node_host(vn);
	if (n)
		return n;
	n = view_node(t, parent, name ? name : sf_node_name(vn));
	if (!n)
		return NULL;
	n->st = parent->st;
	fnode_enter(n, vn);
	return n;
}

struct fnode *fnode_for_root(struct ftree *t, struct fnode *dir, const char *name,
			     const char *file, const struct stat *st)
{
	struct fnode *n = view_node(t, dir, name);
	if (!n)
		return NULL;
	if (!(n->file = strdup(file))) {
		fnode_discard(t, n);
		return NULL;
	}
	n->st = *st;
	return n;
}

void fnode_fini(struct ftree *t)
{
	if (!t->root)
		return; /* never made */
	pthread_mutex_lock(&t->lock);
	while (t->all) {
		struct fnode *n = t->all;
		detach(t, n);
		drop(t, n);
	}
	t->root = NULL;
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_destroy(&t->lock);
}
