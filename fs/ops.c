/* The operation table: each request goes to the room that holds its
 * kind of work (attr.c attributes, names.c resolving names, reading.c
 * reading files, dirs.c directory snapshots; the SRC side is src.c).
 * What stays here answers without looking at anything: extended
 * attributes, and every call that would change the tree (EROFS). */
#include "ops.h"

#include <errno.h>

#include "attr.h"
#include "dirs.h"
#include "names.h"
#include "reading.h"
#include "request.h"

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	count(req, REQ_GETXATTR);
	/* ENOSYS tells the kernel never to ask again */
	fuse_reply_err(req, ENOSYS);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	count(req, REQ_LISTXATTR);
	fuse_reply_err(req, ENOSYS);
}

/* Every call that would change anything. */
static void read_only(fuse_req_t req)
{
	count(req, REQ_WRITE_LIKE);
	fuse_reply_err(req, EROFS);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	read_only(req);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	read_only(req);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	read_only(req);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	read_only(req);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	read_only(req);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	read_only(req);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	read_only(req);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	read_only(req);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	read_only(req);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	read_only(req);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	read_only(req);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* large reads and readahead cut per-request overhead on big parts */
	conn->max_readahead = 1 << 20;
	/* No FUSE_CAP_CACHE_SYMLINKS: a view's symlink (a Shardlake alias)
	 * gives its target only to who may read its alias file, and a target
	 * the kernel kept would be given to anyone (docs/security.md). */
	conn->want &= ~FUSE_CAP_CACHE_SYMLINKS;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	struct daemon *dm = userdata;
	/* the kernel's automatic choice lists in plain READDIR past a
	 * listing's first request: each name then costs its reader a LOOKUP.
	 * Otherwise every request is a READDIRPLUS, and the daemon decides
	 * which names get their attributes (fs/dirs.c). */
	if (dm->readdirplus != RDP_AUTO)
		conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

const struct fuse_lowlevel_ops shardfs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.open = op_open,
	.read = op_read,
	.flush = op_flush,
	.release = op_release,
	.ioctl = op_ioctl,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.write = op_write,
	.setxattr = op_setxattr,
	.removexattr = op_unlink,
	.create = op_create,
	.fallocate = op_fallocate,
};

