/* Resolving names (fs/names.c). */
#ifndef FS_NAMES_H
#define FS_NAMES_H

#include <stdbool.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "daemon.h"
#include "fnode.h"
#include "listing.h"

/* What a lookup of `name` in SRC directory `dir` finds, with the kernel's
 * lookup reference taken: *out, or NULL when there is no such entry; -errno
 * on failure. A SRC entry wins over a view of that name. `*l` is the
 * directory's listing, got on first need (the caller unrefs it): the whole
 * one when `whole` (the caller looks up several names with it), else one
 * that answers for `name` alone (listing_for_name). */
int find_src(struct daemon *dm, struct fnode *dir, const char *name, bool whole,
	     struct listing **l, struct fnode **out);

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void op_forget_multi(fuse_req_t req, size_t n, struct fuse_forget_data *f);

#endif
