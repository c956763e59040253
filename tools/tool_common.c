#include "tool_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sf_read.h"

int tool_open(const char *prog, const char *path, struct sf_view **out)
{
	struct sf_err e = { { 0 } };
	int rc = sf_open_path(path, out, &e);
	if (rc)
		fprintf(stderr, "%s: %s\n", prog, sf_err_msg(&e, rc));
	return rc;
}

int tool_write_file(const char *prog, struct sf_node *f, FILE *out)
{
	struct sf_err e = { { 0 } };
	int rc = sf_file_ready(f, &sf_nocache, &e);
	const uint64_t step = 1 << 20;
	for (uint64_t off = 0; rc == 0 && off < f->u.file.size; off += step) {
		struct sf_readv rv = { 0 };
		rc = sf_file_read(f, off, step, &sf_nocache, &rv, &e);
		for (size_t i = 0; rc == 0 && i < rv.n; i++)
			if (fwrite(rv.iov[i].iov_base, 1, rv.iov[i].iov_len, out) != rv.iov[i].iov_len)
				rc = -EIO;
		sf_readv_release(&rv);
	}
	if (rc)
		fprintf(stderr, "%s: %s: %s\n", prog, f->view->path, sf_err_msg(&e, rc));
	return rc;
}

int tool_cat(const char *prog, struct sf_view *v, const char *path, FILE *out)
{
	struct sf_err e = { { 0 } };
	struct sf_node *n = NULL;
	int rc = sf_view_walk(v->root, path, &n, &e);
	if (rc) {
		fprintf(stderr, "%s: %s\n", prog, e.msg);
		return rc;
	}
	if (n->kind != SF_FILE) {
		fprintf(stderr, "%s: %s: %s is not a file\n", prog, v->path, path);
		return -EISDIR;
	}
	return tool_write_file(prog, n, out);
}

int tool_slurp(const char *prog, struct shardfs *h, const char *path, char **out,
	       size_t *len)
{
	struct shardfs_entry st;
	int rc = shardfs_stat(h, path, &st);
	if (rc == 0 && (rc = st.error) == 0 && st.kind != SHARDFS_FILE) {
		fprintf(stderr, "%s: %s is not a file\n", prog, path);
		return -EISDIR;
	}
	char *buf = NULL;
	if (rc == 0 && (st.size >= SIZE_MAX || !(buf = malloc((size_t)st.size + 1)))) {
		fprintf(stderr, "%s: %s: out of memory\n", prog, path);
		return -ENOMEM;
	}
	ssize_t got = rc ? rc : shardfs_read(h, path, buf, (size_t)st.size, 0);
	if (got < 0 || (uint64_t)got != st.size) {
		fprintf(stderr, "%s: %s\n", prog,
			got < 0 ? shardfs_last_error() : "the file changed size while read");
		free(buf);
		return got < 0 ? (int)got : -EIO;
	}
	buf[got] = 0;
	*out = buf;
	*len = (size_t)got;
	return 0;
}
