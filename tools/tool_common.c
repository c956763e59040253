#include "tool_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
