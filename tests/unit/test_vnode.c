/* View nodes without a mount (fs/vnode.c): a root placed unopened and
 * entered, members named by their view node and showing their root's
 * version, what stat shows of each (type, size, the one byte a failed
 * empty file claims, read-only permission bits), the view node's host
 * slot, which a member takes and gives back when freed, and the ring of
 * each root's nodes and the tree's list of entered roots, through which a
 * deleted container's view finds its nodes (views_gone_in). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "access.h"
#include "vnode.h"
#include "sf_view_impl.h"

/* SRC's directory the view lies in: a node of a test kind with a name table. */
struct tdir {
	struct fnode n;
	struct sf_hash kids;
};

static struct stat src_version = { .st_mode = S_IFDIR | 0755 };

static const struct stat *d_st(const struct fnode *n)
{
	return &src_version;
}

static void d_access(const struct fnode *n, struct stat *st)
{
}

static struct sf_hash *d_kids(struct fnode *n)
{
	return &((struct tdir *)n)->kids;
}

static void d_drop(struct ftree *t, struct fnode *n)
{
	sf_hash_free(d_kids(n));
	free(n->name);
	free(n);
}

static const struct fnode_ops dir_ops = {
	.kind = FK_SRC_DIR, .st = d_st, .attr = fnode_dir_attr, .access = d_access,
	.kids = d_kids, .drop = d_drop,
};

/* What stat shows of n, as attr.c fills it. */
static struct stat shown(struct fnode *n)
{
	struct stat st = { 0 };
	n->ops->attr(NULL, n, 0, false, &st);
	access_fill(n, &st);
	return st;
}

/* A lookup of view node `vn` in `dir`, as names.c makes it. */
static struct fnode *looked_up(struct ftree *t, struct fnode *dir, struct sf_node *vn)
{
	fnode_find(t);
	return fnode_found(t, fnode_for_view(t, dir, vn));
}

/* How many nodes root r's ring holds (r too), and whether n is one. */
static size_t ring_count(struct fnode *r, const struct fnode *n, bool *has)
{
	size_t k = 0;
	*has = false;
	struct view_node *x = view_of(r);
	do {
		*has = *has || &x->n == n;
		k++;
	} while ((x = x->ring_next) != view_of(r));
	return k;
}

/* Whether the tree's list of entered roots is exactly `want` (in order). */
static bool entered_are(const struct ftree *t, struct fnode *const *want, size_t n)
{
	size_t k = 0;
	for (const struct view_root *r = t->views; r; r = r->next_entered, k++)
		if (k >= n || &r->v.n != want[k] ||
		    (r->prev_entered ? &r->prev_entered->v.n != want[k - 1] : k != 0))
			return false;
	return k == n;
}

int main(void)
{
	struct ftree t = { 0 };
	fnode_init(&t);
	struct fnode *dir = t.root = fnode_new(&t, &dir_ops, sizeof(struct tdir), NULL, "");
	dir->nlookup = 1;

	struct sf_view *v = sf_view_new(NULL, "c.tar");
	struct sf_node *sub = sf_dir_add_dir(v->root, "sub", 3);
	struct sf_node *f = sf_dir_add_file(sub, "f", 1);
	struct sf_node *empty = sf_dir_add_file(sub, "empty", 5);
	struct sf_node *bad = sf_dir_add_file(sub, "bad", 3);
	CHECK(sub && f && empty && bad);
	CHECK_EQ_U(sf_file_set_bytes(f, "hello", 5), 0);
	CHECK_EQ_U(sf_file_set_bytes(empty, "", 0), 0);
	CHECK_EQ_U(sf_file_set_broken(bad, 0, "test"), 0);

	/* placed unopened: a directory with its container's version */
	struct stat container = { .st_mode = S_IFREG | 0640, .st_uid = 7, .st_gid = 8,
				  .st_mtim = { 100, 5 } };
	fnode_find(&t);
	struct fnode *r = fnode_for_root(&t, dir, "c", "c.tar", &container);
	fnode_attach(r);
	r = fnode_found(&t, r);
	CHECK(r && view_root_of(r) == (struct view_root *)r);
	CHECK_STR(view_root_of(r)->file, "c.tar");
	CHECK(fnode_vn(r) == NULL && fnode_view_is(r, SF_DIR));
	struct stat st = shown(r);
	CHECK(S_ISDIR(st.st_mode));
	CHECK_EQ_U(st.st_mode & 07777, 0550); /* read bits, x where r */
	CHECK_EQ_U(st.st_uid, 7);
	CHECK(fnode_child(dir, "c") == r);

	/* entered: it hosts its view's root, and holds the view */
	fnode_find(&t);
	fnode_enter(&t, r, v->root);
	fnode_found(&t, NULL);
	CHECK(fnode_vn(r) == v->root && sf_node_host(v->root) == r);
	bool has;
	CHECK(entered_are(&t, &r, 1));
	CHECK_EQ_U(ring_count(r, r, &has), 1);
	CHECK(has);

	/* members: named by their view node, their root's version */
	struct fnode *s = looked_up(&t, r, sub);
	struct fnode *fn = looked_up(&t, s, f);
	CHECK(looked_up(&t, s, f) == fn); /* its host: the same node */
	fnode_forget(&t, fn, 1);
	CHECK(fn->name == NULL);
	CHECK_STR(fnode_name(fn), "f");
	CHECK(fnode_st(fn) == fnode_st(r));
	CHECK(view_root_of(fn) == NULL);
	char buf[FNODE_PATH_MAX];
	CHECK_STR(fnode_path(fn, buf, sizeof buf), "c/sub/f");
	st = shown(fn);
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ_U(st.st_size, 5);
	CHECK_EQ_U(st.st_mode & 07777, 0440);
	CHECK(in_view(fn));

	/* an empty file shows 0 bytes; a failed one claims a byte, so that
	 * reads reach the daemon and fail */
	struct fnode *e0 = looked_up(&t, s, empty);
	struct fnode *b = looked_up(&t, s, bad);
	CHECK_EQ_U(shown(e0).st_size, 0);
	CHECK_EQ_U(shown(b).st_size, 1);

	/* another view's root (made opened) and member: each root's ring
	 * holds its own nodes only, and the tree lists both roots */
	struct sf_view *v2 = sf_view_new(NULL, "d.tar");
	struct sf_node *g = sf_dir_add_file(v2->root, "g", 1);
	CHECK(v2 && g);
	fnode_find(&t);
	struct fnode *r2 = fnode_for_root(&t, dir, "d", NULL, &container);
	fnode_enter(&t, r2, v2->root);
	fnode_attach(r2);
	r2 = fnode_found(&t, r2);
	struct fnode *gn = looked_up(&t, r2, g);
	CHECK(entered_are(&t, (struct fnode *[]){ r2, r }, 2));
	/* newest first after the root: children before their parents */
	struct fnode *order[] = { r, b, e0, fn, s };
	struct view_node *x = view_of(r);
	for (size_t i = 0; i < 5; i++, x = x->ring_next)
		CHECK(&x->n == order[i] && x->ring_next->ring_prev == x);
	CHECK(x == view_of(r));
	CHECK(!(ring_count(r, gn, &has), has));
	CHECK_EQ_U(ring_count(r2, gn, &has), 2);
	CHECK(has);
	/* forgotten, a node leaves its ring; a root leaves the list */
	fnode_forget(&t, gn, 1);
	CHECK_EQ_U(ring_count(r2, r2, &has), 1);
	fnode_forget(&t, r2, 1);
	CHECK(entered_are(&t, &r, 1));
	sf_view_unref(v2);

	/* forgotten: the view node has no host left; the view is still held
	 * by the others (no SRC file closed) */
	fnode_forget(&t, fn, 1);
	CHECK(sf_node_host(f) == NULL);
	CHECK(sf_node_host(sub) == s);
	fnode_forget(&t, e0, 1);
	fnode_forget(&t, b, 1);
	fnode_forget(&t, s, 1);
	CHECK(sf_node_host(sub) == NULL);
	CHECK_EQ_U(ring_count(r, r, &has), 1);
	CHECK_EQ_U(t.live, 2);
	fnode_fini(&t);
	sf_view_unref(v);
	CHECK_DONE();
}
