/* The tatami format descriptor: a .tatami file opens as far as its header
 * and footer; everything else is read when the view is used. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_map.h"
#include "tatami.h"

extern const struct sf_format sf_fmt_tatami;

static void free_state(void *state)
{
	struct tat_file *tf = state;
	tat_search_free(tf->search);
	tat_free(tf);
	pthread_mutex_destroy(&tf->memo_lock);
	free(tf->name_copy);
	free(tf);
}

static int tat_open(const struct sf_open_args *a, struct sf_view **out, struct sf_err *e)
{
	struct sf_view *v = sf_view_new(&sf_fmt_tatami, a->path);
	struct tat_file *tf = calloc(1, sizeof *tf);
	if (!v || !tf || !(tf->name_copy = strdup(a->name))) {
		free(tf);
		sf_view_unref(v);
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	}
	pthread_mutex_init(&tf->memo_lock, NULL);
	tf->view = v;
	tf->name = tf->name_copy;
	tf->base = a->map->data;
	tf->size = a->map->size;
	v->state = tf;
	v->free_state = free_state;
	int rc = tat_parse(tf, e);
	if (rc) {
		sf_err_prefix(e, "%s", a->path);
		sf_view_unref(v);
		return rc;
	}
	if ((rc = sf_view_hold_map(v, a->map)) || (rc = tat_build_tree(tf, e))) {
		sf_view_unref(v);
		return rc;
	}
	*out = v;
	return 0;
}

const struct sf_format sf_fmt_tatami = {
	.name = "tatami",
	.ext = ".tatami",
	.open = tat_open,
};
