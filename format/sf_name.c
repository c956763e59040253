/* Names taken from inside files, escaped for a directory (docs/design.md §3.3). */
#include "sf_name.h"

#include <stdbool.h>
#include <stdio.h>
#include <xxhash.h>

static bool must_escape(uint8_t c)
{
	return c == '%' || c == '/' || c == '\\' || c < 0x20 || c == 0x7f;
}

void sf_name_escape(const void *raw, size_t len, size_t max, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	const uint8_t *p = raw;
	size_t o = 0, cut = 0;
	bool over = false;
	for (size_t i = 0; i < len; i++) {
		size_t w = must_escape(p[i]) ? 3 : 1;
		if (o + w <= 200)
			cut = o + w;
		if (o + w > max) {
			over = true;
			break;
		}
		if (w == 3) {
			out[o++] = '%';
			out[o++] = hex[p[i] >> 4];
			out[o++] = hex[p[i] & 15];
		} else {
			out[o++] = (char)p[i];
		}
	}
	if (over) {
		/* cut lies on an escape boundary by construction */
		snprintf(out + cut, SF_NAME_MAX + 1 - cut, "~%016llx",
			 (unsigned long long)XXH64(raw, len, 0));
		return;
	}
	out[o] = 0;
}

static int unhex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

size_t sf_name_unescape(const char *name, uint8_t *out)
{
	size_t o = 0;
	for (size_t i = 0; name[i]; i++) {
		int hi, lo;
		if (name[i] == '%' && (hi = unhex(name[i + 1])) >= 0 &&
		    (lo = unhex(name[i + 2])) >= 0) {
			out[o++] = (uint8_t)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = (uint8_t)name[i];
		}
	}
	return o;
}
