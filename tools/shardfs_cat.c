/* shardfs-cat: print one part of a container by its path in the view, or
 * list the view, without mounting anything. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

/* One directory being listed: the next entry to print, and the length of
 * its path in the path being built. */
struct level {
	struct sf_node *dir;
	size_t next, plen;
};

/* Lists dir's subtree depth first, without recursing: a tar path may be
 * 32,000 levels deep. */
static int list(struct sf_node *top, const char *prefix)
{
	struct sf_err e = { { 0 } };
	struct sf_str path = { 0 };
	struct level *st = NULL;
	size_t depth = 0, cap = 0;
	sf_str_add(&path, prefix, strlen(prefix));
	int rc = sf_grow(&st, &cap, 0, sizeof *st, 16);
	if (!rc && (rc = sf_dir_ready(top, &e)) != 0)
		fprintf(stderr, "shardfs-cat: %s\n", e.msg);
	if (!rc)
		st[depth++] = (struct level){ top, 0, path.len };
	while (!rc && depth) {
		struct level *l = &st[depth - 1];
		if (l->next >= sf_dir_count(l->dir)) {
			depth--;
			continue;
		}
		struct sf_node *k = sf_dir_child(l->dir, l->next++, &e);
		if (!k) {
			fprintf(stderr, "shardfs-cat: %s\n", e.msg[0] ? e.msg : "out of memory");
			rc = -EIO;
			break;
		}
		if (k->hidden)
			continue;
		path.len = l->plen;
		if (path.len)
			sf_str_addc(&path, '/');
		sf_str_add(&path, k->name, strlen(k->name));
		if (path.oom) {
			rc = -ENOMEM;
			break;
		}
		int w = (int)path.len;
		if (k->kind == SF_DIR) {
			printf("%.*s/\n", w, (const char *)path.p);
			if ((rc = sf_dir_ready(k, &e)) != 0)
				fprintf(stderr, "shardfs-cat: %s\n", e.msg);
			else if (!(rc = sf_grow(&st, &cap, depth, sizeof *st, 16)))
				st[depth++] = (struct level){ k, 0, path.len };
		} else if (k->kind == SF_LINK) {
			printf("%.*s -> %s\n", w, (const char *)path.p, k->u.target);
		} else if (sf_file_ready(k, &sf_nocache, &e) == 0) {
			printf("%.*s\t%llu\n", w, (const char *)path.p, (unsigned long long)k->u.file.size);
		} else {
			printf("%.*s\t(unreadable: %s)\n", w, (const char *)path.p, e.msg);
		}
	}
	free(st);
	sf_str_free(&path);
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
