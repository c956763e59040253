/* libFuzzer target: any bytes as a .tatami file; open it, then list every
 * directory and read every file of the view. Nothing may crash or hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sf_format.h"
#include "sf_view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(struct sf_node *n)
{
	struct sf_err e;
	if (n->kind == SF_DIR) {
		if (sf_dir_ready(n, &e))
			return;
		for (size_t i = 0; i < n->u.dir.n; i++)
			walk(n->u.dir.kids[i]);
		return;
	}
	if (n->kind != SF_FILE || sf_file_ready(n, &sf_nocache, &e))
		return;
	struct sf_readv rv = { 0 };
	sf_file_read(n, 0, n->u.file.size, &sf_nocache, &rv, &e);
	sf_readv_release(&rv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/fuzz-tatami-%d.tatami", (int)getpid());
	FILE *f = fopen(path, "wb");
	if (!f)
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	struct sf_view *v = NULL;
	struct sf_err e;
	if (sf_open_path(path, &v, &e) == 0) {
		walk(v->root);
		sf_view_unref(v);
	}
	unlink(path);
	return 0;
}
