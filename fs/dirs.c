/* Directory snapshots: OPENDIR takes the names a handle lists (a SRC
 * directory's listing, or a view directory itself), READDIR and
 * READDIRPLUS answer from them, RELEASEDIR drops them. */
#include "dirs.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "attr.h"
#include "listing.h"
#include "transport.h"
#include "names.h"
#include "push.h"
#include "request.h"
#include "roots.h"
#include "vnode.h"
#include "watch.h"

/* A directory handle: the names it lists, taken when opened. Neither a
 * SRC directory's listing nor a populated view directory changes, so a
 * handle lists their entries in place, after the n entries here (".",
 * ".." and .shardfs/'s files): a listing (`l`, held), or the view directory
 * itself (`vdir`). A fold of millions of members, or a directory of
 * 100,000 containers, costs no copy of its names. */
struct dirsnap {
	size_t n;
	struct dent *e;
	struct listing *l;
	struct sf_node *vdir;
	struct sf_view *view; /* holds vdir */
	uint64_t pushed; /* what this listing queued to push ahead (fs/push.h) */
	bool attrs; /* its names get their attributes from now on (gives_attrs) */
	struct dirsnap *prev, *next; /* in dm->dirs_open, while a handle's */
};

void dirsnap_free(struct dirsnap *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->e[i].name);
	free(s->e);
	listing_unref(s->l);
	sf_view_unref(s->view);
	free(s);
}

static int snap_add(struct dirsnap *s, size_t *cap, const char *name, unsigned char type,
		    ino_t ino)
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
	return listing_get(dm, dir, &s->l);
}

static int snap_view(struct daemon *dm, struct fnode *dir, struct dirsnap *s, size_t *cap)
{
	if (!fnode_view_is(dir, SF_DIR))
		return -ENOTDIR;
	int rc = root_enter(dm, dir);
	if (rc)
		return rc;
	struct sf_err e = { { 0 } };
	struct view_node *v = view_of(dir);
	struct sf_node *vn = v->vn;
	bool listed = sf_dir_is_populated(vn);
	if (!listed)
		transport_hand_off();
	rc = sf_dir_ready(vn, &e);
	if (!listed && sf_dir_is_populated(vn))
		stat_add(&dm->stats.dirs_listed, 1);
	listing_report_warnings(dm, v->view);
	if (rc) {
		fnode_errlog(&dm->stats, dir, sf_err_msg(&e, rc));
		return -EIO;
	}
	s->vdir = vn;
	s->view = sf_view_ref(v->view);
	return 0;
}

/* A populated directory's entries never change, so they are read without
 * the view's turn. */
size_t dent_count(const struct dirsnap *s)
{
	return s->n + (s->l ? s->l->n : 0) + (s->vdir ? sf_dir_count(s->vdir) : 0);
}

struct dent dent_at(const struct dirsnap *s, size_t i, struct sf_dirent *vd)
{
	if (i < s->n)
		return s->e[i];
	if (s->l) {
		const struct lentry *e = &s->l->e[i - s->n];
		/* a view has no inode of its own until looked up: any unique
		 * non-zero number will do for readdir */
		ino_t ino = e->fmt ? (ino_t)(uintptr_t)e : e->ino;
		return (struct dent){ .name = e->name, .type = e->type, .ino = ino ? ino : 1 };
	}
	sf_dir_entry(s->vdir, i - s->n, vd);
	unsigned char t = vd->kind == SF_DIR ? DT_DIR : vd->kind == SF_LINK ? DT_LNK : DT_REG;
	return (struct dent){ .name = vd->hidden ? NULL : (char *)vd->name, .type = t,
			      .ino = (ino_t)(uintptr_t)vd->id, .vn = vd->node };
}

/* The root's .shardfs/ lists its two files by name only, readdirplus too:
 * their lookup takes the snapshot that reads serve. */
static int snap_meta(struct daemon *dm, struct fnode *dir, struct dirsnap *s, size_t *cap)
{
	int rc = snap_add(s, cap, "errors", DT_REG, fnode_ino(dir) + 1);
	return rc ? rc : snap_add(s, cap, "stats.json", DT_REG, fnode_ino(dir) + 2);
}

/* a SRC directory is listed from SRC */
static bool src_at_source(const struct fnode *dir)
{
	return true;
}

/* a view's directory it holds complete is snapshot from memory: no section
 * at the source, so that it opens while the source holds every thread the
 * pool gives it (as a lookup of a name it holds) */
static bool view_at_source(const struct fnode *dir)
{
	struct sf_node *vn = fnode_vn(dir);
	return fnode_view_is(dir, SF_DIR) && !(vn && sf_dir_is_complete(vn));
}

static struct fnode *plus_src(struct daemon *dm, struct fnode *dir, const struct dent *d,
			      struct listing **l, double *t)
{
	struct fnode *n = NULL;
	*t = SRC_TIMEOUT;
	return find_src(dm, dir, d->name, true, l, &n) ? NULL : n;
}

static struct fnode *plus_view(struct daemon *dm, struct fnode *dir, const struct dent *d,
			       struct listing **l, double *t)
{
	*t = VIEW_TIMEOUT;
	struct sf_err e = { { 0 } };
	struct sf_node *vn = d->vn;
	if (!vn) {
		/* an on-demand entry's node is made (and pinned) by the lookup,
		 * and a format's make may read the source: only that runs in a
		 * section, so that a listing of nodes already made (.shardfs/)
		 * answers while the source holds every thread it may (it was
		 * refused when a late RELEASE's check and a stuck OPENDIR held
		 * an io_uring queue's two). Refused, the entry goes by name. */
		char pb[FNODE_PATH_MAX];
		if (section_open(&dm->stats.sections, "readdir", node_path(dir, pb), NULL, true))
			return NULL;
		int rc = sf_dir_find(fnode_vn(dir), d->name, &vn, &e);
		section_end(dm);
		if (rc || !vn)
			return NULL;
	}
	fnode_find(&dm->tree);
	struct fnode *n = NULL;
	if (sf_node_kind(vn) != SF_FILE || sf_file_size(vn).known)
		n = fnode_for_view(&dm->tree, dir, vn);
	if (!d->vn)
		sf_node_unpin(vn);
	return fnode_found(&dm->tree, n);
}

/* What a directory's requests do, by its node's kind (no snap: not a
 * directory). */
static const struct dir_kind {
	/* the names a handle lists */
	int (*snap)(struct daemon *dm, struct fnode *dir, struct dirsnap *s, size_t *cap);
	/* whether snap makes system calls on SRC (NULL: never) */
	bool (*at_source)(const struct fnode *dir);
	/* readdirplus: an entry's node, looked up at the source, and its
	 * timeout (NULL: names only) */
	struct fnode *(*plus)(struct daemon *dm, struct fnode *dir, const struct dent *d,
			      struct listing **l, double *t);
	/* readdirplus looks every name up at the source: the whole reply is
	 * a section (else plus opens one where it must) */
	bool plus_at_source;
	/* its listed files are pushed ahead (fs/push.h) */
	bool push;
	/* --readdirplus small: every name of a listing of at most
	 * RDP_SMALL_MAX gets its attributes (gives_attrs) */
	bool attrs_when_small;
} dir_kinds[FK_KINDS] = {
	[FK_SRC_DIR] = { .snap = snap_src, .at_source = src_at_source, .plus = plus_src,
			 .plus_at_source = true },
	[FK_VIEW] = { .snap = snap_view, .at_source = view_at_source, .plus = plus_view,
		      .push = true, .attrs_when_small = true },
	[FK_META_DIR] = { .snap = snap_meta },
};

bool dir_at_source(const struct fnode *dir)
{
	const struct dir_kind *k = &dir_kinds[fnode_kind(dir)];
	return k->at_source && k->at_source(dir);
}

int dirsnap_take(struct daemon *dm, struct fnode *dir, struct dirsnap **out)
{
	const struct dir_kind *k = &dir_kinds[fnode_kind(dir)];
	*out = NULL;
	if (!k->snap)
		return -ENOTDIR;
	struct dirsnap *s = calloc(1, sizeof *s);
	size_t cap = 0;
	int rc = s ? 0 : -ENOMEM;
	if (rc == 0)
		rc = snap_add(s, &cap, ".", DT_DIR, dir->ino);
	if (rc == 0)
		rc = snap_add(s, &cap, "..", DT_DIR, 1);
	if (rc == 0)
		rc = k->snap(dm, dir, s, &cap);
	if (rc) {
		if (s)
			dirsnap_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

static void handle_link(struct daemon *dm, struct dirsnap *s)
{
	pthread_mutex_lock(&dm->dirs_lock);
	s->next = dm->dirs_open;
	if (s->next)
		s->next->prev = s;
	dm->dirs_open = s;
	pthread_mutex_unlock(&dm->dirs_lock);
}

/* Unlinks and frees a handle's snapshot. */
static void handle_drop(struct daemon *dm, struct dirsnap *s)
{
	pthread_mutex_lock(&dm->dirs_lock);
	*(s->prev ? &s->prev->next : &dm->dirs_open) = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&dm->dirs_lock);
	dirsnap_free(s);
}

void dirs_fini(struct daemon *dm)
{
	while (dm->dirs_open)
		handle_drop(dm, dm->dirs_open);
	pthread_mutex_destroy(&dm->dirs_lock);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_OPENDIR);
	struct fnode *n = fn_of(req, ino);
	bool src = dir_at_source(n);
	char pb[FNODE_PATH_MAX];
	if (src && !section_begin(req, "opendir", node_path(n, pb), NULL))
		return;
	struct dirsnap *s;
	int rc = dirsnap_take(daemon_of(req), n, &s);
	if (src)
		section_end(daemon_of(req));
	if (rc) {
		reply_src_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)s;
	fi->cache_readdir = in_view(n);
	fi->keep_cache = in_view(n);
	struct daemon *dm = daemon_of(req); /* req is gone once answered */
	handle_link(dm, s);
	/* a reply the kernel no longer takes gets no RELEASEDIR */
	if (fuse_reply_open(req, fi) != 0)
		handle_drop(dm, s);
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
struct fnode *plus_entry(struct daemon *dm, struct fnode *dir, const struct dent *d,
				struct listing **l, struct fuse_entry_param *ep)
{
	const struct dir_kind *k = &dir_kinds[fnode_kind(dir)];
	if (!k->plus || strcmp(d->name, ".") == 0 || strcmp(d->name, "..") == 0)
		return NULL;
	double t;
	struct fnode *n = k->plus(dm, dir, d, l, &t);
	if (!n)
		return NULL;
	ep->ino = fnode_ino(n);
	ep->generation = 1;
	ep->attr_timeout = t;
	ep->entry_timeout = t;
	fill_attr(dm, n, 0, false, &ep->attr); /* never a live .shardfs/ file */
	return n;
}

/* A reply that gives names their attributes in a directory where they are
 * worth it only if the listing's reader uses them (gives_attrs) makes
 * some of them probes: attributes with a timeout of 0, so that their use
 * comes to the daemon as a GETATTR (dir_mark_used), as a LOOKUP would.
 * The first name and one in RDP_PROBE_GAP after it, none a dot name
 * (`ls -l` does not stat those), so that a reader that uses only some
 * names of a batch still meets one: `ls -l` of a request's 400 names costs
 * 4 GETATTRs, not a LOOKUP for each name of the next request. */
#define RDP_PROBE_GAP 128

/* The entries of a handle from `off` that fit in `size`, as one reply: a
 * READDIRPLUS's (`plus`) with the names' attributes (`attrs`, some of them
 * probes with `probe`) or not. */
static void list_dir(fuse_req_t req, struct dirsnap *s, struct fnode *dir, size_t size, off_t off,
		     bool plus, bool attrs, bool probe)
{
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
	size_t used = 0, nheld = 0, since_probe = RDP_PROBE_GAP;
	struct listing *l = NULL;
	size_t total = dent_count(s);
	for (size_t i = (size_t)off; i < total; i++) {
		struct sf_dirent vd;
		struct dent dd = dent_at(s, i, &vd);
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
			struct fnode *n = attrs ? plus_entry(daemon_of(req), dir, d, &l, &ep) : NULL;
			if (n) {
				held[nheld++] = n;
				if (probe && since_probe >= RDP_PROBE_GAP && d->name[0] != '.') {
					ep.attr_timeout = 0;
					since_probe = 0;
				} else {
					since_probe++;
				}
			}
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
	/* queued before the reply: once it is written, the kernel may release
	 * the handle `s` */
	struct daemon *dm = daemon_of(req); /* req is gone once answered */
	if (dir_kinds[fnode_kind(dir)].push)
		push_listed(dm, held, nheld, &s->pushed);
	if (fuse_reply_buf(req, buf, used) != 0)
		for (size_t i = 0; i < nheld; i++)
			fnode_forget(&dm->tree, held[i], 1);
	free(buf);
	free(held);
}

/* Whether a READDIRPLUS request gives names their attributes, and whether
 * some of them are probes (*probe). With --readdirplus small (the
 * default), every request does in a view directory of at most
 * RDP_SMALL_MAX names, where a loader lists and then reads every file (an
 * attribute saves it a LOOKUP), while the kernel and the daemon then hold
 * a node per name, which a directory that size keeps small. A SRC
 * directory's name costs a stat, and a file's an open and a mapping at the
 * source (a lookup pins its version, fs/src.c): `ls` of 5,000 containers
 * made 12 system calls and 1.2 mappings a container. So a SRC directory,
 * and a larger view directory, gives them as the kernel's automatic choice
 * (--readdirplus auto) would: in a listing's first request, and in later
 * ones once names of the directory were used while it went on (`ls -l`
 * and `du` stat each batch of names before reading the next), which the
 * daemon sees as LOOKUPs and as the probes' GETATTRs; names-only walks
 * (`find`, `os.scandir`) make no node per name and stay 2-4 times as
 * fast. The kernel reads one handle's listing one request at a time. */
static bool gives_attrs(const struct daemon *dm, struct dirsnap *s, struct fnode *dir, off_t off,
			bool *probe)
{
	*probe = false;
	if (dm->readdirplus != RDP_SMALL ||
	    (dir_kinds[fnode_kind(dir)].attrs_when_small && dent_count(s) <= RDP_SMALL_MAX))
		return true;
	/* only uses while this listing goes on count */
	bool used = atomic_exchange_explicit(&dir->looked_in, false, memory_order_relaxed);
	s->attrs = s->attrs || (off != 0 && used);
	*probe = !s->attrs;
	return off == 0 || s->attrs;
}

/* One READDIR or READDIRPLUS reply from the handle's snapshot. */
static void reply_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi, bool plus)
{
	struct dirsnap *s = (struct dirsnap *)(uintptr_t)fi->fh;
	struct fnode *dir = fn_of(req, ino);
	struct daemon *dm = daemon_of(req); /* req is gone once answered */
	bool probe = false;
	bool attrs = plus && gives_attrs(dm, s, dir, off, &probe);
	/* names alone are read from memory */
	bool src = attrs && dir_kinds[fnode_kind(dir)].plus_at_source;
	char pb[FNODE_PATH_MAX];
	if (src && !section_begin(req, "readdir", node_path(dir, pb), NULL))
		return;
	list_dir(req, s, dir, size, off, plus, attrs, probe);
	if (src)
		section_end(dm);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	count(req, REQ_READDIR);
	reply_dir(req, ino, size, off, fi, false);
}

/* libfuse 3.14 asks for READDIRPLUS and READDIRPLUS_AUTO when this is set;
 * with --readdirplus auto, the kernel uses it for the first request of a
 * listing and for later ones only when names of the directory were used
 * in between (`ls -l`, `du`), and plain READDIR otherwise (names-only
 * walks); with small (the default) or always, for every request
 * (gives_attrs). */
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	count(req, REQ_READDIR);
	reply_dir(req, ino, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count(req, REQ_RELEASEDIR);
	/* the last hold of a listing or view closes their files */
	struct daemon *dm = daemon_of(req);
	char pb[FNODE_PATH_MAX];
	section_begin_must(dm, "releasedir", node_path(fn_of(req, ino), pb));
	handle_drop(dm, (struct dirsnap *)(uintptr_t)fi->fh);
	section_end(dm);
	fuse_reply_err(req, 0);
}
