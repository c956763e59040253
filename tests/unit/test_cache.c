/* The decode cache (the daemon's and the C API's): decode once under concurrent readers, stay
 * within the byte budget, evict least recently used, survive failures. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "sf_dcache.h"

static atomic_int produced;

static int produce_slow(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	atomic_fetch_add(&produced, 1);
	usleep(20000); /* let the other readers pile up on the same part */
	*out = sf_buf_new((size_t)p->aux);
	if (!*out)
		return -ENOMEM;
	memset((*out)->data, (int)(p->id & 0xff), (size_t)p->aux);
	return 0;
}

static int produce_fail(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	atomic_fetch_add(&produced, 1);
	usleep(5000);
	return sf_fail(e, -EIO, "broken on purpose");
}

static struct sf_dcache *budget_cache;
static atomic_uint_fast64_t live, peak_live;

/* Records the most bytes held by the cache plus being decoded at once. */
static int produce_counted(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out,
			   struct sf_err *e)
{
	uint64_t now = atomic_fetch_add(&live, p->aux) + p->aux + sf_dcache_bytes(budget_cache);
	for (uint64_t seen = atomic_load(&peak_live); now > seen &&
	     !atomic_compare_exchange_weak(&peak_live, &seen, now);)
		;
	int rc = produce_slow(p, cache, out, e);
	atomic_fetch_sub(&live, p->aux);
	return rc;
}

/* A part made of another: its first byte is the inner part's. */
static int produce_outer(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out,
			 struct sf_err *e)
{
	struct sf_buf *in = NULL;
	int rc = sf_part_get(cache, p->arg, &in, e);
	if (rc)
		return rc;
	*out = sf_buf_new(600);
	if (*out)
		memset((*out)->data, (int)(p->id & 0xff), 600);
	sf_buf_unref(in);
	return *out ? 0 : -ENOMEM;
}

struct race {
	struct sf_dcache *c;
	struct sf_part *p;
	int rc;
	uint8_t first;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	struct sf_buf *b = NULL;
	struct sf_err e;
	r->rc = sf_part_get(sf_dcache_iface(r->c), r->p, &b, &e);
	if (r->rc == 0) {
		r->first = b->data[0];
		sf_buf_unref(b);
	}
	return NULL;
}

static void race_on(struct sf_dcache *c, struct sf_part *p, int nthreads, int want_rc)
{
	pthread_t t[16];
	struct race r[16];
	for (int i = 0; i < nthreads; i++) {
		r[i] = (struct race){ c, p, 1, 0 };
		pthread_create(&t[i], NULL, reader, &r[i]);
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ_U(r[i].rc, (uint64_t)want_rc);
		if (want_rc == 0)
			CHECK_EQ_U(r[i].first, p->id & 0xff);
	}
}

/* An idle charge of 400 bytes: dropped unless in use. */
struct held {
	struct sf_idle idle;
	struct sf_cache *c;
	bool in_use, charged;
};

static bool drop_held(struct sf_idle *i)
{
	struct held *h = (struct held *)i;
	if (h->in_use)
		return false;
	sf_cache_uncharge(h->c, 400);
	h->charged = false;
	return true;
}

/* Charges a cache short of room can drop are dropped, the least recently
 * kept first and none in use, before a charge or a decode waits. */
static void idle_charges(void)
{
	struct sf_view *v = sf_view_new(NULL, "t");
	struct sf_dcache_counts counts = { 0 };
	struct sf_dcache *c = sf_dcache_new(1000, &counts);
	struct sf_cache *ic = sf_dcache_iface(c);
	struct held h[2];
	struct sf_err e;
	for (int i = 0; i < 2; i++) {
		h[i] = (struct held){ .idle.drop = drop_held, .c = ic, .charged = true };
		CHECK_EQ_U(sf_cache_charge(ic, 400, "t", "held", &e), 0);
		sf_cache_idle(ic, &h[i].idle, true);
	}
	/* h[0] kept first, but in use: h[1] goes */
	h[0].in_use = true;
	CHECK_EQ_U(sf_cache_charge(ic, 400, "t", "more", &e), 0);
	CHECK(h[0].charged && !h[1].charged);
	/* a decode drops h[0] once it is no longer in use */
	h[0].in_use = false;
	struct sf_part *p = sf_view_part(v, produce_slow, NULL, 500, "p");
	p->aux = 500;
	race_on(c, p, 1, 0);
	CHECK(!h[0].charged);
	atomic_store(&produced, 0);
	sf_cache_uncharge(ic, 400);
	CHECK_EQ_U(sf_dcache_charged(c), 0);
	sf_dcache_free(c);
	sf_view_unref(v);
}

/* A part made in a buffer from the cache (sf_cache_buf), filled whole. */
static int produce_spare(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out,
			 struct sf_err *e)
{
	atomic_fetch_add(&produced, 1);
	*out = sf_cache_buf(cache, (size_t)p->aux);
	if (!*out)
		return -ENOMEM;
	memset((*out)->data, (int)(p->id & 0xff), (size_t)p->aux);
	return 0;
}

/* A part let go of (sf_cache_drop) once a reader got the part after it is
 * made again when next asked for; its memory makes the next part of its
 * size rather than fresh pages, and the spares count within the budget: a
 * part that needs their room frees them. */
static void spares(void)
{
	const size_t k = 1 << 20;
	struct sf_view *v = sf_view_new(NULL, "t");
	struct sf_dcache_counts counts = { 0 };
	struct sf_dcache *c = sf_dcache_new(3 * k, &counts);
	struct sf_cache *ic = sf_dcache_iface(c);
	struct sf_err e;
	struct sf_part *p[3];
	struct sf_buf *b = NULL;
	for (int i = 0; i < 3; i++) {
		p[i] = sf_view_part(v, produce_spare, NULL, k, "piece");
		p[i]->aux = k;
	}
	atomic_store(&produced, 0);
	CHECK_EQ_U(sf_part_get(ic, p[0], &b, &e), 0);
	uint8_t *mem = b->data;
	/* the part after it not got yet: kept */
	CHECK(!sf_cache_drop(ic, p[0], p[1]));
	struct sf_buf *b1 = NULL;
	CHECK_EQ_U(sf_part_get(ic, p[1], &b1, &e), 0);
	sf_buf_unref(b1);
	/* held by a reader: kept */
	CHECK(!sf_cache_drop(ic, p[0], p[1]));
	CHECK_EQ_U(sf_dcache_bytes(c), 2 * k);
	sf_buf_unref(b);
	CHECK(sf_cache_drop(ic, p[0], p[1]));
	CHECK(sf_cache_drop(ic, p[0], p[1]));
	CHECK_EQ_U(sf_dcache_bytes(c), k);
	CHECK_EQ_U(sf_part_get(ic, p[2], &b, &e), 0);
	CHECK(b->data == mem && b->data[0] == (p[2]->id & 0xff) && b->data[k - 1] == b->data[0]);
	sf_buf_unref(b);
	CHECK(sf_cache_drop(ic, p[1], p[2]));
	/* two parts held and a spare: the third part's room frees the spare */
	CHECK_EQ_U(sf_part_get(ic, p[0], &b, &e), 0);
	sf_buf_unref(b);
	CHECK_EQ_U(sf_part_get(ic, p[1], &b, &e), 0);
	sf_buf_unref(b);
	CHECK_EQ_U(sf_part_get(ic, p[2], &b, &e), 0);
	sf_buf_unref(b);
	CHECK_EQ_U(sf_dcache_bytes(c), 3 * k);
	CHECK_EQ_U(atomic_load(&produced), 5);
	/* a small part's buffer is no spare */
	struct sf_part *small = sf_view_part(v, produce_spare, NULL, 100, "small");
	small->aux = 100;
	CHECK_EQ_U(sf_part_get(ic, small, &b, &e), 0);
	CHECK(b->data[99] == (small->id & 0xff));
	sf_buf_unref(b);
	CHECK(sf_cache_drop(ic, small, p[2]));
	sf_dcache_free(c);
	sf_view_unref(v);
	atomic_store(&produced, 0);
}

/* A part decoded ahead that names another (as the second piece of an xz
 * block names the next block's first), once the part before it is
 * decoded: waits for that, then names `after`. */
struct naming {
	struct sf_dcache_counts *counts;
	struct sf_part *after;
};

static int produce_naming(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out,
			  struct sf_err *e)
{
	const struct naming *n = p->arg;
	atomic_fetch_add(&produced, 1);
	if (n) {
		for (int i = 0; i < 5000 && atomic_load(&n->counts->parts_ahead) < 1; i++)
			usleep(1000);
		sf_cache_ahead(cache, n->after);
	}
	*out = sf_buf_new((size_t)p->aux);
	return *out ? 0 : -ENOMEM;
}

static bool ahead_reaches(struct sf_dcache_counts *counts, uint64_t n)
{
	for (int i = 0; i < 5000 && atomic_load(&counts->parts_ahead) < n; i++)
		usleep(1000);
	return atomic_load(&counts->parts_ahead) >= n;
}

/* A view and a cache of 1 MiB that decodes ahead, for the tests of decode
 * ahead. */
struct rig {
	struct sf_view *v;
	struct sf_dcache_counts counts;
	struct sf_dcache *c;
	struct sf_cache *ic;
};

static void rig_init(struct rig *r)
{
	*r = (struct rig){ .v = sf_view_new(NULL, "t") };
	r->c = sf_dcache_new(1 << 20, &r->counts);
	r->ic = sf_dcache_iface(r->c);
	atomic_store(&produced, 0);
}

static void rig_fini(struct rig *r)
{
	sf_dcache_free(r->c);
	sf_view_unref(r->v);
	atomic_store(&produced, 0);
}

/* Two parts out ahead (p1 decoded, p2 decoding) when p2's decode names p3,
 * which cannot go ahead then: p3 goes once the reader gets p1, not only
 * once it gets p2, so that p3 decodes beside p2's successor on a second
 * CPU rather than after it. Each part once. */
static void named_while_full(void)
{
	struct rig r;
	rig_init(&r);
	struct sf_cache *ic = r.ic;
	struct sf_part *p[4];
	struct naming n = { &r.counts, NULL };
	for (int i = 0; i < 4; i++) {
		p[i] = sf_view_part(r.v, produce_naming, i == 2 ? &n : NULL, 1000, "piece");
		p[i]->aux = 1000;
	}
	n.after = p[3];
	struct sf_buf *b = NULL;
	struct sf_err e;
	CHECK_EQ_U(sf_part_get(ic, p[0], &b, &e), 0);
	sf_buf_unref(b);
	sf_cache_ahead(ic, p[1]);
	sf_cache_ahead(ic, p[2]);
	CHECK(ahead_reaches(&r.counts, 2));
	CHECK_EQ_U(atomic_load(&produced), 3);
	CHECK_EQ_U(sf_part_get(ic, p[1], &b, &e), 0);
	sf_buf_unref(b);
	CHECK(ahead_reaches(&r.counts, 3));
	CHECK_EQ_U(sf_part_get(ic, p[2], &b, &e), 0);
	sf_buf_unref(b);
	CHECK_EQ_U(sf_part_get(ic, p[3], &b, &e), 0);
	sf_buf_unref(b);
	CHECK_EQ_U(atomic_load(&produced), 4);
	rig_fini(&r);
}

/* A part decoded ahead that names the part going on from it as its
 * decode ends (sf_cache_after), then lingers: the thread that made it
 * makes that one too, even though it is busy when naming it. */
static pthread_t made_by[3];

static int produce_after(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out,
			 struct sf_err *e)
{
	atomic_fetch_add(&produced, 1);
	made_by[p->aux % 3] = pthread_self();
	if (p->arg) {
		sf_cache_after(cache, p->arg);
		usleep(20000); /* time for another thread to take the part named */
	}
	*out = sf_buf_new(100);
	return *out ? 0 : -ENOMEM;
}

static void after_on_one_thread(void)
{
	struct rig r;
	rig_init(&r);
	struct sf_cache *ic = r.ic;
	struct sf_part *p[3];
	for (int i = 2; i >= 0; i--) {
		p[i] = sf_view_part(r.v, produce_after, i == 1 ? p[2] : NULL, 100, "piece");
		p[i]->aux = (uint64_t)i;
	}
	struct sf_buf *b = NULL;
	struct sf_err e;
	CHECK_EQ_U(sf_part_get(ic, p[0], &b, &e), 0);
	sf_buf_unref(b);
	sf_cache_ahead(ic, p[1]);
	CHECK(ahead_reaches(&r.counts, 2));
	CHECK(!pthread_equal(made_by[1], pthread_self()));
	CHECK(pthread_equal(made_by[1], made_by[2]));
	for (int i = 1; i < 3; i++) {
		CHECK_EQ_U(sf_part_get(ic, p[i], &b, &e), 0);
		sf_buf_unref(b);
	}
	CHECK_EQ_U(atomic_load(&produced), 3);
	rig_fini(&r);
}

int main(void)
{
	idle_charges();
	spares();
	named_while_full();
	after_on_one_thread();
	struct sf_dcache_counts counts = { 0 };
	struct sf_view *v = sf_view_new(NULL, "t");
	struct sf_dcache *c = sf_dcache_new(1000, &counts);

	/* 16 readers of one part: one decode */
	struct sf_part *p = sf_view_part(v, produce_slow, NULL, 300, "p");
	p->aux = 300;
	race_on(c, p, 16, 0);
	CHECK_EQ_U(atomic_load(&produced), 1);
	CHECK_EQ_U(sf_dcache_bytes(c), 300);

	/* more parts than the budget holds: the least recently used goes */
	struct sf_part *q[5];
	for (int i = 0; i < 5; i++) {
		q[i] = sf_view_part(v, produce_slow, NULL, 300, "q");
		q[i]->aux = 300;
	}
	atomic_store(&produced, 0);
	race_on(c, q[0], 2, 0);
	race_on(c, q[1], 2, 0);
	race_on(c, p, 1, 0);    /* p becomes most recent: still cached */
	CHECK_EQ_U(atomic_load(&produced), 2);
	race_on(c, q[2], 1, 0); /* over budget: q[0] (least recent) is evicted */
	CHECK(sf_dcache_bytes(c) <= 1000);
	atomic_store(&produced, 0);
	race_on(c, p, 1, 0);
	CHECK_EQ_U(atomic_load(&produced), 0);
	race_on(c, q[0], 1, 0);
	CHECK_EQ_U(atomic_load(&produced), 1);
	CHECK(sf_dcache_bytes(c) <= 1000);

	/* a part larger than the whole budget is refused, never decoded */
	struct sf_part *big = sf_view_part(v, produce_slow, NULL, 5000, "big");
	big->aux = 5000;
	atomic_store(&produced, 0);
	race_on(c, big, 4, -EIO);
	CHECK_EQ_U(atomic_load(&produced), 0);
	/* one of unknown size is decoded once, found too big, and from then
	 * on refused before decoding */
	struct sf_part *vague = sf_view_part(v, produce_slow, NULL, SF_SIZE_UNKNOWN, "vague");
	vague->aux = 5000;
	race_on(c, vague, 1, -EIO);
	race_on(c, vague, 3, -EIO);
	CHECK_EQ_U(atomic_load(&produced), 1);
	CHECK(sf_dcache_bytes(c) <= 1000);

	/* decodes running count against the budget: four readers of four
	 * parts of 400 bytes never have more than 1000 bytes decoded or
	 * being decoded */
	struct sf_dcache *small = sf_dcache_new(1000, &counts);
	budget_cache = small;
	for (int round = 0; round < 3; round++) {
		pthread_t t[4];
		struct race r[4];
		for (int i = 0; i < 4; i++) {
			struct sf_part *w = sf_view_part(v, produce_counted, NULL, 400, "w");
			w->aux = 400;
			r[i] = (struct race){ small, w, 1, 0 };
			pthread_create(&t[i], NULL, reader, &r[i]);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
			CHECK_EQ_U(r[i].rc, 0);
		}
	}
	CHECK(atomic_load(&peak_live) > 0 && atomic_load(&peak_live) <= 1000);
	/* a part made of another through the cache does not wait for the room
	 * its own decode holds */
	struct sf_part *inner = sf_view_part(v, produce_slow, NULL, 600, "inner");
	inner->aux = 600;
	struct sf_part *outer = sf_view_part(v, produce_outer, inner, 600, "outer");
	race_on(small, outer, 1, 0);
	sf_dcache_free(small);

	/* failures reach every waiting reader and are not cached */
	struct sf_part *bad = sf_view_part(v, produce_fail, NULL, 10, "bad");
	atomic_store(&produced, 0);
	race_on(c, bad, 8, -EIO);
	CHECK(atomic_load(&produced) >= 1);

	/* a part whose decoded size differs from what the file records is refused */
	struct sf_part *liar = sf_view_part(v, produce_slow, NULL, 99, "liar");
	liar->aux = 100;
	race_on(c, liar, 1, -EIO);

	CHECK(atomic_load(&counts.hits) > 0);
	CHECK(atomic_load(&counts.evictions) > 0);
	sf_dcache_free(c);
	sf_view_unref(v);
	CHECK_DONE();
}
