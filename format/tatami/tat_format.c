/* The tatami format descriptor: a .tatami file opens as far as its header
 * and footer; everything else is read when the view is used. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_map.h"
#include "tat.h"

static void free_state(void *state)
{
	struct tat_file *tf = state;
	if (!tf)
		return;
	tat_search_free(tf->search);
	tat_free(tf);
	sf_turn_fini(&tf->memo_turn);
	free(tf->name_copy);
	free(tf);
}

static int parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		 struct sf_err *e)
{
	struct tat_file *tf = calloc(1, sizeof *tf);
	if (!(*state = tf))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	sf_turn_init(&tf->memo_turn);
	if (!(tf->name_copy = strdup(a->name)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	tf->view = v;
	tf->name = tf->name_copy;
	tf->map = a->map;
	tf->size = a->map->size;
	int rc = tat_parse(tf, e);
	if (rc)
		sf_err_prefix(e, "%s", a->path);
	return rc;
}

static int build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e)
{
	return tat_build_tree(state, e);
}

const struct sf_format tat_format = {
	.name = "tatami",
	.ext = ".tatami",
	.check = tat_check,
	.parse = parse,
	.free_state = free_state,
	.info_txt = tat_info_txt,
	.info_json = tat_info_json,
	.verify = tat_verify,
	.build = build,
};
