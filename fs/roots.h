/* View roots, the directories a SRC directory shows beside its containers
 * (docs/design.md §3.1). A lookup of one whose container the listing only
 * checked places its node from the listing entry, opening nothing: a
 * directory with its container's owner, group, mode and times, as the
 * opened view would show them (fs/access.h). The container is opened when
 * the view is first entered: a lookup in it, opening it as a directory.
 * So `ls -l` or a stat of a directory of containers parses none. */
#ifndef FS_ROOTS_H
#define FS_ROOTS_H

#include "daemon.h"
#include "fnode.h"
#include "listing.h"

/* The node for the view of entry `le` of dir's listing (the tree's lock
 * held): the one for its open view `v`, or, v NULL (its container only
 * checked, listing_places_unopened), one placed unopened. The current
 * child of that name is kept while it stands for the same view, or for the
 * same version of the container. NULL when out of memory. */
struct fnode *root_place(struct ftree *t, struct fnode *dir, const struct lentry *le,
			 struct sf_view *v);
/* Opens the view of node `n` when it is a root placed unopened; anything
 * reading a view node's content calls this first. 0; -ESTALE when its
 * container went or changed since it was looked up (the kernel then looks
 * the name up again); another -errno when its directory cannot be listed.
 * A container that fails to open gets its failed view (listing_open). */
int root_enter(struct daemon *dm, struct fnode *n);

#endif
