#include "sf_dcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sf_hash.h"
#include "sf_map.h"
#include "sf_view_impl.h"

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Parts decoded ahead at once, and not yet got, at most: one decodes
 * while a reader copies out the one before, and where a format's parts
 * are independent (sf_cache_ahead), two decode on two CPUs. */
#define AHEAD 2

/* Buffers of parts let go of, kept for the parts made next (sf_cache_buf):
 * at most SPARES of SPARE_MIN to SPARE_MAX bytes (a compressed tar's
 * pieces), counted in the budget and the first to go when room is short. */
#define SPARES 2
#define SPARE_MIN ((size_t)256 << 10)
#define SPARE_MAX ((size_t)16 << 20)

struct entry {
	uint64_t id;
	struct sf_buf *buf;      /* NULL while loading */
	bool loading;
	int waiters;
	/* a part named ahead, asked for once a reader gets this one: the
	 * one its decode ahead named, or one named while no more could go
	 * ahead (cache_ahead), of the same view */
	struct sf_part *then;
	const struct sf_view *view; /* its part's, to compare only */
	bool unread;             /* decoded ahead, no reader has got it yet */
	struct entry *prev, *next; /* LRU list, most recent first */
};

struct sf_dcache {
	struct sf_cache iface;   /* first, so the interface pointer is the cache */
	pthread_mutex_t lock;
	pthread_cond_t loaded;
	uint64_t budget, bytes;
	uint64_t reserved;        /* the declared sizes of the decodes running */
	struct sf_hash entries;    /* by id_hash of the part id */
	struct entry *head, *tail;
	void (*on_slow)(void);
	void (*on_short)(void *arg);
	void *short_arg;
	uint64_t charged;         /* the part of `reserved` that charges hold */
	/* charges their owners can drop (sf_cache_idle), most recently kept
	 * first; taken before `lock`, never while it is held */
	pthread_mutex_t idle_lock;
	struct sf_idle *idle_head, *idle_tail;
	atomic_size_t nidle;
	struct sf_dcache_counts *counts;
	/* the spare buffers; spare_lock may be taken under `lock` (a buffer
	 * let go of as its entry is dropped), never the other way */
	pthread_mutex_t spare_lock;
	struct spare {
		uint8_t *data;
		size_t cap;
	} spare[SPARES];
	unsigned nspare;
	_Atomic uint64_t spare_bytes;
	/* decode ahead (sf_cache_ahead): its threads, started as needed, and
	 * the parts they are asked to decode, each with its placeholder
	 * entry, reservation and a reference to its view */
	pthread_t ahead[AHEAD];
	unsigned nthreads, busy, njobs;
	/* entries decoded (or decoding) ahead, not got yet, oldest first */
	struct entry *unread_e[AHEAD];
	unsigned unread;
	bool ahead_failed, stop;
	pthread_cond_t work;
	struct job {
		struct sf_part *part;
		struct sf_view *view;
		struct entry *e;
	} jobs[AHEAD];
};

void sf_dcache_on_slow(struct sf_dcache *c, void (*fn)(void))
{
	c->on_slow = fn;
}

static void slow(const struct sf_dcache *c)
{
	if (c->on_slow)
		c->on_slow();
}

void sf_dcache_on_short(struct sf_dcache *c, void (*fn)(void *arg), void *arg)
{
	c->on_short = fn;
	c->short_arg = arg;
}

/* Called at each poll while a reader waits for room, with the lock let go
 * meanwhile: what it does may give memory back (uncharge), which takes
 * the lock. The caller checks for room again after its wait anyway. */
static void short_of_room(struct sf_dcache *c)
{
	if (!c->on_short)
		return;
	pthread_mutex_unlock(&c->lock);
	c->on_short(c->short_arg);
	pthread_mutex_lock(&c->lock);
}

static void idle_unlink(struct sf_dcache *c, struct sf_idle *i)
{
	*(i->prev ? &i->prev->next : &c->idle_head) = i->next;
	*(i->next ? &i->next->prev : &c->idle_tail) = i->prev;
	i->prev = i->next = NULL;
	i->kept = false;
	c->nidle--;
}

static void idle_front(struct sf_dcache *c, struct sf_idle *i)
{
	i->prev = NULL;
	i->next = c->idle_head;
	*(c->idle_head ? &c->idle_head->prev : &c->idle_tail) = i;
	c->idle_head = i;
	i->kept = true;
	c->nidle++;
}

static void cache_idle(struct sf_cache *iface, struct sf_idle *i, bool keep)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	pthread_mutex_lock(&c->idle_lock);
	if (i->kept)
		idle_unlink(c, i);
	if (keep)
		idle_front(c, i);
	pthread_mutex_unlock(&c->idle_lock);
}

/* Drops idle charges, the least recently kept first, until `need` more
 * bytes fit (lock held, let go meanwhile: a drop uncharges). Each is
 * visited once: one in use goes to the front. True when any was dropped. */
static bool drop_idle(struct sf_dcache *c, uint64_t need)
{
	if (!c->nidle)
		return false;
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_lock(&c->idle_lock);
	bool dropped = false, room = false;
	struct sf_idle *i = c->idle_tail;
	for (size_t n = c->nidle; i && n && !room; n--) {
		struct sf_idle *prev = i->prev;
		idle_unlink(c, i);
		if (i->drop(i)) {
			dropped = true;
			pthread_mutex_lock(&c->lock);
			room = c->bytes + c->reserved + need <= c->budget;
			pthread_mutex_unlock(&c->lock);
		} else {
			idle_front(c, i);
		}
		i = prev;
	}
	pthread_mutex_unlock(&c->idle_lock);
	pthread_mutex_lock(&c->lock);
	return dropped;
}

/* Odd-multiplier hashing: one id per hash, so the hash alone finds an
 * entry, and its top bits (where sf_hash looks) are well mixed. */
static uint64_t id_hash(uint64_t id)
{
	return id * 0x9E3779B97F4A7C15ull;
}

static struct entry *find(struct sf_dcache *c, uint64_t id)
{
	return sf_hash_get(&c->entries, id_hash(id), NULL, NULL);
}

static void lru_unlink(struct sf_dcache *c, struct entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		c->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		c->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_front(struct sf_dcache *c, struct entry *e)
{
	e->next = c->head;
	e->prev = NULL;
	if (c->head)
		c->head->prev = e;
	c->head = e;
	if (!c->tail)
		c->tail = e;
}

static bool same_entry(const void *key, const void *val)
{
	return key == val;
}

static void hash_remove(struct sf_dcache *c, struct entry *e)
{
	sf_hash_del(&c->entries, id_hash(e->id), same_entry, e);
}

/* A new entry for part `id`, in the table and first in the LRU list (lock
 * held); NULL when out of memory. */
static struct entry *entry_add(struct sf_dcache *c, const struct sf_part *part)
{
	struct entry *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	uint64_t id = part->id;
	e->id = id;
	e->view = part->view;
	if (sf_hash_put(&c->entries, id_hash(id), e)) {
		free(e);
		return NULL;
	}
	lru_front(c, e);
	return e;
}

/* e no longer counts as decoded ahead and not got (lock held). */
static void unread_clear(struct sf_dcache *c, struct entry *e)
{
	if (!e->unread)
		return;
	e->unread = false;
	unsigned i = 0;
	while (c->unread_e[i] != e)
		i++;
	memmove(c->unread_e + i, c->unread_e + i + 1, (--c->unread - i) * sizeof *c->unread_e);
}

static void drop(struct sf_dcache *c, struct entry *e)
{
	unread_clear(c, e);
	atomic_fetch_add(&c->iface.freed, 1);
	hash_remove(c, e);
	lru_unlink(c, e);
	if (e->buf) {
		c->bytes -= e->buf->len;
		sf_buf_unref(e->buf);
	}
	free(e);
}

/* Unlinks a placeholder that will hold no buffer (its decode failed, or the
 * part is too big to keep). Readers waiting on it still look at it when they
 * wake, so the last of them frees it. */
static void abandon(struct sf_dcache *c, struct entry *e)
{
	unread_clear(c, e);
	hash_remove(c, e);
	lru_unlink(c, e);
	if (!e->waiters)
		free(e);
}

/* Evicts least recently used entries until `need` more bytes fit in the
 * budget beside what is held and reserved. An entry a reader still holds a
 * reference to is kept: evicting it would free nothing until the reader is
 * done, and its bytes would be out of the count meanwhile. An entry whose
 * waiters have not woken yet stays until they have looked at it. */
static void spares_free(struct sf_dcache *c)
{
	pthread_mutex_lock(&c->spare_lock);
	while (c->nspare) {
		struct spare *s = &c->spare[--c->nspare];
		atomic_fetch_sub(&c->spare_bytes, s->cap);
		free(s->data);
	}
	pthread_mutex_unlock(&c->spare_lock);
}

static bool make_room(struct sf_dcache *c, uint64_t need)
{
	if (c->bytes + c->reserved + atomic_load(&c->spare_bytes) + need > c->budget)
		spares_free(c);
	struct entry *e = c->tail;
	while (c->bytes + c->reserved + need > c->budget && e) {
		struct entry *prev = e->prev;
		if (!e->loading && !e->waiters && atomic_load(&e->buf->refs) == 1) {
			drop(c, e);
			count(&c->counts->evictions, 1);
		}
		e = prev;
	}
	return c->bytes + c->reserved + need <= c->budget;
}

/* Per thread rather than in the cache: what the calling thread is doing,
 * which the sf_cache interface does not pass along.
 *
 * Decodes running in this thread: a part's produce may fetch the parts it
 * is made of through the cache. */
static _Thread_local unsigned depth;
/* This thread's current read holds parts it got from the cache: waiting
 * for room could then mean waiting for itself (the earlier parts of the
 * same read fill the budget), so it does not wait. */
static _Thread_local bool holding;
/* Set in the threads that decode ahead: the part its produce named that
 * could not go ahead at once. */
static _Thread_local bool ahead_thread;
static _Thread_local struct sf_part *ahead_then;

#define ROOM_POLL_NS 5000000u     /* 5 ms: readers dropping parts are not signalled */
/* Long enough for other readers' decodes to finish on a loaded machine (a
 * 40 MiB tile takes over a second under ASan at load 15), so they wait for
 * each other rather than all going past the budget; still bounded, for a holder that
 * never lets go. */
#define ROOM_WAIT_NS 10000000000ull /* 10 s */

/* Reserves `size` bytes for a decode (lock held): evicts, and while other
 * decodes or readers hold the room, waits for them. A decode inside
 * another's produce never waits (its caller's reservation could be what it
 * waits for), nor does a reader after ROOM_WAIT_NS (it may itself hold the
 * parts that fill the budget, e.g. the earlier parts of the same read): the
 * budget is then exceeded by that one part, for as long as it is held. */
static void reserve(struct sf_dcache *c, uint64_t size)
{
	struct timespec until, now;
	clock_gettime(CLOCK_REALTIME, &until);
	uint64_t end = (uint64_t)until.tv_sec * 1000000000u + (uint64_t)until.tv_nsec + ROOM_WAIT_NS;
	bool told = false;
	while (!make_room(c, size) && !(drop_idle(c, size) && make_room(c, size)) && !depth &&
	       !holding) {
		clock_gettime(CLOCK_REALTIME, &now);
		uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
		if (t >= end)
			break;
		if (!told) {
			slow(c);
			told = true;
		}
		short_of_room(c);
		t += ROOM_POLL_NS;
		until = (struct timespec){ (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
		pthread_cond_timedwait(&c->loaded, &c->lock, &until);
	}
	c->reserved += size;
}

/* A part that cannot fit in the budget is never decoded (a file can claim
 * any decoded size): its readers get EIO and the log says what to raise. */
static int too_big(const struct sf_dcache *c, const struct sf_part *part, uint64_t size,
		   struct sf_err *err)
{
	return sf_fail(err, -EIO,
		       "%s: %s: decodes to %llu bytes, more than --cache-size (%llu bytes) holds",
		       part->view ? part->view->path : "?", part->what,
		       (unsigned long long)size, (unsigned long long)c->budget);
}

/* Once a part is decoded, the stored bytes it came from need not stay in
 * our page tables: dropping them keeps resident memory near the budget
 * however much compressed data streams through. A view's mappings are all
 * held when it opens, so they can be read here without its lock. */
static void drop_source_pages(const struct sf_view *v)
{
	for (size_t i = 0; v && i < sf_view_nmaps(v); i++)
		sf_map_drop_pages(sf_view_map(v, i));
}

/* Ends the decode of e (lock held): it holds buf when rc is 0 and the part
 * fits, else it is abandoned (buf dropped). Returns rc, or too_big's. */
static int settle(struct sf_dcache *c, struct entry *e, struct sf_part *part, uint64_t claim,
		  int rc, struct sf_buf *buf, struct sf_err *err)
{
	e->loading = false;
	c->reserved -= claim;
	if (rc == 0) {
		count(&c->counts->parts_decoded, 1);
		count(&c->counts->bytes_decoded, buf->len);
	}
	if (rc == 0 && buf->len > c->budget) {
		/* only a part of unknown size gets here: known from now on, it is
		 * failed before decoding */
		uint64_t unknown = SF_SIZE_UNKNOWN;
		atomic_compare_exchange_strong(&part->size, &unknown, buf->len);
		rc = too_big(c, part, buf->len, err);
		sf_buf_unref(buf);
	}
	if (rc == 0) {
		e->buf = sf_buf_ref(buf);
		c->bytes += buf->len;
		make_room(c, 0);
	} else {
		abandon(c, e);
	}
	pthread_cond_broadcast(&c->loaded);
	return rc;
}

static void *ahead_main(void *arg);

/* With AHEAD parts ahead and not read when a reader names another, the
 * oldest of them decoded already counts as ahead no more (lock held): its
 * reader may have gone elsewhere (a member read in part), and were it
 * left to count, no part would be decoded ahead again until the cache
 * evicts it. It stays cached, and a reader that gets it still names the
 * part after it. */
static void forget_oldest_unread(struct sf_dcache *c)
{
	for (unsigned i = 0; i < c->unread; i++)
		if (!c->unread_e[i]->loading) {
			unread_clear(c, c->unread_e[i]);
			return;
		}
}

/* Hands p to a thread that decodes ahead (lock held), when fewer than
 * AHEAD parts are ahead, p is neither cached nor decoding, and its size
 * fits now. Its placeholder goes in at once: a reader that gets there
 * first waits for this decode instead of making a second. True when p is
 * handed over or there already. */
static bool launch(struct sf_dcache *c, struct sf_part *p, bool follows)
{
	uint64_t size = atomic_load(&p->size);
	if (find(c, p->id))
		return true;
	/* a thread decoding ahead names the next part itself, at its pace,
	 * not the reader's: it never pushes an earlier one out of the count */
	if (c->unread >= AHEAD && !ahead_thread)
		forget_oldest_unread(c);
	/* what cannot be evicted (charges, decodes running) stays under half
	 * the budget with it: the rest is for readers' decodes and charges,
	 * which would otherwise wait for parts no reader asked for yet */
	if (c->unread >= AHEAD || c->stop || c->ahead_failed || !p->view ||
	    size == SF_SIZE_UNKNOWN || c->reserved + size > c->budget / 2 || !make_room(c, size))
		return false;
	/* named as this thread's decode ends, to go on from it: this
	 * thread takes it next, no other is woken for it */
	bool mine = follows && ahead_thread && depth > 0;
	if (!mine && c->busy + c->njobs == c->nthreads) {
		if (pthread_create(&c->ahead[c->nthreads], NULL, ahead_main, c)) {
			c->ahead_failed = true;
			return false;
		}
		c->nthreads++;
	}
	struct entry *e = entry_add(c, p);
	if (!e)
		return false;
	e->loading = true;
	e->unread = true;
	c->unread_e[c->unread++] = e;
	c->reserved += size;
	c->jobs[c->njobs++] = (struct job){ p, sf_view_ref(p->view), e };
	if (!mine)
		pthread_cond_signal(&c->work);
	return true;
}

/* A part named while AHEAD were out goes to the oldest of them its view
 * decoded already, to be asked for once a reader gets that one (lock
 * held): a part that does not follow the one before it (the next xz
 * block, named as the second piece of this one begins) is named just
 * before the reader gets the piece ahead of it, and would otherwise wait
 * until the reader got the piece before it, one CPU decoding, not two.
 * The reader that gets it holds the view, so the part is alive then. */
static void name_later(struct sf_dcache *c, struct sf_part *next)
{
	for (unsigned i = 0; i < c->unread; i++) {
		struct entry *e = c->unread_e[i];
		if (!e->loading && e->view == next->view && !e->then) {
			e->then = next;
			return;
		}
	}
}

static void cache_ahead(struct sf_cache *iface, struct sf_part *next, bool follows)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	pthread_mutex_lock(&c->lock);
	if (!launch(c, next, follows)) {
		if (ahead_thread)
			ahead_then = next;
		if (c->unread >= AHEAD)
			name_later(c, next);
	}
	pthread_mutex_unlock(&c->lock);
}

/* A thread that decodes ahead: one part at a time, no lock held while it
 * decodes; at the cache's end, parts not begun are given up. */
static void *ahead_main(void *arg)
{
	struct sf_dcache *c = arg;
	ahead_thread = true;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->njobs && !c->stop)
			pthread_cond_wait(&c->work, &c->lock);
		if (!c->njobs)
			break;
		struct job j = c->jobs[0];
		memmove(c->jobs, c->jobs + 1, --c->njobs * sizeof *c->jobs);
		uint64_t claim = atomic_load(&j.part->size);
		struct sf_buf *buf = NULL;
		struct sf_err err;
		int rc = -ECANCELED;
		if (!c->stop) {
			c->busy++;
			pthread_mutex_unlock(&c->lock);
			ahead_then = NULL;
			depth++;
			rc = sf_part_produce(j.part, &c->iface, &buf, &err);
			depth--;
			if (rc == 0)
				drop_source_pages(j.view);
			pthread_mutex_lock(&c->lock);
			c->busy--;
		}
		if (settle(c, j.e, j.part, claim, rc, buf, &err) == 0) {
			count(&c->counts->parts_ahead, 1);
			j.e->then = ahead_then;
			sf_buf_unref(buf);
		}
		/* the view's last reference may go here: its end takes the lock */
		pthread_mutex_unlock(&c->lock);
		sf_view_unref(j.view);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* A reader gets e's copy (lock held). */
static void hit(struct sf_dcache *c, struct entry *e, struct sf_buf **out)
{
	count(&c->counts->hits, 1);
	lru_unlink(c, e);
	lru_front(c, e);
	*out = sf_buf_ref(e->buf);
	/* decoded ahead and got at last: the next one goes ahead (the reader
	 * holds the view, so the part named is alive) */
	unread_clear(c, e);
	if (e->then) {
		struct sf_part *then = e->then;
		e->then = NULL;
		launch(c, then, false);
	}
	holding = !depth || holding;
}

static bool cache_held(struct sf_cache *iface, struct sf_part *part, struct sf_buf **out)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	pthread_mutex_lock(&c->lock);
	struct entry *e = find(c, part->id);
	bool held = e && !e->loading && e->buf;
	if (held)
		hit(c, e, out);
	pthread_mutex_unlock(&c->lock);
	return held;
}

static int cache_get(struct sf_cache *iface, struct sf_part *part, struct sf_buf **out,
		     struct sf_err *err)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	uint64_t size = atomic_load(&part->size);
	if (size != SF_SIZE_UNKNOWN && size > c->budget)
		return too_big(c, part, size, err);
	pthread_mutex_lock(&c->lock);
	struct entry *e;
	for (;;) {
		e = find(c, part->id);
		if (!e || !e->loading)
			break;
		e->waiters++;
		slow(c);
		pthread_cond_wait(&c->loaded, &c->lock);
		e->waiters--;
		if (!e->loading && !e->buf) {
			/* abandoned: free the placeholder once all have seen it */
			if (!e->waiters)
				free(e);
			e = NULL;
			break;
		}
	}
	if (e) {
		hit(c, e, out);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	/* a reader woken from an abandoned decode may learn the size only now */
	size = atomic_load(&part->size);
	if (size != SF_SIZE_UNKNOWN && size > c->budget) {
		pthread_mutex_unlock(&c->lock);
		return too_big(c, part, size, err);
	}
	count(&c->counts->misses, 1);
	if (!(e = entry_add(c, part))) {
		pthread_mutex_unlock(&c->lock);
		return sf_fail(err, -ENOMEM, "out of memory");
	}
	e->loading = true;
	/* a part of unknown size reserves nothing: it is counted once made */
	uint64_t claim = size == SF_SIZE_UNKNOWN ? 0 : size;
	reserve(c, claim);
	pthread_mutex_unlock(&c->lock);

	struct sf_buf *buf = NULL;
	slow(c);
	depth++;
	int rc = sf_part_produce(part, iface, &buf, err);
	depth--;
	if (rc == 0)
		drop_source_pages(part->view);

	pthread_mutex_lock(&c->lock);
	rc = settle(c, e, part, claim, rc, buf, err);
	if (rc == 0) {
		*out = buf;
		holding = !depth || holding;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Shorter than a request takes to count as stuck at the source (STUCK_NS,
 * fs/section.h): a charge waiting for room never makes the request pool
 * refuse other users' requests. */
#define CHARGE_WAIT_NS 500000000ull /* 0.5 s */

/* Working memory outside parts (sf_cache_charge) counts as a decode's
 * reservation. It waits for room even inside a produce, unlike a decode:
 * nothing bounds the memory otherwise, and the wait is bounded (then EIO),
 * so waiting for itself ends too. */
static int cache_charge(struct sf_cache *iface, uint64_t bytes, const char *path,
			const char *what, struct sf_err *err)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	if (bytes > c->budget)
		return sf_fail(err, -EIO, "%s: %s needs %llu bytes of memory, more than "
			       "--cache-size (%llu bytes) holds", path, what,
			       (unsigned long long)bytes, (unsigned long long)c->budget);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	uint64_t end = t + CHARGE_WAIT_NS;
	pthread_mutex_lock(&c->lock);
	bool told = false;
	while (!make_room(c, bytes) && !(drop_idle(c, bytes) && make_room(c, bytes))) {
		if (t >= end) {
			pthread_mutex_unlock(&c->lock);
			return sf_fail(err, -EIO, "%s: %s needs %llu bytes of memory, which "
				       "--cache-size (%llu bytes) did not have free within %.1f s",
				       path, what, (unsigned long long)bytes,
				       (unsigned long long)c->budget, CHARGE_WAIT_NS / 1e9);
		}
		if (!told) {
			slow(c);
			told = true;
		}
		short_of_room(c);
		t += ROOM_POLL_NS;
		struct timespec until = { (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
		pthread_cond_timedwait(&c->loaded, &c->lock, &until);
		clock_gettime(CLOCK_REALTIME, &now);
		t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	}
	c->reserved += bytes;
	c->charged += bytes;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void cache_uncharge(struct sf_cache *iface, uint64_t bytes)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	pthread_mutex_lock(&c->lock);
	c->reserved -= bytes;
	c->charged -= bytes;
	atomic_fetch_add(&c->iface.freed, 1);
	pthread_cond_broadcast(&c->loaded);
	pthread_mutex_unlock(&c->lock);
}

/* A buffer let go of, kept as a spare when it fits (the last unref's
 * sf_buf give hook): true when taken. */
static bool spare_give(void *to, uint8_t *data, size_t cap)
{
	struct sf_dcache *c = to;
	if (cap < SPARE_MIN || cap > SPARE_MAX)
		return false;
	pthread_mutex_lock(&c->spare_lock);
	bool kept = c->nspare < SPARES;
	if (kept) {
		c->spare[c->nspare++] = (struct spare){ data, cap };
		atomic_fetch_add(&c->spare_bytes, cap);
	}
	pthread_mutex_unlock(&c->spare_lock);
	return kept;
}

static struct sf_buf *cache_buf(struct sf_cache *iface, size_t len)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	uint8_t *data = NULL;
	size_t cap = len;
	/* a spare of the same size class: at most twice the room asked */
	pthread_mutex_lock(&c->spare_lock);
	for (unsigned i = 0; i < c->nspare; i++)
		if (c->spare[i].cap >= len && c->spare[i].cap / 2 <= len) {
			data = c->spare[i].data;
			cap = c->spare[i].cap;
			c->spare[i] = c->spare[--c->nspare];
			atomic_fetch_sub(&c->spare_bytes, cap);
			break;
		}
	pthread_mutex_unlock(&c->spare_lock);
	struct sf_buf *b = data ? sf_buf_wrap(data, len) : sf_buf_new(len);
	if (!b) {
		free(data);
		return NULL;
	}
	b->cap = cap;
	b->give = spare_give;
	b->to = c;
	return b;
}

static bool cache_drop(struct sf_cache *iface, struct sf_part *part, struct sf_part *past)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	pthread_mutex_lock(&c->lock);
	struct entry *e = find(c, part->id), *after = find(c, past->id);
	/* a reader has got `past` (made by its own get, or decoded ahead
	 * and got since): in order, it is done with `part` */
	if (e && after && !after->loading && !after->unread && !e->loading && !e->waiters &&
	    !e->unread && atomic_load(&e->buf->refs) == 1) {
		drop(c, e);
		pthread_cond_broadcast(&c->loaded);
		e = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	return !e;
}

static bool cache_keep(struct sf_cache *iface, struct sf_part *part, struct sf_buf *buf)
{
	struct sf_dcache *c = (struct sf_dcache *)iface;
	pthread_mutex_lock(&c->lock);
	struct entry *e = NULL;
	bool kept = !find(c, part->id) && make_room(c, buf->len) && (e = entry_add(c, part));
	if (kept) {
		e->buf = sf_buf_ref(buf);
		c->bytes += buf->len;
		count(&c->counts->parts_decoded, 1);
		count(&c->counts->bytes_decoded, buf->len);
	}
	pthread_mutex_unlock(&c->lock);
	return kept;
}

struct sf_dcache *sf_dcache_new(uint64_t budget, struct sf_dcache_counts *counts)
{
	struct sf_dcache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->iface.get = cache_get;
	c->iface.charge = cache_charge;
	c->iface.uncharge = cache_uncharge;
	c->iface.idle = cache_idle;
	c->iface.buf = cache_buf;
	c->iface.drop = cache_drop;
	c->iface.held = cache_held;
	c->iface.keep = cache_keep;
	c->iface.ahead = cache_ahead;
	c->iface.limit = budget;
	c->budget = budget;
	c->counts = counts;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->idle_lock, NULL);
	pthread_mutex_init(&c->spare_lock, NULL);
	pthread_cond_init(&c->loaded, NULL);
	pthread_cond_init(&c->work, NULL);
	return c;
}

void sf_dcache_free(struct sf_dcache *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < c->nthreads; i++)
		pthread_join(c->ahead[i], NULL);
	while (c->head)
		drop(c, c->head);
	spares_free(c);
	sf_hash_free(&c->entries);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->idle_lock);
	pthread_mutex_destroy(&c->spare_lock);
	pthread_cond_destroy(&c->loaded);
	pthread_cond_destroy(&c->work);
	free(c);
}

struct sf_cache *sf_dcache_iface(struct sf_dcache *c)
{
	return &c->iface;
}

uint64_t sf_dcache_bytes(struct sf_dcache *c)
{
	pthread_mutex_lock(&c->lock);
	uint64_t b = c->bytes;
	pthread_mutex_unlock(&c->lock);
	return b;
}

uint64_t sf_dcache_charged(struct sf_dcache *c)
{
	pthread_mutex_lock(&c->lock);
	uint64_t b = c->charged;
	pthread_mutex_unlock(&c->lock);
	return b;
}

uint64_t sf_dcache_budget(struct sf_dcache *c)
{
	pthread_mutex_lock(&c->lock);
	uint64_t b = c->budget;
	pthread_mutex_unlock(&c->lock);
	return b;
}

void sf_dcache_set_budget(struct sf_dcache *c, uint64_t budget)
{
	pthread_mutex_lock(&c->lock);
	c->budget = budget;
	c->iface.limit = budget;
	make_room(c, 0);
	pthread_cond_broadcast(&c->loaded);
	pthread_mutex_unlock(&c->lock);
}

void sf_dcache_read_done(void)
{
	holding = false;
}
