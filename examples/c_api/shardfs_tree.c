/* shardfs_tree FILE [PATH]: lists the parts of a container with the
 * libshardfs-format C API, or prints one part, without any mount.
 *
 *   cc shardfs_tree.c $(pkg-config --cflags --libs shardfs-format) -o shardfs_tree
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardfs.h>

struct walk {
	struct shardfs *h;
	const char *dir;
};

static int show(const struct shardfs_entry *e, void *arg)
{
	const struct walk *w = arg;
	char path[4096];
	snprintf(path, sizeof path, "%s%s%s", w->dir, *w->dir ? "/" : "", e->name);
	if (e->kind == SHARDFS_DIR) {
		printf("%s/\n", path);
		struct walk sub = { w->h, path };
		return shardfs_list(w->h, path, show, &sub);
	}
	if (e->kind == SHARDFS_LINK)
		printf("%s -> %s\n", path, e->target);
	else if (e->error)
		printf("%s\t(unreadable: %s)\n", path, strerror(-e->error));
	else
		printf("%s\t%llu\n", path, (unsigned long long)e->size);
	return 0;
}

static int print_part(struct shardfs *h, const char *path)
{
	char buf[1 << 16];
	uint64_t off = 0;
	for (;;) {
		ssize_t n = shardfs_read(h, path, buf, sizeof buf, off);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return 0;
		fwrite(buf, 1, (size_t)n, stdout);
		off += (uint64_t)n;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: shardfs_tree FILE [PATH]\n");
		return 2;
	}
	struct shardfs *h;
	if (shardfs_open(argv[1], &h) < 0) {
		fprintf(stderr, "shardfs_tree: %s\n", shardfs_last_error());
		return 1;
	}
	struct walk top = { h, "" };
	int rc = argc == 3 ? print_part(h, argv[2]) : shardfs_list(h, "", show, &top);
	if (rc < 0)
		fprintf(stderr, "shardfs_tree: %s\n", shardfs_last_error());
	shardfs_close(h);
	return rc < 0 ? 1 : 0;
}
