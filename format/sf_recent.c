#include "sf_recent.h"

#include <stdlib.h>
#include <string.h>

void sf_recent_free(struct sf_recent *r)
{
	free(r->buf);
	memset(r, 0, sizeof *r);
}

bool sf_recent_copy(const struct sf_recent *r, const struct sf_map *map, uint64_t off, size_t len,
		    void *dst)
{
	if (!r->buf || r->map != map || off < r->off || off - r->off > r->len ||
	    len > r->len - (off - r->off))
		return false;
	memcpy(dst, r->buf + (off - r->off), len);
	return true;
}
