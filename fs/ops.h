/* The request handlers the session runs. */
#ifndef FS_OPS_H
#define FS_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

/* The session's userdata must be the daemon (fs/daemon.h). */
extern const struct fuse_lowlevel_ops shardfs_ops;

#endif
