/* Resolving names: LOOKUP in SRC directories (SRC's own entries first,
 * then the views placed beside containers), in views, and in .shardfs/;
 * FORGET. Each answer takes the kernel's lookup reference on its node. */
#include "names.h"

#include <string.h>

#include "attr.h"
#include "meta.h"
#include "transport.h"
#include "request.h"
#include "roots.h"
#include "src.h"
#include "vnode.h"
#include "watch.h"

static void reply_entry(fuse_req_t req, struct fnode *n, double timeout)
{
	struct daemon *dm = daemon_of(req);
	struct fuse_entry_param ep = { 0 };
	ep.ino = fnode_ino(n);
	ep.generation = 1;
	ep.attr_timeout = timeout;
	ep.entry_timeout = timeout;
	view_file_ready(dm, n);
	fill_attr(dm, n, fuse_req_ctx(req)->pid, true, &ep.attr);
	if (fuse_reply_entry(req, &ep) != 0)
		fnode_forget(&dm->tree, n, 1);
}

static void reply_negative(fuse_req_t req, double timeout)
{
	struct fuse_entry_param ep = { 0 };
	ep.entry_timeout = timeout;
	fuse_reply_entry(req, &ep);
}

/* Replies with a node the lookup took a reference on (NULL: out of memory). */
static void reply_node(fuse_req_t req, struct fnode *n, double timeout)
{
	if (!n)
		fuse_reply_err(req, ENOMEM);
	else
		reply_entry(req, n, timeout);
}

int find_src(struct daemon *dm, struct fnode *dir, const char *name, bool whole,
	     struct listing **l, struct fnode **out)
{
	int src = src_find(dm, dir, name, out);
	if (src != -ENOENT)
		return src;
	if (!*l) {
		int rc = whole ? listing_get(dm, dir, l) : listing_for_name(dm, dir, name, l);
		if (rc)
			return rc;
		if (!*l)
			return 0;
	}
	/* a lookup checks that the view still stands for its container; a
	 * listing (whole) does not stat every container it lists. Neither
	 * opens a view it can place unopened (fs/roots.h): entering does. A
	 * listing gives no node for another view not opened yet: the kernel
	 * looks it up when it is used, and that opens it. */
	struct lentry *le = whole ? listing_view(*l, name)
				  : listing_view_now(dm, dir, name, l);
	if (!le)
		return 0;
	bool unopened = listing_places_unopened(le->fmt);
	struct sf_view *v = whole || unopened ? listing_opened(dm, le)
					      : listing_open(dm, dir, *l, le);
	if (whole && v && !listing_container_now(dm, dir, le)) {
		/* given another owner, group or mode since listed: no node
		 * with what it was, the kernel looks the name up (anew) */
		sf_view_unref(v);
		return 0;
	}
	if (!v && !unopened)
		return whole ? 0 : -ENOMEM;
	fnode_find(&dm->tree);
	*out = fnode_found(&dm->tree, root_place(&dm->tree, dir, le, v));
	sf_view_unref(v); /* its node holds it */
	return *out ? 0 : -ENOMEM;
}

static void lookup_src(fuse_req_t req, struct fnode *dir, const char *name)
{
	struct daemon *dm = daemon_of(req);
	/* answered from memory, whatever the source does */
	if (dir == dm->tree.root && strcmp(name, ".shardfs") == 0) {
		reply_node(req, meta_node(&dm->tree, dir, name, true, META_STATS),
			   VIEW_TIMEOUT);
		return;
	}
	if (!section_begin(req, "lookup", src_of(dir)->rel, name))
		return;
	watch_dir(&dm->watch, dir);
	struct listing *l = NULL;
	struct fnode *n = NULL;
	int rc = find_src(dm, dir, name, false, &l, &n);
	listing_unref(l);
	if (rc)
		reply_src_err(req, -rc);
	else if (!n)
		reply_negative(req, SRC_TIMEOUT);
	else
		reply_entry(req, n, SRC_TIMEOUT);
	section_end(dm);
}

/* Answers a lookup in view directory dir with what it found: kid (pinned,
 * its pin handed to the fnode) or nothing. */
static void answer_view(fuse_req_t req, struct daemon *dm, struct fnode *dir, struct sf_node *kid)
{
	if (!kid) {
		reply_negative(req, VIEW_TIMEOUT);
		return;
	}
	fnode_find(&dm->tree);
	struct fnode *n = fnode_for_view(&dm->tree, dir, kid);
	/* the fnode holds the node now (or, out of memory, nothing does) */
	sf_node_unpin(kid);
	reply_node(req, fnode_found(&dm->tree, n), VIEW_TIMEOUT);
}

static void look_in_view(fuse_req_t req, struct fnode *dir, const char *name)
{
	struct daemon *dm = daemon_of(req);
	int rc = root_enter(dm, dir);
	if (rc) {
		reply_src_err(req, -rc);
		return;
	}
	struct sf_node *vn = view_of(dir)->vn;
	if (sf_node_kind(vn) != SF_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	struct sf_err e = { { 0 } };
	struct sf_node *kid = NULL;
	/* a lookup hook answers quickly (but for its first call); a populate
	 * lists the whole directory */
	bool listed = sf_dir_is_populated(vn);
	if (!listed && !sf_dir_has_lookup(vn))
		transport_hand_off();
	rc = sf_dir_find(vn, name, &kid, &e);
	if (!listed && sf_dir_is_populated(vn))
		stat_add(&dm->stats.dirs_listed, 1);
	listing_report_warnings(dm, view_of(dir)->view);
	if (rc) {
		fnode_errlog(&dm->stats, dir, sf_err_msg(&e, rc));
		fuse_reply_err(req, EIO);
		return;
	}
	answer_view(req, dm, dir, kid);
}

static void lookup_view(fuse_req_t req, struct fnode *dir, const char *name)
{
	struct daemon *dm = daemon_of(req); /* req is gone once answered */
	/* a name the view already holds, or knows absent, reads nothing: it is
	 * answered with no section at the source, so that it answers while
	 * the source holds every thread the pool gives it */
	struct sf_node *vn = fnode_vn(dir), *kid;
	if (vn && sf_node_kind(vn) == SF_DIR && sf_dir_find_known(vn, name, &kid)) {
		answer_view(req, dm, dir, kid);
		return;
	}
	char pb[FNODE_PATH_MAX];
	if (!section_begin(req, "lookup", node_path(dir, pb), name))
		return;
	look_in_view(req, dir, name);
	section_end(dm);
}

static void lookup_meta(fuse_req_t req, struct fnode *dir, const char *name)
{
	enum meta_file which;
	if (strcmp(name, "stats.json") == 0)
		which = META_STATS;
	else if (strcmp(name, "errors") == 0)
		which = META_ERRORS;
	else {
		reply_negative(req, VIEW_TIMEOUT);
		return;
	}
	struct daemon *dm = daemon_of(req);
	reply_node(req,
		   dm->no_open ? meta_snapshot_node(dm, dir, name, which, fuse_req_ctx(req)->pid)
			       : meta_node(&dm->tree, dir, name, false, which),
		   0);
}

/* A lookup by the kind of its directory (none: not a directory). */
static void (*const lookup_in[FK_KINDS])(fuse_req_t req, struct fnode *dir, const char *name) = {
	[FK_SRC_DIR] = lookup_src,
	[FK_VIEW] = lookup_view,
	[FK_META_DIR] = lookup_meta,
};

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	count(req, REQ_LOOKUP);
	struct fnode *dir = fn_of(req, parent);
	dir_mark_used(daemon_of(req), dir);
	if (lookup_in[fnode_kind(dir)])
		lookup_in[fnode_kind(dir)](req, dir, name);
	else
		fuse_reply_err(req, ENOTDIR);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	count(req, REQ_FORGET);
	/* a node freed that closes files opens its own section (fnode.c) */
	struct daemon *dm = daemon_of(req);
	if (ino != FUSE_ROOT_ID)
		fnode_forget(&dm->tree, fn_of(req, ino), nlookup);
	fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t n, struct fuse_forget_data *f)
{
	struct daemon *dm = daemon_of(req);
	for (size_t i = 0; i < n; i++) {
		count(req, REQ_FORGET);
		if (f[i].ino != FUSE_ROOT_ID)
			fnode_forget(&dm->tree, fn_of(req, f[i].ino), f[i].nlookup);
	}
	fuse_reply_none(req);
}
