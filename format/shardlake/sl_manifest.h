/* The index manifest (spec shardlake §4.1) as far as a shard needs it: its
 * own entry, the index's dims and codec, for info and verify. */
#ifndef SL_MANIFEST_H
#define SL_MANIFEST_H

#include <jansson.h>

#include "sf_err.h"
#include "sf_map.h"

/* Parses the manifest's bytes (copied out of its file); fails (naming
 * `path`) unless it is a JSON object whose "shards" is an array. *out is a
 * new reference. */
int sl_manifest_parse(const uint8_t *p, size_t len, const char *path, json_t **out,
		      struct sf_err *e);

/* The same check, remembered for the last manifest seen (by device, inode,
 * size and mtime), so that opening every shard of an index parses their
 * shared manifest once; a manifest too big to parse at open (32 MiB of
 * parsed JSON) passes, and is checked where it is read. */
int sl_manifest_check(const struct sf_map *m, struct sf_err *e);

/* The shards[] entry whose artifact_key names the file `name` (its last
 * component), or NULL. */
json_t *sl_manifest_entry(json_t *manifest, const char *name);

/* The entry's fingerprint text: "sha256", or "fingerprint" in older files. */
const char *sl_entry_fingerprint(json_t *entry);

#endif
