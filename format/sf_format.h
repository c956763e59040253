/* The formats shardfs recognises, and how a container becomes a view.
 *
 * A format claims source files by name (its extension, or a match hook),
 * and opens one into a view: only as far as header and footer (everything
 * else is lazy). The daemon places the view beside the file (docs/design.md §3.1):
 * named after the file with `ext` removed, or "<file name>.d".
 */
#ifndef SF_FORMAT_H
#define SF_FORMAT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sf_err.h"
#include "sf_view.h"

struct sf_map;

struct sf_open_args {
	/* What may be read (the mount's SRC): a format opens the files beside
	 * the container only through sf_map_beside, which resolves them
	 * beneath it with no symlink followed (sf_open.h). */
	int topfd;
	const char *dirrel;     /* the directory holding the file, relative to topfd */
	const char *dirpath;    /* that directory as messages name it */
	const char *name;       /* the file's name in that directory */
	const char *path;       /* dirpath/name, for messages */
	struct sf_map *map;     /* the file, mapped (the view takes a ref if it keeps it) */
	/* All entry names of the directory, sorted bytewise (taridx finds its
	 * shards here). */
	const char *const *siblings;
	size_t nsiblings;
	/* The container lies in another directory than the files it reads (a fold's index in
	 * the daemon's --index-dir, its shards in dirrel): the format checks
	 * that it matches them before it shows anything. */
	bool other_dir;
	/* A directory where the format may keep what it derives from the
	 * container (sf_format.keeps: the daemon's --index-dir beside it),
	 * when has_keepdir; valid during the open only. */
	bool has_keepdir;
	int keepdir;
	/* With has_keepdir: the top of the tree keepdir lies in (the
	 * daemon's --index-dir), where what is kept for one name of a file
	 * is found by its names in other directories (hard links); or -1. */
	int keeptop;
	/* What the host wants of the view (sf_host.h; NULL: no cache, no
	 * counts, the defaults); copied into the view. */
	const struct sf_host *host;
};

/* Maps `rel`, named relative to the container's directory ("x_0000.tar",
 * "../manifest.json"), beneath a->topfd: a symlink on the way, a path
 * leading above the top, or anything but a regular file fails with
 * e->msg saying so. */
int sf_map_beside(const struct sf_open_args *a, const char *rel, struct sf_map **out,
		  struct sf_err *e);
/* Whether `rel` (as for sf_map_beside) is a directory beneath the top,
 * reached with no symlink followed. */
bool sf_dir_beside(const struct sf_open_args *a, const char *rel);

/* What the listing's cheap check sees of a file: its size and its first
 * and last bytes (up to SF_PROBE_BYTES each; they overlap in a small file). */
#define SF_PROBE_BYTES 4096
struct sf_probe {
	const uint8_t *head, *tail;
	size_t nhead, ntail;
	uint64_t size;
	const char *path;
};

/* A format, as one descriptor: how its files are recognised, and the steps
 * sf_format_open takes to make a view of one. The steps every format shares
 * (making the view, holding the container's mapping, placing .shardfs/,
 * cleaning up after a failure) are sf_format_open's; a format fills in only
 * what is its own. Adding a format: docs/adding-a-format.md. */
struct sf_format {
	/* ---- recognising ---- */
	const char *name;  /* "tsumugi" */
	const char *ext;   /* ".tsumugi": claimed files end with it, and the view
			    * is named without it */
	/* Optional further test (e.g. alias JSON only inside "aliases/"). */
	bool (*match)(const char *dirpath, const char *name);
	/* Optional: whether another container among the directory's entries
	 * (`names`, sorted bytewise) already shows file `name` (a fold's
	 * shard is no unindexed tar): it then gets no view of its own. Decided
	 * with the whole directory at hand, so a view of a format with it is
	 * placed by a listing, never by one lookup. */
	bool (*covered)(const char *name, const char *const *names, size_t n);
	/* The view depends on sibling files too (taridx shards): reopen it
	 * whenever the directory changes, not only when the file does. */
	bool uses_siblings;
	/* The view maps files beside the container too (sf_map_beside: a
	 * fold's shards, a shard's manifest), and its permissions narrow by
	 * theirs (fs/access.h): known only once it is opened, so the daemon
	 * opens it when its name is looked up, not when it is entered. */
	bool maps_beside;
	/* The view keeps an index it derives from the container in a
	 * directory the host gives (sf_open_args.keepdir), so that the next
	 * open skips deriving it: a compressed tar's seek index. */
	bool keeps;
	/* The cheapest honest check (docs/design.md §3.1): magic, size and
	 * header consistency, from the probe only. 0, or a negative errno with
	 * e->msg. A listing places the view of a file that passes, and opens it
	 * when the view is entered; a format without a check is opened when
	 * listed. */
	int (*check)(const struct sf_probe *p, struct sf_err *e);

	/* ---- opening, in this order ---- */
	/* Parses the container (a->map, which the view holds unless it is a
	 * link) only as far as header and footer into the format's own state,
	 * set in *state as soon as it is allocated: whatever it holds then is
	 * freed with free_state, also when parse fails. `v` is the view being
	 * made, its root still empty: for warnings (sf_view_warn), further
	 * mappings (sf_view_hold_map) and the state's way back to the view. On
	 * failure returns a negative errno with e->msg saying why; the daemon
	 * records it in .shardfs/errors. */
	int (*parse)(const struct sf_open_args *a, struct sf_view *v, void **state,
		     struct sf_err *e);
	void (*free_state)(void *state);
	/* .shardfs/info.txt, info.json and verify (docs/design.md §3.2): each
	 * produced when read, with the state as its part's arg. NULL: the
	 * file is not shown. */
	sf_produce_fn info_txt, info_json, verify;
	/* Adds the view's entries to v->root (most of them lazily), after
	 * .shardfs/ (`meta`) is placed, so that ".shardfs" counts as taken; a
	 * format may add more to `meta` (rows/, tiles/). 0, or a negative errno
	 * with e->msg. */
	int (*build)(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e);
	/* Optional: gives back what the view holds that it can make again on
	 * demand from the container (an unindexed tar's index), every node kept as
	 * it is; true when it gave something back. Called only while no
	 * thread uses the view: the C API's handles idle while its cache is
	 * short (shardfs.c). */
	bool (*shed)(void *state);
	/* Instead of build, for a view that is a symlink (aliases): its target,
	 * from the state. Such a view has no .shardfs/ and holds no mapping. */
	const char *(*link)(const void *state);
};

/* Runs a check on a mapped file's probe, read with pread (sf_map_read): a
 * full open starts with the same check the listing made. */
struct sf_map;
int sf_check_file(int (*check)(const struct sf_probe *p, struct sf_err *e),
		  const struct sf_map *m, const char *path, struct sf_err *e);
/* Reads the probe of `name` in dirfd and runs the format's check; *st (if
 * not NULL) is the opened file's. */
int sf_format_check(const struct sf_format *f, int dirfd, const char *name, const char *path,
		    struct stat *st, struct sf_err *e);
/* One container for sf_format_check_many. */
struct sf_check {
	const struct sf_format *f;  /* its format (with a check) */
	const char *name;           /* an entry of the directory, looked at as a
				     * regular file (readdir's type, or lstat) */
	struct stat *st;            /* out: the opened file's, when rc is 0 */
	int rc;                     /* out: 0, or the negative errno of a failure */
};
/* Told of each container that fails, with the message that says why. */
typedef void (*sf_check_failed)(void *arg, const char *path, const char *msg);
/* Checks the `n` containers of directory dirfd (named `dir` in messages) as
 * sf_format_check checks each, batched through io_uring where the kernel
 * allows it (format/sf_probe.c). */
void sf_format_check_many(int dirfd, const char *dir, struct sf_check *c, size_t n,
			  sf_check_failed failed, void *arg);

/* The format claiming `name` in `dirpath`, or NULL. */
const struct sf_format *sf_format_for(const char *dirpath, const char *name);
/* The formats built in, i = 0, 1, ... until it returns NULL. */
const struct sf_format *sf_format_nth(size_t i);

/* Opens a container into a view with f's steps, and checks it against a
 * change in place while it was read (sf_map_check). */
int sf_format_open(const struct sf_format *f, const struct sf_open_args *a,
		   struct sf_view **out, struct sf_err *e);
/* Gives back what the view holds that it can make again (sf_format.shed):
 * true when it gave something. Only while no thread uses the view. */
bool sf_view_shed(struct sf_view *v);
/* The same steps unchecked: for a map that has no file
 * behind it (the fuzz harness). */
int sf_format_view(const struct sf_format *f, const struct sf_open_args *a,
		   struct sf_view **out, struct sf_err *e);
/* Opens `path` (a file outside any mount, for the tools): maps it, lists its
 * directory for siblings and opens the view. The file is taken as named;
 * the files beside it are opened beneath "/" with no symlink followed, as
 * the daemon opens them beneath SRC. `host` as sf_open_args.host. */
int sf_open_path(const char *path, const struct sf_host *host, struct sf_view **out,
		 struct sf_err *e);

#endif
