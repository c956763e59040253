#include "sf_recent.h"

#include <stdlib.h>
#include <string.h>

/* Only between sf_recent_want and sf_recent_take of one read, which takes
 * what it holds: nothing is left in it when a thread ends. */
static _Thread_local size_t wanted;
static _Thread_local struct sf_recent kept;

void sf_recent_want(size_t upto)
{
	wanted = upto;
}

size_t sf_recent_wanted(void)
{
	return wanted;
}

void sf_recent_keep(const struct sf_map *map, uint64_t off, uint8_t *buf, size_t len)
{
	sf_recent_free(&kept);
	if (wanted)
		kept = (struct sf_recent){ map, off, len, buf };
	else
		free(buf);
}

struct sf_recent sf_recent_take(void)
{
	struct sf_recent r = kept;
	memset(&kept, 0, sizeof kept);
	wanted = 0;
	return r;
}

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
