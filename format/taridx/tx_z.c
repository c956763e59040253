/* The seek index of a compressed tar and the decoded map over it (tx_z.h). */
#include "tx_z.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tx.h"
#include "sf_view_impl.h"

/* a gzip member gets a start point at the first block boundary this far
 * past the last one, so that a stretch is mostly one piece */
#define GZ_EVERY (TX_Z_PIECE - (512u << 10))
#define INBUF (256u << 10)
/* lz4's: its largest block (4 MiB), with its header and checksum and the
 * next header, read whole (tx_zdec's need) */
#define LZ4_INBUF ((4u << 20) + (64u << 10))
#define OUTBUF (256u << 10)
/* the pass's buffer: a gzip window, what it decodes, what the decoder
 * checking a start point decodes */
#define PASSBUF (TX_Z_WINDOW + 2 * OUTBUF)
/* an xz stream's index read for its blocks' start points, at most (a
 * larger one leaves the stream one start point) */
#define XZ_INDEX_MAX (16u << 20)
/* inside a zstd frame, start points keep the frame's window: one at most
 * every this many windows of decoded bytes, so that the windows stay an
 * eighth of the tar at most (less, compressed) */
#define ZSTD_EVERY 8u
/* a block that turned out no start point: the next tried this far on */
#define RETRY (1u << 20)
/* a piece read in order that was not let go at its turn is at the next
 * pieces', up to this many pieces back (produce) */
#define HELD_BACK 8u
/* and an archive's zstd windows, raw, stay within an eighth of the cache
 * budget (this much with none): the points are spread over the archive's
 * compressed bytes when it is large */
#define ZSTD_WINDOWS_SHARE 8u
#define ZSTD_WINDOWS_NOLIMIT (32u << 20)


struct zpiece {
	uint64_t out;        /* decoded offset */
	uint32_t start;      /* the start point it is decoded from */
	struct sf_part *part;
};

/* A decoder reading the archive from some point: its input buffer, and
 * the decoded offset it has reached. */
struct zcur {
	struct tx_zdec d;
	/* an xz block's options: its decoder keeps a pointer to them and
	 * reads them at the block's end (sizes, check), so they live here */
	lzma_block xzb;
	lzma_filter xzf[LZMA_FILTERS_MAX + 1];
	uint32_t start;
	bool one_block;     /* an xz block decoder: it ends with its block */
	uint64_t out;
	uint64_t in;        /* archive offset of the byte after buf's */
	uint8_t *buf;
	size_t pos, len;
	uint64_t charged;
};

/* A seek index shared by the maps of one archive file (hard links, a view
 * made anew: tx_walked.c), charged once, freed with its last holder. */
struct tx_zseek {
	atomic_uint refs;
	struct tx_zstart *st;  /* nst start points, then one past the end */
	size_t nst;
	int wfd;               /* the kept file their windows were left in, or -1 */
	struct sf_cache *cache;
	uint64_t charged;      /* to cache, for st and its windows */
	const char *kept;      /* what became of it in --index-dir */
	char *damage;          /* why the archive is cut short, or NULL */
};

struct tx_z {
	struct sf_map *src;
	enum tx_zcodec codec;
	/* nst start points, then one past the end: built by this map's pass
	 * (or read from --index-dir) until published in seek, which then
	 * holds them */
	struct tx_zstart *st;
	size_t nst;
	int wfd;
	struct tx_zseek *seek;
	char *damage;          /* the pass's, until published in seek */
	struct zpiece *pc;     /* npc pieces, then one at the end */
	size_t npc;
	struct sf_cache *cache;
	struct sf_progress *pr; /* the host's counters (bytes_skipped), or NULL */
	uint64_t charged;
	pthread_mutex_t lock;  /* guards cur and last, never held over work */
	struct zcur *cur;      /* left where the last piece it made ends */
	/* a cursor let go of (cur_keep), its buffer and decoder's memory,
	 * still charged, for the next to start in (fresh pages cost a fault
	 * each) */
	struct zcur *spare;
	/* cur and spare as a charge the cache drops when short (cur_drop) */
	struct sf_idle idle;
	struct sf_buf *last;   /* the last piece read (a walk reads one in turns) */
	size_t last_piece;
	size_t made;           /* the last piece begun, + 1 (0: none) */
	uint64_t run;          /* the bytes of the pieces begun in order up to it */
	size_t held;           /* the first piece of that run the cache may still hold */
	int keepfd;            /* where the index is kept (--index-dir), or -1 */
	int keeptop;           /* --index-dir's top, or -1 (tx_zkeep_load) */
	char *keepname;
	const char *kept;      /* what became of it there, for info */
	struct tx_built kept_walk; /* what the walk built, read from there, until taken */
	/* the header blocks a listing reads (the walk's, shared), and the
	 * chunk of them decoded last (under lock) */
	struct sf_buf *heads, *hchunk;
	uint64_t hchunk_i;
	atomic_uint_fast64_t heads_len; /* heads' bytes, for info */
};

/* ---- a cursor over the archive ----------------------------------------- */

/* A cursor's input buffer. */
static size_t inbuf(const struct tx_z *z)
{
	return z->codec == TX_Z_LZ4 ? LZ4_INBUF : INBUF;
}

static void cur_free(struct tx_z *z, struct zcur *c)
{
	if (!c)
		return;
	tx_zdec_end(&c->d);
	if (c->charged)
		sf_cache_uncharge(z->cache, c->charged);
	free(c->buf);
	free(c);
}

/* Starts c's decoder at the xz block whose header is at st->in (read
 * here; c then reads after it). 0, -ENOMEM, -EIO with *why, or as
 * sf_map_read. */
static int xz_block_begin(const struct tx_z *z, struct zcur *c, const struct tx_zstart *st,
			  const char **why, struct sf_err *e)
{
	uint8_t hdr[1024];
	int rc = sf_map_read(z->src, st->in, 1, hdr, "xz block header", e);
	lzma_block *b = &c->xzb;
	*b = (lzma_block){ .version = 1, .check = (lzma_check)st->check, .filters = c->xzf,
			   .header_size = lzma_block_header_size_decode(hdr[0]) };
	if (!rc && (!hdr[0] || b->header_size > z->src->size - st->in))
		rc = -EIO;
	if (!rc)
		rc = sf_map_read(z->src, st->in, b->header_size, hdr, "xz block header", e);
	if (rc)
		return *why = "an xz block header the index points at cannot be read", rc;
	/* an xz decoder starts again in the memory it has (tx_zdec_begin) */
	if (!c->d.live || c->d.c != TX_Z_XZ) {
		tx_zdec_end(&c->d);
		memset(&c->d, 0, sizeof c->d);
		c->d.c = TX_Z_XZ;
		c->d.xz = (lzma_stream)LZMA_STREAM_INIT;
	}
	if (lzma_block_header_decode(b, NULL, hdr) != LZMA_OK)
		return *why = "an xz block header the index points at is corrupt", -EIO;
	lzma_ret r = lzma_block_decoder(&c->d.xz, b);
	lzma_filters_free(c->xzf, NULL);
	if (r != LZMA_OK)
		return r == LZMA_MEM_ERROR ? -ENOMEM : (*why = "an xz block it cannot decode", -EIO);
	c->d.live = true;
	c->one_block = true;
	c->in = st->in + b->header_size;
	return 0;
}

/* The cache's drop of z's kept cursors and piece at hand (sf_idle): those
 * in z are not in use (a decode takes its cursor out), and the next piece
 * starts a new one at its start point. Without it a view read once holds
 * its decoders' memory (13.7 MB for lz4) while another archive's pass or
 * read waits for room, then fails. */
static bool cur_drop(struct sf_idle *i)
{
	struct tx_z *z = (struct tx_z *)((char *)i - offsetof(struct tx_z, idle));
	pthread_mutex_lock(&z->lock);
	struct zcur *c = z->cur, *spare = z->spare;
	struct sf_buf *last = z->last;
	z->cur = z->spare = NULL;
	z->last = NULL;
	pthread_mutex_unlock(&z->lock);
	cur_free(z, c);
	cur_free(z, spare);
	sf_buf_unref(last); /* the piece at hand, which the cache may then evict */
	return true;
}

/* Offers z's kept cursors to the cache as a charge it may drop (z->lock
 * not held: the cache's drop takes it), as recently used. */
static void cur_offer(struct tx_z *z)
{
	sf_cache_idle(z->cache, &z->idle, true);
}

/* Lets go of cursor c (one that did not fail): kept as z's spare when it
 * has none. */
static void cur_keep(struct tx_z *z, struct zcur *c)
{
	pthread_mutex_lock(&z->lock);
	bool kept = c && !z->spare;
	if (kept) {
		z->spare = c;
		c = NULL;
	}
	pthread_mutex_unlock(&z->lock);
	cur_free(z, c);
	if (kept)
		cur_offer(z);
}

/* A cursor at start point s, its decoder's memory charged: the spare's
 * buffer and decoder when there is one. */
static int cur_new(struct tx_z *z, uint32_t s, struct zcur **out, struct sf_err *e)
{
	const struct tx_zstart *st = &z->st[s];
	pthread_mutex_lock(&z->lock);
	struct zcur *c = z->spare;
	z->spare = NULL;
	pthread_mutex_unlock(&z->lock);
	if (c) {
		if (c->charged)
			sf_cache_uncharge(z->cache, c->charged);
		c->charged = 0;
		c->pos = c->len = 0;
		c->one_block = false;
	} else if (!(c = calloc(1, sizeof *c)) || !(c->buf = malloc(inbuf(z)))) {
		free(c);
		return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	}
	c->start = s;
	c->out = st->out;
	c->in = st->in;
	uint64_t mem = st->mem + inbuf(z);
	int rc = sf_cache_charge(z->cache, mem, z->src->path, "a decoder", e);
	if (!rc)
		c->charged = z->cache->charge ? mem : 0;
	/* a window left in the kept file is read for the decoder to start
	 * from, and let go once it has (it keeps what it needs) */
	struct tx_zstart at = *st;
	uint8_t *win = NULL;
	if (!rc && at.wlen && !at.win) {
		int wfd = z->seek ? z->seek->wfd : z->wfd;
		rc = tx_zkeep_window(wfd, z->src->path, st, &win, e);
		at.win = win;
		/* a damaged file is not read again: the next open builds it anew */
		if (rc == -EIO)
			tx_zkeep_forget(wfd, z->keepfd, z->keeptop, z->keepname);
	}
	const char *why = NULL;
	if (!rc && (rc = st->block && z->codec == TX_Z_XZ ? xz_block_begin(z, c, st, &why, e) :
			 tx_zdec_begin(&c->d, z->codec, &at, &why)))
		rc = rc == -ENOMEM ? sf_fail(e, rc, "%s: out of memory", z->src->path) :
		     rc == -EIO && why ? sf_fail(e, rc, "%s: at byte %llu: %s", z->src->path,
						 (unsigned long long)st->in, why) : rc;
	free(win);
	if (rc) {
		cur_free(z, c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Refills c's buffer from the archive: INBUF bytes, the whole of a larger
 * input the decoder asks next (read once, not again as the next block's
 * start), or all the buffer holds at a start point (lz4: its first
 * block). 0, 1 at the archive's end, or as sf_map_read. */
static int cur_fill(const struct tx_z *z, struct zcur *c, struct sf_err *e)
{
	uint64_t want = !c->d.need ? inbuf(z) :
			c->d.need > INBUF && c->d.need <= inbuf(z) ? c->d.need : INBUF;
	uint64_t k = z->src->size - c->in < want ? z->src->size - c->in : want;
	if (!k)
		return 1;
	int rc = sf_map_read(z->src, c->in, k, c->buf, "compressed data", e);
	if (rc)
		return rc;
	c->in += k;
	c->pos = 0;
	c->len = (size_t)k;
	return 0;
}

static int truncated(const struct tx_z *z, const struct zcur *c, struct sf_err *e)
{
	return sf_fail(e, -EIO, "%s: the %s stream ends early at byte %llu (truncated)", z->src->path,
		       tx_z_name(z->codec), (unsigned long long)c->in);
}

static int corrupt(const struct tx_z *z, const struct zcur *c, int rc, const char *why,
		   struct sf_err *e)
{
	return sf_fail(e, rc, "%s: %s data before byte %llu: %s", z->src->path, tx_z_name(z->codec),
		       (unsigned long long)(c->in - (c->len - c->pos)), why);
}

/* A decoder that neither takes input nor gives output: never looped on. */
static int stuck(const struct tx_z *z, const struct zcur *c, struct sf_err *e)
{
	return sf_fail(e, -EIO, "%s: the %s decoder makes no progress at byte %llu", z->src->path,
		       tx_z_name(z->codec), (unsigned long long)(c->in - (c->len - c->pos)));
}

/* Decodes the next n bytes at c into dst. 1 when the stream ended first
 * (having decoded *got bytes), 0, or a negative errno. */
static int cur_read(struct tx_z *z, struct zcur *c, uint8_t *dst, uint64_t n, uint64_t *got,
		    struct sf_err *e)
{
	uint64_t done = 0;
	int rc = 0;
	while (done < n) {
		/* the block the decoder asks next is read again whole, from
		 * where it stopped, rather than given in parts */
		if (c->d.need > c->len - c->pos && c->d.need <= inbuf(z) && c->pos) {
			c->in -= c->len - c->pos;
			c->pos = c->len;
		}
		if (c->pos == c->len && (rc = cur_fill(z, c, e))) {
			rc = rc > 0 ? truncated(z, c, e) : rc;
			break;
		}
		size_t il = c->len - c->pos, ol = (size_t)(n - done);
		const char *why = NULL;
		rc = tx_zdec_step(&c->d, c->buf + c->pos, &il, dst + done, &ol, false, &why);
		c->pos += il;
		done += ol;
		c->out += ol;
		if (rc < 0) {
			rc = corrupt(z, c, rc, why, e);
			break;
		}
		if (rc > 0)
			break;
		if (!il && !ol) {
			rc = stuck(z, c, e);
			break;
		}
	}
	*got = done;
	return rc;
}

/* ---- pieces ------------------------------------------------------------ */

/* The bytes of a piece (the last of a stretch shorter): TX_Z_PIECE, half
 * that in zstd, whose decoder makes 2 MiB in under 2 ms here, so that a
 * reader waits half as long for its piece's first bytes and a read in
 * order waits on smaller steps (performance.md, lever 26). lz4's pieces
 * are its blocks of 4 MiB, and gzip's and xz's start points are spaced
 * for TX_Z_PIECE. */
static uint64_t piece_len(const struct tx_z *z)
{
	return z->codec == TX_Z_ZSTD ? TX_Z_PIECE / 2 : TX_Z_PIECE;
}

/* Whether a decoder starts at start point s cheaply: anywhere but a zstd
 * block inside a frame, whose window (2 MiB and more) costs more to
 * restore than a piece to decode (3 against 1.5-2.5 ms for a 2 MiB piece
 * here, traced). */
static bool start_cheap(const struct tx_z *z, uint32_t s)
{
	return !z->st[s].wlen || z->codec == TX_Z_GZIP;
}

/* Whether cursor c decodes the stretch of start point s: its own, or one
 * later in the same stream (every start point between them inside it),
 * and is worth going on with: it stands in that stretch, or, before a
 * start point that is costly to start at, a piece before it at most. A
 * cursor further back would decode what a decoder started at s skips. */
static bool cur_reaches(const struct tx_z *z, const struct zcur *c, uint32_t s)
{
	if (s < c->start || (c->one_block && s != c->start))
		return false;
	if (c->out + (start_cheap(z, s) ? 0 : piece_len(z)) < z->st[s].out)
		return false;
	for (uint32_t i = c->start + 1; i <= s; i++)
		if (!z->st[i].block && !z->st[i].wlen)
			return false;
	return true;
}

/* The piece holding decoded byte off (below the size). */
static size_t piece_of(const struct tx_z *z, uint64_t off)
{
	size_t lo = 0, hi = z->npc;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (z->pc[mid].out <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* A piece's bytes: from the cursor left where the last piece ended when
 * this one follows it, else from its start point, skipping what lies
 * before it. The cursor is taken out under the lock and put back after:
 * no lock is held while decoding. A piece begun right after the one
 * before it (a member or a walk read in order), once the pieces begun in
 * order hold TX_Z_PIECE bytes, names the next to the
 * cache (sf_cache_ahead), which decodes it on another thread while the
 * reader copies out this one: at once when it begins a start point a
 * decoder starts at cheaply (so that the two decode on two CPUs), else
 * once the cursor is back for it to go on from (sf_cache_after: a piece
 * decoded ahead is followed on the same thread). A piece read out of turn
 * names none, so random reads
 * decode no more. In such a run, the pieces before this one whose next a
 * reader has got are let go (sf_cache_drop): their reader is past them
 * and the kernel holds their pages, and their memory makes the next
 * pieces (sf_cache_buf) rather than fresh pages that each cost a fault.
 * One not let go yet (held by a reply, its next not got) is at a later
 * piece's turn: were it left to the cache's eviction, every piece after
 * would take fresh pages. */
static int produce(const struct sf_part *part, struct sf_cache *cache, struct sf_buf **out,
		   struct sf_err *e)
{
	struct tx_z *z = part->arg;
	const struct zpiece *p = &z->pc[part->aux];
	uint64_t len = p[1].out - p->out;
	struct sf_part *next = part->aux + 1 < z->npc ? p[1].part : NULL;
	/* at a costly start point the cursor goes on across it instead: the
	 * CPU restoring the window would be the reader's copy's */
	bool alone = next && p[1].out == z->st[p[1].start].out && start_cheap(z, p[1].start);
	pthread_mutex_lock(&z->lock);
	/* the cursor goes on where it stopped (or skips on to the piece),
	 * across a start point inside its stream too; one that cannot is
	 * ended before another begins */
	struct zcur *c = z->cur, *stale = NULL;
	z->cur = NULL;
	if (c && !(c->out <= p->out && cur_reaches(z, c, p->start))) {
		stale = c;
		c = NULL;
	}
	if (c)
		c->start = p->start;
	/* a reader in order for TX_Z_PIECE bytes at least: not the few fine
	 * pieces of one member read at random */
	bool in_run = part->aux && z->made == part->aux;
	z->run = in_run ? z->run + len : len;
	if (!in_run)
		z->held = part->aux;
	if (!in_run || z->run < TX_Z_PIECE)
		next = NULL;
	/* [from, to): the pieces to let go; one held that far back stays
	 * the cache's to evict */
	size_t to = next ? part->aux : 0;
	size_t from = to > HELD_BACK && z->held < to - HELD_BACK ? to - HELD_BACK : z->held;
	z->made = part->aux + 1;
	pthread_mutex_unlock(&z->lock);
	cur_keep(z, stale);
	size_t gone = from;
	for (size_t i = from; i < to; i++)
		if (sf_cache_drop(cache, z->pc[i].part, z->pc[i + 1].part) && gone == i)
			gone = i + 1;
	if (gone > from) {
		pthread_mutex_lock(&z->lock);
		if (z->held < gone && z->held >= from)
			z->held = gone;
		pthread_mutex_unlock(&z->lock);
	}
	if (next && alone)
		sf_cache_ahead(cache, next);
	int rc = c ? 0 : cur_new(z, p->start, &c, e);
	struct sf_buf *b = rc ? NULL : sf_cache_buf(cache, (size_t)len);
	uint64_t got = 0;
	if (!rc && !b)
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	/* what lies before the piece is decoded into its buffer, a piece at
	 * a time (in turns as large as the buffer: a small scratch costs the
	 * decoder a copy and a call per few kB), and each piece decoded whole
	 * is offered to the cache, so that a read of it later decodes nothing:
	 * the buffer is then the cache's, and another takes its place */
	while (!rc && c->out < p->out) {
		const struct zpiece *q = &z->pc[piece_of(z, c->out)];
		uint64_t k = q[1].out - c->out < len ? q[1].out - c->out : len;
		bool whole = q->out == c->out && q[1].out - q->out <= len;
		if ((rc = cur_read(z, c, b->data, k, &got, e)) > 0)
			rc = sf_fail(e, -EIO, "%s: a stream ends before decoded byte %llu, where the index says it goes on",
				     z->src->path, (unsigned long long)p->out);
		b->len = (size_t)k;
		if (!rc && whole && sf_cache_keep(cache, q->part, b)) {
			sf_buf_unref(b);
			if (!(b = sf_cache_buf(cache, (size_t)len)))
				rc = sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
		} else {
			b->len = (size_t)len;
			SF_PROGRESS_ADD(z->pr, bytes_skipped, got);
		}
	}
	if (!rc && (rc = cur_read(z, c, b->data, len, &got, e)) > 0 && got < len)
		rc = sf_fail(e, -EIO, "%s: a stream ends before decoded byte %llu, where the index says it goes on",
			     z->src->path, (unsigned long long)(p->out + got));
	if (rc > 0)
		rc = 0;
	if (rc) {
		sf_buf_unref(b);
		cur_free(z, c);
		return rc;
	}
	/* of two cursors (a piece decoded ahead beside its reader's), the
	 * one further on is kept: a reader in order comes there next */
	pthread_mutex_lock(&z->lock);
	struct zcur *old = z->cur;
	if (old && old->out > c->out) {
		old = c;
	} else {
		z->cur = c;
	}
	pthread_mutex_unlock(&z->lock);
	cur_keep(z, old);
	cur_offer(z);
	*out = b;
	if (next && !alone)
		sf_cache_after(cache, next);
	return 0;
}

/* The map's read hook: copies from the pieces, the last one kept at hand. */
static int zread(const struct sf_map *m, uint64_t off, uint64_t len, void *dst, const char *what,
		 struct sf_err *e)
{
	(void)what;
	struct tx_z *z = m->src;
	uint8_t *to = dst;
	while (len) {
		size_t i = piece_of(z, off);
		struct sf_buf *b = NULL;
		pthread_mutex_lock(&z->lock);
		if (z->last && z->last_piece == i)
			b = sf_buf_ref(z->last);
		pthread_mutex_unlock(&z->lock);
		if (!b) {
			int rc = sf_part_get(z->cache, z->pc[i].part, &b, e);
			if (rc)
				return rc;
			pthread_mutex_lock(&z->lock);
			struct sf_buf *old = z->last;
			z->last = sf_buf_ref(b);
			z->last_piece = i;
			pthread_mutex_unlock(&z->lock);
			sf_buf_unref(old);
			cur_offer(z);
		}
		uint64_t at = off - z->pc[i].out, k = b->len - at < len ? b->len - at : len;
		memcpy(to, b->data + at, (size_t)k);
		sf_buf_unref(b);
		to += k;
		off += k;
		len -= k;
	}
	return 0;
}

/* m's compressed tar, or NULL: a plain map, or the walk's beside a pass
 * (tx_zfeed.c), whose read hook is another */
static struct tx_z *z_of(const struct sf_map *m)
{
	return m && m->read == zread ? m->src : NULL;
}

int tx_add_bytes(struct sf_node *n, const struct sf_map *m, uint64_t off, uint64_t len)
{
	if (!m->read)
		return sf_file_add_map(n, m->data + off, len);
	const struct tx_z *z = m->src;
	for (size_t i = len ? piece_of(z, off) : 0; len; i++) {
		uint64_t at = off - z->pc[i].out, k = z->pc[i + 1].out - off < len ? z->pc[i + 1].out - off : len;
		if (sf_file_add_part(n, z->pc[i].part, at, k))
			return -ENOMEM;
		off += k;
		len -= k;
	}
	return 0;
}

/* ---- the pass ---------------------------------------------------------- */

/* The pass's state. */
struct pass {
	struct tx_z *z;
	struct zcur *c;
	/* TX_Z_WINDOW bytes of window, then OUTBUF decoded, then OUTBUF the
	 * checking decoder's (ver) */
	uint8_t *out;
	uint64_t wfill;        /* bytes decoded in the stream */
	uint64_t last;         /* decoded offset of the last start point */
	size_t cap;
	size_t sstart;         /* the stream's start point */
	struct sf_progress *pr;
	struct tx_zfeed *feed;  /* the walk beside it, or NULL */
	/* the archive is damaged (cut short, corrupt, garbage after it);
	 * exact: every byte decoded is right (cut short, garbage after) */
	bool damaged, exact;
	/* zstd, lz4: the frame's blocks, the next one's start where the
	 * decoder stops once it gave all it decoded (flushed). A start point
	 * made at a block holds once a decoder started there (ver, beside the
	 * pass) gave the frame's bytes up to the next one or the frame's end;
	 * else it is dropped: the walk is by untrusted headers, and a zstd
	 * block may use its frame's tables and offsets from before it */
	struct tx_zwalk walk;
	bool flushed;
	struct zcur *ver;
	uint64_t retry;        /* no start point tried before this decoded offset */
	/* zstd: the frame's last walk.window bytes decoded (a ring), then as
	 * many to lay them out in order */
	uint8_t *ring;
	uint64_t rsize, rcharged;
};

static int charge(struct tx_z *z, uint64_t bytes, struct sf_err *e)
{
	int rc = sf_cache_charge(z->cache, bytes, z->src->path, "its seek index", e);
	if (!rc && z->cache->charge)
		z->charged += bytes;
	return rc;
}

/* What a piece and its part hold. */
#define PIECE_COST (sizeof(struct zpiece) + sizeof(struct sf_part) + 16)

/* What a start point holds, the pieces of the map that made it (two at
 * most, a piece being under TX_Z_PIECE) and their parts included. */
static uint64_t start_cost(uint32_t wlen)
{
	return sizeof(struct tx_zstart) + 2 * PIECE_COST + wlen;
}

/* Adds a start point, with wn bytes of window win (or none), kept
 * compressed. */
static int add_start(struct pass *ps, uint64_t in, uint64_t out, const uint8_t *win, size_t wn,
		     uint8_t bits, uint8_t byte, struct sf_err *e)
{
	struct tx_z *z = ps->z;
	if (z->nst + 1 >= UINT32_MAX)
		return sf_fail(e, -E2BIG, "%s: more than 2^32 streams", z->src->path);
	if (sf_grow(&z->st, &ps->cap, z->nst, sizeof *z->st, 64))
		return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	struct tx_zstart *s = &z->st[z->nst];
	*s = (struct tx_zstart){ .in = in, .out = out, .bits = bits, .byte = byte };
	uint64_t cost = start_cost(0);
	if (win) {
		size_t cap = ZSTD_compressBound(wn);
		uint8_t *w = malloc(cap);
		size_t n = w ? ZSTD_compress(w, cap, win, wn, 1) : 0;
		if (!w || ZSTD_isError(n)) {
			free(w);
			return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
		}
		uint8_t *fit = realloc(w, n);
		s->win = fit ? fit : w;
		s->wlen = (uint32_t)n;
		cost += n;
	}
	z->nst++;
	ps->last = out;
	return charge(z, cost, e);
}

/* Keeps the last TX_Z_WINDOW bytes decoded in the member in ps->out. */
static void window_push(struct pass *ps, const uint8_t *p, size_t n)
{
	if (n >= TX_Z_WINDOW) {
		memcpy(ps->out, p + n - TX_Z_WINDOW, TX_Z_WINDOW);
	} else {
		memmove(ps->out, ps->out + n, TX_Z_WINDOW - n);
		memcpy(ps->out + TX_Z_WINDOW - n, p, n);
	}
}

/* Keeps the last walk.window bytes decoded in the zstd frame in the ring
 * (before ps->wfill counts them). */
static void ring_push(struct pass *ps, const uint8_t *p, size_t n)
{
	uint64_t w = ps->walk.window, at = ps->wfill;
	if (n > w) {
		p += n - w;
		at += n - w;
		n = (size_t)w;
	}
	while (n) {
		size_t o = (size_t)(at % w), k = n < w - o ? n : (size_t)(w - o);
		memcpy(ps->ring + o, p, k);
		p += k;
		at += k;
		n -= k;
	}
}

/* The frame's window in order, after the ring: its length. */
static size_t ring_window(struct pass *ps)
{
	uint64_t w = ps->walk.window, n = ps->wfill < w ? ps->wfill : w;
	size_t o = (size_t)((ps->wfill - n) % w), k = n < w - o ? (size_t)n : (size_t)(w - o);
	memcpy(ps->ring + w, ps->ring + o, k);
	memcpy(ps->ring + w + k, ps->ring, (size_t)n - k);
	return (size_t)n;
}

/* After an xz stream that ends at `end` (checked whole by its decoder,
 * index included): a start point at each of its blocks but the first,
 * from its index. A stream whose index is too large or cannot be read
 * keeps its one start point. */
static int xz_blocks(struct pass *ps, uint64_t end, struct sf_err *e)
{
	struct tx_z *z = ps->z;
	const struct tx_zstart s = z->st[z->nst - 1];
	uint8_t foot[LZMA_STREAM_HEADER_SIZE];
	lzma_stream_flags ff;
	if (end - s.in < 2 * LZMA_STREAM_HEADER_SIZE ||
	    sf_map_read(z->src, end - sizeof foot, sizeof foot, foot, "xz stream footer", e) ||
	    lzma_stream_footer_decode(&ff, foot) != LZMA_OK || ff.backward_size > XZ_INDEX_MAX ||
	    ff.backward_size > end - s.in - 2 * LZMA_STREAM_HEADER_SIZE)
		return 0;
	/* a record takes at least 2 bytes of the index, and liblzma about
	 * 16 for its block */
	size_t n = (size_t)ff.backward_size, pos = 0;
	uint64_t memlimit = 8 * (uint64_t)n + (64u << 10), cost = n + memlimit;
	if (sf_cache_charge(z->cache, cost, z->src->path, "an xz index", e))
		return 0;
	int rc = 0;
	uint8_t *buf = malloc(n);
	lzma_index *ix = NULL;
	if (buf && !sf_map_read(z->src, end - sizeof foot - n, n, buf, "xz index", e) &&
	    lzma_index_buffer_decode(&ix, &memlimit, NULL, buf, &pos, n) == LZMA_OK) {
		lzma_index_iter it;
		lzma_index_iter_init(&it, ix);
		while (!rc && !lzma_index_iter_next(&it, LZMA_INDEX_ITER_BLOCK)) {
			if (it.block.number_in_stream == 1)
				continue; /* where the stream starts */
			rc = add_start(ps, s.in + it.block.compressed_stream_offset,
				       s.out + it.block.uncompressed_stream_offset, NULL, 0, 0, 0, e);
			if (!rc) {
				z->st[z->nst - 1].block = true;
				z->st[z->nst - 1].check = (uint8_t)ff.check;
				z->st[z->nst - 1].mem = s.mem;
			}
		}
		lzma_index_end(ix, NULL);
	}
	free(buf);
	sf_cache_uncharge(z->cache, z->cache->charge ? cost : 0);
	return rc;
}

/* Forgets start point i's window and charge (the points from it on are
 * being dropped). */
static void start_forget(struct tx_z *z, size_t i)
{
	uint64_t cost = start_cost(z->st[i].wlen);
	free(z->st[i].win);
	z->st[i].win = NULL;
	if (z->cache->charge) {
		sf_cache_uncharge(z->cache, cost);
		z->charged -= cost;
	}
}

/* The start point made at a block is no start point: dropped, and the
 * next block tried RETRY on. */
static void block_drop(struct pass *ps)
{
	struct tx_z *z = ps->z;
	cur_free(z, ps->ver);
	ps->ver = NULL;
	start_forget(z, --z->nst);
	ps->last = z->st[z->nst - 1].out;
	ps->retry = ps->c->out + RETRY;
}

/* At a stream's start: the walk over its blocks (zstd, lz4), and for
 * zstd a ring as large as its window, charged; a frame whose window the
 * budget refuses gets no start point inside it. */
static void frame_begin(struct pass *ps)
{
	struct tx_z *z = ps->z;
	ps->sstart = z->nst - 1;
	ps->flushed = false;
	ps->retry = 0;
	ps->walk.next = UINT64_MAX;
	if (z->codec == TX_Z_ZSTD || z->codec == TX_Z_LZ4)
		tx_zwalk_frame(&ps->walk, z->src, z->codec, z->st[ps->sstart].in);
	if (z->codec != TX_Z_ZSTD || ps->walk.next == UINT64_MAX || ps->walk.window <= ps->rsize)
		return;
	struct sf_err ignored;
	uint64_t more = 2 * (ps->walk.window - ps->rsize);
	uint8_t *r = NULL;
	if (sf_cache_charge(z->cache, more, z->src->path, "a zstd window", &ignored) ||
	    !(r = realloc(ps->ring, 2 * ps->walk.window))) {
		if (z->cache->charge && !r)
			sf_cache_uncharge(z->cache, more);
		ps->walk.next = UINT64_MAX;
		return;
	}
	ps->ring = r;
	ps->rcharged += z->cache->charge ? more : 0;
	ps->rsize = ps->walk.window;
}

/* At the block whose header is at `at`, the decoder having given all it
 * decoded before it: a start point is made here when the last is far
 * enough back, with a decoder started here to check it (ver); the point
 * before it then holds (its checking decoder gave every byte up to here).
 * A point the budget or the decoder refuses is not made, and the one
 * before goes on being checked. */
static void at_block(struct pass *ps, uint64_t at)
{
	struct tx_z *z = ps->z;
	struct zcur *c = ps->c, *ver = NULL;
	uint64_t every = z->codec == TX_Z_ZSTD && ZSTD_EVERY * ps->walk.window > GZ_EVERY ?
			 ZSTD_EVERY * ps->walk.window : GZ_EVERY, in_every = 0;
	if (z->codec == TX_Z_ZSTD) {
		uint64_t held = z->cache->limit ? z->cache->limit / ZSTD_WINDOWS_SHARE : ZSTD_WINDOWS_NOLIMIT,
			 k = held / ps->walk.window;
		in_every = k ? z->src->size / k : UINT64_MAX;
	}
	struct sf_err ignored;
	size_t had = z->nst;
	if (ps->wfill && c->out - ps->last >= every && c->out >= ps->retry &&
	    at - z->st[z->nst - 1].in >= in_every) {
		size_t wn = z->codec == TX_Z_ZSTD ? ring_window(ps) : 0;
		int rc = add_start(ps, at, c->out, wn ? ps->ring + ps->walk.window : NULL, wn, 0, 0,
				   &ignored);
		if (!rc) {
			struct tx_zstart *s = &z->st[z->nst - 1];
			s->block = true;
			s->byte = ps->walk.bd;
			s->check = ps->walk.flg;
			s->mem = tx_zdec_mem(&c->d) + wn;
			rc = cur_new(z, (uint32_t)(z->nst - 1), &ver, &ignored);
			if (rc)
				start_forget(z, z->nst - 1);
		}
		if (rc && z->nst > had) {
			/* made, but refused (its charge given back, or never taken) */
			free(z->st[--z->nst].win);
			ps->last = z->st[z->nst - 1].out;
		}
		if (rc) {
			ps->retry = c->out + RETRY;
		} else {
			cur_keep(z, ps->ver);
			ps->ver = ver;
		}
	}
	tx_zwalk_step(&ps->walk, z->src, z->codec);
}

/* The checking decoder gives the n bytes the pass just decoded, or its
 * start point is dropped. */
static void block_check(struct pass *ps, const uint8_t *p, size_t n)
{
	struct sf_err ignored;
	uint64_t got = 0;
	uint8_t *mine = ps->out + TX_Z_WINDOW + OUTBUF;
	if (ps->ver && n && (cur_read(ps->z, ps->ver, mine, n, &got, &ignored) < 0 || got != n ||
			     memcmp(mine, p, n)))
		block_drop(ps);
}

/* Decodes one stream from the cursor's point to its end, adding start
 * points inside gzip members and zstd and lz4 frames. */
static int pass_stream(struct pass *ps, struct sf_err *e)
{
	struct tx_z *z = ps->z;
	struct zcur *c = ps->c;
	bool gz = z->codec == TX_Z_GZIP;
	ps->wfill = 0;
	frame_begin(ps);
	for (;;) {
		if (c->pos == c->len) {
			int rc = cur_fill(z, c, e);
			if (rc > 0)
				ps->damaged = ps->exact = true;
			if (rc)
				return rc > 0 ? truncated(z, c, e) : rc;
			if (ps->pr)
				atomic_fetch_add_explicit(&ps->pr->bytes_walked, c->len, memory_order_relaxed);
		}
		size_t il = c->len - c->pos, ol = OUTBUF;
		/* a decoder given the input up to a block's header only stops
		 * there; a call with none then gives what it still holds */
		uint64_t at = c->in - (c->len - c->pos);
		if (ps->walk.next < at)
			ps->walk.next = UINT64_MAX;
		if (ps->walk.next == at && ps->flushed)
			at_block(ps, at);
		bool hold = ps->walk.next - at < il;
		if (hold)
			il = (size_t)(ps->walk.next - at);
		const char *why = NULL;
		int rc = tx_zdec_step(&c->d, c->buf + c->pos, &il, ps->out + TX_Z_WINDOW, &ol, gz, &why);
		c->pos += il;
		if (c->out + ol < c->out)
			return sf_fail(e, -EFBIG, "%s: decodes to more than 2^64 bytes", z->src->path);
		c->out += ol;
		if (ps->feed)
			tx_zfeed_push(ps->feed, ps->out + TX_Z_WINDOW, ol);
		ps->flushed = ol < OUTBUF;
		bool idle = !il && !ol && !rc && !(hold && ps->walk.next == at);
		ps->damaged = rc == -EIO || idle;
		if (rc < 0)
			return corrupt(z, c, rc, why, e);
		if (idle)
			return stuck(z, c, e);
		/* the decoder's memory (a zstd window, an xz dictionary) is
		 * known once a stream's header is read: held in the budget */
		uint64_t mem = tx_zdec_mem(&c->d);
		if (z->cache->charge && mem + inbuf(z) > c->charged) {
			int cr = sf_cache_charge(z->cache, mem + inbuf(z) - c->charged, z->src->path,
						 "a decoder", e);
			if (cr)
				return cr;
			c->charged = mem + inbuf(z);
		}
		if (gz)
			window_push(ps, ps->out + TX_Z_WINDOW, ol);
		else if (ps->rsize && ps->walk.next != UINT64_MAX)
			ring_push(ps, ps->out + TX_Z_WINDOW, ol);
		ps->wfill += ol;
		block_check(ps, ps->out + TX_Z_WINDOW, ol);
		struct tx_zstart *s0 = &z->st[ps->sstart];
		s0->mem = mem > s0->mem ? mem : s0->mem;
		if (rc > 0) {
			/* a start point made inside the frame holds to its end */
			cur_keep(z, ps->ver);
			ps->ver = NULL;
			return z->codec == TX_Z_XZ ? xz_blocks(ps, c->in - (c->len - c->pos), e) : 0;
		}
		/* a block's end (bit 128), not the last block's (bit 64) */
		if (gz && (c->d.gz.data_type & 128) && !(c->d.gz.data_type & 64) &&
		    c->out - ps->last >= GZ_EVERY && ps->wfill >= TX_Z_WINDOW) {
			uint64_t in = c->in - (c->len - c->pos);
			uint8_t bits = (uint8_t)(c->d.gz.data_type & 7);
			if (bits && !c->pos)
				return sf_fail(e, -EIO, "%s: internal: a start point's byte left the buffer", z->src->path);
			rc = add_start(ps, in, c->out, ps->out, TX_Z_WINDOW, bits,
				       bits ? c->buf[c->pos - 1] : 0, e);
			if (rc)
				return rc;
			z->st[z->nst - 1].mem = mem;
		}
	}
}

/* After a stream: zero padding is skipped (writers pad to a block), and
 * what follows must be another stream or nothing. 1 at the end, 0 with
 * *next at the next stream, or -EIO. */
static int pass_between(struct pass *ps, uint64_t *next, struct sf_err *e)
{
	struct tx_z *z = ps->z;
	struct zcur *c = ps->c;
	for (;;) {
		while (c->pos < c->len && !c->buf[c->pos])
			c->pos++;
		if (c->pos < c->len)
			break;
		int rc = cur_fill(z, c, e);
		if (rc)
			return rc;
	}
	uint64_t at = c->in - (c->len - c->pos);
	uint8_t head[6] = { 0 };
	size_t have = z->src->size - at < sizeof head ? (size_t)(z->src->size - at) : sizeof head;
	int rc = sf_map_read(z->src, at, have, head, "compressed data", e);
	if (rc)
		return rc;
	ps->damaged = ps->exact = tx_z_sniff(head, have) != z->codec;
	if (ps->damaged)
		return sf_fail(e, -EIO, "%s: trailing garbage at byte %llu after the last %s stream",
			       z->src->path, (unsigned long long)at, tx_z_name(z->codec));
	*next = at;
	return 0;
}

static void starts_free(struct tx_zstart *st, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(st[i].win);
	free(st);
}

void tx_zseek_put(struct tx_zseek *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	starts_free(s->st, s->nst);
	if (s->wfd >= 0)
		close(s->wfd);
	if (s->charged)
		sf_cache_uncharge(s->cache, s->charged);
	free(s->damage);
	free(s);
}

static void index_free(struct tx_z *z)
{
	/* out of the cache's reach first: a drop running ends before */
	sf_cache_idle(z->cache, &z->idle, false);
	cur_free(z, z->cur);
	cur_free(z, z->spare);
	z->spare = NULL;
	sf_buf_unref(z->last);
	if (z->seek) {
		tx_zseek_put(z->seek);
	} else {
		starts_free(z->st, z->nst);
		if (z->wfd >= 0)
			close(z->wfd);
	}
	z->seek = NULL;
	z->wfd = -1;
	free(z->damage);
	z->damage = NULL;
	free(z->pc);
	if (z->charged)
		sf_cache_uncharge(z->cache, z->charged);
	z->cur = NULL;
	z->last = NULL;
	z->st = NULL;
	z->pc = NULL;
	z->nst = z->npc = 0;
	z->charged = 0;
}

static void z_free(void *arg)
{
	struct tx_z *z = arg;
	if (!z)
		return;
	index_free(z);
	pthread_mutex_destroy(&z->lock);
	tx_built_drop(&z->kept_walk);
	sf_buf_unref(z->heads);
	sf_buf_unref(z->hchunk);
	if (z->keepfd >= 0)
		close(z->keepfd);
	if (z->keeptop >= 0)
		close(z->keeptop);
	free(z->keepname);
	sf_map_unref(z->src);
	free(z);
}

int tx_z_map(struct sf_map *src, enum tx_zcodec c, struct sf_map **out, struct sf_err *e)
{
	struct sf_map *m = calloc(1, sizeof *m);
	struct tx_z *z = calloc(1, sizeof *z);
	char *path = strdup(src->path);
	int fd = dup(src->fd);
	if (!m || !z || !path || fd < 0) {
		if (fd >= 0)
			close(fd);
		free(path);
		free(z);
		free(m);
		return sf_fail(e, -ENOMEM, "%s: out of memory", src->path);
	}
	pthread_mutex_init(&z->lock, NULL);
	z->src = sf_map_ref(src);
	z->codec = c;
	z->cache = &sf_nocache;
	z->idle.drop = cur_drop;
	z->keepfd = z->keeptop = z->wfd = -1;
	atomic_init(&m->refs, 1);
	m->st = src->st;
	m->path = path;
	m->fd = fd;
	m->recheck_ns = src->recheck_ns;
	m->read = zread;
	m->src = z;
	m->src_free = z_free;
	*out = m;
	return 0;
}

/* Cuts the stretches between start points into pieces, each a part;
 * `charged`: when the start points' charge (start_cost) counted two
 * pieces each (those past two, of a long stretch, are charged here),
 * else another map's pass made them and counted none. */
static int make_pieces(struct tx_z *z, struct sf_view *v, bool charged, struct sf_err *e)
{
	uint64_t n = 0, counted = charged ? 2 * (uint64_t)z->nst : 0;
	uint64_t len = piece_len(z);
	for (size_t s = 0; s < z->nst; s++)
		n += (z->st[s + 1].out - z->st[s].out + len - 1) / len;
	int rc = n > counted ? charge(z, (n - counted) * PIECE_COST, e) : 0;
	if (rc)
		return rc;
	if (n >= SIZE_MAX / sizeof *z->pc || !(z->pc = calloc((size_t)n + 1, sizeof *z->pc)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	for (size_t s = 0; s < z->nst; s++)
		for (uint64_t o = z->st[s].out; o < z->st[s + 1].out; o += len) {
			struct zpiece *p = &z->pc[z->npc];
			p->out = o;
			p->start = (uint32_t)s;
			uint64_t end = z->st[s + 1].out - o < len ? z->st[s + 1].out : o + len;
			if (!(p->part = sf_view_part(v, produce, z, end - o, "decoded tar")))
				return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
			p->part->aux = z->npc++;
		}
	z->pc[z->npc].out = z->st[z->nst].out;
	return 0;
}

int tx_z_keep_in(struct sf_map *m, int dirfd, int topfd, const char *name)
{
	struct tx_z *z = m->src;
	if (asprintf(&z->keepname, "%s.zidx", name) < 0) {
		z->keepname = NULL;
		return -ENOMEM;
	}
	z->keepfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	if (z->keepfd >= 0 && topfd >= 0 && (z->keeptop = fcntl(topfd, F_DUPFD_CLOEXEC, 0)) < 0) {
		close(z->keepfd);
		z->keepfd = -1;
	}
	return z->keepfd < 0 ? -errno : 0;
}

/* The seek index kept in --index-dir, when it is there and matches: 0,
 * 1 when there is none to use, or a negative errno. */
static int load_kept(struct tx_z *z, struct sf_err *e)
{
	struct tx_zstart *st;
	size_t n;
	uint64_t max = z->cache->limit ? z->cache->limit : UINT64_MAX;
	int rc = z->keepfd < 0 ? 1 :
		 tx_zkeep_load(z->keepfd, z->keeptop, z->keepname, z->src, z->codec, max, &st, &n, &z->wfd,
				 &z->kept_walk, e);
	if (rc)
		return rc;
	z->st = st;
	z->nst = n - 1;
	/* the windows stay in the file */
	return charge(z, n * start_cost(0), e);
}

/* A damaged archive keeps what lies before the damage, so that the
 * members wholly before it still read exactly: every byte decoded when
 * the archive was cut short or garbage follows its last stream, else the
 * streams before the one that failed (where in it the damage lies is not
 * known: its check covers it whole). *end is where the decoded tar then
 * ends; the reason (e's message) is kept for verify and errors. 0, or
 * -ENOMEM. */
static int salvage(struct pass *ps, uint64_t *end, struct sf_err *e)
{
	struct tx_z *z = ps->z;
	if (!ps->exact) {
		/* back to the start of the stream that failed: a gzip
		 * member's points inside it and xz blocks are no starts */
		size_t k = z->nst;
		while (k > 1 && (z->st[k - 1].wlen || z->st[k - 1].block))
			k--;
		k--;
		*end = z->st[k].out;
		for (size_t i = k; i < z->nst; i++)
			start_forget(z, i);
		z->nst = k;
	}
	if (asprintf(&z->damage, "%s: the view shows the members that end before decoded byte %llu",
		     e->msg, (unsigned long long)*end) < 0) {
		z->damage = NULL;
		return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	}
	return 0;
}

/* The pass over the archive: z->st (z->nst start points, then the end),
 * charged to z. 0, or a negative errno with e set. */
static int pass_all(struct tx_z *z, struct sf_progress *pr, struct tx_zfeed *feed, struct sf_err *e)
{
	struct pass ps = { .z = z, .pr = pr, .feed = feed };
	if (pr)
		atomic_fetch_add(&pr->bytes_to_walk, z->src->size);
	int rc = (ps.out = malloc(PASSBUF)) ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	uint64_t next = 0, held = z->charged;
	if (!rc)
		rc = charge(z, PASSBUF, e);
	held = z->charged - held;
	/* a first start point, measured by its pass: the cursor charges it */
	if (!rc)
		rc = add_start(&ps, 0, 0, NULL, 0, 0, 0, e);
	if (!rc)
		rc = cur_new(z, 0, &ps.c, e);
	while (!rc) {
		if ((rc = pass_stream(&ps, e)))
			break;
		if ((rc = pass_between(&ps, &next, e)))
			break;
		const char *why = NULL;
		if ((rc = add_start(&ps, next, ps.c->out, NULL, 0, 0, 0, e)))
			break;
		if ((rc = tx_zdec_begin(&ps.c->d, z->codec, NULL, &why)))
			rc = sf_fail(e, rc, "%s: out of memory", z->src->path);
		/* the cursor's buffer holds the stream's first bytes already */
	}
	uint64_t end = ps.c ? ps.c->out : 0;
	cur_free(z, ps.c);
	cur_free(z, ps.ver);
	free(ps.out);
	free(ps.ring);
	if (held)
		sf_cache_uncharge(z->cache, held);
	z->charged -= held;
	if (ps.rcharged)
		sf_cache_uncharge(z->cache, ps.rcharged);
	if (pr)
		atomic_fetch_sub(&pr->bytes_to_walk, z->src->size);
	if (rc == -EIO && ps.damaged)
		rc = salvage(&ps, &end, e);
	/* the end, as one more start point */
	if (rc >= 0 && !(rc = add_start(&ps, z->src->size, end, NULL, 0, 0, 0, e)))
		z->nst--;
	return rc;
}

/* Hands z's start points and their charge to a seek index of their own,
 * held by z and, with `shared`, in *shared too. 0 or -ENOMEM. */
static int publish(struct tx_z *z, struct tx_zseek **shared, struct sf_err *e)
{
	struct tx_zseek *s = calloc(1, sizeof *s);
	if (!s)
		return sf_fail(e, -ENOMEM, "%s: out of memory", z->src->path);
	*s = (struct tx_zseek){ .st = z->st, .nst = z->nst, .wfd = z->wfd, .cache = z->cache,
				.charged = z->charged, .kept = z->kept, .damage = z->damage };
	z->damage = NULL;
	z->wfd = -1;
	atomic_init(&s->refs, shared ? 2 : 1);
	z->seek = s;
	z->charged = 0;
	if (shared)
		*shared = s;
	return 0;
}

int tx_z_index(struct sf_map *m, struct sf_view *v, struct sf_progress *pr,
	       struct tx_zseek **shared, struct tx_zbeside *beside, struct sf_err *e)
{
	if (!m->read)
		return 0;
	struct tx_z *z = m->src;
	if (z->pc) {
		/* made before its walk was shared anew (an idle view's
		 * index dropped and walked again) */
		if (shared && !*shared && z->seek) {
			atomic_fetch_add(&z->seek->refs, 1);
			*shared = z->seek;
		}
		return 0;
	}
	z->cache = v->cache;
	z->pr = pr;
	struct tx_zseek *s = shared ? *shared : NULL;
	int rc = 0;
	if (s) {
		/* made by another map of the same file: only the pieces are
		 * this map's */
		atomic_fetch_add(&s->refs, 1);
		z->seek = s;
		z->st = s->st;
		z->nst = s->nst;
		z->kept = s->kept;
	} else if ((rc = load_kept(z, e)) == 0) {
		z->kept = "read from --index-dir";
	} else if (rc > 0) {
		struct tx_zfeed *f = beside ? tx_zfeed_start(beside, z->cache, z->src->path) : NULL;
		rc = pass_all(z, pr, f, e);
		if (f)
			tx_zfeed_end(f, rc ? 0 : z->st[z->nst].out, !rc && !z->damage);
	}
	if (!rc && !s)
		rc = publish(z, shared, e);
	if (!rc && !s && z->seek->damage)
		sf_view_warn(v, "%s", z->seek->damage);
	if (!rc)
		rc = make_pieces(z, v, !s, e);
	if (!rc) {
		m->size = (size_t)z->st[z->nst].out;
		return 0;
	}
	/* a failed pass leaves nothing: a later use may try again */
	index_free(z);
	return rc;
}

bool tx_z_kept_tar_index(struct sf_map *m, struct tx_built *out)
{
	struct tx_z *z = z_of(m);
	if (!z || !z->kept_walk.index)
		return false;
	*out = z->kept_walk;
	z->kept_walk = (struct tx_built){ 0 };
	return true;
}

void tx_z_use_heads(struct sf_map *m, struct sf_buf *heads)
{
	struct tx_z *z = z_of(m);
	if (!z || !heads)
		return;
	pthread_mutex_lock(&z->lock);
	struct sf_buf *old = z->heads;
	z->heads = sf_buf_ref(heads);
	atomic_store(&z->heads_len, heads->len);
	pthread_mutex_unlock(&z->lock);
	sf_buf_unref(old);
}

bool tx_z_heads_window(const struct sf_map *m, struct tx_window *w, uint64_t at, uint64_t need)
{
	struct tx_z *z = z_of(m);
	uint64_t ci, pos, end;
	if (!z)
		return false;
	pthread_mutex_lock(&z->lock);
	struct sf_buf *h = z->heads ? sf_buf_ref(z->heads) : NULL;
	struct sf_buf *c = z->hchunk ? sf_buf_ref(z->hchunk) : NULL;
	uint64_t have = z->hchunk_i;
	pthread_mutex_unlock(&z->lock);
	bool found = h && tx_zheads_find(h, at, need, &ci, &pos, &end);
	if (found && (!c || have != ci)) {
		sf_buf_unref(c);
		/* decoded outside the lock; the last one decoded is kept */
		if ((c = tx_zheads_chunk(h, ci))) {
			pthread_mutex_lock(&z->lock);
			struct sf_buf *old = z->hchunk;
			z->hchunk = sf_buf_ref(c);
			z->hchunk_i = ci;
			pthread_mutex_unlock(&z->lock);
			sf_buf_unref(old);
		}
	}
	uint64_t len = found ? end - at : 0;
	found = found && c && (len <= w->cap || tx_window_room(w, (size_t)len));
	if (found) {
		memcpy(w->buf, c->data + pos, (size_t)len);
		w->map = m;
		w->off = at;
		w->len = len;
	}
	sf_buf_unref(c);
	sf_buf_unref(h);
	return found;
}

/* Writes z's kept file, saying so in z->kept: 0 or as tx_zkeep_save. */
static int keep_now(struct tx_z *z, const struct tx_built *b, struct sf_err *e)
{
	int rc = tx_zkeep_save(z->keepfd, z->keeptop, z->keepname, z->src, z->codec, z->st, z->nst + 1, b, e);
	z->kept = rc ? "not kept (see errors)" : "written to --index-dir";
	if (z->seek)
		z->seek->kept = z->kept;
	return rc;
}

void tx_z_keep(struct sf_map *m, const struct tx_built *b, struct sf_view *v)
{
	struct tx_z *z = z_of(m);
	struct sf_err e;
	if (z && z->keepfd >= 0 && !z->kept && !z->seek->damage && keep_now(z, b, &e))
		sf_view_warn(v, "%s", e.msg);
}

int tx_z_open(struct sf_map *src, struct sf_map **out, struct sf_err *e)
{
	uint8_t head[6] = { 0 };
	size_t n = src->size < sizeof head ? src->size : sizeof head;
	int rc = sf_map_read(src, 0, n, head, "magic", e);
	enum tx_zcodec c = tx_z_sniff(head, n);
	if (!rc && c == TX_Z_NONE)
		rc = sf_fail(e, -EINVAL, "%s: starts with no gzip, zstd, xz, bzip2 or lz4 magic", src->path);
	return rc ? rc : tx_z_map(src, c, out, e);
}

extern const struct sf_format tx_targz_format;

/* The tool's walk beside the pass. */
struct ahead_walk {
	const char *path;
	struct tx_built built;
};

static int walk_ahead(const struct sf_map *tar, struct sf_progress *pr, void *arg, struct sf_err *e)
{
	struct ahead_walk *a = arg;
	return tx_index_tar(tar, a->path, pr, NULL, NULL, &a->built, e);
}

int tx_z_keep_ahead(struct sf_map *src, int dirfd, const char *name, struct tx_zinfo *info,
		    struct sf_err *e)
{
	struct sf_map *m = NULL;
	struct sf_view *v = NULL;
	struct ahead_walk a = { src->path, { 0 } };
	struct tx_zbeside b = { .walk = walk_ahead, .arg = &a };
	int rc = tx_z_open(src, &m, e);
	if (!rc && (rc = tx_z_keep_in(m, dirfd, -1, name)))
		rc = sf_fail(e, rc, "%s: cannot keep its index: %s", src->path, strerror(-rc));
	if (!rc && !(v = sf_view_new(&tx_targz_format, src->path)))
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", src->path);
	if (!rc)
		rc = tx_z_index(m, v, NULL, NULL, &b, e);
	struct tx_z *z = m ? m->src : NULL;
	if (!rc && z->seek->damage)
		rc = sf_fail(e, -EIO, "%s", z->seek->damage);
	if (!b.walked)
		tx_built_drop(&a.built);
	/* a kept file that matches the archive is read, not made again */
	if (!rc && !z->kept &&
	    (b.walked || !(rc = tx_index_tar(m, src->path, NULL, NULL, NULL, &a.built, e))))
		rc = keep_now(z, &a.built, e);
	if (!rc)
		tx_z_info(m, info);
	tx_built_drop(&a.built);
	sf_map_unref(m);
	if (v)
		sf_view_unref(v);
	return rc;
}

void tx_z_info(const struct sf_map *m, struct tx_zinfo *out)
{
	*out = (struct tx_zinfo){ 0 };
	const struct tx_z *z = z_of(m);
	if (!z)
		return;
	uint64_t wins = 0;
	for (size_t i = 0; i < z->nst; i++)
		wins += z->st[i].win ? z->st[i].wlen : 0;
	*out = (struct tx_zinfo){ z->codec, z->src->size, z->nst, z->npc,
				  z->nst * sizeof *z->st + z->npc * sizeof *z->pc + wins,
				  atomic_load(&z->heads_len), z->kept, z->seek ? z->seek->damage : NULL };
}
