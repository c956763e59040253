/* The nodes of SRC's entries (fs/fnode.h): what each kind keeps beyond the
 * common part. Their functions are fs/src.c's. */
#ifndef FS_SRCNODE_H
#define FS_SRCNODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#include "fnode.h"
#include "sf_hash.h"
#include "sf_turn.h"

struct listing;
struct sf_map;

/* FK_SRC_OTHER, and the start of the other two. */
struct src_node {
	struct fnode n;
	char *rel;                    /* its path relative to SRC ("." for the root) */
	struct stat st;               /* the version this node stands for */
};

/* FK_SRC_FILE */
struct src_file {
	struct src_node s;
	pthread_mutex_t map_lock;     /* mapping it at first open */
	/* mapped at first open (no-open: at lookup, within a budget, else
	 * at first READ), kept; counted in the tree's src_maps */
	struct sf_map *map;
};

/* FK_SRC_DIR */
struct src_dir {
	struct src_node s;
	/* the current version of each SRC child and view root by name (not
	 * owned: a node leaves it when freed) */
	struct sf_hash kids;
	/* the last listing (refcounted; the daemon's listings lock guards
	 * it), and the turn that makes the next */
	struct listing *listing;
	struct sf_turn listing_turn;
	atomic_bool watched;          /* inotify reports its changes */
	int wd;                       /* watched: its watch descriptor */
};

/* Whether SRC entry `name` is a file a network filesystem's client renamed
 * because it was deleted while open (NFS's .nfs<hex digits>, FUSE's
 * .fuse_hidden<hex digits>): it only waits for its last holder to close it, so
 * the daemon holds it no longer than a reader of it does. */
static inline bool kept_for_holders(const char *name)
{
	return strncmp(name, ".nfs", 4) == 0 || strncmp(name, ".fuse_hidden", 12) == 0;
}

static inline bool is_src(const struct fnode *n)
{
	enum fkind k = fnode_kind(n);
	return k == FK_SRC_DIR || k == FK_SRC_FILE || k == FK_SRC_OTHER;
}

/* n's SRC part (n is an SRC node). */
static inline struct src_node *src_of(const struct fnode *n)
{
	return (struct src_node *)n;
}

/* n's file part (n is an FK_SRC_FILE node). */
static inline struct src_file *src_file_of(const struct fnode *n)
{
	return (struct src_file *)n;
}

/* n's directory part (n is an FK_SRC_DIR node). */
static inline struct src_dir *src_dir_of(const struct fnode *n)
{
	return (struct src_dir *)n;
}

/* Whether two stats describe the same version of a file: a file replaced
 * or rewritten in SRC is a new version, and so is one given another owner,
 * group or mode (what the mount shows of it, and what the kernel checks). */
static inline bool same_version(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_mode == b->st_mode &&
	       a->st_uid == b->st_uid && a->st_gid == b->st_gid &&
	       a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

#endif
