#include "stats.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "sf_hash.h"
#include "sf_json.h"

void stats_init(struct stats *s)
{
	memset(s, 0, sizeof *s);
	s->transport = "dev_fuse";
	pthread_mutex_init(&s->log_lock, NULL);
	pthread_mutex_init(&s->transport_lock, NULL);
	waits_init(&s->waits);
}

void stats_fini(struct stats *s)
{
	sf_str_free(&s->log_text);
	sf_hash_free(&s->seen);
	pthread_mutex_destroy(&s->log_lock);
	pthread_mutex_destroy(&s->transport_lock);
	waits_fini(&s->waits);
}

static bool seen_before(struct stats *s, uint64_t h)
{
	if (sf_hash_get(&s->seen, h, NULL, NULL))
		return true;
	/* out of memory: the problem is logged again next time; the hash is
	 * the whole key, so the values only need to be non-NULL */
	(void)sf_hash_put(&s->seen, h, &s->seen);
	return false;
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
	if (!seen_before(s, h)) {
		add_line(&s->log_text, when, path, msg);
		stat_add(&s->errors, 1);
	}
	pthread_mutex_unlock(&s->log_lock);
}

/* Requests listed as stuck, at most. */
#define STUCK_SHOWN 64

struct sf_buf *errlog_text(struct stats *s)
{
	struct stuck stuck[STUCK_SHOWN];
	size_t total, n = waits_stuck(&s->waits, stuck, STUCK_SHOWN, &total);
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
	struct sf_buf *b = sf_buf_new(s->log_text.len + now.len);
	if (b && s->log_text.len)
		memcpy(b->data, s->log_text.p, s->log_text.len);
	pthread_mutex_unlock(&s->log_lock);
	if (b && now.len)
		memcpy(b->data + b->len - now.len, now.p, now.len);
	sf_str_free(&now);
	return b;
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
	"access", "write_refused", "ioctl",
};

static json_t *num(atomic_uint_fast64_t *c)
{
	return json_integer((json_int_t)atomic_load_explicit(c, memory_order_relaxed));
}

struct sf_buf *stats_json(struct stats *s, uint64_t cache_bytes, uint64_t cache_budget)
{
	json_t *req = json_object();
	for (int i = 0; i < REQ_KINDS; i++)
		json_object_set_new(req, req_names[i], num(&s->requests[i]));
	json_t *bytes = json_object();
	json_object_set_new(bytes, "from_mappings", num(&s->bytes_from_map));
	json_object_set_new(bytes, "from_cache", num(&s->bytes_from_cache));
	json_object_set_new(bytes, "synthesized", num(&s->bytes_synthesized));
	json_object_set_new(bytes, "pushed_at_open", num(&s->bytes_pushed));
	json_t *cache = json_object();
	json_object_set_new(cache, "hits", num(&s->cache_hits));
	json_object_set_new(cache, "misses", num(&s->cache_misses));
	json_object_set_new(cache, "evictions", num(&s->cache_evictions));
	json_object_set_new(cache, "bytes_decoded", num(&s->bytes_decoded));
	json_object_set_new(cache, "parts_decoded", num(&s->parts_decoded));
	json_object_set_new(cache, "bytes_held", json_integer((json_int_t)cache_bytes));
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
	json_object_set_new(root, "bytes_served", bytes);
	json_object_set_new(root, "cache", cache);
	json_object_set_new(root, "containers_opened", num(&s->containers_opened));
	json_object_set_new(root, "containers_failed", num(&s->containers_failed));
	json_object_set_new(root, "views_open", num(&s->views_open));
	json_object_set_new(root, "views_open_peak", num(&s->views_open_peak));
	json_object_set_new(root, "views_closed", num(&s->views_closed));
	json_object_set_new(root, "errors", num(&s->errors));
	/* requests waiting on the source now, and those waiting a second or
	 * more, oldest first: which files are stuck, and since when */
	struct stuck stuck[STUCK_SHOWN];
	size_t total, n = waits_stuck(&s->waits, stuck, STUCK_SHOWN, &total);
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
	json_object_set_new(root, "stuck", list);
	struct sf_buf *b = sf_json_pretty(root);
	json_decref(root);
	return b;
}
