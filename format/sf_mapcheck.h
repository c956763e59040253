/* Checks of a view's mappings against a change in place.
 *
 * Nothing in user space parses or decodes mapped source bytes: formats read
 * copies (sf_map_read, sf_map_copy, pread), where a lost page (a file
 * truncated under its mapping, storage failing) is -EIO, and mapped bytes
 * go only to the kernel in replies, or are copied by it (sf_readv_copy).
 * What is left is a change in place: a file truncated, extended or
 * rewritten under its mapping is not the file a view was made of. Lazy
 * work over a view (populating, a lookup, a build, producing a part) runs
 * between two checks of the mappings it may read (sf_checked_run), so that
 * such a change fails the call, and a read of mapped bytes checks their
 * file (sf_file_read). */
#ifndef SF_MAPCHECK_H
#define SF_MAPCHECK_H

#include "sf_err.h"

struct sf_map;
struct sf_view;

typedef int (*sf_checked_fn)(void *ctx, struct sf_err *e);

/* Runs fn(ctx, e) between two checks of the mappings of `v` (all of them,
 * or for a view of many, such as a fold of a thousand tars, its own
 * container's, the tars being checked as they are read): what fn
 * returned, or -EIO with a message naming the file found changed (before
 * fn: it is not run). */
int sf_checked_run(struct sf_view *v, sf_checked_fn fn, void *ctx, struct sf_err *e);

/* Checks every mapping of `v` (sf_map_check). */
int sf_view_check(struct sf_view *v, struct sf_err *e);

/* Whether a mapping of `v` is known to have changed in place (no system
 * call): its files then fail at once. */
int sf_view_failed_by_change(struct sf_view *v, struct sf_err *e);

/* The mapping of `v` holding address p, or NULL. */
struct sf_map *sf_view_map_at(const struct sf_view *v, const void *p);

#endif
