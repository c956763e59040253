/* Checks of a view's mappings against a change in place (sf_mapcheck.h). */
#include "sf_mapcheck.h"

#include <stdatomic.h>
#include <stdint.h>

#include "sf_map.h"
#include "sf_view_impl.h"

/* Views of a few mappings: each is checked (a fstat apiece). A fold of a
 * thousand tars: its index only; what it serves of the tars is served
 * zero-copy and checked as it is read (sf_file_read). */
#define CHECK_ALL_MAX 8

static int check(struct sf_view *v, struct sf_err *e)
{
	if (!v)
		return 0;
	if (v->nmaps > CHECK_ALL_MAX)
		return v->source ? sf_map_check(v->source, e) : 0;
	return sf_view_check(v, e);
}

int sf_checked_run(struct sf_view *v, sf_checked_fn fn, void *ctx, struct sf_err *e)
{
	int rc = check(v, e);
	if (rc)
		return rc;
	rc = fn(ctx, e);
	/* copies of a file rewritten or extended in place read fine, but are
	 * of another file: what was read counts only if the files are still
	 * as mapped */
	int after = check(v, e);
	return after ? after : rc;
}

int sf_view_check(struct sf_view *v, struct sf_err *e)
{
	for (size_t i = 0; i < v->nmaps; i++) {
		int rc = sf_map_check(v->maps[i], e);
		if (rc)
			return rc;
	}
	return 0;
}

int sf_view_failed_by_change(struct sf_view *v, struct sf_err *e)
{
	/* a read of a fold must not look at each of its thousand tars */
	uint64_t now = sf_map_changes();
	if (atomic_load(&v->intact_at) == now)
		return 0;
	for (size_t i = 0; i < v->nmaps; i++)
		if (atomic_load(&v->maps[i]->changed))
			return sf_map_check(v->maps[i], e);
	atomic_store(&v->intact_at, now);
	return 0;
}

struct sf_map *sf_view_map_at(const struct sf_view *v, const void *p)
{
	/* maps are kept in address order (sf_view_hold_map) */
	uintptr_t a = (uintptr_t)p;
	size_t lo = 0, hi = v->nmaps;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if ((uintptr_t)v->maps[mid]->data <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	struct sf_map *m = v->maps[lo - 1];
	return a - (uintptr_t)m->data < m->size ? m : NULL;
}
