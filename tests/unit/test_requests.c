/* The request handlers of fs/ without a mount: each request is answered
 * into a recording fake of libfuse's replies (fake_fuse.h), on a daemon
 * set up as main.c does over a SRC written at test time. What a request
 * answers is checked as the kernel would receive it: entries, attributes,
 * listings in the kernel's READDIRPLUS layout, bytes, errors. */
#include <errno.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "request.h" /* first: its inline functions' `dm` is not the fixture's */

#include "attr.h"
#include "check.h"
#include "daemon_fixture.h"
#include "dirs.h"
#include "fake_fuse.h"
#include "names.h"
#include "ops.h"
#include "reading.h"

static struct fuse_req req;

/* LOOKUP of `name` in `dir`: its inode (0: a negative entry or an error). */
static fuse_ino_t lookup(fuse_ino_t dir, const char *name)
{
	req_clear(&req);
	op_lookup(&req, dir, name);
	CHECK(req.reply == REPLY_ENTRY || req.reply == REPLY_ERR);
	return req.reply == REPLY_ENTRY ? req.entry.ino : 0;
}

static void forget(fuse_ino_t ino)
{
	req_clear(&req);
	op_forget(&req, ino, 1);
	CHECK(req.reply == REPLY_NONE);
}

/* READ of `size` bytes at `off`: the bytes (req.data), or NULL. */
static const char *read_at(fuse_ino_t ino, struct fuse_file_info *fi, size_t size, off_t off)
{
	req_clear(&req);
	op_read(&req, ino, size, off, fi);
	return req.reply == REPLY_DATA ? req.data : NULL;
}

/* SRC's file, symlink and directory: entries with SRC's timeout, the
 * file's attributes and bytes, a negative entry for a missing name. */
static void test_src_requests(void)
{
	size_t live = dm.tree.live;
	fuse_ino_t a = lookup(FUSE_ROOT_ID, "a.txt");
	CHECK(a && S_ISREG(req.entry.attr.st_mode) && req.entry.attr.st_size == 6);
	CHECK(req.entry.entry_timeout == SRC_TIMEOUT && req.entry.attr_timeout == SRC_TIMEOUT);
	CHECK(req.entry.attr.st_ino == ((struct fnode *)(uintptr_t)a)->ino);
	req_clear(&req);
	op_getattr(&req, a, NULL);
	CHECK(req.reply == REPLY_ATTR && req.attr.st_size == 6 && req.attr_timeout == SRC_TIMEOUT);
	struct fuse_file_info fi = { 0 };
	const char *b = read_at(a, &fi, 4096, 0);
	CHECK(b && req.len == 6 && memcmp(b, "hello\n", 6) == 0);
	b = read_at(a, &fi, 3, 4);
	CHECK(b && req.len == 2 && memcmp(b, "o\n", 2) == 0);
	CHECK(read_at(a, &fi, 10, 100) && req.len == 0);
	/* no-open: OPEN is refused for the whole mount, the kernel opens */
	req_clear(&req);
	op_open(&req, a, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == ENOSYS);
	/* --open: a handle keeping the page cache */
	dm.no_open = false;
	req_clear(&req);
	op_open(&req, a, &fi);
	CHECK(req.reply == REPLY_OPEN && req.fi.keep_cache && req.fi.noflush);
	req_clear(&req);
	op_release(&req, a, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == 0);
	dm.no_open = true;
	forget(a);

	fuse_ino_t ln = lookup(FUSE_ROOT_ID, "ln");
	CHECK(ln && S_ISLNK(req.entry.attr.st_mode));
	req_clear(&req);
	op_readlink(&req, ln);
	CHECK(req.reply == REPLY_LINK && strcmp(req.data, "a.txt") == 0);
	forget(ln);

	fuse_ino_t sub = lookup(FUSE_ROOT_ID, "sub");
	CHECK(sub && S_ISDIR(req.entry.attr.st_mode));
	req_clear(&req);
	op_read(&req, sub, 10, 0, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == EISDIR);
	fuse_ino_t x = lookup(sub, "x.txt");
	CHECK(x && req.entry.attr.st_size == 11);
	req_clear(&req);
	op_readlink(&req, x);
	CHECK(req.reply == REPLY_ERR && req.err == EINVAL);
	forget(x);
	forget(sub);

	CHECK(lookup(FUSE_ROOT_ID, "missing") == 0);
	CHECK(req.reply == REPLY_ENTRY && req.entry.entry_timeout == SRC_TIMEOUT);
	req_clear(&req);
	op_statfs(&req, FUSE_ROOT_ID);
	CHECK(req.reply == REPLY_STATFS && req.vfs.f_bsize > 0);
	CHECK_EQ_U(dm.tree.live, live); /* every reference given back */
}

/* A tar's view: entries with the views' timeout, a member's bytes, a
 * directory refused as a file, Python's isatty IOCTL pushing a small file. */
static void test_view_requests(void)
{
	size_t live = dm.tree.live;
	fuse_ino_t t = lookup(FUSE_ROOT_ID, "t");
	CHECK(t && S_ISDIR(req.entry.attr.st_mode) && req.entry.entry_timeout == SRC_TIMEOUT);
	fuse_ino_t sub = lookup(t, "sub");
	CHECK(sub && S_ISDIR(req.entry.attr.st_mode) && req.entry.entry_timeout == VIEW_TIMEOUT);
	fuse_ino_t x = lookup(sub, "x.txt");
	CHECK(x && S_ISREG(req.entry.attr.st_mode) && req.entry.attr.st_size == 11);
	CHECK(lookup(sub, "y.txt") == 0 && req.reply == REPLY_ENTRY);
	CHECK(req.entry.entry_timeout == VIEW_TIMEOUT);
	struct fuse_file_info fi = { 0 };
	const char *b = read_at(x, &fi, 1 << 17, 0);
	CHECK(b && req.len == 11 && memcmp(b, "tar member\n", 11) == 0);
	req_clear(&req);
	op_getattr(&req, x, NULL);
	CHECK(req.reply == REPLY_ATTR && req.attr.st_size == 11 && req.attr_timeout == VIEW_TIMEOUT);
	req_clear(&req);
	op_read(&req, sub, 10, 0, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == EISDIR);
	CHECK(lookup(x, "under") == 0 && req.reply == REPLY_ERR && req.err == ENOTDIR);
	/* isatty: ENOTTY, the small file's content stored with it, once */
	stored = (struct stored){ 0 };
	dm.push_on_open = true;
	for (int i = 0; i < 2; i++) {
		req_clear(&req);
		op_ioctl(&req, x, TCGETS, NULL, &fi, 0, NULL, 0, 0);
		CHECK(req.reply == REPLY_ERR && req.err == ENOTTY);
	}
	dm.push_on_open = false;
	CHECK_EQ_U(stored.count, 0); /* read already: the kernel has its pages */
	fuse_ino_t again = lookup(sub, "x.txt");
	CHECK(again == x);
	forget(again);
	forget(x);
	x = lookup(sub, "x.txt"); /* a node anew: never read */
	dm.push_on_open = true;
	req_clear(&req);
	op_ioctl(&req, x, TCGETS, NULL, &fi, 0, NULL, 0, 0);
	dm.push_on_open = false;
	CHECK(stored.count == 1 && stored.ino == x && stored.len == 11);
	CHECK(memcmp(stored.data, "tar member\n", 11) == 0);
	forget(x);
	forget(sub);
	forget(t);
	CHECK_EQ_U(dm.tree.live, live);
}

/* The entries of the last list() given attributes that expire at once
 * (the probes of --readdirplus small, fs/dirs.c). */
static size_t probes;

/* One READDIR(PLUS) reply of the handle `fi` from `off`, its names joined
 * by "/" in `names`; with attributes, the entries given a node are counted
 * in *nodes (and their references given back). */
static size_t list(fuse_ino_t dir, struct fuse_file_info *fi, off_t off, bool plus,
		   char *names, size_t cap, size_t *nodes)
{
	req_clear(&req);
	uint64_t made_before = dm.tree.made + 1, last_ino = 0;
	(plus ? op_readdirplus : op_readdir)(&req, dir, 1 << 16, off, fi);
	CHECK(req.reply == REPLY_DATA);
	size_t n = 0, at = 0;
	names[0] = 0;
	*nodes = 0;
	probes = 0;
	char *data = req.data;
	size_t len = req.len;
	req.data = NULL;
	while (at < len) {
		const struct fuse_dirent *d;
		if (plus) {
			const struct fuse_direntplus *p = (const void *)(data + at);
			d = &p->dirent;
			if (p->entry_out.nodeid) {
				(*nodes)++;
				probes += !p->entry_out.attr_valid && !p->entry_out.attr_valid_nsec;
				/* the node's inode number, which names made in a
				 * listing's order get in that order */
				uint64_t ino = ((struct fnode *)(uintptr_t)p->entry_out.nodeid)->ino;
				CHECK(p->entry_out.attr.ino == ino && d->ino == ino);
				CHECK(ino > last_ino || ino < made_before);
				last_ino = ino;
				struct fuse_req keep = req;
				req_init(&req, &dm);
				op_forget(&req, p->entry_out.nodeid, 1);
				req = keep;
			}
			at += FUSE_DIRENTPLUS_SIZE(p);
		} else {
			d = (const void *)(data + at);
			at += FUSE_DIRENT_SIZE(d);
		}
		size_t k = strlen(names);
		snprintf(names + k, cap - k, "%s%.*s", k ? "/" : "", (int)d->namelen, d->name);
		n++;
	}
	free(data);
	return n;
}

/* Listings as handles give them: SRC's entries then the views beside its
 * containers, a view's members, each with attributes as --readdirplus
 * says. */
static void test_dir_requests(void)
{
	size_t live = dm.tree.live;
	enum readdirplus mode = dm.readdirplus;
	char names[512];
	size_t nodes;
	struct fuse_file_info fi = { 0 };
	dm.readdirplus = RDP_ALWAYS;
	req_clear(&req);
	op_opendir(&req, FUSE_ROOT_ID, &fi);
	CHECK(req.reply == REPLY_OPEN && !req.fi.cache_readdir);
	fi = req.fi;
	CHECK_EQ_U(list(FUSE_ROOT_ID, &fi, 0, false, names, sizeof names, &nodes), 11);
	CHECK_STR(names, "./../a.txt/deep/ln/sub/t.tar/u/u.tar/t/u.tar.d");
	/* from the third entry on, with attributes for all but the views
	 * (placed, not entered: a view root's attributes are its
	 * container's, known from the listing) */
	CHECK_EQ_U(list(FUSE_ROOT_ID, &fi, 2, true, names, sizeof names, &nodes), 9);
	CHECK_STR(names, "a.txt/deep/ln/sub/t.tar/u/u.tar/t/u.tar.d");
	CHECK_EQ_U(nodes, 9);
	CHECK_EQ_U(probes, 0);
	req_clear(&req);
	op_releasedir(&req, FUSE_ROOT_ID, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == 0);

	/* --readdirplus small: a view directory's names always come with
	 * their attributes, and none is a probe */
	dm.readdirplus = RDP_SMALL;
	fuse_ino_t t = lookup(FUSE_ROOT_ID, "t");
	fi = (struct fuse_file_info){ 0 };
	req_clear(&req);
	op_opendir(&req, t, &fi);
	CHECK(req.reply == REPLY_OPEN && req.fi.cache_readdir && req.fi.keep_cache);
	fi = req.fi;
	CHECK_EQ_U(list(t, &fi, 1, true, names, sizeof names, &nodes), 2);
	CHECK_STR(names, "../sub"); /* .shardfs/ is looked up, never listed */
	CHECK_EQ_U(nodes, 1);
	CHECK_EQ_U(probes, 0);
	req_clear(&req);
	op_releasedir(&req, t, &fi);
	forget(t);

	/* past the first request, a SRC directory's names come alone until a
	 * name of it is used: looked up, or a probe's attributes asked for
	 * (the first name given them) */
	fuse_ino_t a = lookup(FUSE_ROOT_ID, "a.txt");
	for (int use = 0; use < 2; use++) {
		fi = (struct fuse_file_info){ 0 };
		req_clear(&req);
		op_opendir(&req, FUSE_ROOT_ID, &fi);
		fi = req.fi;
		list(FUSE_ROOT_ID, &fi, 0, true, names, sizeof names, &nodes);
		CHECK_EQ_U(nodes, 9);
		CHECK_EQ_U(probes, 1);
		list(FUSE_ROOT_ID, &fi, 3, true, names, sizeof names, &nodes);
		CHECK_EQ_U(nodes, 0);
		req_clear(&req);
		if (use)
			op_getattr(&req, a, NULL);
		else
			forget(lookup(FUSE_ROOT_ID, "a.txt"));
		list(FUSE_ROOT_ID, &fi, 3, true, names, sizeof names, &nodes);
		CHECK_EQ_U(nodes, 8);
		CHECK_EQ_U(probes, 0); /* used: the rest are given for good */
		req_clear(&req);
		op_releasedir(&req, FUSE_ROOT_ID, &fi);
	}
	forget(a);
	dm.readdirplus = mode;
	CHECK_EQ_U(dm.tree.live, live);
}

/* .shardfs/: answered from memory; its live files open a snapshot each
 * (read past the page cache), and say what the daemon counted. */
static void test_meta_requests(void)
{
	size_t live = dm.tree.live;
	fuse_ino_t d = lookup(FUSE_ROOT_ID, ".shardfs");
	CHECK(d && S_ISDIR(req.entry.attr.st_mode));
	CHECK(lookup(d, "nothing") == 0 && req.reply == REPLY_ENTRY);
	dm.no_open = false;
	fuse_ino_t js = lookup(d, "stats.json");
	CHECK(js && req.entry.attr_timeout == 0);
	struct fuse_file_info fi = { 0 };
	req_clear(&req);
	op_open(&req, js, &fi);
	CHECK(req.reply == REPLY_OPEN && req.fi.direct_io && req.fi.fh);
	fi = req.fi;
	const char *b = read_at(js, &fi, 1 << 20, 0);
	CHECK(b && b[0] == '{' && strstr(b, "\"requests\""));
	req_clear(&req);
	op_flush(&req, js, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == 0);
	req_clear(&req);
	op_release(&req, js, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == 0);
	dm.no_open = true;
	forget(js);
	forget(d);
	CHECK_EQ_U(dm.tree.live, live);
}

/* Every call that would change the tree: EROFS; extended attributes:
 * none. */
static void test_refused_requests(void)
{
	req_clear(&req);
	shardfs_ops.mkdir(&req, FUSE_ROOT_ID, "new", 0755);
	CHECK(req.reply == REPLY_ERR && req.err == EROFS);
	req_clear(&req);
	shardfs_ops.unlink(&req, FUSE_ROOT_ID, "a.txt");
	CHECK(req.reply == REPLY_ERR && req.err == EROFS);
	req_clear(&req);
	struct fuse_file_info fi = { 0 };
	shardfs_ops.write(&req, FUSE_ROOT_ID, "x", 1, 0, &fi);
	CHECK(req.reply == REPLY_ERR && req.err == EROFS);
	req_clear(&req);
	shardfs_ops.getxattr(&req, FUSE_ROOT_ID, "user.x", 0);
	CHECK(req.reply == REPLY_ERR);
}

/* The source holds every thread it may: a request that would wait on it
 * is answered EIO at once and logged; one answered from memory is not. */
static int refuse_all(bool may_refuse)
{
	return may_refuse ? -EBUSY : 0;
}

static void test_refusal(void)
{
	/* a view's rendered info.json (a part the cache holds once read) and
	 * a member (bytes of the tar's mapping), each read once */
	fuse_ino_t t = lookup(FUSE_ROOT_ID, "t"), meta = lookup(t, ".shardfs");
	fuse_ino_t info = lookup(meta, "info.json"), sub = lookup(t, "sub");
	fuse_ino_t x = lookup(sub, "x.txt");
	struct fuse_file_info fi = { 0 };
	const char *b = read_at(info, &fi, 1 << 16, 0);
	CHECK(b && b[0] == '{');
	char *json = b ? strdup(b) : NULL;
	CHECK(read_at(x, &fi, 100, 0) != NULL);
	dm.stats.sections.on_open = refuse_all;
	CHECK(lookup(FUSE_ROOT_ID, "a.txt") == 0 && req.reply == REPLY_ERR && req.err == EIO);
	fuse_ino_t d = lookup(FUSE_ROOT_ID, ".shardfs");
	CHECK(d != 0);
	/* the page cache let go of them: the one memory holds answers */
	b = read_at(info, &fi, 1 << 16, 0);
	CHECK(b && json && strcmp(b, json) == 0);
	CHECK(read_at(x, &fi, 100, 0) == NULL && req.reply == REPLY_ERR && req.err == EIO);
	dm.stats.sections.on_open = NULL;
	free(json);
	if (d)
		forget(d);
	fuse_ino_t held[] = { x, sub, info, meta, t };
	for (size_t i = 0; i < sizeof held / sizeof *held; i++)
		if (held[i])
			forget(held[i]);
	struct sf_buf *log = errlog_text(&dm.stats);
	CHECK(log && memmem(log->data, log->len, "refused", 7));
	sf_buf_unref(log);
}

int main(void)
{
	make_src();
	if (daemon_up() == 0) {
		dm.no_open = true;
		req_init(&req, &dm);
		test_src_requests();
		test_view_requests();
		test_dir_requests();
		test_meta_requests();
		test_refused_requests();
		test_refusal();
		req_clear(&req);
	}
	daemon_down();
	remove_src();
	return check_failures ? 1 : 0;
}
