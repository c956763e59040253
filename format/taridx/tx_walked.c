/* One walk per tar file: the index built for an unindexed tar (tx_lone.c), and a
 * compressed tar's seek index (tx_z.c), are shared by every view of the
 * same file (hard links, a view made anew while the old one is read), so
 * that N names of one tar cost one pass, one walk and one charge, not N
 * side by side. A file is the same while its device, inode, size and
 * mtime are; each view still checks its own mapping around its use. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sf_hash.h"
#include "sf_map.h"
#include "tx.h"
#include "tx_z.h"
#include "sf_view_impl.h"

struct tx_walked {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct sf_cache *cache;
	struct sf_progress *progress; /* the host's that `cache` is */
	unsigned refs;          /* under `lock` */
	struct sf_turn turn;    /* the walk, and what follows */
	struct tx_built built;  /* once walked */
	uint64_t charged;       /* to `cache`, for the three */
	struct tx_zseek *seek;  /* a compressed tar's, once made */
	/* The last walk's failure (not for lack of system resources): one
	 * for lack of room (-ENOBUFS) until the cache frees something
	 * (sf_cache.freed at `why_at`), any other for good. */
	int rc;
	char *why;
	uint64_t why_at;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct sf_hash walked; /* by key_hash */

static uint64_t key_hash(const struct stat *st)
{
	return ((uint64_t)st->st_ino ^ ((uint64_t)st->st_dev << 40)) * 0x9E3779B97F4A7C15ull;
}

struct key {
	const struct stat *st;
	const struct sf_cache *cache;
	const struct sf_progress *progress;
};

static bool same_file(const void *key, const void *val)
{
	const struct key *k = key;
	const struct tx_walked *w = val;
	return w->dev == k->st->st_dev && w->ino == k->st->st_ino && w->size == k->st->st_size &&
	       w->mtime.tv_sec == k->st->st_mtim.tv_sec &&
	       w->mtime.tv_nsec == k->st->st_mtim.tv_nsec && w->cache == k->cache &&
	       w->progress == k->progress;
}

static bool same_entry(const void *key, const void *val)
{
	return key == val;
}

/* The shared record of the file, a reference taken; NULL when out of
 * memory. */
static struct tx_walked *get(const struct sf_map *tar, struct sf_cache *c,
			     struct sf_progress *pr)
{
	struct key k = { &tar->st, c, pr };
	uint64_t h = key_hash(&tar->st);
	pthread_mutex_lock(&lock);
	struct tx_walked *w = sf_hash_get(&walked, h, same_file, &k);
	if (!w && (w = calloc(1, sizeof *w))) {
		*w = (struct tx_walked){ .dev = tar->st.st_dev, .ino = tar->st.st_ino,
					 .size = tar->st.st_size, .mtime = tar->st.st_mtim,
					 .cache = c, .progress = pr };
		sf_turn_init(&w->turn);
		if (sf_hash_put(&walked, h, w)) {
			sf_turn_fini(&w->turn);
			free(w);
			w = NULL;
		}
	}
	if (w)
		w->refs++;
	pthread_mutex_unlock(&lock);
	return w;
}

/* Drops w's index, its root names and header blocks, and their charge. */
static void index_drop(struct tx_walked *w)
{
	if (w->charged)
		sf_cache_uncharge(w->cache, w->charged);
	tx_built_drop(&w->built);
	w->charged = 0;
}

void tx_walked_put(struct tx_walked *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&lock);
	bool last = !--w->refs;
	if (last) {
		struct stat st = { .st_dev = w->dev, .st_ino = w->ino };
		sf_hash_del(&walked, key_hash(&st), same_entry, w);
	}
	pthread_mutex_unlock(&lock);
	if (!last)
		return;
	if (w->built.index) {
		SF_PROGRESS_ADD(w->progress, indexes_held, -1);
		SF_PROGRESS_ADD(w->progress, index_bytes_held, -w->charged);
	}
	index_drop(w);
	tx_zseek_put(w->seek);
	free(w->why);
	sf_turn_fini(&w->turn);
	free(w);
}

static bool remembered(const struct tx_walked *w)
{
	return w->why && (w->rc != -ENOBUFS || w->why_at == atomic_load(&w->cache->freed));
}

/* A compressed tar's index kept in --index-dir (tx_z.c) spares the walk:
 * it is charged whole, as a walk's result is. */
static int kept_or_walk(struct sf_map *tar, const char *name, struct sf_cache *c,
			struct tx_walked *w, struct sf_err *e)
{
	struct tx_built kept;
	if (!tx_z_kept_tar_index(tar, &kept))
		return tx_index_tar(tar, name, w->progress, c, &w->charged, &w->built, e);
	uint64_t limit = c ? c->limit : 0, cost = tx_built_bytes(&kept);
	int rc = 0;
	if (limit && cost > limit)
		rc = sf_fail(e, -EIO, "%s: its kept index needs more memory than --cache-size (%llu bytes) holds",
			     name, (unsigned long long)limit);
	else if (c && sf_cache_charge(c, cost, name, "its kept index", e))
		rc = -ENOBUFS;
	if (rc) {
		tx_built_drop(&kept);
		return rc;
	}
	w->charged = c ? cost : 0;
	w->built = kept;
	return 0;
}

/* The walk a first pass runs beside it (tx_zfeed.c). */
struct beside {
	struct tx_walked *w;
	const char *name;
	struct sf_cache *c;
};

static int walk_beside(const struct sf_map *tar, struct sf_progress *pr, void *arg, struct sf_err *e)
{
	struct beside *b = arg;
	return tx_index_tar(tar, b->name, pr, b->c, &b->w->charged, &b->w->built, e);
}

int tx_walked_get(struct sf_map *tar, struct sf_view *v, struct tx_walked **held,
		  struct sf_buf **out, struct sf_buf **unkeyed, struct sf_err *e)
{
	struct sf_cache *c = v->cache;
	const char *name = v->path;
	struct tx_walked *w = *held ? *held : get(tar, c, v->host.progress);
	if (!w)
		return sf_fail(e, -ENOMEM, "%s: out of memory", name);
	*held = w;
	sf_turn_take(&w->turn);
	int rc = 0;
	if (!w->built.index && remembered(w)) {
		rc = sf_fail(e, w->rc, "%s", w->why);
	} else {
		/* a compressed tar's seek index first (this view's pieces of
		 * it): it gives the tar's size */
		struct beside arg = { w, name, c };
		struct tx_zbeside b = { .walk = walk_beside, .arg = &arg };
		bool fresh = !w->built.index;
		rc = tx_z_index(tar, v, w->progress, &w->seek, fresh ? &b : NULL, e);
		if (fresh && b.walked && !rc) {
			SF_PROGRESS_ADD(w->progress, headers_walked, b.headers);
			SF_PROGRESS_ADD(w->progress, bytes_walked, b.bytes);
			SF_PROGRESS_ADD(w->progress, indexes_held, 1);
			SF_PROGRESS_ADD(w->progress, index_bytes_held, w->charged);
		} else if (fresh) {
			/* what a walk beside the pass made does not stand */
			index_drop(w);
		}
		if (!rc && !w->built.index) {
			rc = kept_or_walk(tar, name, c, w, e);
			if (!rc) {
				SF_PROGRESS_ADD(w->progress, indexes_held, 1);
				SF_PROGRESS_ADD(w->progress, index_bytes_held, w->charged);
			}
		}
		if (!rc) {
			free(w->why);
			w->why = NULL;
			/* kept in --index-dir in the turn, so that a view
			 * sharing the seek index sees what became of it */
			tx_z_keep(tar, &w->built, v);
			tx_z_use_heads(tar, w->built.heads);
		} else if (rc != -ENOMEM && rc != -EMFILE && rc != -ENFILE) {
			free(w->why);
			w->rc = rc;
			w->why = strdup(e->msg);
			w->why_at = atomic_load(&c->freed);
		}
	}
	if (!rc) {
		*out = sf_buf_ref(w->built.index);
		*unkeyed = sf_buf_ref(w->built.unkeyed);
	}
	sf_turn_give(&w->turn);
	return rc;
}
