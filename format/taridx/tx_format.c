/* The taridx descriptor: F.taridx opens with the shards F_<n>.tar beside it
 * (docs/design.md §3.7); the tree is tx_fold.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sf_map.h"
#include "tx.h"

static void fold_free(void *state)
{
	struct tx_fold *f = state;
	if (!f)
		return;
	tx_index_free(&f->ix);
	sf_turn_fini(&f->lookup_turn);
	tx_shards_free(f->shards, f->nshards);
	tx_samples_free(f->samples);
	free(f->hooked_member);
	free((void *)f->plain);
	sf_ids_free(&f->unkeyed);
	free(f->fold);
	free(f);
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

static int parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		 struct sf_err *e)
{
	size_t nlen = strlen(a->name);
	struct tx_fold *f = calloc(1, sizeof *f);
	if (!(*state = f))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	sf_turn_init(&f->lookup_turn);
	f->view = v;
	if (!(f->fold = strndup(a->name, nlen - strlen(".taridx"))))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	int rc = tx_index_parse(a->map->data, a->map->size, a->path, &f->ix, e);
	if (rc)
		return rc;
	if (!(f->hooked_member = calloc(f->ix.n_rows / 8 + 1, 1)) ||
	    !(f->plain = calloc(f->ix.n_rows / 8 + 1, 1)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	return map_shards(f, a, e);
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
	.free_state = fold_free,
	.info_txt = tx_info_txt,
	.info_json = tx_info_json,
	.verify = tx_verify,
	.build = tx_fold_build,
};
