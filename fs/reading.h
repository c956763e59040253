/* Reading files (fs/reading.c). */
#ifndef FS_READING_H
#define FS_READING_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
	      size_t out_bufsz);

#endif
