#include "sf_report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sf_err.h"
#include "sf_view_impl.h"

void sf_report_add(struct sf_report *r, bool error, const char *fmt, ...)
{
	if (error && r->error_limit && r->errors >= r->error_limit) {
		r->errors++;
		return;
	}
	struct sf_str *b = &r->body;
	sf_str_addf(b, "%s: ", error ? "error" : "warning");
	size_t from = b->len;
	va_list ap;
	va_start(ap, fmt);
	sf_str_vaddf(b, fmt, ap);
	va_end(ap);
	/* a message may quote names or error text taken from the file */
	for (size_t i = from; i < b->len; i++)
		if (b->p[i] == '\n' || b->p[i] == '\r')
			b->p[i] = ' ';
	sf_str_addc(b, '\n');
	if (error)
		r->errors++;
	else
		r->warnings++;
}

void sf_report_unlisted(struct sf_report *r)
{
	if (r->error_limit && r->errors > r->error_limit)
		sf_str_addf(&r->body, "error: ... and %" PRIu64 " more\n",
			    r->errors - r->error_limit);
}

struct sf_buf *sf_report_take(struct sf_report *r)
{
	/* a report that lost findings to OOM must not pass for a whole one */
	struct sf_str s = { .oom = r->body.oom };
	sf_str_addf(&s, "status: %s\n", r->errors ? "failed" : "ok");
	sf_str_add(&s, r->body.p, r->body.len);
	sf_str_free(&r->body);
	*r = (struct sf_report){ 0 };
	return sf_str_take(&s);
}

static int failed_verify(const struct sf_part *p, struct sf_cache *c, struct sf_buf **out,
			 struct sf_err *e)
{
	struct sf_report r = { 0 };
	sf_report_add(&r, true, "not opened: %s", (const char *)p->view->state);
	if (!(*out = sf_report_take(&r)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", p->view->path);
	return 0;
}

static int failed_info(const struct sf_part *p, struct sf_cache *c, struct sf_buf **out,
		       struct sf_err *e)
{
	struct sf_str s = { 0 };
	sf_str_addf(&s, "%s: not opened: %s\n", p->view->path, (const char *)p->view->state);
	if (!(*out = sf_str_take(&s)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", p->view->path);
	return 0;
}

struct sf_view *sf_view_failed(const struct sf_format *fmt, const char *path, const char *why,
			       const struct sf_host *host)
{
	struct sf_view *v = sf_view_new(fmt, path);
	if (!v)
		return NULL;
	sf_view_use_host(v, host);
	v->free_state = free;
	if (!(v->state = strdup(why)) || !sf_view_add_meta(v, failed_info, NULL, failed_verify, NULL)) {
		sf_view_unref(v);
		return NULL;
	}
	return v;
}
