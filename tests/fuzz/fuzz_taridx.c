/* libFuzzer target for taridx: the input is split into an index and one
 * tar shard (the first two bytes say where), written as f.taridx and
 * f_0000.tar in a private directory; the fold is opened, listed, looked up
 * by flat names and every file of the view is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sf_format.h"
#include "sf_view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void put(const char *name, const uint8_t *p, size_t n)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	if (n && fwrite(p, 1, n, f) != n)
		abort();
	fclose(f);
}

static void read_tree(struct sf_node *n, int depth)
{
	struct sf_err e;
	if (depth > 64)
		return;
	if (n->kind == SF_DIR) {
		if (sf_dir_ready(n, &e))
			return;
		for (size_t i = 0; i < n->u.dir.n; i++)
			read_tree(n->u.dir.kids[i], depth + 1);
		return;
	}
	if (n->kind != SF_FILE || sf_file_ready(n, &sf_nocache, &e))
		return;
	struct sf_readv rv = { 0 };
	if (sf_file_read(n, 0, n->u.file.size, &sf_nocache, &rv, &e) == 0 && rv.bytes) {
		uint8_t *copy = malloc(rv.bytes);
		if (copy) {
			sf_readv_copy(&rv, copy);
			free(copy);
		}
	}
	sf_readv_release(&rv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		strcpy(dir, "/tmp/fuzz_taridx.XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
	if (size < 2)
		return 0;
	size_t cut = (size_t)(data[0] | data[1] << 8);
	data += 2;
	size -= 2;
	if (cut > size)
		cut = size;
	put("f.taridx", data, cut);
	put("f_0000.tar", data + cut, size - cut);
	char path[128];
	snprintf(path, sizeof path, "%s/f.taridx", dir);
	struct sf_view *v = NULL;
	struct sf_err e;
	if (sf_open_path(path, &v, &e))
		return 0;
	/* flat names first (the index path), then the listing */
	static const char *const names[] = { "a.jpg", "x.txt", "..", "%2F.jpg", ".shardfs#1" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct sf_node *n = NULL;
		if (sf_dir_find(v->root, names[i], &n, &e) == 0 && n)
			read_tree(n, 1);
	}
	read_tree(v->root, 0);
	struct sf_node *meta = NULL;
	if (sf_dir_find(v->root, ".shardfs", &meta, &e) == 0 && meta)
		read_tree(meta, 1);
	sf_view_unref(v);
	return 0;
}
