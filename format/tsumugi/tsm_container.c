/* Opening a TSM1 shard: trailer, footer, header and the shared dictionary
 * region, validated in the order upstream's reader uses (spec A11) so that a
 * refused file names the same reason upstream would. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_bytes.h"
#include "sf_crc32c.h"
#include "sf_format.h"
#include "sf_hash.h"
#include "tsm.h"

static const char *const kind_names[] = {
	NULL, "lexical", "forward", "feature", "graph", "vector", "dictionary",
};

const char *tsm_kind_name(uint8_t kind)
{
	return kind >= 1 && kind <= 6 ? kind_names[kind] : "unknown";
}

const char *tsm_codec_name(uint8_t codec)
{
	static const char *const names[] = { "none", "zstd", "zstd+dict" };
	return codec <= 2 ? names[codec] : "unknown";
}

const char *tsm_flag_name(int bit)
{
	static const char *const names[] = {
		"lexical", "forward", "feature", "graph", "vector", "dictionary",
		"search-only", "impact-postings",
	};
	return bit >= 0 && bit < 8 ? names[bit] : NULL;
}

/* These two stats hold 64-bit hashes stored as f64 bit patterns. */
bool tsm_stat_is_hash(const uint8_t *key, size_t len)
{
	return (len == 13 && memcmp(key, "analyzer_hash", 13) == 0) ||
	       (len == 17 && memcmp(key, "build_config_hash", 17) == 0);
}

void *tsm_own(struct tsm_shard *s, void *p)
{
	if (!p)
		return NULL;
	if (sf_grow(&s->owned, &s->capowned, s->nowned, sizeof *s->owned, 16)) {
		free(p);
		return NULL;
	}
	s->owned[s->nowned++] = p;
	return p;
}

static void free_schema(struct tsm_schema_col *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(c[i].name);
	free(c);
}

static void free_stats(struct tsm_stat *st, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(st[i].key);
	free(st);
}

void tsm_shard_free(void *state)
{
	struct tsm_shard *s = state;
	if (!s)
		return;
	free(s->regions);
	free_schema(s->schema, s->nschema);
	free_stats(s->stats, s->nstats);
	free(s->dicts);
	free(s->dict_bytes);
	for (size_t i = 0; i < s->nowned; i++)
		free(s->owned[i]);
	free(s->owned);
	free(s->fwd);
	if (s->docs_charged)
		sf_cache_uncharge(s->docs_cache, s->docs_charged);
	free(s->file_name);
	sf_turn_fini(&s->fwd_turn);
	free(s);
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	if (d && n)
		memcpy(d, p, n);
	return d;
}

/* Section 1. An entry takes at least 4 bytes, which bounds the count before
 * anything is allocated. */
static int parse_schema(struct tsm_shard *s, const uint8_t *p, size_t len)
{
	struct sf_cursor c = sf_cursor(p, len);
	uint64_t n = sf_cur_uvarint(&c);
	if (c.bad || n > sf_cur_left(&c) / 4)
		return -EINVAL;
	struct tsm_schema_col *cols = calloc(n ? n : 1, sizeof *cols);
	if (!cols)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t nl = sf_cur_uvarint(&c);
		const uint8_t *name = nl <= sf_cur_left(&c) ? sf_cur_take(&c, nl) : NULL;
		cols[i].type = sf_cur_u8(&c);
		cols[i].codec = sf_cur_u8(&c);
		cols[i].nullable = sf_cur_u8(&c);
		if (c.bad || !name) {
			free_schema(cols, n);
			return -EINVAL;
		}
		cols[i].name_len = nl;
		if (!(cols[i].name = dup_bytes(name, nl))) {
			free_schema(cols, n);
			return -ENOMEM;
		}
	}
	free_schema(s->schema, s->nschema);
	s->schema = cols;
	s->nschema = n;
	return 0;
}

/* The stats seen so far, by key: a section of many keys stays linear. */
struct stat_key {
	const struct tsm_shard *s;
	const uint8_t *key;
	size_t len;
};

static bool stat_is(const void *key, uint32_t i)
{
	const struct stat_key *k = key;
	const struct tsm_stat *st = &k->s->stats[i];
	return st->key_len == k->len && memcmp(st->key, k->key, k->len) == 0;
}

static int stat_set(struct tsm_shard *s, struct sf_ids *seen, size_t *cap, const uint8_t *key,
		    size_t klen, uint64_t bits)
{
	struct stat_key k = { s, key, klen };
	uint64_t h = XXH3_64bits(key, klen);
	uint32_t *i = sf_ids_find(seen, h, stat_is, &k);
	if (i) {
		s->stats[*i].bits = bits;
		return 0;
	}
	if (sf_grow(&s->stats, cap, s->nstats, sizeof *s->stats, 8))
		return -ENOMEM;
	uint8_t *d = dup_bytes(key, klen);
	if (!d || sf_ids_put(seen, h, (uint32_t)s->nstats)) {
		free(d);
		return -ENOMEM;
	}
	s->stats[s->nstats++] = (struct tsm_stat){ d, klen, bits };
	return 0;
}

/* Section 3; a repeated section merges into the stats already seen. An
 * entry takes at least 9 bytes. */
static int parse_stats(struct tsm_shard *s, const uint8_t *p, size_t len)
{
	struct sf_cursor c = sf_cursor(p, len);
	uint64_t n = sf_cur_uvarint(&c);
	if (c.bad || n > sf_cur_left(&c) / 9)
		return -EINVAL;
	struct sf_ids seen = { .map = { 0 } };
	size_t cap = s->nstats;
	int rc = 0;
	for (size_t i = 0; !rc && i < s->nstats; i++)
		rc = sf_ids_put(&seen, XXH3_64bits(s->stats[i].key, s->stats[i].key_len), (uint32_t)i);
	for (uint64_t i = 0; !rc && i < n; i++) {
		uint64_t kl = sf_cur_uvarint(&c);
		const uint8_t *key = kl <= sf_cur_left(&c) ? sf_cur_take(&c, kl) : NULL;
		uint64_t bits = sf_cur_u64(&c);
		rc = c.bad || !key ? -EINVAL : stat_set(s, &seen, &cap, key, kl, bits);
	}
	sf_ids_free(&seen);
	return rc;
}

static int parse_regions(struct tsm_shard *s, const uint8_t *p, size_t len)
{
	if (len % TSM_DESC_SIZE)
		return -EINVAL;
	size_t n = len / TSM_DESC_SIZE;
	struct tsm_region *r = calloc(n ? n : 1, sizeof *r);
	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *d = p + i * TSM_DESC_SIZE;
		r[i].kind = d[0];
		r[i].codec = d[1];
		r[i].flags = sf_le16(d + 2);
		r[i].offset = sf_le64(d + 4);
		r[i].length = sf_le64(d + 12);
		r[i].raw_length = sf_le64(d + 20);
		r[i].crc = sf_le32(d + 28);
		r[i].dict_id = sf_le32(d + 32);
	}
	free(s->regions);
	s->regions = r;
	s->nregions = n;
	return 0;
}

static int cmp_stats(const void *a, const void *b)
{
	const struct tsm_stat *x = a, *y = b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);
	if (c)
		return c;
	return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

/* Walks the sections; unknown tags are skipped (forward compatibility). */
static int parse_footer(struct tsm_shard *s, const uint8_t *p, size_t len,
			const char *path, struct sf_err *e)
{
	struct sf_cursor c = sf_cursor(p, len);
	while (sf_cur_left(&c)) {
		if (sf_cur_left(&c) < 5)
			return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): "
				       "%zu stray bytes after the last section", path, sf_cur_left(&c));
		uint8_t tag = sf_cur_u8(&c);
		uint32_t n = sf_cur_u32(&c);
		const uint8_t *body = sf_cur_take(&c, n);
		if (!body)
			return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): section %u "
				       "of %u bytes runs past the footer", path, tag, n);
		int rc = 0;
		const char *what = NULL;
		switch (tag) {
		case 1:
			rc = parse_schema(s, body, n);
			what = "schema";
			break;
		case 2:
			rc = parse_regions(s, body, n);
			what = "region table";
			break;
		case 3:
			rc = parse_stats(s, body, n);
			what = "stats";
			break;
		default:
			break;
		}
		if (rc == -ENOMEM)
			return sf_fail(e, rc, "%s: out of memory", path);
		if (rc)
			return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): malformed %s section",
				       path, what);
	}
	if (s->nstats)
		qsort(s->stats, s->nstats, sizeof *s->stats, cmp_stats);
	return 0;
}

static void parse_header(struct tsm_header *h, const uint8_t *p)
{
	h->major = sf_le16(p + 4);
	h->minor = sf_le16(p + 6);
	h->flags = sf_le64(p + 8);
	h->doc_count = sf_le32(p + 16);
	h->region_count = sf_le32(p + 20);
	h->footer_offset = sf_le64(p + 24);
	h->footer_length = sf_le64(p + 32);
	h->node_base = sf_le64(p + 40);
	h->build_epoch = sf_le64(p + 48);
	h->crc = sf_le32(p + 56);
	h->reserved = sf_le32(p + 60);
}

/* The TSDC region (spec A9): parsed and CRC-checked at open, like upstream. */
static int parse_dictionaries(struct tsm_shard *s, struct tsm_region *r, const char *path,
			      struct sf_err *e)
{
	int rc = sf_map_copy(s->map, r->offset, r->length, &s->dict_bytes, "dictionary region", e);
	if (rc)
		return rc;
	const uint8_t *p = s->dict_bytes;
	if (sf_crc32c(0, p, r->length) != r->crc)
		return sf_fail(e, -EINVAL, "%s: region CRC mismatch (region_crc): dictionary region "
			       "at %llu", path, (unsigned long long)r->offset);
	struct sf_cursor c = sf_cursor(p, r->length);
	const uint8_t *magic = sf_cur_take(&c, 4);
	uint32_t version = sf_cur_u32(&c), n = sf_cur_u32(&c);
	if (c.bad || memcmp(magic, "TSDC", 4) != 0 || version != 1 || n > sf_cur_left(&c) / 8)
		return sf_fail(e, -EINVAL, "%s: bad dictionary region (bad_dictionary): "
			       "wrong magic, version or count", path);
	s->dicts = calloc(n ? n : 1, sizeof *s->dicts);
	if (!s->dicts)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = sf_cur_u32(&c), len = sf_cur_u32(&c);
		const uint8_t *content = sf_cur_take(&c, len);
		if (c.bad || id == 0 || len == 0 || tsm_dict_find(s, id))
			return sf_fail(e, -EINVAL, "%s: bad dictionary region (bad_dictionary): entry %u "
				       "is truncated, empty, has id 0 or repeats an id", path, i);
		s->dicts[s->ndicts++] = (struct tsm_dict){ id, content, len };
	}
	s->has_dict_region = true;
	return 0;
}

/* Names regions/<kind>, <kind>.1 ... in descriptor order, and records why a
 * descriptor cannot be served. Regions must lie between the header and the
 * footer: upstream trusts these fields, we do not. */
static void classify_regions(struct tsm_shard *s)
{
	unsigned seen[256] = { 0 };
	for (size_t i = 0; i < s->nregions; i++) {
		struct tsm_region *r = &s->regions[i];
		const char *kn = tsm_kind_name(r->kind);
		char base[16];
		if (strcmp(kn, "unknown") == 0)
			snprintf(base, sizeof base, "kind-%u", r->kind);
		else
			snprintf(base, sizeof base, "%s", kn);
		if (seen[r->kind])
			snprintf(r->name, sizeof r->name, "%s.%u", base, seen[r->kind]);
		else
			snprintf(r->name, sizeof r->name, "%s", base);
		r->first_of_kind = seen[r->kind]++ == 0;
		uint64_t end;
		if (r->offset < TSM_HEADER_SIZE || !sf_add_ok(r->offset, r->length, &end) ||
		    end > s->h.footer_offset)
			r->bad = "stored bytes lie outside the region area";
		else if (r->codec > TSM_ZSTD_DICT)
			r->bad = "unknown codec";
		else if (r->codec == TSM_NONE && r->raw_length != r->length)
			r->bad = "raw length differs from the stored length of an uncompressed region";
		/* zstd cannot expand a block more than 32768-fold (a 4-byte RLE
		 * block makes at most 128 KiB), so a larger raw length is a lie we
		 * must not allocate for. */
		else if (r->codec != TSM_NONE && r->raw_length / 32768 > r->length)
			r->bad = "raw length is impossible for the stored bytes";
	}
}

/* Trailer magic and footer length, header magic, CRC and version. */
int tsm_check(const struct sf_probe *p, struct sf_err *e)
{
	if (p->size < TSM_HEADER_SIZE + TSM_TRAILER_SIZE)
		return sf_fail(e, -EINVAL, "%s: file too short (short_file): %llu bytes, a shard has "
			       "at least 80", p->path, (unsigned long long)p->size);
	const uint8_t *t = p->tail + p->ntail - TSM_TRAILER_SIZE;
	if (memcmp(t + 12, "TSM1", 4) != 0)
		return sf_fail(e, -EINVAL, "%s: bad magic (bad_magic): no TSM1 trailer, the write "
			       "may be torn", p->path);
	if (sf_le64(t) > p->size - TSM_TRAILER_SIZE)
		return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): footer length %llu "
			       "exceeds the file", p->path, (unsigned long long)sf_le64(t));
	if (memcmp(p->head, "TSM1", 4) != 0)
		return sf_fail(e, -EINVAL, "%s: bad magic (bad_magic): header does not start with TSM1",
			       p->path);
	struct tsm_header h;
	parse_header(&h, p->head);
	if (sf_crc32c(0, p->head, 56) != h.crc)
		return sf_fail(e, -EINVAL, "%s: header CRC mismatch (header_crc)", p->path);
	if (h.major != 1)
		return sf_fail(e, -EINVAL, "%s: unsupported version (bad_version): %u.%u", p->path,
			       h.major, h.minor);
	uint64_t flen = sf_le64(t), fstart = p->size - TSM_TRAILER_SIZE - flen;
	if (h.footer_offset != fstart || h.footer_length != flen)
		return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): header says footer "
			       "at %llu+%llu, trailer says %llu+%llu", p->path,
			       (unsigned long long)h.footer_offset, (unsigned long long)h.footer_length,
			       (unsigned long long)fstart, (unsigned long long)flen);
	if (fstart < TSM_HEADER_SIZE)
		return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): footer overlaps the "
			       "header", p->path);
	return 0;
}

int tsm_parse(struct tsm_shard *s, const char *path, struct sf_err *e)
{
	size_t size = s->size;
	int rc = sf_check_file(tsm_check, s->map, path, e);
	if (rc)
		return rc;
	/* the check found the header and trailer in their places */
	uint8_t p[TSM_HEADER_SIZE], t[TSM_TRAILER_SIZE];
	if ((rc = sf_map_read(s->map, 0, sizeof p, p, "header", e)) ||
	    (rc = sf_map_read(s->map, size - sizeof t, sizeof t, t, "trailer", e)))
		return rc;
	uint64_t flen = sf_le64(t);
	uint64_t fstart = size - TSM_TRAILER_SIZE - flen;
	uint8_t *footer;
	if ((rc = sf_map_copy(s->map, fstart, flen, &footer, "footer", e)))
		return rc;
	if (sf_crc32c(0, footer, flen) != sf_le32(t + 8))
		rc = sf_fail(e, -EINVAL, "%s: footer CRC mismatch (footer_crc)", path);
	else
		rc = parse_footer(s, footer, flen, path, e);
	free(footer);
	if (rc)
		return rc;
	parse_header(&s->h, p);
	classify_regions(s);
	struct tsm_region *d = NULL;
	for (size_t i = 0; i < s->nregions && !d; i++)
		if (s->regions[i].kind == TSM_DICTIONARY)
			d = &s->regions[i];
	if (d) {
		uint64_t end;
		if (!sf_add_ok(d->offset, d->length, &end) || end > size)
			return sf_fail(e, -EINVAL, "%s: corrupt footer (corrupt_footer): dictionary "
				       "region runs past the file", path);
		if ((rc = parse_dictionaries(s, d, path, e)))
			return rc;
		atomic_store(&d->checked, 1);
	}
	return 0;
}
