/* A copy a locate made for the read that asked for it (sf_stored.along): a
 * small member's header and payload in one pread, so that reading a member
 * the host has not looked up before costs one system call, not two (the
 * Python module's reads by name). Handed from the locate to its read:
 * never shared, never kept past that read (the daemon never asks: it
 * serves mapped pages). */
#ifndef SF_RECENT_H
#define SF_RECENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sf_map;

/* [off, off+len) of map, copied into buf (malloc'd). */
struct sf_recent {
	const struct sf_map *map;
	uint64_t off;
	size_t len;
	uint8_t *buf;
};

void sf_recent_free(struct sf_recent *r);
/* Copies [off, off+len) of map to dst when r holds it. */
bool sf_recent_copy(const struct sf_recent *r, const struct sf_map *map, uint64_t off, size_t len,
		    void *dst);

#endif
