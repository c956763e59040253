/* The SRC side: the tree the mount shows, reached only beneath its root
 * (no symlink followed, docs/security.md), and the fnodes that stand for
 * its entries, one per version of a file. */
#ifndef FS_SRC_H
#define FS_SRC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "fnode.h"
#include "srcnode.h"
#include "sf_read.h"

struct daemon;

/* Makes the tree with its root, SRC directory `src`. */
int src_init_root(struct ftree *t, const char *src, struct sf_err *e);
/* SRC's own entry `name` of SRC directory `dir`, as it is now, with the
 * kernel's lookup reference taken (*out); -ENOENT when SRC has no such
 * entry, another -errno on failure. With no-open a file is mapped too,
 * within a budget (fs/src.c). */
int src_find(struct daemon *dm, struct fnode *dir, const char *name, struct fnode **out);
/* Maps SRC file `n` once, pinning the version it stands for: -ESTALE when
 * the file was replaced since it was looked up. */
int src_map_file(struct daemon *dm, struct fnode *n);
/* [off, off+size) of SRC file `n` (clipped to its size), as mapped bytes. */
int src_read(struct daemon *dm, struct fnode *n, uint64_t off, uint64_t size,
	     struct sf_readv *rv);
/* The target of SRC symlink `n` into buf (PATH_MAX + 1 bytes, terminated);
 * 0 or -errno. */
int src_readlink(struct daemon *dm, struct fnode *n, char *buf);

#endif
