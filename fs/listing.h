/* What a SRC directory shows: its own entries, and the views placed beside
 * recognised containers (docs/design.md §3.1). Computed when the directory is
 * listed or a name in it that a view could have is not found in SRC; reused
 * until the directory changes. */
#ifndef FS_LISTING_H
#define FS_LISTING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "fnode.h"
#include "indexdir.h"
#include "openviews.h"
#include "sf_big.h"
#include "sf_turn.h"
#include "sf_view.h"

struct daemon;

struct lentry {
	char *name;
	unsigned char type;     /* DT_* */
	/* opening its view (listing_open) */
	struct sf_turn opening;
	/* A view's entry has its format; its view is opened when first
	 * entered (listing_open: when its name is looked up, for a format
	 * not listing_places_unopened), or when listed for a format without a
	 * cheap check, and closed again when unused past --max-open
	 * (fs/openviews.h): read it only through listing_open and
	 * listing_opened. */
	const struct sf_format *fmt;
	struct vopen *open;
	/* A view's container: its file name and its stat, as checked or
	 * opened. A whole listing's view shares its file's SRC entry's name
	 * and keeps the stat in l->stats; a partial listing's owns both. */
	char *file;
	struct stat *st;
	ino_t ino;              /* a SRC entry's, as its directory gives it */
	bool in_index_dir;      /* its container is an index in --index-dir */
};

struct listing {
	atomic_uint refs;
	/* Only the views lookups placed without listing (listing_for_name):
	 * never served as the directory's listing, but its views are reused
	 * by the next whole one, so they keep their inodes. */
	bool partial;
	/* A view in it was found to stand for a container changed in place
	 * (a change the directory's mtime does not show): list anew. */
	atomic_bool stale;
	struct timespec mtime;   /* of the directory when listed */
	time_t listed_at;
	ino_t ino;
	struct openviews *views;  /* the mount's, which holds the entries' views */
	/* The SRC entries (the first nsrc), then the views, each run in byte
	 * order of names. */
	size_t n, nsrc;
	struct lentry *e;
	/* A whole listing's names and its views' containers' stats; a partial
	 * listing's entries own theirs. */
	struct sf_strs names;
	struct stat *stats;
	/* the indexes in --index-dir its views of them stand for (names, stats) */
	struct dir_indexes index_dir;
};

/* What the daemon's SRC directories' listings share (struct daemon): the
 * lock over every directory's current listing (held only to read or swap
 * it: a listing is made in the directory's turn, fnode.listing_turn). */
struct listings {
	pthread_mutex_t lock;
};

void listings_init(struct listings *ls);
void listings_fini(struct listings *ls);

/* Logs the warnings a view raised since the last call (opening, or lazy
 * work such as populating a directory). */
void listing_report_warnings(struct daemon *dm, struct sf_view *v);
/* The current listing of SRC directory `dir` (a new reference). */
int listing_get(struct daemon *dm, struct fnode *dir, struct listing **out);
void listing_unref(struct listing *l);
/* The view entry named `name`, or NULL. */
struct lentry *listing_view(const struct listing *l, const char *name);
/* The same, as the container is now: when it changed in place since its
 * view was opened, *l (a listing of `dir`) is replaced by the directory's
 * whole listing made anew, which opens the container again. */
struct lentry *listing_view_now(struct daemon *dm, struct fnode *dir, const char *name,
				struct listing **l);
/* Whether view entry `e` of dir's listing still stands for its container
 * as it is now: the same version, owner, group and mode (one lstat). */
bool listing_container_now(struct daemon *dm, const struct fnode *dir, const struct lentry *e);
/* Whether the view of a container of format `f` is placed from its entry
 * only, opened only when entered (fs/roots.h): one the listing checks,
 * whose view maps no other file (its permissions are then its container's)
 * and is no symlink (a link view's type is known once opened). The others
 * (taridx: its permissions narrow by the tar shards) are opened when their
 * name is looked up, so their attributes never change when entered. */
bool listing_places_unopened(const struct sf_format *f);
/* The view of a view entry of dir's listing `l` (a new reference), opened
 * now if it was only checked or has been closed since: a container that
 * fails to open gets a view holding only .shardfs/, saying why. NULL when
 * out of memory or the directory cannot be opened any more. */
struct sf_view *listing_open(struct daemon *dm, struct fnode *dir, const struct listing *l,
			     struct lentry *e);
/* The same when the entry's view is open (a new reference), else NULL. */
struct sf_view *listing_opened(struct daemon *dm, const struct lentry *e);
/* A listing that answers a lookup of `name`, which is not an entry of SRC
 * directory `dir` (a new reference in *out). NULL when no file there could
 * place a view under the name (as `name` + a format's extension, or as
 * `name` = "<file>.d"); a partial listing when exactly one file could and
 * it takes `name` as its own view name, so only that container is checked
 * (and opened, unless listing_places_unopened); otherwise the whole
 * listing. */
int listing_for_name(struct daemon *dm, struct fnode *dir, const char *name,
		     struct listing **out);

#endif
