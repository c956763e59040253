/* Reading tar headers through copies (tx.h, struct tx_window): a pass over
 * every header of a tar of small members costs a page fault a header when
 * read from the mapping, more than copying the whole stretch. */
#include <errno.h>
#include <unistd.h>

#include "sf_bytes.h"
#include "tx.h"

const uint8_t *tx_window_at(struct tx_window *w, const struct sf_map *map, uint64_t at,
			    uint64_t need)
{
	if (w->len && w->map == map && at >= w->off && at - w->off <= w->len &&
	    need <= w->len - (at - w->off))
		return w->buf + (at - w->off);
	w->len = 0;
	if (!w->buf || at >= map->size || need > TX_WINDOW_BYTES)
		return NULL;
	size_t len = map->size - at < TX_WINDOW_BYTES ? (size_t)(map->size - at) : TX_WINDOW_BYTES;
	ssize_t got = pread(map->fd, w->buf, len, (off_t)at);
	/* a failed or short read leaves it to the mapping, whose fault the
	 * guard turns into EIO */
	if (got < 0 || (uint64_t)got < need)
		return NULL;
	w->map = map;
	w->off = at;
	w->len = (uint64_t)got;
	return w->buf;
}

int tx_entry_read_copy(struct tx_window *w, const struct sf_map *map, uint64_t at,
		       struct tx_entry *en, const uint8_t **base, uint64_t *base_off)
{
	for (int tries = 0; tries < 2; tries++) {
		/* the first try takes the copy as it stands, the second one
		 * copied from `at` */
		if (tries) {
			if (w->len && w->map == map && w->off == at)
				break; /* copied from `at` already */
			w->len = 0;
			if (!tx_window_at(w, map, at, TX_BLOCK))
				break;
		}
		if (!w->len || w->map != map || at < w->off || at - w->off > w->len)
			continue;
		int rc = tx_entry_read_in(w->buf, w->len, map->size - w->off, at - w->off, en);
		if (rc == -EAGAIN || (rc == 0 && !en->bad && en->sparse))
			continue;
		en->first += w->off;
		en->hdr += w->off;
		en->data += w->off;
		en->next += w->off;
		if (en->bad)
			en->bad_at += w->off;
		*base = w->buf;
		*base_off = w->off;
		return rc;
	}
	*base = map->data;
	*base_off = 0;
	return tx_entry_read(map->data, map->size, at, en);
}
