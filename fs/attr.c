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
#include "meta.h"
#include "request.h"
#include "src.h"

static void fill(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = fnode_ino(n);
	st->st_atim = n->st.st_atim;
	st->st_mtim = n->st.st_mtim;
	st->st_ctim = n->st.st_ctim;
	st->st_blksize = 65536;
	switch (n->kind) {
	case FK_SRC_DIR:
	case FK_META_DIR:
		st->st_mode = S_IFDIR;
		st->st_nlink = 2;
		break;
	case FK_SRC_FILE:
		st->st_mode = S_IFREG;
		st->st_nlink = 1;
		st->st_size = n->st.st_size;
		break;
	case FK_SRC_OTHER:
		st->st_mode = n->st.st_mode & S_IFMT;
		st->st_nlink = 1;
		st->st_size = n->st.st_size;
		st->st_rdev = n->st.st_rdev;
		break;
	case FK_META_FILE:
		/* live content: the caller's snapshot (attr timeout 0) */
		st->st_mode = S_IFREG;
		st->st_nlink = 1;
		meta_attr(dm, n, tid, lookup, &st->st_size, &st->st_mtim);
		st->st_ctim = st->st_mtim;
		break;
	case FK_VIEW: {
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
			/* a file listed before its build shows the size its
			 * format announced (readdirplus) */
			struct sf_file_size fs = sf_file_size(vn);
			st->st_mode = S_IFREG;
			st->st_size = (off_t)fs.size;
			/* The kernel answers a read of a 0-byte file itself, as an
			 * empty success: a file whose content failed (broken, or
			 * never built) claims one byte so that reads reach op_read
			 * and fail with EIO (docs/design.md §3.4). */
			if (st->st_size == 0 && (fs.broken || !fs.known))
				st->st_size = 1;
		}
		break;
	}
	}
	access_fill(n, st);
	st->st_blocks = (st->st_size + 511) / 512;
}

void fill_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, struct stat *st)
{
	/* a SRC directory's stat is updated in place as its entries change
	 * (src_child, under the tree's lock): it is read under that lock */
	bool dir = n->kind == FK_SRC_DIR;
	if (dir)
		pthread_mutex_lock(&dm->tree.lock);
	fill(dm, n, tid, lookup, st);
	if (dir)
		pthread_mutex_unlock(&dm->tree.lock);
}

int view_file_ready(struct daemon *dm, struct fnode *n)
{
	if (!fnode_view_is(n, SF_FILE))
		return 0;
	struct sf_err e = { { 0 } };
	/* a build that announced its size is cheap (sf_file_set_build_sized) */
	if (!sf_file_size(n->vn).known)
		transport_hand_off();
	/* a build reads the container (nested in the request's own section) */
	char pb[FNODE_PATH_MAX];
	section_begin_must(dm, "build", node_path(n, pb));
	int rc = sf_file_ready(n->vn, dm->view_cache, &e);
	section_end(dm);
	if (rc)
		fnode_errlog(&dm->stats, n, sf_err_msg(&e, rc));
	listing_report_warnings(dm, n->view);
	return rc;
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_GETATTR);
	struct fnode *n = fn_of(req, ino);
	struct daemon *dm = daemon_of(req);
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
	fill_attr(dm, n, fuse_req_ctx(req)->pid, false, &st);
	double t = n->kind == FK_META_FILE ? 0 : in_view(n) ? VIEW_TIMEOUT : SRC_TIMEOUT;
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

void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	count(req, REQ_READLINK);
	struct fnode *n = fn_of(req, ino);
	if (fnode_view_is(n, SF_LINK)) {
		/* its target is the alias file's content: for its readers */
		struct stat st;
		fill_attr(daemon_of(req), n, fuse_req_ctx(req)->pid, false, &st);
		if (caller_may_read(req, &st))
			fuse_reply_readlink(req, sf_link_target(n->vn));
		else
			fuse_reply_err(req, EACCES);
		return;
	}
	if (n->kind != FK_SRC_OTHER || !S_ISLNK(n->st.st_mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	char buf[PATH_MAX + 1];
	if (!section_begin(req, "readlink", n->rel, NULL))
		return;
	int rc = src_readlink(daemon_of(req), n, buf);
	section_end(daemon_of(req));
	if (rc)
		reply_src_err(req, -rc);
	else
		fuse_reply_readlink(req, buf);
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
