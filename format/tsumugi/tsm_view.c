/* The tsumugi format: a `.tsumugi` shard opens (header, footer, trailer and
 * dictionaries only) into the view of docs/design.md §3.5. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_map.h"
#include "tsm_shard.h"

extern const struct sf_format sf_fmt_tsumugi;

static int tsm_open(const struct sf_open_args *a, struct sf_view **out, struct sf_err *e)
{
	struct sf_view *v = sf_view_new(&sf_fmt_tsumugi, a->path);
	struct tsm_shard *s = calloc(1, sizeof *s);
	if (!v || !s || !(s->file_name = strdup(a->name))) {
		sf_view_unref(v);
		tsm_shard_free(s);
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	}
	v->state = s;
	v->free_state = tsm_shard_free;
	s->view = v;
	s->data = a->map->data;
	s->size = a->map->size;
	pthread_mutex_init(&s->fwd_lock, NULL);
	int rc = tsm_parse(s, a->path, e);
	if (rc)
		goto fail;
	rc = -ENOMEM;
	if (sf_view_hold_map(v, a->map) ||
	    !sf_view_add_meta(v, tsm_info_txt, tsm_info_json, tsm_verify, s) ||
	    tsm_add_regions(s, v->root) || tsm_add_docs(s, v->root) ||
	    tsm_add_features(s, v->root)) {
		sf_fail(e, rc, "%s: out of memory", a->path);
		goto fail;
	}
	if (s->h.region_count != s->nregions)
		sf_view_warn(v, "%s: header counts %u regions, the footer lists %zu", a->path,
			     s->h.region_count, s->nregions);
	for (size_t i = 0; i < s->nregions; i++)
		if (s->regions[i].bad)
			sf_view_warn(v, "%s: regions/%s: %s", a->path, s->regions[i].name,
				     s->regions[i].bad);
	*out = v;
	return 0;
fail:
	sf_view_unref(v);
	return rc;
}

const struct sf_format sf_fmt_tsumugi = {
	.name = "tsumugi",
	.ext = ".tsumugi",
	.open = tsm_open,
};
