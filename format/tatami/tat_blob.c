/* The blob region (spec §11): runs of packed values addressed by global
 * ordinal, optionally compressed against a raw-content dictionary from the
 * dictionary region (spec §8.3). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tat.h"
#include "sf_view_impl.h"

/* The decoded dictionary `idx` (1-based). Dictionaries are small (upstream
 * caps them at 64 KiB) and every run of a column needs one, so each is
 * decoded once and kept with the file. */
static int dict_get(struct tat_file *tf, uint64_t idx, struct sf_buf **out, struct sf_err *e)
{
	if (idx == 0 || idx > tf->ndicts)
		return sf_fail(e, -EIO, "%s: dictionary %llu is not in the dictionary directory",
			       tf->view->path, (unsigned long long)idx);
	struct tat_dict *d = &tf->dicts[idx - 1];
	int rc = 0;
	sf_turn_take(&tf->memo_turn);
	if (!d->memo) {
		char what[48];
		snprintf(what, sizeof what, "dictionary %llu", (unsigned long long)idx);
		struct tat_rec r;
		rc = tat_rec_read(tf, d->offset, &r, what, e);
		if (rc == 0 && d->length > UINT32_MAX)
			rc = sf_fail(e, -EIO, "%s: %s: length %llu is impossible", tf->view->path, what,
				     (unsigned long long)d->length);
		if (rc == 0) {
			/* the directory's length is the output capacity */
			r.usize = (uint32_t)d->length;
			rc = tat_rec_decode(tf, &r, r.codec, NULL, what, &d->memo, e);
		}
		tat_rec_free(&r);
	}
	if (rc == 0)
		*out = sf_buf_ref(d->memo);
	sf_turn_give(&tf->memo_turn);
	return rc;
}

int tat_run_decode(struct tat_file *tf, const struct tat_run *run, struct sf_buf **out,
		   struct sf_err *e)
{
	const struct tat_blobcol *bc = run->col;
	const char *path = tf->view->path;
	struct tat_rec r;
	int rc = tat_rec_read(tf, run->offset, &r, run->what, e);
	if (rc)
		return rc;
	if (r.csize != run->csize || run->usize > UINT32_MAX) {
		tat_rec_free(&r);
		return sf_fail(e, -EIO, "%s: %s: record holds %u bytes, the directory says %llu", path,
			       run->what, r.csize, (unsigned long long)run->csize);
	}
	r.usize = (uint32_t)run->usize;
	struct sf_buf *dict = NULL, *raw = NULL;
	uint8_t codec = bc->record_codec;
	if (bc->dict_index) {
		/* upstream applies the dictionary whatever the codec bytes say */
		if ((rc = dict_get(tf, bc->dict_index, &dict, e))) {
			tat_rec_free(&r);
			return rc;
		}
		codec = TAT_ZSTD;
	}
	rc = tat_rec_decode(tf, &r, codec, dict, run->what, &raw, e);
	tat_rec_free(&r);
	sf_buf_unref(dict);
	if (rc)
		return rc;
	struct sf_cursor c = sf_cursor(raw->data, raw->len);
	uint64_t count = sf_cur_uvarint(&c);
	if (c.bad || count != run->nvals || count > sf_cur_left(&c)) {
		sf_buf_unref(raw);
		return sf_fail(e, -EIO, "%s: %s: payload holds %llu values, the directory %llu", path,
			       run->what, (unsigned long long)count, (unsigned long long)run->nvals);
	}
	struct sf_buf *b = sf_buf_new(8 * (count + 1) + sf_cur_left(&c));
	if (!b) {
		sf_buf_unref(raw);
		return sf_fail(e, -ENOMEM, "%s: %s: out of memory", path, run->what);
	}
	uint64_t total = 0;
	for (uint64_t i = 0; i < count; i++) {
		sf_put_le64(b->data + 8 * i, total);
		uint64_t len = sf_cur_uvarint(&c);
		/* a wrapping sum would pass the bound below with the rest of
		 * the offsets table unwritten */
		if (!c.bad && !sf_add_ok(total, len, &total))
			c.bad = true;
		if (c.bad)
			break;
	}
	sf_put_le64(b->data + 8 * count, total);
	if (c.bad || total > sf_cur_left(&c)) {
		sf_buf_unref(raw);
		sf_buf_unref(b);
		return sf_fail(e, -EIO, "%s: %s: value lengths overrun the run", path, run->what);
	}
	uint64_t head = 8 * (count + 1);
	memcpy(b->data + head, raw->data + c.pos, (size_t)total);
	b->len = head + total;
	sf_buf_unref(raw);
	*out = b;
	return 0;
}

int tat_run_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tat_run *run = p->arg;
	return tat_run_decode(p->arg2, run, out, e);
}

struct tat_run *tat_run_of(struct tat_blobcol *bc, uint64_t ord)
{
	size_t lo = 0, hi = bc->nruns;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct tat_run *r = &bc->runs[mid];
		if (ord < r->cum)
			hi = mid;
		else if (ord - r->cum >= r->nvals)
			lo = mid + 1;
		else
			return r;
	}
	return NULL;
}

int tat_blob_values(struct tat_file *tf, struct tat_blobcol *bc, uint64_t first, uint64_t n,
		    struct sf_str *data, uint64_t *len, struct sf_err *e)
{
	uint64_t done = 0;
	while (done < n) {
		uint64_t ord = first + done;
		struct tat_run *run = tat_run_of(bc, ord);
		if (!run)
			return sf_fail(e, -EIO, "%s: blob ordinal %llu out of range", tf->view->path,
				       (unsigned long long)ord);
		struct sf_buf *b = NULL;
		int rc = tat_run_decode(tf, run, &b, e);
		if (rc)
			return rc;
		uint64_t head = 8 * (run->nvals + 1);
		for (uint64_t i = ord - run->cum; i < run->nvals && done < n; i++, done++) {
			uint64_t a = sf_le64(b->data + 8 * i), z = sf_le64(b->data + 8 * (i + 1));
			sf_str_add(data, b->data + head + a, (size_t)(z - a));
			len[done] = z - a;
		}
		sf_buf_unref(b);
		if (data->oom)
			return sf_fail(e, -ENOMEM, "%s: blob values: out of memory", tf->view->path);
	}
	return 0;
}
