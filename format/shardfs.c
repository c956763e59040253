/* The public C API (shardfs.h): thin wrappers over sf_view. */
#include "shardfs.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sf_dcache.h"
#include "sf_format.h"
#include "sf_map.h"
#include "sf_read.h"
#include "sf_view.h"

struct shardfs {
	struct sf_view *view;
	struct sf_cache *cache; /* the process's (below) */
	/* Held for reading by every call on the handle; shed_idle takes it
	 * for writing only when it is free, so a handle in use is never shed. */
	pthread_rwlock_t use;
	_Atomic uint64_t used_ms;    /* when a call last entered */
	struct shardfs *prev, *next; /* `handles`, from the same process */
	unsigned long born;          /* `forks` when opened */
};

/* Decoded parts of every handle of the process, kept within one budget by
 * the daemon's own cache (sf_dcache.h), its --cache-size default: a
 * compressed part read piece by piece, or by several threads, is decoded
 * once while it stays. A forked child starts a cache of its own: a thread
 * of the parent may have held the parent's lock at the fork. */
#define CACHE_BUDGET (256ull << 20)

static struct sf_dcache *cache;
static struct sf_dcache_counts cache_counts;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

/* The handles open in this process, for shed_idle. A forked child starts
 * with none: its parent's handles are its parent's (shardfs_close of one
 * there unlinks nothing). */
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shardfs *handles;
static unsigned long forks;
static atomic_uint_fast64_t sheds;

/* As the daemon closes views not entered for a second when its cache is
 * short (fs/openviews.c), idle handles give back what their views can make
 * again (sf_format.shed). */
#define IDLE_MS 1000u

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* The cache's on_short: a reader waits for room that evicting parts cannot
 * make (no lock of the cache held). */
static void shed_idle(void *arg)
{
	(void)arg;
	uint64_t now = now_ms();
	pthread_mutex_lock(&handles_lock);
	for (struct shardfs *h = handles; h; h = h->next) {
		if (!sf_view_format(h->view)->shed || now - atomic_load(&h->used_ms) < IDLE_MS ||
		    pthread_rwlock_trywrlock(&h->use))
			continue;
		if (sf_view_shed(h->view))
			atomic_fetch_add(&sheds, 1);
		pthread_rwlock_unlock(&h->use);
	}
	pthread_mutex_unlock(&handles_lock);
}

static void cache_make(void)
{
	cache_counts = (struct sf_dcache_counts){ 0 };
	cache = sf_dcache_new(CACHE_BUDGET, &cache_counts);
	if (cache)
		sf_dcache_on_short(cache, shed_idle, NULL);
}

static void forked(void)
{
	pthread_mutex_init(&handles_lock, NULL);
	handles = NULL;
	forks++;
	atomic_store(&sheds, 0);
	cache_make();
}

static void cache_start(void)
{
	cache_make();
	pthread_atfork(NULL, NULL, forked);
}

/* A reader of the API reads members one call each, many thousands a
 * second: each source file is compared with what was opened at most every
 * RECHECK_NS while it is read (a fstat a read would cost more than the
 * read), and the mappings' pages are dropped every DROP_EVERY lookups
 * instead of the daemon's few thousand (each drop costs the next reads a
 * page fault apiece). A file rendered from the whole container
 * (samples.jsonl) is kept once counted: readers here read it whole (the
 * Fold), and rendering it twice is most of opening a fold. shardfs.h states
 * both. */
#define RECHECK_NS (10 * 1000 * 1000)
#define DROP_EVERY 65536
/* The most of a file a read from its start has its lookup copy along: a
 * sample's member, rarely more (a larger file is read by its own pread). */
#define READ_ALONG_MAX ((size_t)64 << 10)

static _Thread_local char last_error[sizeof(struct sf_err)];

static int fail(int rc, const struct sf_err *e)
{
	snprintf(last_error, sizeof last_error, "%s", sf_err_msg(e, rc));
	return rc;
}

int shardfs_open(const char *path, struct shardfs **out)
{
	struct sf_err e = { { 0 } };
	pthread_once(&cache_once, cache_start);
	struct shardfs *h = cache ? calloc(1, sizeof *h) : NULL;
	if (!h)
		return fail(sf_fail(&e, -ENOMEM, "out of memory"), &e);
	/* the API's host: every handle of the process reads through its one
	 * cache, as the module reads (DROP_EVERY) */
	const struct sf_host host = { .cache = sf_dcache_iface(cache), .drop_every = DROP_EVERY,
				      .keep_generated = true, .keep_copies = true };
	int rc = sf_open_path(path, &host, &h->view, &e);
	if (rc) {
		free(h);
		return fail(rc, &e);
	}
	for (size_t i = 0; i < sf_view_nmaps(h->view); i++)
		sf_map_set_recheck(sf_view_map(h->view, i), RECHECK_NS);
	h->cache = host.cache;
	pthread_rwlock_init(&h->use, NULL);
	atomic_init(&h->used_ms, now_ms());
	pthread_mutex_lock(&handles_lock);
	h->born = forks;
	h->next = handles;
	if (handles)
		handles->prev = h;
	handles = h;
	pthread_mutex_unlock(&handles_lock);
	*out = h;
	return 0;
}

void shardfs_close(struct shardfs *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&handles_lock);
	if (h->born == forks) {
		if (h->prev)
			h->prev->next = h->next;
		else
			handles = h->next;
		if (h->next)
			h->next->prev = h->prev;
	}
	pthread_mutex_unlock(&handles_lock);
	pthread_rwlock_destroy(&h->use);
	sf_view_unref(h->view);
	free(h);
}

/* Every call on a handle runs between enter and leave. */
static void enter(struct shardfs *h)
{
	pthread_rwlock_rdlock(&h->use);
	atomic_store_explicit(&h->used_ms, now_ms(), memory_order_relaxed);
}

static void leave(struct shardfs *h)
{
	pthread_rwlock_unlock(&h->use);
}

int shardfs_set_cache_size(uint64_t bytes)
{
	pthread_once(&cache_once, cache_start);
	if (!cache)
		return -ENOMEM;
	if (!bytes)
		return -EINVAL;
	sf_dcache_set_budget(cache, bytes);
	return 0;
}

void shardfs_cache_stats(struct shardfs_cache_stats *out)
{
	pthread_once(&cache_once, cache_start);
	*out = (struct shardfs_cache_stats){ 0 };
	if (!cache)
		return;
	out->budget = sf_dcache_budget(cache);
	out->bytes_held = sf_dcache_bytes(cache);
	out->bytes_charged = sf_dcache_charged(cache);
	out->sheds = atomic_load(&sheds);
}

const char *shardfs_format(const struct shardfs *h)
{
	return sf_view_format(h->view)->name;
}

const char *shardfs_view_ext(const char *dir, const char *name, const char *const *names,
			     size_t n)
{
	const struct sf_format *f = sf_format_for(dir, name);
	return !f || (f->covered && f->covered(name, names, n)) ? NULL : f->ext;
}

const char *shardfs_last_error(void)
{
	return last_error;
}

static void describe(struct shardfs *h, struct sf_node *n, struct shardfs_entry *out)
{
	struct sf_err e = { { 0 } };
	*out = (struct shardfs_entry){ .name = sf_node_name(n) };
	switch (sf_node_kind(n)) {
	case SF_DIR:
		out->kind = SHARDFS_DIR;
		break;
	case SF_LINK:
		out->kind = SHARDFS_LINK;
		out->target = sf_link_target(n);
		break;
	case SF_FILE:
		out->kind = SHARDFS_FILE;
		out->error = sf_file_ready(n, h->cache, &e);
		sf_dcache_read_done();
		if (out->error)
			fail(out->error, &e);
		else
			out->size = sf_file_size(n).size;
		break;
	}
}

static int walk(struct shardfs *h, const char *path, struct sf_node **n)
{
	struct sf_err e = { { 0 } };
	int rc = sf_view_walk(sf_view_root(h->view), path, n, &e);
	return rc ? fail(rc, &e) : 0;
}

int shardfs_stat(struct shardfs *h, const char *path, struct shardfs_entry *out)
{
	struct sf_node *n;
	enter(h);
	int rc = walk(h, path, &n);
	if (!rc)
		describe(h, n, out);
	leave(h);
	return rc;
}

static int list(struct shardfs *h, const char *dir, shardfs_list_fn fn, void *arg)
{
	struct sf_err e = { { 0 } };
	struct sf_node *d;
	int rc = walk(h, dir, &d);
	if (rc)
		return rc;
	if (sf_node_kind(d) != SF_DIR)
		return fail(sf_fail(&e, -ENOTDIR, "%s: %s is not a directory", sf_view_path(h->view),
				    dir), &e);
	if ((rc = sf_dir_ready(d, &e)))
		return fail(rc, &e);
	for (size_t i = 0; i < sf_dir_count(d); i++) {
		struct sf_node *k = sf_dir_child(d, i, &e);
		if (!k)
			return fail(e.msg[0] ? -EIO : -ENOMEM, &e);
		/* a node made for an on-demand entry goes again once described:
		 * a listing of millions keeps none of them (about 400 bytes each) */
		struct shardfs_entry ent;
		if (!sf_node_hidden(k)) {
			describe(h, k, &ent);
			rc = fn(&ent, arg);
		}
		sf_node_unpin(k);
		if (rc)
			return rc;
	}
	return 0;
}

int shardfs_list(struct shardfs *h, const char *dir, shardfs_list_fn fn, void *arg)
{
	enter(h);
	int rc = list(h, dir, fn, arg);
	leave(h);
	return rc;
}

/* Gathers [off, off+len) of the file at `path` into rv: 0 (rv->bytes may
 * be 0, at or past the end) or a negative errno, the message set. */
static int gather(struct shardfs *h, const char *path, uint64_t off, size_t len,
		  struct sf_readv *rv)
{
	struct sf_err e = { { 0 } };
	struct sf_node *f;
	/* a read from the start of a small file: its locate may copy it along
	 * with the header it checks, one pread for both (sf_stored.along) */
	struct sf_stored st = { .along = off == 0 ? (len < READ_ALONG_MAX ? len : READ_ALONG_MAX) : 0 };
	/* a member found without a node where the view can (most reads of a
	 * fold by name), else the walk, which also says why a name fails */
	bool stored = sf_view_locate(h->view, path, &st, &e) == 0;
	rv->pre = st.pre;
	int rc = stored ? 0 : walk(h, path, &f);
	if (rc)
		return rc;
	if (stored) {
		rc = sf_stored_read(h->view, &st, off, len, rv, &e);
		return rc ? fail(rc, &e) : 0;
	}
	if (sf_node_kind(f) != SF_FILE)
		return fail(sf_fail(&e, sf_node_kind(f) == SF_DIR ? -EISDIR : -EINVAL,
				    "%s: %s is not a file", sf_view_path(h->view), path), &e);
	if ((rc = sf_file_ready(f, h->cache, &e)))
		return fail(rc, &e);
	/* a broken file fails every read, at its end too, as through the
	 * mount (docs/design.md §3.4), never an empty success */
	struct sf_file_size sz = sf_file_size(f);
	if (off >= sz.size && !sz.broken)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	rc = sf_file_read(f, off, len, h->cache, rv, &e);
	return rc ? fail(rc, &e) : 0;
}

ssize_t shardfs_read(struct shardfs *h, const char *path, void *buf, size_t len,
		     uint64_t off)
{
	struct sf_err e = { { 0 } };
	struct sf_readv rv = { 0 };
	enter(h);
	int rc = gather(h, path, off, len, &rv);
	uint64_t got = rv.bytes;
	if (rc == 0 && got && (rc = sf_readv_copy(&rv, buf, &e)))
		fail(rc, &e);
	sf_readv_release(&rv);
	sf_dcache_read_done();
	leave(h);
	return rc ? rc : (ssize_t)got;
}

struct shardfs_hold {
	struct sf_readv rv;
	void *copy; /* the bytes, when they lay in several pieces */
	int mapped;
};

ssize_t shardfs_hold(struct shardfs *h, const char *path, uint64_t off, size_t len,
		     const void **data, struct shardfs_hold **out)
{
	struct sf_err e = { { 0 } };
	struct shardfs_hold *hd = calloc(1, sizeof *hd);
	if (!hd)
		return fail(sf_fail(&e, -ENOMEM, "%s: %s: out of memory", sf_view_path(h->view), path), &e);
	enter(h);
	int rc = gather(h, path, off, len, &hd->rv);
	leave(h);
	/* the parts held are the hold's now, not this thread's read */
	sf_dcache_read_done();
	const struct sf_readv *rv = &hd->rv;
	if (rc == 0 && rv->n == 1) {
		*data = rv->iov[0].iov_base;
		hd->mapped = rv->from_map == rv->bytes;
	} else if (rc == 0) {
		/* zero bytes, or pieces of a synthesized file: one copy */
		hd->copy = malloc(rv->bytes ? rv->bytes : 1);
		if (!hd->copy)
			rc = fail(sf_fail(&e, -ENOMEM, "%s: %s: out of memory", sf_view_path(h->view),
					  path), &e);
		else if (rv->bytes && (rc = sf_readv_copy(rv, hd->copy, &e)))
			fail(rc, &e);
		*data = hd->copy;
	}
	if (rc) {
		shardfs_release(hd);
		return rc;
	}
	*out = hd;
	return (ssize_t)rv->bytes;
}

int shardfs_hold_copy(const struct shardfs_hold *hold, void *dst)
{
	struct sf_err e = { { 0 } };
	int rc;
	if (!hold->rv.bytes)
		return 0;
	if (hold->copy)
		memcpy(dst, hold->copy, hold->rv.bytes);
	else if ((rc = sf_readv_copy(&hold->rv, dst, &e)))
		return fail(rc, &e);
	return 0;
}

int shardfs_hold_mapped(const struct shardfs_hold *hold)
{
	return hold->mapped;
}

void shardfs_release(struct shardfs_hold *hold)
{
	if (!hold)
		return;
	sf_readv_release(&hold->rv);
	free(hold->copy);
	free(hold);
}
