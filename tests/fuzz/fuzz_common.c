/* The shared fuzz harness: see fuzz_common.h. */
#include "fuzz_common.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sf_map.h"
#include "sf_read.h"
#include "sf_view_impl.h"

/* ---- the private directory ------------------------------------------- */

static char dir[64];

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st, (void)type, (void)ftw;
	remove(path);
	return 0;
}

static void remove_dir(void)
{
	if (dir[0])
		nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_dir(void)
{
	if (!dir[0]) {
		strcpy(dir, "/tmp/shardfs-fuzz.XXXXXX");
		if (!mkdtemp(dir))
			abort();
		atexit(remove_dir);
	}
	return dir;
}

void fuzz_mkdirs(const char *rel)
{
	char path[512];
	int n = snprintf(path, sizeof path, "%s/%s", fuzz_dir(), rel);
	if (n < 0 || (size_t)n >= sizeof path)
		abort();
	for (char *p = path + strlen(dir) + 1;; p++) {
		if (*p == '/' || !*p) {
			char c = *p;
			*p = 0;
			if (mkdir(path, 0700) && errno != EEXIST)
				abort();
			if (!c)
				break;
			*p = c;
		}
	}
}

void fuzz_put(const char *rel, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", fuzz_dir(), rel);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	if (n && fwrite(p, 1, n, f) != n)
		abort();
	if (fclose(f))
		abort();
}

/* ---- the per-walk memo cache ----------------------------------------- */

struct memo_slot {
	uint64_t id;          /* 0: empty (part ids start at 1) */
	struct sf_buf *buf;   /* on success */
	int rc;               /* on failure, with msg */
	char *msg;
};

struct memo {
	struct sf_cache base;
	struct memo_slot *slot;
	size_t cap, n;        /* cap: a power of two */
	uint64_t bytes;       /* held by kept buffers */
	uint64_t produced;    /* parts produced (statistics) */
};

static struct memo_slot *memo_find(struct memo *m, uint64_t id)
{
	if (!m->cap)
		return NULL;
	for (size_t i = (size_t)(id * 0x9E3779B97F4A7C15ull) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->slot[i].id == id || !m->slot[i].id)
			return &m->slot[i];
	}
}

static bool memo_grow(struct memo *m)
{
	size_t cap = m->cap ? m->cap * 2 : 64;
	struct memo_slot *old = m->slot;
	size_t oldcap = m->cap;
	m->slot = calloc(cap, sizeof *m->slot);
	if (!m->slot) {
		m->slot = old;
		return false;
	}
	m->cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].id)
			*memo_find(m, old[i].id) = old[i];
	free(old);
	return true;
}

static int memo_get(struct sf_cache *c, struct sf_part *p, struct sf_buf **out,
		    struct sf_err *e)
{
	struct memo *m = (struct memo *)c;
	struct memo_slot *s = memo_find(m, p->id);
	if (s && s->id) {
		if (s->rc)
			return sf_fail(e, s->rc, "%s", s->msg ? s->msg : "");
		*out = sf_buf_ref(s->buf);
		return 0;
	}
	/* producing may get other parts through this cache: no slot pointer
	 * is held across it */
	struct sf_buf *b = NULL;
	int rc = p->produce(p, c, &b, e);
	m->produced++;
	if (rc == 0 && m->bytes + b->len > FUZZ_MEMO_BYTES) {
		*out = b; /* over the cap: not kept */
		return 0;
	}
	if ((m->n + 1) * 2 > m->cap && !memo_grow(m)) {
		if (rc == 0)
			*out = b;
		return rc;
	}
	s = memo_find(m, p->id);
	s->id = p->id;
	if (rc) {
		s->rc = rc;
		s->msg = strdup(e->msg);
	} else {
		s->buf = sf_buf_ref(b);
		m->bytes += b->len;
		*out = b;
	}
	m->n++;
	return rc;
}

static void memo_free(struct memo *m)
{
	for (size_t i = 0; i < m->cap; i++) {
		if (m->slot[i].buf)
			sf_buf_unref(m->slot[i].buf);
		free(m->slot[i].msg);
	}
	free(m->slot);
	memset(m, 0, sizeof *m);
}

/* ---- walking and reading --------------------------------------------- */

struct walk {
	const struct fuzz_walk *opt;
	struct memo memo;
	size_t nodes, files;
	uint64_t bytes;       /* read so far */
	uint8_t scratch[64 << 10];
};

static bool spent(const struct walk *w)
{
	return w->nodes >= FUZZ_MAX_NODES || w->files >= FUZZ_MAX_FILES ||
	       w->bytes >= FUZZ_MAX_BYTES;
}

/* Copies every byte a read returned, so a bad extent is an ASan report. */
static void consume(struct walk *w, const struct sf_readv *rv)
{
	for (size_t i = 0; i < rv->n; i++) {
		const uint8_t *p = rv->iov[i].iov_base;
		for (size_t left = rv->iov[i].iov_len; left;) {
			size_t k = left < sizeof w->scratch ? left : sizeof w->scratch;
			memcpy(w->scratch, p, k);
			p += k;
			left -= k;
		}
	}
	w->bytes += rv->bytes;
}

static void read_range(struct walk *w, struct sf_node *n, uint64_t off, uint64_t len)
{
	uint64_t piece = w->opt->piece ? w->opt->piece : len;
	for (uint64_t end = off + len; off < end && w->bytes < FUZZ_MAX_BYTES; off += piece) {
		struct sf_readv rv = { 0 };
		struct sf_err e;
		uint64_t k = end - off < piece ? end - off : piece;
		if (sf_file_read(n, off, k, &w->memo.base, &rv, &e) == 0)
			consume(w, &rv);
		sf_readv_release(&rv);
	}
}

static void read_file(struct walk *w, struct sf_node *n)
{
	struct sf_err e;
	if (sf_file_ready(n, &w->memo.base, &e))
		return;
	w->files++;
	uint64_t size = n->u.file.size, budget = FUZZ_MAX_BYTES - w->bytes;
	if (budget > FUZZ_FILE_BYTES)
		budget = FUZZ_FILE_BYTES;
	if (size <= budget) {
		read_range(w, n, 0, size);
	} else {
		/* head and tail: the extents at both ends, not the middle */
		read_range(w, n, 0, budget / 2);
		read_range(w, n, size - budget / 2, budget / 2);
	}
}

static void walk_node(struct walk *w, struct sf_node *n, int depth)
{
	struct sf_err e;
	if (depth > FUZZ_MAX_DEPTH || spent(w))
		return;
	w->nodes++;
	if (n->kind == SF_DIR) {
		if (sf_dir_ready(n, &e))
			return;
		for (size_t i = 0; i < sf_dir_count(n) && !spent(w); i++) {
			struct sf_node *k = sf_dir_child(n, i, &e);
			if (k)
				walk_node(w, k, depth + 1);
		}
	} else if (n->kind == SF_FILE) {
		read_file(w, n);
	}
}

void fuzz_walk_view(struct sf_view *v, const struct fuzz_walk *opt)
{
	static const struct fuzz_walk defaults;
	struct walk *w = calloc(1, sizeof *w);
	if (!w)
		return;
	w->opt = opt ? opt : &defaults;
	w->memo.base.get = memo_get;
	/* lazy work handed no cache (populating) uses the view's, as under
	 * the daemon */
	struct sf_cache *was = v->cache;
	v->cache = &w->memo.base;
	for (size_t i = 0; i < w->opt->nlookups; i++) {
		struct sf_node *n = NULL;
		struct sf_err e;
		if (v->root->kind == SF_DIR &&
		    sf_dir_find(v->root, w->opt->lookups[i], &n, &e) == 0 && n)
			walk_node(w, n, 1);
	}
	walk_node(w, v->root, 0);
	v->cache = was;
	memo_free(&w->memo);
	/* a view may keep a charge against the cache it was read through (as
	 * the index built for an unindexed tar) and give it back when freed,
	 * after this: the walk's cache is freed at the next walk, when that
	 * view is gone */
	static struct walk *last;
	free(last);
	last = w;
}

int fuzz_open_walk(const char *rel, const struct fuzz_walk *w)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", fuzz_dir(), rel);
	struct sf_view *v = NULL;
	struct sf_err e;
	int rc = sf_open_path(path, NULL, &v, &e);
	if (rc == 0) {
		fuzz_walk_view(v, w);
		sf_view_unref(v);
	}
	return rc;
}

int fuzz_open_and_walk(const uint8_t *data, size_t size, const char *file_name,
		       const struct fuzz_walk *w)
{
	fuzz_put(file_name, data, size);
	return fuzz_open_walk(file_name, w);
}

int fuzz_open_map_and_walk(const struct sf_format *fmt, const uint8_t *data, size_t size,
			   const char *file_name, const struct fuzz_walk *w)
{
	/* a copy, so the map owns its bytes like a real mapping */
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, size);
	struct sf_map m = { .data = size ? copy : NULL, .size = size, .path = (char *)file_name };
	atomic_init(&m.refs, 2); /* never freed through unref: it lives on the stack */
	struct sf_open_args a = { .topfd = -1, .dirrel = ".", .dirpath = ".", .name = file_name,
				  .path = file_name, .map = &m };
	struct sf_view *v = NULL;
	struct sf_err e;
	int rc = sf_format_view(fmt, &a, &v, &e);
	if (rc == 0) {
		fuzz_walk_view(v, w);
		sf_view_unref(v);
	}
	free(copy);
	return rc;
}
