/* Records (spec §6): a 32-byte header, then the stored payload, whose CRC32C
 * is checked before anything is made of it; codecs per spec §8 (ZSTD_DICT is
 * ZSTD with the caller's dictionary). LZ4 is reserved upstream, which refuses
 * it; we read it leniently as §8.4 allows, as one raw LZ4 block that must
 * decode to exactly the recorded size, so nothing but a real block passes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_codec.h"
#include "sf_crc32c.h"
#include "sf_map.h"
#include "tat.h"
#include "sf_view_impl.h"

int tat_rec_read(const struct tat_file *tf, uint64_t off, struct tat_rec *r,
		 const char *what, struct sf_err *e)
{
	const char *path = tf->view->path;
	r->own = NULL;
	r->stored = NULL;
	/* records live in the body: after the header, before the footer */
	if (off < TAT_HEADER || !sf_range_ok(tf->footer_off, off, TAT_REC))
		return sf_fail(e, -EIO, "%s: %s: record header at %llu lies outside the body", path,
			       what, (unsigned long long)off);
	uint8_t h[TAT_REC];
	int rc = sf_map_read(tf->map, off, TAT_REC, h, what, e);
	if (rc)
		return rc;
	r->kind = h[0];
	r->encoding = h[1];
	r->codec = h[2];
	r->flags = h[3];
	r->num_values = sf_le32(h + 4);
	r->usize = sf_le32(h + 8);
	r->csize = sf_le32(h + 12);
	r->null_count = sf_le32(h + 16);
	r->first_row = sf_le32(h + 20);
	r->crc = sf_le32(h + 24);
	if (!sf_range_ok(tf->footer_off, off + TAT_REC, r->csize))
		return sf_fail(e, -EIO, "%s: %s: payload of %u bytes at %llu runs past the body", path,
			       what, r->csize, (unsigned long long)(off + TAT_REC));
	if ((rc = sf_map_copy(tf->map, off + TAT_REC, r->csize, &r->own, what, e)))
		return rc;
	r->stored = r->own;
	if (sf_crc32c(0, r->stored, r->csize) != r->crc) {
		tat_rec_free(r);
		return sf_fail(e, -EIO, "%s: %s: record checksum mismatch at offset %llu", path, what,
			       (unsigned long long)off);
	}
	return 0;
}

void tat_rec_free(struct tat_rec *r)
{
	free(r->own);
	r->own = NULL;
	r->stored = NULL;
}

int tat_rec_decode(const struct tat_file *tf, const struct tat_rec *r, uint8_t codec,
		   const struct sf_buf *dict, const char *what, struct sf_buf **out,
		   struct sf_err *e)
{
	const char *path = tf->view->path;
	if (codec != TAT_NONE && codec != TAT_ZSTD && codec != TAT_LZ4)
		return sf_fail(e, -EIO, "%s: %s: unsupported codec id %u", path, what, codec);
	if (codec == TAT_NONE && r->csize != r->usize)
		return sf_fail(e, -EIO, "%s: %s: stored %u bytes without a codec but records %u",
			       path, what, r->csize, r->usize);
	uint64_t limit = tf->view->cache ? tf->view->cache->limit : 0;
	if (limit && r->usize > limit)
		return sf_fail(e, -EIO, "%s: %s: record decodes to %u bytes, more than --cache-size "
			       "(%llu bytes) holds", path, what, r->usize, (unsigned long long)limit);
	struct sf_buf *b = sf_buf_new(r->usize);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory for %u bytes", path, what, r->usize);
	int rc = 0;
	char where[600];
	snprintf(where, sizeof where, "%s: %s", path, what);
	if (codec == TAT_NONE) {
		if (r->usize)
			memcpy(b->data, r->stored, r->usize);
	} else if (codec == TAT_LZ4) {
		rc = sf_lz4_decode(r->stored, r->csize, b->data, r->usize, where, e);
	} else {
		rc = sf_zstd_decode(r->stored, r->csize, b->data, r->usize, dict ? dict->data : NULL,
				    dict ? dict->len : 0, where, e);
	}
	if (rc) {
		sf_buf_unref(b);
		return rc;
	}
	*out = b;
	return 0;
}
