#include "sl_manifest.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "sf_turn.h"

int sl_manifest_parse(const uint8_t *p, size_t len, const char *path, json_t **out,
		      struct sf_err *e)
{
	json_error_t je;
	json_t *j = json_loadb((const char *)p, len, 0, &je);
	if (!j)
		return sf_fail(e, -EINVAL, "%s: not JSON: line %d: %s", path, je.line, je.text);
	if (!json_is_object(j) || !json_is_array(json_object_get(j, "shards"))) {
		json_decref(j);
		return sf_fail(e, -EINVAL, "%s: not a manifest (no \"shards\" array)", path);
	}
	*out = j;
	return 0;
}

static struct sf_turn memo_turn = SF_TURN_INIT;
static struct {
	bool valid;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int rc;
	struct sf_err err;
} memo;

static bool memo_is(const struct stat *st)
{
	return memo.valid && memo.dev == st->st_dev && memo.ino == st->st_ino &&
	       memo.size == st->st_size && memo.mtime.tv_sec == st->st_mtim.tv_sec &&
	       memo.mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The most memory the check at open may parse with: opening has no
 * budget to charge, and the check runs under one lock for every shard. A
 * larger manifest is checked when info or verify reads it, charged. */
#define CHECK_COST (32u << 20)

static int parse_only(const struct sf_map *m, struct sf_err *e)
{
	/* the parse costs more than the bytes: a larger file is not copied */
	if (m->size > CHECK_COST)
		return 0;
	uint8_t *p;
	int rc = sf_map_copy(m, 0, m->size, &p, "manifest", e);
	if (rc || sf_json_parse_cost(p, m->size) > CHECK_COST) {
		free(p);
		return rc;
	}
	json_t *j = NULL;
	rc = sl_manifest_parse(p, m->size, m->path, &j, e);
	json_decref(j);
	free(p);
	return rc;
}

int sl_manifest_check(const struct sf_map *m, struct sf_err *e)
{
	sf_turn_take(&memo_turn);
	if (!memo_is(&m->st)) {
		memo.rc = parse_only(m, &memo.err);
		memo.valid = true;
		memo.dev = m->st.st_dev;
		memo.ino = m->st.st_ino;
		memo.size = m->st.st_size;
		memo.mtime = m->st.st_mtim;
	}
	int rc = memo.rc;
	if (rc)
		*e = memo.err;
	sf_turn_give(&memo_turn);
	return rc;
}

json_t *sl_manifest_entry(json_t *manifest, const char *name)
{
	size_t i, n = strlen(name);
	json_t *s;
	json_array_foreach(json_object_get(manifest, "shards"), i, s) {
		const char *key = json_string_value(json_object_get(s, "artifact_key"));
		if (!key)
			continue;
		size_t k = strlen(key);
		if (k >= n && strcmp(key + k - n, name) == 0 && (k == n || key[k - n - 1] == '/'))
			return s;
	}
	return NULL;
}

const char *sl_entry_fingerprint(json_t *entry)
{
	const char *f = json_string_value(json_object_get(entry, "sha256"));
	return f ? f : json_string_value(json_object_get(entry, "fingerprint"));
}
