/* values.jsonl and rows.jsonl: values printed the way upstream's
 * `tatami cat` prints them (spec §18), which is Go's encoding/json: HTML
 * characters escaped, invalid UTF-8 as \ufffd, floats in shortest
 * round-trip form, bytes as padded base64. NaN and infinities, which make
 * upstream fail, follow docs/design.md §3.4 instead. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "tat.h"
#include "sf_view_impl.h"

void tat_json_string(struct sf_str *s, const uint8_t *p, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	sf_str_addc(s, '"');
	size_t i = 0;
	while (i < len) {
		uint8_t b = p[i];
		if (b < 0x80) {
			const char *esc = NULL;
			switch (b) {
			case '"': esc = "\\\""; break;
			case '\\': esc = "\\\\"; break;
			case '\b': esc = "\\b"; break;
			case '\f': esc = "\\f"; break;
			case '\n': esc = "\\n"; break;
			case '\r': esc = "\\r"; break;
			case '\t': esc = "\\t"; break;
			default: break;
			}
			if (esc) {
				sf_str_add(s, esc, strlen(esc));
			} else if (b < 0x20 || b == '<' || b == '>' || b == '&') {
				char u[6] = { '\\', 'u', '0', '0', hex[b >> 4], hex[b & 15] };
				sf_str_add(s, u, 6);
			} else {
				sf_str_addc(s, (char)b);
			}
			i++;
			continue;
		}
		size_t k = sf_utf8_seq(p + i, len - i);
		if (k == 0) {
			sf_str_add(s, "\\ufffd", 6);
			i++;
		} else if (k == 3 && b == 0xE2 && p[i + 1] == 0x80 && (p[i + 2] & 0xFE) == 0xA8) {
			/* U+2028 and U+2029 break JavaScript, so Go escapes them */
			sf_str_add(s, p[i + 2] == 0xA8 ? "\\u2028" : "\\u2029", 6);
			i += 3;
		} else {
			sf_str_add(s, p + i, k);
			i += k;
		}
	}
	sf_str_addc(s, '"');
}

/* Go's strconv 'f'/'e' with the shortest digits that read back as the
 * same float32/float64, switched to exponent form as encoding/json does. */
static void json_float(struct sf_str *s, double v, bool f32)
{
	if (isnan(v) || isinf(v)) {
		sf_str_addf(s, "\"%s\"", isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
		return;
	}
	if (v == 0) {
		sf_str_add(s, signbit(v) ? "-0" : "0", signbit(v) ? 2 : 1);
		return;
	}
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
		if (f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
			break;
	}
	/* buf is [-]d[.ddd]e±XX: collect the digits and the exponent */
	char digits[24];
	size_t nd = 0;
	const char *q = buf;
	bool neg = *q == '-';
	if (neg)
		q++;
	for (; *q != 'e'; q++)
		if (*q != '.')
			digits[nd++] = *q;
	int exp = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	double a = fabs(v);
	bool expo = f32 ? ((float)a < 1e-6f || (float)a >= 1e21f) : (a < 1e-6 || a >= 1e21);
	if (neg)
		sf_str_addc(s, '-');
	if (expo) {
		sf_str_addc(s, digits[0]);
		if (nd > 1) {
			sf_str_addc(s, '.');
			sf_str_add(s, digits + 1, nd - 1);
		}
		/* Go writes at least two exponent digits, then encoding/json
		 * drops the leading zero of a negative one (e-07 -> e-7) */
		if (exp < 0)
			sf_str_addf(s, "e-%d", -exp);
		else
			sf_str_addf(s, "e+%02d", exp);
		return;
	}
	int dp = exp + 1; /* digits before the decimal point */
	if (dp <= 0) {
		sf_str_add(s, "0.", 2);
		for (int i = 0; i < -dp; i++)
			sf_str_addc(s, '0');
		sf_str_add(s, digits, nd);
	} else if ((size_t)dp >= nd) {
		sf_str_add(s, digits, nd);
		for (size_t i = nd; i < (size_t)dp; i++)
			sf_str_addc(s, '0');
	} else {
		sf_str_add(s, digits, (size_t)dp);
		sf_str_addc(s, '.');
		sf_str_add(s, digits + dp, nd - (size_t)dp);
	}
}

/* Row i of a decoded chunk (layout in tat_chunk.c) as a JSON value. */
static void json_value(struct sf_str *s, uint8_t type, const struct sf_buf *b, uint64_t R,
		       uint64_t i)
{
	if (!b->data[i]) {
		sf_str_add(s, "null", 4);
		return;
	}
	if (tat_is_var(type)) {
		const uint8_t *off = b->data + R + 8 * i;
		uint64_t a = sf_le64(off), z = sf_le64(off + 8);
		const uint8_t *p = b->data + R + 8 * (R + 1) + a;
		if (type == TAT_STRING) {
			tat_json_string(s, p, (size_t)(z - a));
		} else {
			sf_str_addc(s, '"');
			sf_base64_add(s, p, (size_t)(z - a));
			sf_str_addc(s, '"');
		}
		return;
	}
	const uint8_t *p = b->data + R + i * tat_width(type);
	switch (type) {
	case TAT_BOOL:
		sf_str_addf(s, "%s", *p ? "true" : "false");
		break;
	case TAT_INT8: sf_str_addf(s, "%d", (int8_t)p[0]); break;
	case TAT_INT16: sf_str_addf(s, "%d", (int16_t)sf_le16(p)); break;
	case TAT_INT32: sf_str_addf(s, "%" PRId32, (int32_t)sf_le32(p)); break;
	case TAT_INT64:
	case TAT_TIMESTAMP: sf_str_addf(s, "%" PRId64, (int64_t)sf_le64(p)); break;
	case TAT_UINT8: sf_str_addf(s, "%u", p[0]); break;
	case TAT_UINT16: sf_str_addf(s, "%u", sf_le16(p)); break;
	case TAT_UINT32: sf_str_addf(s, "%" PRIu32, sf_le32(p)); break;
	case TAT_UINT64: sf_str_addf(s, "%" PRIu64, sf_le64(p)); break;
	case TAT_FLOAT32: json_float(s, sf_lef32(p), true); break;
	case TAT_FLOAT64: json_float(s, sf_lef64(p), false); break;
	default: sf_str_add(s, "null", 4); break;
	}
}

/* A chunk's decoded values: through the cache once its part exists, so a
 * text view does not decode what values.bin already holds. */
static int decode(const struct tat_chunk *ch, struct sf_cache *cache, struct sf_buf **b,
		  struct sf_err *e)
{
	if (ch->part)
		return sf_part_get(cache, ch->part, b, e);
	struct sf_part tmp = { .arg = (void *)ch };
	return tat_chunk_produce(&tmp, cache, b, e);
}

static int finish(struct sf_str *s, const char *path, struct sf_buf **out, struct sf_err *e)
{
	*out = sf_str_take(s);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory rendering JSON", path);
}

int tat_text_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tat_chunk *ch = p->arg;
	struct sf_buf *b = NULL;
	int rc = decode(ch, cache, &b, e);
	if (rc)
		return rc;
	uint8_t type = ch->tf->fields[ch->column].type;
	struct sf_str s = { 0 };
	for (uint64_t i = 0; i < ch->num_values; i++) {
		json_value(&s, type, b, ch->num_values, i);
		sf_str_addc(&s, '\n');
	}
	sf_buf_unref(b);
	return finish(&s, ch->tf->view->path, out, e);
}

int tat_rows_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tat_group *g = p->arg;
	const struct tat_file *tf = p->arg2;
	size_t nf = tf->nfields;
	struct sf_buf **cols = calloc(nf, sizeof *cols);
	if (!cols)
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	int rc = 0;
	for (size_t c = 0; c < nf && rc == 0; c++) {
		const struct tat_chunk *ch = tat_chunk_of((struct tat_group *)g, c);
		if (!ch)
			rc = sf_fail(e, -EIO, "%s: column %zu missing in %s", tf->view->path, c, g->what);
		else if (ch->num_values != g->num_rows)
			rc = sf_fail(e, -EIO, "%s: %s holds %llu rows, its group %llu", tf->view->path,
				     ch->what, (unsigned long long)ch->num_values,
				     (unsigned long long)g->num_rows);
		else
			rc = decode(ch, cache, &cols[c], e);
	}
	struct sf_str s = { 0 };
	for (uint64_t i = 0; rc == 0 && i < g->num_rows; i++) {
		sf_str_addc(&s, '{');
		for (size_t c = 0; c < nf; c++) {
			if (c)
				sf_str_addc(&s, ',');
			tat_json_string(&s, tf->fields[c].name.p, tf->fields[c].name.len);
			sf_str_addc(&s, ':');
			json_value(&s, tf->fields[c].type, cols[c], g->num_rows, i);
		}
		sf_str_add(&s, "}\n", 2);
	}
	for (size_t c = 0; c < nf; c++)
		sf_buf_unref(cols[c]);
	free(cols);
	if (rc) {
		sf_str_free(&s);
		return rc;
	}
	return finish(&s, tf->view->path, out, e);
}
