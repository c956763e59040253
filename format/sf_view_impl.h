/* The insides of the view model (sf_view.h), for format/ only: the formats
 * build and read nodes through these fields; hosts (fs/, the C API, the
 * tools, the Python module) ask sf_view.h's query functions, so that the
 * model can change beneath them. */
#ifndef SF_VIEW_IMPL_H
#define SF_VIEW_IMPL_H

#include <limits.h>

#include "sf_view.h"
#include "sf_view_impl.h"

struct sf_lazy;

struct sf_dir {
	struct sf_node **kids;
	size_t n, cap;
	/* name -> kid, built once a directory grows (empty: search kids) */
	struct sf_hash index;
	sf_populate_fn populate;
	sf_lookup_fn lookup;
	sf_locate_fn locate;
	atomic_bool populated;
	/* populated, and found so with no lazy work running: nothing adds to
	 * it any more (a directory made by lazy work may be filled by it
	 * after being made, and a populate may set `populated` first) */
	atomic_bool complete;
	/* entries whose nodes are made on demand (sf_dir_set_lazy) */
	struct sf_lazy *lazy;
};

/* A built file whose extents are charged and whose build makes them again
 * (sized, from the container): kept in the cache's idle list, dropped
 * while no read uses them (sf_file_read counts its readers in `users`; a
 * drop holds SF_FILE_DROPPING there). Made at its first keep, so that
 * other files pay one pointer for it. */
struct sf_file_idle {
	struct sf_idle idle;
	struct sf_node *f;
	atomic_uint users;
};
#define SF_FILE_DROPPING UINT_MAX

struct sf_file {
	uint64_t size;
	struct sf_ext *ext;
	uint64_t *start; /* start[i] = file offset of ext[i]; for binary search */
	size_t n, cap;
	sf_build_fn build;
	atomic_bool built;
	/* Set when the format knows the size before building (the build only
	 * places extents): a listing may show it without building. */
	bool size_known;
	/* Set when the content is exactly one part of unknown size: the size is
	 * learned by producing the part. */
	struct sf_part *whole;
	/* Content whose source failed a check at build time: reads fail EIO. */
	char *broken;
	uint64_t known_size;
	/* what the extents hold in the view's cache (sf_file_reserve) */
	uint64_t charged;
	/* set once, before the first `built` it is kept with */
	struct sf_file_idle *_Atomic idle;
};
/* Builds a file's extents unless built (sf_file_ready, which a file
 * whose extents may be dropped leaves to sf_file_read). */
int sf_file_build(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
/* Waits for a drop of extents running (file_drop: a few frees). */
void sf_file_wait_drop(struct sf_file_idle *k);

struct sf_node {
	enum sf_kind kind;
	bool hidden;           /* resolvable but never listed (".shardfs") */
	/* Made on demand for an entry of its parent's lazy table: freed once
	 * no host holds it and nobody has it pinned (names lock). */
	bool lazy;
	uint32_t pins;
	uint32_t key;          /* lazy: the entry's key (the format's) */
	char *name;            /* escaped, as shown */
	struct sf_node *parent;
	struct sf_view *view;
	void *arg;             /* the format's, for populate/build/lookup */
	uint64_t aux;
	_Atomic(void *) host;  /* the daemon's slot (its inode for this node) */
	union {
		struct sf_dir dir;
		struct sf_file file;
		char *target;  /* SF_LINK */
	} u;
};

/* ---- views ------------------------------------------------------------ */

struct sf_view {
	atomic_uint refs;
	/* The turn for lazy work (populating, building, making on-demand
	 * nodes, adding parts): hooks run in it, and it is not recursive. No
	 * lock is held while hooks read the container. */
	struct sf_turn turn;
	/* Short, never held across a hook: writes of directories'
	 * entries (kids, on-demand entries), on-demand nodes' table, pins and
	 * hosts, the warnings. */
	pthread_mutex_t names_lock;
	struct sf_node *root;     /* a directory, or a symlink (alias views) */
	const struct sf_format *format;
	/* The cache the host reads this view through (sf_nocache until the
	 * view is open, then sf_host.cache): for lazy work that is handed
	 * none, like populating. */
	struct sf_cache *cache;
	char *path;               /* the container's path, for messages */
	struct sf_map **maps;     /* mappings the extents point into, by address */
	size_t nmaps, capmaps;
	/* The container's own mapping when the view holds it (set by
	 * sf_format_open): what lazy work is checked against in a view of
	 * many mappings (sf_mapcheck.c). */
	struct sf_map *source;
	void *state;              /* the format's parsed container */
	void (*free_state)(void *state);
	struct sf_part **parts;   /* owned */
	size_t nparts, capparts;
	/* Problems that did not prevent the view (e.g. tet footer JSON
	 * damaged), found while opening or later while populating or
	 * building: the daemon reports each once (names lock). */
	char **warnings;
	size_t capwarnings;
	atomic_size_t nwarnings;
	atomic_size_t nreported;  /* the host's: warnings it has passed on */
	/* sf_map_changes() when no mapping of the view had changed
	 * (sf_view_failed_by_change looks again only when it has moved on) */
	_Atomic uint64_t intact_at;
	/* What the host wants (sf_open_args.host): its counts from the
	 * start of the open, the rest once the view is open (the open reads
	 * through no cache, with the defaults). */
	struct sf_host host;
};

/* Gives an opened view what its host wants (NULL: the defaults): the
 * open's last step (sf_format_open), or a view made whole at once
 * (sf_view_failed). Hosts give theirs at open (sf_open_args.host). */
void sf_view_use_host(struct sf_view *v, const struct sf_host *h);

#endif
