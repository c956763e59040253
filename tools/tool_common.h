/* What the tools over the public API (shardfs.h) share. */
#ifndef TOOL_COMMON_H
#define TOOL_COMMON_H

#include <stdio.h>

#include <stdbool.h>

#include "shardfs.h"

/* Reads the whole file PATH of a container opened with the public API into
 * a malloc'd, NUL-terminated buffer, printing "<prog>: <message>" on failure. */
int tool_slurp(const char *prog, struct shardfs *h, const char *path, char **out,
	       size_t *len);

#endif
