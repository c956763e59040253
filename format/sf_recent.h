/* A copy a lookup made for the read that asked for it: a small member's
 * header and payload in one pread, so that reading a member the host has
 * not looked up before costs one system call, not two (the Python module's
 * reads by name). Per thread and per read: never shared, never kept past
 * the read that asked (the daemon never asks: it serves mapped pages). */
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

/* The calling thread's lookups until sf_recent_take may copy along the
 * payload of what they find when it has at most `upto` bytes (a read of
 * that many from the start of the file). */
void sf_recent_want(size_t upto);
/* What sf_recent_want asked for: 0 when no read waits. */
size_t sf_recent_wanted(void);
/* Keeps buf (malloc'd; len bytes of map at off) for the read that asked,
 * freeing a copy kept before; frees it when no read asked. */
void sf_recent_keep(const struct sf_map *map, uint64_t off, uint8_t *buf, size_t len);
/* The copy kept since sf_recent_want (zeroed when none), the caller's to
 * sf_recent_free; asks for no more. */
struct sf_recent sf_recent_take(void);
void sf_recent_free(struct sf_recent *r);
/* Copies [off, off+len) of map to dst when r holds it. */
bool sf_recent_copy(const struct sf_recent *r, const struct sf_map *map, uint64_t off, size_t len,
		    void *dst);

#endif
