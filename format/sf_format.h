/* The formats shardfs recognises, and how a container becomes a view.
 *
 * A format claims source files by name (its extension, or a match hook),
 * and opens one into a view: only as far as header and footer (everything
 * else is lazy). The daemon places the view beside the file (docs/design.md §3.1):
 * named after the file with `strip` removed, or "<file name>.d".
 */
#ifndef SF_FORMAT_H
#define SF_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

#include "sf_err.h"

struct sf_map;
struct sf_view;

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
};

/* Maps `rel`, named relative to the container's directory ("x_0000.tar",
 * "../manifest.json"), beneath a->topfd: a symlink on the way, a path
 * leading above the top, or anything but a regular file is refused with
 * e->msg saying so. */
int sf_map_beside(const struct sf_open_args *a, const char *rel, struct sf_map **out,
		  struct sf_err *e);
/* Whether `rel` (as for sf_map_beside) is a directory beneath the top,
 * reached with no symlink followed. */
bool sf_dir_beside(const struct sf_open_args *a, const char *rel);

struct sf_format {
	const char *name;  /* "tsumugi" */
	const char *ext;   /* ".tsumugi": claimed files end with it, and the view
			    * is named without it */
	/* Optional further test (e.g. alias JSON only inside "aliases/"). */
	bool (*match)(const char *dirpath, const char *name);
	/* The view depends on sibling files too (taridx shards): reopen it
	 * whenever the directory changes, not only when the file does. */
	bool uses_siblings;
	/* Opens the container. On failure returns a negative errno with e->msg
	 * saying why; the daemon records it in .shardfs/errors. */
	int (*open)(const struct sf_open_args *a, struct sf_view **out, struct sf_err *e);
};

/* The format claiming `name` in `dirpath`, or NULL. */
const struct sf_format *sf_format_for(const char *dirpath, const char *name);
/* The formats built in, i = 0, 1, ... until it returns NULL. */
const struct sf_format *sf_format_nth(size_t i);

/* Opens `path` (a file outside any mount, for the tools): maps it, lists its
 * directory for siblings and opens the view. The file is taken as named;
 * the files beside it are opened beneath "/" with no symlink followed, as
 * the daemon opens them beneath SRC. */
int sf_open_path(const char *path, struct sf_view **out, struct sf_err *e);

#endif
