#include "roots.h"

#include <errno.h>
#include <string.h>

#include "access.h"
#include "src.h"
#include "vnode.h"

/* Whether `n` is a root placed unopened for the container `le` stands
 * for: the same file (so the same format) and version. */
static bool placed_for(const struct fnode *n, const struct lentry *le)
{
	const struct view_root *r = n ? view_root_of(n) : NULL;
	return r && le && r->file && strcmp(r->file, le->file) == 0 &&
	       same_version(&r->st, le->st);
}

struct fnode *root_place(struct ftree *t, struct fnode *dir, const struct lentry *le,
			 struct sf_view *v)
{
	struct fnode *n = fnode_child(dir, le->name);
	if (v && n && fnode_view(n) == v)
		return n;
	if (placed_for(n, le) && (!v || !view_of(n)->vn)) {
		/* its inode keeps naming the view: it takes the one opened
		 * meanwhile, if not entered yet */
		if (v)
			fnode_enter(t, n, sf_view_root(v));
		return n;
	}
	if (!v) {
		/* shown as the opened view would be: its only file is its
		 * container, so access_narrow would change nothing */
		n = fnode_for_root(t, dir, le->name, le->file, le->st);
	} else if (!(n = sf_node_host(sf_view_root(v)))) {
		struct stat st = *le->st;
		access_narrow(&st, v);
		if (!(n = fnode_for_root(t, dir, le->name, NULL, &st)))
			return NULL;
		fnode_enter(t, n, sf_view_root(v));
	}
	if (n)
		fnode_attach(n);
	return n;
}

int root_enter(struct daemon *dm, struct fnode *n)
{
	if (!view_root_of(n) || fnode_vn(n))
		return 0; /* no view root, or one entered already */
	/* the entry found again as a lookup of the name finds it: the
	 * directory's listing may have been made anew since */
	struct fnode *dir = n->parent;
	struct listing *l = NULL;
	struct sf_view *v = NULL;
	int rc = listing_for_name(dm, dir, n->name, &l);
	struct lentry *le = rc == 0 && l ? listing_view_now(dm, dir, n->name, &l) : NULL;
	if (rc == 0 && !placed_for(n, le))
		rc = -ESTALE;
	else if (rc == 0 && !(v = listing_open(dm, dir, l, le)))
		rc = -ENOMEM;
	listing_unref(l);
	if (rc)
		return rc;
	/* another thread may have entered it meanwhile (the same view) */
	pthread_mutex_lock(&dm->tree.lock);
	if (!view_of(n)->vn)
		fnode_enter(&dm->tree, n, sf_view_root(v));
	pthread_mutex_unlock(&dm->tree.lock);
	sf_view_unref(v); /* the node holds it */
	return 0;
}
