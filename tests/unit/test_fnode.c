/* The daemon's tree of nodes without a mount (fs/fnode.c): children by
 * name, the kernel's references and what a FORGET frees, the section that
 * freeing SRC-holding nodes runs in, paths for error lines, and the order
 * in which the cap on nodes asks the kernel to drop entries. Each node
 * here is of a test kind whose table records what the tree called. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fnode.h"
#include "stats.h"

/* A directory of the test kind: a name table, a path, whether dropping it
 * closes a file of SRC. */
struct tnode {
	struct fnode n;
	struct sf_hash kids;
	const char *rel;
	bool holds;
};

static struct stat version;
static int dropped, detached, entered, left;

static const struct stat *t_st(const struct fnode *n)
{
	return &version;
}

static void t_access(const struct fnode *n, struct stat *st)
{
}

static struct sf_hash *t_kids(struct fnode *n)
{
	return &((struct tnode *)n)->kids;
}

static const char *t_rel(const struct fnode *n)
{
	return ((const struct tnode *)n)->rel;
}

static void t_detach(struct ftree *t, struct fnode *n)
{
	detached++;
}

static bool t_holds(struct fnode *n)
{
	return ((struct tnode *)n)->holds;
}

static void t_drop(struct ftree *t, struct fnode *n)
{
	dropped++;
	sf_hash_free(t_kids(n));
	free(n->name);
	free(n);
}

/* A view member: named by its kind, as vnode.c's are. */
static const char *v_name(const struct fnode *n)
{
	return "member";
}

static const struct fnode_ops dir_ops = {
	.kind = FK_SRC_DIR, .st = t_st, .attr = fnode_dir_attr, .access = t_access,
	.kids = t_kids, .rel = t_rel, .detach = t_detach, .holds_src = t_holds, .drop = t_drop,
};

static const struct fnode_ops view_ops = {
	.kind = FK_VIEW, .cached = true, .st = t_st, .attr = fnode_dir_attr,
	.access = t_access, .name = v_name, .drop = t_drop,
};

static void enter(void *arg)
{
	entered++;
}

static void leave(void *arg)
{
	left++;
}

static struct fnode *mk(struct ftree *t, const struct fnode_ops *ops, struct fnode *parent,
			const char *name, const char *rel)
{
	struct fnode *n = fnode_new(t, ops, sizeof(struct tnode), parent, name);
	CHECK(n != NULL);
	((struct tnode *)n)->rel = rel;
	return n;
}

/* A lookup: found or made under the lock, then the kernel's reference. */
static struct fnode *looked_up(struct ftree *t, struct fnode *n)
{
	fnode_find(t);
	return fnode_found(t, n);
}

static void children_by_name(void)
{
	struct ftree t = { 0 };
	fnode_init(&t);
	struct fnode *root = t.root = mk(&t, &dir_ops, NULL, "", ".");
	root->nlookup = 1;
	struct fnode *a = mk(&t, &dir_ops, root, "a", "a");
	fnode_attach(a);
	CHECK(fnode_child(root, "a") == a);
	CHECK(fnode_child(root, "b") == NULL);
	/* a new version of the name takes its place; the old one lives on
	 * while the kernel holds it */
	looked_up(&t, a);
	struct fnode *a2 = mk(&t, &dir_ops, root, "a", "a");
	fnode_attach(a2);
	CHECK(fnode_child(root, "a") == a2);
	CHECK_EQ_U(t.live, 3);
	CHECK_EQ_U(root->refs, 2);
	fnode_forget(&t, a, 1);
	CHECK_EQ_U(t.live, 2);
	CHECK_EQ_U(root->refs, 1);
	CHECK(fnode_child(root, "a") == a2);
	CHECK_EQ_U(fnode_ino(root), 1);
	CHECK(fnode_ino(a2) == (uint64_t)(uintptr_t)a2);
	/* inode numbers count the nodes made, the root's first: a name made
	 * anew gets a number no node had, whatever address it got */
	CHECK_EQ_U(root->ino, 1);
	CHECK_EQ_U(a2->ino, 3);
	struct fnode *b = mk(&t, &dir_ops, root, "b", "b");
	CHECK_EQ_U(b->ino, 4);
	fnode_attach(b);
	fnode_fini(&t);
	CHECK_EQ_U(dropped, 4);
}

static void forget_frees_up_the_tree(void)
{
	struct ftree t = { .open_section = enter, .close_section = leave };
	fnode_init(&t);
	dropped = detached = entered = left = 0;
	struct fnode *root = t.root = mk(&t, &dir_ops, NULL, "", ".");
	root->nlookup = 1;
	struct fnode *d = looked_up(&t, mk(&t, &dir_ops, root, "d", "d"));
	fnode_attach(d);
	struct fnode *v = looked_up(&t, mk(&t, &view_ops, d, NULL, NULL));
	struct fnode *w = looked_up(&t, mk(&t, &view_ops, v, NULL, NULL));
	/* a reply that took two references */
	fnode_lookup_ref(w);
	fnode_forget(&t, d, 1); /* still a parent */
	CHECK_EQ_U(dropped, 0);
	fnode_forget(&t, v, 1);
	CHECK_EQ_U(dropped, 0);
	fnode_forget(&t, w, 1);
	CHECK_EQ_U(dropped, 0);
	/* the last reference frees w, then v and d which only it held; d
	 * holds SRC files: one section for the batch */
	((struct tnode *)d)->holds = true;
	fnode_forget(&t, w, 1);
	CHECK_EQ_U(dropped, 3);
	CHECK_EQ_U(detached, 1); /* d's kind detaches; the view kind has nothing to */
	CHECK_EQ_U(entered, 1);
	CHECK_EQ_U(left, 1);
	CHECK(fnode_child(root, "d") == NULL);
	CHECK_EQ_U(root->refs, 0);
	CHECK_EQ_U(t.live, 1);
	/* nodes holding nothing of SRC open no section */
	struct fnode *e = looked_up(&t, mk(&t, &dir_ops, root, "e", "e"));
	fnode_attach(e);
	fnode_forget(&t, e, 1);
	CHECK_EQ_U(entered, 1);
	fnode_fini(&t);
}

static void paths(void)
{
	struct ftree t = { 0 };
	fnode_init(&t);
	struct fnode *root = t.root = mk(&t, &dir_ops, NULL, "", ".");
	struct fnode *d = mk(&t, &dir_ops, root, "d", "x/d");
	struct fnode *v = mk(&t, &view_ops, d, "view", NULL);
	struct fnode *w = mk(&t, &view_ops, v, NULL, NULL);
	char buf[FNODE_PATH_MAX];
	CHECK_STR(fnode_path(w, buf, sizeof buf), "x/d/view/member");
	CHECK_STR(fnode_path(d, buf, sizeof buf), "x/d");
	CHECK_STR(fnode_path(root, buf, sizeof buf), "");
	/* a view beside a container at SRC's top */
	struct fnode *top = mk(&t, &view_ops, root, "top", NULL);
	CHECK_STR(fnode_path(top, buf, sizeof buf), "top");
	/* too long: its end, after "..." */
	char small[12];
	const char *p = fnode_path(w, small, sizeof small);
	CHECK(strncmp(p, "...", 3) == 0);
	CHECK(strlen(p) == sizeof small - 1);
	CHECK_STR(p + strlen(p) - 6, "member");
	fnode_fini(&t);
}

static void oldest_leaves_first(void)
{
	struct ftree t = { 0 };
	fnode_init(&t);
	struct fnode *root = t.root = mk(&t, &dir_ops, NULL, "", ".");
	root->nlookup = 1;
	struct fnode *d = looked_up(&t, mk(&t, &dir_ops, root, "d", "d"));
	struct fnode *f[4];
	const char *names[4] = { "f0", "f1", "f2", "f3" };
	for (int i = 0; i < 4; i++)
		f[i] = looked_up(&t, mk(&t, &dir_ops, d, names[i], names[i]));
	/* looked up again: the most recent now */
	looked_up(&t, f[0]);
	struct fnode_leaf out[8];
	pthread_mutex_lock(&t.lock);
	size_t k = fnode_oldest_leaves(&t, out, 2);
	pthread_mutex_unlock(&t.lock);
	/* d holds children and the root is no entry: f1, f2 first */
	CHECK_EQ_U(k, 2);
	CHECK_STR(out[0].name, "f1");
	CHECK_STR(out[1].name, "f2");
	CHECK(out[0].dir == fnode_ino(d));
	for (size_t i = 0; i < k; i++)
		free(out[i].name);
	/* the next call goes on from there */
	pthread_mutex_lock(&t.lock);
	k = fnode_oldest_leaves(&t, out, 2);
	pthread_mutex_unlock(&t.lock);
	CHECK_EQ_U(k, 2);
	CHECK_STR(out[0].name, "f3");
	CHECK_STR(out[1].name, "f0");
	for (size_t i = 0; i < k; i++)
		free(out[i].name);
	fnode_fini(&t);
}

int main(void)
{
	children_by_name();
	forget_frees_up_the_tree();
	paths();
	oldest_leaves_first();
	CHECK_DONE();
}
