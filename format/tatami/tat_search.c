/* Search segments (spec §15): inverted/terms.txt, inverted/postings/<term>
 * and inverted/deleted.txt. The term dictionary and the run indexes are
 * parsed once, when inverted/ is first used, and kept with the file: the
 * directory of terms needs them anyway. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_codec.h"
#include "sf_report.h"
#include "tat.h"
#include "sf_view_impl.h"

/* A term dictionary block decodes to at most this (upstream's are ~KiB). */
#define MAX_BLOCK (64u << 20)

struct tat_term {
	size_t at, len; /* in tat_search.names */
	uint64_t df;
	bool single;
	uint64_t doc, freq, list;
	struct sf_part *part; /* made with the term's node, kept */
	char *what;           /* the part's name: postings/<term> */
};

struct tat_search {
	bool loaded;
	int rc;
	char err[512];
	struct sf_str names;
	struct tat_term *terms;
	size_t nterms, capterms;
	/* Copies held while the view lives, charged to the budget of
	 * `charged_to` (their stored sizes: the footer's claim). */
	struct tat_rec post, skip, live_rec;
	struct sf_cache *charged_to;
	uint64_t charged;
	uint64_t *list_at, *list_len, *skip_at; /* per posting list */
	size_t nlists;
	const uint8_t *live; /* words, or NULL: every document is live */
	uint64_t live_n;
};

void tat_search_free(struct tat_search *s)
{
	if (!s)
		return;
	sf_str_free(&s->names);
	for (size_t i = 0; s->terms && i < s->nterms; i++)
		free(s->terms[i].what);
	free(s->terms);
	free(s->list_at);
	free(s->list_len);
	free(s->skip_at);
	tat_rec_free(&s->post);
	tat_rec_free(&s->skip);
	tat_rec_free(&s->live_rec);
	if (s->charged_to)
		sf_cache_uncharge(s->charged_to, s->charged);
	free(s);
}

/* One of the four inverted records: stored without a codec, CRC-checked. */
static int inv_record(struct tat_file *tf, uint64_t off, uint64_t len, const char *what,
		      struct tat_rec *r, struct sf_err *e)
{
	int rc = tat_rec_read(tf, off, r, what, e);
	if (rc == 0 && r->csize != len) {
		tat_rec_free(r);
		rc = sf_fail(e, -EIO, "%s: %s: record holds %u bytes, the footer says %" PRIu64,
			     tf->view->path, what, r->csize, len);
	}
	return rc;
}

static int add_term(struct tat_search *s, const uint8_t *p, size_t len, struct sf_cursor *c)
{
	if (sf_grow(&s->terms, &s->capterms, s->nterms, sizeof *s->terms, 256))
		return -ENOMEM;
	struct tat_term *t = &s->terms[s->nterms];
	memset(t, 0, sizeof *t);
	t->at = s->names.len;
	t->len = len;
	sf_str_add(&s->names, p, len);
	t->df = sf_cur_uvarint(c);
	t->single = sf_cur_u8(c) == 1;
	if (t->single) {
		t->doc = sf_cur_uvarint(c);
		t->freq = sf_cur_uvarint(c);
	} else {
		t->list = sf_cur_uvarint(c);
	}
	if (c->bad)
		return -EIO;
	s->nterms++;
	return s->names.oom ? -ENOMEM : 0;
}

static int flat_terms(struct tat_search *s, struct sf_cursor *c)
{
	uint64_t n = sf_cur_uvarint(c);
	for (uint64_t i = 0; i < n && !c->bad; i++) {
		uint64_t len = sf_cur_uvarint(c);
		const uint8_t *p = len <= sf_cur_left(c) ? sf_cur_take(c, (size_t)len) : NULL;
		if (!p || add_term(s, p, (size_t)len, c))
			return -EIO;
	}
	return c->bad ? -EIO : 0;
}

/* Front-coded entries of one block: each term shares a prefix with the
 * previous one of the block. */
static int block_terms(struct tat_search *s, const uint8_t *raw, size_t len)
{
	struct sf_cursor c = sf_cursor(raw, len);
	uint8_t *prev = NULL;
	size_t prevlen = 0;
	int rc = 0;
	while (rc == 0 && sf_cur_left(&c)) {
		uint64_t pre = sf_cur_uvarint(&c), suf = sf_cur_uvarint(&c);
		const uint8_t *p = suf <= sf_cur_left(&c) ? sf_cur_take(&c, (size_t)suf) : NULL;
		if (c.bad || !p || pre > prevlen) {
			rc = -EIO;
			break;
		}
		uint8_t *term = malloc(pre + suf + 1);
		if (!term) {
			rc = -ENOMEM;
			break;
		}
		if (pre)
			memcpy(term, prev, pre);
		memcpy(term + pre, p, suf);
		free(prev);
		prev = term;
		prevlen = pre + suf;
		rc = add_term(s, term, prevlen, &c);
	}
	free(prev);
	return rc;
}

static int tree_terms(struct tat_file *tf, struct tat_search *s, struct sf_cursor *c,
		      struct sf_err *e)
{
	const char *path = tf->view->path;
	if (sf_cur_u8(c) != 2)
		return sf_fail(e, -EIO, "%s: term dictionary: block-tree bad version", path);
	sf_cur_uvarint(c); /* block size: informational */
	sf_cur_uvarint(c); /* term count: the blocks say */
	uint64_t nblocks = sf_cur_uvarint(c), ilen = sf_cur_uvarint(c);
	const uint8_t *index = ilen <= sf_cur_left(c) ? sf_cur_take(c, (size_t)ilen) : NULL;
	if (c->bad || !index)
		return sf_fail(e, -EIO, "%s: term dictionary: truncated block index", path);
	const uint8_t *blocks = c->p + c->pos;
	size_t blen = sf_cur_left(c);
	struct sf_cursor ic = sf_cursor(index, (size_t)ilen);
	for (uint64_t b = 0; b < nblocks; b++) {
		uint64_t flen = sf_cur_uvarint(&ic);
		if (flen > sf_cur_left(&ic) || !sf_cur_take(&ic, (size_t)flen))
			ic.bad = true;
		uint64_t off = sf_cur_uvarint(&ic), clen = sf_cur_uvarint(&ic), rlen = sf_cur_uvarint(&ic);
		if (ic.bad || !sf_range_ok(blen, off, clen) || rlen > MAX_BLOCK)
			return sf_fail(e, -EIO, "%s: term dictionary: block %" PRIu64 " is out of bounds",
				       path, b);
		uint8_t *raw = malloc(rlen ? rlen : 1);
		if (!raw)
			return sf_fail(e, -ENOMEM, "%s: out of memory", path);
		char what[600];
		snprintf(what, sizeof what, "%s: term dictionary block %" PRIu64, path, b);
		int rc = sf_zstd_decode(blocks + off, (size_t)clen, raw, (size_t)rlen, NULL, 0, what, e);
		if (rc == 0 && (rc = block_terms(s, raw, (size_t)rlen)))
			rc = sf_fail(e, rc, "%s: malformed entries", what);
		free(raw);
		if (rc)
			return rc;
	}
	return 0;
}

/* Posting data blobs and skip tables: where list i starts in each run. */
static int index_runs(struct tat_file *tf, struct tat_search *s, struct sf_err *e)
{
	const char *path = tf->view->path;
	struct sf_cursor pc = sf_cursor(s->post.stored, s->post.csize);
	struct sf_cursor sc = sf_cursor(s->skip.stored, s->skip.csize);
	uint64_t n = sf_cur_uvarint(&pc);
	if (pc.bad || n > sf_cur_left(&pc) || sf_cur_uvarint(&sc) != n || sc.bad)
		return sf_fail(e, -EIO, "%s: postings and skips disagree on the number of lists", path);
	s->nlists = (size_t)n;
	s->list_at = calloc(n + 1, sizeof *s->list_at);
	s->list_len = calloc(n + 1, sizeof *s->list_len);
	s->skip_at = calloc(n + 1, sizeof *s->skip_at);
	if (!s->list_at || !s->list_len || !s->skip_at)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	for (size_t i = 0; i < n; i++) {
		uint64_t len = sf_cur_uvarint(&pc);
		s->list_at[i] = pc.pos;
		s->list_len[i] = len;
		if (pc.bad || len > sf_cur_left(&pc) || !sf_cur_take(&pc, (size_t)len))
			return sf_fail(e, -EIO, "%s: postings run: list %zu is truncated", path, i);
		s->skip_at[i] = sc.pos;
		sf_cur_uvarint(&sc);
		uint64_t nb = sf_cur_uvarint(&sc);
		for (uint64_t b = 0; b < nb && !sc.bad; b++)
			for (int k = 0; k < 5; k++)
				sf_cur_uvarint(&sc);
		if (sc.bad)
			return sf_fail(e, -EIO, "%s: skips run: list %zu is truncated", path, i);
	}
	return 0;
}

static int load(struct tat_file *tf, struct tat_search *s, struct sf_err *e)
{
	const struct tat_invert *v = &tf->inv;
	const char *path = tf->view->path;
	/* the runs stay copied while the view lives: held in the budget, so
	 * a footer claiming huge runs is refused instead of allocated */
	struct sf_cache *budget = tf->view->cache;
	uint64_t cost = v->post_len;
	cost = v->skip_len > UINT64_MAX - cost ? UINT64_MAX : cost + v->skip_len;
	cost = v->live_len > UINT64_MAX - cost ? UINT64_MAX : cost + v->live_len;
	int rc = budget ? sf_cache_charge(budget, cost, path, "the search runs", e) : 0;
	if (rc)
		return rc;
	if (budget && budget->charge) {
		s->charged_to = budget;
		s->charged = cost;
	}
	struct tat_rec dict;
	rc = inv_record(tf, v->dict_off, v->dict_len, "term dictionary", &dict, e);
	if (rc == 0)
		rc = inv_record(tf, v->post_off, v->post_len, "postings run", &s->post, e);
	if (rc == 0)
		rc = inv_record(tf, v->skip_off, v->skip_len, "skips run", &s->skip, e);
	if (rc == 0 && v->live_len) {
		rc = inv_record(tf, v->live_off, v->live_len, "live-docs run", &s->live_rec, e);
		if (rc == 0) {
			struct sf_cursor c = sf_cursor(s->live_rec.stored, s->live_rec.csize);
			s->live_n = sf_cur_uvarint(&c);
			uint64_t words = s->live_n / 64 + (s->live_n % 64 != 0);
			if (c.bad || words > sf_cur_left(&c) / 8)
				rc = sf_fail(e, -EIO, "%s: live-docs run is truncated", path);
			else
				s->live = c.p + c.pos;
		}
	}
	if (rc) {
		tat_rec_free(&dict);
		return rc;
	}
	struct sf_cursor c = sf_cursor(dict.stored, dict.csize);
	if (tf->hflags & TAT_H_BLOCK_TREE)
		rc = tree_terms(tf, s, &c, e);
	else if ((rc = flat_terms(s, &c)))
		rc = sf_fail(e, rc, "%s: term dictionary: malformed flat layout", path);
	tat_rec_free(&dict);
	return rc ? rc : index_runs(tf, s, e);
}

static int search_get(struct tat_file *tf, struct tat_search **out, struct sf_err *e)
{
	sf_turn_take(&tf->memo_turn);
	struct tat_search *s = tf->search;
	if (!s && (s = tf->search = calloc(1, sizeof *s)) == NULL) {
		sf_turn_give(&tf->memo_turn);
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	}
	if (!s->loaded) {
		s->rc = load(tf, s, e);
		if (s->rc)
			snprintf(s->err, sizeof s->err, "%s", e->msg);
		s->loaded = true;
	} else if (s->rc) {
		snprintf(e->msg, sizeof e->msg, "%s", s->err);
	}
	sf_turn_give(&tf->memo_turn);
	*out = s;
	return s->rc;
}

static bool is_live(const struct tat_search *s, uint64_t doc)
{
	if (!s->live)
		return true;
	return doc < s->live_n && (sf_le64(s->live + 8 * (doc / 64)) >> (doc % 64) & 1);
}

/* One posting block (spec §15.4) appended as `doc\tfreq` lines. */
static int block_lines(const struct tat_search *s, struct sf_cursor *c, uint64_t first,
		       uint64_t count, struct sf_str *out)
{
	uint64_t gaps[128], freqs[128];
	if (count == 0 || count > 128)
		return -EIO;
	if (count == 128) {
		unsigned w = sf_cur_u8(c);
		if (c->bad || tat_unpack(c, w, 127, gaps))
			return -EIO;
	} else if (tat_dec_groupvarint(c, (size_t)count - 1, gaps)) {
		return -EIO;
	}
	if (tat_dec_pfordelta(c, (size_t)count, freqs))
		return -EIO;
	uint64_t doc = first;
	for (uint64_t j = 0; j < count; j++) {
		if (j)
			doc += gaps[j - 1];
		if (is_live(s, doc))
			sf_str_addf(out, "%" PRIu64 "\t%" PRIu64 "\n", doc, freqs[j]);
	}
	return 0;
}

static int posting_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tat_file *tf = p->arg2;
	const struct tat_term *t = p->arg;
	struct tat_search *s = tf->search;
	const char *path = tf->view->path;
	struct sf_str text = { 0 };
	if (t->single) {
		if (is_live(s, t->doc))
			sf_str_addf(&text, "%" PRIu64 "\t%" PRIu64 "\n", t->doc, t->freq);
	} else {
		if (t->list >= s->nlists)
			return sf_fail(e, -EIO, "%s: %s: posting list %" PRIu64 " does not exist", path,
				       p->what, t->list);
		const uint8_t *data = s->post.stored + s->list_at[t->list];
		uint64_t dlen = s->list_len[t->list];
		struct sf_cursor sc = sf_cursor(s->skip.stored, s->skip.csize);
		sc.pos = s->skip_at[t->list];
		sf_cur_uvarint(&sc);
		uint64_t nb = sf_cur_uvarint(&sc);
		for (uint64_t b = 0; b < nb; b++) {
			uint64_t first = sf_cur_uvarint(&sc);
			sf_cur_uvarint(&sc);
			sf_cur_uvarint(&sc);
			uint64_t off = sf_cur_uvarint(&sc), count = sf_cur_uvarint(&sc);
			struct sf_cursor bc = sf_cursor(data, (size_t)dlen);
			bc.pos = off <= dlen ? (size_t)off : 0;
			if (sc.bad || off > dlen || block_lines(s, &bc, first, count, &text)) {
				sf_str_free(&text);
				return sf_fail(e, -EIO, "%s: %s: posting block %" PRIu64 " is malformed",
					       path, p->what, b);
			}
		}
	}
	*out = sf_str_take(&text);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", path);
}

/* postings/<term>: entries made on demand (a term's name and two numbers,
 * about 30 bytes, charged with the runs), a node and a part when looked up. */
static int populate_postings(struct sf_node *dir, struct sf_err *e)
{
	struct tat_file *tf = dir->view->state;
	struct tat_search *s;
	int rc = search_get(tf, &s, e);
	if (rc)
		return rc;
	if (s->charged_to) {
		uint64_t cost = 32 * (uint64_t)s->nterms + s->names.len;
		if ((rc = sf_cache_charge(s->charged_to, cost, tf->view->path, "postings/", e)))
			return rc;
		s->charged += cost;
	}
	for (size_t i = 0; i < s->nterms && rc == 0; i++)
		rc = sf_dir_add_lazy(dir, s->names.p + s->terms[i].at, s->terms[i].len, SF_FILE,
				     (uint32_t)i, 0);
	return rc ? sf_fail(e, rc, "%s: postings/: %s", tf->view->path,
			    rc == -ENOMEM ? "out of memory" : "too many terms") : 0;
}

static int make_posting(struct sf_node *n, struct sf_err *e)
{
	struct tat_file *tf = n->view->state;
	struct tat_term *t = &tf->search->terms[n->key];
	if (!t->what && !(t->what = strdup(n->name)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	if (!t->part && !(t->part = sf_view_part(tf->view, posting_produce, t, SF_SIZE_UNKNOWN, t->what)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", tf->view->path);
	t->part->arg2 = tf;
	sf_file_set_build(n, tat_build_whole, t->part);
	return 0;
}

/* terms.txt names each term as postings/ shows it, so it lists that
 * directory once it is populated. */
static int build_terms(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tat_file *tf = f->view->state;
	struct sf_node *dir = f->arg;
	int rc = sf_dir_ready_held(dir, e);
	if (rc)
		return rc == -ENOMEM ? rc : sf_file_set_broken(f, 0, e->msg);
	struct tat_search *s = tf->search;
	struct sf_str text = { 0 };
	for (size_t i = 0; i < sf_dir_count(dir); i++) {
		struct sf_dirent d;
		sf_dir_entry(dir, i, &d);
		sf_str_addf(&text, "%s\t%" PRIu64 "\n", d.name, s->terms[i].df);
	}
	return sf_file_add_str(f, &text);
}

static int build_deleted(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tat_file *tf = f->view->state;
	struct tat_search *s;
	int rc = search_get(tf, &s, e);
	if (rc)
		return rc == -ENOMEM ? rc : sf_file_set_broken(f, 0, e->msg);
	struct sf_str text = { 0 };
	for (uint64_t d = 0; s->live && d < s->live_n; d++)
		if (!is_live(s, d))
			sf_str_addf(&text, "%" PRIu64 "\n", d);
	return sf_file_add_str(f, &text);
}

int tat_search_add(struct tat_file *tf, struct sf_node *root)
{
	struct sf_node *inv = sf_dir_add_exact(root, SF_DIR, "inverted");
	struct sf_node *terms = inv ? sf_dir_add_exact(inv, SF_FILE, "terms.txt") : NULL;
	struct sf_node *post = terms ? sf_dir_add_exact(inv, SF_DIR, "postings") : NULL;
	struct sf_node *del = post ? sf_dir_add_exact(inv, SF_FILE, "deleted.txt") : NULL;
	if (!del || sf_dir_set_lazy(post, make_posting))
		return -ENOMEM;
	sf_dir_set_populate(post, populate_postings, NULL);
	sf_file_set_build(terms, build_terms, post);
	sf_file_set_build(del, build_deleted, NULL);
	return 0;
}

void tat_search_check(struct tat_file *tf, struct sf_report *r)
{
	struct sf_err e = { { 0 } };
	struct tat_search *s;
	if (search_get(tf, &s, &e)) {
		sf_report_add(r, true, "%s", e.msg);
		return;
	}
	for (size_t i = 0; i < s->nterms; i++) {
		struct sf_part tmp = { .arg = &s->terms[i], .arg2 = tf, .what = "postings" };
		struct sf_buf *b = NULL;
		if (posting_produce(&tmp, &sf_nocache, &b, &e)) {
			sf_report_add(r, true, "term %zu: %s", i, e.msg);
			continue;
		}
		sf_buf_unref(b);
	}
	if (tf->inv.num_terms != s->nterms)
		sf_report_add(r, false, "footer counts %" PRIu64 " terms, the dictionary holds %zu",
			      tf->inv.num_terms, s->nterms);
}
