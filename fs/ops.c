/* The FUSE request handlers (libfuse3 low-level API). They translate
 * between the kernel's inodes and our fnodes, SRC entries and view nodes;
 * the bytes themselves come from mappings and the views' extents. */
#include "ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "attr.h"
#include "access.h"
#include "daemon.h"
#include "fnode.h"
#include "listing.h"
#include "names.h"
#include "loop.h"
#include "sf_fault.h"
#include "sf_map.h"
#include "sf_read.h"
#include "src.h"
#include "stats.h"
#include "uring.h"
#include "watch.h"
#include "request.h"

/* An open pins the version its inode stands for: a SRC file is mapped here
 * (a view holds its container's mapping already), so a handle keeps reading
 * the bytes it opened even when the file is replaced in SRC before its first
 * read. When the version is already gone, ESTALE makes the kernel look the
 * name up again and retry the open once, which then finds the new version.
 * Content never changes under an inode, so the kernel keeps its page cache
 * across opens; files keep no per-open state (RELEASE and FLUSH have no
 * handler). Answering costs one round trip per open (docs/performance.md). */
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_OPEN);
	struct fnode *n = fn_of(req, ino);
	int rc = n->kind == FK_SRC_FILE ? src_map_file(daemon_of(req), n) : 0;
	if (rc) {
		reply_src_err(req, -rc);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
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
				loop_hand_off();
				return;
			}
			for (size_t k = 0; k < (len + page - 1) / page; k++)
				if (!(vec[k] & 1)) {
					loop_hand_off();
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
static void reply_readv(fuse_req_t req, struct sf_readv *rv, const char *path)
{
	struct daemon *dm = daemon_of(req);
	hand_off_unless_resident(dm, rv);
	int rc = sf_readv_fit(rv, IOV_MAX - 1);
	if (rc) {
		errlog_add(&dm->stats, path,
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
		errlog_add(&dm->stats, path,
			   "reading the source failed (truncated or its storage fails)");
	else if (rc && rc != -ENOENT)
		errlog_add(&dm->stats, path, "the answer could not be written to /dev/fuse");
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	count(req, REQ_READ);
	struct daemon *dm = daemon_of(req);
	struct fnode *n = fn_of(req, ino);
	struct sf_readv rv = { 0 };
	if (n->kind == FK_SRC_FILE) {
		int rc = src_read(dm, n, (uint64_t)off, size, &rv);
		if (rc)
			reply_src_err(req, -rc);
		else
			reply_readv(req, &rv, n->rel);
		sf_readv_release(&rv);
		return;
	}
	if (n->kind == FK_META_FILE) {
		pthread_mutex_lock(&n->map_lock);
		struct sf_buf *b = n->snap ? sf_buf_ref(n->snap) : NULL;
		pthread_mutex_unlock(&n->map_lock);
		if (!b) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		uint64_t len = (uint64_t)off >= b->len ? 0 : b->len - (uint64_t)off;
		if (len > size)
			len = size;
		fuse_reply_buf(req, len ? (const char *)b->data + off : NULL, len);
		sf_buf_unref(b);
		return;
	}
	if (n->kind != FK_VIEW || sf_node_kind(n->vn) != SF_FILE) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (view_file_ready(dm, n)) {
		fuse_reply_err(req, EIO);
		return;
	}
	struct sf_err e = { { 0 } };
	int rc = sf_file_read(n->vn, (uint64_t)off, size, dm->view_cache, &rv, &e);
	if (rc) {
		errlog_add(&dm->stats, n->vpath, sf_err_msg(&e, rc));
		fuse_reply_err(req, rc == -ENOMEM ? ENOMEM : EIO);
	} else {
		reply_readv(req, &rv, n->vpath);
	}
	sf_readv_release(&rv);
	dcache_read_done();
}

/* Python's open() asks isatty() of every file it opens, and the kernel sends
 * that to us as an IOCTL, right after the OPEN. The content of a small file
 * is pushed into the kernel's page cache then (FUSE_NOTIFY_STORE), so the
 * read that follows needs no READ round trip. Once per node: pages the
 * kernel drops later come back through READ. The store waits for any page a READ of the same file has locked, so
 * with a single request thread (which could be the one owing that READ) it
 * is not done. */
#define PUSH_MAX (128 * 1024)

/* The whole content of a small file as pieces; false when the file is not
 * a small regular file or its content fails (the read that follows reports
 * the failure). */
static bool small_content(struct daemon *dm, struct fnode *n, struct sf_readv *rv)
{
	if (n->kind == FK_SRC_FILE)
		return n->st.st_size > 0 && n->st.st_size <= PUSH_MAX &&
		       src_read(dm, n, 0, PUSH_MAX, rv) == 0 && rv->n > 0;
	if (n->kind != FK_VIEW || sf_node_kind(n->vn) != SF_FILE || view_file_ready(dm, n))
		return false;
	uint64_t size = sf_file_size(n->vn).size;
	struct sf_err e = { { 0 } };
	return size > 0 && size <= PUSH_MAX &&
	       sf_file_read(n->vn, 0, size, dm->view_cache, rv, &e) == 0 && rv->n > 0;
}

static void push_small(struct daemon *dm, fuse_ino_t ino, struct fnode *n)
{
	/* over io_uring a READ is cheap, and a store could wait for one
	 * that no entry is left to take (fs/uring.h) */
	if (!dm->push_on_open || uring_serving() || atomic_exchange(&n->pushed, true))
		return;
	struct sf_readv rv = { 0 };
	struct sf_err e;
	uint8_t *copy = NULL;
	if (small_content(dm, n, &rv))
		copy = malloc(rv.bytes);
	if (copy)
		hand_off_unless_resident(dm, &rv);
	/* libfuse copies the pieces in user space (a store is never spliced):
	 * copied here instead, guarded, so that a failing source page fails
	 * the push (the read that follows reports it), not the daemon */
	if (copy && sf_guard_copy(&rv, copy, &e) == 0) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(rv.bytes);
		bv.buf[0].mem = copy;
		if (fuse_lowlevel_notify_store(dm->se, ino, 0, &bv, 0) == 0) {
			account(&dm->stats, &rv);
			stat_add(&dm->stats.bytes_pushed, rv.bytes);
		}
	}
	free(copy);
	sf_readv_release(&rv);
	dcache_read_done();
}

static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	count(req, REQ_IOCTL);
	push_small(daemon_of(req), ino, fn_of(req, ino));
	fuse_reply_err(req, ENOTTY);
}

/* A directory handle: the names it lists, taken when opened. A view
 * directory's entries do not change once it is populated, so its handle
 * lists them from the directory itself (`vdir`, after the n entries here):
 * a fold of millions of members costs no copy of its names. */
struct dirsnap {
	size_t n;
	struct dent {
		char *name;
		unsigned char type;
		ino_t ino;
		struct sf_node *vn; /* in a view: the node listed, if made */
	} *e;
	struct sf_node *vdir;
	struct sf_view *view; /* holds vdir */
};

static void snap_free(struct dirsnap *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->e[i].name);
	free(s->e);
	sf_view_unref(s->view);
	free(s);
}

static int snap_add(struct dirsnap *s, size_t *cap, const char *name, unsigned char type, ino_t ino)
{
	if (sf_grow(&s->e, cap, s->n, sizeof *s->e, 16))
		return -ENOMEM;
	if (!(s->e[s->n].name = strdup(name)))
		return -ENOMEM;
	s->e[s->n].type = type;
	s->e[s->n].ino = ino;
	s->e[s->n].vn = NULL;
	s->n++;
	return 0;
}

static int snap_src(struct daemon *dm, struct fnode *dir, struct dirsnap *s, size_t *cap)
{
	watch_dir(&dm->watch, dir);
	struct listing *l = NULL;
	int rc = listing_get(dm, dir, &l);
	for (size_t i = 0; rc == 0 && i < l->n; i++) {
		const struct lentry *e = &l->e[i];
		/* a view has no inode of its own until looked up: any unique
		 * non-zero number will do for readdir */
		ino_t ino = e->fmt ? (ino_t)(uintptr_t)e : e->st.st_ino;
		rc = snap_add(s, cap, e->name, e->type, ino ? ino : 1);
	}
	listing_unref(l);
	return rc;
}

static int snap_view(struct daemon *dm, struct fnode *dir, struct dirsnap *s)
{
	struct sf_err e = { { 0 } };
	struct sf_node *vn = dir->vn;
	if (!sf_dir_is_populated(vn))
		loop_hand_off();
	int rc = sf_dir_ready(vn, &e);
	listing_report_warnings(dm, dir->view);
	if (rc) {
		errlog_add(&dm->stats, dir->vpath, sf_err_msg(&e, rc));
		return -EIO;
	}
	s->vdir = vn;
	s->view = sf_view_ref(dir->view);
	return 0;
}

/* Entry i of a handle (0 <= i < dent_count), its name borrowed; a hidden
 * view entry has a NULL name, to be skipped. A populated directory's
 * entries never change, so they are read without the view's lock. */
static size_t dent_count(const struct dirsnap *s)
{
	return s->n + (s->vdir ? sf_dir_count(s->vdir) : 0);
}

static struct dent dent_at(const struct dirsnap *s, size_t i)
{
	if (i < s->n)
		return s->e[i];
	struct sf_dirent d;
	sf_dir_entry(s->vdir, i - s->n, &d);
	unsigned char t = d.kind == SF_DIR ? DT_DIR : d.kind == SF_LINK ? DT_LNK : DT_REG;
	return (struct dent){ .name = d.hidden ? NULL : (char *)d.name, .type = t,
			      .ino = (ino_t)(uintptr_t)d.id, .vn = d.node };
}

/* The root's .shardfs/ lists its two files by name only, readdirplus too:
 * their lookup takes the snapshot that reads serve. */
static int snap_meta(struct fnode *dir, struct dirsnap *s, size_t *cap)
{
	int rc = snap_add(s, cap, "errors", DT_REG, fnode_ino(dir) + 1);
	return rc ? rc : snap_add(s, cap, "stats.json", DT_REG, fnode_ino(dir) + 2);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_OPENDIR);
	struct fnode *n = fn_of(req, ino);
	struct dirsnap *s = calloc(1, sizeof *s);
	size_t cap = 0;
	int rc = s ? 0 : -ENOMEM;
	if (rc == 0)
		rc = snap_add(s, &cap, ".", DT_DIR, fnode_ino(n));
	if (rc == 0)
		rc = snap_add(s, &cap, "..", DT_DIR, 1);
	if (rc == 0) {
		if (n->kind == FK_SRC_DIR)
			rc = snap_src(daemon_of(req), n, s, &cap);
		else if (n->kind == FK_VIEW && sf_node_kind(n->vn) == SF_DIR)
			rc = snap_view(daemon_of(req), n, s);
		else if (n->kind == FK_META_DIR)
			rc = snap_meta(n, s, &cap);
		else
			rc = -ENOTDIR;
	}
	if (rc) {
		if (s)
			snap_free(s);
		reply_src_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)s;
	fi->cache_readdir = in_view(n);
	fi->keep_cache = in_view(n);
	fuse_reply_open(req, fi);
}

/* A readdirplus entry as a lookup of its name would answer it, with the
 * lookup reference a LOOKUP reply takes (the kernel counts every entry but
 * "." and ".." of a readdirplus reply). NULL leaves ep->ino 0: the kernel
 * then only lists the name and sends a LOOKUP when the entry is used, as
 * after a plain readdir (fuse_direntplus_link ignores a zero nodeid).
 *
 * A view file whose size is not known before its content is built (a text
 * rendering, a part of unknown size, any build that is not declared cheap
 * with sf_file_set_build_sized) goes that way too: listing a directory must
 * never decode. Files already built, and those whose format announced their
 * size (taridx members), get their attributes here. */
static struct fnode *plus_entry(struct daemon *dm, struct fnode *dir, const struct dent *d,
				struct listing **l, struct fuse_entry_param *ep)
{
	if (strcmp(d->name, ".") == 0 || strcmp(d->name, "..") == 0)
		return NULL;
	struct fnode *n = NULL;
	double t = VIEW_TIMEOUT;
	if (dir->kind == FK_SRC_DIR) {
		if (find_src(dm, dir, d->name, true, l, &n))
			return NULL;
		t = SRC_TIMEOUT;
	} else if (dir->kind == FK_VIEW) {
		/* an on-demand entry's node is made (and pinned) by the lookup */
		struct sf_err e = { { 0 } };
		struct sf_node *vn = d->vn;
		if (!vn && (sf_dir_find(dir->vn, d->name, &vn, &e) || !vn))
			return NULL;
		fnode_find(&dm->tree);
		if (sf_node_kind(vn) != SF_FILE || sf_file_size(vn).known)
			n = fnode_for_view(&dm->tree, dir, vn, NULL);
		if (!d->vn)
			sf_node_unpin(vn);
		n = fnode_found(&dm->tree, n);
	}
	if (!n)
		return NULL;
	ep->ino = fnode_ino(n);
	ep->generation = 1;
	ep->attr_timeout = t;
	ep->entry_timeout = t;
	fill_attr(dm, n, &ep->attr);
	return n;
}

/* One READDIR or READDIRPLUS reply from the handle's snapshot. */
static void reply_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi, bool plus)
{
	struct dirsnap *s = (struct dirsnap *)(uintptr_t)fi->fh;
	struct fnode *dir = fn_of(req, ino);
	char *buf = malloc(size);
	/* the nodes this reply gives the kernel a reference on; an entry
	 * takes at least FUSE_NAME_OFFSET_DIRENTPLUS (152) bytes */
	struct fnode **held = plus ? malloc((size / 128 + 1) * sizeof *held) : NULL;
	if (!buf || (plus && !held)) {
		free(buf);
		free(held);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0, nheld = 0;
	struct listing *l = NULL;
	size_t total = dent_count(s);
	for (size_t i = (size_t)off; i < total; i++) {
		struct dent dd = dent_at(s, i);
		const struct dent *d = &dd;
		if (!d->name)
			continue;
		/* sized first: an entry that does not fit is left for the
		 * next request, without a reference */
		size_t k = plus ? fuse_add_direntry_plus(req, NULL, 0, d->name, NULL, 0)
				: fuse_add_direntry(req, NULL, 0, d->name, NULL, 0);
		if (k > size - used)
			break;
		if (plus) {
			struct fuse_entry_param ep = { 0 };
			ep.attr.st_ino = d->ino;
			ep.attr.st_mode = (mode_t)d->type << 12;
			struct fnode *n = plus_entry(daemon_of(req), dir, d, &l, &ep);
			if (n)
				held[nheld++] = n;
			fuse_add_direntry_plus(req, buf + used, size - used, d->name, &ep,
					       (off_t)(i + 1));
		} else {
			struct stat st = { .st_ino = d->ino, .st_mode = (mode_t)d->type << 12 };
			fuse_add_direntry(req, buf + used, size - used, d->name, &st,
					  (off_t)(i + 1));
		}
		used += k;
	}
	listing_unref(l);
	if (fuse_reply_buf(req, buf, used) != 0)
		for (size_t i = 0; i < nheld; i++)
			fnode_forget(&daemon_of(req)->tree, held[i], 1);
	free(buf);
	free(held);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	count(req, REQ_READDIR);
	reply_dir(req, ino, size, off, fi, false);
}

/* libfuse 3.14 asks for READDIRPLUS and READDIRPLUS_AUTO when this is set:
 * the kernel uses it for the first request of a listing and for later ones
 * only when names of the directory were looked up in between (`ls -l`,
 * `du`), and plain READDIR otherwise (names-only walks). */
static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	count(req, REQ_READDIR);
	reply_dir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_RELEASEDIR);
	snap_free((struct dirsnap *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	count(req, REQ_GETXATTR);
	/* ENOSYS tells the kernel never to ask again */
	fuse_reply_err(req, ENOSYS);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	count(req, REQ_LISTXATTR);
	fuse_reply_err(req, ENOSYS);
}

/* Every call that would change anything. */
static void refuse(fuse_req_t req)
{
	count(req, REQ_WRITE_LIKE);
	fuse_reply_err(req, EROFS);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	refuse(req);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	refuse(req);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	refuse(req);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	refuse(req);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	refuse(req);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	refuse(req);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	refuse(req);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	refuse(req);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	refuse(req);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	refuse(req);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	refuse(req);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* large reads and readahead cut per-request overhead on big parts */
	conn->max_readahead = 1 << 20;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

const struct fuse_lowlevel_ops shardfs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.open = op_open,
	.read = op_read,
	.ioctl = op_ioctl,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.write = op_write,
	.setxattr = op_setxattr,
	.removexattr = op_unlink,
	.create = op_create,
	.fallocate = op_fallocate,
};

