/* Filling and prefixing error messages. */
#include "sf_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sf_fail(struct sf_err *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
		va_end(ap);
	}
	return code;
}

void sf_err_prefix(struct sf_err *e, const char *fmt, ...)
{
	if (!e)
		return;
	char pre[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre - 2, fmt, ap);
	va_end(ap);
	strcat(pre, ": ");
	size_t k = strlen(pre), old = strnlen(e->msg, sizeof e->msg - 1);
	if (old > sizeof e->msg - 1 - k)
		old = sizeof e->msg - 1 - k;
	memmove(e->msg + k, e->msg, old);
	memcpy(e->msg, pre, k);
	e->msg[k + old] = 0;
}

const char *sf_err_msg(const struct sf_err *e, int rc)
{
	return e->msg[0] ? e->msg : strerror(-rc);
}
