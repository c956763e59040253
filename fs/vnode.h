/* The nodes of views (fs/fnode.h): a view root, placed beside its
 * container in a SRC directory, and the members under it. A member keeps
 * no name and no stat of its own: its view node names it, and its root's
 * version (owner, mode, times) is what every member shows. */
#ifndef FS_VNODE_H
#define FS_VNODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "fnode.h"
#include "sf_view.h"

struct view_root;

/* FK_VIEW: a member, and the start of a root. */
struct view_node {
	struct fnode n;
	struct sf_view *view;
	struct sf_node *vn;
	struct view_root *root;       /* its view's root (itself for a root) */
	/* its root's nodes, a ring through the root, newest first after it
	 * (the tree's lock): what the kernel holds of a view is found
	 * without a walk of every node (views_gone_in) */
	struct view_node *ring_prev, *ring_next;
	/* set once view and vn are (a root placed unopened is not until
	 * entered): read vn through fnode_vn from request threads */
	atomic_bool entered;
};

/* FK_VIEW: a view's root. */
struct view_root {
	struct view_node v;
	/* once entered, in the tree's list of entered roots (`views`) */
	struct view_root *prev_entered, *next_entered;
	struct stat st;               /* its container's version, narrowed */
	/* A root placed from its listing entry, its container not opened
	 * (fs/roots.h): the container's file name in its directory (which
	 * names its format too), to find the entry again when the view is
	 * entered; NULL for a root made opened. */
	char *file;
};

/* n's view part (n is an FK_VIEW node). */
static inline struct view_node *view_of(const struct fnode *n)
{
	return (struct view_node *)n;
}

/* n's root part; NULL when n is no view root. */
static inline struct view_root *view_root_of(const struct fnode *n)
{
	if (fnode_kind(n) != FK_VIEW)
		return NULL;
	struct view_root *r = view_of(n)->root;
	return (const struct fnode *)r == n ? r : NULL;
}

/* The view `n` is a node of; NULL when `n` is no view node (or a root
 * placed unopened). */
static inline struct sf_view *fnode_view(const struct fnode *n)
{
	return fnode_kind(n) == FK_VIEW ? view_of(n)->view : NULL;
}

/* The view node `n` stands for; NULL when `n` is no view node, or a view
 * root not entered yet. */
static inline struct sf_node *fnode_vn(const struct fnode *n)
{
	if (fnode_kind(n) != FK_VIEW)
		return NULL;
	const struct view_node *v = view_of(n);
	return atomic_load_explicit(&v->entered, memory_order_acquire) ? v->vn : NULL;
}

/* Whether `n` is a view node of kind `k` (a root not entered yet is a
 * directory). */
static inline bool fnode_view_is(const struct fnode *n, enum sf_kind k)
{
	if (fnode_kind(n) != FK_VIEW)
		return false;
	struct sf_node *vn = fnode_vn(n);
	return (vn ? sf_node_kind(vn) : SF_DIR) == k;
}

/* The fnode for view node `vn` under view node `parent`, creating it on
 * first use (the tree's lock held; an on-demand node must be pinned by the
 * caller until this returns). */
struct fnode *fnode_for_view(struct ftree *t, struct fnode *parent, struct sf_node *vn);
/* A view root named `name` in SRC directory `dir`, showing version `st`:
 * of a container `file` not opened yet (fs/roots.h), or with `file` NULL
 * of one opened, to be entered at once (the tree's lock held). */
struct fnode *fnode_for_root(struct ftree *t, struct fnode *dir, const char *name,
			     const char *file, const struct stat *st);
/* Gives view root `n` (placed unopened) its view's root `vn`, once,
 * taking a reference on the view (the tree's lock held). */
void fnode_enter(struct ftree *t, struct fnode *n, struct sf_node *vn);

#endif
