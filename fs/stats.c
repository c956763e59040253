#include "stats.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "sf_hash.h"
#include "sf_json.h"

struct stats stats;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sf_str log_text;
/* hashes of logged (path, message) pairs, to log each problem once; the
 * hash is the whole key, so the values only need to be non-NULL */
static struct sf_hash seen;

static bool seen_before(uint64_t h)
{
	if (sf_hash_get(&seen, h, NULL, NULL))
		return true;
	/* out of memory: the problem is logged again next time */
	(void)sf_hash_put(&seen, h, &seen);
	return false;
}

void errlog_add(const char *path, const char *msg)
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
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);

	pthread_mutex_lock(&log_lock);
	if (!seen_before(h)) {
		/* one line per problem, whatever bytes the path or message hold */
		sf_str_addf(&log_text, "%s ", when);
		for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
			if (*c < 0x20 || *c == 0x7f || *c == '%')
				sf_str_addf(&log_text, "%%%02X", *c);
			else
				sf_str_addc(&log_text, (char)*c);
		}
		sf_str_add(&log_text, ": ", 2);
		for (const char *c = msg; *c; c++)
			sf_str_addc(&log_text, *c == '\n' || *c == '\r' ? ' ' : *c);
		sf_str_addc(&log_text, '\n');
		stat_add(&stats.errors, 1);
	}
	pthread_mutex_unlock(&log_lock);
}

struct sf_buf *errlog_text(void)
{
	pthread_mutex_lock(&log_lock);
	struct sf_buf *b = sf_buf_new(log_text.len);
	if (b && log_text.len)
		memcpy(b->data, log_text.p, log_text.len);
	pthread_mutex_unlock(&log_lock);
	return b;
}

void errlog_fini(void)
{
	sf_str_free(&log_text);
	sf_hash_free(&seen);
}

static pthread_mutex_t transport_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *transport = "dev_fuse";
static atomic_uint_fast64_t *queues;
static unsigned nqueues;

void stats_set_transport(const char *name, atomic_uint_fast64_t *q, unsigned n)
{
	pthread_mutex_lock(&transport_lock);
	transport = name;
	queues = q;
	nqueues = n;
	pthread_mutex_unlock(&transport_lock);
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

struct sf_buf *stats_json(uint64_t cache_bytes, uint64_t cache_budget)
{
	json_t *req = json_object();
	for (int i = 0; i < REQ_KINDS; i++)
		json_object_set_new(req, req_names[i], num(&stats.requests[i]));
	json_t *bytes = json_object();
	json_object_set_new(bytes, "from_mappings", num(&stats.bytes_from_map));
	json_object_set_new(bytes, "from_cache", num(&stats.bytes_from_cache));
	json_object_set_new(bytes, "synthesized", num(&stats.bytes_synthesized));
	json_object_set_new(bytes, "pushed_at_open", num(&stats.bytes_pushed));
	json_t *cache = json_object();
	json_object_set_new(cache, "hits", num(&stats.cache_hits));
	json_object_set_new(cache, "misses", num(&stats.cache_misses));
	json_object_set_new(cache, "evictions", num(&stats.cache_evictions));
	json_object_set_new(cache, "bytes_decoded", num(&stats.bytes_decoded));
	json_object_set_new(cache, "parts_decoded", num(&stats.parts_decoded));
	json_object_set_new(cache, "bytes_held", json_integer((json_int_t)cache_bytes));
	json_object_set_new(cache, "budget", json_integer((json_int_t)cache_budget));
	json_t *root = json_object();
	json_object_set_new(root, "requests", req);
	/* requests per queue: the device's, then one per CPU with io_uring */
	json_t *perq = json_object();
	json_object_set_new(perq, "dev_fuse", num(&stats.device_requests));
	pthread_mutex_lock(&transport_lock);
	json_object_set_new(root, "transport", json_string(transport));
	for (unsigned i = 0; i < nqueues; i++) {
		char name[32];
		snprintf(name, sizeof name, "cpu%u", i);
		json_object_set_new(perq, name, num(&queues[i]));
	}
	pthread_mutex_unlock(&transport_lock);
	json_object_set_new(root, "queues", perq);
	json_object_set_new(root, "bytes_served", bytes);
	json_object_set_new(root, "cache", cache);
	json_object_set_new(root, "containers_opened", num(&stats.containers_opened));
	json_object_set_new(root, "containers_failed", num(&stats.containers_failed));
	json_object_set_new(root, "views_open", num(&stats.views_open));
	json_object_set_new(root, "views_open_peak", num(&stats.views_open_peak));
	json_object_set_new(root, "views_closed", num(&stats.views_closed));
	json_object_set_new(root, "errors", num(&stats.errors));
	struct sf_buf *b = sf_json_pretty(root);
	json_decref(root);
	return b;
}
