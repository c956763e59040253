#include "sf_json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_bytes.h"

size_t sf_utf8_seq(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	if (c < 0x80)
		return 1;
	size_t len;
	uint32_t min, cp;
	if ((c & 0xE0) == 0xC0) {
		len = 2;
		min = 0x80;
		cp = c & 0x1F;
	} else if ((c & 0xF0) == 0xE0) {
		len = 3;
		min = 0x800;
		cp = c & 0x0F;
	} else if ((c & 0xF8) == 0xF0) {
		len = 4;
		min = 0x10000;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

void sf_utf8_sanitize_add(struct sf_str *s, const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t i = 0, run = 0;
	while (i < len) {
		size_t k = sf_utf8_seq(p + i, len - i);
		if (k) {
			i += k;
			continue;
		}
		sf_str_add(s, p + run, i - run);
		sf_str_add(s, "\xEF\xBF\xBD", 3);
		i++;
		run = i;
	}
	sf_str_add(s, p + run, len - run);
}

/* A JSON string of what s holds, which it frees; NULL if s ran out of memory. */
static json_t *str_json(struct sf_str *s)
{
	json_t *j = s->oom ? NULL : json_stringn(s->p ? (const char *)s->p : "", s->len);
	sf_str_free(s);
	return j;
}

json_t *sf_json_bytes_as_text(const void *p, size_t len)
{
	struct sf_str s = { 0 };
	sf_utf8_sanitize_add(&s, p, len);
	return str_json(&s);
}

json_t *sf_json_u64(uint64_t v)
{
	return v <= INT64_MAX ? json_integer((json_int_t)v)
			      : json_sprintf("%llu", (unsigned long long)v);
}

json_t *sf_json_real(double d)
{
	if (isnan(d))
		return json_string("NaN");
	if (isinf(d))
		return json_string(d > 0 ? "Infinity" : "-Infinity");
	return json_real(d);
}

void sf_base64_add(struct sf_str *s, const void *data, size_t len)
{
	static const char tbl[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = data;
	size_t i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		char o[4] = { tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], tbl[v & 63] };
		sf_str_add(s, o, 4);
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;
		char o[4] = { tbl[v >> 18], tbl[(v >> 12) & 63], '=', '=' };
		sf_str_add(s, o, 4);
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		char o[4] = { tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], '=' };
		sf_str_add(s, o, 4);
	}
}

json_t *sf_json_base64(const void *p, size_t len)
{
	struct sf_str s = { 0 };
	sf_base64_add(&s, p, len);
	return str_json(&s);
}

static int dump_cb(const char *buf, size_t size, void *data)
{
	sf_str_add(data, buf, size);
	return ((struct sf_str *)data)->oom ? -1 : 0;
}

int sf_json_add(struct sf_str *s, const json_t *j, int newline)
{
	if (json_dump_callback(j, dump_cb, s, JSON_COMPACT | JSON_PRESERVE_ORDER |
				JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY) < 0)
		return -ENOMEM;
	if (newline)
		sf_str_addc(s, '\n');
	return s->oom ? -ENOMEM : 0;
}

static struct sf_buf *pretty(const json_t *j, size_t flags)
{
	struct sf_str s = { 0 };
	if (json_dump_callback(j, dump_cb, &s, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY | flags) < 0) {
		sf_str_free(&s);
		return NULL;
	}
	sf_str_addc(&s, '\n');
	return sf_str_take(&s);
}

struct sf_buf *sf_json_pretty(const json_t *j)
{
	return pretty(j, 0);
}

struct sf_buf *sf_json_pretty_ascii(const json_t *j)
{
	return pretty(j, JSON_ENSURE_ASCII);
}

int sf_npy_header(struct sf_str *s, const char *descr, const uint64_t *shape, size_t ndim)
{
	struct sf_str d = { 0 };
	/* a structured dtype is a list literal, written as given */
	const char *q = descr[0] == '[' ? "" : "'";
	sf_str_addf(&d, "{'descr': %s%s%s, 'fortran_order': False, 'shape': (", q, descr, q);
	for (size_t i = 0; i < ndim; i++)
		sf_str_addf(&d, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
	sf_str_add(&d, ndim == 1 ? ",), }" : "), }", ndim == 1 ? 5 : 4);
	/* numpy's reader wants the header to end in '\n' and aligns data to 64 */
	size_t total = (10 + d.len + 1 + 63) / 64 * 64;
	while (10 + d.len + 1 < total)
		sf_str_addc(&d, ' ');
	sf_str_addc(&d, '\n');
	int rc = d.oom || d.len > UINT16_MAX ? -ENOMEM : 0;
	if (rc == 0) {
		uint8_t pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0 };
		sf_put_le16(pre + 8, (uint16_t)d.len);
		sf_str_add(s, pre, sizeof pre);
		sf_str_add(s, d.p, d.len);
		rc = s->oom ? -ENOMEM : 0;
	}
	sf_str_free(&d);
	return rc;
}

void sf_fmt_f32(char out[32], float f)
{
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(out, 32, "%.*g", prec, (double)f);
		if (strtof(out, NULL) == f || isnan(f))
			return;
	}
}

/* Measured with jansson 2.14 on glibc: an empty object takes 232 bytes,
 * an empty array 136, a member ("a":0 in an object) 112 beyond its
 * value, a string 88 beyond its bytes, a number 32; arrays and tables
 * grow by doubling (a separator's share covers it). */
#define COST_BASE 256
#define COST_OBJECT 240
#define COST_ARRAY 144
#define COST_MEMBER 112
#define COST_STRING 96
#define COST_VALUE 48

uint64_t sf_json_parse_cost(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t cost = COST_BASE + COST_VALUE;
	for (size_t i = 0; i < len; i++) {
		switch (b[i]) {
		case '{':
			cost += COST_OBJECT;
			break;
		case '[':
			cost += COST_ARRAY;
			break;
		case ':':
			cost += COST_MEMBER;
			break;
		case ',':
			cost += COST_VALUE;
			break;
		case '"':
			/* a string (its bytes are counted with the input's,
			 * which they never outgrow once decoded); what it
			 * holds is no separator */
			cost += COST_STRING;
			for (i++; i < len && b[i] != '"'; i++)
				if (b[i] == '\\')
					i++;
			break;
		}
	}
	return cost + len;
}
