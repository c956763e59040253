/* Reading a view file: parts through the host's cache, and a byte range
 * gathered as iovecs into mappings and buffers. */
#include "sf_read.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sf_bytes.h"
#include "sf_mapcheck.h"
#include "sf_map.h"
#include "sf_view_impl.h"

struct produce_call {
	const struct sf_part *part;
	struct sf_cache *cache;
	struct sf_buf **out;
};

static int run_produce(void *ctx, struct sf_err *e)
{
	struct produce_call *p = ctx;
	return p->part->produce(p->part, p->cache, p->out, e);
}

int sf_part_produce(const struct sf_part *p, struct sf_cache *c, struct sf_buf **out,
		    struct sf_err *e)
{
	*out = NULL;
	int rc = sf_checked_run(p->view, run_produce, &(struct produce_call){ p, c, out }, e);
	if (rc && *out) {
		/* produced, but the source changed meanwhile */
		sf_buf_unref(*out);
		*out = NULL;
	}
	return rc;
}

static int nocache_get(struct sf_cache *c, struct sf_part *p, struct sf_buf **out,
		       struct sf_err *e)
{
	return sf_part_produce(p, c, out, e);
}

struct sf_cache sf_nocache = { .get = nocache_get };

int sf_cache_charge(struct sf_cache *c, uint64_t bytes, const char *path, const char *what,
		    struct sf_err *e)
{
	return c->charge ? c->charge(c, bytes, path, what, e) : 0;
}

void sf_cache_uncharge(struct sf_cache *c, uint64_t bytes)
{
	if (c->uncharge)
		c->uncharge(c, bytes);
}

struct sf_buf *sf_cache_buf(struct sf_cache *c, size_t len)
{
	return c->buf ? c->buf(c, len) : sf_buf_new(len);
}

bool sf_cache_drop(struct sf_cache *c, struct sf_part *part, struct sf_part *past)
{
	return c->drop && c->drop(c, part, past);
}

bool sf_cache_keep(struct sf_cache *c, struct sf_part *part, struct sf_buf *buf)
{
	return c->keep && c->keep(c, part, buf);
}

void sf_cache_ahead(struct sf_cache *c, struct sf_part *next)
{
	if (c->ahead)
		c->ahead(c, next, false);
}

void sf_cache_after(struct sf_cache *c, struct sf_part *next)
{
	if (c->ahead)
		c->ahead(c, next, true);
}

void sf_cache_idle(struct sf_cache *c, struct sf_idle *i, bool keep)
{
	if (c->idle)
		c->idle(c, i, keep);
}

/* Takes b, p's decoded copy a cache gave, as *out once its size is p's. */
static int part_sized(struct sf_part *p, struct sf_buf *b, struct sf_buf **out, struct sf_err *e)
{
	uint64_t known = atomic_load(&p->size);
	if (known == SF_SIZE_UNKNOWN) {
		atomic_store(&p->size, b->len);
	} else if (known != b->len) {
		sf_buf_unref(b);
		return sf_fail(e, -EIO, "%s: %s: decoded to %zu bytes, expected %llu",
			       p->view ? p->view->path : "?", p->what, b->len,
			       (unsigned long long)known);
	}
	*out = b;
	return 0;
}

int sf_part_get(struct sf_cache *c, struct sf_part *p, struct sf_buf **out,
		struct sf_err *e)
{
	struct sf_buf *b = NULL;
	int rc = c->get(c, p, &b, e);
	return rc ? rc : part_sized(p, b, out, e);
}

/* sf_part_get of a copy the cache holds now only: -EAGAIN when it holds
 * none (sf_file_read_held). */
static int part_held(struct sf_cache *c, struct sf_part *p, struct sf_buf **out,
		     struct sf_err *e)
{
	struct sf_buf *b = NULL;
	return c->held && c->held(c, p, &b) ? part_sized(p, b, out, e) : -EAGAIN;
}

static int rv_push(struct sf_readv *rv, const void *p, size_t len, const struct sf_map *m)
{
	if (sf_grow(&rv->iov, &rv->cap, rv->n, sizeof *rv->iov, 8) ||
	    sf_grow(&rv->src, &rv->capsrc, rv->n, sizeof *rv->src, 8))
		return -ENOMEM;
	rv->src[rv->n] = m;
	rv->iov[rv->n].iov_base = (void *)p;
	rv->iov[rv->n].iov_len = len;
	rv->n++;
	rv->bytes += len;
	return 0;
}

static int rv_hold(struct sf_readv *rv, struct sf_buf *b)
{
	if (sf_grow(&rv->hold, &rv->caphold, rv->nhold, sizeof *rv->hold, 4)) {
		sf_buf_unref(b);
		return -ENOMEM;
	}
	rv->hold[rv->nhold++] = b;
	return 0;
}

static const uint8_t zeros[65536];

struct gen_call {
	const struct sf_ext *x;
	uint64_t off;
	uint8_t *out;
	size_t len;
	struct sf_cache *cache;
};

static int run_gen(void *ctx, struct sf_err *e)
{
	struct gen_call *g = ctx;
	return g->x->u.gen.fn(g->x->u.gen.arg, g->off, g->out, g->len, g->cache, e);
}

/* Appends [off, off+len) of extent x. */
static int read_ext(struct sf_node *f, const struct sf_ext *x, const struct sf_map *m,
		    uint64_t off, size_t len, struct sf_cache *c, bool held, struct sf_readv *rv,
		    struct sf_err *e)
{
	int rc;
	struct sf_buf *b;
	switch (x->kind) {
	case SF_EXT_MAP:
		rv->from_map += len;
		return rv_push(rv, x->u.map + off, len, m);
	case SF_EXT_BUF:
		rv->from_synth += len;
		return rv_push(rv, x->u.buf->data + x->off + off, len, NULL);
	case SF_EXT_PART:
		rc = (held ? part_held : sf_part_get)(c, x->u.part, &b, e);
		if (rc)
			return rc;
		if (!sf_range_ok(b->len, x->off + off, len)) {
			sf_buf_unref(b);
			return sf_fail(e, -EIO, "%s: %s: decoded part is shorter than the file says",
				       f->view->path, x->u.part->what);
		}
		if ((rc = rv_hold(rv, b)))
			return rc;
		rv->from_cache += len;
		return rv_push(rv, b->data + x->off + off, len, NULL);
	case SF_EXT_GEN:
		b = sf_buf_new(len);
		if (!b)
			return -ENOMEM;
		if ((rc = rv_hold(rv, b)))
			return rc;
		rc = sf_checked_run(f->view, run_gen, &(struct gen_call){ x, x->off + off, b->data, len, c }, e);
		if (rc)
			return rc;
		rv->from_synth += len;
		return rv_push(rv, b->data, len, NULL);
	case SF_EXT_ZERO:
		rv->from_synth += len;
		while (len) {
			size_t k = len < sizeof zeros ? len : sizeof zeros;
			if ((rc = rv_push(rv, zeros, k, NULL)))
				return rc;
			len -= k;
		}
		return 0;
	}
	return -EINVAL;
}

static int read_built(struct sf_node *f, uint64_t off, uint64_t len,
		      struct sf_cache *c, bool held, struct sf_readv *rv, struct sf_err *e)
{
	struct sf_file *fl = &f->u.file;
	if (fl->broken)
		return sf_fail(e, -EIO, "%s", fl->broken);
	/* a check of the mappings reads the source */
	if (held && atomic_load(&f->view->intact_at) != sf_map_changes())
		return -EAGAIN;
	/* a view whose source changed in place serves nothing more, not even
	 * parts decoded before the change */
	int changed = sf_view_failed_by_change(f->view, e);
	if (changed)
		return changed;
	if (off >= fl->size)
		return 0;
	if (len > fl->size - off)
		len = fl->size - off;
	/* first extent whose range contains off */
	size_t lo = 0, hi = fl->n;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (fl->start[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	/* the kernel's copy of a mapping, and its check, read the source; a
	 * rendering may: a held read stops before it takes anything */
	for (size_t i = lo; held && i < fl->n && fl->start[i] < off + len; i++)
		if (fl->ext[i].kind == SF_EXT_MAP || fl->ext[i].kind == SF_EXT_GEN)
			return -EAGAIN;
	if (!rv->view)
		rv->view = sf_view_ref(f->view);
	struct sf_map *m = NULL, *checked = NULL;
	bool from_start = off == 0;
	size_t i;
	for (i = lo; i < fl->n && len; i++) {
		const struct sf_ext *x = &fl->ext[i];
		uint64_t in = off - fl->start[i];
		uint64_t k = x->len - in < len ? x->len - in : len;
		int rc = 0;
		if (x->kind == SF_EXT_MAP) {
			/* served without being read here: the file is checked
			 * instead (once per read), as a page past its new end
			 * would be served as zeros */
			m = sf_view_map_at(f->view, x->u.map);
			if (m && m != checked && (rc = sf_map_check(m, e)))
				return rc;
			checked = m;
		}
		rc = read_ext(f, x, m, in, (size_t)k, c, held, rv, e);
		if (rc)
			return rc;
		off += k;
		len -= k;
	}
	/* a file read from its start, ending in a part while the file goes on
	 * in the next: that one is decoded ahead while the reader takes this
	 * one (a format names the parts after it as the reader goes on, as a
	 * compressed tar's pieces do, but the first part read names none) */
	if (from_start && i > lo && i < fl->n && fl->ext[i - 1].kind == SF_EXT_PART &&
	    fl->ext[i].kind == SF_EXT_PART)
		sf_cache_ahead(c, fl->ext[i].u.part);
	return 0;
}

/* Counted in `users` while it reads the extents of a file the cache may
 * drop them from (sf_view.c file_drop), and built again first when they
 * were dropped. A file with no idle entry was never kept there: its host
 * built it (sf_file_ready), and nothing drops its extents. */
int sf_file_read(struct sf_node *f, uint64_t off, uint64_t len,
		 struct sf_cache *c, struct sf_readv *rv, struct sf_err *e)
{
	struct sf_file_idle *k = atomic_load(&f->u.file.idle);
	if (!k)
		return read_built(f, off, len, c, false, rv, e);
	for (;;) {
		unsigned u = atomic_load(&k->users);
		if (u == SF_FILE_DROPPING) {
			sf_file_wait_drop(k);
			continue;
		}
		if (!atomic_compare_exchange_weak(&k->users, &u, u + 1))
			continue;
		if (atomic_load(&f->u.file.built))
			break;
		atomic_fetch_sub(&k->users, 1);
		int rc = sf_file_build(f, c, e);
		if (rc)
			return rc;
	}
	int rc = read_built(f, off, len, c, false, rv, e);
	atomic_fetch_sub(&k->users, 1);
	return rc;
}

int sf_file_read_held(struct sf_node *f, uint64_t off, uint64_t len,
		      struct sf_cache *c, struct sf_readv *rv, struct sf_err *e)
{
	/* extents that may be dropped are a mapping's (sparse members) */
	if (f->kind != SF_FILE || atomic_load(&f->u.file.idle) || !atomic_load(&f->u.file.built))
		return -EAGAIN;
	return read_built(f, off, len, c, true, rv, e);
}

int sf_stored_read(struct sf_view *v, const struct sf_stored *s, uint64_t off, uint64_t len,
		   struct sf_readv *rv, struct sf_err *e)
{
	int rc = sf_view_failed_by_change(v, e);
	if (rc)
		return rc;
	if (off >= s->size)
		return 0;
	if ((rc = sf_map_check(s->map, e)))
		return rc;
	if (!rv->view)
		rv->view = sf_view_ref(v);
	if (len > s->size - off)
		len = s->size - off;
	rv->from_map += len;
	return rv_push(rv, s->map->data + s->off + off, (size_t)len, s->map);
}

void sf_readv_release(struct sf_readv *rv)
{
	for (size_t i = 0; i < rv->nhold; i++)
		sf_buf_unref(rv->hold[i]);
	sf_view_unref(rv->view);
	free(rv->hold);
	free(rv->iov);
	free(rv->src);
	sf_recent_free(&rv->pre);
	memset(rv, 0, sizeof *rv);
}

/* Copies n bytes at src through a pipe: the kernel reads src, so a lost
 * mapped page is EFAULT. For where process_vm_readv is forbidden (a
 * sandbox). */
static int copy_by_pipe(uint8_t *dst, const uint8_t *src, size_t n)
{
	int fd[2];
	if (pipe2(fd, O_CLOEXEC) < 0)
		return -errno;
	int rc = 0;
	while (n && !rc) {
		ssize_t put = write(fd[1], src, n < 65536 ? n : 65536);
		if (put < 0) {
			rc = errno == EINTR ? 0 : -EIO;
			continue;
		}
		for (ssize_t got, have = 0; have < put && !rc; have += got) {
			got = read(fd[0], dst + have, (size_t)(put - have));
			if (got <= 0) {
				rc = got < 0 && errno == EINTR ? 0 : -EIO;
				got = 0;
			}
		}
		src += put;
		dst += put;
		n -= (size_t)put;
	}
	close(fd[0]);
	close(fd[1]);
	return rc;
}

/* Copies n pieces that lie in no known mapping through the kernel: a
 * mapped page that cannot be read (the source file shrank under its
 * mapping, its storage fails) is then -EIO instead of a SIGBUS. */
static int copy_by_kernel(uint8_t *dst, const struct iovec *iov, size_t n)
{
	size_t want = 0;
	for (size_t i = 0; i < n; i++)
		want += iov[i].iov_len;
	struct iovec to = { dst, want };
	ssize_t got = process_vm_readv(getpid(), &to, 1, iov, n, 0);
	if (got < 0 && (errno == ENOSYS || errno == EPERM)) {
		for (size_t i = 0; i < n; dst += iov[i++].iov_len)
			if (copy_by_pipe(dst, iov[i].iov_base, iov[i].iov_len))
				return -EIO;
		return 0;
	}
	return got < 0 || (size_t)got != want ? -EIO : 0;
}

/* Copies a piece of mapping m from its file: the page cache serves it
 * without this process's page tables (no fault, nothing pinned), and a
 * file that ends early is -EIO. */
static int copy_from_file(uint8_t *dst, const struct sf_map *m, const struct iovec *piece)
{
	uint64_t off = sf_map_off(m, piece->iov_base);
	for (size_t have = 0, len = piece->iov_len; have < len;) {
		ssize_t got = pread(m->fd, dst + have, len - have, (off_t)(off + have));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -EIO;
		have += (size_t)got;
	}
	return 0;
}

/* Copies the bytes of `n` pieces to dst: from the lookup's copy (pre) or
 * their files where their mapping is known (src), through the kernel
 * otherwise. */
static int copy_pieces(uint8_t *dst, const struct iovec *iov, const struct sf_map *const *src,
		       size_t n, const struct sf_recent *pre)
{
	for (size_t i = 0; i < n;) {
		if (src && src[i]) {
			if (!sf_recent_copy(pre, src[i], sf_map_off(src[i], iov[i].iov_base),
					    iov[i].iov_len, dst) &&
			    copy_from_file(dst, src[i], &iov[i]))
				return -EIO;
			dst += iov[i++].iov_len;
			continue;
		}
		size_t k = 0, want = 0;
		while (i + k < n && k < IOV_MAX && !(src && src[i + k]))
			want += iov[i + k++].iov_len;
		if (copy_by_kernel(dst, iov + i, k))
			return -EIO;
		dst += want;
		i += k;
	}
	return 0;
}

int sf_readv_copy(const struct sf_readv *rv, void *dst, struct sf_err *e)
{
	if (copy_pieces(dst, rv->iov, rv->src, rv->n, &rv->pre) == 0)
		return 0;
	return sf_fail(e, -EIO, "%s: reading a source file failed (truncated or its storage fails)",
		       rv->view ? rv->view->path : "?");
}

int sf_readv_fit(struct sf_readv *rv, size_t max)
{
	if (rv->n <= max)
		return 0;
	if (max < 2)
		return -EINVAL;
	/* Pieces of at least `big` bytes stay; each run of shorter ones between
	 * them becomes one. There are at most bytes/big long pieces, so at most
	 * 2*bytes/big + 1 pieces are left: `big` is chosen to make that max. */
	uint64_t big = 2 * rv->bytes / (max - 1) + 1;
	size_t small = 0;
	for (size_t i = 0; i < rv->n; i++)
		if (rv->iov[i].iov_len < big)
			small += rv->iov[i].iov_len;
	struct sf_buf *bounce = sf_buf_new(small);
	if (!bounce)
		return -ENOMEM;
	int rc = rv_hold(rv, bounce);
	if (rc)
		return rc;
	uint8_t *at = bounce->data;
	size_t out = 0;
	for (size_t i = 0; i < rv->n;) {
		if (rv->iov[i].iov_len >= big) {
			if (rv->src)
				rv->src[out] = rv->src[i];
			rv->iov[out++] = rv->iov[i++];
			continue;
		}
		size_t j = i, len = 0;
		while (j < rv->n && rv->iov[j].iov_len < big)
			len += rv->iov[j++].iov_len;
		if ((rc = copy_pieces(at, rv->iov + i, rv->src ? rv->src + i : NULL, j - i, &rv->pre)))
			return rc;
		if (rv->src)
			rv->src[out] = NULL;
		rv->iov[out++] = (struct iovec){ at, len };
		at += len;
		i = j;
	}
	rv->n = out;
	return 0;
}
