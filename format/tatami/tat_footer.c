/* Header, trailer and footer of a .tatami file (spec §2-§5), checked in
 * upstream's order so that a file upstream refuses gets no view here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_crc32c.h"
#include "sf_format.h"
#include "sf_hash.h"
#include "tat.h"
#include "sf_view_impl.h"

enum { SEC_SCHEMA = 1, SEC_GROUPS, SEC_BLOB, SEC_DICT, SEC_INDEX, SEC_KV, SEC_STATS, SEC_INVERT, SEC_N };

static const char *const type_names[16] = {
	"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
	"float32", "float64", "string", "bytes", "timestamp_micros", "list", "blobref",
};
static const char *const enc_names[9] = {
	"plain", "rle", "dictionary", "bitpack_for", "delta", "groupvarint", "pfordelta", "fsst", "bitmap",
};
static const char *const codec_names[4] = { "none", "lz4", "zstd", "zstd_dict" };

const char *tat_type_name(uint8_t t, char buf[16])
{
	if (t < 16)
		return type_names[t];
	snprintf(buf, 16, "type(%u)", t);
	return buf;
}

const char *tat_enc_name(uint8_t x, char buf[16])
{
	if (x < 9)
		return enc_names[x];
	snprintf(buf, 16, "enc(%u)", x);
	return buf;
}

const char *tat_codec_name(uint8_t x, char buf[16])
{
	if (x < 4)
		return codec_names[x];
	snprintf(buf, 16, "codec(%u)", x);
	return buf;
}

unsigned tat_width(uint8_t type)
{
	static const unsigned w[16] = { 1, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 0, 0, 8, 0, 0 };
	return type < 16 ? w[type] : 0;
}

bool tat_is_var(uint8_t type)
{
	return type == TAT_STRING || type == TAT_BYTES || type == TAT_BLOBREF;
}

struct tat_chunk *tat_chunk_of(struct tat_group *g, size_t col)
{
	/* writers list chunks in schema order, so the direct slot usually hits */
	if (col < g->nchunks && g->chunks[col].column == col)
		return &g->chunks[col];
	for (size_t i = 0; i < g->nchunks; i++)
		if (g->chunks[i].column == col)
			return &g->chunks[i];
	return NULL;
}

static struct tat_bytes cur_bytes(struct sf_cursor *c)
{
	struct tat_bytes b = { NULL, 0 };
	uint64_t n = sf_cur_uvarint(c);
	if (n > sf_cur_left(c)) {
		c->bad = true;
		return b;
	}
	b.p = sf_cur_take(c, (size_t)n);
	b.len = (size_t)n;
	return b;
}

/* A count read from the file, bounded by the bytes left (every entry takes
 * at least `min` bytes) so that a hostile count cannot force a huge
 * allocation. */
static size_t cur_count(struct sf_cursor *c, size_t min)
{
	uint64_t n = sf_cur_uvarint(c);
	if (c->bad || n > sf_cur_left(c) / min) {
		c->bad = true;
		return 0;
	}
	return (size_t)n;
}

struct field_key {
	const struct tat_file *tf;
	struct tat_bytes name;
};

static bool field_is(const void *key, uint32_t id)
{
	const struct field_key *k = key;
	const struct tat_bytes *b = &k->tf->fields[id].name;
	return b->len == k->name.len && memcmp(b->p, k->name.p, b->len) == 0;
}

static uint64_t field_hash(const void *ctx, uint32_t id)
{
	const struct tat_bytes *b = &((const struct tat_file *)ctx)->fields[id].name;
	return XXH3_64bits(b->p, b->len);
}

/* The fields, each name checked against the earlier ones through a hash
 * (a schema may claim a million fields: no pairwise comparison). */
static int schema_fields(struct tat_file *tf, struct sf_cursor *c, struct sf_ids *seen,
			 struct sf_err *e)
{
	for (size_t i = 0; i < tf->nfields; i++) {
		struct tat_field *f = &tf->fields[i];
		f->name = cur_bytes(c);
		f->type = sf_cur_u8(c);
		f->flags = sf_cur_u8(c);
		f->element = sf_cur_u8(c);
		if (c->bad)
			return sf_fail(e, -EINVAL, "schema: field %zu is truncated", i);
		if (f->name.len == 0)
			return sf_fail(e, -EINVAL, "schema: field %zu has an empty name", i);
		if (f->type > 15)
			return sf_fail(e, -EINVAL, "schema: field %zu has unknown type %u", i, f->type);
		uint64_t h = XXH3_64bits(f->name.p, f->name.len);
		if (sf_ids_find(seen, h, field_is, &(struct field_key){ tf, f->name }))
			return sf_fail(e, -EINVAL, "schema: duplicate field name (field %zu)", i);
		if (sf_ids_put(seen, h, (uint32_t)i))
			return -ENOMEM;
		if (f->flags & TAT_F_SORT_KEY) {
			if (tf->sort_col >= 0)
				return sf_fail(e, -EINVAL, "schema: more than one sort key");
			tf->sort_col = (int)i;
		}
	}
	return 0;
}

static int parse_schema(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	size_t n = cur_count(c, 4);
	if (c->bad)
		return sf_fail(e, -EINVAL, "schema: truncated");
	if (n == 0)
		return sf_fail(e, -EINVAL, "schema has no fields");
	tf->fields = calloc(n, sizeof *tf->fields);
	if (!tf->fields)
		return -ENOMEM;
	tf->nfields = n;
	tf->sort_col = -1;
	struct sf_ids seen = { .hash_of = field_hash, .ctx = tf };
	int rc = schema_fields(tf, c, &seen, e);
	sf_ids_free(&seen);
	return rc;
}

static int parse_groups(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	size_t n = cur_count(c, 5);
	if (c->bad)
		return sf_fail(e, -EINVAL, "row groups: truncated");
	tf->groups = calloc(n ? n : 1, sizeof *tf->groups);
	if (!tf->groups)
		return -ENOMEM;
	tf->ngroups = n;
	for (size_t g = 0; g < n; g++) {
		struct tat_group *gr = &tf->groups[g];
		snprintf(gr->what, sizeof gr->what, "row group %zu", g);
		gr->first_row = sf_cur_uvarint(c);
		gr->num_rows = sf_cur_uvarint(c);
		gr->total_bytes = sf_cur_uvarint(c);
		/* format 1.0 has no group flags byte (spec §5.2) */
		gr->flags = tf->vminor == 0 ? 0 : sf_cur_u8(c);
		if (gr->flags & 1) {
			gr->smin = cur_bytes(c);
			gr->smax = cur_bytes(c);
		}
		size_t k = cur_count(c, 10);
		if (c->bad)
			return sf_fail(e, -EINVAL, "row group %zu: truncated", g);
		gr->chunks = calloc(k ? k : 1, sizeof *gr->chunks);
		if (!gr->chunks)
			return -ENOMEM;
		gr->nchunks = k;
		for (size_t i = 0; i < k; i++) {
			struct tat_chunk *ch = &gr->chunks[i];
			ch->tf = tf;
			ch->group = (uint32_t)g;
			ch->column = sf_cur_uvarint(c);
			ch->first_page = sf_cur_uvarint(c);
			ch->total_compressed = sf_cur_uvarint(c);
			ch->total_uncompressed = sf_cur_uvarint(c);
			ch->num_values = sf_cur_uvarint(c);
			ch->null_count = sf_cur_uvarint(c);
			ch->num_pages = sf_cur_uvarint(c);
			ch->encoding = sf_cur_u8(c);
			ch->codec = sf_cur_u8(c);
			ch->flags = sf_cur_u8(c);
			if (ch->flags & 1) {
				ch->zmin = cur_bytes(c);
				ch->zmax = cur_bytes(c);
			}
			if (ch->flags & 2)
				ch->bloom_ref = sf_cur_uvarint(c);
			if (ch->flags & 4)
				ch->page_index = sf_cur_uvarint(c);
			if (c->bad)
				return sf_fail(e, -EINVAL, "row group %zu: chunk %zu is truncated", g, i);
			snprintf(ch->what, sizeof ch->what, "group %zu column %llu", g,
				 (unsigned long long)ch->column);
		}
	}
	return 0;
}

static int parse_blobs(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	size_t n = cur_count(c, 4);
	if (c->bad)
		return sf_fail(e, -EINVAL, "blob directory: truncated");
	tf->blobs = calloc(n ? n : 1, sizeof *tf->blobs);
	if (!tf->blobs)
		return -ENOMEM;
	tf->nblobs = n;
	for (size_t i = 0; i < n; i++) {
		struct tat_blobcol *b = &tf->blobs[i];
		b->column = sf_cur_uvarint(c);
		b->dict_index = sf_cur_uvarint(c);
		b->record_codec = sf_cur_u8(c);
		size_t k = cur_count(c, 4);
		if (c->bad)
			return sf_fail(e, -EINVAL, "blob directory entry %zu: truncated", i);
		b->runs = calloc(k ? k : 1, sizeof *b->runs);
		if (!b->runs)
			return -ENOMEM;
		b->nruns = k;
		for (size_t r = 0; r < k; r++) {
			struct tat_run *run = &b->runs[r];
			run->col = b;
			run->offset = sf_cur_uvarint(c);
			run->csize = sf_cur_uvarint(c);
			run->usize = sf_cur_uvarint(c);
			run->nvals = sf_cur_uvarint(c);
			run->cum = b->nvals;
			if (!sf_add_ok(b->nvals, run->nvals, &b->nvals))
				return sf_fail(e, -EINVAL, "blob directory entry %zu: value count overflows", i);
			snprintf(run->what, sizeof run->what, "blob run %zu of column %llu", r,
				 (unsigned long long)b->column);
		}
		if (c->bad)
			return sf_fail(e, -EINVAL, "blob directory entry %zu: truncated", i);
		if (b->column < tf->nfields && tf->fields[b->column].type == TAT_BLOBREF &&
		    !tf->fields[b->column].blob)
			tf->fields[b->column].blob = b;
		else
			sf_view_warn(tf->view, "%s: blob directory names column %llu, which is not a blob column",
				     tf->view->path, (unsigned long long)b->column);
	}
	return 0;
}

static int parse_dicts(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	size_t n = cur_count(c, 2);
	if (c->bad)
		return sf_fail(e, -EINVAL, "dictionary directory: truncated");
	tf->dicts = calloc(n ? n : 1, sizeof *tf->dicts);
	if (!tf->dicts)
		return -ENOMEM;
	tf->ndicts = n;
	for (size_t i = 0; i < n; i++) {
		tf->dicts[i].offset = sf_cur_uvarint(c);
		tf->dicts[i].length = sf_cur_uvarint(c);
	}
	return c->bad ? sf_fail(e, -EINVAL, "dictionary directory: truncated") : 0;
}

static int parse_blooms(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	size_t n = cur_count(c, 3);
	if (c->bad)
		return sf_fail(e, -EINVAL, "index directory: truncated");
	tf->blooms = calloc(n ? n : 1, sizeof *tf->blooms);
	if (!tf->blooms)
		return -ENOMEM;
	tf->nblooms = n;
	for (size_t i = 0; i < n; i++) {
		tf->blooms[i].offset = sf_cur_uvarint(c);
		tf->blooms[i].length = sf_cur_uvarint(c);
		tf->blooms[i].kind = sf_cur_u8(c);
	}
	return c->bad ? sf_fail(e, -EINVAL, "index directory: truncated") : 0;
}

static int parse_kv(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	size_t n = cur_count(c, 2);
	if (c->bad)
		return sf_fail(e, -EINVAL, "metadata: truncated");
	tf->kv = calloc(n ? 2 * n : 1, sizeof *tf->kv);
	if (!tf->kv)
		return -ENOMEM;
	tf->nkv = n;
	for (size_t i = 0; i < 2 * n; i++)
		tf->kv[i] = cur_bytes(c);
	return c->bad ? sf_fail(e, -EINVAL, "metadata: truncated") : 0;
}

static int parse_invert(struct tat_file *tf, struct sf_cursor *c, struct sf_err *e)
{
	struct tat_invert *v = &tf->inv;
	v->dict_off = sf_cur_uvarint(c);
	v->dict_len = sf_cur_uvarint(c);
	v->post_off = sf_cur_uvarint(c);
	v->post_len = sf_cur_uvarint(c);
	v->skip_off = sf_cur_uvarint(c);
	v->skip_len = sf_cur_uvarint(c);
	v->num_terms = sf_cur_uvarint(c);
	v->num_docs = sf_cur_uvarint(c);
	/* the live-docs pair was added later: present only if bytes remain */
	if (!c->bad && sf_cur_left(c)) {
		v->live_off = sf_cur_uvarint(c);
		v->live_len = sf_cur_uvarint(c);
	}
	if (c->bad)
		return sf_fail(e, -EINVAL, "inverted index section: truncated");
	v->present = true;
	return 0;
}

static int parse_footer(struct tat_file *tf, const uint8_t *p, size_t len, struct sf_err *e)
{
	struct tat_bytes sec[SEC_N] = { { NULL, 0 } };
	bool have[SEC_N] = { false };
	if (len == 0)
		return sf_fail(e, -EINVAL, "empty footer");
	if (p[0] != 0)
		return sf_fail(e, -EINVAL, "unsupported footer codec %u", p[0]);
	struct sf_cursor c = sf_cursor(p + 1, len - 1);
	while (sf_cur_left(&c)) {
		size_t at = c.pos + 1;
		uint64_t tag = sf_cur_uvarint(&c);
		struct tat_bytes body = cur_bytes(&c);
		if (c.bad)
			return sf_fail(e, -EINVAL, "bad footer section at footer offset %zu", at);
		/* unknown tags are skipped; a repeated tag replaces the earlier one */
		if (tag > 0 && tag < SEC_N) {
			sec[tag] = body;
			have[tag] = true;
		}
	}
	if (!have[SEC_SCHEMA])
		return sf_fail(e, -EINVAL, "footer missing schema section");
	static int (*const parsers[SEC_N])(struct tat_file *, struct sf_cursor *, struct sf_err *) = {
		[SEC_SCHEMA] = parse_schema, [SEC_GROUPS] = parse_groups, [SEC_BLOB] = parse_blobs,
		[SEC_DICT] = parse_dicts, [SEC_INDEX] = parse_blooms, [SEC_KV] = parse_kv,
		[SEC_INVERT] = parse_invert,
	};
	for (int t = 1; t < SEC_N; t++) {
		if (!have[t])
			continue;
		struct sf_cursor sc = sf_cursor(sec[t].p, sec[t].len);
		if (t == SEC_STATS) {
			tf->st_rows = sf_cur_uvarint(&sc);
			tf->st_raw = sf_cur_uvarint(&sc);
			tf->st_stored = sf_cur_uvarint(&sc);
			if (sc.bad)
				return sf_fail(e, -EINVAL, "stats: truncated");
			continue;
		}
		int rc = parsers[t](tf, &sc, e);
		if (rc)
			return rc;
	}
	if (!tf->groups && !(tf->groups = calloc(1, sizeof *tf->groups)))
		return -ENOMEM;
	return 0;
}

/* Blob ordinals: present rows are numbered across the file in row order. */
static void number_blobs(struct tat_file *tf)
{
	for (size_t col = 0; col < tf->nfields; col++) {
		if (tf->fields[col].type != TAT_BLOBREF)
			continue;
		uint64_t base = 0;
		for (size_t g = 0; g < tf->ngroups; g++) {
			struct tat_chunk *ch = tat_chunk_of(&tf->groups[g], col);
			if (!ch)
				continue;
			ch->blob_base = base;
			if (ch->null_count <= ch->num_values)
				base += ch->num_values - ch->null_count;
		}
	}
}

/* Messages without the path: tat_open and the listing prefix it. */
static int check(const struct sf_probe *p, struct sf_err *e)
{
	uint64_t S = p->size;
	if (S < TAT_HEADER + TAT_TRAILER)
		return sf_fail(e, -EINVAL, "file too small (%llu bytes)", (unsigned long long)S);
	const uint8_t *t = p->tail + p->ntail - TAT_TRAILER;
	if (memcmp(t + 8, "TAT1", 4) != 0)
		return sf_fail(e, -EINVAL, "bad end magic");
	if (sf_le32(t) > S - TAT_TRAILER - TAT_HEADER)
		return sf_fail(e, -EINVAL, "footer offset before header (footer length %u)", sf_le32(t));
	if (memcmp(p->head, "TAT1", 4) != 0)
		return sf_fail(e, -EINVAL, "bad magic: not a tatami file");
	if (sf_crc32c(0, p->head, 60) != sf_le32(p->head + 60))
		return sf_fail(e, -EINVAL, "header checksum mismatch");
	if (sf_le16(p->head + 4) != 1)
		return sf_fail(e, -EINVAL, "unsupported major version %u", sf_le16(p->head + 4));
	return 0;
}

int tat_check(const struct sf_probe *p, struct sf_err *e)
{
	int rc = check(p, e);
	if (rc)
		sf_err_prefix(e, "%s", p->path);
	return rc;
}

int tat_parse(struct tat_file *tf, struct sf_err *e)
{
	uint64_t S = tf->size;
	int rc = sf_check_file(check, tf->map, NULL, e);
	if (rc)
		return rc;
	/* the check found the header and trailer in their places */
	uint8_t b[TAT_HEADER], t[TAT_TRAILER];
	if ((rc = sf_map_read(tf->map, 0, sizeof b, b, "header", e)) ||
	    (rc = sf_map_read(tf->map, S - TAT_TRAILER, sizeof t, t, "trailer", e)))
		return rc;
	tf->footer_len = sf_le32(t);
	uint32_t fcrc = sf_le32(t + 4);
	tf->footer_off = S - TAT_TRAILER - tf->footer_len;
	if ((rc = sf_map_copy(tf->map, tf->footer_off, tf->footer_len, &tf->footer, "footer", e)))
		return rc;
	if (sf_crc32c(0, tf->footer, tf->footer_len) != fcrc)
		return sf_fail(e, -EINVAL, "footer checksum mismatch");
	/* the header comes second, as upstream checks it */
	tf->vmajor = sf_le16(b + 4);
	tf->vminor = sf_le16(b + 6);
	if ((rc = parse_footer(tf, tf->footer, tf->footer_len, e)))
		return rc;
	tf->hflags = sf_le16(b + 8);
	tf->checksum_algo = b[10];
	tf->default_codec = b[11];
	tf->page_hint = sf_le32(b + 12);
	memcpy(tf->uuid, b + 16, 16);
	tf->row_count = sf_le64(b + 32);
	uint64_t hfoot = sf_le64(b + 40);
	tf->created_ms = sf_le64(b + 48);
	tf->creator = sf_le32(b + 56);
	if (hfoot != tf->footer_off)
		return sf_fail(e, -EINVAL, "header footer offset %llu disagrees with trailer (%llu)",
			       (unsigned long long)hfoot, (unsigned long long)tf->footer_off);
	if (tf->row_count != tf->st_rows)
		return sf_fail(e, -EINVAL, "header row count %llu disagrees with stats (%llu)",
			       (unsigned long long)tf->row_count, (unsigned long long)tf->st_rows);
	number_blobs(tf);
	return 0;
}

void tat_free(struct tat_file *tf)
{
	for (size_t g = 0; g < tf->ngroups; g++)
		free(tf->groups[g].chunks);
	free(tf->groups);
	for (size_t i = 0; i < tf->nblobs; i++)
		free(tf->blobs[i].runs);
	free(tf->blobs);
	for (size_t i = 0; i < tf->ndicts; i++)
		sf_buf_unref(tf->dicts[i].memo);
	free(tf->dicts);
	free(tf->blooms);
	free(tf->kv);
	for (size_t i = 0; i < tf->nfields; i++)
		tat_blobrows_free(tf->fields[i].rows);
	free(tf->fields);
	free(tf->footer);
}
