/* Read-only memory mappings of source files, shared by reference count:
 * every extent that points into a mapping keeps it alive through its view. */
#ifndef SF_MAP_H
#define SF_MAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sf_err.h"

struct sf_map {
	atomic_uint refs;
	const uint8_t *data; /* NULL when size == 0 */
	size_t size;
	struct stat st;      /* as fstat saw the file when it was mapped */
	char *path;          /* for messages */
};

/* Maps the regular file `path` beneath directory `top`, with no symlink
 * followed (sf_open.h). `shown` is what messages call the file. */
int sf_map_beneath(int top, const char *path, const char *shown,
		   struct sf_map **out, struct sf_err *e);
/* Maps `path` as a tool's user named it (symlinks followed): only a regular
 * file, looked at before it is opened, so a FIFO never blocks. */
int sf_map_open(const char *path, struct sf_map **out, struct sf_err *e);
struct sf_map *sf_map_ref(struct sf_map *m);
/* Takes the mapping's pages out of this process's page tables (the page
 * cache keeps them, so the next access refaults them cheaply): resident
 * memory then holds only what is in use. */
void sf_map_drop_pages(const struct sf_map *m);
void sf_map_unref(struct sf_map *m);

#endif
