/* Attributes: what a node shows to stat (GETATTR), a symlink's target
 * (READLINK) and the filesystem's figures (STATFS). The .shardfs/ files
 * show the size of the snapshot their caller reads (fs/meta.h). */
#include "attr.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "access.h"
#include "listing.h"
#include "transport.h"
#include "request.h"
#include "src.h"
#include "vnode.h"

static void fill(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, struct stat *st)
{
	memset(st, 0, sizeof *st);
	const struct stat *was = fnode_st(n);
	st->st_ino = n->ino;
	st->st_atim = was->st_atim;
	st->st_mtim = was->st_mtim;
	st->st_ctim = was->st_ctim;
	st->st_blksize = 65536;
	n->ops->attr(dm, n, tid, lookup, st);
	access_fill(n, st);
	st->st_blocks = (st->st_size + 511) / 512;
}

void fill_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, struct stat *st)
{
	/* a SRC directory's stat is updated in place as its entries change
	 * (src_child, under the tree's lock): it is read under that lock */
	bool in_place = n->ops->st_in_place;
	if (in_place)
		pthread_mutex_lock(&dm->tree.lock);
	fill(dm, n, tid, lookup, st);
	if (in_place)
		pthread_mutex_unlock(&dm->tree.lock);
}

int view_file_ready(struct daemon *dm, struct fnode *n)
{
	if (!fnode_view_is(n, SF_FILE))
		return 0;
	struct sf_err e = { { 0 } };
	/* a build that announced its size is cheap (sf_file_set_build_sized) */
	struct view_node *v = view_of(n);
	if (!sf_file_size(v->vn).known)
		transport_hand_off();
	/* a build reads the container (nested in the request's own section) */
	char pb[FNODE_PATH_MAX];
	section_begin_must(dm, "build", node_path(n, pb));
	int rc = sf_file_ready(v->vn, dm->view_cache, &e);
	section_end(dm);
	if (rc)
		fnode_errlog(&dm->stats, n, sf_err_msg(&e, rc));
	listing_report_warnings(dm, v->view);
	return rc;
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_GETATTR);
	struct fnode *n = fn_of(req, ino);
	struct daemon *dm = daemon_of(req);
	/* a listing's probe used (fs/dirs.c), or another of its names */
	dir_mark_used(dm, n->parent);
	struct stat st;
	if (fnode_view_is(n, SF_FILE)) {
		/* a build reads the container: refused like any request at the
		 * source rather than take a pool's last thread */
		char pb[FNODE_PATH_MAX];
		if (!section_begin(req, "getattr", node_path(n, pb), NULL))
			return;
		view_file_ready(dm, n);
		section_end(dm);
	}
	if (fi && n->ops->read_end)
		n->ops->read_end(n);
	fill_attr(dm, n, fuse_req_ctx(req)->pid, false, &st);
	double t = n->ops->live ? 0 : in_view(n) ? VIEW_TIMEOUT : SRC_TIMEOUT;
	fuse_reply_attr(req, &st, t);
}

/* Whether the caller may read what shows `st`. Its other groups are read
 * from /proc by libfuse; when they cannot be (the caller gone), only its
 * own group counts: denying rather than guessing. */
static bool caller_may_read(fuse_req_t req, const struct stat *st)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);
	gid_t few[32], *groups = few;
	int cap = 32, n = fuse_req_getgroups(req, cap, few);
	if (n > cap && (groups = malloc((size_t)n * sizeof *groups)))
		n = fuse_req_getgroups(req, cap = n, groups);
	/* n < 0: not known; n > cap: more than was room for (groups changed) */
	bool yes = access_can_read(st, c->uid, c->gid, groups,
				   !groups || n < 0 ? 0 : n > cap ? cap : n);
	if (groups != few)
		free(groups);
	return yes;
}

static void readlink_view(fuse_req_t req, struct fnode *n)
{
	if (!fnode_view_is(n, SF_LINK)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* its target is the alias file's content: for its readers */
	struct stat st;
	fill_attr(daemon_of(req), n, fuse_req_ctx(req)->pid, false, &st);
	if (caller_may_read(req, &st))
		fuse_reply_readlink(req, sf_link_target(view_of(n)->vn));
	else
		fuse_reply_err(req, EACCES);
}

static void readlink_src(fuse_req_t req, struct fnode *n)
{
	if (!S_ISLNK(src_of(n)->st.st_mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	char buf[PATH_MAX + 1];
	if (!section_begin(req, "readlink", src_of(n)->rel, NULL))
		return;
	int rc = src_readlink(daemon_of(req), n, buf);
	section_end(daemon_of(req));
	if (rc)
		reply_src_err(req, -rc);
	else
		fuse_reply_readlink(req, buf);
}

/* The kinds that may be symbolic links (others: EINVAL). */
static void (*const readlink_of[FK_KINDS])(fuse_req_t req, struct fnode *n) = {
	[FK_SRC_OTHER] = readlink_src,
	[FK_VIEW] = readlink_view,
};

void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	count(req, REQ_READLINK);
	struct fnode *n = fn_of(req, ino);
	if (readlink_of[fnode_kind(n)])
		readlink_of[fnode_kind(n)](req, n);
	else
		fuse_reply_err(req, EINVAL);
}

void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	count(req, REQ_STATFS);
	struct statvfs sv;
	if (!section_begin(req, "statfs", ".", NULL))
		return;
	int rc = fstatvfs(daemon_of(req)->src_fd, &sv) < 0 ? errno : 0;
	section_end(daemon_of(req));
	if (rc) {
		reply_src_err(req, rc);
		return;
	}
	sv.f_flag |= ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}
