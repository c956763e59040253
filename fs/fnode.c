#include "fnode.h"

#include "listing.h"
#include "sf_map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

pthread_mutex_t ftree_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct fnode *root;
static struct fnode *all_head;

struct fnode *fnode_root(void)
{
	return root;
}

struct fnode *fnode_new(enum fkind kind, struct fnode *parent, const char *name)
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
	pthread_mutex_init(&n->map_lock, NULL);
	pthread_mutex_lock(&ftree_lock);
	n->all_next = all_head;
	if (all_head)
		all_head->all_prev = n;
	all_head = n;
	pthread_mutex_unlock(&ftree_lock);
	if (parent) {
		n->parent = parent;
		parent->refs++;
	}
	return n;
}

int fnode_init_root(const char *src, struct sf_err *e)
{
	root = fnode_new(FK_SRC_DIR, NULL, "");
	if (!root || !(root->rel = strdup(".")))
		return sf_fail(e, -ENOMEM, "out of memory");
	if (stat(src, &root->st) < 0)
		return sf_fail(e, -errno, "%s: %s", src, strerror(errno));
	root->nlookup = 1;
	return 0;
}

static size_t slot_of(const struct fchildren *k, const char *name)
{
	return XXH3_64bits(name, strlen(name)) & (k->cap - 1);
}

struct fnode *fnode_child(struct fnode *dir, const char *name)
{
	struct fchildren *k = &dir->kids;
	if (!k->cap)
		return NULL;
	for (size_t i = slot_of(k, name);; i = (i + 1) & (k->cap - 1)) {
		struct fnode *c = k->slot[i];
		if (!c)
			return NULL;
		if (c != (struct fnode *)k && strcmp(c->name, name) == 0)
			return c;
	}
}

/* Deleted slots hold the table's own address as a tombstone. */
static void kids_remove(struct fchildren *k, struct fnode *n)
{
	if (!k->cap)
		return;
	for (size_t i = slot_of(k, n->name);; i = (i + 1) & (k->cap - 1)) {
		if (!k->slot[i])
			return;
		if (k->slot[i] == n) {
			k->slot[i] = (struct fnode *)k;
			return;
		}
	}
}

static void kids_grow(struct fchildren *k)
{
	size_t cap = k->cap ? k->cap * 2 : 16;
	struct fnode **s = calloc(cap, sizeof *s);
	if (!s)
		return;
	struct fnode **old = k->slot;
	size_t oldcap = k->cap;
	k->slot = s;
	k->cap = cap;
	k->n = 0;
	for (size_t i = 0; i < oldcap; i++) {
		struct fnode *c = old[i];
		if (!c || c == (struct fnode *)k)
			continue;
		size_t j = slot_of(k, c->name);
		while (k->slot[j])
			j = (j + 1) & (cap - 1);
		k->slot[j] = c;
		k->n++;
	}
	free(old);
}

void fnode_attach(struct fnode *n)
{
	struct fchildren *k = &n->parent->kids;
	struct fnode *old = fnode_child(n->parent, n->name);
	if (old)
		kids_remove(k, old);
	/* tombstones count as used so probing always ends */
	size_t used = 0;
	for (size_t i = 0; i < k->cap; i++)
		used += k->slot[i] != NULL;
	if ((used + 1) * 2 > k->cap)
		kids_grow(k);
	if (!k->cap)
		return; /* out of memory: the node still works, it just is not reused */
	size_t i = slot_of(k, n->name);
	while (k->slot[i] && k->slot[i] != (struct fnode *)k)
		i = (i + 1) & (k->cap - 1);
	k->slot[i] = n;
	k->n++;
}

static void release(struct fnode *n)
{
	if (n->all_prev)
		n->all_prev->all_next = n->all_next;
	else
		all_head = n->all_next;
	if (n->all_next)
		n->all_next->all_prev = n->all_prev;
	if (n->vn && n->vn->host == n)
		n->vn->host = NULL;
	sf_view_unref(n->view);
	sf_map_unref(n->map);
	sf_buf_unref(n->snap);
	listing_unref(n->listing);
	pthread_mutex_destroy(&n->map_lock);
	free(n->kids.slot);
	free(n->name);
	free(n->rel);
	free(n->vpath);
	free(n);
}

static void fnode_free(struct fnode *n)
{
	while (n && n != root && n->nlookup == 0 && n->refs == 0) {
		struct fnode *p = n->parent;
		if (p)
			kids_remove(&p->kids, n);
		release(n);
		if (p)
			p->refs--;
		n = p;
	}
}

void fnode_lookup_ref(struct fnode *n)
{
	n->nlookup++;
}

void fnode_forget(struct fnode *n, uint64_t k)
{
	pthread_mutex_lock(&ftree_lock);
	if (k > n->nlookup) /* a reply that took no reference: a bug (tests look for this) */
		fprintf(stderr, "shardfs: forget %llu of %s with %llu lookups\n",
			(unsigned long long)k, n->name, (unsigned long long)n->nlookup);
	n->nlookup = k > n->nlookup ? 0 : n->nlookup - k;
	fnode_free(n);
	pthread_mutex_unlock(&ftree_lock);
}

struct fnode *fnode_for_view(struct fnode *parent, struct sf_node *vn, const char *name)
{
	struct fnode *n = vn->host;
	if (n)
		return n;
	if (!name)
		name = vn->name;
	n = fnode_new(FK_VIEW, parent, name);
	if (!n)
		return NULL;
	n->view = sf_view_ref(vn->view);
	n->vn = vn;
	n->st = parent->st;
	const char *pp = parent->vpath ? parent->vpath : parent->rel;
	size_t len = strlen(pp) + strlen(name) + 2;
	n->vpath = malloc(len);
	if (!n->vpath) {
		fnode_free(n);
		return NULL;
	}
	if (strcmp(pp, ".") == 0)
		snprintf(n->vpath, len, "%s", name);
	else
		snprintf(n->vpath, len, "%s/%s", pp, name);
	vn->host = n;
	return n;
}

void fnode_fini(void)
{
	pthread_mutex_lock(&ftree_lock);
	while (all_head)
		release(all_head);
	root = NULL;
	pthread_mutex_unlock(&ftree_lock);
}
