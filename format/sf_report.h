/* The report of .shardfs/verify (docs/design.md §3.2), shared by every format: a
 * first line `status: ok` or `status: failed` (failed iff there is an
 * error), then one `error: …` or `warning: …` line per finding. */
#ifndef SF_REPORT_H
#define SF_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "sf_buf.h"

struct sf_report {
	struct sf_str body; /* the finding lines, in the order they were added */
	uint64_t errors, warnings;
	/* If not 0, errors past this many are counted but not listed, so a
	 * file with a fault on every row does not make a report as big as
	 * itself. Warnings are always listed. */
	uint64_t error_limit;
};

/* Adds one finding. Line breaks inside it become spaces, so it stays one
 * line however much file data the message quotes; nothing is cut. */
void sf_report_add(struct sf_report *r, bool error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Adds `error: ... and <n> more` if n > 0 errors went unlisted so far. */
void sf_report_unlisted(struct sf_report *r);

/* The status line and the findings in a new buffer; the report is left empty.
 * NULL on OOM (including running out while findings were added). */
struct sf_buf *sf_report_take(struct sf_report *r);

/* The view of a container that passed the listing's check but failed to
 * open (docs/design.md §3.1): only .shardfs/, whose verify and info.txt
 * say why, read as `host` wants. */
struct sf_format;
struct sf_host;
struct sf_view;
struct sf_view *sf_view_failed(const struct sf_format *fmt, const char *path, const char *why,
			       const struct sf_host *host);

#endif
