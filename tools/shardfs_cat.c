/* shardfs-cat: print one part of a container by its path in the view, or
 * list the view, without mounting anything. A thin program over the public
 * API (shardfs.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tool_common.h"

static void usage(FILE *to)
{
	fputs("usage: shardfs-cat FILE PATH      print the view file PATH of container FILE\n"
	      "       shardfs-cat --list FILE [PATH]   list the view (or a directory in it)\n"
	      "\n"
	      "PATH is the same path the mount shows under the view directory, e.g.\n"
	      "  shardfs-cat corpus.tsumugi regions/forward\n"
	      "  shardfs-cat part.tatami columns/price/values.npy > price.npy\n",
	      to);
}

/* The directory being listed: its path is extended in place for each
 * subdirectory and cut back after it. A failure is reported once, where it
 * happens, and ends the listing. */
struct lister {
	struct shardfs *h;
	char path[8192];
	size_t len;
	bool reported;
};

static int list_entry(const struct shardfs_entry *e, void *arg)
{
	struct lister *l = arg;
	size_t at = l->len;
	int n = snprintf(l->path + at, sizeof l->path - at, "%s%s", at ? "/" : "", e->name);
	if (n < 0 || (size_t)n >= sizeof l->path - at) {
		fprintf(stderr, "shardfs-cat: %s/%s: path too long to list\n", l->path, e->name);
		l->reported = true;
		return -ENAMETOOLONG;
	}
	int rc = 0;
	switch (e->kind) {
	case SHARDFS_DIR:
		printf("%s/\n", l->path);
		l->len = at + (size_t)n;
		rc = shardfs_list(l->h, l->path, list_entry, l);
		if (rc < 0 && !l->reported) {
			fprintf(stderr, "shardfs-cat: %s\n", shardfs_last_error());
			l->reported = true;
		}
		break;
	case SHARDFS_LINK:
		printf("%s -> %s\n", l->path, e->target);
		break;
	case SHARDFS_FILE:
		if (e->error)
			printf("%s\t(unreadable: %s)\n", l->path, strerror(-e->error));
		else
			printf("%s\t%llu\n", l->path, (unsigned long long)e->size);
		break;
	}
	l->len = at;
	l->path[at] = 0;
	return rc;
}

static int list(struct shardfs *h, const char *dir)
{
	struct shardfs_entry st;
	if (*dir && shardfs_stat(h, dir, &st) == 0 && st.kind == SHARDFS_LINK) {
		printf("-> %s\n", st.target);
		return 0;
	}
	struct lister l = { .h = h };
	l.len = (size_t)snprintf(l.path, sizeof l.path, "%s", dir);
	if (l.len >= sizeof l.path)
		return -ENAMETOOLONG;
	int rc = shardfs_list(h, dir, list_entry, &l);
	if (rc < 0 && !l.reported)
		fprintf(stderr, "shardfs-cat: %s\n", shardfs_last_error());
	return rc;
}

static int cat(struct shardfs *h, const char *path)
{
	struct shardfs_entry st;
	int rc = shardfs_stat(h, path, &st);
	if (rc == 0 && st.kind != SHARDFS_FILE) {
		fprintf(stderr, "shardfs-cat: %s is not a file\n", path);
		return -EISDIR;
	}
	static char buf[1 << 20];
	for (uint64_t off = 0; rc == 0;) {
		ssize_t n = shardfs_read(h, path, buf, sizeof buf, off);
		if (n <= 0) {
			rc = (int)n;
			break;
		}
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n) {
			fprintf(stderr, "shardfs-cat: writing %s: %s\n", path, strerror(errno));
			return -EIO;
		}
		off += (uint64_t)n;
	}
	if (rc < 0)
		fprintf(stderr, "shardfs-cat: %s\n", shardfs_last_error());
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	bool listing = argc >= 2 && strcmp(argv[1], "--list") == 0;
	if (listing ? (argc < 3 || argc > 4) : argc != 3) {
		usage(stderr);
		return 2;
	}
	struct shardfs *h;
	if (shardfs_open(argv[listing ? 2 : 1], &h) < 0) {
		fprintf(stderr, "shardfs-cat: %s\n", shardfs_last_error());
		return 1;
	}
	int rc = listing ? list(h, argc == 4 ? argv[3] : "") : cat(h, argv[2]);
	shardfs_close(h);
	return rc ? 1 : 0;
}
