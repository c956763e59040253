/* The request handlers the session runs. */
#ifndef FS_OPS_H
#define FS_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "cache.h"

extern const struct fuse_lowlevel_ops shardfs_ops;
void ops_set_cache(struct dcache *c);
/* The session, for notifications; `push` allows pushing small files'
 * content at open (needs more than one request thread). */
void ops_set_session(struct fuse_session *se, bool push);

#endif
