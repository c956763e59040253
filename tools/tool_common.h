/* What every tool over format/ shares: opening a container and printing a
 * file of its view. */
#ifndef TOOL_COMMON_H
#define TOOL_COMMON_H

#include <stdio.h>

#include "shardfs.h"
#include "sf_format.h"
#include "sf_view.h"

/* Opens FILE's view, printing "<prog>: <message>" on failure. */
int tool_open(const char *prog, const char *path, struct sf_view **out);
/* Writes the whole content of a view file to `out`. */
int tool_write_file(const char *prog, struct sf_node *f, FILE *out);
/* Resolves PATH inside the view and writes it to `out`. */
int tool_cat(const char *prog, struct sf_view *v, const char *path, FILE *out);

/* Reads the whole file PATH of a container opened with the public API into
 * a malloc'd, NUL-terminated buffer, printing "<prog>: <message>" on failure. */
int tool_slurp(const char *prog, struct shardfs *h, const char *path, char **out,
	       size_t *len);

#endif
