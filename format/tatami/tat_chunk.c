/* Decoding one column chunk (spec §10): its pages, in order, each CRC-checked
 * and un-compressed, then validity and values scattered into row order.
 *
 * A decoded chunk of R rows is one buffer, so every view of the chunk (and
 * of the whole column, which concatenates chunks) slices the same part:
 *   fixed width:  valid[R] | values[R * width]              (nulls as 0)
 *   variable:     valid[R] | offsets[R + 1] (u64) | data     (Arrow style)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tat.h"
#include "sf_view_impl.h"

/* Far above upstream's 65536 rows per page, low enough that a hostile page
 * header cannot make a few bytes decode into gigabytes. */
#define MAX_PAGE_ROWS (1u << 20)

/* What a walk over the pages fills in. */
struct sink {
	uint8_t type;
	uint64_t rows;
	uint8_t *valid;     /* rows bytes */
	uint8_t *values;    /* fixed width: rows * width bytes, or NULL */
	uint64_t *offsets;  /* variable: rows + 1, or NULL */
	struct sf_str data; /* variable: the bytes */
	uint64_t at;        /* rows filled so far */
};

int tat_chunk_extent(const struct tat_chunk *ch, uint64_t *len, struct sf_err *e)
{
	const struct tat_file *tf = ch->tf;
	uint64_t off = ch->first_page;
	if (ch->num_pages > tf->footer_off / TAT_REC)
		return sf_fail(e, -EIO, "%s: %s: %llu pages cannot fit in the file", tf->view->path,
			       ch->what, (unsigned long long)ch->num_pages);
	for (uint64_t k = 0; k < ch->num_pages; k++) {
		if (off < TAT_HEADER || !sf_range_ok(tf->footer_off, off, TAT_REC))
			return sf_fail(e, -EIO, "%s: %s: page %llu header at %llu lies outside the body",
				       tf->view->path, ch->what, (unsigned long long)k,
				       (unsigned long long)off);
		uint8_t h[TAT_REC];
		int rc = sf_map_read(tf->map, off, TAT_REC, h, ch->what, e);
		if (rc)
			return rc;
		uint32_t csize = sf_le32(h + 12);
		if (!sf_range_ok(tf->footer_off, off + TAT_REC, csize))
			return sf_fail(e, -EIO, "%s: %s: page %llu runs past the body", tf->view->path,
				       ch->what, (unsigned long long)k);
		off += TAT_REC + csize;
	}
	*len = off - ch->first_page;
	return 0;
}

int tat_chunk_rows(const struct tat_chunk *ch, struct sf_err *e)
{
	const struct tat_file *tf = ch->tf;
	uint64_t len, off = ch->first_page, rows = 0;
	int rc = tat_chunk_extent(ch, &len, e);
	if (rc)
		return rc;
	for (uint64_t k = 0; k < ch->num_pages; k++) {
		uint8_t h[TAT_REC];
		if ((rc = sf_map_read(tf->map, off, TAT_REC, h, ch->what, e)))
			return rc;
		uint32_t n = sf_le32(h + 4);
		if (n > MAX_PAGE_ROWS)
			return sf_fail(e, -EIO, "%s: %s: page %llu claims %u rows", tf->view->path,
				       ch->what, (unsigned long long)k, n);
		rows += n;
		off += TAT_REC + sf_le32(h + 12);
	}
	if (rows != ch->num_values)
		return sf_fail(e, -EIO, "%s: %s: pages hold %llu rows, the footer says %llu",
			       tf->view->path, ch->what, (unsigned long long)rows,
			       (unsigned long long)ch->num_values);
	return 0;
}

static bool is_int(uint8_t t)
{
	return (t >= TAT_INT8 && t <= TAT_UINT64) || t == TAT_TIMESTAMP;
}

/* Decodes `present` dense values of an integer column per the dispatch of
 * spec §10.2. */
static int dense_ints(struct sf_cursor *c, uint8_t enc, unsigned w, size_t present, uint64_t *out)
{
	switch (enc) {
	case 0:
		for (size_t i = 0; i < present; i++) {
			const uint8_t *p = sf_cur_take(c, w);
			if (!p)
				return -EIO;
			uint64_t v = 0;
			for (unsigned k = 0; k < w; k++)
				v |= (uint64_t)p[k] << (8 * k);
			out[i] = v;
		}
		return 0;
	case 1:
		return tat_dec_rle(c, present, out);
	case 3:
		return tat_dec_bitpack(c, present, out);
	case 4:
		return tat_dec_delta(c, present, out);
	case 5:
		return tat_dec_groupvarint(c, present, out);
	case 6:
		return tat_dec_pfordelta(c, present, out);
	default:
		return -EINVAL;
	}
}

/* The value body of one page into the sink's rows [at, at+n). */
static int page_values(const struct tat_chunk *ch, struct sink *s, uint8_t enc,
		       struct sf_cursor *c, const uint8_t *bitmap, uint32_t n, size_t present,
		       uint64_t k, struct sf_err *e)
{
	const char *path = ch->tf->view->path;
	char ebuf[16];
	unsigned w = tat_width(s->type);
	uint64_t *dense = NULL;
	int rc = 0;
	if (s->type == TAT_LIST)
		return sf_fail(e, -EIO, "%s: %s: page %llu: list columns have no value layout", path,
			       ch->what, (unsigned long long)k);
	if (tat_is_var(s->type)) {
		size_t j = 0;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t row = s->at + i;
			s->offsets[row] = s->data.len;
			if (bitmap && !(bitmap[i / 8] >> (i % 8) & 1))
				continue;
			uint64_t len = sf_cur_uvarint(c);
			const uint8_t *p = len <= sf_cur_left(c) ? sf_cur_take(c, (size_t)len) : NULL;
			if (c->bad || !p)
				return sf_fail(e, -EIO, "%s: %s: page %llu: short %s payload at value %zu",
					       path, ch->what, (unsigned long long)k,
					       tat_type_name(s->type, ebuf), j);
			sf_str_add(&s->data, p, (size_t)len);
			j++;
		}
		s->offsets[s->at + n] = s->data.len;
		return s->data.oom ? sf_fail(e, -ENOMEM, "%s: %s: out of memory", path, ch->what) : 0;
	}
	if (s->type == TAT_BOOL || s->type == TAT_FLOAT32 || s->type == TAT_FLOAT64 || enc == 0) {
		/* BOOL is a bit array for any encoding; floats are PLAIN for any */
		uint64_t need = s->type == TAT_BOOL ? (present + 7) / 8 : (uint64_t)present * w;
		const uint8_t *p = need <= sf_cur_left(c) ? sf_cur_take(c, (size_t)need) : NULL;
		if (!p)
			return sf_fail(e, -EIO, "%s: %s: page %llu: short %s payload", path, ch->what,
				       (unsigned long long)k,
				       s->type == TAT_BOOL && enc ? "bitmap" : tat_type_name(s->type, ebuf));
		size_t j = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (bitmap && !(bitmap[i / 8] >> (i % 8) & 1))
				continue;
			uint8_t *dst = s->values + (s->at + i) * w;
			if (s->type == TAT_BOOL)
				*dst = p[j / 8] >> (j % 8) & 1;
			else
				memcpy(dst, p + j * w, w);
			j++;
		}
		return 0;
	}
	if (!is_int(s->type))
		return sf_fail(e, -EIO, "%s: %s: page %llu: cannot decode type %u", path, ch->what,
			       (unsigned long long)k, s->type);
	dense = malloc((present ? present : 1) * sizeof *dense);
	if (!dense)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", path, ch->what);
	rc = dense_ints(c, enc, w, present, dense);
	if (rc == -EINVAL) {
		rc = sf_fail(e, -EIO, "%s: %s: page %llu: not an integer encoding: %u", path,
			     ch->what, (unsigned long long)k, enc);
	} else if (rc) {
		rc = sf_fail(e, -EIO, "%s: %s: page %llu: truncated or invalid %s payload", path,
			     ch->what, (unsigned long long)k, tat_enc_name(enc, ebuf));
	} else {
		size_t j = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (bitmap && !(bitmap[i / 8] >> (i % 8) & 1))
				continue;
			uint8_t *dst = s->values + (s->at + i) * w;
			for (unsigned b = 0; b < w; b++) /* keeps the low 8*w bits */
				dst[b] = (uint8_t)(dense[j] >> (8 * b));
			j++;
		}
	}
	free(dense);
	return rc;
}

/* Walks the pages: validity always; values unless only validity is wanted
 * (BLOBREF pages hold nothing else). */
static int walk(const struct tat_chunk *ch, struct sink *s, bool values, struct sf_err *e)
{
	const struct tat_file *tf = ch->tf;
	const char *path = tf->view->path;
	uint64_t off = ch->first_page;
	for (uint64_t k = 0; k < ch->num_pages; k++) {
		char what[96];
		snprintf(what, sizeof what, "%s page %llu", ch->what, (unsigned long long)k);
		struct tat_rec r;
		struct sf_buf *raw = NULL;
		int rc = tat_rec_read(tf, off, &r, what, e);
		if (rc == 0)
			rc = tat_rec_decode(tf, &r, r.codec, NULL, what, &raw, e);
		tat_rec_free(&r);
		if (rc)
			return rc;
		uint32_t n = r.num_values;
		struct sf_cursor c = sf_cursor(raw->data, raw->len);
		const uint8_t *bitmap = NULL;
		size_t present = n;
		if (r.flags & 2) {
			size_t blen = ((size_t)n + 7) / 8;
			if (!(bitmap = sf_cur_take(&c, blen))) {
				sf_buf_unref(raw);
				return sf_fail(e, -EIO, "%s: %s: validity bitmap overruns page", path, what);
			}
			present = 0;
			for (uint32_t i = 0; i < n; i++)
				present += bitmap[i / 8] >> (i % 8) & 1;
		}
		for (uint32_t i = 0; i < n; i++)
			s->valid[s->at + i] = bitmap ? bitmap[i / 8] >> (i % 8) & 1 : 1;
		if (values)
			rc = page_values(ch, s, r.encoding, &c, bitmap, n, present, k, e);
		sf_buf_unref(raw);
		if (rc)
			return rc;
		s->at += n;
		off += TAT_REC + r.csize;
	}
	return 0;
}

uint64_t tat_chunk_size(const struct tat_chunk *ch, uint8_t type)
{
	uint64_t sz;
	if (tat_is_var(type) || type == TAT_LIST ||
	    !sf_mul_ok(ch->num_values, 1 + tat_width(type), &sz))
		return SF_SIZE_UNKNOWN;
	return sz;
}

int tat_chunk_validity(const struct tat_chunk *ch, uint8_t **valid, struct sf_err *e)
{
	int rc = tat_chunk_rows(ch, e);
	if (rc)
		return rc;
	struct sink s = { .type = ch->tf->fields[ch->column].type, .rows = ch->num_values };
	s.valid = calloc(s.rows ? s.rows : 1, 1);
	if (!s.valid)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", ch->tf->view->path, ch->what);
	rc = walk(ch, &s, false, e);
	if (rc) {
		free(s.valid);
		return rc;
	}
	*valid = s.valid;
	return 0;
}

/* BLOBREF: the values come from the blob region by ordinal (spec §11.2). */
static int blob_data(const struct tat_chunk *ch, struct sink *s, struct sf_err *e)
{
	struct tat_file *tf = ch->tf;
	struct tat_blobcol *bc = tf->fields[ch->column].blob;
	uint64_t present = 0;
	for (uint64_t i = 0; i < s->rows; i++)
		present += s->valid[i];
	if (present != ch->num_values - ch->null_count)
		return sf_fail(e, -EIO, "%s: %s: %llu present rows, the footer counts %llu",
			       tf->view->path, ch->what, (unsigned long long)present,
			       (unsigned long long)(ch->num_values - ch->null_count));
	if (present && !bc)
		return sf_fail(e, -EIO, "%s: %s: blob column has no blob directory entry",
			       tf->view->path, ch->what);
	uint64_t *len = malloc((present ? present : 1) * sizeof *len);
	if (!len)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", tf->view->path, ch->what);
	int rc = present ? tat_blob_values(tf, bc, ch->blob_base, present, &s->data, len, e) : 0;
	if (rc == 0) {
		uint64_t at = 0, j = 0;
		for (uint64_t i = 0; i < s->rows; i++) {
			s->offsets[i] = at;
			if (s->valid[i])
				at += len[j++];
		}
		s->offsets[s->rows] = at;
	}
	free(len);
	return rc;
}

int tat_chunk_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	const struct tat_chunk *ch = p->arg;
	const struct tat_file *tf = ch->tf;
	uint8_t type = tf->fields[ch->column].type;
	if (ch->null_count > ch->num_values)
		return sf_fail(e, -EIO, "%s: %s: %llu nulls in %llu rows", tf->view->path,
			       ch->what, (unsigned long long)ch->null_count,
			       (unsigned long long)ch->num_values);
	int rc = tat_chunk_rows(ch, e);
	if (rc)
		return rc;
	struct sink s = { .type = type, .rows = ch->num_values };
	uint64_t R = s.rows;
	bool var = tat_is_var(type);
	/* tat_chunk_rows bounded R by the pages present, so these cannot overflow */
	uint64_t head = var ? R + 8 * (R + 1) : R * (1 + tat_width(type));
	struct sf_buf *b = sf_buf_new(head);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", tf->view->path, ch->what);
	s.valid = b->data;
	if (var) {
		s.offsets = calloc(R + 1, sizeof *s.offsets);
		if (!s.offsets) {
			sf_buf_unref(b);
			return sf_fail(e, -ENOMEM, "%s: %s: out of memory", tf->view->path, ch->what);
		}
	} else {
		s.values = b->data + R;
	}
	rc = walk(ch, &s, type != TAT_BLOBREF, e);
	if (rc == 0 && type == TAT_BLOBREF)
		rc = blob_data(ch, &s, e);
	if (rc == 0 && var) {
		/* assemble valid | offsets | data */
		struct sf_buf *all = sf_buf_new(head + s.data.len);
		if (!all) {
			rc = sf_fail(e, -ENOMEM, "%s: %s: out of memory", tf->view->path, ch->what);
		} else {
			memcpy(all->data, s.valid, R);
			for (uint64_t i = 0; i <= R; i++)
				sf_put_le64(all->data + R + 8 * i, s.offsets[i]);
			if (s.data.len)
				memcpy(all->data + head, s.data.p, s.data.len);
			sf_buf_unref(b);
			b = all;
		}
	}
	free(s.offsets);
	sf_str_free(&s.data);
	if (rc) {
		sf_buf_unref(b);
		return rc;
	}
	*out = b;
	return 0;
}
