/* Reading: OPEN pins the version a handle reads, READ answers from
 * mappings and the views' extents (handing the request loop on first when
 * the bytes are not in memory), and the small-file push (at IOCTL, and for
 * fs/push.c). */
#include "reading.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attr.h"
#include "transport.h"
#include "meta.h"
#include "request.h"
#include "sf_map.h"
#include "sf_open.h"
#include "sf_read.h"
#include "src.h"
#include "vnode.h"

/* An open pins the version its inode stands for: a SRC file is mapped here
 * (a view holds its container's mapping already), so a handle keeps reading
 * the bytes it opened even when the file is replaced in SRC before its first
 * read. When the version is already gone, ESTALE makes the kernel look the
 * name up again and retry the open once, which then finds the new version.
 * Content never changes under an inode, so the kernel keeps its page cache
 * across opens; content files keep no per-open state. The live .shardfs/
 * files are the exception: a handle holds its snapshot (fs/meta.h).
 * Answering costs one round trip per open (docs/performance.md), which
 * no-open, the default, spares (only --open asks for OPEN). Each kind's
 * requests are its entry of file_kinds. */
static void open_live(fuse_req_t req, struct fnode *n, struct fuse_file_info *fi)
{
	/* one snapshot per handle, read past the page cache (fs/meta.h) */
	struct meta_handle *h = meta_open(daemon_of(req), n, fuse_req_ctx(req)->pid);
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	if (fuse_reply_open(req, fi) != 0)
		meta_release(n, h);
}

static void open_content(fuse_req_t req, struct fnode *n, struct fuse_file_info *fi)
{
	fi->keep_cache = 1;
	fi->noflush = 1; /* only the live files need to hear of a close */
	fuse_reply_open(req, fi);
}

static void open_src(fuse_req_t req, struct fnode *n, struct fuse_file_info *fi)
{
	if (!section_begin(req, "open", src_of(n)->rel, NULL))
		return;
	int rc = src_map_file(daemon_of(req), n);
	section_end(daemon_of(req));
	if (rc)
		reply_src_err(req, -rc);
	else
		open_content(req, n, fi);
}


/* Copying mapped bytes that are not in memory waits for the disk: before
 * that, the request loop hands the wait for requests to another thread
 * (otherwise cold reads from several readers would be served one at a
 * time). mincore() tells about the page cache only to root and to the
 * owner (or a writer) of a file; anyone else learns only about the pages
 * it has mapped, which would make every first read look cold and cost a
 * hand-off. So the check is made when the daemon runs as root or owns SRC,
 * and otherwise left to the loop's watch. */
static bool residency_visible(struct daemon *dm)
{
	int k = atomic_load(&dm->residency_visible);
	if (k < 0) {
		struct stat st;
		k = geteuid() == 0 || (fstat(dm->src_fd, &st) == 0 && st.st_uid == geteuid());
		atomic_store(&dm->residency_visible, k);
	}
	return k;
}

static void hand_off_unless_resident(struct daemon *dm, const struct sf_readv *rv)
{
	if (!rv->from_map || !residency_visible(dm))
		return;
	const struct iovec *iov = rv->iov;
	size_t n = rv->n;
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char vec[256];
	for (size_t i = 0; i < n; i++) {
		uintptr_t a = (uintptr_t)iov[i].iov_base & ~(uintptr_t)(page - 1);
		uintptr_t end = (uintptr_t)iov[i].iov_base + iov[i].iov_len;
		while (a < end) {
			size_t len = end - a;
			if (len > sizeof vec * page)
				len = sizeof vec * page;
			if (mincore((void *)a, len, vec) != 0) {
				transport_hand_off();
				return;
			}
			for (size_t k = 0; k < (len + page - 1) / page; k++)
				if (!(vec[k] & 1)) {
					transport_hand_off();
					return;
				}
			a += len;
		}
	}
}

static void account(struct stats *stats, const struct sf_readv *rv)
{
	stat_add(&stats->bytes_from_map, rv->from_map);
	stat_add(&stats->bytes_from_cache, rv->from_cache);
	stat_add(&stats->bytes_synthesized, rv->from_synth);
}

/* Every READ gets an answer, whatever its pieces: writev takes at most
 * IOV_MAX of them (the reply's header is one), and a reply that fails to be
 * written is lost, its reader left waiting. The kernel copies the reply
 * from the mappings: a page of the source that fails there (truncated,
 * storage failing) fails the reply with EFAULT, and the kernel answers the
 * reader EIO. */
static void reply_readv(fuse_req_t req, struct sf_readv *rv, const struct fnode *n)
{
	struct daemon *dm = daemon_of(req);
	hand_off_unless_resident(dm, rv);
	int rc = sf_readv_fit(rv, IOV_MAX - 1);
	if (rc) {
		fnode_errlog(&dm->stats, n,
			   rc == -EIO ? "a mapped page of the source could not be read"
				      : strerror(-rc));
		fuse_reply_err(req, -rc);
		return;
	}
	account(&dm->stats, rv);
	if (rv->n)
		rc = fuse_reply_iov(req, rv->iov, (int)rv->n);
	else
		rc = fuse_reply_buf(req, NULL, 0);
	if (rc == -EFAULT)
		fnode_errlog(&dm->stats, n,
			   "reading the source failed (truncated or its storage fails)");
	else if (rc && rc != -ENOENT)
		fnode_errlog(&dm->stats, n, "the answer could not be written to /dev/fuse");
}

static void read_src(fuse_req_t req, struct fnode *n, size_t size, off_t off)
{
	struct sf_readv rv = { 0 };
	int rc = src_read(daemon_of(req), n, (uint64_t)off, size, &rv);
	if (rc)
		reply_src_err(req, -rc);
	else
		reply_readv(req, &rv, n);
	sf_readv_release(&rv);
}

/* Answers a READ of view node n; with `held`, only from bytes memory holds
 * already (sf_file_read_held): false then, with nothing answered, where
 * it needs more. */
static bool answer_view(fuse_req_t req, struct fnode *n, size_t size, off_t off, bool held)
{
	struct daemon *dm = daemon_of(req);
	if (held && !fnode_vn(n))
		return false; /* a root not entered yet */
	if (!fnode_view_is(n, SF_FILE)) {
		fuse_reply_err(req, EISDIR);
		return true;
	}
	if (!held && view_file_ready(dm, n)) {
		fuse_reply_err(req, EIO);
		return true;
	}
	/* the answer holds the view until the reply is written (sf_read.h) */
	struct sf_readv rv = { 0 };
	struct sf_err e = { { 0 } };
	struct sf_node *vn = view_of(n)->vn;
	int rc = held ? sf_file_read_held(vn, (uint64_t)off, size, dm->view_cache, &rv, &e)
		      : sf_file_read(vn, (uint64_t)off, size, dm->view_cache, &rv, &e);
	if (rc == 0) {
		reply_readv(req, &rv, n);
	} else if (rc != -EAGAIN) {
		fnode_errlog(&dm->stats, n, sf_err_msg(&e, rc));
		fuse_reply_err(req, rc == -ENOMEM ? ENOMEM : EIO);
	}
	sf_readv_release(&rv);
	sf_dcache_read_done();
	return rc != -EAGAIN;
}

static void read_view(fuse_req_t req, struct fnode *n, size_t size, off_t off)
{
	answer_view(req, n, size, off, false);
}

/* The kernel gets n's pages with a READ's answer: pushing them would copy
 * them again. */
static void read_by_kernel(struct fnode *n)
{
	atomic_store_explicit(&n->pushed, true, memory_order_relaxed);
}

/* Reads n's content with `read`, in a section at the source. */
static void read_at_source(fuse_req_t req, struct fnode *n, size_t size, off_t off,
			   void (*read)(fuse_req_t req, struct fnode *n, size_t size, off_t off))
{
	struct daemon *dm = daemon_of(req); /* req is gone once answered */
	char pb[FNODE_PATH_MAX];
	if (!section_begin(req, "read", node_path(n, pb), NULL))
		return;
	read(req, n, size, off);
	section_end(dm);
}

static void read_src_file(fuse_req_t req, struct fnode *n, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	read_by_kernel(n);
	read_at_source(req, n, size, off, read_src);
}

static void read_view_file(fuse_req_t req, struct fnode *n, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	/* bytes memory holds (a rendered info.json in the cache) need no
	 * section at the source: they answer while the source holds every
	 * thread the pool gives it */
	read_by_kernel(n);
	if (!answer_view(req, n, size, off, true))
		read_at_source(req, n, size, off, read_view);
}

static void read_live(fuse_req_t req, struct fnode *n, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	/* held past the reply: its reader may release the handle as soon as
	 * the kernel has the bytes, before writev returns */
	struct sf_buf *b = fi->fh ? sf_buf_ref(((struct meta_handle *)(uintptr_t)fi->fh)->snap)
			 : meta_node_read(n, (uint64_t)off + size);
	uint64_t len = (uint64_t)off >= b->len ? 0 : b->len - (uint64_t)off;
	if (len > size)
		len = size;
	fuse_reply_buf(req, len ? (const char *)b->data + off : NULL, len);
	sf_buf_unref(b);
}

/* The whole content of a small file as pieces; false when the file is not
 * a small regular file or its content fails (the read that follows reports
 * the failure). */
static bool small_src(struct daemon *dm, struct fnode *n, struct sf_readv *rv)
{
	return src_of(n)->st.st_size > 0 && src_of(n)->st.st_size <= PUSH_MAX &&
	       src_read(dm, n, 0, PUSH_MAX, rv) == 0 && rv->n > 0;
}

static bool small_view(struct daemon *dm, struct fnode *n, struct sf_readv *rv)
{
	if (!fnode_view_is(n, SF_FILE) || view_file_ready(dm, n))
		return false;
	uint64_t size = sf_file_size(view_of(n)->vn).size;
	struct sf_err e = { { 0 } };
	return size > 0 && size <= PUSH_MAX &&
	       sf_file_read(view_of(n)->vn, 0, size, dm->view_cache, rv, &e) == 0 && rv->n > 0;
}

/* Whether view `v`'s container is no longer the file its path names in
 * SRC (deleted, replaced, or renamed by a client keeping it for its last
 * holders: NFS's .nfs<hex digits>, FUSE's .fuse_hidden<hex digits>). */
static bool container_gone(struct daemon *dm, const struct sf_view *v)
{
	const struct sf_map *m = sf_view_source(v);
	struct stat st;
	if (!m || !m->path)
		return false;
	int rc = sf_lstat_beneath(dm->src_fd, m->path, &st);
	/* a fold's index kept in --index-dir: at the same path beneath it */
	if (rc == -ENOENT && dm->index_fd >= 0)
		rc = sf_lstat_beneath(dm->index_fd, m->path, &st);
	return rc == -ENOENT || (rc == 0 && (st.st_dev != m->st.st_dev || st.st_ino != m->st.st_ino));
}

/* The last reader of a view file whose container is gone lets the view go:
 * the listing's entry drops it, and the kernel is told to forget the
 * entries leading to the file, so that nothing keeps the container open
 * (a client then removes the file it renamed). */
static void let_gone_view_go(struct daemon *dm, struct fnode *n)
{
	if (!container_gone(dm, view_of(n)->view))
		return;
	uint64_t dirs[64];
	char *names[64];
	size_t k = 0;
	pthread_mutex_lock(&dm->tree.lock);
	for (struct fnode *x = n; x && fnode_kind(x) == FK_VIEW && x->parent && k < 64;
	     x = x->parent) {
		if (!(names[k] = strdup(fnode_name(x))))
			break;
		dirs[k++] = fnode_ino(x->parent);
	}
	pthread_mutex_unlock(&dm->tree.lock);
	openviews_gone(&dm->views, view_of(n)->view, dirs, names, k);
}

/* Entries to drop: directory inode numbers and names. */
struct entries {
	uint64_t *dirs;
	char **names;
	size_t k, dcap, ncap;
};

static bool add_entry(struct entries *e, const struct fnode *n)
{
	char *name;
	if (sf_grow(&e->dirs, &e->dcap, e->k, sizeof *e->dirs, 64) ||
	    sf_grow(&e->names, &e->ncap, e->k, sizeof *e->names, 64) ||
	    !(name = strdup(fnode_name(n))))
		return false;
	e->names[e->k] = name;
	e->dirs[e->k++] = fnode_ino(n->parent);
	return true;
}

/* Adds the entries the kernel holds of view `v`'s nodes that hold no
 * children (`leaves`) or that do (the tree's lock held): the rings of its
 * roots (one, but for a root placed unopened and entered after another
 * took its view). A ring runs from its newest member, and a node is made
 * after its parent: a directory's entry comes before its parent's, the
 * root's last. */
static bool add_view_entries(struct ftree *t, struct sf_view *v, bool leaves, struct entries *e)
{
	for (struct view_root *r = t->views; r; r = r->next_entered) {
		struct view_node *x = &r->v;
		if (x->view != v)
			continue;
		do {
			x = x->ring_next;
			if (x->n.nlookup && (x->n.refs == 0) == leaves && !add_entry(e, &x->n))
				return false;
		} while (x != &r->v);
	}
	return true;
}

/* Lets view `v` go, its container gone, when no RELEASE will tell of its
 * last reader (no-open): the listing's entry drops it, and the kernel is
 * told to drop every entry it holds of the view, the leaves' first, so
 * that the entries a reader holds die with its last close (the kernel
 * drops an entry in use as soon as it is let go) and the rest at once.
 * The tree's lock is held over the view's nodes, not every node. */
static void let_whole_view_go(struct daemon *dm, struct sf_view *v)
{
	struct entries e = { 0 };
	pthread_mutex_lock(&dm->tree.lock);
	if (add_view_entries(&dm->tree, v, true, &e))
		add_view_entries(&dm->tree, v, false, &e);
	pthread_mutex_unlock(&dm->tree.lock);
	openviews_gone(&dm->views, v, e.dirs, e.names, e.k);
	free(e.dirs);
	free(e.names);
}

/* The views of a file gone from a directory (new references). */
struct found {
	const char *name;
	struct sf_view **v;
	size_t n, cap;
};

/* Adds view `v` when it stands for the file (its container's path ends
 * with the name), once. */
static void found_add(void *arg, struct sf_view *v)
{
	struct found *f = arg;
	const struct sf_map *m = sf_view_source(v);
	const char *base = m && m->path ? strrchr(m->path, '/') : NULL;
	if (!m || !m->path || strcmp(base ? base + 1 : m->path, f->name) != 0)
		return;
	for (size_t i = 0; i < f->n; i++)
		if (f->v[i] == v)
			return;
	if (sf_grow(&f->v, &f->cap, f->n, sizeof *f->v, 4) == 0)
		f->v[f->n++] = sf_view_ref(v);
}

void views_gone_in(void *arg, uint64_t dir, const char *name)
{
	struct daemon *dm = arg;
	struct found f = { .name = name };
	/* the views the directory's listing holds (their nodes may be
	 * forgotten already: the watch had the kernel drop the root's entry),
	 * and those the kernel holds nodes of (a listing made anew may have
	 * dropped the entry): the open views and the entered roots, not
	 * every node */
	openviews_each(&dm->views, dir, found_add, &f);
	pthread_mutex_lock(&dm->tree.lock);
	for (struct view_root *r = dm->tree.views; r; r = r->next_entered)
		if (fnode_ino(r->v.n.parent) == dir)
			found_add(&f, r->v.view);
	pthread_mutex_unlock(&dm->tree.lock);
	/* checked outside the lock: the source may be slow to answer */
	for (size_t i = 0; i < f.n; i++) {
		if (container_gone(dm, f.v[i]))
			let_whole_view_go(dm, f.v[i]);
		sf_view_unref(f.v[i]);
	}
	free(f.v);
}

/* Only the live files ask for FLUSH (noflush elsewhere): close() waits for
 * it, so a stat that follows in the same thread knows the handle is done. */
static void flush_live(struct daemon *dm, struct fnode *n, struct fuse_file_info *fi)
{
	meta_closed(n, (struct meta_handle *)(uintptr_t)fi->fh);
}

static void release_live(struct daemon *dm, struct fnode *n, struct fuse_file_info *fi)
{
	meta_release(n, (struct meta_handle *)(uintptr_t)fi->fh);
}

static void release_view(struct daemon *dm, struct fnode *n, struct fuse_file_info *fi)
{
	char pb[FNODE_PATH_MAX];
	if (view_of(n)->view &&
	    section_open(&dm->stats.sections, "release", node_path(n, pb), NULL, true) == 0) {
		/* a check, not a duty: skipped while the source holds every
		 * thread it may (a view of a container gone meanwhile then
		 * waits for a later release of one of its files) */
		let_gone_view_go(dm, n);
		section_end(dm);
	}
}

/* What a file's requests do, by its node's kind; NULL: nothing to do
 * (open: a plain open of content that never changes; read: EISDIR, the
 * kernel sends no READ for what is not a file; small: not pushed). */
static const struct file_kind {
	void (*open)(fuse_req_t req, struct fnode *n, struct fuse_file_info *fi);
	void (*read)(fuse_req_t req, struct fnode *n, size_t size, off_t off,
		     struct fuse_file_info *fi);
	bool (*small)(struct daemon *dm, struct fnode *n, struct sf_readv *rv);
	void (*flush)(struct daemon *dm, struct fnode *n, struct fuse_file_info *fi);
	void (*release)(struct daemon *dm, struct fnode *n, struct fuse_file_info *fi);
} file_kinds[FK_KINDS] = {
	[FK_SRC_FILE] = { .open = open_src, .read = read_src_file, .small = small_src },
	[FK_VIEW] = { .read = read_view_file, .small = small_view, .release = release_view },
	[FK_META_FILE] = { .open = open_live, .read = read_live, .flush = flush_live,
			   .release = release_live },
};

static const struct file_kind *file_kind(const struct fnode *n)
{
	return &file_kinds[fnode_kind(n)];
}

int push_file(struct daemon *dm, struct fnode *n, bool in_request)
{
	if (atomic_exchange(&n->pushed, true))
		return 0;
	char pb[FNODE_PATH_MAX];
	section_begin_must(dm, "read", node_path(n, pb));
	struct sf_readv rv = { 0 };
	struct sf_err e;
	uint8_t *copy = NULL;
	int rc = -EIO;
	if (file_kind(n)->small && file_kind(n)->small(dm, n, &rv))
		copy = malloc(rv.bytes);
	if (copy && in_request)
		hand_off_unless_resident(dm, &rv);
	/* libfuse copies the pieces in user space (a store is never spliced):
	 * copied here instead, through the kernel, so that a failing source
	 * page fails the push (the read that follows reports it), not the
	 * daemon */
	if (copy && sf_readv_copy(&rv, copy, &e) == 0) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(rv.bytes);
		bv.buf[0].mem = copy;
		rc = fuse_lowlevel_notify_store(dm->se, fnode_ino(n), 0, &bv, 0);
		if (rc == 0) {
			account(&dm->stats, &rv);
			stat_add(in_request ? &dm->stats.bytes_pushed
					    : &dm->stats.bytes_pushed_ahead,
				 rv.bytes);
		} else if (rc == -ENOENT) {
			/* not known to the kernel (yet): a later push may */
			atomic_store(&n->pushed, false);
		}
	}
	free(copy);
	sf_readv_release(&rv);
	sf_dcache_read_done();
	section_end(dm);
	return rc;
}

/* no-open: OPEN and FLUSH are answered ENOSYS, which stops them for the
 * whole mount. The kernel then opens every file by itself, keeping its page
 * cache, and sends no RELEASE (and there is no noflush to ask for); a SRC
 * file is mapped at its lookup instead, or past the budget at its first
 * READ (fs/src.c). */
static bool without_handles(fuse_req_t req)
{
	bool no = daemon_of(req)->no_open; /* req is gone once answered */
	if (no)
		fuse_reply_err(req, ENOSYS);
	return no;
}

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_OPEN);
	struct fnode *n = fn_of(req, ino);
	if (!without_handles(req))
		(file_kind(n)->open ? file_kind(n)->open : open_content)(req, n, fi);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi)
{
	count(req, REQ_READ);
	struct fnode *n = fn_of(req, ino);
	if (file_kind(n)->read)
		file_kind(n)->read(req, n, size, off, fi);
	else
		fuse_reply_err(req, EISDIR);
}

void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_FLUSH);
	struct fnode *n = fn_of(req, ino);
	if (without_handles(req))
		return;
	if (file_kind(n)->flush)
		file_kind(n)->flush(daemon_of(req), n, fi);
	fuse_reply_err(req, 0);
}

void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_RELEASE);
	struct fnode *n = fn_of(req, ino);
	if (file_kind(n)->release)
		file_kind(n)->release(daemon_of(req), n, fi);
	fuse_reply_err(req, 0);
}

void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	count(req, REQ_IOCTL);
	/* Python's open() asks isatty() of every file it opens: the kernel
	 * sends that to us, right after the OPEN, whatever we answer (ENOSYS
	 * too: fs/fuse/ioctl.c makes it ENOTTY for this call only). A small
	 * file's content goes with it, so the read that follows needs no
	 * READ. A store could wait for a READ that nothing is left to take
	 * (fs/transport/transport.h). */
	struct daemon *dm = daemon_of(req);
	if (dm->push_on_open && transport_may_store())
		push_file(dm, fn_of(req, ino), true);
	fuse_reply_err(req, ENOTTY);
}
