/* .shardfs/verify of a tatami view: reads and checks every record of the
 * file. */
#include <errno.h>
#include <inttypes.h>

#include "sf_report.h"
#include "tat.h"
#include "sf_view_impl.h"

/* Checks one chunk: every page decodes (CRC, codec, encoding, counts). */
static void verify_chunk(struct tat_file *tf, struct tat_group *gr, size_t col, struct sf_report *r)
{
	struct sf_err e = { { 0 } };
	struct tat_chunk *ch = tat_chunk_of(gr, col);
	if (!ch) {
		sf_report_add(r, true, "column %zu missing in %s", col, gr->what);
		return;
	}
	if (ch->num_values != gr->num_rows)
		sf_report_add(r, true, "%s holds %" PRIu64 " rows, its group %" PRIu64, ch->what,
			      ch->num_values, gr->num_rows);
	struct sf_part tmp = { .arg = ch };
	struct sf_buf *b = NULL;
	if (tat_chunk_produce(&tmp, &sf_nocache, &b, &e)) {
		sf_report_add(r, true, "%s", e.msg);
		return;
	}
	uint64_t nulls = 0;
	for (uint64_t i = 0; i < ch->num_values; i++)
		nulls += !b->data[i];
	sf_buf_unref(b);
	if (nulls != ch->null_count)
		sf_report_add(r, true, "%s: %" PRIu64 " nulls, the footer says %" PRIu64, ch->what,
			      nulls, ch->null_count);
}

static void verify_record(struct tat_file *tf, uint64_t off, const char *what, struct sf_report *r)
{
	struct sf_err e = { { 0 } };
	struct tat_rec rec;
	if (tat_rec_read(tf, off, &rec, what, &e))
		sf_report_add(r, true, "%s", e.msg);
	tat_rec_free(&rec);
}

int tat_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tat_file *tf = p->arg;
	struct sf_report r = { 0 };
	uint64_t row = 0;
	for (size_t g = 0; g < tf->ngroups; g++) {
		struct tat_group *gr = &tf->groups[g];
		if (gr->first_row != row)
			sf_report_add(&r, false, "%s starts at row %" PRIu64 ", expected %" PRIu64,
				      gr->what, gr->first_row, row);
		row += gr->num_rows;
		for (size_t c = 0; c < tf->nfields; c++) {
			verify_chunk(tf, gr, c, &r);
			struct tat_chunk *ch = tat_chunk_of(gr, c);
			if (ch && (ch->flags & 4))
				verify_record(tf, ch->page_index, "page index", &r);
		}
	}
	if (row != tf->row_count)
		sf_report_add(&r, true, "row groups hold %" PRIu64 " rows, the header %" PRIu64, row,
			      tf->row_count);
	for (size_t i = 0; i < tf->nblobs; i++)
		for (size_t k = 0; k < tf->blobs[i].nruns; k++) {
			struct sf_err re = { { 0 } };
			struct sf_buf *b = NULL;
			if (tat_run_decode(tf, &tf->blobs[i].runs[k], &b, &re))
				sf_report_add(&r, true, "%s", re.msg);
			sf_buf_unref(b);
		}
	for (size_t i = 0; i < tf->ndicts; i++)
		verify_record(tf, tf->dicts[i].offset, "dictionary", &r);
	for (size_t i = 0; i < tf->nblooms; i++)
		verify_record(tf, tf->blooms[i].offset, "bloom filter", &r);
	if ((tf->hflags & TAT_H_SEARCH) && tf->inv.present)
		tat_search_check(tf, &r);
	*out = sf_report_take(&r);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
}
