/* The forward region (FWD1, spec B1): stored documents as docs/<id>/<col>
 * files and docs.jsonl. Values decode one at a time; a blocked body decodes
 * per 16 KiB block, so reading its head touches only the first block. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "sf_bytes.h"
#include "sf_codec.h"
#include "sf_crc32c.h"
#include "sf_json.h"
#include "sf_report.h"
#include "tsm.h"
#include "sf_view_impl.h"

#define FWD_BLOCK 16384
#define FWD_BLOCKED 3
/* One value never decodes to more than this (its stored size is u32). */
#define FWD_VALUE_LIMIT ((size_t)1 << 31)

struct tsm_fwd_col {
	uint8_t *name;
	size_t name_len;
	char *key; /* the docs.jsonl key: valid UTF-8, unique */
	uint8_t type, codec;
	uint32_t flags;
	uint64_t data_off, data_len, dict_off, dict_len;
	bool hex; /* doc_id: binary shown as hex */
};

struct tsm_fwd {
	struct tsm_region *r;
	uint32_t rows, ncols;
	struct tsm_fwd_col cols[];
};

/* A blocked value's parts share this. */
struct fwd_blocks {
	struct tsm_shard *s;
	uint32_t doc, col;
};

static const char *vpath(const struct tsm_shard *s)
{
	return s->view->path;
}

/* The jsonl key of column i: its name as UTF-8, made unique among "id" and
 * the earlier columns. */
static int make_key(struct tsm_shard *s, struct tsm_fwd *f, uint32_t i)
{
	struct sf_str base = { 0 };
	sf_utf8_sanitize_add(&base, f->cols[i].name, f->cols[i].name_len);
	sf_str_addc(&base, 0);
	if (base.oom)
		return -ENOMEM;
	char *key = NULL;
	for (unsigned n = 0; !key; n++) {
		size_t len = base.len + 24;
		char *k = malloc(len);
		if (!k) {
			sf_str_free(&base);
			return -ENOMEM;
		}
		if (n)
			snprintf(k, len, "%s#%u", (char *)base.p, n);
		else
			snprintf(k, len, "%s", (char *)base.p);
		bool taken = strcmp(k, "id") == 0;
		for (uint32_t j = 0; j < i && !taken; j++)
			taken = strcmp(f->cols[j].key, k) == 0;
		if (taken)
			free(k);
		else
			key = k;
	}
	sf_str_free(&base);
	f->cols[i].key = tsm_own(s, key);
	return f->cols[i].key ? 0 : -ENOMEM;
}

static int parse_fwd(struct tsm_shard *s, struct tsm_region *r, const uint8_t *p, size_t len,
		     struct sf_err *e)
{
	struct sf_cursor c = sf_cursor(p, len);
	const uint8_t *magic = sf_cur_take(&c, 4);
	uint32_t version = sf_cur_u32(&c), ncols = sf_cur_u32(&c), rows = sf_cur_u32(&c);
	if (c.bad || memcmp(magic, "FWD1", 4) != 0)
		return sf_fail(e, -EIO, "%s: regions/%s: not a FWD1 forward region", vpath(s), r->name);
	if (version != 2)
		return sf_fail(e, -EIO, "%s: regions/%s: FWD1 version %u, expected 2", vpath(s),
			       r->name, version);
	/* a descriptor takes at least 42 bytes; rows without columns have
	 * nothing bounding their count */
	if (ncols > sf_cur_left(&c) / 42 || (!ncols && rows))
		return sf_fail(e, -EIO, "%s: regions/%s: %u columns of %u rows cannot be", vpath(s),
			       r->name, ncols, rows);
	struct tsm_fwd *f = calloc(1, sizeof *f + (size_t)ncols * sizeof f->cols[0]);
	if (!f)
		return -ENOMEM;
	f->r = r;
	f->rows = rows;
	f->ncols = ncols;
	uint64_t min_data = ((uint64_t)rows + 1) * 4;
	int rc = 0;
	for (uint32_t i = 0; i < ncols && !rc; i++) {
		struct tsm_fwd_col *col = &f->cols[i];
		uint32_t nl = sf_cur_u32(&c);
		const uint8_t *name = sf_cur_take(&c, nl);
		col->type = sf_cur_u8(&c);
		col->codec = sf_cur_u8(&c);
		col->flags = sf_cur_u32(&c);
		col->data_off = sf_cur_u64(&c);
		col->data_len = sf_cur_u64(&c);
		col->dict_off = sf_cur_u64(&c);
		col->dict_len = sf_cur_u64(&c);
		if (c.bad) {
			rc = sf_fail(e, -EIO, "%s: regions/%s: column %u descriptor is truncated",
				     vpath(s), r->name, i);
			break;
		}
		if (!sf_range_ok(len, col->data_off, col->data_len) || col->data_len < min_data ||
		    (col->dict_len && !sf_range_ok(len, col->dict_off, col->dict_len)))
			rc = sf_fail(e, -EIO, "%s: regions/%s: column %u data or dictionary lies "
				     "outside the region", vpath(s), r->name, i);
		col->name = tsm_own(s, malloc(nl ? nl : 1));
		if (!col->name) {
			rc = -ENOMEM;
			break;
		}
		memcpy(col->name, name, nl);
		col->name_len = nl;
		col->hex = nl == 6 && memcmp(name, "doc_id", 6) == 0;
		if (!rc)
			rc = make_key(s, f, i);
	}
	size_t h = c.pos;
	uint32_t crc = sf_cur_u32(&c);
	if (!rc && (c.bad || sf_crc32c(0, p, h) != crc))
		rc = sf_fail(e, -EIO, "%s: regions/%s: FWD1 header CRC mismatch", vpath(s), r->name);
	if (rc) {
		free(f);
		return rc;
	}
	s->fwd = f;
	return 0;
}

static int fwd_parse(struct tsm_shard *s, struct tsm_region *r, struct sf_cache *c,
		     struct sf_err *e)
{
	const uint8_t *p;
	struct sf_buf *hold;
	int rc = tsm_region_bytes(s, r, c, &p, &hold, e);
	if (rc)
		return rc;
	rc = parse_fwd(s, r, p, r->raw_length, e);
	sf_buf_unref(hold);
	return rc;
}

/* Parses the forward header once. */
static int fwd_load(struct tsm_shard *s, struct sf_cache *c, struct sf_err *e)
{
	sf_turn_take(&s->fwd_turn);
	int rc = 0;
	if (s->fwd)
		goto out;
	struct tsm_region *r = tsm_first(s, TSM_FORWARD);
	if (!r) {
		rc = sf_fail(e, -EIO, "%s: the forward region cannot be read", vpath(s));
		goto out;
	}
	rc = fwd_parse(s, r, c, e);
out:
	sf_turn_give(&s->fwd_turn);
	return rc;
}

/* The stored slot of (doc, col) inside the decoded region `base`. */
static int fwd_slot(const struct tsm_shard *s, const uint8_t *base, uint32_t doc, uint32_t ci,
		    uint64_t *off, uint64_t *len, struct sf_err *e)
{
	const struct tsm_fwd *f = s->fwd;
	const struct tsm_fwd_col *col = &f->cols[ci];
	const uint8_t *offs = base + col->data_off;
	uint64_t area = (uint64_t)(f->rows + 1) * 4;
	uint32_t a = sf_le32(offs + (uint64_t)doc * 4), b = sf_le32(offs + (uint64_t)doc * 4 + 4);
	if (a > b || b > col->data_len - area)
		return sf_fail(e, -EIO, "%s: regions/%s: document %u column %u: value offsets "
			       "%u..%u are out of order or outside the column", vpath(s), f->r->name,
			       doc, ci, a, b);
	*off = col->data_off + area + a;
	*len = b - a;
	return 0;
}

/* The dictionary of a column frame: chosen by the frame's id, which must be
 * the column's (index + 1); id 0 means none (spec B1.3). */
static int frame_dict(const struct tsm_shard *s, const uint8_t *base, uint32_t ci,
		      const uint8_t *frame, size_t len, const void **dict, size_t *dictlen,
		      struct sf_err *e)
{
	const struct tsm_fwd_col *col = &s->fwd->cols[ci];
	uint32_t id = 0;
	*dict = NULL;
	*dictlen = 0;
	if (sf_zstd_frame_dict_id(frame, len, &id))
		return sf_fail(e, -EIO, "%s: regions/%s: column %u: value is not a zstd frame",
			       vpath(s), s->fwd->r->name, ci);
	if (!id)
		return 0;
	if (id != ci + 1 || !col->dict_len)
		return sf_fail(e, -EIO, "%s: regions/%s: column %u: frame names dictionary %u, "
			       "the column has %s", vpath(s), s->fwd->r->name, ci, id,
			       col->dict_len ? "another" : "none");
	*dict = base + col->dict_off;
	*dictlen = col->dict_len;
	return 0;
}

/* Block k of a blocked value: the frame's place inside the slot. */
static int block_span(const struct tsm_shard *s, const uint8_t *slot, uint64_t len, uint32_t ci,
		      uint32_t k, uint32_t *nblocks, uint64_t *foff, uint64_t *flen,
		      struct sf_err *e)
{
	uint32_t n = len >= 4 ? sf_le32(slot) : 0;
	uint64_t frames = 4 + (uint64_t)n * 4;
	if (len < 4 || frames > len)
		return sf_fail(e, -EIO, "%s: regions/%s: column %u: block index is truncated",
			       vpath(s), s->fwd->r->name, ci);
	*nblocks = n;
	if (k >= n)
		return 0;
	uint32_t start = k ? sf_le32(slot + 4 + (uint64_t)(k - 1) * 4) : 0;
	uint32_t end = sf_le32(slot + 4 + (uint64_t)k * 4);
	if (start > end || end > len - frames)
		return sf_fail(e, -EIO, "%s: regions/%s: column %u: block %u lies outside the value",
			       vpath(s), s->fwd->r->name, ci, k);
	*foff = frames + start;
	*flen = end - start;
	return 0;
}

/* Decodes block k into a new buffer: exactly 16 KiB unless it is the last. */
static int decode_block(const struct tsm_shard *s, const uint8_t *base, const uint8_t *slot,
			uint64_t len, uint32_t ci, uint32_t k, struct sf_buf **out,
			struct sf_err *e)
{
	uint32_t n = 0;
	uint64_t foff = 0, flen = 0;
	int rc = block_span(s, slot, len, ci, k, &n, &foff, &flen, e);
	if (rc)
		return rc;
	if (k >= n)
		return sf_fail(e, -EIO, "%s: regions/%s: column %u: no block %u", vpath(s),
			       s->fwd->r->name, ci, k);
	const void *dict = NULL;
	size_t dictlen = 0;
	if (flen && (rc = frame_dict(s, base, ci, slot + foff, flen, &dict, &dictlen, e)))
		return rc;
	uint8_t *p = NULL;
	size_t plen = 0;
	rc = sf_zstd_decode_alloc(slot + foff, flen, FWD_BLOCK, dict, dictlen, "forward block",
				  &p, &plen, e);
	if (rc == 0 && k + 1 < n && plen != FWD_BLOCK)
		rc = sf_fail(e, -EIO, "block decoded to %zu bytes, not 16384", plen);
	if (rc) {
		free(p);
		sf_err_prefix(e, "%s: regions/%s: column %u block %u", vpath(s), s->fwd->r->name, ci, k);
		return rc == -ENOMEM ? rc : -EIO;
	}
	if (!(*out = sf_buf_wrap(p, plen))) {
		free(p);
		return -ENOMEM;
	}
	return 0;
}

static void hex_into(uint8_t *dst, const uint8_t *src, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		dst[2 * i] = (uint8_t)digits[src[i] >> 4];
		dst[2 * i + 1] = (uint8_t)digits[src[i] & 15];
	}
}

/* The most one value may decode to: the host's limit, if it has one. */
static size_t value_limit(const struct tsm_shard *s)
{
	uint64_t limit = s->view->cache ? s->view->cache->limit : 0;
	return limit && limit < FWD_VALUE_LIMIT ? (size_t)limit : FWD_VALUE_LIMIT;
}

/* The whole decoded value of (doc, col), as stored (no hex). */
static int decode_value(const struct tsm_shard *s, const uint8_t *base, uint32_t doc,
			uint32_t ci, struct sf_buf **out, struct sf_err *e)
{
	const struct tsm_fwd_col *col = &s->fwd->cols[ci];
	uint64_t off = 0, len = 0;
	int rc = fwd_slot(s, base, doc, ci, &off, &len, e);
	if (rc)
		return rc;
	const uint8_t *slot = base + off;
	if (!len || col->codec == TSM_NONE) {
		*out = sf_buf_new(len);
		if (*out && len)
			memcpy((*out)->data, slot, len);
		return *out ? 0 : -ENOMEM;
	}
	if (col->codec == FWD_BLOCKED) {
		uint32_t n;
		uint64_t foff, flen;
		if ((rc = block_span(s, slot, len, ci, 0, &n, &foff, &flen, e)))
			return rc;
		struct sf_str all = { 0 };
		for (uint32_t k = 0; k < n; k++) {
			struct sf_buf *b;
			if ((rc = decode_block(s, base, slot, len, ci, k, &b, e))) {
				sf_str_free(&all);
				return rc;
			}
			if (all.len + b->len > value_limit(s)) {
				sf_buf_unref(b);
				sf_str_free(&all);
				return sf_fail(e, -EIO, "%s: regions/%s: document %u column %u decodes "
					       "to more than %zu bytes", vpath(s), s->fwd->r->name,
					       doc, ci, value_limit(s));
			}
			sf_str_add(&all, b->data, b->len);
			sf_buf_unref(b);
		}
		*out = sf_str_take(&all);
		return *out ? 0 : -ENOMEM;
	}
	/* codec 1, 2 and anything else: one frame, as upstream reads it */
	const void *dict;
	size_t dictlen;
	if ((rc = frame_dict(s, base, ci, slot, len, &dict, &dictlen, e)))
		return rc;
	uint8_t *p = NULL;
	size_t plen = 0;
	rc = sf_zstd_decode_alloc(slot, len, value_limit(s), dict, dictlen, "value", &p, &plen, e);
	if (rc) {
		sf_err_prefix(e, "%s: regions/%s: document %u column %u", vpath(s), s->fwd->r->name,
			      doc, ci);
		return rc == -ENOMEM ? rc : -EIO;
	}
	if (!(*out = sf_buf_wrap(p, plen))) {
		free(p);
		return -ENOMEM;
	}
	return 0;
}

/* decode_value, rendered as the docs/ file shows it (doc_id as hex). */
static int render_value(const struct tsm_shard *s, const uint8_t *base, uint32_t doc,
			uint32_t ci, struct sf_buf **out, struct sf_err *e)
{
	int rc = decode_value(s, base, doc, ci, out, e);
	if (rc || !s->fwd->cols[ci].hex)
		return rc;
	struct sf_buf *h = sf_buf_new((*out)->len * 2);
	if (h)
		hex_into(h->data, (*out)->data, (*out)->len);
	sf_buf_unref(*out);
	*out = h;
	return h ? 0 : -ENOMEM;
}

/* Runs fn with the decoded forward region at hand. */
struct fwd_hold {
	const uint8_t *base;
	struct sf_buf *buf;
};

static int fwd_bytes(struct tsm_shard *s, struct sf_cache *c, struct fwd_hold *h,
		     struct sf_err *e)
{
	return tsm_region_bytes(s, s->fwd->r, c, &h->base, &h->buf, e);
}

static int produce_value(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tsm_shard *s = p->arg;
	struct fwd_hold h;
	int rc = fwd_bytes(s, cache, &h, e);
	if (rc)
		return rc;
	rc = render_value(s, h.base, (uint32_t)(p->aux >> 32), (uint32_t)p->aux, out, e);
	sf_buf_unref(h.buf);
	return rc;
}

static int produce_block(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct fwd_blocks *bl = p->arg;
	struct tsm_shard *s = bl->s;
	struct fwd_hold h;
	int rc = fwd_bytes(s, cache, &h, e);
	if (rc)
		return rc;
	uint64_t off, len;
	rc = fwd_slot(s, h.base, bl->doc, bl->col, &off, &len, e);
	if (rc == 0)
		rc = decode_block(s, h.base, h.base + off, len, bl->col, (uint32_t)p->aux, out, e);
	sf_buf_unref(h.buf);
	return rc;
}

/* The last block's size: from its frame header when the header records it
 * (a wrong one fails the read later, when the part decodes), else by
 * decoding that block, which is small: only 1-255 byte frames omit it. */
static int last_block_size(struct tsm_shard *s, const uint8_t *slot, uint64_t len, uint32_t ci,
			   uint32_t n, struct sf_cache *c, struct sf_part *last, uint64_t *size,
			   struct sf_err *e)
{
	uint32_t nb;
	uint64_t foff = 0, flen = 0;
	int rc = block_span(s, slot, len, ci, n - 1, &nb, &foff, &flen, e);
	if (rc)
		return rc;
	unsigned long long fcs = flen ? ZSTD_getFrameContentSize(slot + foff, flen)
				      : ZSTD_CONTENTSIZE_UNKNOWN;
	if (fcs <= FWD_BLOCK) {
		*size = fcs;
		atomic_store(&last->size, fcs);
		return 0;
	}
	struct sf_buf *b = NULL;
	if ((rc = sf_part_get(c, last, &b, e)))
		return rc;
	*size = b->len;
	sf_buf_unref(b);
	return 0;
}

/* A blocked body: one part per block, so `head -c` decodes only block 0.
 * Only the last block's size is unknown, and learning it decodes that one
 * block alone. */
static int build_blocked(struct sf_node *f, struct tsm_shard *s, const uint8_t *slot,
			 uint64_t len, uint32_t doc, uint32_t ci, struct sf_cache *c,
			 struct sf_err *e)
{
	uint32_t n;
	uint64_t foff, flen;
	int rc = block_span(s, slot, len, ci, 0, &n, &foff, &flen, e);
	if (rc)
		return sf_file_set_broken(f, 0, e->msg);
	if (!n)
		return 0;
	struct fwd_blocks *bl = tsm_own(s, malloc(sizeof *bl));
	struct sf_part *last = bl ? sf_view_part(s->view, produce_block, bl, SF_SIZE_UNKNOWN,
						  "forward body block") : NULL;
	if (!last)
		return -ENOMEM;
	*bl = (struct fwd_blocks){ s, doc, ci };
	last->aux = n - 1;
	uint64_t last_len;
	if ((rc = last_block_size(s, slot, len, ci, n, c, last, &last_len, e)))
		return rc == -EIO ? sf_file_set_broken(f, 0, e->msg) : rc;
	for (uint32_t k = 0; k + 1 < n; k++) {
		struct sf_part *p = sf_view_part(s->view, produce_block, bl, FWD_BLOCK,
						 "forward body block");
		if (!p)
			return -ENOMEM;
		p->aux = k;
		if ((rc = sf_file_add_part(f, p, 0, FWD_BLOCK)))
			return rc;
	}
	return sf_file_add_part(f, last, 0, last_len);
}

/* docs/<doc>/<col>: the region's bytes for stored values, a decoded part
 * otherwise. A value whose bytes fail a check becomes a broken file. */
static int build_value(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tsm_shard *s = f->arg;
	uint32_t doc = (uint32_t)(f->aux >> 32), ci = (uint32_t)f->aux;
	const struct tsm_fwd_col *col = &s->fwd->cols[ci];
	struct fwd_hold h;
	int rc = fwd_bytes(s, c, &h, e);
	if (rc)
		return rc == -EIO ? sf_file_set_broken(f, 0, e->msg) : rc;
	uint64_t off, len;
	rc = fwd_slot(s, h.base, doc, ci, &off, &len, e);
	if (rc) {
		rc = sf_file_set_broken(f, 0, e->msg);
	} else if (!len) {
		rc = 0;
	} else if (col->codec == TSM_NONE && !col->hex) {
		/* a stored value of a codec-0 region: its mapped bytes, for the
		 * kernel */
		if (s->fwd->r->codec == TSM_NONE)
			rc = sf_file_add_map(f, s->map->data + s->fwd->r->offset + off, len);
		else
			rc = sf_file_add_part(f, s->fwd->r->decoded, off, len);
	} else if (col->codec == FWD_BLOCKED && !col->hex) {
		rc = build_blocked(f, s, h.base + off, len, doc, ci, c, e);
	} else {
		struct sf_part *p = sf_view_part(s->view, produce_value, s,
						 col->codec == TSM_NONE ? len * 2 : SF_SIZE_UNKNOWN,
						 "forward value");
		if (!p) {
			rc = -ENOMEM;
		} else {
			p->aux = f->aux;
			rc = tsm_file_from_part(f, p, c, e);
		}
	}
	sf_buf_unref(h.buf);
	return rc;
}

static int populate_doc(struct sf_node *dir, struct sf_err *e)
{
	struct tsm_shard *s = dir->arg;
	for (uint32_t i = 0; i < s->fwd->ncols; i++) {
		const struct tsm_fwd_col *col = &s->fwd->cols[i];
		struct sf_node *f = sf_dir_add_file(dir, col->name, col->name_len);
		if (!f)
			return sf_fail(e, -ENOMEM, "%s: out of memory", vpath(s));
		f->aux = dir->aux << 32 | i;
		sf_file_set_build(f, build_value, s);
	}
	return 0;
}

/* docs/<d>, made when looked up: a file may claim millions of documents,
 * and an entry costs some 30 bytes where a node costs hundreds. */
static int make_doc(struct sf_node *n, struct sf_err *e)
{
	sf_dir_set_populate(n, populate_doc, n->parent->arg);
	n->aux = n->key;
	return 0;
}

/* What an entry of docs/ takes: its record, name and index slots, and
 * the slack of arrays grown by doubling. */
#define DOC_ENTRY_COST 48

static int populate_docs(struct sf_node *dir, struct sf_err *e)
{
	struct tsm_shard *s = dir->arg;
	struct sf_cache *c = dir->view->cache;
	int rc = fwd_load(s, c, e);
	if (rc)
		return rc;
	/* the count is the file's claim: held in the budget while the view
	 * lives, refused beyond it */
	uint64_t cost = (uint64_t)s->fwd->rows * DOC_ENTRY_COST;
	if (!s->docs_charged) {
		if ((rc = sf_cache_charge(c, cost, vpath(s), "listing docs/", e)))
			return rc;
		/* a cache without a budget held nothing, and may be gone
		 * before the view (a tool's) */
		if (c->charge) {
			s->docs_cache = c;
			s->docs_charged = cost;
		}
	}
	for (uint32_t d = 0; d < s->fwd->rows; d++) {
		char name[16];
		int len = snprintf(name, sizeof name, "%u", d);
		if ((rc = sf_dir_add_lazy(dir, name, (size_t)len, SF_DIR, d, 0)))
			return sf_fail(e, rc, "%s: out of memory listing docs/", vpath(s));
	}
	return 0;
}

/* One docs.jsonl line: {"id": global id, "<column>": value, ...}. */
static int render_line(const struct tsm_shard *s, const uint8_t *base, uint32_t doc,
		       struct sf_str *out, struct sf_err *e)
{
	sf_str_addf(out, "{\"id\":%llu", (unsigned long long)(s->h.node_base + doc));
	for (uint32_t i = 0; i < s->fwd->ncols; i++) {
		const struct tsm_fwd_col *col = &s->fwd->cols[i];
		struct sf_buf *v;
		int rc = render_value(s, base, doc, i, &v, e);
		if (rc)
			return rc;
		json_t *key = json_string(col->key);
		json_t *val = col->hex || col->type == 1 ? sf_json_bytes_as_text(v->data, v->len)
							 : sf_json_base64(v->data, v->len);
		sf_buf_unref(v);
		sf_str_addc(out, ',');
		rc = key && val ? sf_json_add(out, key, 0) : -ENOMEM;
		sf_str_addc(out, ':');
		if (!rc)
			rc = sf_json_add(out, val, 0);
		json_decref(key);
		json_decref(val);
		if (rc)
			return sf_fail(e, rc, "%s: out of memory", vpath(s));
	}
	sf_str_add(out, "}\n", 2);
	return out->oom ? sf_fail(e, -ENOMEM, "%s: out of memory", vpath(s)) : 0;
}

/* A docs.jsonl part is a run of lines: at most JSONL_ROWS, and past the
 * first no more than JSONL_BYTES (or an eighth of a small budget), so that
 * a million empty documents make a few hundred parts rather than a million
 * (a 336-byte file could claim them), while a part stays small to decode. */
#define JSONL_ROWS 4096
#define JSONL_BYTES (1u << 20)

static uint64_t jsonl_bytes(const struct sf_cache *c)
{
	return c->limit && c->limit / 8 < JSONL_BYTES ? c->limit / 8 : JSONL_BYTES;
}

/* Lines [aux >> 32, + (uint32_t)aux) of docs.jsonl. */
static int produce_lines(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out,
			 struct sf_err *e)
{
	struct tsm_shard *s = p->arg;
	struct fwd_hold h;
	int rc = fwd_bytes(s, cache, &h, e);
	if (rc)
		return rc;
	uint32_t first = (uint32_t)(p->aux >> 32), n = (uint32_t)p->aux;
	struct sf_str lines = { 0 };
	for (uint32_t d = first; !rc && d - first < n; d++)
		rc = render_line(s, h.base, d, &lines, e);
	sf_buf_unref(h.buf);
	if (rc) {
		sf_str_free(&lines);
		return rc;
	}
	*out = sf_str_take(&lines);
	return *out ? 0 : -ENOMEM;
}

/* Ends the run of `n` lines from `first` (`len` bytes) as one part. */
static int add_lines(struct sf_node *f, struct tsm_shard *s, uint32_t first, uint32_t n,
		     uint64_t len)
{
	struct sf_part *p = sf_view_part(s->view, produce_lines, s, len, "docs.jsonl");
	if (!p)
		return -ENOMEM;
	p->aux = (uint64_t)first << 32 | n;
	return sf_file_add_part(f, p, 0, len);
}

/* docs.jsonl: every line rendered once here to learn its size (and then
 * dropped), so the whole file never has to sit in memory at once. */
static int build_jsonl(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tsm_shard *s = f->arg;
	int rc = fwd_load(s, c, e);
	struct fwd_hold h = { 0 };
	if (rc == 0)
		rc = fwd_bytes(s, c, &h, e);
	if (rc)
		return rc == -EIO ? sf_file_set_broken(f, 0, e->msg) : rc;
	struct sf_str line = { 0 };
	uint32_t first = 0, n = 0;
	uint64_t len = 0, most = jsonl_bytes(c);
	for (uint32_t d = 0; !rc && d < s->fwd->rows; d++) {
		line.len = 0;
		if ((rc = render_line(s, h.base, d, &line, e)))
			break;
		if (n && (n == JSONL_ROWS || len + line.len > most)) {
			rc = add_lines(f, s, first, n, len);
			first = d;
			n = 0;
			len = 0;
		}
		n++;
		len += line.len;
	}
	if (!rc && n)
		rc = add_lines(f, s, first, n, len);
	sf_str_free(&line);
	sf_buf_unref(h.buf);
	return rc == -EIO ? sf_file_set_broken(f, 0, e->msg) : rc;
}

int tsm_add_docs(struct tsm_shard *s, struct sf_node *root)
{
	if (!tsm_first(s, TSM_FORWARD))
		return 0;
	struct sf_node *docs = sf_dir_add_dir(root, "docs", 4);
	struct sf_node *jsonl = sf_dir_add_file(root, "docs.jsonl", 10);
	if (!docs || !jsonl)
		return -ENOMEM;
	if (sf_dir_set_lazy(docs, make_doc))
		return -ENOMEM;
	sf_dir_set_populate(docs, populate_docs, s);
	sf_file_set_build(jsonl, build_jsonl, s);
	return 0;
}

int tsm_forward_verify(struct tsm_shard *s, struct sf_report *r)
{
	struct sf_err e = { { 0 } };
	struct sf_cache *c = s->view->cache;
	int rc = fwd_load(s, c, &e);
	struct fwd_hold h = { 0 };
	if (rc == 0)
		rc = fwd_bytes(s, c, &h, &e);
	if (rc) {
		sf_report_add(r, true, "%s", e.msg);
		return rc == -ENOMEM ? rc : 0;
	}
	int bad = 0;
	for (uint32_t d = 0; d < s->fwd->rows; d++)
		for (uint32_t i = 0; i < s->fwd->ncols; i++) {
			struct sf_buf *v = NULL;
			rc = decode_value(s, h.base, d, i, &v, &e);
			sf_buf_unref(v);
			if (rc == -ENOMEM)
				goto out;
			/* one line per broken value would drown the report */
			if (rc && bad++ < 10)
				sf_report_add(r, true, "%s", e.msg);
		}
	if (bad > 10)
		sf_report_add(r, true, "%s: %d more forward values fail to decode", vpath(s), bad - 10);
	rc = 0;
out:
	sf_buf_unref(h.buf);
	return rc;
}
