/* The error carrier every failing function fills. */
#ifndef SF_ERR_H
#define SF_ERR_H

/* Every failing function fills one of these: a message naming the file, the
 * part and what was wrong. Functions return 0 or a negative errno. */
struct sf_err {
	char msg[512];
};

/* Sets e->msg (printf-style) and returns `code` (a negative errno). */
int sf_fail(struct sf_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefixes e->msg with "<prefix>: " (used to add the file name on the way up). */
void sf_err_prefix(struct sf_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* What to tell the user about a failure with code `rc`: e->msg, or
 * strerror(-rc) when the failing function left no message. */
const char *sf_err_msg(const struct sf_err *e, int rc);

#endif
