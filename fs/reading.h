/* Reading files (fs/reading.c). */
#ifndef FS_READING_H
#define FS_READING_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdbool.h>

struct daemon;
struct fnode;

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
	      size_t out_bufsz);

/* no-open: container name `name` in the SRC directory whose inode number
 * is `dir` stopped naming its file (inotify). No RELEASE tells when the
 * last reader of a view is done, so a view of that file, its container
 * gone, is let go now: the kernel drops its entries, and each node goes
 * with its last reader's close (`arg`: the daemon). Walks the nodes under
 * the tree's lock, a few times per container gone. */
void views_gone_in(void *arg, uint64_t dir, const char *name);

/* Pushing a small file's whole content into the kernel's page cache
 * (FUSE_NOTIFY_STORE), so that its reader needs no READ: at the IOCTL
 * Python's open() sends, and ahead of readers (fs/push.h). Once per node:
 * pages the kernel drops later come back through READ. */
#define PUSH_MAX (128 * 1024)
/* Pushes `n` unless it was pushed (or read) already; `in_request`: from a
 * request handler, which hands the loop on before copying bytes not in
 * memory. The store waits for any page a READ of the file has locked:
 * the caller makes sure a thread is left to answer it. Returns 0, or a
 * negative errno (-ENOENT: the kernel does not hold the inode, and `n`
 * may be pushed later). */
int push_file(struct daemon *dm, struct fnode *n, bool in_request);

#endif
