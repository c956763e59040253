/* What the format unit tests share for looking into a view: open a
 * container expecting it to open, and read a whole file of its view. Apart
 * from check.h, because test_api sees only the public API. */
#ifndef VIEWS_H
#define VIEWS_H

#include "check.h"
#include "sf_format.h"
#include "sf_read.h"
#include "sf_view_impl.h"

/* Opens the container at `path`, CHECKing that it opens; NULL if not. */
static inline struct sf_view *open_ok(const char *path)
{
	struct sf_view *v = NULL;
	struct sf_err e = { { 0 } };
	int rc = sf_open_path(path, NULL, &v, &e);
	if (rc)
		fprintf(stderr, "open %s: %s\n", path, e.msg);
	CHECK_EQ_U(rc, 0);
	return rc ? NULL : v;
}

/* Reads a whole view file without a cache into *out (malloc'd, with a NUL
 * after the *len bytes, NULL on failure); returns 0 or the negative errno.
 * The bytes read must be the size the file reports (docs/design.md §3.4). */
static inline int read_view(struct sf_view *v, const char *path, uint8_t **out, size_t *len)
{
	struct sf_err e = { { 0 } };
	struct sf_node *n = NULL;
	*out = NULL;
	*len = 0;
	int rc = sf_view_walk(v->root, path, &n, &e);
	if (!rc)
		rc = sf_file_ready(n, &sf_nocache, &e);
	if (rc)
		return rc;
	struct sf_readv rv = { 0 };
	rc = sf_file_read(n, 0, n->u.file.size, &sf_nocache, &rv, &e);
	if (!rc) {
		CHECK_EQ_U(rv.bytes, n->u.file.size);
		*out = malloc(rv.bytes + 1);
		sf_readv_copy(&rv, *out, NULL);
		(*out)[rv.bytes] = 0;
		*len = rv.bytes;
	}
	sf_readv_release(&rv);
	return rc;
}

#endif
