#include "meta.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "access.h"
#include "stats.h"

/* A snapshot a stat took for a thread, waiting for the thread's open. */
struct pending {
	struct sf_buf *snap;
	struct timespec at;
	pid_t tid;
	uint64_t taken_ns, used_ns; /* monotonic */
	/* a READ with no handle reached its end (--no-open): the thread's
	 * next path walk starts a new read, and takes a new snapshot */
	bool read_out;
};

/* Pending snapshots kept per file, and how long one waits for its open. A
 * stat's GETATTR reuses one a lookup of the thread took just before (the
 * path walk of stat and of open both look the name up, and open also asks
 * GETATTR to check permissions), but takes a new one after a pause. */
#define PENDING_MAX 64
#define PENDING_NS 5000000000ull
#define REUSE_NS 1000000000ull

struct meta_live {
	pthread_mutex_t lock;
	struct meta_handle *handles;  /* open, most recent first */
	struct pending pending[PENDING_MAX];
};

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* How long ago `t` was at `now`: 0 when `t` is later (another thread may
 * have stamped it after `now` was read). */
static uint64_t age(uint64_t now, uint64_t t)
{
	return now > t ? now - t : 0;
}

/* The node's state, made on first use (the node's snap_lock guards it). */
static struct meta_live *live(struct fnode *node)
{
	struct meta_node *n = meta_of(node);
	pthread_mutex_lock(&n->snap_lock);
	if (!n->live && (n->live = calloc(1, sizeof *n->live)))
		pthread_mutex_init(&n->live->lock, NULL);
	struct meta_live *m = n->live;
	pthread_mutex_unlock(&n->snap_lock);
	return m;
}

static struct sf_buf *content(struct daemon *dm, struct fnode *n)
{
	return meta_of(n)->which == META_STATS
		       ? stats_json(&dm->stats, sf_dcache_bytes(dm->cache), sf_dcache_charged(dm->cache),
				    sf_dcache_budget(dm->cache))
		       : errlog_text(&dm->stats);
}

/* The thread's pending snapshot still waiting for its open, used within
 * `within` ns (lock held); marked used now. */
static struct pending *pending_of(struct meta_live *m, pid_t tid, uint64_t now, uint64_t within)
{
	for (int i = 0; i < PENDING_MAX; i++) {
		struct pending *p = &m->pending[i];
		if (p->snap && p->tid == tid && age(now, p->taken_ns) < PENDING_NS &&
		    age(now, p->used_ns) < within) {
			p->used_ns = now;
			return p;
		}
	}
	return NULL;
}

/* Keeps `b` as the thread's pending snapshot, in its old slot, else an
 * empty or expired one, else the oldest (lock held). */
static void keep_pending(struct meta_live *m, pid_t tid, struct sf_buf *b,
			 const struct timespec *at, uint64_t now)
{
	struct pending *slot = &m->pending[0];
	for (int i = 0; i < PENDING_MAX; i++) {
		struct pending *p = &m->pending[i];
		if (p->snap && p->tid == tid) {
			slot = p;
			break;
		}
		if (!slot->snap || age(now, slot->taken_ns) >= PENDING_NS)
			continue; /* a free slot found: kept unless the thread's own comes */
		if (!p->snap || age(now, p->taken_ns) >= PENDING_NS || p->taken_ns < slot->taken_ns)
			slot = p;
	}
	sf_buf_unref(slot->snap);
	*slot = (struct pending){ .snap = b, .at = *at, .tid = tid, .taken_ns = now, .used_ns = now };
}

void meta_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, off_t *size,
	       struct timespec *at)
{
	*size = 0;
	clock_gettime(CLOCK_REALTIME, at);
	struct meta_live *m = live(n);
	if (!m)
		return;
	uint64_t now = mono_ns();
	pthread_mutex_lock(&m->lock);
	/* a lookup: the thread's pending snapshot; a GETATTR: the one it
	 * just used (the stat or open of a path walk), else its latest open
	 * handle's (fstat). A handle is released asynchronously: one still
	 * listed may be one the thread has closed already. */
	struct pending *p = pending_of(m, tid, now, lookup ? PENDING_NS : REUSE_NS);
	if (p && lookup && p->read_out)
		p = NULL;
	struct meta_handle *h = p || lookup ? NULL : m->handles;
	while (h && (h->tid != tid || h->closed))
		h = h->next;
	if (p || h) {
		*size = (off_t)(p ? p->snap->len : h->snap->len);
		*at = p ? p->at : h->at;
		pthread_mutex_unlock(&m->lock);
		return;
	}
	pthread_mutex_unlock(&m->lock);
	/* taken outside the lock: other readers need not wait for it */
	struct sf_buf *b = content(dm, n);
	if (!b)
		return;
	*size = (off_t)b->len;
	pthread_mutex_lock(&m->lock);
	/* read again: others may have stamped slots while it was taken */
	keep_pending(m, tid, b, at, mono_ns());
	pthread_mutex_unlock(&m->lock);
}

struct meta_handle *meta_open(struct daemon *dm, struct fnode *n, pid_t tid)
{
	struct meta_live *m = live(n);
	struct meta_handle *h = m ? calloc(1, sizeof *h) : NULL;
	if (!h)
		return NULL;
	h->tid = tid;
	pthread_mutex_lock(&m->lock);
	struct pending *p = pending_of(m, tid, mono_ns(), PENDING_NS);
	if (p) {
		h->snap = p->snap;
		h->at = p->at;
		p->snap = NULL;
	}
	pthread_mutex_unlock(&m->lock);
	if (!h->snap) {
		clock_gettime(CLOCK_REALTIME, &h->at);
		if (!(h->snap = content(dm, n))) {
			free(h);
			return NULL;
		}
	}
	pthread_mutex_lock(&m->lock);
	h->next = m->handles;
	if (m->handles)
		m->handles->prev = h;
	m->handles = h;
	pthread_mutex_unlock(&m->lock);
	return h;
}

struct sf_buf *meta_read_snapshot(struct daemon *dm, struct fnode *n, pid_t tid, uint64_t end)
{
	struct meta_live *m = live(n);
	if (!m)
		return NULL;
	pthread_mutex_lock(&m->lock);
	struct pending *p = pending_of(m, tid, mono_ns(), PENDING_NS);
	struct sf_buf *b = p ? sf_buf_ref(p->snap) : NULL;
	if (p && end >= b->len)
		p->read_out = true;
	pthread_mutex_unlock(&m->lock);
	if (b)
		return b;
	struct timespec at;
	clock_gettime(CLOCK_REALTIME, &at);
	if (!(b = content(dm, n)))
		return NULL;
	pthread_mutex_lock(&m->lock);
	keep_pending(m, tid, sf_buf_ref(b), &at, mono_ns());
	pthread_mutex_unlock(&m->lock);
	return b;
}

void meta_closed(struct fnode *n, struct meta_handle *h)
{
	struct meta_live *m = meta_of(n)->live;
	pthread_mutex_lock(&m->lock);
	h->closed = true;
	pthread_mutex_unlock(&m->lock);
}

void meta_release(struct fnode *n, struct meta_handle *h)
{
	struct meta_live *m = meta_of(n)->live;
	pthread_mutex_lock(&m->lock);
	if (h->prev)
		h->prev->next = h->next;
	else
		m->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&m->lock);
	sf_buf_unref(h->snap);
	free(h);
}

static void meta_live_free(struct meta_live *m)
{
	if (!m)
		return;
	for (int i = 0; i < PENDING_MAX; i++)
		sf_buf_unref(m->pending[i].snap);
	/* a node is freed with handles only at unmount: the kernel may end the
	 * session before the RELEASE of a file closed just before it */
	while (m->handles) {
		struct meta_handle *h = m->handles;
		m->handles = h->next;
		sf_buf_unref(h->snap);
		free(h);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static const struct stat *meta_st(const struct fnode *n)
{
	return &meta_of(n)->st;
}

/* live content: the caller's snapshot (attr timeout 0) */
static void file_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		      struct stat *st)
{
	st->st_mode = S_IFREG;
	st->st_nlink = 1;
	meta_attr(dm, n, tid, lookup, &st->st_size, &st->st_mtim);
	st->st_ctim = st->st_mtim;
}

/* errors names files anywhere in SRC: for the user who mounted */
static void file_access(const struct fnode *n, struct stat *st)
{
	if (meta_of(n)->which != META_ERRORS) {
		access_shown(n, st);
		return;
	}
	st->st_uid = geteuid();
	st->st_gid = getegid();
	st->st_mode = (st->st_mode & S_IFMT) | 0400;
}

static struct sf_hash *dir_kids(struct fnode *n)
{
	return &meta_of(n)->kids;
}

static void meta_drop(struct ftree *t, struct fnode *n)
{
	struct meta_node *m = meta_of(n);
	meta_live_free(m->live);
	pthread_mutex_destroy(&m->snap_lock);
	sf_hash_free(&m->kids);
	free(n->name);
	free(n);
}

static const struct fnode_ops dir_ops = {
	.kind = FK_META_DIR, .cached = true, .st = meta_st, .attr = fnode_dir_attr,
	.access = access_shown, .kids = dir_kids, .drop = meta_drop,
};

static const struct fnode_ops file_ops = {
	.kind = FK_META_FILE, .cached = true, .live = true, .st = meta_st, .attr = file_attr,
	.access = file_access, .drop = meta_drop,
};

struct fnode *meta_node(struct ftree *t, struct fnode *dir, const char *name, bool isdir,
			enum meta_file which)
{
	const struct fnode_ops *ops = isdir ? &dir_ops : &file_ops;
	fnode_find(t);
	struct fnode *n = fnode_child(dir, name);
	if (!n || n->ops != ops) {
		n = fnode_new(t, ops, sizeof(struct meta_node), dir, name);
		if (n) {
			struct meta_node *m = meta_of(n);
			pthread_mutex_init(&m->snap_lock, NULL);
			m->which = which;
			m->st = *fnode_st(dir);
			fnode_attach(n);
		}
	}
	return fnode_found(t, n);
}
