/* What every file of request handlers (attr.c, names.c, reading.c,
 * dirs.c) starts from: the node an inode number stands for, the count of
 * requests, the kernel's cache timeouts, and how errors of SRC are
 * answered. */
#ifndef FS_REQUEST_H
#define FS_REQUEST_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "fnode.h"
#include "stats.h"

/* SRC may change under the mount: its entries are trusted for a second.
 * Views never change under an inode: the kernel may keep them. */
#define SRC_TIMEOUT 1.0
#define VIEW_TIMEOUT 86400.0

/* The node an inode number stands for. */
static inline struct fnode *fn_of(fuse_req_t req, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? daemon_of(req)->tree.root : (struct fnode *)(uintptr_t)ino;
}

/* Counts a request for stats.json. */
static inline void count(fuse_req_t req, enum req_kind k)
{
	stat_add(&daemon_of(req)->stats.requests[k], 1);
}

/* Replies with an error met in SRC. A source on a network filesystem that
 * lost its server answers ENOTCONN, which the kernel also gives readers of
 * a mount whose daemon has died: it goes out as EIO, so that only a dead
 * daemon reads as one. */
static inline void reply_src_err(fuse_req_t req, int err)
{
	fuse_reply_err(req, err == ENOTCONN ? EIO : err);
}

/* Whether the node is one the kernel may cache for long (a view's, or
 * .shardfs/). */
static inline bool in_view(const struct fnode *n)
{
	return n->kind == FK_VIEW || n->kind == FK_META_DIR || n->kind == FK_META_FILE;
}

#endif
