/* The daemon's inodes. Each kernel-visible entry is an fnode whose address is
 * its node id (the kernel's handle on it) and whose inode number (st_ino,
 * d_ino) counts the nodes made before it; it lives while the kernel holds
 * lookups on it (or while it is the current entry of its name). An fnode
 * stands for one version of a source file: a file replaced in SRC gets a new
 * fnode, so open handles of the old one keep reading the old bytes. */
#ifndef FS_FNODE_H
#define FS_FNODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "sf_hash.h"

enum fkind {
	FK_SRC_DIR,   /* a directory of SRC (the root too) */
	FK_SRC_FILE,  /* a regular file of SRC, served from its mapping */
	FK_SRC_OTHER, /* a symlink, fifo, socket or device of SRC */
	FK_VIEW,      /* a node of a container's view */
	FK_META_DIR,  /* the root's .shardfs/ */
	FK_META_FILE, /* .shardfs/stats.json, .shardfs/errors */
	FK_KINDS
};

struct daemon;
struct fnode;
struct ftree;
struct view_root;

/* What differs by kind, one table a kind (fs/srcnode.c, fs/vnode.c,
 * fs/meta.c): a node's own part lives in its kind's type, which begins
 * with the common struct fnode. */
struct fnode_ops {
	enum fkind kind;
	/* the kernel may keep its entries and attributes long (a view's
	 * node, .shardfs/) */
	bool cached;
	/* its content and size change as it is read (.shardfs/'s files): the
	 * kernel keeps its attributes no time */
	bool live;
	/* its stat changes in place (an SRC directory's, as its entries
	 * change, under the tree's lock): read under that lock */
	bool st_in_place;
	/* the version of the file it stands for (owner, mode, times) */
	const struct stat *(*st)(const struct fnode *n);
	/* stat's type, links and size (attr.c fills the rest) */
	void (*attr)(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		     struct stat *st);
	/* stat's owner, group and permission bits (fs/access.h) */
	void (*access)(const struct fnode *n, struct stat *st);
	/* directories naming their current children: the table */
	struct sf_hash *(*kids)(struct fnode *n);
	/* a node whose own name it does not keep: the name */
	const char *(*name)(const struct fnode *n);
	/* its path under SRC (SRC nodes), NULL for others */
	const char *(*rel)(const struct fnode *n);
	/* a read at or past its end that needed no READ, which the kernel
	 * precedes with a GETATTR carrying the handle; NULL: nothing to do */
	void (*read_end)(struct fnode *n);
	/* leaving the tree (the tree's lock held): what must not outlive
	 * its place in it; NULL: nothing */
	void (*detach)(struct ftree *t, struct fnode *n);
	/* whether dropping it may close a file of SRC, which can wait on a
	 * stalled source; NULL: never */
	bool (*holds_src)(struct fnode *n);
	/* frees it and what it holds (no lock held) */
	void (*drop)(struct ftree *t, struct fnode *n);
};

/* What every node has. */
struct fnode {
	const struct fnode_ops *ops;
	/* A node is freed when both counts reach zero (the tree's lock guards them). */
	uint64_t nlookup;             /* the kernel's references */
	struct fnode *parent;         /* NULL only for the root */
	char *name;                   /* NULL: ops->name tells it */
	struct fnode *all_prev, *all_next; /* every live node, oldest last */
	/* stat's inode number: 1 for the root, then one more for each node
	 * made, never used twice. A listing makes its names' nodes in its
	 * order, so tools that read a directory's files by inode number
	 * (`cp -r`, which sorts them so) read a view's members in the order
	 * of the archive, not of the node's address. */
	uint64_t ino;
	uint32_t refs;                /* children whose parent this is */
	atomic_bool pushed;           /* files: content pushed to the kernel once */
	/* directories: a name in it was looked up since its last listing
	 * request (--readdirplus small, fs/dirs.c) */
	atomic_bool looked_in;
};

/* The daemon's inodes (fs/daemon.h). */
struct ftree {
	/* over every fnode's counts, kids table and attachment, the list
	 * of all nodes, and the entered view roots and their rings; taken
	 * once (fnode_find, fnode_forget), and what runs under it never
	 * takes it again */
	pthread_mutex_t lock;
	struct fnode *root;
	uint64_t made;            /* nodes made: the last inode number given */
	/* every live node, the one looked up last first, and its last */
	struct fnode *all, *oldest;
	size_t live;              /* nodes in `all` */
	/* the view roots entered (fs/vnode.h), each the start of a ring of
	 * its nodes: a view's nodes are found without a walk of `all` */
	struct view_root *views;
	/* --max-nodes: past it the kernel is asked to drop the entries
	 * looked up longest ago (fs/prune.h); 0: no cap. `crowded` is
	 * signalled (the lock held) as a node is made past it. */
	size_t cap;
	/* The most SRC files holding a mapping (each a descriptor) before
	 * the same thread asks the kernel to drop the entries looked up
	 * longest ago: the kernel keeps an inode read once as long as it
	 * likes, and `cat` of every file of a large SRC would otherwise run
	 * the daemon out of descriptors (EMFILE). 0: no cap. `crowded` is
	 * signalled (the lock held) as a mapping is made past it. */
	size_t maps_cap;
	pthread_cond_t crowded;
	size_t freed_since_trim;  /* nodes freed since memory was last trimmed */
	/* Called (the tree's lock held) as a watched SRC directory's node is
	 * freed: the kernel has forgotten it, so its inotify watch can go,
	 * and watches follow the directories the kernel holds. */
	void (*dir_gone)(void *arg, const struct fnode *dir);
	void *dir_gone_arg;
	/* Open and close the section at the source (fs/section.h) that freeing
	 * nodes which may close SRC files runs in (NULL: none). Only those:
	 * a burst of FORGETs of nodes holding nothing stays out of the count
	 * that grows the request pool. */
	void (*open_section)(void *arg);
	void (*close_section)(void *arg);
	void *section_arg;
	atomic_size_t src_maps;   /* FK_SRC_FILE nodes holding a mapping */
};

/* Makes the tree's lock; its root is SRC's (src_init_root). */
void fnode_init(struct ftree *t);
/* Frees every node. */
void fnode_fini(struct ftree *t);

/* A new node of `size` bytes (its kind's type), zeroed but for the common
 * part; `name` NULL for a kind whose ops->name tells it (the tree's lock
 * held, but for the root). */
struct fnode *fnode_new(struct ftree *t, const struct fnode_ops *ops, size_t size,
			struct fnode *parent, const char *name);
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

/* An entry the kernel holds, to ask it to drop: its directory's inode
 * number and its name (allocated). */
struct fnode_leaf {
	uint64_t dir;
	char *name;
};
/* Up to `max` of the nodes looked up longest ago that hold no children,
 * into `out` (the tree's lock held); returns how many. */
size_t fnode_oldest_leaves(struct ftree *t, struct fnode_leaf *out, size_t max);

/* n's path under the mount, for error lines: built into buf from the
 * names up the tree, so that no node keeps its whole path (a tar's may be
 * 32,000 levels deep); a path longer than cap - 1 keeps its end, after
 * "...". Returns a pointer into buf. */
#define FNODE_PATH_MAX 1024
const char *fnode_path(const struct fnode *n, char *buf, size_t cap);
struct stats;
/* Logs msg for n's path in the mount's error log. */
void fnode_errlog(struct stats *s, const struct fnode *n, const char *msg);

/* ops->attr of a directory whose stat says nothing more (SRC's, .shardfs/). */
void fnode_dir_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		    struct stat *st);

static inline enum fkind fnode_kind(const struct fnode *n)
{
	return n->ops->kind;
}

static inline const char *fnode_name(const struct fnode *n)
{
	return n->name ? n->name : n->ops->name(n);
}

/* The version of the file n stands for. */
static inline const struct stat *fnode_st(const struct fnode *n)
{
	return n->ops->st(n);
}

/* Whether the kernel may cache n's entry and attributes for long. */
static inline bool in_view(const struct fnode *n)
{
	return n->ops->cached;
}

static inline uint64_t fnode_ino(const struct fnode *n)
{
	return n->parent ? (uint64_t)(uintptr_t)n : 1;
}

#endif
