/* libFuzzer target: any bytes as a .tet file. The bytes are opened from an
 * in-memory map (no file system), and every file of the view is read, the
 * hidden .shardfs/ (info, verify, tiles) included, so the lazy decoders and
 * the whole-array assembly see the hostile input too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const struct sf_format sf_fmt_tet;

static void read_all(struct sf_node *n)
{
	struct sf_err e;
	if (n->kind == SF_DIR) {
		if (sf_dir_ready(n, &e) == 0)
			for (size_t i = 0; i < n->u.dir.n; i++)
				read_all(n->u.dir.kids[i]);
		return;
	}
	if (n->kind != SF_FILE || sf_file_ready(n, &sf_nocache, &e))
		return;
	/* in pieces, so reads that start inside an element are covered */
	for (uint64_t off = 0; off < n->u.file.size; off += 4093) {
		struct sf_readv rv = { 0 };
		sf_file_read(n, off, 4093, &sf_nocache, &rv, &e);
		sf_readv_release(&rv);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy, so the map owns its bytes like a real mapping */
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	struct sf_map m = { .data = size ? copy : NULL, .size = size, .path = (char *)"fuzz.tet" };
	atomic_init(&m.refs, 2); /* never freed through unref: it lives on the stack */
	struct sf_open_args a = { .dirfd = -1, .dirpath = ".", .name = "fuzz.tet",
				  .path = "fuzz.tet", .map = &m };
	struct sf_view *v = NULL;
	struct sf_err e;
	if (sf_fmt_tet.open(&a, &v, &e) == 0) {
		read_all(v->root);
		sf_view_unref(v);
	}
	free(copy);
	return 0;
}
