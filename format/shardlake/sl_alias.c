/* aliases/<alias>.json (spec shardlake §4.2) shown as a symlink
 * aliases/<alias> -> ../indexes/<index_version> (docs/design.md §3.8). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sf_map.h"
#include "sf_view.h"
#include "sl_formats.h"

/* Only JSON files directly inside a directory named "aliases". */
static bool alias_match(const char *dirpath, const char *name)
{
	(void)name;
	const char *base = strrchr(dirpath, '/');
	return strcmp(base ? base + 1 : dirpath, "aliases") == 0;
}

/* A version names one directory under indexes/: never a path, never empty,
 * "." or "..", which would point the link elsewhere. */
static bool version_ok(const char *v)
{
	return v[0] && !strchr(v, '/') && strcmp(v, ".") != 0 && strcmp(v, "..") != 0;
}

/* The state is the link's target, "../indexes/<version>". */
static int alias_parse(const struct sf_open_args *a, struct sf_view *view, void **state,
		       struct sf_err *e)
{
	json_error_t je;
	const struct sf_map *m = a->map;
	json_t *j = json_loadb(m->data ? (const char *)m->data : "", m->size, 0, &je);
	if (!j)
		return sf_fail(e, -EINVAL, "%s: alias is not JSON: line %d: %s", a->path, je.line, je.text);
	const char *v = json_string_value(json_object_get(j, "index_version"));
	int rc = 0;
	if (!v)
		rc = sf_fail(e, -EINVAL, "%s: alias has no \"index_version\" string", a->path);
	else if (!version_ok(v))
		rc = sf_fail(e, -EINVAL, "%s: alias index_version \"%s\" is not a version name",
			     a->path, v);
	char *target = NULL;
	if (!rc && asprintf(&target, "../indexes/%s", v) < 0)
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	if (!rc) {
		*state = target;
		if (!sf_dir_beside(a, target))
			sf_view_warn(view, "%s: alias points at index version \"%s\", which does not exist (dangling link)",
				     a->path, v);
		const char *named = json_string_value(json_object_get(j, "alias"));
		size_t stem = strlen(a->name) - strlen(".json");
		if (named && (strlen(named) != stem || memcmp(named, a->name, stem) != 0))
			sf_view_warn(view, "%s: the file names alias \"%.*s\" but its \"alias\" field says \"%s\"",
				     a->path, (int)stem, a->name, named);
	}
	json_decref(j);
	return rc;
}

static const char *alias_link(const void *state)
{
	return state;
}

const struct sf_format sl_alias_format = {
	.name = "alias",
	.ext = ".json",
	.match = alias_match,
	.parse = alias_parse,
	.free_state = free,
	.link = alias_link,
};
