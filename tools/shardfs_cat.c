/* shardfs-cat: print one part of a container by its path in the view, or
 * list the view, without mounting anything. A thin program over the public
 * API (shardfs.h). */
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

/* A depth-first listing without recursion (a tar path may be 32,000 levels
 * deep): entries wait on a stack with their depth, and the path being
 * printed is cut back to its parent's length before each one, so memory
 * stays linear in the entries however deep they lie. The entries' strings
 * are copies (shardfs_list's last while its callback runs). */
struct pending {
	struct shardfs_entry e;
	size_t depth;
};

struct lister {
	struct pending *st;
	size_t n, cap;
	size_t depth;     /* of the entries being collected */
	char *path;
	size_t *plen;     /* the path's length at each depth */
	size_t pcap, lcap;
	bool oom;
};

static int grow(void *pp, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	void *p = realloc(*(void **)pp, c * size);
	if (!p)
		return -ENOMEM;
	*(void **)pp = p;
	*cap = c;
	return 0;
}

static void pending_free(struct pending *p)
{
	free((char *)p->e.name);
	free((char *)p->e.target);
}

static int collect(const struct shardfs_entry *e, void *arg)
{
	struct lister *l = arg;
	struct pending p = { *e, l->depth };
	p.e.name = strdup(e->name);
	p.e.target = e->target ? strdup(e->target) : NULL;
	if (!p.e.name || (e->target && !p.e.target) ||
	    grow(&l->st, &l->cap, l->n + 1, sizeof *l->st)) {
		pending_free(&p);
		l->oom = true;
		return -ENOMEM;
	}
	l->st[l->n++] = p;
	return 0;
}

/* Pushes the entries of the directory at l->path, first one on top. */
static int push_dir(struct shardfs *h, struct lister *l, size_t depth)
{
	size_t from = l->n;
	l->depth = depth;
	int rc = shardfs_list(h, l->path, collect, l);
	if (rc < 0 && !l->oom)
		fprintf(stderr, "shardfs-cat: %s\n", shardfs_last_error());
	for (size_t i = from, j = l->n; rc == 0 && i + 1 < j; i++, j--) {
		struct pending t = l->st[i];
		l->st[i] = l->st[j - 1];
		l->st[j - 1] = t;
	}
	return rc;
}

static int list(struct shardfs *h, const char *dir)
{
	struct shardfs_entry st;
	if (*dir && shardfs_stat(h, dir, &st) == 0 && st.kind == SHARDFS_LINK) {
		printf("-> %s\n", st.target);
		return 0;
	}
	struct lister l = { 0 };
	size_t top = strlen(dir);
	int rc = grow(&l.path, &l.pcap, top + 1, 1);
	if (!rc)
		rc = grow(&l.plen, &l.lcap, 1, sizeof *l.plen);
	l.oom = rc != 0;
	if (!rc) {
		memcpy(l.path, dir, top + 1);
		l.plen[0] = top;
		rc = push_dir(h, &l, 0);
	}
	while (rc == 0 && l.n) {
		struct pending p = l.st[--l.n];
		size_t at = l.plen[p.depth], len = strlen(p.e.name);
		if ((rc = grow(&l.path, &l.pcap, at + len + 2, 1))) {
			pending_free(&p);
			l.oom = true;
			break;
		}
		if (at)
			l.path[at++] = '/';
		memcpy(l.path + at, p.e.name, len + 1);
		at += len;
		if (p.e.kind == SHARDFS_DIR) {
			printf("%s/\n", l.path);
			if ((rc = grow(&l.plen, &l.lcap, p.depth + 2, sizeof *l.plen))) {
				pending_free(&p);
				l.oom = true;
				break;
			}
			l.plen[p.depth + 1] = at;
			rc = push_dir(h, &l, p.depth + 1);
		} else if (p.e.kind == SHARDFS_LINK) {
			printf("%s -> %s\n", l.path, p.e.target);
		} else if (p.e.error) {
			printf("%s\t(unreadable: %s)\n", l.path, strerror(-p.e.error));
		} else {
			printf("%s\t%llu\n", l.path, (unsigned long long)p.e.size);
		}
		pending_free(&p);
	}
	while (l.n)
		pending_free(&l.st[--l.n]);
	if (l.oom)
		fprintf(stderr, "shardfs-cat: out of memory listing %s\n", *dir ? dir : "the view");
	free(l.st);
	free(l.path);
	free(l.plen);
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
