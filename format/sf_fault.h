/* Containing faults of mapped source bytes, for the code that still
 * parses them in place (taridx's index rows, tx_row_get);
 * the others read copies (sf_map_read) and never fault, and copies for the
 * kernel go through sf_readv_copy. To be removed with the last of them.
 *
 * A page of a mapping raises SIGBUS when the file was truncated under it or
 * its storage fails (a disk error, a network filesystem that lost its
 * server). Code that reads mapped bytes in user space runs under a guard:
 * such a fault then ends that call with -EIO and the process goes on.
 *
 * The guard jumps out of the faulting code (siglongjmp), so what that code
 * holds at the fault is skipped: guarded code takes no lock of its own
 * while it reads mapped bytes unless the read runs in a nested guard inside
 * the lock (sf_guard_run may nest), and an allocation it has not handed on
 * yet is lost, but for the sf_bufs it made and the sf_strs of its frames
 * (sf_guard_note_new, sf_guard_note_grow).
 * docs/architecture.md lists where the guards are.
 *
 * Checks against a change in place come with it: before the call and after
 * it, the mappings it may read are compared with their files
 * (sf_map_check), so a file truncated, extended or rewritten in place
 * fails the call (a page past the new end of a file reads as zeros without
 * a fault) and the common case of a truncated source never faults at all.
 */
#ifndef SF_FAULT_H
#define SF_FAULT_H

#include "sf_err.h"

struct sf_map;

struct sf_view;

typedef int (*sf_guarded_fn)(void *ctx, struct sf_err *e);

/* Runs fn(ctx, e) with faults on the mappings of `v` (or on `m`; with
 * neither, on any mapping: for opening a container, which maps more files
 * as it goes) turned into -EIO, after and before checking those mappings.
 * Returns what fn returned, or -EIO with a message naming the file. */
int sf_guard_run(struct sf_view *v, struct sf_map *m, sf_guarded_fn fn, void *ctx,
		 struct sf_err *e);

struct sf_buf;
/* sf_buf.c tells the armed guard of each buffer made and each reference
 * dropped, so that a fault drops the buffers the jump orphans (a decode's
 * output, made before reading its stored bytes). */
void sf_guard_note_new(struct sf_buf *b);
void sf_guard_note_unref(struct sf_buf *b);
/* The same for a string's bytes: `owner` (the struct sf_str) grew them
 * from `old` to `now`; they were handed on or freed (gone). */
void sf_guard_note_grow(const void *owner, void *old, void *now);
void sf_guard_note_gone(void *p);

/* Checks every mapping of `v` (sf_map_check). */
int sf_view_check(struct sf_view *v, struct sf_err *e);

/* Whether a mapping of `v` is known to have changed in place (no system
 * call): its files are then refused at once. */
int sf_view_refused(struct sf_view *v, struct sf_err *e);

/* The mapping of `v` holding address p, or NULL. */
struct sf_map *sf_view_map_at(const struct sf_view *v, const void *p);

#endif
