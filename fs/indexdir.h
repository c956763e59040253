/* Indexes of SRC's folds kept in another directory than their tars (--index-dir DIR,
 * docs/tools.md): the index of fold F in SRC directory P is DIR/P/F.taridx,
 * read unless P holds F.taridx itself. The listing of P places the view
 * F/ for each (fs/listing.c), checked against its tars when opened. */
#ifndef FS_INDEXDIR_H
#define FS_INDEXDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

struct daemon;

/* One SRC directory's indexes in DIR. */
struct dir_indexes {
	struct dir_index {
		char *name;   /* "<F>.taridx", a regular file of DIR/P */
		struct stat st;
	} *ix;                /* sorted by name */
	size_t n;
	/* the SRC entries' names merged with them (sorted): what decides
	 * which tars a fold takes; made on first use */
	const char **cover;
	size_t ncover;
};

/* Finds DIR/rel's indexes (none when DIR/rel does not exist). 0, or a
 * negative errno. */
int indexdir_find(struct daemon *dm, const char *rel, struct dir_indexes *di);
void indexdir_free(struct dir_indexes *di);
/* src (n sorted SRC names) merged with di's names, kept in di->cover;
 * NULL when out of memory. */
const char *const *indexdir_cover(struct dir_indexes *di, char *const *src, size_t n,
				  size_t *total);
/* Whether DIR/rel/<name>.taridx is a regular file. */
bool indexdir_has_view(struct daemon *dm, const char *rel, const char *name);
/* DIR/rel opened as a directory: a descriptor, or a negative errno. */
int indexdir_open(struct daemon *dm, const char *rel);
/* The directory `rel` of --index-dir, made (with its parents) when it is
 * not there, for a view to keep what it derives (sf_open_args.keepdir):
 * its descriptor, or a negative errno (a read-only --index-dir). No
 * symlink is followed. */
int indexdir_keep(struct daemon *dm, const char *rel);
/* lstat of DIR/rel/name. 0 or a negative errno. */
int indexdir_lstat(struct daemon *dm, const char *rel, const char *name, struct stat *st);

#endif
