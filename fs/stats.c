#include "stats.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "sf_format.h"
#include "sf_hash.h"
#include "sf_json.h"

void stats_init(struct stats *s)
{
	memset(s, 0, sizeof *s);
	s->transport = "dev_fuse";
	pthread_mutex_init(&s->log_lock, NULL);
	pthread_mutex_init(&s->transport_lock, NULL);
	sections_init(&s->sections);
}

void stats_fini(struct stats *s)
{
	sf_str_free(&s->log_text);
	free(s->lines);
	sf_hash_free(&s->seen);
	pthread_mutex_destroy(&s->log_lock);
	pthread_mutex_destroy(&s->transport_lock);
	sections_fini(&s->sections);
}

/* Drops the oldest lines until a quarter of each bound is free, so that
 * the text is moved once per many lines logged; the newest line stays,
 * however long (log_lock held). */
static void errlog_trim(struct stats *s)
{
	if (s->nlines <= ERRLOG_LINES && s->log_text.len <= ERRLOG_BYTES)
		return;
	size_t cut = 0;
	while (s->nlines > 1 && (s->nlines > ERRLOG_LINES / 4 * 3 ||
			     s->log_text.len - cut > ERRLOG_BYTES / 4 * 3)) {
		struct errline *l = &s->lines[s->line0++];
		sf_hash_del(&s->seen, l->hash, NULL, NULL);
		cut += l->len;
		s->nlines--;
		s->dropped++;
	}
	memmove(s->log_text.p, s->log_text.p + cut, s->log_text.len - cut);
	s->log_text.len -= cut;
	memmove(s->lines, s->lines + s->line0, s->nlines * sizeof *s->lines);
	s->line0 = 0;
}

/* Keeps the line just added to the text, `len` bytes long (log_lock held).
 * Out of memory for its record, the line is taken back: the log stays
 * whole rather than keeping text it cannot account for. */
static void errlog_keep(struct stats *s, uint64_t h, size_t len)
{
	if (sf_grow(&s->lines, &s->caplines, s->line0 + s->nlines, sizeof *s->lines, 64) ||
	    sf_hash_put(&s->seen, h, &s->seen)) {
		s->log_text.len -= len;
		return;
	}
	s->lines[s->line0 + s->nlines++] = (struct errline){ h, len };
	stat_add(&s->errors, 1);
	errlog_trim(s);
}

static void utc(const struct timespec *t, char when[32])
{
	struct tm tm;
	gmtime_r(&t->tv_sec, &tm);
	strftime(when, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* A path with control bytes and `%` (and, with `ascii`, every byte past
 * 0x7f) written as %XX. */
static void add_path(struct sf_str *out, const char *path, bool ascii)
{
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if (*c < 0x20 || *c == 0x7f || *c == '%' || (ascii && *c > 0x7f))
			sf_str_addf(out, "%%%02X", *c);
		else
			sf_str_addc(out, (char)*c);
	}
}

/* One line of the log, whatever bytes the path or message hold. */
static void add_line(struct sf_str *out, const char *when, const char *path, const char *msg)
{
	sf_str_addf(out, "%s ", when);
	add_path(out, path, false);
	sf_str_add(out, ": ", 2);
	for (const char *c = msg; *c; c++)
		sf_str_addc(out, *c == '\n' || *c == '\r' ? ' ' : *c);
	sf_str_addc(out, '\n');
}

void errlog_add(struct stats *s, const char *path, const char *msg)
{
	/* messages name their file; the line already starts with it */
	size_t plen = strlen(path);
	if (strncmp(msg, path, plen) == 0 && msg[plen] == ':' && msg[plen + 1] == ' ')
		msg += plen + 2;
	XXH3_state_t *st = XXH3_createState();
	if (!st)
		return;
	XXH3_64bits_reset(st);
	XXH3_64bits_update(st, path, strlen(path) + 1);
	XXH3_64bits_update(st, msg, strlen(msg));
	uint64_t h = XXH3_64bits_digest(st);
	XXH3_freeState(st);

	char when[32];
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	utc(&now, when);

	pthread_mutex_lock(&s->log_lock);
	/* the hash is the whole key, so the values only need to be non-NULL */
	if (!sf_hash_get(&s->seen, h, NULL, NULL)) {
		size_t from = s->log_text.len;
		add_line(&s->log_text, when, path, msg);
		if (s->log_text.oom) /* not logged: the text is left as it was */
			s->log_text = (struct sf_str){ s->log_text.p, from, s->log_text.cap, false, s->log_text.big };
		else
			errlog_keep(s, h, s->log_text.len - from);
	}
	pthread_mutex_unlock(&s->log_lock);
}

/* Requests listed as stuck, at most. */
#define STUCK_SHOWN 64

struct sf_buf *errlog_text(struct stats *s)
{
	struct stuck stuck[STUCK_SHOWN];
	size_t total, n = sections_stuck(&s->sections, stuck, STUCK_SHOWN, &total);
	struct sf_str now = { 0 };
	for (size_t i = 0; i < n; i++) {
		char when[32], msg[96];
		utc(&stuck[i].since, when);
		snprintf(msg, sizeof msg, "stuck: a %s request has run for %.1f s (waiting on the source, or long work)",
			 stuck[i].op, stuck[i].seconds);
		add_line(&now, when, stuck[i].path, msg);
	}
	if (now.oom) {
		sf_str_free(&now);
		return NULL;
	}
	pthread_mutex_lock(&s->log_lock);
	struct sf_str t = { 0 };
	if (s->dropped)
		sf_str_addf(&t, "%llu earlier problems are not kept: this log keeps the latest %d "
			    "lines in %u KiB\n", (unsigned long long)s->dropped, ERRLOG_LINES,
			    ERRLOG_BYTES >> 10);
	sf_str_add(&t, s->log_text.p, s->log_text.len);
	pthread_mutex_unlock(&s->log_lock);
	sf_str_add(&t, now.p, now.len);
	sf_str_free(&now);
	return sf_str_take(&t);
}

void stats_set_transport(struct stats *s, const char *name, atomic_uint_fast64_t *q, unsigned n)
{
	pthread_mutex_lock(&s->transport_lock);
	s->transport = name;
	s->queues = q;
	s->nqueues = n;
	pthread_mutex_unlock(&s->transport_lock);
}

static const char *const req_names[REQ_KINDS] = {
	"lookup", "forget", "getattr", "readlink", "open", "read", "release",
	"opendir", "readdir", "releasedir", "statfs", "getxattr", "listxattr",
	"access", "write_refused", "ioctl", "flush",
};

static json_t *num(atomic_uint_fast64_t *c)
{
	return json_integer((json_int_t)atomic_load_explicit(c, memory_order_relaxed));
}

struct sf_buf *stats_json(struct stats *s, uint64_t cache_bytes, uint64_t cache_charged,
			  uint64_t cache_budget)
{
	json_t *req = json_object();
	for (int i = 0; i < REQ_KINDS; i++)
		json_object_set_new(req, req_names[i], num(&s->requests[i]));
	json_t *bytes = json_object();
	json_object_set_new(bytes, "from_mappings", num(&s->bytes_from_map));
	json_object_set_new(bytes, "from_cache", num(&s->bytes_from_cache));
	json_object_set_new(bytes, "synthesized", num(&s->bytes_synthesized));
	json_object_set_new(bytes, "pushed_at_open", num(&s->bytes_pushed));
	json_object_set_new(bytes, "pushed_ahead", num(&s->bytes_pushed_ahead));
	json_t *cache = json_object();
	json_object_set_new(cache, "hits", num(&s->cache.hits));
	json_object_set_new(cache, "misses", num(&s->cache.misses));
	json_object_set_new(cache, "evictions", num(&s->cache.evictions));
	json_object_set_new(cache, "bytes_decoded", num(&s->cache.bytes_decoded));
	json_object_set_new(cache, "parts_decoded", num(&s->cache.parts_decoded));
	json_object_set_new(cache, "parts_ahead", num(&s->cache.parts_ahead));
	json_object_set_new(cache, "bytes_held", json_integer((json_int_t)cache_bytes));
	/* working memory charged beside the parts (indexes, walks, listings) */
	json_object_set_new(cache, "bytes_charged", json_integer((json_int_t)cache_charged));
	/* what the charges hold, by kind; "working": the rest (walks running,
	 * lookups' tables, decoders, a fold's kept rows) */
	json_t *kinds = json_object();
	uint64_t idx = atomic_load(&s->progress.index_bytes_held);
	uint64_t files = atomic_load(&s->progress.file_bytes_held);
	uint64_t tables = atomic_load(&s->progress.table_bytes_held);
	uint64_t known = idx + files + tables;
	json_object_set_new(kinds, "tar_indexes", json_integer((json_int_t)idx));
	json_object_set_new(kinds, "file_extents", json_integer((json_int_t)files));
	json_object_set_new(kinds, "directory_tables", json_integer((json_int_t)tables));
	json_object_set_new(kinds, "working", json_integer((json_int_t)(cache_charged > known ?
									      cache_charged - known : 0)));
	json_object_set_new(cache, "charged", kinds);
	/* files whose extents went while idle, made again at their next read */
	json_object_set_new(cache, "file_extents_dropped", num(&s->progress.files_dropped));
	/* a compressed tar's decoded bytes run through before a read's piece */
	json_object_set_new(cache, "bytes_skipped", num(&s->progress.bytes_skipped));
	json_object_set_new(cache, "budget", json_integer((json_int_t)cache_budget));
	json_t *root = json_object();
	json_object_set_new(root, "requests", req);
	/* requests per queue: the device's, then one per CPU with io_uring */
	json_t *perq = json_object();
	json_object_set_new(perq, "dev_fuse", num(&s->device_requests));
	pthread_mutex_lock(&s->transport_lock);
	json_object_set_new(root, "transport", json_string(s->transport));
	for (unsigned i = 0; i < s->nqueues; i++) {
		char name[32];
		snprintf(name, sizeof name, "cpu%u", i);
		json_object_set_new(perq, name, num(&s->queues[i]));
	}
	pthread_mutex_unlock(&s->transport_lock);
	json_object_set_new(root, "queues", perq);
	json_object_set_new(root, "polls_skipped", num(&s->polls_skipped));
	json_object_set_new(root, "bytes_served", bytes);
	json_object_set_new(root, "cache", cache);
	json_object_set_new(root, "containers_opened", num(&s->containers_opened));
	json_object_set_new(root, "containers_failed", num(&s->containers_failed));
	json_object_set_new(root, "views_open", num(&s->views_open));
	json_object_set_new(root, "views_open_peak", num(&s->views_open_peak));
	json_object_set_new(root, "views_closed", num(&s->views_closed));
	json_object_set_new(root, "errors", num(&s->errors));
	json_object_set_new(root, "view_dirs_listed", num(&s->dirs_listed));
	/* --push-ahead: times pushing stopped, dropping what waited (fs/push.h) */
	json_object_set_new(root, "push_stops", num(&s->push_stops));
	/* tars with no index whose headers are being walked now (their
	 * views' first use), and what every walk so far has read */
	json_t *walk = json_object();
	json_object_set_new(walk, "tars_now", num(&s->progress.walking));
	json_object_set_new(walk, "bytes_of_tars_now", num(&s->progress.bytes_to_walk));
	json_object_set_new(walk, "bytes_walked", num(&s->progress.bytes_walked));
	json_object_set_new(walk, "headers_walked", num(&s->progress.headers_walked));
	json_object_set_new(walk, "tars_indexed", num(&s->progress.walks_done));
	/* the indexes held now (one per tar file, shared by its views), and
	 * their bytes in the budget: closed with their last view */
	json_object_set_new(walk, "indexes_held", num(&s->progress.indexes_held));
	json_object_set_new(walk, "index_bytes_held", num(&s->progress.index_bytes_held));
	json_object_set_new(root, "tar_indexing", walk);
	/* requests waiting on the source now, and those waiting a second or
	 * more, oldest first: which files are stuck, and since when */
	struct stuck stuck[STUCK_SHOWN];
	size_t total, n = sections_stuck(&s->sections, stuck, STUCK_SHOWN, &total);
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		char when[32];
		utc(&stuck[i].since, when);
		json_t *o = json_object();
		/* escaped as in the errors log, bytes past 0x7f too (JSON takes
		 * UTF-8 only) */
		struct sf_str p = { 0 };
		add_path(&p, stuck[i].path, true);
		sf_str_addc(&p, 0);
		json_object_set_new(o, "path", json_string(p.oom ? "" : (const char *)p.p));
		sf_str_free(&p);
		json_object_set_new(o, "request", json_string(stuck[i].op));
		json_object_set_new(o, "since", json_string(when));
		json_object_set_new(o, "seconds", json_real(stuck[i].seconds));
		json_array_append_new(list, o);
	}
	json_object_set_new(root, "at_source", json_integer((json_int_t)total));
	json_object_set_new(root, "last_thread_waits", num(&s->sections.last_waits));
	json_object_set_new(root, "stuck", list);
	struct sf_buf *b = sf_json_pretty(root);
	json_decref(root);
	return b;
}
