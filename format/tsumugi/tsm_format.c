/* The tsumugi format: a `.tsumugi` shard opens (header, footer, trailer and
 * dictionaries only) into the view of docs/design.md §3.5. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_map.h"
#include "tsm.h"
#include "sf_view_impl.h"

static int parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		 struct sf_err *e)
{
	struct tsm_shard *s = calloc(1, sizeof *s);
	if (!(*state = s))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	sf_turn_init(&s->fwd_turn);
	if (!(s->file_name = strdup(a->name)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	s->view = v;
	s->map = a->map;
	s->size = a->map->size;
	int rc = tsm_parse(s, a->path, e);
	if (rc)
		return rc;
	if (s->h.region_count != s->nregions)
		sf_view_warn(v, "%s: header counts %u regions, the footer lists %zu", a->path,
			     s->h.region_count, s->nregions);
	for (size_t i = 0; i < s->nregions; i++)
		if (s->regions[i].bad)
			sf_view_warn(v, "%s: regions/%s: %s", a->path, s->regions[i].name,
				     s->regions[i].bad);
	return 0;
}

static int build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e)
{
	struct tsm_shard *s = state;
	if (tsm_add_regions(s, v->root) || tsm_add_docs(s, v->root) ||
	    tsm_add_features(s, v->root))
		return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
	return 0;
}

const struct sf_format tsm_format = {
	.name = "tsumugi",
	.ext = ".tsumugi",
	.check = tsm_check,
	.parse = parse,
	.free_state = tsm_shard_free,
	.info_txt = tsm_info_txt,
	.info_json = tsm_info_json,
	.verify = tsm_verify,
	.build = build,
};
