/* .shardfs/ of a tsumugi view: info.txt in the layout of `tsumugi inspect`
 * (spec Part C) and info.json with the same facts. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "tsm.h"
#include "sf_view_impl.h"

/* Go's %g: shortest round-trip digits, exponent form when the decimal
 * exponent is < -4 or >= 6 (at least two exponent digits). */
static void go_g(char out[40], double d)
{
	if (isnan(d)) {
		strcpy(out, "NaN");
		return;
	}
	if (isinf(d)) {
		strcpy(out, d > 0 ? "+Inf" : "-Inf");
		return;
	}
	char e[40];
	int prec = 1;
	for (; prec < 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, d);
		if (strtod(e, NULL) == d)
			break;
	}
	snprintf(e, sizeof e, "%.*e", prec - 1, d);
	int exp10 = atoi(strchr(e, 'e') + 1);
	if (exp10 < -4 || exp10 >= 6)
		strcpy(out, e);
	else
		snprintf(out, 40, "%.*f", prec - 1 - exp10 > 0 ? prec - 1 - exp10 : 0, d);
}

static double bits_f64(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof d);
	return d;
}

static void add_flags(struct sf_str *o, uint64_t flags)
{
	bool any = false;
	for (int b = 0; b < 8; b++)
		if (flags >> b & 1) {
			sf_str_addf(o, "%s%s", any ? "," : "", tsm_flag_name(b));
			any = true;
		}
	if (!any)
		sf_str_add(o, "(none)", 6);
}

/* A Go tabwriter with padding 2: every column but the last padded to its
 * widest cell plus two. */
static void add_region_table(struct sf_str *o, const struct tsm_shard *s)
{
	size_t rows = s->nregions + 1;
	char(*cell)[4][40] = calloc(rows, sizeof *cell);
	if (!cell) {
		o->oom = true;
		return;
	}
	snprintf(cell[0][0], 40, "  kind");
	snprintf(cell[0][1], 40, "codec");
	snprintf(cell[0][2], 40, "on-disk");
	snprintf(cell[0][3], 40, "raw");
	size_t w[4] = { 0 };
	for (size_t i = 0; i < s->nregions; i++) {
		const struct tsm_region *r = &s->regions[i];
		snprintf(cell[i + 1][0], 40, "  %s", tsm_kind_name(r->kind));
		snprintf(cell[i + 1][1], 40, "%s", tsm_codec_name(r->codec));
		snprintf(cell[i + 1][2], 40, "%llu", (unsigned long long)r->length);
		snprintf(cell[i + 1][3], 40, "%llu", (unsigned long long)r->raw_length);
	}
	for (size_t i = 0; i < rows; i++)
		for (int k = 0; k < 4; k++)
			if (strlen(cell[i][k]) > w[k])
				w[k] = strlen(cell[i][k]);
	for (size_t i = 0; i < rows; i++) {
		for (int k = 0; k < 4; k++)
			sf_str_addf(o, "%-*s", (int)(w[k] + 2), cell[i][k]);
		if (i == 0) {
			sf_str_add(o, "ratio\n", 6);
			continue;
		}
		const struct tsm_region *r = &s->regions[i - 1];
		double ratio = r->raw_length ? (double)r->length / (double)r->raw_length : 1.0;
		sf_str_addf(o, "%.2fx\n", ratio);
	}
	free(cell);
}

int tsm_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tsm_shard *s = p->arg;
	struct sf_str o = { 0 };
	sf_str_addf(&o, "file:     %s\n", s->file_name);
	sf_str_addf(&o, "version:  %u.%u\n", s->h.major, s->h.minor);
	sf_str_addf(&o, "docs:     %u\n", s->h.doc_count);
	sf_str_add(&o, "flags:    ", 10);
	add_flags(&o, s->h.flags);
	sf_str_addc(&o, '\n');
	if (s->h.node_base)
		sf_str_addf(&o, "node_base:%llu\n", (unsigned long long)s->h.node_base);
	if (s->h.build_epoch)
		sf_str_addf(&o, "epoch:    %llu\n", (unsigned long long)s->h.build_epoch);
	sf_str_add(&o, "regions:\n", 9);
	add_region_table(&o, s);
	if (s->nstats)
		sf_str_add(&o, "stats:\n", 7);
	for (size_t i = 0; i < s->nstats; i++) {
		const struct tsm_stat *st = &s->stats[i];
		char val[40];
		if (tsm_stat_is_hash(st->key, st->key_len))
			snprintf(val, sizeof val, "0x%016llx", (unsigned long long)st->bits);
		else
			go_g(val, bits_f64(st->bits));
		sf_str_add(&o, "  ", 2);
		size_t at = o.len, chars = 0;
		sf_utf8_sanitize_add(&o, st->key, st->key_len);
		/* Go's %-18s pads to 18 characters: count the key's UTF-8
		 * lead bytes (the sanitized key is valid UTF-8) */
		for (size_t k = at; k < o.len && !o.oom; k++)
			chars += (o.p[k] & 0xC0) != 0x80;
		int pad = chars < 18 ? (int)(18 - chars) : 0;
		sf_str_addf(&o, "%*s %s\n", pad, "", val);
	}
	*out = sf_str_take(&o);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", s->view->path);
}

static json_t *header_json(const struct tsm_shard *s)
{
	const struct tsm_header *h = &s->h;
	json_t *names = json_array();
	for (int b = 0; b < 64; b++)
		if (h->flags >> b & 1)
			json_array_append_new(names, tsm_flag_name(b) ? json_string(tsm_flag_name(b))
								  : json_sprintf("bit-%d", b));
	return json_pack("{s:s, s:i, s:i, s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:I, s:I}",
			 "magic", "TSM1", "version_major", h->major, "version_minor", h->minor,
			 "flags", sf_json_u64(h->flags), "flag_names", names,
			 "doc_count", (json_int_t)h->doc_count,
			 "region_count", (json_int_t)h->region_count,
			 "footer_offset", sf_json_u64(h->footer_offset),
			 "footer_length", sf_json_u64(h->footer_length),
			 "node_base", sf_json_u64(h->node_base), "build_epoch", sf_json_u64(h->build_epoch),
			 "header_crc", (json_int_t)h->crc, "reserved", (json_int_t)h->reserved);
}

static json_t *stats_json(const struct tsm_shard *s)
{
	json_t *o = json_object();
	for (size_t i = 0; i < s->nstats; i++) {
		const struct tsm_stat *st = &s->stats[i];
		struct sf_str k = { 0 };
		sf_utf8_sanitize_add(&k, st->key, st->key_len);
		sf_str_addc(&k, 0);
		if (k.oom)
			continue;
		json_t *v = tsm_stat_is_hash(st->key, st->key_len)
				    ? json_sprintf("0x%016llx", (unsigned long long)st->bits)
				    : sf_json_real(bits_f64(st->bits));
		json_object_set_new(o, (char *)k.p, json_pack("{s:o, s:o}", "value", v, "bits",
							      json_sprintf("%016llx",
									   (unsigned long long)st->bits)));
		sf_str_free(&k);
	}
	return o;
}

static json_t *schema_json(const struct tsm_shard *s)
{
	json_t *a = json_array();
	for (size_t i = 0; i < s->nschema; i++) {
		const struct tsm_schema_col *c = &s->schema[i];
		json_array_append_new(a, json_pack("{s:o, s:i, s:i, s:b}", "name",
						   sf_json_bytes_as_text(c->name, c->name_len),
						   "type", c->type, "codec", c->codec,
						   "nullable", c->nullable != 0));
	}
	return a;
}

static json_t *regions_json(const struct tsm_shard *s)
{
	json_t *a = json_array();
	for (size_t i = 0; i < s->nregions; i++) {
		const struct tsm_region *r = &s->regions[i];
		char file[48];
		snprintf(file, sizeof file, "regions/%s", r->name);
		json_t *o = json_pack("{s:s, s:i, s:s, s:i, s:s, s:i, s:o, s:o, s:o, s:I, s:I, s:b}",
				      "file", file, "kind", r->kind, "kind_name", tsm_kind_name(r->kind),
				      "codec", r->codec, "codec_name", tsm_codec_name(r->codec),
				      "flags", r->flags, "offset", sf_json_u64(r->offset),
				      "length", sf_json_u64(r->length), "raw_length", sf_json_u64(r->raw_length),
				      "crc", (json_int_t)r->crc, "dict_id", (json_int_t)r->dict_id,
				      "first_of_kind", r->first_of_kind);
		if (o && r->bad)
			json_object_set_new(o, "problem", json_string(r->bad));
		json_array_append_new(a, o);
	}
	return a;
}

int tsm_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tsm_shard *s = p->arg;
	json_t *dicts = json_array();
	for (size_t i = 0; i < s->ndicts; i++)
		json_array_append_new(dicts, json_pack("{s:I, s:I}", "id", (json_int_t)s->dicts[i].id,
						       "length", (json_int_t)s->dicts[i].len));
	json_t *j = json_pack("{s:s, s:o, s:{s:o, s:o}, s:o, s:o}", "format", "tsumugi",
			      "header", header_json(s), "footer", "schema", schema_json(s),
			      "stats", stats_json(s), "regions", regions_json(s),
			      "dictionaries", dicts);
	*out = j ? sf_json_pretty(j) : NULL;
	json_decref(j);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", s->view->path);
}
