/* The taridx descriptor: F.taridx opens with the shards F_<n>.tar beside it
 * (docs/design.md §3.7); the tree is tx_fold.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sf_big.h"
#include "sf_bytes.h"
#include "sf_map.h"
#include "tx.h"

void tx_fold_free(void *state)
{
	struct tx_fold *f = state;
	if (!f)
		return;
	tx_index_free(&f->ix);
	sf_turn_fini(&f->lookup_turn);
	sf_turn_fini(&f->ready_turn);
	sf_buf_unref(f->built);
	free(f->unready);
	tx_walked_put(f->walked);
	if (f->charged)
		sf_cache_uncharge(f->charged_to, f->charged);
	if (f->named_charged)
		sf_cache_uncharge(f->named_charged_to, f->named_charged);
	sf_big_free(f->named);
	tx_shards_free(f->shards, f->nshards);
	tx_samples_free(f->samples);
	free(f->hooked_member);
	free((void *)f->plain);
	sf_buf_unref(f->unkeyed);
	free(f->unkeyed_why);
	if (f->unkeyed_charged)
		sf_cache_uncharge(f->unkeyed_charged_to, f->unkeyed_charged);
	sf_buf_unref(f->noted);
	free(f->fold);
	free(f);
}

struct tx_fold *tx_fold_new(const struct sf_open_args *a, struct sf_view *v, void **state,
			    const char *ext, struct sf_err *e)
{
	struct tx_fold *f = calloc(1, sizeof *f);
	if ((*state = f)) {
		sf_turn_init(&f->lookup_turn);
		sf_turn_init(&f->ready_turn);
		atomic_init(&f->ready, false);
		f->view = v;
		f->fold = strndup(a->name, strlen(a->name) - strlen(ext));
	}
	if (!f || !f->fold) {
		sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
		return NULL;
	}
	return f;
}

static int map_shards(struct tx_fold *f, const struct sf_open_args *a, struct sf_err *e)
{
	int rc = tx_shards_find(f->fold, a->siblings, a->nsiblings, &f->shards, &f->nshards);
	if (rc)
		return sf_fail(e, rc, "%s: out of memory", a->path);
	if (!f->nshards)
		sf_view_warn(f->view, "%s: no shards %s_*.tar or %s-*.tar beside the index", a->path,
			     f->fold, f->fold);
	for (size_t i = 0; i < f->nshards; i++) {
		struct tx_shard *s = &f->shards[i];
		struct sf_err me = { { 0 } };
		if (sf_map_beside(a, s->name, &s->map, &me) == 0) {
			if ((rc = sf_view_hold_map(f->view, s->map)))
				return sf_fail(e, rc, "%s: out of memory", a->path);
			continue;
		}
		s->map = NULL;
		if (!(s->problem = strdup(me.msg)))
			return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
		sf_view_warn(f->view, "%s: shard %zu (%s): %s", a->path, i, s->name, me.msg);
	}
	return 0;
}

static bool later(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec > b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec > b->tv_nsec);
}

/* Whether the header of row `row` lies in its tar, passes its checksum and
 * holds the key the row states: 1 or 0, or a negative errno with e set
 * when the tar cannot be read. */
static int header_matches(const struct tx_fold *f, const struct tx_row *row, struct sf_err *e)
{
	const struct sf_map *m = f->shards[row->fid].map;
	uint8_t h[TX_BLOCK];
	if (!sf_range_ok(m->size, row->off, TX_BLOCK))
		return 0;
	int rc = sf_map_read(m, row->off, TX_BLOCK, h, "a sampled header", e);
	if (rc)
		return rc;
	if (!tx_hdr_checksum_ok(h))
		return 0;
	struct tx_key k;
	tx_key_from(h, tx_field_len(h, 100), &k);
	return k.hash == row->keyhash;
}

#define SAMPLED 64

/* An index in another directory than its tars (--index-dir) must match them before
 * anything is shown: every shard readable and not changed after the index
 * was written (mtime), every row inside its shard and each shard holding
 * nothing after its last row but the archive's end (size), and the
 * headers of SAMPLED rows spread over the index, and each shard's last,
 * holding the key their rows state (a sampled header). */
static int check_against_tars(struct tx_fold *f, const struct sf_open_args *a, struct sf_err *e)
{
	const char *why = "refused: an index in --index-dir must match its tars";
	if (!f->nshards)
		return sf_fail(e, -EINVAL, "%s: %s, and there are none beside it", a->path, why);
	for (size_t i = 0; i < f->nshards; i++) {
		const struct tx_shard *sh = &f->shards[i];
		if (!sh->map)
			return sf_fail(e, -EINVAL, "%s: %s: shard %s: %s", a->path, why, sh->name, sh->problem);
		if (later(&sh->map->st.st_mtim, &a->map->st.st_mtim))
			return sf_fail(e, -EINVAL, "%s: %s: %s was modified after the index was written (mtime)",
				       a->path, why, sh->name);
	}
	uint64_t *end = calloc(f->nshards, sizeof *end);
	uint64_t *last = calloc(f->nshards, sizeof *last);
	int rc = end && last ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	uint64_t step = f->ix.n_rows / SAMPLED + 1;
	int match = 1;
	struct tx_rows w = { 0 };
	for (uint64_t r = 0; !rc && r < f->ix.n_rows; r++) {
		struct tx_row row;
		if ((rc = tx_rows_get(&f->ix, &w, r, &row, e)))
			break;
		const struct sf_map *m = row.fid < f->nshards ? f->shards[row.fid].map : NULL;
		/* both under the tar's size: no sum below wraps */
		uint64_t stop = m && row.off <= m->size && row.size <= m->size ?
				row.off + TX_BLOCK + (row.size + TX_BLOCK - 1) / TX_BLOCK * TX_BLOCK : 0;
		if (!stop)
			rc = sf_fail(e, -EINVAL, "%s: %s: row %llu lies outside the shards (size)", a->path, why,
				     (unsigned long long)r);
		else if (r % step == 0 && (match = header_matches(f, &row, e)) <= 0)
			rc = match < 0 ? match : sf_fail(e, -EINVAL, "%s: %s: row %llu: the header at offset %llu of %s does not hold its key (a sampled header)",
				     a->path, why, (unsigned long long)r, (unsigned long long)row.off,
				     f->shards[row.fid].name);
		else if (stop >= end[row.fid]) {
			end[row.fid] = stop;
			last[row.fid] = r;
		}
	}
	tx_rows_free(&w);
	for (size_t i = 0; !rc && i < f->nshards; i++) {
		const struct sf_map *m = f->shards[i].map;
		struct tx_row row;
		if ((rc = tx_row_get(&f->ix, last[i], &row, e)))
			break;
		uint8_t after[TX_BLOCK];
		bool more = end[i] + TX_BLOCK <= m->size;
		match = end[i] && end[i] <= m->size + TX_BLOCK ? header_matches(f, &row, e) : 1;
		if (match < 0 || (more && (rc = sf_map_read(m, end[i], TX_BLOCK, after, "what follows its rows", e)))) {
			rc = match < 0 ? match : rc;
			break;
		}
		/* the last member's padding may be cut at the tar's end */
		if (end[i] > m->size + TX_BLOCK)
			rc = sf_fail(e, -EINVAL, "%s: %s: its rows run past the end of %s (%zu bytes) (size)",
				     a->path, why, f->shards[i].name, m->size);
		else if (!match)
			rc = sf_fail(e, -EINVAL, "%s: %s: the last row of %s does not match its header (a sampled header)",
				     a->path, why, f->shards[i].name);
		else if (more && !tx_block_is_zero(after))
			rc = sf_fail(e, -EINVAL, "%s: %s: %s holds more than its rows after offset %llu (size)",
				     a->path, why, f->shards[i].name, (unsigned long long)end[i]);
	}
	free(end);
	free(last);
	return rc;
}

static int parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		 struct sf_err *e)
{
	struct tx_fold *f = tx_fold_new(a, v, state, ".taridx", e);
	if (!f)
		return -ENOMEM;
	atomic_store(&f->ready, true);
	int rc = tx_index_open(a->map, a->path, &f->ix, e);
	if (rc)
		return rc;
	if (!(f->hooked_member = calloc(f->ix.n_rows / 8 + 1, 1)) ||
	    !(f->plain = calloc(f->ix.n_rows / 8 + 1, 1)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	if ((rc = map_shards(f, a, e)))
		return rc;
	return a->other_dir ? check_against_tars(f, a, e) : 0;
}

const struct sf_format tx_format = {
	.name = "taridx",
	.ext = ".taridx",
	/* fids are ranks among the shards beside the index: a shard added or
	 * removed changes what every later row points at */
	.uses_siblings = true,
	.maps_beside = true, /* the shards */
	.check = tx_check,
	.parse = parse,
	.free_state = tx_fold_free,
	.info_txt = tx_info_txt,
	.info_json = tx_info_json,
	.verify = tx_verify,
	.build = tx_fold_build,
};
