/* Attributes of nodes (fs/attr.c). */
#ifndef FS_ATTR_H
#define FS_ATTR_H

#include <stdbool.h>
#include <sys/stat.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "daemon.h"
#include "fnode.h"

/* Attributes of a node: owner and mode as access.h says, times of the
 * source; a view file not built yet shows the size its format announced;
 * a live .shardfs/ file, the size of the snapshot thread `tid` reads
 * (`lookup`: asked by a LOOKUP, fs/meta.h). */
void fill_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, struct stat *st);
/* Makes a view file's size known (builds it); other nodes are ready. A
 * failure is logged and the file stays listed (see fill_attr) while reads
 * fail with EIO. Returns 0 or a negative errno. */
int view_file_ready(struct daemon *dm, struct fnode *n);

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_readlink(fuse_req_t req, fuse_ino_t ino);
void op_statfs(fuse_req_t req, fuse_ino_t ino);

#endif
