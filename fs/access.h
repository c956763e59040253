/* The owner, group and mode the mount shows (docs/security.md): SRC entries
 * their own, write bits cleared; a view and everything in it those of its
 * container, narrowed by every other file the view reads (a fold's shards,
 * a Shardlake index's manifest), directories gaining x where they have r.
 * With default_permissions the kernel checks these, so a user reads
 * through the mount what they could read in SRC. */
#ifndef FS_ACCESS_H
#define FS_ACCESS_H

#include <stdbool.h>
#include <sys/stat.h>

#include "fnode.h"
#include "sf_view.h"

/* Narrows st (a container's owner, group and mode) so that no class of
 * users is given more than it has on any file view `v` maps. */
void access_narrow(struct stat *st, const struct sf_view *v);
/* Whether every file view `v` maps still has the owner, group and mode
 * its narrowing was made from (an fstat each). */
bool access_unchanged(const struct sf_view *v);
/* Sets the owner, group and permission bits of `st` (whose type bits are
 * set) for node `n`. A view's symlink (a Shardlake alias) shows its alias
 * file's, as read bits: its target is the alias file's content. */
void access_fill(const struct fnode *n, struct stat *st);
/* The permission bits of `st` (owner, group and type set) by kind
 * (fnode_ops.access): an SRC entry's own, write and set-id bits cleared
 * (a symlink 0777); a view's or .shardfs/'s read bits of its version,
 * directories gaining x where they have r. */
void access_src(const struct fnode *n, struct stat *st);
void access_shown(const struct fnode *n, struct stat *st);
/* Whether user `uid` of group `gid` and of `groups` may read what shows
 * `st` (owner, group and mode as the mount shows them), as the kernel
 * decides for a file. The kernel checks no mode of a symlink, so READLINK
 * of a view's symlink asks this. */
bool access_can_read(const struct stat *st, uid_t uid, gid_t gid, const gid_t *groups,
		     int ngroups);

#endif
