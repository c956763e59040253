/* The history footer's JSON (spec §9.2): history rows and metadata, inline
 * or spilled. A damaged footer never hides the datasets (§11.3): the
 * problem is kept in footer_error and the spill counts as absent. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_bytes.h"
#include "sf_map.h"
#include "tet.h"

static void __attribute__((format(printf, 2, 3)))
footer_fail(struct tet_file *tf, const char *fmt, ...)
{
	char buf[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	free(tf->footer_error);
	tf->footer_error = strdup(buf);
}

static bool all_strings(const json_t *a)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v)
		if (!json_is_string(v))
			return false;
	return true;
}

static bool string_map(const json_t *o)
{
	const char *k;
	json_t *v;
	if (!json_is_object(o))
		return false;
	json_object_foreach((json_t *)o, k, v)
		if (!json_is_string(v))
			return false;
	return true;
}

/* A row is {"op","source","at"[,"parents"][,"params"]} with no other key,
 * or the legacy [op, source, at]. */
static bool row_ok(const json_t *r)
{
	if (json_is_array(r))
		return json_array_size(r) == 3 && all_strings(r);
	if (!json_is_object(r))
		return false;
	static const char *const need[] = { "op", "source", "at" };
	for (int i = 0; i < 3; i++)
		if (!json_is_string(json_object_get(r, need[i])))
			return false;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)r, k, v) {
		if (strcmp(k, "parents") == 0) {
			if (!json_is_array(v) || !all_strings(v))
				return false;
		} else if (strcmp(k, "params") == 0) {
			if (!string_map(v))
				return false;
		} else if (strcmp(k, "op") && strcmp(k, "source") && strcmp(k, "at")) {
			return false;
		}
	}
	return true;
}

/* The typed parts of a metadata object (unknown keys are ignored). */
static const char *metadata_problem(const json_t *m)
{
	if (!json_is_object(m))
		return "metadata is not an object";
	const json_t *file = json_object_get(m, "file");
	if (file && !string_map(file))
		return "metadata.file is not an object of strings";
	const json_t *dss = json_object_get(m, "datasets");
	if (!dss)
		return NULL;
	if (!json_is_object(dss))
		return "metadata.datasets is not an object";
	const char *k;
	json_t *d;
	json_object_foreach((json_t *)dss, k, d) {
		if (!json_is_object(d))
			return "a metadata.datasets entry is not an object";
		const json_t *attrs = json_object_get(d, "attrs");
		const json_t *dims = json_object_get(d, "dim_names");
		const json_t *coords = json_object_get(d, "coords");
		if (attrs && !string_map(attrs))
			return "attrs is not an object of strings";
		if (dims && (!json_is_array(dims) || !all_strings(dims)))
			return "dim_names is not an array of strings";
		if (!coords)
			continue;
		if (!json_is_object(coords))
			return "coords is not an object";
		const char *axis;
		json_t *c;
		json_object_foreach((json_t *)coords, axis, c) {
			const json_t *labels = json_object_get(c, "labels");
			if (!json_is_object(c) || !json_is_array(labels) || !all_strings(labels))
				return "coords entry has no labels array of strings";
		}
	}
	return NULL;
}

/* metadata_ref {offset, len}: the spilled metadata before the footer JSON. */
/* Parses JSON copied out of [off, off+len) of the file: NULL with *rc 0
 * when it does not parse (je says why), with *rc < 0 when it cannot be
 * read. */
static json_t *load_json(struct tet_file *tf, uint64_t off, uint64_t len, json_error_t *je,
			 int *rc, struct sf_err *e)
{
	uint8_t *p;
	*rc = sf_map_copy(tf->map, off, len, &p, "footer", e);
	if (*rc)
		return NULL;
	json_t *j = json_loadb((const char *)p, (size_t)len, 0, je);
	free(p);
	return j;
}

/* 0, 1 when the footer failed (footer_error says why), or a read error. */
static int load_spill(struct tet_file *tf, const json_t *ref, uint64_t json_off,
		      struct sf_err *e)
{
	json_t *o = json_object_get(ref, "offset"), *l = json_object_get(ref, "len");
	if (!json_is_object(ref) || json_object_size(ref) != 2 || !json_is_integer(o) ||
	    !json_is_integer(l) || json_integer_value(o) < 0 || json_integer_value(l) < 0) {
		footer_fail(tf, "footer metadata_ref must be {\"offset\", \"len\"}");
		return 1;
	}
	uint64_t off = (uint64_t)json_integer_value(o), len = (uint64_t)json_integer_value(l);
	if (!sf_range_ok(json_off, off, len)) {
		footer_fail(tf, "footer metadata_ref [%llu, +%llu) out of bounds", (unsigned long long)off,
			    (unsigned long long)len);
		return 1;
	}
	/* from here the spill is part of the footer area, whatever it holds */
	tf->spill_off = off;
	tf->spill_len = len;
	if (len > 16u << 20) {
		footer_fail(tf, "footer metadata spill of %llu bytes is over the 16 MiB limit",
			    (unsigned long long)len);
		return 1;
	}
	json_error_t je;
	int rc;
	tf->spill_json = load_json(tf, off, len, &je, &rc, e);
	if (rc)
		return rc;
	if (!tf->spill_json) {
		footer_fail(tf, "footer metadata spill does not parse: %s", je.text);
		return 1;
	}
	return 0;
}

int tet_footer_parse(struct tet_file *tf, uint64_t json_off, struct sf_err *e)
{
	json_error_t je;
	int rc;
	json_t *j = load_json(tf, json_off, tf->json_len, &je, &rc, e);
	if (rc)
		return rc;
	if (!j) {
		footer_fail(tf, "footer JSON does not parse: %s (at byte %d)", je.text, je.position);
		return 0;
	}
	const json_t *hist = json_object_get(j, "history");
	const json_t *ref = json_object_get(j, "metadata_ref");
	json_t *meta = json_object_get(j, "metadata");
	const char *bad = NULL;
	if (!json_is_object(j))
		bad = "footer JSON is not an object";
	else if (hist && !json_is_array(hist))
		bad = "footer history is not an array";
	for (size_t i = 0; !bad && hist && i < json_array_size(hist); i++)
		if (!row_ok(json_array_get(hist, i)))
			bad = "footer history row is malformed";
	if (bad) {
		footer_fail(tf, "%s", bad);
		json_decref(j);
		return 0;
	}
	if (ref) {
		if ((rc = load_spill(tf, ref, json_off, e))) {
			json_decref(j);
			return rc < 0 ? rc : 0;
		}
		meta = tf->spill_json;
	}
	if (meta && (bad = metadata_problem(meta))) {
		footer_fail(tf, "footer %s", bad);
		json_decref(j);
		return 0;
	}
	tf->footer_json = j;
	tf->history = (json_t *)hist;
	tf->metadata = meta;
	return 0;
}
