/* The view tree: nodes, directories and their name index, file contents,
 * views and their lazy work. */
#include "sf_view_impl.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_format.h"
#include "sf_mapcheck.h"
#include "sf_map.h"
#include "sf_name.h"

/* the cache key of every part: unique for the life of the process */
static _Atomic uint64_t next_part_id = 1;

/* ---- nodes ------------------------------------------------------------ */

static void lazy_free(struct sf_lazy *z);

/* Drops a file's extents and gives back what they were charged. */
static void file_free_ext(struct sf_node *f)
{
	struct sf_file *fl = &f->u.file;
	for (size_t i = 0; i < fl->n; i++)
		if (fl->ext[i].kind == SF_EXT_BUF)
			sf_buf_unref(fl->ext[i].u.buf);
	fl->n = 0;
	fl->size = 0;
	if (fl->charged) {
		free(fl->ext);
		free(fl->start);
		fl->ext = NULL;
		fl->start = NULL;
		fl->cap = 0;
		sf_cache_uncharge(f->view->cache, fl->charged);
		SF_PROGRESS_ADD(f->view->host.progress, file_bytes_held, -fl->charged);
		fl->charged = 0;
	}
}

/* Drops a file's extents (a failed build leaves none behind for the next
 * attempt to add to, a freed node none at all), out of the idle list
 * first, so that no drop of them runs meanwhile. */
static void file_clear(struct sf_node *f)
{
	struct sf_file_idle *k = atomic_load(&f->u.file.idle);
	if (k)
		sf_cache_idle(f->view->cache, &k->idle, false);
	file_free_ext(f);
}

/* The cache's drop of a built file's idle extents (sf_idle): only while no
 * read uses them, as a read holds no lock; its next read builds them
 * again (sf_file_read). sf_file_size shows the known size meanwhile. */
static bool file_drop(struct sf_idle *i)
{
	struct sf_file_idle *k = (struct sf_file_idle *)i;
	struct sf_file *fl = &k->f->u.file;
	unsigned none = 0;
	if (!atomic_compare_exchange_strong(&k->users, &none, SF_FILE_DROPPING))
		return false;
	bool built = atomic_load(&fl->built);
	if (built) {
		atomic_store(&fl->built, false);
		file_free_ext(k->f);
		SF_PROGRESS_ADD(k->f->view->host.progress, files_dropped, 1);
	}
	atomic_store(&k->users, 0);
	return built;
}

/* Keeps a file just built in the cache's idle list when its charged
 * extents can be made again; a file that cannot be kept (out of memory
 * for its entry) keeps them, as before there was a list. */
static void file_keep(struct sf_node *f)
{
	struct sf_file *fl = &f->u.file;
	if (!fl->charged || !fl->size_known || !fl->build)
		return;
	struct sf_file_idle *k = atomic_load(&fl->idle);
	if (!k) {
		if (!(k = calloc(1, sizeof *k)))
			return;
		k->idle.drop = file_drop;
		k->f = f;
		atomic_store(&fl->idle, k);
	}
	sf_cache_idle(f->view->cache, &k->idle, true);
}

void sf_file_wait_drop(struct sf_file_idle *k)
{
	while (k && atomic_load(&k->users) == SF_FILE_DROPPING)
		sched_yield();
}

/* Frees what one node holds, its directory's nodes already freed. */
static void node_release(struct sf_node *n)
{
	switch (n->kind) {
	case SF_DIR:
		free(n->u.dir.kids);
		sf_hash_free(&n->u.dir.index);
		lazy_free(n->u.dir.lazy);
		break;
	case SF_FILE:
		file_clear(n);
		free(n->u.file.ext);
		free(n->u.file.start);
		free(n->u.file.broken);
		free(atomic_load(&n->u.file.idle));
		break;
	case SF_LINK:
		free(n->u.target);
		break;
	}
	free(n->name);
	free(n);
}

/* Frees a subtree without recursing: a tar path of 32,000 levels is a
 * tree that deep, more than a thread's stack holds frames for. */
static void node_free(struct sf_node *top)
{
	struct sf_node *n = top;
	while (n) {
		/* down to a node with no nodes left, taking each from its parent */
		while (n->kind == SF_DIR && n->u.dir.n)
			n = n->u.dir.kids[--n->u.dir.n];
		struct sf_node *up = n == top ? NULL : n->parent;
		node_release(n);
		n = up;
	}
}

static struct sf_node *node_new(struct sf_view *v, enum sf_kind kind, const char *name)
{
	struct sf_node *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	n->kind = kind;
	n->view = v;
	if (kind == SF_DIR) {
		n->u.dir.populated = true;
		/* one made by lazy work may still be filled by it */
		n->u.dir.complete = !sf_turn_held(&v->turn);
	}
	else if (kind == SF_FILE)
		n->u.file.built = true;
	return n;
}

static uint64_t name_hash(const char *name)
{
	return XXH3_64bits(name, strlen(name));
}

static bool kid_named(const void *name, const void *kid)
{
	return strcmp(((const struct sf_node *)kid)->name, name) == 0;
}

/* Small directories are searched linearly; larger ones get a hash index. */
static struct sf_node *dir_get(struct sf_dir *d, const char *name)
{
	if (!d->index.n) {
		for (size_t i = 0; i < d->n; i++)
			if (strcmp(d->kids[i]->name, name) == 0)
				return d->kids[i];
		return NULL;
	}
	return sf_hash_get(&d->index, name_hash(name), kid_named, name);
}

/* Under the names lock: a find of a complete directory reads it there. */
static int dir_append(struct sf_node *dir, struct sf_node *kid)
{
	struct sf_dir *d = &dir->u.dir;
	int rc = 0;
	pthread_mutex_lock(&dir->view->names_lock);
	if (sf_grow(&d->kids, &d->cap, d->n, sizeof *d->kids, 8)) {
		rc = -ENOMEM;
		goto out;
	}
	d->kids[d->n++] = kid;
	kid->parent = dir;
	if (d->n < 16)
		goto out;
	/* the index holds every kid or none (then, after running out of
	 * memory, the linear search still works) */
	size_t from = d->index.n ? d->n - 1 : 0;
	for (size_t i = from; i < d->n; i++)
		if (sf_hash_put(&d->index, name_hash(d->kids[i]->name), d->kids[i])) {
			sf_hash_free(&d->index);
			break;
		}
out:
	pthread_mutex_unlock(&dir->view->names_lock);
	return rc;
}

/* ---- on-demand entries ------------------------------------------------ */

struct sf_lazy {
	sf_make_fn make;
	struct lazy_ent {
		uint32_t key, aux;
		uint32_t name;    /* offset in names */
		uint8_t kind;
	} *ent;
	size_t n, cap;
	char *names;
	size_t nlen, ncap;
	/* entries by name (4 bytes a slot: the names are at hand to compare) */
	struct sf_ids index;
	/* the nodes alive, by key */
	struct sf_hash live;
	/* entries the format names (sf_dir_set_counted): no ent, names, index */
	const struct sf_counted *counted;
};

static const char *ent_name(const struct sf_lazy *z, size_t i)
{
	return z->names + z->ent[i].name;
}

static void lazy_free(struct sf_lazy *z)
{
	if (!z)
		return;
	size_t pos = 0;
	struct sf_node *n;
	while ((n = sf_hash_next(&z->live, &pos)))
		node_free(n);
	sf_hash_free(&z->live);
	free(z->ent);
	free(z->names);
	sf_ids_free(&z->index);
	free(z);
}

static uint64_t key_hash(uint32_t key)
{
	return XXH3_64bits(&key, sizeof key);
}

static bool live_is(const void *key, const void *node)
{
	return key == node;
}

static bool key_is(const void *key, const void *node)
{
	return ((const struct sf_node *)node)->key == *(const uint32_t *)key;
}

static uint64_t ent_hash(const void *z, uint32_t i)
{
	return name_hash(ent_name(z, i));
}

struct ent_key {
	const struct sf_lazy *z;
	const char *name;
};

static bool ent_named(const void *key, uint32_t i)
{
	const struct ent_key *k = key;
	return strcmp(ent_name(k->z, i), k->name) == 0;
}

int sf_dir_set_lazy(struct sf_node *dir, sf_make_fn make)
{
	struct sf_lazy *z = calloc(1, sizeof *z);
	if (!z)
		return -ENOMEM;
	z->make = make;
	z->index = (struct sf_ids){ .hash_of = ent_hash, .ctx = z };
	dir->u.dir.lazy = z;
	return 0;
}

int sf_dir_set_counted(struct sf_node *dir, sf_make_fn make, const struct sf_counted *ops,
		       uint32_t n)
{
	/* one kind of entry: ids and keys are the entries' numbers */
	if (dir->u.dir.lazy || dir->u.dir.n || n == UINT32_MAX)
		return -EINVAL;
	int rc = sf_dir_set_lazy(dir, make);
	if (rc == 0) {
		dir->u.dir.lazy->counted = ops;
		dir->u.dir.lazy->n = n;
	}
	return rc;
}

/* What on-demand entry i is: its name (written to `own` when the format
 * names it), kind, key and aux. */
static const char *lazy_name(const struct sf_node *dir, size_t i, char own[SF_COUNTED_NAME])
{
	const struct sf_lazy *z = dir->u.dir.lazy;
	if (!z->counted)
		return ent_name(z, i);
	z->counted->name(dir, (uint32_t)i, own);
	return own;
}

static enum sf_kind lazy_kind(const struct sf_lazy *z, size_t i)
{
	return z->counted ? SF_FILE : (enum sf_kind)z->ent[i].kind;
}

static uint32_t lazy_key(const struct sf_lazy *z, size_t i)
{
	return z->counted ? (uint32_t)i : z->ent[i].key;
}

/* The on-demand entry of dir named `name`, or -1. */
static long lazy_find(const struct sf_node *dir, const char *name)
{
	struct sf_lazy *z = dir->u.dir.lazy;
	if (!z)
		return -1;
	if (z->counted)
		return z->counted->find(dir, name);
	struct ent_key k = { z, name };
	uint32_t *i = sf_ids_find(&z->index, name_hash(name), ent_named, &k);
	return i ? (long)*i : -1;
}

static int lazy_append(struct sf_lazy *z, const char *name, enum sf_kind kind, uint32_t key,
		       uint32_t aux)
{
	size_t len = strlen(name) + 1;
	if (z->n >= UINT32_MAX - 1 || z->nlen + len > UINT32_MAX)
		return -EOVERFLOW;
	/* the index may grow (asking the entries' hashes) before the entry is
	 * in: it is added last, when nothing else can fail */
	if (sf_grow(&z->ent, &z->cap, z->n, sizeof *z->ent, 64) ||
	    sf_grow(&z->names, &z->ncap, z->nlen + len - 1, 1, 1024) ||
	    sf_ids_put(&z->index, name_hash(name), (uint32_t)z->n))
		return -ENOMEM;
	memcpy(z->names + z->nlen, name, len);
	z->ent[z->n] = (struct lazy_ent){ .key = key, .aux = aux, .name = (uint32_t)z->nlen,
					  .kind = (uint8_t)kind };
	z->nlen += len;
	z->n++;
	return 0;
}

static struct sf_node *node_new(struct sf_view *v, enum sf_kind kind, const char *name);
static void work_end(struct sf_view *v, struct sf_node *dir);

/* The live node of a key, pinned, or NULL (names lock held). */
static struct sf_node *live_pinned(struct sf_lazy *z, uint32_t key)
{
	struct sf_node *n = sf_hash_get(&z->live, key_hash(key), key_is, &key);
	if (n)
		n->pins++;
	return n;
}

/* The live node of a key, or a new one (the view's turn held); pinned. A
 * make reads the container: it runs outside the names lock, and the turn
 * keeps it from racing another make. */
static int lazy_node(struct sf_node *dir, enum sf_kind kind, const char *name, uint32_t key,
		     uint32_t aux, struct sf_node **out, struct sf_err *e)
{
	struct sf_view *v = dir->view;
	struct sf_lazy *z = dir->u.dir.lazy;
	pthread_mutex_lock(&v->names_lock);
	struct sf_node *n = live_pinned(z, key);
	pthread_mutex_unlock(&v->names_lock);
	if (!n) {
		if (!(n = node_new(v, kind, name)))
			return sf_fail(e, -ENOMEM, "%s: out of memory", v->path);
		n->lazy = true;
		n->parent = dir;
		n->key = key;
		n->aux = aux;
		n->pins = 1;
		int rc = z->make(n, e);
		if (rc == 0) {
			pthread_mutex_lock(&v->names_lock);
			rc = sf_hash_put(&z->live, key_hash(key), n);
			pthread_mutex_unlock(&v->names_lock);
		}
		if (rc) {
			node_free(n);
			return e->msg[0] ? rc : sf_fail(e, rc, "%s: out of memory", v->path);
		}
	}
	*out = n;
	return 0;
}

int sf_dir_lazy_node(struct sf_node *dir, enum sf_kind kind, const char *name, uint32_t key,
		     uint32_t aux, struct sf_node **out, struct sf_err *e)
{
	return lazy_node(dir, kind, name, key, aux, out, e);
}

static int lazy_at(struct sf_node *dir, size_t i, struct sf_node **out, struct sf_err *e)
{
	const struct sf_lazy *z = dir->u.dir.lazy;
	char own[SF_COUNTED_NAME];
	return lazy_node(dir, lazy_kind(z, i), lazy_name(dir, i, own), lazy_key(z, i),
			 z->counted ? 0 : z->ent[i].aux, out, e);
}

/* Frees a lazy node nobody holds (names lock held). */
static void lazy_settle(struct sf_node *n)
{
	if (n->pins || atomic_load(&n->host))
		return;
	sf_hash_del(&n->parent->u.dir.lazy->live, key_hash(n->key), live_is, n);
	node_free(n);
}

void sf_node_unpin(struct sf_node *n)
{
	if (!n || !n->lazy)
		return;
	struct sf_view *v = n->view;
	pthread_mutex_lock(&v->names_lock);
	n->pins--;
	lazy_settle(n);
	pthread_mutex_unlock(&v->names_lock);
}

void sf_node_set_host(struct sf_node *n, void *host)
{
	if (!n->lazy) {
		atomic_store(&n->host, host);
		return;
	}
	struct sf_view *v = n->view;
	pthread_mutex_lock(&v->names_lock);
	atomic_store(&n->host, host);
	lazy_settle(n);
	pthread_mutex_unlock(&v->names_lock);
}

size_t sf_dir_count(const struct sf_node *dir)
{
	return dir->u.dir.n + (dir->u.dir.lazy ? dir->u.dir.lazy->n : 0);
}

void sf_dir_entry(const struct sf_node *dir, size_t i, struct sf_dirent *out)
{
	const struct sf_dir *d = &dir->u.dir;
	if (i < d->n) {
		struct sf_node *k = d->kids[i];
		*out = (struct sf_dirent){ .name = k->name, .kind = k->kind, .hidden = k->hidden,
					   .node = k, .id = k };
		return;
	}
	i -= d->n;
	const struct sf_lazy *z = d->lazy;
	/* a counted directory holds nothing else: its numbers are its ids */
	*out = (struct sf_dirent){ .kind = lazy_kind(z, i),
				   .id = z->counted ? (const void *)((uintptr_t)z + 1 + i)
						    : (const void *)&z->ent[i] };
	out->name = lazy_name(dir, i, out->own);
}

struct sf_node *sf_dir_child(struct sf_node *dir, size_t i, struct sf_err *e)
{
	if (i < dir->u.dir.n)
		return dir->u.dir.kids[i];
	struct sf_view *v = dir->view;
	struct sf_lazy *z = dir->u.dir.lazy;
	pthread_mutex_lock(&v->names_lock);
	struct sf_node *n = live_pinned(z, lazy_key(z, i - dir->u.dir.n));
	pthread_mutex_unlock(&v->names_lock);
	if (n)
		return n;
	sf_turn_take(&v->turn);
	if (lazy_at(dir, i - dir->u.dir.n, &n, e))
		n = NULL;
	work_end(v, NULL);
	return n;
}

/* The node or on-demand entry named `name` (the view's turn held); *out NULL
 * when there is none. */
static int dir_lookup(struct sf_node *dir, const char *name, struct sf_node **out,
		      struct sf_err *e)
{
	*out = dir_get(&dir->u.dir, name);
	long i = *out ? -1 : lazy_find(dir, name);
	return i >= 0 ? lazy_at(dir, (size_t)i, out, e) : 0;
}

static bool name_taken(struct sf_node *dir, const char *name,
		       bool (*taken)(struct sf_node *, const char *))
{
	if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return true;
	return dir_get(&dir->u.dir, name) || lazy_find(dir, name) >= 0 ||
	       (taken && taken(dir, name));
}

void sf_dir_unique(struct sf_node *dir, const char *name, char *out,
		   bool (*taken)(struct sf_node *dir, const char *name))
{
	if (!name_taken(dir, name, taken)) {
		strcpy(out, name);
		return;
	}
	for (unsigned long n = 1;; n++) {
		snprintf(out, SF_NAME_MAX + 16, "%s#%lu", name, n);
		if (!name_taken(dir, out, taken))
			return;
	}
}

struct sf_node *sf_dir_add_exact(struct sf_node *dir, enum sf_kind kind, const char *name)
{
	struct sf_node *n = node_new(dir->view, kind, name);
	if (!n)
		return NULL;
	if (dir_append(dir, n)) {
		node_free(n);
		return NULL;
	}
	return n;
}

/* The name a raw name gets in dir: escaped, cut, made unique. */
static void unique_name(struct sf_node *dir, const void *raw, size_t len,
			char uniq[SF_NAME_MAX + 16])
{
	char esc[SF_NAME_MAX + 1];
	sf_name_escape(raw, len, SF_NAME_MAX, esc);
	sf_dir_unique(dir, esc, uniq, NULL);
	if (strlen(uniq) > SF_NAME_MAX) {
		/* "#<n>" would pass the limit: number the cut form instead */
		sf_name_escape(raw, len, strlen(esc) - 1, esc);
		sf_dir_unique(dir, esc, uniq, NULL);
	}
}

static struct sf_node *add_named(struct sf_node *dir, enum sf_kind kind,
				 const void *raw, size_t len)
{
	char uniq[SF_NAME_MAX + 16];
	unique_name(dir, raw, len, uniq);
	return sf_dir_add_exact(dir, kind, uniq);
}

int sf_dir_add_lazy(struct sf_node *dir, const void *raw, size_t len, enum sf_kind kind,
		    uint32_t key, uint32_t aux)
{
	/* only a directory made for on-demand entries takes them */
	if (!dir->u.dir.lazy || dir->u.dir.lazy->counted)
		return -EINVAL;
	char uniq[SF_NAME_MAX + 16];
	unique_name(dir, raw, len, uniq);
	pthread_mutex_lock(&dir->view->names_lock);
	int rc = lazy_append(dir->u.dir.lazy, uniq, kind, key, aux);
	pthread_mutex_unlock(&dir->view->names_lock);
	return rc;
}

struct sf_node *sf_dir_add_dir(struct sf_node *dir, const void *raw, size_t len)
{
	return add_named(dir, SF_DIR, raw, len);
}

struct sf_node *sf_dir_add_file(struct sf_node *dir, const void *raw, size_t len)
{
	return add_named(dir, SF_FILE, raw, len);
}

void sf_dir_set_populate(struct sf_node *dir, sf_populate_fn fn, void *arg)
{
	dir->u.dir.populate = fn;
	dir->u.dir.populated = false;
	dir->u.dir.complete = false;
	dir->arg = arg;
}

void sf_dir_set_lookup(struct sf_node *dir, sf_lookup_fn fn)
{
	dir->u.dir.lookup = fn;
}

void sf_dir_set_locate(struct sf_node *dir, sf_locate_fn fn)
{
	dir->u.dir.locate = fn;
}

/* ---- file content ----------------------------------------------------- */

static int file_push(struct sf_node *f, struct sf_ext x)
{
	struct sf_file *fl = &f->u.file;
	/* most files are one extent; folds hold millions of them. ext and
	 * start share fl->cap: ext may end up larger if start fails to grow. */
	size_t ext_cap = fl->cap;
	if (sf_grow(&fl->ext, &ext_cap, fl->n, sizeof *fl->ext, 1) ||
	    sf_grow(&fl->start, &fl->cap, fl->n, sizeof *fl->start, 1))
		return -ENOMEM;
	fl->start[fl->n] = fl->size;
	fl->ext[fl->n++] = x;
	fl->size += x.len;
	return 0;
}

int sf_file_reserve(struct sf_node *f, size_t more, const char *what, struct sf_err *e)
{
	struct sf_file *fl = &f->u.file;
	struct sf_cache *c = f->view->cache;
	size_t want = fl->n + more;
	if (want <= fl->cap)
		return 0;
	if (want > SIZE_MAX / sizeof *fl->ext)
		return sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	uint64_t bytes = (uint64_t)want * (sizeof *fl->ext + sizeof *fl->start);
	int rc = c->charge ? sf_cache_charge(c, bytes - fl->charged, f->view->path, what, e) : 0;
	if (rc)
		return rc;
	struct sf_ext *x = realloc(fl->ext, want * sizeof *fl->ext);
	if (x)
		fl->ext = x;
	uint64_t *st = x ? realloc(fl->start, want * sizeof *fl->start) : NULL;
	if (!st) {
		if (c->charge)
			sf_cache_uncharge(c, bytes - fl->charged);
		return sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	}
	fl->start = st;
	fl->cap = want;
	if (c->charge) {
		SF_PROGRESS_ADD(f->view->host.progress, file_bytes_held, bytes - fl->charged);
		fl->charged = bytes;
	}
	return 0;
}

int sf_file_charge(struct sf_node *f, uint64_t bytes, const char *what, struct sf_err *e)
{
	struct sf_cache *c = f->view->cache;
	if (!c->charge || !bytes)
		return 0;
	int rc = sf_cache_charge(c, bytes, f->view->path, what, e);
	if (!rc) {
		f->u.file.charged += bytes;
		SF_PROGRESS_ADD(f->view->host.progress, file_bytes_held, bytes);
	}
	return rc;
}

int sf_file_add_map(struct sf_node *f, const uint8_t *p, uint64_t len)
{
	struct sf_ext x = { .kind = SF_EXT_MAP, .len = len, .u.map = p };
	return len ? file_push(f, x) : 0;
}

int sf_file_add_buf(struct sf_node *f, struct sf_buf *b, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	struct sf_ext x = { .kind = SF_EXT_BUF, .len = len, .off = off, .u.buf = b };
	int rc = file_push(f, x);
	if (!rc)
		sf_buf_ref(b);
	return rc;
}

int sf_file_add_part(struct sf_node *f, struct sf_part *p, uint64_t off, uint64_t len)
{
	struct sf_ext x = { .kind = SF_EXT_PART, .len = len, .off = off, .u.part = p };
	return len ? file_push(f, x) : 0;
}

int sf_file_add_gen(struct sf_node *f, sf_gen_fn fn, void *arg, uint64_t off, uint64_t len)
{
	struct sf_ext x = { .kind = SF_EXT_GEN, .len = len, .off = off };
	x.u.gen.fn = fn;
	x.u.gen.arg = arg;
	return len ? file_push(f, x) : 0;
}

int sf_file_add_zero(struct sf_node *f, uint64_t len)
{
	struct sf_ext x = { .kind = SF_EXT_ZERO, .len = len };
	return len ? file_push(f, x) : 0;
}

int sf_file_add_str(struct sf_node *f, struct sf_str *s)
{
	struct sf_buf *b = sf_str_take(s);
	if (!b)
		return -ENOMEM;
	int rc = sf_file_add_buf(f, b, 0, b->len);
	sf_buf_unref(b);
	return rc;
}

int sf_file_set_bytes(struct sf_node *f, const void *p, size_t len)
{
	struct sf_buf *b = sf_buf_new(len);
	if (!b)
		return -ENOMEM;
	if (len)
		memcpy(b->data, p, len);
	int rc = sf_file_add_buf(f, b, 0, len);
	sf_buf_unref(b);
	return rc;
}

void sf_file_set_whole(struct sf_node *f, struct sf_part *p)
{
	f->u.file.whole = p;
	f->u.file.built = false;
}

void sf_file_set_build(struct sf_node *f, sf_build_fn fn, void *arg)
{
	f->u.file.build = fn;
	f->u.file.built = false;
	f->arg = arg;
}

void sf_file_set_build_sized(struct sf_node *f, sf_build_fn fn, void *arg, uint64_t size)
{
	sf_file_set_build(f, fn, arg);
	f->u.file.size_known = true;
	f->u.file.known_size = size;
}

int sf_file_set_broken(struct sf_node *f, uint64_t size, const char *why)
{
	f->u.file.size = size;
	f->u.file.broken = strdup(why);
	return f->u.file.broken ? 0 : -ENOMEM;
}

/* ---- views ------------------------------------------------------------ */

static struct sf_view *view_alloc(const struct sf_format *fmt, const char *path)
{
	struct sf_view *v = calloc(1, sizeof *v);
	if (!v)
		return NULL;
	atomic_init(&v->refs, 1);
	/* not recursive: a hook, which runs under it, calls only what
	 * expects it held (sf_dir_lazy_node, sf_dir_ready_held) */
	sf_turn_init(&v->turn);
	pthread_mutex_init(&v->names_lock, NULL);
	v->format = fmt;
	v->cache = &sf_nocache;
	v->host.drop_every = SF_DROP_EVERY;
	v->path = strdup(path);
	if (!v->path) {
		free(v);
		return NULL;
	}
	return v;
}

struct sf_view *sf_view_new(const struct sf_format *fmt, const char *path)
{
	struct sf_view *v = view_alloc(fmt, path);
	if (!v)
		return NULL;
	v->root = node_new(v, SF_DIR, "");
	if (!v->root) {
		sf_view_unref(v);
		return NULL;
	}
	return v;
}

int sf_view_set_link(struct sf_view *v, const char *target)
{
	struct sf_node *n = node_new(v, SF_LINK, "");
	if (!n || !(n->u.target = strdup(target))) {
		node_free(n);
		return -ENOMEM;
	}
	node_free(v->root);
	v->root = n;
	return 0;
}

struct sf_view *sf_view_ref(struct sf_view *v)
{
	atomic_fetch_add(&v->refs, 1);
	return v;
}

bool sf_view_held_once(const struct sf_view *v)
{
	return atomic_load(&v->refs) == 1;
}

bool sf_view_busy(const struct sf_view *v)
{
	return sf_turn_held(&v->turn);
}

bool sf_view_unref_shared(struct sf_view *v)
{
	unsigned r = atomic_load(&v->refs);
	while (r > 1)
		if (atomic_compare_exchange_weak(&v->refs, &r, r - 1))
			return true;
	return false;
}

void sf_view_unref(struct sf_view *v)
{
	if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
		return;
	node_free(v->root);
	for (size_t i = 0; i < v->nparts; i++)
		free(v->parts[i]);
	free(v->parts);
	if (v->free_state)
		v->free_state(v->state);
	for (size_t i = 0; i < v->nmaps; i++)
		sf_map_unref(v->maps[i]);
	free(v->maps);
	for (size_t i = 0; i < v->nwarnings; i++)
		free(v->warnings[i]);
	free(v->warnings);
	sf_turn_fini(&v->turn);
	pthread_mutex_destroy(&v->names_lock);
	free(v->path);
	free(v);
}

int sf_view_hold_map(struct sf_view *v, struct sf_map *m)
{
	if (sf_grow(&v->maps, &v->capmaps, v->nmaps, sizeof *v->maps, 4))
		return -ENOMEM;
	/* in address order, for sf_view_map_at */
	size_t i = v->nmaps;
	while (i && (uintptr_t)v->maps[i - 1]->data > (uintptr_t)m->data) {
		v->maps[i] = v->maps[i - 1];
		i--;
	}
	v->maps[i] = sf_map_ref(m);
	v->nmaps++;
	return 0;
}

void sf_view_warn(struct sf_view *v, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&v->names_lock);
	if (!sf_grow(&v->warnings, &v->capwarnings, v->nwarnings, sizeof *v->warnings, 4) &&
	    (v->warnings[v->nwarnings] = strdup(buf)))
		v->nwarnings++;
	pthread_mutex_unlock(&v->names_lock);
}

struct sf_part *sf_view_part(struct sf_view *v, sf_produce_fn fn, void *arg,
			     uint64_t size, const char *what)
{
	if (sf_grow(&v->parts, &v->capparts, v->nparts, sizeof *v->parts, 16))
		return NULL;
	struct sf_part *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->id = atomic_fetch_add(&next_part_id, 1);
	p->produce = fn;
	p->arg = arg;
	atomic_init(&p->size, size);
	p->view = v;
	p->what = what;
	v->parts[v->nparts++] = p;
	return p;
}

struct sf_node *sf_view_add_meta(struct sf_view *v, sf_produce_fn info_txt,
				 sf_produce_fn info_json, sf_produce_fn verify, void *arg)
{
	static const char *const names[3] = { "info.txt", "info.json", "verify" };
	sf_produce_fn fns[3] = { info_txt, info_json, verify };
	struct sf_node *meta = sf_dir_add_exact(v->root, SF_DIR, ".shardfs");
	if (!meta)
		return NULL;
	meta->hidden = true;
	for (int i = 0; i < 3; i++) {
		if (!fns[i])
			continue;
		struct sf_part *p = sf_view_part(v, fns[i], arg, SF_SIZE_UNKNOWN, names[i]);
		struct sf_node *f = p ? sf_dir_add_exact(meta, SF_FILE, names[i]) : NULL;
		if (!f)
			return NULL;
		sf_file_set_whole(f, p);
	}
	return meta;
}

/* ---- using trees ------------------------------------------------------ */

/* Lazy work reads the container: it runs between checks of its mappings
 * (sf_mapcheck.h), so that a change in place fails it. */
static int run_populate(void *ctx, struct sf_err *e)
{
	struct sf_node *dir = ctx;
	return dir->u.dir.populate(dir, e);
}

static int populate(struct sf_node *dir, struct sf_err *e)
{
	return sf_checked_run(dir->view, run_populate, dir, e);
}

struct lookup_call {
	struct sf_node *dir;
	const char *name;
	struct sf_node **hit;
};

static int run_lookup(void *ctx, struct sf_err *e)
{
	struct lookup_call *l = ctx;
	return l->dir->u.dir.lookup(l->dir, l->name, l->hit, e);
}

struct locate_call {
	struct sf_node *dir;
	const char *name;
	struct sf_stored *out;
};

static int run_locate(void *ctx, struct sf_err *e)
{
	struct locate_call *l = ctx;
	return l->dir->u.dir.locate(l->dir, l->name, l->out, e);
}

struct build_call {
	struct sf_node *f;
	struct sf_cache *c;
};

static int run_build(void *ctx, struct sf_err *e)
{
	struct build_call *b = ctx;
	return b->f->u.file.build(b->f, b->c, e);
}

int sf_dir_ready_held(struct sf_node *dir, struct sf_err *e)
{
	if (dir->kind != SF_DIR)
		return sf_fail(e, -ENOTDIR, "%s: not a directory", dir->view->path);
	int rc = 0;
	if (!dir->u.dir.populated) {
		rc = populate(dir, e);
		if (rc == 0)
			dir->u.dir.populated = true;
	}
	return rc;
}

/* Ends the view's turn for lazy work (taken from outside any hook); `dir`
 * (may be NULL), found populated with no lazy work running,
 * is complete: nothing will add to it, so finds read it without a turn. */
static void work_end(struct sf_view *v, struct sf_node *dir)
{
	if (dir && sf_dir_is_populated(dir))
		atomic_store(&dir->u.dir.complete, true);
	sf_turn_give(&v->turn);
}

int sf_dir_ready(struct sf_node *dir, struct sf_err *e)
{
	if (dir->kind == SF_DIR && atomic_load(&dir->u.dir.complete))
		return 0;
	sf_turn_take(&dir->view->turn);
	int rc = sf_dir_ready_held(dir, e);
	work_end(dir->view, rc ? NULL : dir);
	return rc;
}

/* A find in a complete directory, under the names lock only (lazy work
 * elsewhere in the view may wait on the source): false when it needs
 * an on-demand node made, which reads the container. */
static bool find_complete(struct sf_node *dir, const char *name, struct sf_node **out)
{
	struct sf_view *v = dir->view;
	pthread_mutex_lock(&v->names_lock);
	*out = dir_get(&dir->u.dir, name);
	long i = *out ? -1 : lazy_find(dir, name);
	if (i >= 0)
		*out = live_pinned(dir->u.dir.lazy, lazy_key(dir->u.dir.lazy, (size_t)i));
	pthread_mutex_unlock(&v->names_lock);
	return i < 0 || *out;
}

int sf_dir_find_known(struct sf_node *dir, const char *name, struct sf_node **out)
{
	*out = NULL;
	return dir->kind == SF_DIR && atomic_load(&dir->u.dir.complete) && find_complete(dir, name, out);
}

int sf_dir_find(struct sf_node *dir, const char *name, struct sf_node **out,
		struct sf_err *e)
{
	if (dir->kind != SF_DIR)
		return sf_fail(e, -ENOTDIR, "%s: not a directory", dir->view->path);
	int rc = 0;
	*out = NULL;
	if (atomic_load(&dir->u.dir.complete) && find_complete(dir, name, out))
		return 0;
	sf_turn_take(&dir->view->turn);
	struct sf_node *hit = NULL;
	rc = dir_lookup(dir, name, &hit, e);
	if (!rc && !hit && !dir->u.dir.populated) {
		if (dir->u.dir.lookup) {
			struct lookup_call l = { dir, name, &hit };
			rc = sf_checked_run(dir->view, run_lookup, &l, e);
		}
		if (!dir->u.dir.lookup || rc == SF_LOOKUP_LIST) {
			rc = populate(dir, e);
			if (rc == 0) {
				dir->u.dir.populated = true;
				rc = dir_lookup(dir, name, &hit, e);
			}
		}
	}
	work_end(dir->view, rc ? NULL : dir);
	*out = hit;
	return rc;
}

int sf_file_ready(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	if (f->kind != SF_FILE)
		return sf_fail(e, -EISDIR, "%s: not a file", f->view->path);
	/* a file kept in the idle list was built: its size is known, and its
	 * extents, if dropped, are made again by the read that needs them
	 * (a lookup or a stat does not charge them again) */
	if (atomic_load(&f->u.file.idle))
		return 0;
	return sf_file_build(f, c, e);
}

int sf_file_build(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct sf_file *fl = &f->u.file;
	if (fl->built)
		return 0;
	int rc = 0;
	uint64_t size = 0;
	if (fl->whole) {
		/* learn the size outside the lock: the part's producer may be
		 * another thread that needs the lock for its own lazy work */
		size = atomic_load(&fl->whole->size);
		if (size == SF_SIZE_UNKNOWN) {
			struct sf_buf *b = NULL;
			rc = sf_part_get(c, fl->whole, &b, e);
			if (rc) {
				sf_err_prefix(e, "%s", f->name);
				return rc;
			}
			size = b->len;
			sf_buf_unref(b);
		}
	}
	sf_turn_take(&f->view->turn);
	if (!fl->built) {
		/* a drop of its extents may be ending */
		sf_file_wait_drop(atomic_load(&fl->idle));
		if (fl->whole)
			rc = sf_file_add_part(f, fl->whole, 0, size);
		else if (fl->build)
			rc = sf_checked_run(f->view, run_build, &(struct build_call){ f, c }, e);
		if (rc == 0 && fl->size_known && fl->size != fl->known_size)
			rc = sf_fail(e, -EIO, "%s: built %llu bytes, listed as %llu", f->view->path,
				     (unsigned long long)fl->size,
				     (unsigned long long)fl->known_size);
		if (rc == 0) {
			fl->built = true;
			file_keep(f);
		} else {
			file_clear(f);
			sf_err_prefix(e, "%s", f->name);
		}
	}
	work_end(f->view, NULL);
	return rc;
}

enum sf_kind sf_node_kind(const struct sf_node *n)
{
	return n->kind;
}

const char *sf_node_name(const struct sf_node *n)
{
	return n->name;
}

struct sf_view *sf_node_view(const struct sf_node *n)
{
	return n->view;
}

void *sf_node_host(const struct sf_node *n)
{
	return atomic_load(&((struct sf_node *)n)->host);
}

const char *sf_link_target(const struct sf_node *n)
{
	return n->u.target;
}

struct sf_node *sf_view_root(const struct sf_view *v)
{
	return v->root;
}

size_t sf_view_nmaps(const struct sf_view *v)
{
	return v->nmaps;
}

struct sf_map *sf_view_map(const struct sf_view *v, size_t i)
{
	return v->maps[i];
}

struct sf_map *sf_view_source(const struct sf_view *v)
{
	return v->source;
}

const char *sf_view_path(const struct sf_view *v)
{
	return v->path;
}

const struct sf_format *sf_view_format(const struct sf_view *v)
{
	return v->format;
}

bool sf_node_hidden(const struct sf_node *n)
{
	return n->hidden;
}

void sf_view_use_host(struct sf_view *v, const struct sf_host *h)
{
	if (h)
		v->host = *h;
	if (!v->host.drop_every)
		v->host.drop_every = SF_DROP_EVERY;
	v->cache = v->host.cache ? v->host.cache : &sf_nocache;
}

void sf_view_take_warnings(struct sf_view *v, void (*fn)(void *arg, const char *path,
							 const char *msg), void *arg)
{
	/* the common case, nothing new, takes no lock */
	if (atomic_load(&v->nreported) == atomic_load(&v->nwarnings))
		return;
	pthread_mutex_lock(&v->names_lock);
	for (; v->nreported < v->nwarnings; v->nreported++)
		fn(arg, v->path, v->warnings[v->nreported]);
	pthread_mutex_unlock(&v->names_lock);
}

bool sf_dir_is_populated(const struct sf_node *dir)
{
	return atomic_load(&((struct sf_node *)dir)->u.dir.populated);
}

bool sf_dir_is_complete(const struct sf_node *dir)
{
	return atomic_load(&((struct sf_node *)dir)->u.dir.complete);
}

bool sf_dir_has_lookup(const struct sf_node *dir)
{
	return dir->u.dir.lookup != NULL;
}

struct sf_file_size sf_file_size(const struct sf_node *f)
{
	const struct sf_file *fl = &f->u.file;
	/* `built` is read once: another thread may be building the file */
	bool built = atomic_load(&((struct sf_file *)fl)->built);
	return (struct sf_file_size){
		/* a built file's size is the known one (sf_file_ready checks),
		 * and stays so while its extents are dropped (file_drop) */
		.size = fl->size_known ? fl->known_size : fl->size,
		.known = built || fl->size_known,
		.broken = fl->broken != NULL,
	};
}

int sf_view_walk(struct sf_node *from, const char *path, struct sf_node **out,
		 struct sf_err *e)
{
	struct sf_node *cur = from;
	char comp[SF_NAME_MAX + 16];
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t n = strcspn(p, "/");
		if (n >= sizeof comp)
			return sf_fail(e, -ENAMETOOLONG, "%s: name too long in %s", from->view->path, path);
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n;
		if (strcmp(comp, ".") == 0)
			continue;
		struct sf_node *next = NULL;
		int rc = sf_dir_find(cur, comp, &next, e);
		if (rc)
			return rc;
		if (!next)
			return sf_fail(e, -ENOENT, "%s: no %s in the view", from->view->path, path);
		cur = next;
	}
	*out = cur;
	return 0;
}

int sf_view_locate(struct sf_view *v, const char *path, struct sf_stored *out,
		   struct sf_err *e)
{
	struct sf_node *root = v->root;
	out->pre = (struct sf_recent){ 0 };
	while (*path == '/')
		path++;
	if (root->kind != SF_DIR || !root->u.dir.locate || !*path || strchr(path, '/') ||
	    strcmp(path, ".") == 0 || atomic_load(&root->u.dir.complete))
		return SF_LOOKUP_LIST;
	sf_turn_take(&v->turn);
	/* a listing, even one under way, names the entries from then on */
	int rc = root->u.dir.populated ? SF_LOOKUP_LIST :
		 sf_checked_run(v, run_locate, &(struct locate_call){ root, path, out }, e);
	work_end(v, NULL);
	return rc;
}
