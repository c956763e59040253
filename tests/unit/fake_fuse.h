/* A request as a handler sees it, without a session: the reply functions
 * of libfuse that fs/ calls are defined in tests/unit/fake_fuse.c, linked
 * into the test ahead of libfuse, and record what the handler answered. */
#ifndef FAKE_FUSE_H
#define FAKE_FUSE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

enum reply {
	REPLY_NOTHING, /* not answered (yet) */
	REPLY_ERR,
	REPLY_NONE, /* fuse_reply_none: a FORGET's */
	REPLY_ENTRY,
	REPLY_ATTR,
	REPLY_OPEN,
	REPLY_DATA, /* fuse_reply_buf or _iov: the bytes in data, len */
	REPLY_LINK,
	REPLY_STATFS,
};

struct fuse_req {
	void *userdata;
	struct fuse_ctx ctx;
	enum reply reply;
	int err;
	struct fuse_entry_param entry;
	struct stat attr;
	double attr_timeout;
	struct fuse_file_info fi;
	char *data; /* DATA and LINK, NUL-terminated */
	size_t len;
	struct statvfs vfs;
};

/* A fresh request from this process (its uid, gid and pid) to `userdata`. */
void req_init(struct fuse_req *r, void *userdata);
/* Forgets the last reply (frees its bytes). */
void req_clear(struct fuse_req *r);

/* What fuse_lowlevel_notify_store was given, since the last reset. */
struct stored {
	unsigned count;
	fuse_ino_t ino;
	char data[256];
	size_t len;
};
extern struct stored stored;
/* Entries the daemon had the kernel drop (notify_inval_entry). */
extern unsigned invalidated;

#endif
