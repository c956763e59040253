/* The daemon's inodes. Each kernel-visible entry is an fnode whose address is
 * its inode number; it lives while the kernel holds lookups on it (or while
 * it is the current entry of its name). An fnode stands for one version of
 * a source file: a file replaced in SRC gets a new fnode, so open handles of
 * the old one keep reading the old bytes. */
#ifndef FS_FNODE_H
#define FS_FNODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sf_hash.h"
#include "sf_turn.h"
#include "sf_view.h"

enum fkind {
	FK_SRC_DIR,   /* a directory of SRC (the root too) */
	FK_SRC_FILE,  /* a regular file of SRC, served from its mapping */
	FK_SRC_OTHER, /* a symlink, fifo, socket or device of SRC */
	FK_VIEW,      /* a node of a container's view */
	FK_META_DIR,  /* the root's .shardfs/ */
	FK_META_FILE, /* .shardfs/stats.json, .shardfs/errors */
};

enum meta_file { META_STATS, META_ERRORS };

struct fnode;
struct meta_live;

struct fnode {
	enum fkind kind;
	/* A node is freed when both counts reach zero (the tree's lock guards them). */
	uint64_t nlookup;             /* the kernel's references */
	uint64_t refs;                /* children whose parent this is */
	struct fnode *parent;         /* NULL only for the root */
	char *name;
	char *rel;                    /* SRC nodes: path relative to SRC ("." for root) */
	struct stat st;               /* SRC nodes: the version this node stands for */
	/* directories: the current version of each SRC child and view root
	 * by name (not owned: a node leaves it when freed) */
	struct sf_hash kids;

	/* One lock a node, for its kind's one job (the same storage). */
	union {
		pthread_mutex_t map_lock;     /* FK_SRC_FILE: mapping it at first open */
		pthread_mutex_t snap_lock;    /* FK_META_FILE: its snapshot */
	};
	/* FK_SRC_FILE: mapped at first open (--no-open: at lookup, within a
	 * budget, else at first READ), kept; counted in the tree's src_maps */
	struct sf_map *map;
	/* FK_SRC_DIR: the last listing (refcounted; the daemon's listings
	 * lock guards it), and the turn that makes the next */
	struct listing *listing;
	atomic_bool watched;          /* FK_SRC_DIR: inotify reports its changes */
	int wd;                       /* FK_SRC_DIR, watched: its watch descriptor */
	atomic_bool pushed;           /* files: content pushed to the kernel once */
	/* FK_VIEW: set once view and vn are (a root placed unopened is not
	 * until entered): read vn through fnode_vn from request threads */
	atomic_bool entered;
	struct sf_turn listing_turn;  /* FK_SRC_DIR: making `listing` */

	/* FK_VIEW */
	struct sf_view *view;
	struct sf_node *vn;
	/* A view root placed from its listing entry, its container not opened
	 * (fs/roots.h): the container's file name in its directory (which
	 * names its format too), to find the entry again when the view is
	 * entered; NULL for other view nodes. */
	char *file;

	enum meta_file meta;          /* FK_META_FILE */
	/* FK_META_FILE: its snapshots (fs/meta.h), made at first use
	 * (snap_lock) */
	struct meta_live *live;

	struct fnode *all_prev, *all_next; /* every live node, freed at unmount */
};

/* The daemon's inodes (fs/daemon.h). */
struct ftree {
	/* over every fnode's counts, kids table and attachment, and the
	 * list of all nodes; taken once (fnode_find, fnode_forget), and what
	 * runs under it never takes it again */
	pthread_mutex_t lock;
	struct fnode *root;
	struct fnode *all;        /* every live node, freed at unmount */
	size_t live;              /* nodes in `all` */
	size_t freed_since_trim;  /* nodes freed since memory was last trimmed */
	/* Called (the tree's lock held) as a watched SRC directory's node is
	 * freed: the kernel has forgotten it, so its inotify watch can go,
	 * and watches follow the directories the kernel holds. */
	void (*dir_gone)(void *arg, const struct fnode *dir);
	void *dir_gone_arg;
	/* The sections at the source (fs/section.h) that freeing nodes which
	 * may close SRC files runs in (NULL: none). Only those: a burst of
	 * FORGETs of nodes holding nothing stays out of the count that grows
	 * the request pool. */
	struct sections *sections;
	atomic_size_t src_maps;   /* FK_SRC_FILE nodes holding a mapping */
};

/* Makes the tree with its root, SRC directory `src`. */
int fnode_init_root(struct ftree *t, const char *src, struct sf_err *e);
/* Frees every node. */
void fnode_fini(struct ftree *t);

/* A new node (the tree's lock held). */
struct fnode *fnode_new(struct ftree *t, enum fkind kind, struct fnode *parent,
			const char *name);
/* Frees `n`, just made and held by nobody (the tree's lock held). */
void fnode_discard(struct ftree *t, struct fnode *n);
/* Looks a current child up by name (the tree's lock held). */
struct fnode *fnode_child(struct fnode *dir, const char *name);
/* Makes `n` the current child of its parent under its name, detaching any
 * earlier one (the tree's lock held). */
void fnode_attach(struct fnode *n);

/* The kernel learned of n once more / forgot n `k` times. */
void fnode_lookup_ref(struct fnode *n);
/* A lookup finds or makes its node with the tree's lock held (fnode_find),
 * then ends with fnode_found, which takes the kernel's lookup reference on
 * `n` (unless NULL: out of memory), releases the lock and returns `n`. */
void fnode_find(struct ftree *t);
struct fnode *fnode_found(struct ftree *t, struct fnode *n);
void fnode_forget(struct ftree *t, struct fnode *n, uint64_t k);

/* The fnode for a view node, creating it on first use (the tree's lock held;
 * an on-demand node must be pinned by the caller until this returns).
 * `name` is what the node is called in `parent` (a view root's node has no
 * name of its own); NULL means vn->name. */
struct fnode *fnode_for_view(struct ftree *t, struct fnode *parent, struct sf_node *vn,
			     const char *name);
/* A view root named `name` in SRC directory `dir` whose container (`file`,
 * as `st` says) is not opened yet (the tree's lock held; fs/roots.h). */
struct fnode *fnode_for_root(struct ftree *t, struct fnode *dir, const char *name,
			     const char *file, const struct stat *st);
/* Gives view node `n` (a root placed unopened) its view's root `vn`, taking
 * a reference on the view (the tree's lock held). */
void fnode_enter(struct fnode *n, struct sf_node *vn);
/* n's path under the mount, for error lines: built into buf from the
 * names up the tree, so that no node keeps its whole path (a tar's may be
 * 32,000 levels deep); a path longer than cap - 1 keeps its end, after
 * "...". Returns a pointer into buf. */
#define FNODE_PATH_MAX 1024
const char *fnode_path(const struct fnode *n, char *buf, size_t cap);
struct stats;
/* Logs msg for n's path in the mount's error log. */
void fnode_errlog(struct stats *s, const struct fnode *n, const char *msg);

/* The view node FK_VIEW node `n` stands for; NULL while `n` is a view root
 * not entered yet. */
static inline struct sf_node *fnode_vn(const struct fnode *n)
{
	return atomic_load_explicit(&n->entered, memory_order_acquire) ? n->vn : NULL;
}

/* Whether `n` is a view node of kind `k` (a root not entered yet is a
 * directory). */
static inline bool fnode_view_is(const struct fnode *n, enum sf_kind k)
{
	if (n->kind != FK_VIEW)
		return false;
	struct sf_node *vn = fnode_vn(n);
	return (vn ? sf_node_kind(vn) : SF_DIR) == k;
}

static inline uint64_t fnode_ino(const struct fnode *n)
{
	return n->parent ? (uint64_t)(uintptr_t)n : 1;
}

#endif
