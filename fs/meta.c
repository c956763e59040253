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
	/* no-open: its node was read to its end, so the thread's next
	 * path walk starts a new read, and takes a new snapshot */
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

/* File `which`'s state, kept by .shardfs/ `dir` (one file may have a
 * node per snapshot, no-open), made on first use (dir's snap_lock
 * guards it). */
static struct meta_live *live(struct fnode *dir, enum meta_file which)
{
	struct meta_node *d = meta_of(dir);
	pthread_mutex_lock(&d->snap_lock);
	if (!d->live[which] && (d->live[which] = calloc(1, sizeof *d->live[which])))
		pthread_mutex_init(&d->live[which]->lock, NULL);
	struct meta_live *m = d->live[which];
	pthread_mutex_unlock(&d->snap_lock);
	return m;
}

static struct meta_live *live_of(struct fnode *file)
{
	return live(file->parent, meta_of(file)->which);
}

static struct sf_buf *content(struct daemon *dm, enum meta_file which)
{
	return which == META_STATS
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

/* A new snapshot of file `which`, kept as thread tid's pending one, and
 * when it was taken; a reference, or NULL when out of memory. */
static struct sf_buf *take_pending(struct daemon *dm, struct meta_live *m, enum meta_file which,
				   pid_t tid, struct timespec *at)
{
	clock_gettime(CLOCK_REALTIME, at);
	/* taken outside the lock: other readers need not wait for it */
	struct sf_buf *b = content(dm, which);
	if (!b)
		return NULL;
	pthread_mutex_lock(&m->lock);
	/* read again: others may have stamped slots while it was taken */
	keep_pending(m, tid, sf_buf_ref(b), at, mono_ns());
	pthread_mutex_unlock(&m->lock);
	return b;
}

void meta_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup, off_t *size,
	       struct timespec *at)
{
	*size = 0;
	clock_gettime(CLOCK_REALTIME, at);
	struct meta_live *m = live_of(n);
	if (!m)
		return;
	uint64_t now = mono_ns();
	pthread_mutex_lock(&m->lock);
	/* a lookup: the thread's pending snapshot; a GETATTR: the one it
	 * just used (the stat or open of a path walk), else its latest open
	 * handle's (fstat). A handle is released asynchronously: one still
	 * listed may be one the thread has closed already. */
	struct pending *p = pending_of(m, tid, now, lookup ? PENDING_NS : REUSE_NS);
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
	struct sf_buf *b = take_pending(dm, m, meta_of(n)->which, tid, at);
	if (b)
		*size = (off_t)b->len;
	sf_buf_unref(b);
}

struct meta_handle *meta_open(struct daemon *dm, struct fnode *n, pid_t tid)
{
	struct meta_live *m = live_of(n);
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
		if (!(h->snap = content(dm, meta_of(n)->which))) {
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

void meta_closed(struct fnode *n, struct meta_handle *h)
{
	struct meta_live *m = live_of(n);
	pthread_mutex_lock(&m->lock);
	h->closed = true;
	pthread_mutex_unlock(&m->lock);
}

void meta_release(struct fnode *n, struct meta_handle *h)
{
	struct meta_live *m = live_of(n);
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

/* live content: the node's snapshot (no-open), else the caller's
 * (attr timeout 0) */
static void file_attr(struct daemon *dm, struct fnode *n, pid_t tid, bool lookup,
		      struct stat *st)
{
	struct meta_node *f = meta_of(n);
	st->st_mode = S_IFREG;
	st->st_nlink = 1;
	if (f->snap) {
		st->st_size = (off_t)f->snap->len;
		st->st_mtim = f->snap_at;
	} else {
		meta_attr(dm, n, tid, lookup, &st->st_size, &st->st_mtim);
	}
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
	if (fnode_kind(n) == FK_META_DIR) {
		meta_live_free(m->live[META_STATS]);
		meta_live_free(m->live[META_ERRORS]);
		pthread_mutex_destroy(&m->snap_lock);
	}
	sf_buf_unref(m->snap);
	sf_hash_free(&m->kids);
	free(n->name);
	free(n);
}

/* read to its end: the thread's next path walk takes a new snapshot; an
 * empty one's read sends no READ, only the GETATTR (fnode_ops.read_end) */
static void read_out(struct fnode *n)
{
	struct meta_node *f = meta_of(n);
	if (!f->snap)
		return;
	/* made by the lookup that made n */
	struct meta_live *m = meta_of(n->parent)->live[f->which];
	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < PENDING_MAX; i++)
		if (m->pending[i].snap == f->snap)
			m->pending[i].read_out = true;
	pthread_mutex_unlock(&m->lock);
}

static const struct fnode_ops dir_ops = {
	.kind = FK_META_DIR, .cached = true, .st = meta_st, .attr = fnode_dir_attr,
	.access = access_shown, .kids = dir_kids, .drop = meta_drop,
};

static const struct fnode_ops file_ops = {
	.kind = FK_META_FILE, .cached = true, .live = true, .st = meta_st, .attr = file_attr,
	.access = file_access, .read_end = read_out, .drop = meta_drop,
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
			if (isdir)
				pthread_mutex_init(&m->snap_lock, NULL);
			m->which = which;
			m->st = *fnode_st(dir);
			fnode_attach(n);
		}
	}
	return fnode_found(t, n);
}

struct fnode *meta_snapshot_node(struct daemon *dm, struct fnode *dir, const char *name,
				 enum meta_file which, pid_t tid)
{
	struct meta_live *m = live(dir, which);
	if (!m)
		return NULL;
	struct timespec at;
	pthread_mutex_lock(&m->lock);
	struct pending *p = pending_of(m, tid, mono_ns(), PENDING_NS);
	struct sf_buf *b = p && !p->read_out ? sf_buf_ref(p->snap) : NULL;
	if (b)
		at = p->at;
	pthread_mutex_unlock(&m->lock);
	if (!b && !(b = take_pending(dm, m, which, tid, &at)))
		return NULL;
	struct ftree *t = &dm->tree;
	fnode_find(t);
	struct fnode *n = fnode_child(dir, name);
	if (!n || n->ops != &file_ops || meta_of(n)->snap != b) {
		n = fnode_new(t, &file_ops, sizeof(struct meta_node), dir, name);
		if (n) {
			struct meta_node *f = meta_of(n);
			f->which = which;
			f->st = *fnode_st(dir);
			f->snap = b;
			f->snap_at = at;
			b = NULL;
			fnode_attach(n);
		}
	}
	n = fnode_found(t, n);
	sf_buf_unref(b);
	return n;
}

struct sf_buf *meta_node_read(struct fnode *n, uint64_t end)
{
	struct meta_node *f = meta_of(n);
	if (end >= f->snap->len)
		read_out(n);
	return sf_buf_ref(f->snap);
}
