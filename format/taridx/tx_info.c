/* .shardfs/info.txt and info.json of a fold view, and the pass over the rows
 * that they and verify (tx_verify.c) start with. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sf_json.h"
#include "tx.h"
#include "tx_z.h"
#include "sf_view_impl.h"

static int count_rows(struct tx_fold *f, bool samples, struct tx_counts *c, struct sf_err *e)
{
	memset(c, 0, sizeof *c);
	int rc = tx_fold_ready(f, e);
	if (!rc)
		rc = tx_fold_lookup(f, e);
	if (!rc && samples)
		rc = tx_samples_count(f, &c->samples, e);
	if (rc)
		return rc;
	c->per_fid = calloc(f->nshards + 1, sizeof *c->per_fid);
	if (!c->per_fid)
		return sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	c->groups = f->ix.groups;
	c->runs = f->ix.runs;
	struct tx_rows w = { 0 };
	for (uint64_t r = 0; !rc && r < f->ix.n_rows; r++) {
		struct tx_row row;
		if ((rc = tx_rows_get(&f->ix, &w, r, &row, e)))
			break;
		if (row.fid < f->nshards)
			c->per_fid[row.fid]++;
		else
			c->beyond++;
	}
	tx_rows_free(&w);
	if (rc) {
		free(c->per_fid);
		c->per_fid = NULL;
	}
	return rc;
}

/* Whether upstream's own loader can read the index back: it splits the
 * blocks on any whitespace (spec §6.1). */
bool tx_upstream_loadable(const struct tx_index *ix)
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

/* info.txt, info.json and verify all need a pass over the rows first. */
int tx_render_counted(const struct sf_part *p, tx_render_fn *render, bool samples,
		      struct sf_buf **out, struct sf_err *e)
{
	struct tx_fold *f = p->arg;
	struct tx_counts c;
	int rc = count_rows(f, samples, &c, e);
	if (rc)
		return rc;
	*out = NULL;
	rc = render(f, &c, out, e);
	free(c.per_fid);
	return rc || *out ? rc : sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
}

static int info_txt(struct tx_fold *f, const struct tx_counts *c, struct sf_buf **out,
		    struct sf_err *e)
{
	(void)e;
	const struct tx_index *ix = &f->ix;
	struct sf_str s = { 0 };
	if (f->unindexed)
		sf_str_addf(&s, "tar %s with no index: indexed in memory from its headers (as version %u.%u)\n",
			    f->view->path, ix->major, ix->minor);
	struct tx_zinfo z;
	tx_z_info(f->nshards ? f->shards[0].map : NULL, &z);
	if (z.codec != TX_Z_NONE)
		sf_str_addf(&s, "compressed: %s, %llu bytes; seek index of %llu start points, %llu pieces, %llu bytes; header blocks %llu bytes\n",
			    tx_z_name(z.codec), (unsigned long long)z.compressed, (unsigned long long)z.starts,
			    (unsigned long long)z.pieces, (unsigned long long)z.index_bytes,
			    (unsigned long long)z.header_bytes);
	if (z.damage)
		sf_str_addf(&s, "damaged: %s\n", z.damage);
	if (z.kept)
		sf_str_addf(&s, "seek index %s\n", z.kept);
	else
		sf_str_addf(&s, "iTar fold %s (index %s, version %u.%u)\n", f->fold, f->view->path,
			    ix->major, ix->minor);
	sf_str_addf(&s, "rows: %llu\nsamples: %llu (keys in the index %llu, header n_stems %llu)\n",
		    (unsigned long long)ix->n_rows, (unsigned long long)c->samples,
		    (unsigned long long)c->groups, (unsigned long long)ix->n_stems);
	sf_str_addf(&s, "contiguous: %s (flag %s)\n", c->runs == c->groups ? "yes" : "no",
		    ix->flags & 1 ? "set" : "clear");
	sf_str_addf(&s, "extensions (%u):", ix->n_ext);
	add_strs(&s, ix->ext, ix->n_ext);
	sf_str_addf(&s, "crash stems (%u):", ix->n_crash);
	add_strs(&s, ix->crash, ix->n_crash);
	if (!f->unindexed)
		sf_str_addf(&s, "upstream loader can read it: %s\n", tx_upstream_loadable(ix) ? "yes" : "no");
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
	*out = sf_str_take(&s);
	return 0;
}

int tx_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return tx_render_counted(p, info_txt, true, out, e);
}

static json_t *strs_json(const struct tx_str *v, uint32_t n)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < n; i++)
		json_array_append_new(a, sf_json_bytes_as_text(v[i].p, v[i].len));
	return a;
}

static int info_json(struct tx_fold *f, const struct tx_counts *c, struct sf_buf **out,
		     struct sf_err *e)
{
	(void)e;
	const struct tx_index *ix = &f->ix;
	json_t *j = json_object(), *h = json_object(), *shards = json_array();
	json_object_set_new(j, "format", json_string(f->unindexed ? "tar" : "taridx"));
	json_object_set_new(j, "fold", sf_json_bytes_as_text(f->fold, strlen(f->fold)));
	/* an unindexed tar has its index in memory, built from its headers */
	json_object_set_new(j, "index", f->unindexed ? json_string("in memory") :
			    sf_json_bytes_as_text(f->view->path, strlen(f->view->path)));
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
	json_object_set_new(j, "keys", json_integer((json_int_t)c->groups));
	json_object_set_new(j, "contiguous", json_boolean(c->runs == c->groups));
	json_object_set_new(j, "contiguous_flag", json_boolean(ix->flags & 1));
	json_object_set_new(j, "extensions", strs_json(ix->ext, ix->n_ext));
	json_object_set_new(j, "crash_stems", strs_json(ix->crash, ix->n_crash));
	json_object_set_new(j, "upstream_loadable", json_boolean(tx_upstream_loadable(ix)));
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
	struct tx_zinfo z;
	tx_z_info(f->nshards ? f->shards[0].map : NULL, &z);
	if (z.codec != TX_Z_NONE) {
		/* a compressed tar's seek index (tx_z.c); its shard's size is
		 * the decoded tar's */
		json_t *o = json_object();
		json_object_set_new(o, "codec", json_string(tx_z_name(z.codec)));
		json_object_set_new(o, "compressed_size", json_integer((json_int_t)z.compressed));
		json_object_set_new(o, "starts", json_integer((json_int_t)z.starts));
		json_object_set_new(o, "pieces", json_integer((json_int_t)z.pieces));
		json_object_set_new(o, "index_bytes", json_integer((json_int_t)z.index_bytes));
		json_object_set_new(o, "header_bytes", json_integer((json_int_t)z.header_bytes));
		json_object_set_new(o, "kept", z.kept ? json_string(z.kept) : json_null());
		json_object_set_new(o, "damage", z.damage ? sf_json_bytes_as_text(z.damage, strlen(z.damage)) : json_null());
		json_object_set_new(j, "compression", o);
	}
	json_object_set_new(j, "rows_naming_missing_shards", json_integer((json_int_t)c->beyond));
	/* what the (keyhash, crashid) lookup costs beyond the mapped index */
	json_object_set_new(j, "lookup_bytes",
			    json_integer((json_int_t)(ix->n_rows * (sizeof *ix->perm + sizeof *ix->tag) +
						      (((size_t)1 << ix->bits) + 1) * sizeof *ix->start)));
	*out = sf_json_pretty(j);
	json_decref(j);
	return 0;
}

int tx_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return tx_render_counted(p, info_json, true, out, e);
}
