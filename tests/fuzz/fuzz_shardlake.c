/* libFuzzer target for the Shardlake formats: the input is written as a
 * shard (beside a manifest and codebook made of the same bytes) and as an
 * alias, each opened and every file of its view read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sf_format.h"
#include "sf_view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];

static void put(const char *rel, const uint8_t *data, size_t size)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", root, rel);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	if (size && fwrite(data, 1, size, f) != size)
		abort();
	fclose(f);
}

static void walk(struct sf_node *n)
{
	struct sf_err e;
	if (n->kind == SF_DIR) {
		if (sf_dir_ready(n, &e))
			return;
		for (size_t i = 0; i < n->u.dir.n; i++)
			walk(n->u.dir.kids[i]);
	} else if (n->kind == SF_FILE && sf_file_ready(n, &sf_nocache, &e) == 0) {
		struct sf_readv rv = { 0 };
		if (sf_file_read(n, 0, n->u.file.size, &sf_nocache, &rv, &e) == 0 && rv.bytes) {
			uint8_t *buf = malloc(rv.bytes);
			sf_readv_copy(&rv, buf);
			free(buf);
		}
		sf_readv_release(&rv);
	}
}

static void open_walk(const char *rel)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", root, rel);
	struct sf_view *v = NULL;
	struct sf_err e;
	if (sf_open_path(path, &v, &e) == 0) {
		walk(v->root);
		sf_view_unref(v);
	}
}

static void remove_root(void)
{
	char cmd[96];
	snprintf(cmd, sizeof cmd, "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_shardlake: could not remove %s\n", root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!root[0]) {
		snprintf(root, sizeof root, "/tmp/fuzz_shardlake.XXXXXX");
		if (!mkdtemp(root))
			abort();
		atexit(remove_root);
		char cmd[256];
		snprintf(cmd, sizeof cmd, "mkdir -p %s/indexes/v/shards %s/aliases", root, root);
		if (system(cmd) != 0)
			abort();
	}
	/* the first byte chooses which side files the shard sees */
	uint8_t mode = size ? data[0] : 0;
	put("indexes/v/shards/shard-0000.sidx", data, size);
	put("indexes/v/manifest.json", mode & 1 ? data : (const uint8_t *)"", mode & 1 ? size : 0);
	put("indexes/v/pq_codebook.bin", mode & 2 ? data : (const uint8_t *)"", mode & 2 ? size : 0);
	put("aliases/a.json", data, size);
	open_walk("indexes/v/shards/shard-0000.sidx");
	open_walk("aliases/a.json");
	return 0;
}
