/* .shardfs/info.txt, info.json and verify of a fold view. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "sf_report.h"
#include "tx.h"

/* Counts that need a pass over the rows. */
struct counts {
	uint64_t samples, runs;
	uint64_t *per_fid;   /* rows per shard, nshards entries */
	uint64_t beyond;     /* rows whose fid names no shard */
};

static int count_rows(struct tx_fold *f, struct counts *c, struct sf_err *e)
{
	memset(c, 0, sizeof *c);
	int rc = tx_fold_lookup(f, e);
	if (rc)
		return rc;
	c->per_fid = calloc(f->nshards + 1, sizeof *c->per_fid);
	if (!c->per_fid)
		return sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	tx_count_groups(&f->ix, &c->samples, &c->runs);
	for (uint64_t r = 0; r < f->ix.n_rows; r++) {
		struct tx_row row;
		tx_row_get(&f->ix, r, &row);
		if (row.fid < f->nshards)
			c->per_fid[row.fid]++;
		else
			c->beyond++;
	}
	return 0;
}

/* Whether upstream's own loader can read the index back: it splits the
 * blocks on any whitespace (spec §6.1). */
static bool upstream_loadable(const struct tx_index *ix)
{
	for (uint32_t i = 0; i < ix->n_ext; i++) {
		if (!ix->ext[i].len)
			return false;
		for (size_t j = 0; j < ix->ext[i].len; j++)
			if (ix->ext[i].p[j] == ' ' || (ix->ext[i].p[j] >= '\t' && ix->ext[i].p[j] <= '\r'))
				return false;
	}
	return true;
}

static void add_strs(struct sf_str *s, const struct tx_str *v, uint32_t n)
{
	if (!n)
		sf_str_add(s, " (none)", 7);
	for (uint32_t i = 0; i < n; i++) {
		sf_str_add(s, " \"", 2);
		sf_utf8_sanitize_add(s, v[i].p, v[i].len);
		sf_str_addc(s, '"');
	}
	sf_str_addc(s, '\n');
}

/* Renders one of the fold's .shardfs files from the row counts; NULL when
 * out of memory. */
typedef struct sf_buf *render_fn(struct tx_fold *f, const struct counts *c);

/* info.txt, info.json and verify all need a pass over the rows first. */
static int render_counted(const struct sf_part *p, render_fn *render, struct sf_buf **out,
			  struct sf_err *e)
{
	struct tx_fold *f = p->arg;
	struct counts c;
	int rc = count_rows(f, &c, e);
	if (rc)
		return rc;
	*out = render(f, &c);
	free(c.per_fid);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
}

static struct sf_buf *info_txt(struct tx_fold *f, const struct counts *c)
{
	const struct tx_index *ix = &f->ix;
	struct sf_str s = { 0 };
	sf_str_addf(&s, "iTar fold %s (index %s, version %u.%u)\n", f->fold, f->view->path,
		    ix->major, ix->minor);
	sf_str_addf(&s, "rows: %llu\nsamples: %llu (header n_stems %llu)\n",
		    (unsigned long long)ix->n_rows, (unsigned long long)c->samples,
		    (unsigned long long)ix->n_stems);
	sf_str_addf(&s, "contiguous: %s (flag %s)\n", c->runs == c->samples ? "yes" : "no",
		    ix->flags & 1 ? "set" : "clear");
	sf_str_addf(&s, "extensions (%u):", ix->n_ext);
	add_strs(&s, ix->ext, ix->n_ext);
	sf_str_addf(&s, "crash stems (%u):", ix->n_crash);
	add_strs(&s, ix->crash, ix->n_crash);
	sf_str_addf(&s, "upstream loader can read it: %s\n", upstream_loadable(ix) ? "yes" : "no");
	sf_str_addf(&s, "shards (%zu):\n", f->nshards);
	for (size_t i = 0; i < f->nshards; i++) {
		const struct tx_shard *sh = &f->shards[i];
		sf_str_addf(&s, "  fid %zu  %s  ", i, sh->name);
		if (sh->map)
			sf_str_addf(&s, "%zu bytes", sh->map->size);
		else
			sf_str_addf(&s, "unreadable (%s)", sh->problem);
		sf_str_addf(&s, "  %llu rows\n", (unsigned long long)c->per_fid[i]);
	}
	if (c->beyond)
		sf_str_addf(&s, "rows naming a missing shard: %llu\n", (unsigned long long)c->beyond);
	return sf_str_take(&s);
}

int tx_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return render_counted(p, info_txt, out, e);
}

static json_t *strs_json(const struct tx_str *v, uint32_t n)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < n; i++)
		json_array_append_new(a, sf_json_bytes_as_text(v[i].p, v[i].len));
	return a;
}

static struct sf_buf *info_json(struct tx_fold *f, const struct counts *c)
{
	const struct tx_index *ix = &f->ix;
	json_t *j = json_object(), *h = json_object(), *shards = json_array();
	json_object_set_new(j, "format", json_string("taridx"));
	json_object_set_new(j, "fold", sf_json_bytes_as_text(f->fold, strlen(f->fold)));
	json_object_set_new(j, "index", sf_json_bytes_as_text(f->view->path, strlen(f->view->path)));
	json_object_set_new(h, "magic", json_string("TARIDX"));
	json_object_set_new(h, "major", json_integer(ix->major));
	json_object_set_new(h, "minor", json_integer(ix->minor));
	json_object_set_new(h, "rec_size", json_integer(ix->rec_size));
	json_object_set_new(h, "hdr_size", json_integer(ix->hdr_size));
	json_object_set_new(h, "n_stems", json_integer((json_int_t)ix->n_stems));
	json_object_set_new(h, "n_rows", json_integer((json_int_t)ix->n_rows));
	json_object_set_new(h, "n_ext", json_integer(ix->n_ext));
	json_object_set_new(h, "n_crash", json_integer(ix->n_crash));
	json_object_set_new(h, "off_crash", json_integer((json_int_t)ix->off_crash));
	json_object_set_new(h, "off_arr", json_integer((json_int_t)ix->off_arr));
	json_object_set_new(h, "flags", json_integer(ix->flags));
	json_t *flags = json_array();
	if (ix->flags & 1)
		json_array_append_new(flags, json_string("contiguous"));
	json_object_set_new(h, "flags_by_name", flags);
	json_object_set_new(j, "header", h);
	json_object_set_new(j, "rows", json_integer((json_int_t)ix->n_rows));
	json_object_set_new(j, "samples", json_integer((json_int_t)c->samples));
	json_object_set_new(j, "contiguous", json_boolean(c->runs == c->samples));
	json_object_set_new(j, "contiguous_flag", json_boolean(ix->flags & 1));
	json_object_set_new(j, "extensions", strs_json(ix->ext, ix->n_ext));
	json_object_set_new(j, "crash_stems", strs_json(ix->crash, ix->n_crash));
	json_object_set_new(j, "upstream_loadable", json_boolean(upstream_loadable(ix)));
	for (size_t i = 0; i < f->nshards; i++) {
		const struct tx_shard *sh = &f->shards[i];
		json_t *o = json_object();
		json_object_set_new(o, "fid", json_integer((json_int_t)i));
		json_object_set_new(o, "name", sf_json_bytes_as_text(sh->name, strlen(sh->name)));
		json_object_set_new(o, "size", sh->map ? json_integer((json_int_t)sh->map->size) : json_null());
		json_object_set_new(o, "rows", json_integer((json_int_t)c->per_fid[i]));
		if (sh->problem)
			json_object_set_new(o, "error", sf_json_bytes_as_text(sh->problem, strlen(sh->problem)));
		json_array_append_new(shards, o);
	}
	json_object_set_new(j, "shards", shards);
	json_object_set_new(j, "rows_naming_missing_shards", json_integer((json_int_t)c->beyond));
	/* what the (keyhash, crashid) lookup costs beyond the mapped index */
	json_object_set_new(j, "lookup_bytes",
			    json_integer((json_int_t)(ix->n_rows * sizeof *ix->perm +
						      (((size_t)1 << ix->bits) + 1) * sizeof *ix->start)));
	struct sf_buf *b = sf_json_pretty(j);
	json_decref(j);
	return b;
}

int tx_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return render_counted(p, info_json, out, e);
}

/* Errors are listed up to this many; the rest are counted. */
#define MAX_FINDINGS 200

/* `path` has room for TX_PATH_MAX bytes. */
static void check_row(struct tx_fold *f, uint64_t r, struct sf_report *rep, uint64_t *bad_per_fid,
		      uint8_t *path)
{
	struct tx_member m;
	tx_member_check(f, r, &m);
	const struct tx_row *row = &m.row;
	const char *shard = row->fid < f->nshards ? f->shards[row->fid].name : "-";
	bool bad = false;
	if (m.bad) {
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu, size %llu): %s", (unsigned long long)r,
			      row->fid, shard, (unsigned long long)row->off, (unsigned long long)row->size, m.bad);
		bad = true;
	}
	uint64_t hsize;
	if (m.hdr && !m.bad && (tx_hdr_size(m.hdr, &hsize) || hsize != row->size)) {
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): tar header size differs from the row's %llu",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off,
			      (unsigned long long)row->size);
		bad = true;
	}
	if (m.hdr && !m.bad && !tx_hdr_checksum_ok(m.hdr)) {
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): tar header checksum mismatch",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off);
		bad = true;
	}
	/* a member the view cannot show must not go unnoticed */
	size_t plen;
	struct tx_str link;
	int rc = m.bad || m.kind == TX_OTHER ? 0 :
		 tx_member_names(f, (uint32_t)r, &m, path, TX_PATH_MAX, &plen, &link);
	if (rc == -ENAMETOOLONG)
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): member not shown: its full path is longer than %d bytes",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off, TX_PATH_MAX);
	else if (rc)
		sf_report_add(rep, true, "row %llu (fid %u %s, offset %llu): member not shown: its full path is empty",
			      (unsigned long long)r, row->fid, shard, (unsigned long long)row->off);
	if (bad && row->fid < f->nshards)
		bad_per_fid[row->fid]++;
}

/* Explains failures that come from the shards beside the index no longer
 * being the ones it was built for: fids are ranks, so a shard added or
 * removed shifts every later one. */
static void check_shards(struct tx_fold *f, const struct counts *c, const uint64_t *bad,
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
		bool empty = sh->map->size < TX_BLOCK || tx_block_is_zero(sh->map->data);
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

static struct sf_buf *verify(struct tx_fold *f, const struct counts *c)
{
	const struct tx_index *ix = &f->ix;
	uint64_t *bad = calloc(f->nshards + 1, sizeof *bad);
	uint8_t *path = malloc(TX_PATH_MAX);
	if (!bad || !path) {
		free(bad);
		free(path);
		return NULL;
	}
	struct sf_report rep = { .error_limit = MAX_FINDINGS };
	for (uint64_t r = 0; r < ix->n_rows; r++)
		check_row(f, r, &rep, bad, path);
	check_shards(f, c, bad, &rep);
	free(bad);
	free(path);
	sf_report_unlisted(&rep);
	if (c->samples != ix->n_stems)
		sf_report_add(&rep, false, "header n_stems is %llu, the rows hold %llu samples",
			      (unsigned long long)ix->n_stems, (unsigned long long)c->samples);
	if ((c->runs == c->samples) != (ix->flags & 1))
		sf_report_add(&rep, false, "the contiguity flag is %s but the rows are %scontiguous",
			      ix->flags & 1 ? "set" : "clear", c->runs == c->samples ? "" : "not ");
	if (!upstream_loadable(ix))
		sf_report_add(&rep, false, "an extension is empty or holds whitespace: upstream's loader cannot read this index (shardfs can)");
	return sf_report_take(&rep);
}

int tx_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return render_counted(p, verify, out, e);
}
