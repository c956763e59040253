/* blobs/<col>/: a file per present row of a blob column, named by its row
 * number. A column may have millions of rows, so the directory holds no
 * node nor name per row (sf_dir_set_counted): entry i is the column's i-th
 * present row, found from a span per row group, plus the present rows'
 * offsets (4 bytes each) in groups that have nulls. That table is charged
 * to the view's cache until the view is freed; a node is made when a row is
 * looked up, and freed when the host lets it go. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_format.h"
#include "sf_name.h"
#include "tat.h"
#include "sf_view_impl.h"

/* Entries [entry, entry + n) are rows from `row` on: rows row.. when `at`
 * is NULL (no nulls), else row + at[k]. The first's blob ordinal is `ord`. */
struct tat_span {
	uint64_t entry, row, n, ord;
	uint32_t *at;
};

struct tat_blobrows {
	struct tat_span *span;
	size_t nspan, cap;
	uint64_t entries;
	uint64_t charged;
	struct sf_cache *cache; /* what `charged` is held in, when it is not 0 */
	struct sf_progress *progress; /* and where it is counted */
};

void tat_blobrows_free(struct tat_blobrows *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nspan; i++)
		free(r->span[i].at);
	free(r->span);
	if (r->charged) {
		sf_cache_uncharge(r->cache, r->charged);
		SF_PROGRESS_ADD(r->progress, table_bytes_held, -r->charged);
	}
	free(r);
}

static struct tat_file *file_of(const struct sf_node *n)
{
	return n->view->state;
}

static struct tat_blobrows *rows_of(const struct sf_node *dir)
{
	return ((const struct tat_field *)dir->arg)->rows;
}

/* The last span whose first entry (by_row: first row) is at most v (the
 * first span when none is). Spans are in the order of both. */
static const struct tat_span *span_at(const struct tat_blobrows *r, uint64_t v, bool by_row)
{
	size_t lo = 0, hi = r->nspan;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if ((by_row ? r->span[mid].row : r->span[mid].entry) <= v)
			lo = mid;
		else
			hi = mid;
	}
	return &r->span[lo];
}

static void row_name(const struct sf_node *dir, uint32_t i, char out[SF_COUNTED_NAME])
{
	const struct tat_span *s = span_at(rows_of(dir), i, false);
	uint64_t k = i - s->entry;
	snprintf(out, SF_COUNTED_NAME, "%" PRIu64, s->row + (s->at ? s->at[k] : k));
}

/* A row number as row_name writes it: digits, no leading zero. */
static bool parse_row(const char *name, uint64_t *row)
{
	uint64_t v = 0;
	if (!name[0] || (name[0] == '0' && name[1]))
		return false;
	for (const char *p = name; *p; p++) {
		if (*p < '0' || *p > '9' || v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*row = v;
	return true;
}

static long row_find(const struct sf_node *dir, const char *name)
{
	const struct tat_blobrows *r = rows_of(dir);
	uint64_t row;
	if (!r->nspan || !parse_row(name, &row) || row < r->span[0].row)
		return -1;
	const struct tat_span *s = span_at(r, row, true);
	uint64_t k = row - s->row;
	if (!s->at)
		return k < s->n ? (long)(s->entry + k) : -1;
	size_t a = 0, b = s->n;
	while (a < b) {
		size_t mid = a + (b - a) / 2;
		if (s->at[mid] < k)
			a = mid + 1;
		else
			b = mid;
	}
	return a < s->n && s->at[a] == k ? (long)(s->entry + a) : -1;
}

static const struct sf_counted row_entries = { .name = row_name, .find = row_find };

/* blobs/<col>/<row>: a slice of the decoded run holding the row's value. */
static int build_blob(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tat_file *tf = file_of(f);
	struct tat_blobcol *bc = f->arg;
	uint64_t ord = f->aux;
	struct tat_run *run = bc ? tat_run_of(bc, ord) : NULL;
	if (!run) {
		sf_fail(e, -EIO, "%s: blob ordinal %" PRIu64 " out of range", tf->view->path, ord);
		return sf_file_set_broken(f, 0, e->msg);
	}
	if (!run->part) {
		if (!(run->part = sf_view_part(tf->view, tat_run_produce, run, SF_SIZE_UNKNOWN, run->what)))
			return -ENOMEM;
		run->part->arg2 = tf;
	}
	struct sf_buf *b = NULL;
	int rc = sf_part_get(c, run->part, &b, e);
	if (rc)
		return rc == -ENOMEM ? rc : sf_file_set_broken(f, 0, e->msg);
	uint64_t i = ord - run->cum, head = 8 * (run->nvals + 1);
	uint64_t a = sf_le64(b->data + 8 * i), z = sf_le64(b->data + 8 * (i + 1));
	sf_buf_unref(b);
	return sf_file_add_part(f, run->part, head + a, z - a);
}

static int make_blob(struct sf_node *n, struct sf_err *e)
{
	(void)e;
	struct tat_field *fd = n->parent->arg;
	const struct tat_span *s = span_at(fd->rows, n->key, false);
	sf_file_set_build(n, build_blob, fd->blob);
	n->aux = s->ord + (n->key - s->entry);
	return 0;
}

/* A message without the leading "<container path>: " it usually carries
 * (the error log starts each line with that path already). */
static const char *reason(const struct tat_file *tf, const char *msg)
{
	size_t n = strlen(tf->view->path);
	if (strncmp(msg, tf->view->path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
		return msg + n + 2;
	return msg;
}

/* Holds `bytes` more of the budget for the table. */
static int charge(struct tat_file *tf, struct sf_node *dir, struct tat_blobrows *r,
		  uint64_t bytes, struct sf_err *e)
{
	char what[SF_NAME_MAX + 32];
	snprintf(what, sizeof what, "blobs/%s listing", dir->name);
	int rc = sf_cache_charge(r->cache, bytes, tf->view->path, what, e);
	/* only a cache that holds charges is asked to give them back (a
	 * host may read through a passing one) */
	if (rc == 0 && r->cache->charge) {
		r->charged += bytes;
		SF_PROGRESS_ADD(r->progress, table_bytes_held, bytes);
	}
	return rc;
}

/* Adds group g's present rows, numbered from `row`, as a span. */
static int add_group(struct tat_file *tf, struct sf_node *dir, struct tat_blobrows *r,
		     const struct tat_chunk *ch, const uint8_t *valid, uint64_t row,
		     struct sf_err *e)
{
	uint64_t present = 0;
	for (uint64_t i = 0; i < ch->num_values; i++)
		present += valid[i] != 0;
	if (!present)
		return 0;
	if (present > UINT32_MAX - 1 - r->entries || ch->num_values > UINT32_MAX)
		return sf_fail(e, -EIO, "%s: blobs/%s: more than %" PRIu32 " rows", tf->view->path,
			       dir->name, UINT32_MAX - 1);
	struct tat_span s = { .entry = r->entries, .row = row, .n = present, .ord = ch->blob_base };
	size_t at_bytes = present < ch->num_values ? present * sizeof *s.at : 0;
	int rc = 0;
	if (r->nspan == r->cap && (rc = charge(tf, dir, r, (r->cap ? r->cap : 8) * sizeof *r->span, e)))
		return rc;
	if (sf_grow(&r->span, &r->cap, r->nspan, sizeof *r->span, 8))
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	if (at_bytes) {
		if ((rc = charge(tf, dir, r, at_bytes, e)))
			return rc;
		if (!(s.at = malloc(at_bytes)))
			return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
		uint64_t k = 0;
		for (uint64_t i = 0; i < ch->num_values; i++)
			if (valid[i])
				s.at[k++] = (uint32_t)i;
	}
	r->span[r->nspan++] = s;
	r->entries += present;
	return 0;
}

static int number_rows(struct sf_node *dir, struct tat_blobrows *r, struct sf_err *e)
{
	struct tat_file *tf = file_of(dir);
	struct tat_field *fd = dir->arg;
	size_t col = (size_t)(fd - tf->fields);
	uint64_t row0 = 0;
	for (size_t g = 0; g < tf->ngroups; g++) {
		struct tat_chunk *ch = tat_chunk_of(&tf->groups[g], col);
		struct sf_err ge = { { 0 } };
		uint8_t *valid = NULL;
		int rc = ch ? tat_chunk_validity(ch, &valid, &ge)
			    : sf_fail(&ge, -EIO, "column %zu missing", col);
		if (rc == 0) {
			rc = add_group(tf, dir, r, ch, valid, row0, e);
			free(valid);
			if (rc)
				return rc;
			row0 += ch->num_values;
			continue;
		}
		if (rc != -EIO) {
			*e = ge;
			return rc;
		}
		/* one damaged group must not hide the other groups' blobs;
		 * its rows still count, so later rows keep their numbers
		 * (blob ordinals come from the footer, not the pages) */
		sf_view_warn(tf->view, "%s: blobs/%s: row group %zu: %s; its blobs are not listed",
			     tf->view->path, dir->name, g, reason(tf, ge.msg));
		if (tf->groups[g].num_rows > UINT64_MAX - row0)
			return sf_fail(e, -EIO, "%s: blobs/%s: row group %zu: row count overflows",
				       tf->view->path, dir->name, g);
		row0 += tf->groups[g].num_rows;
	}
	return 0;
}

int tat_blobdir_populate(struct sf_node *dir, struct sf_err *e)
{
	struct tat_file *tf = file_of(dir);
	struct tat_field *fd = dir->arg;
	struct tat_blobrows *r = calloc(1, sizeof *r);
	if (!r)
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	r->cache = tf->view->cache;
	r->progress = tf->view->host.progress;
	int rc = number_rows(dir, r, e);
	/* in place before the entries show: they are named from it */
	fd->rows = r;
	if (rc == 0 && (rc = sf_dir_set_counted(dir, make_blob, &row_entries, (uint32_t)r->entries)))
		sf_fail(e, rc, "%s: out of memory", tf->view->path);
	if (rc) {
		fd->rows = NULL;
		tat_blobrows_free(r);
	}
	return rc;
}
