/* The owner, group and mode the mount shows (docs/security.md): SRC entries
 * their own, write bits cleared; a view and everything in it those of its
 * container, narrowed by every other file the view reads (a fold's shards,
 * a Shardlake index's manifest), directories gaining x where they have r.
 * With default_permissions the kernel checks these, so a user reads
 * through the mount what they could read in SRC. */
#ifndef FS_ACCESS_H
#define FS_ACCESS_H

#include <sys/stat.h>

#include "fnode.h"

/* Narrows st (a container's owner, group and mode) so that no class of
 * users is given more than it has on any file view `v` maps. */
void access_narrow(struct stat *st, const struct sf_view *v);
/* Sets the owner, group and permission bits of `st` (whose type bits are
 * set) for node `n`. */
void access_fill(const struct fnode *n, struct stat *st);

#endif
