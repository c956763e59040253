/* What every file of request handlers (attr.c, names.c, reading.c,
 * dirs.c) starts from: the node an inode number stands for, the count of
 * requests, the kernel's cache timeouts, and how errors of SRC are
 * answered. */
#ifndef FS_REQUEST_H
#define FS_REQUEST_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "fnode.h"
#include "stats.h"

/* SRC may change under the mount: its entries are trusted for a second.
 * Views never change under an inode: the kernel may keep them. */
#define SRC_TIMEOUT 1.0
#define VIEW_TIMEOUT 86400.0

/* The node an inode number stands for. */
static inline struct fnode *fn_of(fuse_req_t req, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? daemon_of(req)->tree.root : (struct fnode *)(uintptr_t)ino;
}

/* Counts a request for stats.json. */
static inline void count(fuse_req_t req, enum req_kind k)
{
	stat_add(&daemon_of(req)->stats.requests[k], 1);
}

/* A name in `dir` (NULL: none) was looked up, or its node's attributes
 * asked for: with --readdirplus small, the listing going on in `dir` gives
 * the rest of its names their attributes (fs/dirs.c gives_attrs). Read
 * before written: a loader's lookups in one directory would otherwise all
 * write the one line. */
static inline void dir_mark_used(const struct daemon *dm, struct fnode *dir)
{
	if (dir && dm->readdirplus == RDP_SMALL &&
	    !atomic_load_explicit(&dir->looked_in, memory_order_relaxed))
		atomic_store_explicit(&dir->looked_in, true, memory_order_relaxed);
}

/* Replies with an error met in SRC. A source on a network filesystem that
 * lost its server answers ENOTCONN, which the kernel also gives readers of
 * a mount whose daemon has died: it goes out as EIO, so that only a dead
 * daemon reads as one. */
static inline void reply_src_err(fuse_req_t req, int err)
{
	fuse_reply_err(req, err == ENOTCONN ? EIO : err);
}

/* The path of a node relative to the mount root, for error lines and the
 * list of requests waiting on SRC, built into buf (fnode_path). */
static inline const char *node_path(const struct fnode *n, char buf[FNODE_PATH_MAX])
{
	return fnode_path(n, buf, FNODE_PATH_MAX);
}

/* Opens a section at the source for request `op` on `path` (or its entry
 * `name`): fs/section.h. False when the source holds every thread it may:
 * the request is then answered EIO, and logged. */
static inline bool section_begin(fuse_req_t req, const char *op, const char *path, const char *name)
{
	struct stats *s = &daemon_of(req)->stats;
	int rc = section_open(&s->sections, op, path, name, true);
	if (rc == 0)
		return true;
	errlog_add(s, path, rc == -EBUSY
		   ? "refused: the source held every request thread but the one kept for requests that need none, for 0.1 s"
		   : "refused: every request thread the source may hold (twice --threads) waits on it, one for over a second");
	fuse_reply_err(req, EIO);
	return false;
}

/* The same for work that cannot fail (closing what a FORGET or a release
 * dropped): it always opens one. */
static inline void section_begin_must(struct daemon *dm, const char *op, const char *path)
{
	section_open(&dm->stats.sections, op, path, NULL, false);
}

/* Closes the section (what the request was for is not needed: its node
 * may be gone once the request is answered). A request that ran long is
 * not logged as a problem: long work (a decode, a first listing) is no
 * fault, and while it lasts .shardfs/ shows it. */
static inline void section_end(struct daemon *dm)
{
	section_close(&dm->stats.sections);
}

#endif
