/* What the unit tests of the daemon's core share: a SRC written at test
 * time (a file, a directory, a symlink, tars GNU tar writes) and a daemon
 * set up over it as main.c sets one up, without a FUSE session. */
#ifndef DAEMON_FIXTURE_H
#define DAEMON_FIXTURE_H

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "names.h"
#include "src.h"

/* made by make_src, under $TMPDIR as the other unit tests make theirs */
static char src_path[64];

static void write_file(const char *rel, const char *text)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", src_path, rel);
	FILE *f = fopen(p, "w");
	CHECK(f && fputs(text, f) >= 0);
	if (f)
		fclose(f);
}

/* SRC: a file, a directory, a symlink, and a tar GNU tar writes (its view
 * `t/` beside it). */
static void make_src(void)
{
	check_tmp(src_path, sizeof src_path, "test_daemon");
	CHECK(mkdtemp(src_path) != NULL);
	write_file("a.txt", "hello\n");
	char p[300];
	snprintf(p, sizeof p, "%s/sub", src_path);
	CHECK(mkdir(p, 0755) == 0);
	write_file("sub/x.txt", "tar member\n");
	snprintf(p, sizeof p, "%s/ln", src_path);
	CHECK(symlink("a.txt", p) == 0);
	char cmd[600];
	snprintf(cmd, sizeof cmd,
		 "cd '%s' && tar -cf t.tar sub && mkdir u deep && cp t.tar u.tar && cp t.tar deep/z.tar",
		 src_path);
	CHECK(system(cmd) == 0);
}

static void remove_src(void)
{
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", src_path);
	CHECK(system(cmd) == 0);
}

static struct daemon dm;

static int daemon_up(void)
{
	dm.src_fd = open(src_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	dm.index_fd = -1;
	atomic_store(&dm.residency_visible, -1);
	dm.src_pin_max = 16;
	fnode_init(&dm.tree);
	stats_init(&dm.stats);
	watch_init(&dm.watch);
	openviews_init(&dm.views, &dm.stats);
	listings_init(&dm.listings);
	struct sf_err e = { { 0 } };
	int rc = src_init_root(&dm.tree, src_path, &e);
	CHECK_EQ_U(rc, 0);
	dm.cache = sf_dcache_new(64 << 20, &dm.stats.cache);
	CHECK(dm.cache != NULL);
	dm.view_cache = sf_dcache_iface(dm.cache);
	return rc || !dm.cache || dm.src_fd < 0 ? -1 : 0;
}

static void daemon_down(void)
{
	fnode_fini(&dm.tree);
	listings_fini(&dm.listings);
	sf_dcache_free(dm.cache);
	stats_fini(&dm.stats);
	close(dm.src_fd);
}

static inline struct fnode *find(struct fnode *dir, const char *name, int want)
{
	struct listing *l = NULL;
	struct fnode *n = NULL;
	CHECK_EQ_U(find_src(&dm, dir, name, true, &l, &n), want);
	listing_unref(l);
	return n;
}

#endif
