#include "vnode.h"

#include <stdlib.h>
#include <string.h>

#include "access.h"

static const struct stat *member_st(const struct fnode *n)
{
	return &view_of(n)->root->st;
}

static const struct stat *root_st(const struct fnode *n)
{
	return &((const struct view_root *)n)->st;
}

static const char *member_name(const struct fnode *n)
{
	return sf_node_name(view_of(n)->vn);
}

static void view_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		      struct stat *st)
{
	/* a root not entered yet is a directory (fs/roots.h) */
	struct sf_node *vn = fnode_vn(n);
	st->st_nlink = 1;
	if (!vn || sf_node_kind(vn) == SF_DIR) {
		st->st_mode = S_IFDIR;
		st->st_nlink = 2;
	} else if (sf_node_kind(vn) == SF_LINK) {
		st->st_mode = S_IFLNK;
		st->st_size = (off_t)strlen(sf_link_target(vn));
	} else {
		/* a file listed before its build shows the size its format
		 * announced (readdirplus) */
		struct sf_file_size fs = sf_file_size(vn);
		st->st_mode = S_IFREG;
		st->st_size = (off_t)fs.size;
		/* The kernel answers a read of a 0-byte file itself, as an
		 * empty success: a file whose content failed (broken, or never
		 * built) claims one byte so that reads reach op_read and fail
		 * with EIO (docs/design.md §3.4). */
		if (st->st_size == 0 && (fs.broken || !fs.known))
			st->st_size = 1;
	}
}

/* Its view node may outlive it (the view keeps it): it no longer hosts it.
 * It leaves its root's ring, and a root the tree's list of entered ones
 * (a root leaves last: its members hold it). */
static void view_detach(struct ftree *t, struct fnode *n)
{
	struct view_node *v = view_of(n);
	if (v->vn && sf_node_host(v->vn) == n)
		sf_node_set_host(v->vn, NULL);
	v->ring_prev->ring_next = v->ring_next;
	v->ring_next->ring_prev = v->ring_prev;
	struct view_root *r = view_root_of(n);
	if (!r || !v->vn)
		return;
	if (r->prev_entered)
		r->prev_entered->next_entered = r->next_entered;
	else
		t->views = r->next_entered;
	if (r->next_entered)
		r->next_entered->prev_entered = r->prev_entered;
}

/* A view's reference closes files of SRC only if it is the last (most
 * nodes of a view share it): dropped here if not. */
static bool view_holds_src(struct fnode *n)
{
	struct view_node *v = view_of(n);
	if (v->view && sf_view_unref_shared(v->view))
		v->view = NULL;
	return v->view != NULL;
}

static void member_drop(struct ftree *t, struct fnode *n)
{
	sf_view_unref(view_of(n)->view);
	free(n);
}

static void root_drop(struct ftree *t, struct fnode *n)
{
	struct view_root *r = (struct view_root *)n;
	sf_view_unref(r->v.view);
	free(r->file);
	free(n->name);
	free(n);
}

static const struct fnode_ops member_ops = {
	.kind = FK_VIEW, .cached = true, .st = member_st, .attr = view_attr,
	.access = access_shown, .name = member_name, .detach = view_detach,
	.holds_src = view_holds_src, .drop = member_drop,
};

static const struct fnode_ops root_ops = {
	.kind = FK_VIEW, .cached = true, .st = root_st, .attr = view_attr,
	.access = access_shown, .detach = view_detach, .holds_src = view_holds_src,
	.drop = root_drop,
};

void fnode_enter(struct ftree *t, struct fnode *n, struct sf_node *vn)
{
	struct view_node *v = view_of(n);
	v->view = sf_view_ref(sf_node_view(vn));
	v->vn = vn;
	struct view_root *r = view_root_of(n);
	if (r) {
		r->prev_entered = NULL;
		r->next_entered = t->views;
		if (t->views)
			t->views->prev_entered = r;
		t->views = r;
	}
	/* a root placed unopened may find its view's root hosted already */
	if (!sf_node_host(vn))
		sf_node_set_host(vn, n);
	atomic_store_explicit(&v->entered, true, memory_order_release);
}

struct fnode *fnode_for_view(struct ftree *t, struct fnode *parent, struct sf_node *vn)
{
	struct fnode *n = sf_node_host(vn);
	if (n)
		return n;
	n = fnode_new(t, &member_ops, sizeof(struct view_node), parent, NULL);
	if (!n)
		return NULL;
	struct view_node *m = view_of(n), *r = &view_of(parent)->root->v;
	m->root = view_of(parent)->root;
	m->ring_prev = r;
	m->ring_next = r->ring_next;
	r->ring_next->ring_prev = m;
	r->ring_next = m;
	fnode_enter(t, n, vn);
	return n;
}

struct fnode *fnode_for_root(struct ftree *t, struct fnode *dir, const char *name,
			     const char *file, const struct stat *st)
{
	struct fnode *n = fnode_new(t, &root_ops, sizeof(struct view_root), dir, name);
	if (!n)
		return NULL;
	struct view_root *r = (struct view_root *)n;
	r->v.root = r;
	r->v.ring_prev = r->v.ring_next = &r->v;
	r->st = *st;
	if (file && !(r->file = strdup(file))) {
		fnode_discard(t, n);
		return NULL;
	}
	return n;
}
