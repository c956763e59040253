/* shardfs-cat: print one part of a container by its path in the view, or
 * list the view, without mounting anything. */
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

static int list(struct sf_node *n, const char *prefix)
{
	struct sf_err e = { { 0 } };
	int rc = sf_dir_ready(n, &e);
	if (rc) {
		fprintf(stderr, "shardfs-cat: %s\n", e.msg);
		return rc;
	}
	for (size_t i = 0; i < sf_dir_count(n); i++) {
		struct sf_node *k = sf_dir_child(n, i, &e);
		if (!k) {
			fprintf(stderr, "shardfs-cat: %s\n", e.msg[0] ? e.msg : "out of memory");
			return -EIO;
		}
		if (k->hidden)
			continue;
		char path[8192];
		snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "/" : "", k->name);
		if (k->kind == SF_DIR) {
			printf("%s/\n", path);
			if ((rc = list(k, path)))
				return rc;
		} else if (k->kind == SF_LINK) {
			printf("%s -> %s\n", path, k->u.target);
		} else {
			if ((rc = sf_file_ready(k, &sf_nocache, &e)) == 0)
				printf("%s\t%llu\n", path, (unsigned long long)k->u.file.size);
			else
				printf("%s\t(unreadable: %s)\n", path, e.msg);
		}
	}
	return 0;
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
	struct sf_view *v = NULL;
	if (tool_open("shardfs-cat", argv[listing ? 2 : 1], &v))
		return 1;
	int rc;
	if (listing) {
		struct sf_node *n = v->root;
		struct sf_err e = { { 0 } };
		rc = argc == 4 ? sf_view_walk(v->root, argv[3], &n, &e) : 0;
		if (rc)
			fprintf(stderr, "shardfs-cat: %s\n", e.msg);
		else if (n->kind == SF_LINK)
			printf("-> %s\n", n->u.target);
		else
			rc = list(n, argc == 4 ? argv[3] : "");
	} else {
		rc = tool_cat("shardfs-cat", v, argv[2], stdout);
	}
	sf_view_unref(v);
	return rc ? 1 : 0;
}
