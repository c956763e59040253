/* libfuse's reply and notification calls, recording instead of writing to
 * a session (tests/unit/fake_fuse.h). Defined in the test executable, they
 * are what fs/'s objects linked into it call. */
#include "fake_fuse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct stored stored;
unsigned invalidated;

void req_init(struct fuse_req *r, void *userdata)
{
	*r = (struct fuse_req){ .userdata = userdata };
	r->ctx.uid = getuid();
	r->ctx.gid = getgid();
	r->ctx.pid = getpid();
}

void req_clear(struct fuse_req *r)
{
	free(r->data);
	req_init(r, r->userdata);
}

static int answer(fuse_req_t req, enum reply how)
{
	req->reply = how;
	return 0;
}

/* Keeps a copy of the n pieces as the reply's bytes. */
static int keep(fuse_req_t req, enum reply how, const struct iovec *iov, size_t n)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += iov[i].iov_len;
	free(req->data);
	req->data = malloc(len + 1);
	if (!req->data)
		return -ENOMEM;
	req->len = 0;
	for (size_t i = 0; i < n; i++) {
		if (iov[i].iov_len)
			memcpy(req->data + req->len, iov[i].iov_base, iov[i].iov_len);
		req->len += iov[i].iov_len;
	}
	req->data[len] = 0;
	return answer(req, how);
}

void *fuse_req_userdata(fuse_req_t req)
{
	return req->userdata;
}

const struct fuse_ctx *fuse_req_ctx(fuse_req_t req)
{
	return &req->ctx;
}

int fuse_req_getgroups(fuse_req_t req, int size, gid_t list[])
{
	(void)req;
	return getgroups(size, list);
}

int fuse_reply_err(fuse_req_t req, int err)
{
	req->err = err;
	return answer(req, REPLY_ERR);
}

void fuse_reply_none(fuse_req_t req)
{
	answer(req, REPLY_NONE);
}

int fuse_reply_entry(fuse_req_t req, const struct fuse_entry_param *e)
{
	req->entry = *e;
	return answer(req, REPLY_ENTRY);
}

int fuse_reply_attr(fuse_req_t req, const struct stat *attr, double attr_timeout)
{
	req->attr = *attr;
	req->attr_timeout = attr_timeout;
	return answer(req, REPLY_ATTR);
}

int fuse_reply_open(fuse_req_t req, const struct fuse_file_info *fi)
{
	req->fi = *fi;
	return answer(req, REPLY_OPEN);
}

int fuse_reply_buf(fuse_req_t req, const char *buf, size_t size)
{
	struct iovec v = { .iov_base = (void *)buf, .iov_len = size };
	return keep(req, REPLY_DATA, &v, 1);
}

int fuse_reply_iov(fuse_req_t req, const struct iovec *iov, int count)
{
	return keep(req, REPLY_DATA, iov, (size_t)count);
}

int fuse_reply_readlink(fuse_req_t req, const char *link)
{
	struct iovec v = { .iov_base = (void *)link, .iov_len = strlen(link) };
	return keep(req, REPLY_LINK, &v, 1);
}

int fuse_reply_statfs(fuse_req_t req, const struct statvfs *stbuf)
{
	req->vfs = *stbuf;
	return answer(req, REPLY_STATFS);
}

int fuse_lowlevel_notify_store(struct fuse_session *se, fuse_ino_t ino, off_t offset,
			       struct fuse_bufvec *bufv, enum fuse_buf_copy_flags flags)
{
	(void)se;
	(void)flags;
	size_t len = fuse_buf_size(bufv);
	if (offset != 0 || bufv->count != 1 || len > sizeof stored.data)
		return -EINVAL;
	memcpy(stored.data, bufv->buf[0].mem, len);
	stored.len = len;
	stored.ino = ino;
	stored.count++;
	return 0;
}

int fuse_lowlevel_notify_inval_entry(struct fuse_session *se, fuse_ino_t parent,
				     const char *name, size_t namelen)
{
	(void)se;
	(void)parent;
	(void)name;
	(void)namelen;
	invalidated++;
	return 0;
}
