/* The feature region (FEA1, spec B2): the quantized signal matrix,
 * dequantized into features.npy (float32 R x C) and features.csv. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_bytes.h"
#include "sf_crc32c.h"
#include "sf_json.h"
#include "sf_report.h"
#include "tsm.h"
#include "sf_view_impl.h"

#define NPY_HEADER 128

struct fea_col {
	uint8_t id, width, quant;
	uint16_t offset;
	double p[3];
};

struct fea {
	uint16_t ncols, stride, schema_version;
	uint32_t rows;
	const uint8_t *data; /* row 0 */
	struct fea_col *cols;
	struct sf_buf *hold; /* keeps the region's bytes, data among them */
};

/* Upstream's signal ids (schema version 2), lower-cased; the file stores
 * only the ids. */
static const char *const signal_names[] = {
	"static_rank", "page_rank", "host_rank", "domain_rank", "trust", "spam_mass",
	"in_degree", "linking_domains", "freshness", "change_rate", "content_quality",
	"boilerplate", "near_dup", "doc_len", "title_len", "body_len", "url_field_len",
	"anchor_field_len", "language", "url_depth", "url_len", "https", "host_error_rate",
	"linking_hosts", "reciprocity", "host_link_div", "outbound_spam",
};

static int parse_fea(const struct tsm_shard *s, const struct tsm_region *r, const uint8_t *p,
		     size_t len, struct fea *f, struct sf_err *e)
{
	const char *path = s->view->path;
	struct sf_cursor c = sf_cursor(p, len);
	const uint8_t *magic = sf_cur_take(&c, 4);
	uint32_t version = sf_cur_u32(&c);
	f->ncols = sf_cur_u16(&c);
	f->stride = sf_cur_u16(&c);
	f->rows = sf_cur_u32(&c);
	f->schema_version = sf_cur_u16(&c);
	sf_cur_u16(&c);
	if (c.bad || memcmp(magic, "FEA1", 4) != 0 || version != 1)
		return sf_fail(e, -EIO, "%s: regions/%s: not a FEA1 version 1 feature region", path,
			       r->name);
	uint64_t hdr = 20 + 22 * (uint64_t)f->ncols, need;
	if (!sf_range_ok(len, hdr, 4))
		return sf_fail(e, -EIO, "%s: regions/%s: FEA1 header is truncated", path, r->name);
	if (sf_crc32c(0, p, hdr) != sf_le32(p + hdr))
		return sf_fail(e, -EIO, "%s: regions/%s: FEA1 header CRC mismatch", path, r->name);
	/* zero-width rows would let any row count pass */
	if (!sf_mul_ok(f->rows, f->stride, &need) || !sf_range_ok(len, hdr + 4, need) ||
	    (f->rows && !f->stride))
		return sf_fail(e, -EIO, "%s: regions/%s: %u rows of %u bytes do not fit", path,
			       r->name, f->rows, f->stride);
	f->data = p + hdr + 4;
	f->cols = calloc(f->ncols ? f->ncols : 1, sizeof *f->cols);
	if (!f->cols)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	for (uint16_t i = 0; i < f->ncols; i++) {
		const uint8_t *t = p + 20 + 8 * (size_t)i;
		const uint8_t *q = p + 20 + 8 * (size_t)f->ncols + 14 * (size_t)i;
		struct fea_col *col = &f->cols[i];
		col->id = t[0];
		col->width = t[1];
		col->quant = t[2];
		col->offset = sf_le16(t + 4);
		/* the constants are read by position; id and quant come from the table */
		for (int k = 0; k < 3; k++)
			col->p[k] = (double)sf_lef32(q + 2 + 4 * k);
		if ((col->width != 1 && col->width != 2) || col->offset + col->width > f->stride) {
			/* the message reads col, so the table goes only after it */
			sf_fail(e, -EIO, "%s: regions/%s: feature column %u has width %u at offset "
				"%u of a %u-byte row", path, r->name, i, col->width, col->offset,
				f->stride);
			free(f->cols);
			return -EIO;
		}
	}
	return 0;
}

/* Fetches and parses the first feature region; fea_free releases it. */
static int fea_load(struct tsm_shard *s, struct sf_cache *c, struct fea *f, struct sf_err *e)
{
	struct tsm_region *r = tsm_first(s, TSM_FEATURE);
	if (!r)
		return sf_fail(e, -EIO, "%s: the feature region cannot be read", s->view->path);
	const uint8_t *p;
	int rc = tsm_region_bytes(s, r, c, &p, &f->hold, e);
	if (rc)
		return rc;
	rc = parse_fea(s, r, p, r->raw_length, f, e);
	if (rc) {
		sf_buf_unref(f->hold);
		f->hold = NULL;
	}
	return rc;
}

static void fea_free(struct fea *f)
{
	free(f->cols);
	sf_buf_unref(f->hold);
}

/* Spec B2.2, in f64 as upstream computes it. */
static double dequant(const struct fea_col *col, const uint8_t *row)
{
	double q = col->width == 1 ? row[col->offset] : sf_le16(row + col->offset);
	double top = col->width == 1 ? 255.0 : 65535.0;
	switch (col->quant) {
	case 1:
		return exp(col->p[0] + q * col->p[1]) - col->p[2];
	case 2:
		return (q - round(top / 2)) * col->p[0];
	case 3:
		return q;
	default:
		return col->p[0] + q * col->p[1];
	}
}

static int produce_matrix(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tsm_shard *s = p->arg;
	struct fea f;
	int rc = fea_load(s, cache, &f, e);
	if (rc)
		return rc;
	struct sf_buf *b = sf_buf_new((size_t)f.rows * f.ncols * 4);
	for (uint32_t d = 0; b && d < f.rows; d++)
		for (uint16_t i = 0; i < f.ncols; i++) {
			float v = (float)dequant(&f.cols[i], f.data + (size_t)d * f.stride);
			uint32_t u;
			memcpy(&u, &v, 4);
			sf_put_le32(b->data + ((size_t)d * f.ncols + i) * 4, u);
		}
	fea_free(&f);
	*out = b;
	return b ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", s->view->path);
}

static void add_name(struct sf_str *o, uint8_t id)
{
	if (id < sizeof signal_names / sizeof signal_names[0])
		sf_str_addf(o, ",%s", signal_names[id]);
	else
		sf_str_addf(o, ",feature_%u", id);
}

static int produce_csv(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tsm_shard *s = p->arg;
	struct fea f;
	int rc = fea_load(s, cache, &f, e);
	if (rc)
		return rc;
	struct sf_str o = { 0 };
	sf_str_add(&o, "id", 2);
	for (uint16_t i = 0; i < f.ncols; i++)
		add_name(&o, f.cols[i].id);
	sf_str_addc(&o, '\n');
	for (uint32_t d = 0; d < f.rows; d++) {
		sf_str_addf(&o, "%llu", (unsigned long long)(s->h.node_base + d));
		for (uint16_t i = 0; i < f.ncols; i++) {
			char num[32];
			sf_fmt_f32(num, (float)dequant(&f.cols[i], f.data + (size_t)d * f.stride));
			sf_str_addf(&o, ",%s", num);
		}
		sf_str_addc(&o, '\n');
	}
	fea_free(&f);
	*out = sf_str_take(&o);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", s->view->path);
}

/* features.npy: a 128-byte .npy v1.0 header, then the float32 matrix. */
static int build_npy(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tsm_shard *s = f->arg;
	struct fea fe;
	int rc = fea_load(s, c, &fe, e);
	if (rc)
		return rc == -EIO ? sf_file_set_broken(f, 0, e->msg) : rc;
	fea_free(&fe);
	uint8_t h[NPY_HEADER];
	memset(h, ' ', sizeof h);
	memcpy(h, "\x93NUMPY\x01\x00", 8);
	sf_put_le16(h + 8, NPY_HEADER - 10);
	int n = snprintf((char *)h + 10, NPY_HEADER - 10,
			 "{'descr': '<f4', 'fortran_order': False, 'shape': (%u, %u), }",
			 fe.rows, (unsigned)fe.ncols);
	h[10 + n] = ' ';
	h[NPY_HEADER - 1] = '\n';
	uint64_t size = (uint64_t)fe.rows * fe.ncols * 4;
	struct sf_part *p = sf_view_part(s->view, produce_matrix, s, size, "features.npy");
	if (!p)
		return -ENOMEM;
	if ((rc = sf_file_set_bytes(f, h, sizeof h)))
		return rc;
	return sf_file_add_part(f, p, 0, size);
}

static int build_csv(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tsm_shard *s = f->arg;
	struct sf_part *p = sf_view_part(s->view, produce_csv, s, SF_SIZE_UNKNOWN, "features.csv");
	return p ? tsm_file_from_part(f, p, c, e) : -ENOMEM;
}

int tsm_add_features(struct tsm_shard *s, struct sf_node *root)
{
	if (!tsm_first(s, TSM_FEATURE))
		return 0;
	struct sf_node *npy = sf_dir_add_file(root, "features.npy", 12);
	struct sf_node *csv = sf_dir_add_file(root, "features.csv", 12);
	if (!npy || !csv)
		return -ENOMEM;
	sf_file_set_build(npy, build_npy, s);
	sf_file_set_build(csv, build_csv, s);
	return 0;
}

int tsm_feature_verify(struct tsm_shard *s, struct sf_report *r)
{
	struct sf_err e = { { 0 } };
	struct fea f;
	int rc = fea_load(s, s->view->cache, &f, &e);
	if (rc) {
		sf_report_add(r, true, "%s", e.msg);
		return rc == -ENOMEM ? rc : 0;
	}
	fea_free(&f);
	return 0;
}
