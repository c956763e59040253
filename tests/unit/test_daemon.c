/* The daemon's core without a mount: what a request would answer is decided
 * below its handler (names, attributes, listings, reads, the live files,
 * the sections at the source), so a daemon set up as main does, but with
 * no FUSE session, answers here from a SRC written at test time. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attr.h"
#include "check.h"
#include "daemon.h"
#include "daemon_fixture.h"
#include "dirs.h"
#include "meta.h"
#include "names.h"
#include "push.h"
#include "reading.h"
#include "roots.h"
#include "section.h"
#include "sf_read.h"
#include "src.h"
#include "vnode.h"

/* The bytes of a whole file `n` as a READ would answer them. */
static char *read_src(struct fnode *n, uint64_t size)
{
	struct sf_readv rv = { 0 };
	char *buf = calloc(1, size + 1);
	int rc = src_read(&dm, n, 0, size, &rv);
	CHECK_EQ_U(rc, 0);
	if (rc == 0)
		CHECK_EQ_U(sf_readv_copy(&rv, buf, NULL), 0);
	sf_readv_release(&rv);
	return buf;
}

/* A SRC directory's listing: its SRC entries, then its views. */
static void test_listing(void)
{
	struct listing *l = NULL;
	CHECK_EQ_U(listing_get(&dm, dm.tree.root, &l), 0);
	if (!l)
		return;
	/* a view's name taken by a SRC entry: <file name>.d */
	const char *want[] = { "a.txt", "deep", "ln", "sub", "t.tar", "u", "u.tar",
			       "t", "u.tar.d" };
	unsigned char types[] = { DT_REG, DT_DIR, DT_LNK, DT_DIR, DT_REG, DT_DIR, DT_REG,
				  DT_DIR, DT_DIR };
	CHECK_EQ_U(l->nsrc, 7);
	CHECK_EQ_U(l->n, 9);
	for (size_t i = 0; i < l->n && i < 9; i++) {
		CHECK(strcmp(l->e[i].name, want[i]) == 0);
		CHECK_EQ_U(l->e[i].type, types[i]);
	}
	CHECK(listing_view(l, "t") != NULL);
	CHECK(listing_view(l, "a.txt") == NULL);
	CHECK(listing_view(l, "u") == NULL && listing_view(l, "u.tar.d") != NULL);
	listing_unref(l);
}

/* dir's entry `name`, CHECKed to be of kind `k`, and its attributes. */
static struct fnode *found(struct fnode *dir, const char *name, enum fkind k, struct stat *st)
{
	struct fnode *n = find(dir, name, 0);
	CHECK(n && fnode_kind(n) == k);
	if (n)
		fill_attr(&dm, n, 0, false, st);
	return n;
}

/* Names and attributes of SRC entries, and a SRC file's bytes. */
static void test_src(void)
{
	struct stat st;
	struct fnode *a = found(dm.tree.root, "a.txt", FK_SRC_FILE, &st);
	if (a) {
		CHECK(S_ISREG(st.st_mode));
		CHECK_EQ_U(st.st_size, 6);
		CHECK_EQ_U(st.st_ino, a->ino);
		CHECK_EQ_U(src_map_file(&dm, a), 0);
		char *b = read_src(a, 6);
		CHECK(strcmp(b, "hello\n") == 0);
		free(b);
		fnode_forget(&dm.tree, a, 1);
	}
	struct fnode *ln = found(dm.tree.root, "ln", FK_SRC_OTHER, &st);
	if (ln) {
		CHECK(S_ISLNK(st.st_mode));
		char buf[PATH_MAX + 1];
		CHECK_EQ_U(src_readlink(&dm, ln, buf), 0);
		CHECK(strcmp(buf, "a.txt") == 0);
		fnode_forget(&dm.tree, ln, 1);
	}
	struct fnode *sub = found(dm.tree.root, "sub", FK_SRC_DIR, &st);
	if (sub) {
		CHECK(S_ISDIR(st.st_mode));
		struct fnode *x = find(sub, "x.txt", 0);
		CHECK(x && x->parent == sub);
		if (x) {
			char pb[FNODE_PATH_MAX];
			CHECK(strcmp(fnode_path(x, pb, sizeof pb), "sub/x.txt") == 0);
			fnode_forget(&dm.tree, x, 1);
		}
		fnode_forget(&dm.tree, sub, 1);
	}
	CHECK(find(dm.tree.root, "missing", 0) == NULL);
}

/* A tar's view: its root is placed by the lookup, entered, and lists the
 * tar's members with their bytes. */
static void test_view(void)
{
	struct fnode *t = find(dm.tree.root, "t", 0);
	CHECK(t && fnode_kind(t) == FK_VIEW);
	if (!t)
		return;
	CHECK_EQ_U(root_enter(&dm, t), 0);
	struct sf_node *root = fnode_vn(t);
	CHECK(root && fnode_view_is(t, SF_DIR));
	struct stat st;
	fill_attr(&dm, t, 0, false, &st);
	CHECK(S_ISDIR(st.st_mode));
	struct sf_err e = { { 0 } };
	struct sf_node *vsub = NULL, *vx = NULL;
	CHECK_EQ_U(sf_dir_find(root, "sub", &vsub, &e), 0);
	CHECK(vsub != NULL);
	if (vsub) {
		fnode_find(&dm.tree);
		struct fnode *s = fnode_found(&dm.tree, fnode_for_view(&dm.tree, t, vsub));
		CHECK_EQ_U(sf_dir_find(vsub, "x.txt", &vx, &e), 0);
		CHECK(s && vx);
		if (s && vx) {
			fnode_find(&dm.tree);
			struct fnode *x = fnode_found(&dm.tree, fnode_for_view(&dm.tree, s, vx));
			CHECK(x && fnode_view_is(x, SF_FILE));
			CHECK_EQ_U(view_file_ready(&dm, x), 0);
			fill_attr(&dm, x, 0, false, &st);
			CHECK(S_ISREG(st.st_mode));
			CHECK_EQ_U(st.st_size, 11);
			struct sf_readv rv = { 0 };
			char buf[12] = { 0 };
			CHECK_EQ_U(sf_file_read(vx, 0, 11, dm.view_cache, &rv, &e), 0);
			CHECK_EQ_U(sf_readv_copy(&rv, buf, NULL), 0);
			CHECK(strcmp(buf, "tar member\n") == 0);
			sf_readv_release(&rv);
			sf_dcache_read_done();
			/* --push-ahead: a listing queues its small files (a page
			 * each at least) while within the window */
			CHECK_EQ_U(push_start(&dm, 4096 + 4000), 0);
			struct fnode *listed_x[] = { x, x };
			uint64_t used = 0;
			push_listed(&dm, listed_x, 2, &used);
			CHECK_EQ_U(used, 4096);
			push_stop(&dm);
			fnode_forget(&dm.tree, x, 1);
		}
		if (s)
			fnode_forget(&dm.tree, s, 1);
	}
	fnode_forget(&dm.tree, t, 1);
}

/* The live files: stats.json and errors are snapshots taken as read. */
static void test_meta(void)
{
	struct fnode *d = meta_node(&dm.tree, dm.tree.root, ".shardfs", true, META_STATS);
	CHECK(d && fnode_kind(d) == FK_META_DIR);
	if (!d)
		return;
	struct fnode *js = meta_node(&dm.tree, d, "stats.json", false, META_STATS);
	CHECK(js && js->ops->live && !d->ops->live);
	errlog_add(&dm.stats, "sub/x.txt", "a problem for the test");
	if (js) {
		struct meta_handle *h = meta_open(&dm, js, 1);
		CHECK(h && h->snap->len > 2 && h->snap->data[0] == '{');
		off_t size = 0;
		struct timespec at;
		meta_attr(&dm, js, 1, false, &size, &at);
		CHECK(h && (size_t)size == h->snap->len);
		if (h) {
			meta_closed(js, h);
			meta_release(js, h);
		}
		fnode_forget(&dm.tree, js, 1);
	}
	/* no-open: a node per snapshot; a thread's path walks get its
	 * pending one until it is read to its end */
	struct fnode *e1 = meta_snapshot_node(&dm, d, "errors", META_ERRORS, 1);
	struct fnode *e2 = meta_snapshot_node(&dm, d, "errors", META_ERRORS, 1);
	struct fnode *other = meta_snapshot_node(&dm, d, "errors", META_ERRORS, 2);
	CHECK(e1 && e1 == e2 && other && other != e1);
	if (e1 && other) {
		struct sf_buf *b = meta_node_read(e1, 1 << 20);
		CHECK(memmem(b->data, b->len, "a problem for the test", 22));
		struct fnode *e3 = meta_snapshot_node(&dm, d, "errors", META_ERRORS, 1);
		CHECK(e3 && e3 != e1 && e3 != other);
		/* each node keeps its own snapshot */
		struct sf_buf *again = meta_node_read(e1, 0);
		CHECK(again == b);
		sf_buf_unref(again);
		sf_buf_unref(b);
		if (e3)
			fnode_forget(&dm.tree, e3, 1);
		fnode_forget(&dm.tree, e1, 2);
		fnode_forget(&dm.tree, other, 1);
	}
	fnode_forget(&dm.tree, d, 1);
}

/* The stall rules: sections nest; with no thread left for the source a
 * section that may be refused is, when its last thread would go (-EBUSY
 * from the loop) and none leaves within LAST_WAIT_NS, or some request has
 * been stuck there STUCK_NS; requests that cannot fail always open one. */
static _Atomic int pool; /* what the loop's count answers: 0, -EAGAIN (full), -EBUSY (last) */
static _Atomic int opened, closed;
static int on_open(bool may_refuse)
{
	opened++;
	return may_refuse ? pool : 0;
}
static void on_close(void)
{
	closed++;
}

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cond = PTHREAD_COND_INITIALIZER;
static int held; /* 1: the slow request is at the source; 2: let it go */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* A quick request leaving the source once another waits for the last
 * thread, freeing one. */
static void *leaver(void *arg)
{
	struct sections *w = arg;
	struct timespec wait = { 0, 1000000 };
	while (!atomic_load(&w->waiting))
		nanosleep(&wait, NULL);
	CHECK_EQ_U(section_open(w, "lookup", "quick", NULL, false), 0);
	pool = 0;
	section_close(w);
	return NULL;
}

/* A request waiting on a source that does not answer. */
static void *slow_request(void *arg)
{
	struct sections *w = arg;
	CHECK_EQ_U(section_open(w, "read", "slow", "file", true), 0);
	pthread_mutex_lock(&held_lock);
	held = 1;
	pthread_cond_broadcast(&held_cond);
	while (held != 2)
		pthread_cond_wait(&held_cond, &held_lock);
	pthread_mutex_unlock(&held_lock);
	section_close(w);
	return NULL;
}

static void test_sections(void)
{
	struct sections *w = &dm.stats.sections;
	w->on_open = on_open;
	w->on_close = on_close;
	size_t total = 9;
	struct stuck st[4];
	CHECK_EQ_U(sections_stuck(w, st, 4, &total), 0);
	CHECK_EQ_U(total, 0);
	CHECK_EQ_U(section_open(w, "read", "sub", "x.txt", true), 0);
	CHECK_EQ_U(section_open(w, "lookup", "nested", NULL, true), 0);
	CHECK_EQ_U(opened, 1); /* only the outermost counts */
	CHECK_EQ_U(sections_stuck(w, st, 4, &total), 0); /* not stuck yet */
	CHECK_EQ_U(total, 1);
	section_close(w);
	section_close(w);
	CHECK_EQ_U(closed, 1);
	/* a full pool and nothing stuck: a burst of quick requests waits */
	pool = -EAGAIN;
	CHECK_EQ_U(section_open(w, "read", "a.txt", NULL, true), 0);
	section_close(w);
	/* its last thread is not given: refused once none left within
	 * LAST_WAIT_NS... */
	pool = -EBUSY;
	double t0 = now_s();
	CHECK(section_open(w, "read", "a.txt", NULL, true) == -EBUSY);
	CHECK(now_s() - t0 >= LAST_WAIT_NS / 1e9);
	CHECK_EQ_U(section_open(w, "release", "a.txt", NULL, false), 0);
	section_close(w);
	/* ...while one leaving meanwhile lets the waiting request in */
	pthread_t quick;
	uint64_t waits = atomic_load(&w->last_waits);
	CHECK_EQ_U(pthread_create(&quick, NULL, leaver, w), 0);
	CHECK_EQ_U(section_open(w, "read", "a.txt", NULL, true), 0);
	CHECK_EQ_U(atomic_load(&w->last_waits), waits + 1);
	section_close(w);
	pthread_join(quick, NULL);
	/* a request stuck at the source: a full pool refuses */
	pool = 0;
	pthread_t th;
	CHECK_EQ_U(pthread_create(&th, NULL, slow_request, w), 0);
	pthread_mutex_lock(&held_lock);
	while (held != 1)
		pthread_cond_wait(&held_cond, &held_lock);
	pthread_mutex_unlock(&held_lock);
	struct timespec wait = { .tv_sec = STUCK_NS / 1000000000, .tv_nsec = 100000000 };
	nanosleep(&wait, NULL);
	CHECK_EQ_U(sections_stuck(w, st, 4, &total), 1);
	CHECK_EQ_U(total, 1);
	CHECK(strcmp(st[0].path, "slow/file") == 0 && strcmp(st[0].op, "read") == 0);
	CHECK(st[0].seconds >= 1.0);
	pool = -EAGAIN;
	CHECK(section_open(w, "read", "a.txt", NULL, true) == -EIO);
	pthread_mutex_lock(&held_lock);
	held = 2;
	pthread_cond_broadcast(&held_cond);
	pthread_mutex_unlock(&held_lock);
	pthread_join(th, NULL);
	CHECK_EQ_U(sections_stuck(w, st, 4, &total), 0);
	pool = 0;
	w->on_open = NULL;
	w->on_close = NULL;
}

/* A name looked up before its directory is listed: a listing that
 * answers for it (a tar's is whole: a fold's index may cover it), and the
 * view the lookup opens and places. */
static void test_partial(void)
{
	struct fnode *deep = find(dm.tree.root, "deep", 0);
	CHECK(deep != NULL);
	if (!deep)
		return;
	struct listing *l = NULL;
	struct fnode *z = NULL;
	CHECK_EQ_U(find_src(&dm, deep, "z", false, &l, &z), 0);
	CHECK(l && !l->partial);
	listing_unref(l);
	CHECK(z && fnode_kind(z) == FK_VIEW);
	if (z) {
		CHECK_EQ_U(root_enter(&dm, z), 0);
		struct sf_node *vs = NULL;
		struct sf_err e = { { 0 } };
		CHECK(fnode_vn(z) && sf_dir_find(fnode_vn(z), "sub", &vs, &e) == 0 && vs);
		fnode_forget(&dm.tree, z, 1);
	}
	l = NULL;
	CHECK_EQ_U(find_src(&dm, deep, "nothing", false, &l, &z), 0);
	CHECK(z == NULL);
	listing_unref(l);
	fnode_forget(&dm.tree, deep, 1);
}

/* SRC's a.txt, found and mapped as an OPEN maps it. */
static struct fnode *opened_a(void)
{
	struct fnode *a = find(dm.tree.root, "a.txt", 0);
	CHECK(a != NULL);
	if (a)
		CHECK_EQ_U(src_map_file(&dm, a), 0);
	return a;
}

/* A file replaced in SRC: its name finds a new node, and the old one
 * keeps reading the version it pinned. */
static void test_replaced(void)
{
	struct fnode *old = opened_a();
	if (!old)
		return;
	write_file("a.new", "a second version\n");
	char from[300], to[300];
	snprintf(from, sizeof from, "%s/a.new", src_path);
	snprintf(to, sizeof to, "%s/a.txt", src_path);
	CHECK(rename(from, to) == 0);
	struct fnode *now = find(dm.tree.root, "a.txt", 0);
	CHECK(now && now != old);
	if (now) {
		struct stat st;
		fill_attr(&dm, now, 0, true, &st);
		CHECK_EQ_U(st.st_size, 17);
		CHECK_EQ_U(src_map_file(&dm, now), 0);
		char *b = read_src(now, 17);
		CHECK(strcmp(b, "a second version\n") == 0);
		free(b);
		fnode_forget(&dm.tree, now, 1);
	}
	char *b = read_src(old, 6);
	CHECK(strcmp(b, "hello\n") == 0);
	free(b);
	fnode_forget(&dm.tree, old, 1);
}

/* The small-file push: once a node, whatever came of it (here no session
 * takes it). */
static void test_push(void)
{
	struct fnode *a = opened_a();
	if (!a)
		return;
	CHECK(push_file(&dm, a, false) < 0);
	CHECK_EQ_U(atomic_load(&dm.stats.bytes_pushed_ahead), 0);
	CHECK_EQ_U(push_file(&dm, a, false), 0); /* not again */
	fnode_forget(&dm.tree, a, 1);
}

/* The names a directory handle lists, as READDIR answers them. */
static size_t listed(struct fnode *dir, const char **names, size_t max)
{
	struct dirsnap *s = NULL;
	CHECK_EQ_U(dirsnap_take(&dm, dir, &s), 0);
	if (!s)
		return 0;
	size_t k = 0;
	static char keep[16][64];
	for (size_t i = 0; i < dent_count(s) && k < max; i++) {
		struct sf_dirent vd;
		struct dent d = dent_at(s, i, &vd);
		if (d.name) {
			snprintf(keep[k], sizeof keep[k], "%s", d.name);
			names[k] = keep[k];
			k++;
		}
	}
	dirsnap_free(s);
	return k;
}

/* Directory handles of each kind, and readdirplus entries. */
static void test_dirs(void)
{
	const char *n[16];
	CHECK(dir_at_source(dm.tree.root));
	CHECK_EQ_U(listed(dm.tree.root, n, 16), 11);
	CHECK(strcmp(n[0], ".") == 0 && strcmp(n[1], "..") == 0 && strcmp(n[2], "a.txt") == 0 &&
	      strcmp(n[9], "t") == 0);
	struct dirsnap *s = NULL;
	struct fnode *ln = find(dm.tree.root, "ln", 0);
	CHECK(ln && !dir_at_source(ln));
	if (ln) {
		CHECK(dirsnap_take(&dm, ln, &s) == -ENOTDIR && !s);
		fnode_forget(&dm.tree, ln, 1);
	}
	struct fnode *d = meta_node(&dm.tree, dm.tree.root, ".shardfs", true, META_STATS);
	if (d) {
		CHECK(!dir_at_source(d)); /* from memory */
		CHECK_EQ_U(listed(d, n, 16), 4);
		CHECK(strcmp(n[2], "errors") == 0 && strcmp(n[3], "stats.json") == 0);
		fnode_forget(&dm.tree, d, 1);
	}
	struct fnode *t = find(dm.tree.root, "u.tar.d", 0);
	CHECK(t != NULL);
	if (t) {
		CHECK(dir_at_source(t)); /* not entered yet */
		CHECK_EQ_U(listed(t, n, 16), 3);
		CHECK(strcmp(n[2], "sub") == 0);
		CHECK(!dir_at_source(t)); /* held complete */
		/* readdirplus: a SRC entry, a view's, and a name only */
		struct listing *l = NULL;
		struct fuse_entry_param ep = { 0 };
		struct dent a = { .name = "a.txt" }, sub = { .name = "sub" }, dot = { .name = "." };
		struct fnode *x = plus_entry(&dm, dm.tree.root, &a, &l, &ep);
		CHECK(x && ep.ino == fnode_ino(x) && S_ISREG(ep.attr.st_mode));
		CHECK_EQ_U(ep.attr.st_size, 17);
		CHECK(ep.entry_timeout < 2);
		if (x)
			fnode_forget(&dm.tree, x, 1);
		listing_unref(l);
		x = plus_entry(&dm, t, &sub, NULL, &ep);
		CHECK(x && x->parent == t && S_ISDIR(ep.attr.st_mode) && ep.entry_timeout > 2);
		if (x)
			fnode_forget(&dm.tree, x, 1);
		CHECK(plus_entry(&dm, t, &dot, NULL, &ep) == NULL);
		fnode_forget(&dm.tree, t, 1);
	}
}

int main(void)
{
	make_src();
	if (daemon_up() == 0) {
		test_listing();
		test_src();
		test_view();
		test_partial();
		test_replaced();
		test_push();
		test_dirs();
		test_meta();
		test_sections();
		struct sf_buf *j = stats_json(&dm.stats, 0, 0, 0);
		CHECK(j && j->len > 0);
		sf_buf_unref(j);
	}
	daemon_down();
	remove_src();
	return check_failures ? 1 : 0;
}
