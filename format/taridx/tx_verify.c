/* .shardfs/verify of a fold view: every row against its shard. */
#include <errno.h>
#include <stdlib.h>

#include "sf_report.h"
#include "tx.h"
#include "tx_z.h"
#include "sf_view_impl.h"

/* Errors are listed up to this many; the rest are counted. */
#define MAX_FINDINGS 200

/* `path` has room for TX_PATH_MAX bytes; w copies the tars and rows. 0, or
 * as tx_rows_get. */
static int check_row(struct tx_fold *f, uint64_t r, struct sf_report *rep, uint64_t *bad_per_fid,
		     uint8_t *path, struct tx_window *w, struct sf_err *e)
{
	struct tx_member m;
	int rc = tx_window_plan(f, w, r, false, e);
	if (rc || (rc = tx_member_check(f, r, &m, w, e)))
		return rc;
	const struct tx_row *row = &m.row;
	const char *shard = row->fid < f->nshards ? f->shards[row->fid].name : "-";
	bool bad = false;
	if (m.bad) {
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu, size %llu): %s", (unsigned long long)r,
			      row->fid, shard, (unsigned long long)row->off, (unsigned long long)row->size, m.bad);
		bad = true;
	}
	/* a member's extent was checked against its headers (tx_member_check);
	 * an extension record's is its size field */
	uint64_t hsize;
	if (m.hdr && !m.bad && tx_is_record(m.hdr[156]) && (tx_hdr_size(m.hdr, &hsize) || hsize != row->size)) {
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): tar header size differs from the row's %llu",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off,
			      (unsigned long long)row->size);
		bad = true;
	}
	/* a member the view cannot show must not go unnoticed */
	size_t plen;
	struct tx_str link;
	rc = m.bad || m.kind == TX_OTHER ? 0 :
		 tx_member_names(f, (uint32_t)r, &m, path, TX_PATH_MAX, &plen, &link);
	if (rc == -ENAMETOOLONG)
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): member not shown: its full path is longer than %d bytes",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off, TX_PATH_MAX);
	else if (rc)
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): member not shown: its full path is empty",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off);
	if (bad && row->fid < f->nshards)
		bad_per_fid[row->fid]++;
	return 0;
}

/* Explains failures that come from the shards beside the index no longer
 * being the ones it was built for: fids are ranks, so a shard added or
 * removed shifts every later one. */
static void check_shards(struct tx_fold *f, const struct tx_counts *c, const uint64_t *bad,
			 struct sf_report *rep)
{
	if (c->beyond)
		sf_report_add(rep, true, "%llu rows name fids beyond the %zu shards beside the index: a shard was removed or renamed since indexing",
			      (unsigned long long)c->beyond, f->nshards);
	bool shifted = false;
	for (size_t i = 0; i < f->nshards; i++) {
		const struct tx_shard *sh = &f->shards[i];
		if (!sh->map) {
			sf_report_add(rep, true, "shard %zu (%s) cannot be read: %s", i, sh->name, sh->problem);
			continue;
		}
		uint8_t first[TX_BLOCK];
		struct sf_err e;
		bool empty = sh->map->size < TX_BLOCK;
		if (!empty && sf_map_read(sh->map, 0, TX_BLOCK, first, "its first block", &e))
			sf_report_add(rep, true, "%s", e.msg);
		else
			empty = empty || tx_block_is_zero(first);
		if (bad[i] && bad[i] == c->per_fid[i] && empty)
			shifted = true;
		if (bad[i] && bad[i] == c->per_fid[i])
			sf_report_add(rep, true, "none of the %llu rows of fid %zu match %s: the shards beside the index are not the ones it was built for%s",
				      (unsigned long long)c->per_fid[i], i, sh->name,
				      empty ? " (this tar is empty: upstream's indexer skips empty tars without giving them a fid, so every later fid is one too low)" : "");
		else if (!c->per_fid[i] && !empty)
			sf_report_add(rep, true, "shard %zu (%s) has no rows: %s", i, sh->name,
				      shifted ? "its rows name the fid of the shard before it" :
				      "it was added after indexing, and every later fid is shifted");
		else if (!c->per_fid[i])
			sf_report_add(rep, false, "shard %zu (%s) is an empty tar with no rows", i, sh->name);
	}
}

static int verify(struct tx_fold *f, const struct tx_counts *c, struct sf_buf **out,
		  struct sf_err *e)
{
	const struct tx_index *ix = &f->ix;
	uint64_t *bad = calloc(f->nshards + 1, sizeof *bad);
	uint8_t *path = malloc(TX_PATH_MAX);
	if (!bad || !path) {
		free(bad);
		free(path);
		return 0;
	}
	struct sf_report rep = { .error_limit = MAX_FINDINGS };
	/* a damaged compressed tar: the view holds what lies before it */
	struct tx_zinfo z;
	tx_z_info(f->nshards ? f->shards[0].map : NULL, &z);
	if (z.damage)
		sf_report_add(&rep, true, "%s", z.damage);
	/* every row against the archive's own bytes */
	struct tx_window w = { .archive = true };
	int rc = 0;
	for (uint64_t r = 0; !rc && r < ix->n_rows; r++)
		rc = check_row(f, r, &rep, bad, path, &w, e);
	tx_window_free(&w);
	if (rc) {
		free(bad);
		free(path);
		sf_buf_unref(sf_report_take(&rep));
		return rc;
	}
	check_shards(f, c, bad, &rep);
	free(bad);
	free(path);
	sf_report_unlisted(&rep);
	if (c->groups != ix->n_stems)
		sf_report_add(&rep, false, "header n_stems is %llu, the rows hold %llu samples",
			      (unsigned long long)ix->n_stems, (unsigned long long)c->groups);
	if ((c->runs == c->groups) != (ix->flags & 1))
		sf_report_add(&rep, false, "the contiguity flag is %s but the rows are %scontiguous",
			      ix->flags & 1 ? "set" : "clear", c->runs == c->groups ? "" : "not ");
	/* no upstream reader reads the index built for an unindexed tar: it is ours */
	if (!f->unindexed && !tx_upstream_loadable(ix))
		sf_report_add(&rep, false, "an extension is empty or holds whitespace: upstream's loader cannot read this index (shardfs can)");
	*out = sf_report_take(&rep);
	return 0;
}

int tx_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tx_fold *f = p->arg;
	/* a tar that cannot be indexed: verify says why */
	if (tx_fold_ready(f, e) == -EIO && f->unready) {
		struct sf_report rep = { 0 };
		sf_report_add(&rep, true, "%s", f->unready);
		return (*out = sf_report_take(&rep)) ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	}
	return tx_render_counted(p, verify, false, out, e);
}
