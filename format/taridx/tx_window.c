/* Reading tar headers through copies (tx.h, struct tx_window): parsing
 * never touches the mapping, so a lost page is an error code. */
#include <errno.h>
#include <stdlib.h>

#include "sf_bytes.h"
#include "tx.h"
#include "tx_z.h"

void tx_window_free(struct tx_window *w)
{
	free(w->buf);
	w->buf = NULL;
	w->len = w->cap = 0;
	tx_rows_free(&w->rows);
}

bool tx_window_room(struct tx_window *w, size_t len)
{
	uint8_t *b = len > w->cap ? realloc(w->buf, len) : w->buf;
	if (!b)
		return false;
	w->buf = b;
	w->cap = len > w->cap ? len : w->cap;
	return true;
}

int tx_window_get(struct tx_window *w, const struct sf_map *map, uint64_t at, uint64_t need,
		  const uint8_t **p, struct sf_err *e)
{
	if (w->len && w->map == map && at >= w->off && at - w->off <= w->len &&
	    need <= w->len - (at - w->off)) {
		*p = w->buf + (at - w->off);
		return 0;
	}
	if (!sf_range_ok(map->size, at, need))
		return sf_fail(e, -EINVAL, "%s: tar headers: [%llu, +%llu) is past its end", map->path,
			       (unsigned long long)at, (unsigned long long)need);
	/* a compressed tar's headers kept apart need no decoding */
	if (map->read && !w->archive && tx_z_heads_window(map, w, at, need)) {
		*p = w->buf;
		return 0;
	}
	uint64_t want = w->ahead ? w->ahead : TX_WINDOW_SMALL;
	if (want > map->size - at)
		want = map->size - at;
	if (want < need)
		want = need;
	if (!tx_window_room(w, (size_t)want))
		return sf_fail(e, -ENOMEM, "%s: tar headers: out of memory", map->path);
	w->len = 0;
	int rc = sf_map_read(map, at, want, w->buf, "tar headers", e);
	if (rc)
		return rc;
	w->map = map;
	w->off = at;
	w->len = want;
	*p = w->buf;
	return 0;
}

int tx_entry_read_copy(struct tx_window *w, const struct sf_map *map, uint64_t at,
		       struct tx_entry *en, const uint8_t **base, uint64_t *base_off,
		       struct sf_err *e)
{
	uint64_t tarsize = at < map->size ? map->size - at : 0, need = tarsize < TX_BLOCK ? tarsize : TX_BLOCK;
	for (;;) {
		const uint8_t *p = NULL;
		uint64_t have = 0;
		if (need) {
			int rc = tx_window_get(w, map, at, need, &p, e);
			if (rc)
				return rc;
			have = w->off + w->len - at;
		}
		/* the entry's blocks from `at` on: more of them copied while it
		 * asks for more (doubling, so linear in what it reads, which
		 * TX_CHAIN_MAX, TX_RECORDS_MAX and TX_SPARSE_MAX bound) */
		int rc = tx_entry_read_in(p, have, tarsize, 0, en);
		uint64_t more = 0;
		if (rc == -EAGAIN)
			more = 2 * have;
		else if (rc == 0 && !en->bad && en->sparse == TX_SPARSE_10)
			more = en->data + (en->stored < TX_MAP_TEXT_MAX ? en->stored : TX_MAP_TEXT_MAX);
		if (more > have) {
			need = more < tarsize ? more : tarsize;
			continue;
		}
		if (rc < 0) /* cannot be: the whole rest of the tar was at hand */
			return sf_fail(e, -EIO, "%s: tar headers at %llu cannot be read", map->path,
				       (unsigned long long)at);
		en->first += at;
		en->hdr += at;
		en->data += at;
		en->next += at;
		if (en->bad)
			en->bad_at += at;
		*base = p;
		*base_off = at;
		return rc;
	}
}

/* Rows whose headers one TX_WINDOW_BYTES copy must hold for a pass to
 * read ahead so far. */
#define WINDOW_ROWS 128
/* A pass that reads a header alone where rows lie apart copies a window
 * only where they average at most this many bytes: a 512-byte pread costs
 * about what copying 6 KiB of a window does on a quiet machine (rows of
 * 3.75 KiB read alone cost 1.2 times the window's CPU, rows of 6.7 KiB
 * 0.93 times, and 0.6-0.7 times while other work loads the memory). */
#define ALONE_ROW_MAX 6144

int tx_window_plan(const struct tx_fold *f, struct tx_window *w, uint64_t r, bool headers_only,
		   struct sf_err *e)
{
	struct tx_row row, ahead;
	int rc = tx_rows_get(&f->ix, &w->rows, r, &row, e);
	if (rc || row.fid >= f->nshards)
		return rc;
	if (w->len && w->map == f->shards[row.fid].map && row.off >= w->off &&
	    row.off - w->off <= w->len && w->len - (row.off - w->off) >= TX_BLOCK)
		return 0;
	/* once per tar copy: a row of its own, not to move the pass's rows */
	uint64_t last = r + WINDOW_ROWS < f->ix.n_rows ? r + WINDOW_ROWS : f->ix.n_rows - 1;
	if ((rc = tx_row_get(&f->ix, last, &ahead, e)))
		return rc;
	uint64_t span = headers_only ? WINDOW_ROWS * ALONE_ROW_MAX : TX_WINDOW_BYTES - TX_BLOCK;
	bool dense = ahead.fid == row.fid && ahead.off >= row.off && ahead.off - row.off < span;
	w->ahead = dense ? TX_WINDOW_BYTES : headers_only ? TX_BLOCK : 0;
	return 0;
}
