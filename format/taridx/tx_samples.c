/* .shardfs/samples.jsonl of a fold (docs/formats/taridx.md): one line per
 * WebDataset sample, produced per read from the index and the tar headers
 * (or, for a host that keeps generated files whole, kept as counted).
 *
 * Its size comes from one counting pass over the rows, run when the file
 * is first stat'ed or read, which renders every line without keeping it.
 * The pass leaves marks (where every STEP-th sample starts) so that a read
 * anywhere renders at most STEP samples it does not return, and reads that
 * follow each other resume where the last one stopped.
 *
 * Two ways to find a sample's members:
 * - runs: when the index says each stem's rows are contiguous (flag bit 0)
 *   and every member's file name has the stem its row is keyed by, the
 *   members of a sample all lie in one run of rows sharing a (keyhash,
 *   crashid) pair, so a run at a time is grouped and nothing is kept;
 * - chains: otherwise the counting pass links each member row to the next
 *   member of its sample (4 bytes per row, plus a table of 8 bytes per
 *   slot dropped after the pass), and a sample is produced at its first
 *   row by following the links. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_hash.h"
#include "sf_json.h"
#include "sf_name.h"
#include "tx.h"
#include "sf_view_impl.h"

#define STEP 4096u
#define CURSORS 8

/* Where producing stands: the next row to look at, the number of the next
 * sample, and the offset of its line. Always at the start of a run (runs)
 * or of a row (chains). */
struct pos {
	uint64_t row, i, off;
};

struct tx_samples {
	struct tx_fold *f;
	bool runs;
	uint32_t *next;  /* chains: next member row of the sample + 1, 0 = none */
	uint8_t *first;  /* chains: bit per row, set where a sample starts */
	uint64_t size, nsamples;
	struct pos *marks;
	size_t nmarks, capmarks;
	pthread_mutex_t lock; /* guards the cursors */
	struct pos cursor[CURSORS];
	unsigned cursor_turn;
};

/* One member of a window: its escaped view path, where its key ends
 * (before the file name's first '.'; the path's length when there is none)
 * and the hash of the key. */
struct smember {
	size_t at, len, klen;
	uint64_t khash;
	size_t group; /* the window's member that starts its sample */
	/* the next member of the sample (SIZE_MAX: none); in a sample's
	 * first member, also its last */
	size_t next, last;
	bool dup;     /* an earlier member of the sample has its extension */
};

/* Scratch for producing: the members of the window being grouped and their
 * paths, reused from window to window. */
struct scratch {
	struct tx_fold *f;
	struct smember *m;
	size_t n, cap;
	struct sf_str paths;
	uint8_t raw[TX_PATH_MAX];
	struct sf_ids group; /* grouping table over the window: member indexes */
	struct tx_window tar; /* copies of the tars' headers and of the rows */
	/* the index's rows could not be read: the pass stops, e says why */
	int rc;
	struct sf_err e;
};

/* A scratch on the heap (its path buffer is 64 KiB: not for a daemon
 * thread's stack), not zeroed: only its fields need setting. */
static struct scratch *scratch_new(struct tx_fold *f)
{
	struct scratch *s = malloc(sizeof *s);
	if (s) {
		s->f = f;
		s->m = NULL;
		s->n = s->cap = 0;
		s->paths = (struct sf_str){ 0 };
		s->group = (struct sf_ids){ .map = { 0 } };
		s->tar = (struct tx_window){ 0 };
		s->rc = 0;
	}
	return s;
}

static void scratch_free(struct scratch *s)
{
	free(s->m);
	sf_ids_free(&s->group);
	sf_str_free(&s->paths);
	tx_window_free(&s->tar);
	free(s);
}

/* Appends `raw` (a member's full path) escaped per component as the view
 * names it (docs/design.md §3.3): ".." is shown as "..#1", and a root file
 * or directory named ".shardfs" as ".shardfs#1". */
static void escape_path(struct sf_str *out, const uint8_t *raw, size_t len)
{
	size_t from = 0;
	bool root = true;
	for (;;) {
		const uint8_t *slash = memchr(raw + from, '/', len - from);
		size_t end = slash ? (size_t)(slash - raw) : len;
		char esc[SF_NAME_MAX + 1];
		sf_name_escape(raw + from, end - from, SF_NAME_MAX, esc);
		if (!root)
			sf_str_addc(out, '/');
		sf_str_add(out, esc, strlen(esc));
		if (strcmp(esc, "..") == 0 || (root && strcmp(esc, ".shardfs") == 0))
			sf_str_add(out, "#1", 2);
		if (!slash)
			return;
		from = end + 1;
		root = false;
	}
}

/* The escaped path of member row r appended to s->paths, or false when row
 * r is not a member the view shows (docs/design.md §3.7). `stem_ok` (optional)
 * says whether the file name's stem is the one the row is keyed by. */
static bool member_path(struct scratch *s, uint32_t r, struct smember *out, bool *stem_ok)
{
	struct tx_member m;
	struct tx_str link;
	size_t rlen;
	if (s->rc || (s->rc = tx_window_plan(s->f, &s->tar, r, false, &s->e)) ||
	    (s->rc = tx_member_check(s->f, r, &m, &s->tar, &s->e)))
		return false;
	if (m.bad || m.kind == TX_OTHER ||
	    tx_member_names(s->f, r, &m, s->raw, TX_PATH_MAX, &rlen, &link))
		return false;
	out->at = s->paths.len;
	escape_path(&s->paths, s->raw, rlen);
	out->len = s->paths.len - out->at;
	if (s->paths.oom)
		return false;
	const uint8_t *p = s->paths.p + out->at;
	size_t base = out->len;
	while (base && p[base - 1] != '/')
		base--;
	const uint8_t *dot = memchr(p + base, '.', out->len - base);
	out->klen = dot ? (size_t)(dot - p) : out->len;
	out->khash = XXH64(p, out->klen, 0);
	if (stem_ok) {
		/* the key the row was hashed from: the header's name field */
		struct tx_key k;
		tx_key_from(m.hdr, tx_field_len(m.hdr, 100), &k);
		const uint8_t *rb = s->raw + rlen;
		while (rb > s->raw && rb[-1] != '/')
			rb--;
		const uint8_t *rdot = memchr(rb, '.', (size_t)(s->raw + rlen - rb));
		size_t slen = rdot ? (size_t)(rdot - rb) : (size_t)(s->raw + rlen - rb);
		*stem_ok = !k.cut && k.stem_len == slen && memcmp(k.stem, rb, slen) == 0;
	}
	return true;
}

static bool same_key(const struct scratch *s, const struct smember *a, const struct smember *b)
{
	return a->khash == b->khash && a->klen == b->klen &&
	       memcmp(s->paths.p + a->at, s->paths.p + b->at, a->klen) == 0;
}

static void json_string_add(struct sf_str *out, const uint8_t *p, size_t len)
{
	/* view paths hold no control bytes and no '\' (escaped as %XX), so
	 * only '"' needs escaping, and only bytes from 0x80 up need checking
	 * for UTF-8 */
	sf_str_addc(out, '"');
	size_t from = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < 0x80 && p[i] != '"')
			continue;
		sf_str_add(out, p + from, i - from);
		if (p[i] == '"') {
			sf_str_add(out, "\\\"", 2);
			from = i + 1;
			continue;
		}
		size_t k = sf_utf8_seq(p + i, len - i);
		sf_utf8_sanitize_add(out, p + i, k ? k : 1);
		from = i + (k ? k : 1);
		i = from - 1;
	}
	sf_str_add(out, p + from, len - from);
	sf_str_addc(out, '"');
}

/* Appends v in decimal. */
static void u64_add(struct sf_str *out, uint64_t v)
{
	char d[20];
	size_t n = 0;
	do
		d[sizeof d - ++n] = (char)('0' + v % 10);
	while ((v /= 10));
	sf_str_add(out, d + sizeof d - n, n);
}

static size_t ext_len(const struct smember *m)
{
	return m->klen < m->len ? m->len - m->klen - 1 : 0;
}

static const uint8_t *ext_of(const struct scratch *s, const struct smember *m)
{
	return s->paths.p + m->at + m->len - ext_len(m);
}

/* A window's member looked for in s->group: by key, or by extension
 * within its sample. */
struct probe {
	const struct scratch *s;
	const struct smember *m;
};

static bool key_is(const void *key, uint32_t k)
{
	const struct probe *p = key;
	return same_key(p->s, &p->s->m[k], p->m);
}

static bool ext_is(const void *key, uint32_t k)
{
	const struct probe *p = key;
	const struct smember *o = &p->s->m[k], *m = p->m;
	return o->group == m->group && ext_len(o) == ext_len(m) &&
	       memcmp(ext_of(p->s, o), ext_of(p->s, m), ext_len(m)) == 0;
}

/* Groups the window's members by key, links each sample's members in row
 * order and marks repeated extensions: two passes over hash tables, so a
 * window of many samples or a sample of many members stays linear. */
static int group_window(struct scratch *s)
{
	/* each reset makes room for the window, so no put below fails */
	if (sf_ids_reset(&s->group, s->n))
		return -ENOMEM;
	for (size_t k = 0; k < s->n; k++) {
		struct smember *m = &s->m[k];
		struct probe p = { s, m };
		uint32_t *first = sf_ids_find(&s->group, m->khash, key_is, &p);
		m->next = SIZE_MAX;
		if (!first) {
			(void)sf_ids_put(&s->group, m->khash, (uint32_t)k);
			m->group = m->last = k;
			continue;
		}
		struct smember *g = &s->m[m->group = *first];
		s->m[g->last].next = k;
		g->last = k;
	}
	if (sf_ids_reset(&s->group, s->n))
		return -ENOMEM;
	for (size_t k = 0; k < s->n; k++) {
		struct smember *m = &s->m[k];
		struct probe p = { s, m };
		uint64_t h = XXH64(ext_of(s, m), ext_len(m), 0) ^ m->group * 0x9E3779B97F4A7C15ull;
		m->dup = sf_ids_find(&s->group, h, ext_is, &p) != NULL;
		if (!m->dup)
			(void)sf_ids_put(&s->group, h, (uint32_t)k);
	}
	return 0;
}

/* Renders the samples of the window's members (in row order) into out,
 * numbering them from *i. A sample's members are those with its key; of
 * two with the same extension the first is named (a later one has the same
 * path, or differs only by a trailing '.'). */
static int render_window(struct scratch *s, uint64_t *i, struct sf_str *out)
{
	if (group_window(s))
		return -ENOMEM;
	const uint8_t *p = s->paths.p;
	for (size_t k = 0; k < s->n; k++) {
		const struct smember *g = &s->m[k];
		if (g->group != k)
			continue;
		sf_str_add(out, "{\"i\": ", 6);
		u64_add(out, (*i)++);
		sf_str_add(out, ", \"key\": ", 9);
		json_string_add(out, p + g->at, g->klen);
		sf_str_add(out, ", \"members\": {", 14);
		for (size_t j = k; j != SIZE_MAX; j = s->m[j].next) {
			const struct smember *m = &s->m[j];
			if (m->dup)
				continue;
			if (j != k)
				sf_str_add(out, ", ", 2);
			json_string_add(out, ext_of(s, m), ext_len(m));
			sf_str_add(out, ": ", 2);
			json_string_add(out, p + m->at, m->len);
		}
		sf_str_add(out, "}}\n", 3);
	}
	return out->oom ? -ENOMEM : 0;
}

static int add_member(struct scratch *s, uint32_t r, bool *stem_ok)
{
	if (sf_grow(&s->m, &s->cap, s->n, sizeof *s->m, 16))
		return -ENOMEM;
	if (member_path(s, r, &s->m[s->n], stem_ok))
		s->n++;
	return s->paths.oom ? -ENOMEM : s->rc;
}

static bool same_pair(const struct tx_row *a, const struct tx_row *b)
{
	return a->keyhash == b->keyhash && a->crashid == b->crashid;
}

/* Renders the window at p (a run, or one row) into out and moves p past
 * it. `stem_ok`, when given, is cleared if a member's stem is not its
 * row's (runs would then not hold whole samples). */
static int step(struct tx_samples *sm, struct scratch *s, struct pos *p, struct sf_str *out,
		bool *stem_ok)
{
	const struct tx_index *ix = &sm->f->ix;
	s->n = 0;
	s->paths.len = 0;
	int rc = 0;
	if (sm->runs) {
		struct tx_row head, row;
		rc = s->rc = tx_rows_get(ix, &s->tar.rows, p->row, &head, &s->e);
		uint64_t r = p->row;
		while (!rc) {
			bool ok = true;
			rc = add_member(s, (uint32_t)r, stem_ok ? &ok : NULL);
			if (!ok)
				*stem_ok = false;
			if (rc || ++r >= ix->n_rows ||
			    (rc = s->rc = tx_rows_get(ix, &s->tar.rows, r, &row, &s->e)) ||
			    !same_pair(&head, &row))
				break;
		}
		p->row = r;
	} else {
		uint64_t r = p->row++;
		if (!(sm->first[r / 8] >> (r % 8) & 1))
			return 0;
		for (uint32_t at = (uint32_t)r + 1; !rc && at; at = sm->next[at - 1])
			rc = add_member(s, at - 1, NULL);
	}
	size_t before = out->len;
	if (!rc)
		rc = render_window(s, &p->i, out);
	p->off += out->len - before;
	return rc;
}

/* ---- the counting pass ------------------------------------------------ */

/* Whether row r's member has the key of the window's only member (its
 * path is read into the scratch and dropped again). */
static bool row_has_key(const void *key, uint32_t r)
{
	struct scratch *s = (struct scratch *)key;
	struct smember other;
	size_t mark = s->paths.len;
	bool hit = member_path(s, r, &other, NULL) && same_key(s, &other, &s->m[0]);
	s->paths.len = mark;
	return hit;
}

/* Links each member row to the next member of its sample, through a table
 * of keys to the last row seen with each, dropped afterwards. A key's hash
 * alone never joins two rows: the paths are compared. */
static int link_chains(struct tx_samples *sm, struct scratch *s)
{
	const struct tx_index *ix = &sm->f->ix;
	struct sf_ids last = { .map = { 0 } };
	sm->next = calloc(ix->n_rows ? ix->n_rows : 1, sizeof *sm->next);
	sm->first = calloc(ix->n_rows / 8 + 1, 1);
	if (!sm->next || !sm->first)
		return -ENOMEM;
	int rc = 0;
	for (uint64_t r = 0; !rc && r < ix->n_rows; r++) {
		s->n = 0;
		s->paths.len = 0;
		if ((rc = add_member(s, (uint32_t)r, NULL)) || !s->n)
			continue;
		uint64_t h = s->m[0].khash;
		uint32_t *tail = sf_ids_find(&last, h, row_has_key, s);
		if ((rc = s->rc))
			break;
		if (tail) {
			sm->next[*tail] = (uint32_t)r + 1;
			*tail = (uint32_t)r;
		} else if (!(rc = sf_ids_put(&last, h, (uint32_t)r))) {
			sm->first[r / 8] |= (uint8_t)(1u << (r % 8));
		}
	}
	sf_ids_free(&last);
	return rc;
}

static int add_mark(struct tx_samples *sm, const struct pos *p)
{
	if (sf_grow(&sm->marks, &sm->capmarks, sm->nmarks, sizeof *sm->marks, 16))
		return -ENOMEM;
	sm->marks[sm->nmarks++] = *p;
	return 0;
}

/* Renders every line once for the size and the marks, into `keep` when
 * given, else without keeping them. In runs mode it gives up (-EAGAIN) at
 * the first member whose file name's stem is not its row's. */
static int count(struct tx_samples *sm, struct scratch *s, struct sf_str *keep)
{
	struct pos p = { 0 };
	struct sf_str line = { 0 };
	struct sf_str *out = keep ? keep : &line;
	int rc = 0;
	sm->nmarks = 0;
	out->len = 0;
	while (!rc && p.row < sm->f->ix.n_rows) {
		if (p.i >= (uint64_t)sm->nmarks * STEP)
			rc = add_mark(sm, &p);
		bool stem_ok = true;
		if (!keep)
			line.len = 0;
		if (!rc)
			rc = step(sm, s, &p, out, sm->runs ? &stem_ok : NULL);
		if (!rc && !stem_ok)
			rc = -EAGAIN;
	}
	sf_str_free(&line);
	sm->size = p.off;
	sm->nsamples = p.i;
	return rc;
}

/* The counting pass: by runs when the index says rows are contiguous and
 * that holds, else by chains. */
static int count_all(struct tx_samples *sm, struct scratch *s, struct sf_str *keep)
{
	sm->runs = sm->f->ix.flags & 1;
	int rc = sm->runs ? count(sm, s, keep) : -EAGAIN;
	if (rc == -EAGAIN) {
		sm->runs = false;
		rc = link_chains(sm, s);
		if (!rc)
			rc = count(sm, s, keep);
	}
	return rc;
}

static void samples_clear(struct tx_samples *sm)
{
	free(sm->next);
	free(sm->first);
	free(sm->marks);
}

/* ---- the file ----------------------------------------------------------- */

/* The error of a pass that failed with rc: the index's rows could not be
 * read (as s->e says), else out of memory. */
static int failed(const struct scratch *s, int rc, const char *doing, struct sf_err *e)
{
	if (s->rc) {
		*e = s->e;
		return s->rc;
	}
	return sf_fail(e, rc, "%s: out of memory %s", s->f->view->path, doing);
}

/* The furthest known position at or before byte `off`: a mark or a cursor. */
static struct pos start_for(struct tx_samples *sm, uint64_t off)
{
	size_t lo = 0, hi = sm->nmarks;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (sm->marks[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	struct pos best = sm->marks[lo];
	pthread_mutex_lock(&sm->lock);
	for (int k = 0; k < CURSORS; k++)
		if (sm->cursor[k].off <= off && sm->cursor[k].off > best.off)
			best = sm->cursor[k];
	pthread_mutex_unlock(&sm->lock);
	return best;
}

static void keep_cursor(struct tx_samples *sm, const struct pos *p)
{
	pthread_mutex_lock(&sm->lock);
	sm->cursor[sm->cursor_turn++ % CURSORS] = *p;
	pthread_mutex_unlock(&sm->lock);
}

static int gen(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c,
	       struct sf_err *e)
{
	struct tx_samples *sm = arg;
	struct tx_fold *f = sm->f;
	/* a read may come after a shed (tx_lone.c): the index first */
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	struct scratch *s = scratch_new(f);
	if (!s)
		return sf_fail(e, -ENOMEM, "%s: out of memory for samples.jsonl", f->view->path);
	struct pos p = start_for(sm, off), last = p;
	struct sf_str text = { 0 };
	size_t done = 0;
	while (!rc && done < len && p.row < f->ix.n_rows) {
		last = p;
		text.len = 0;
		if ((rc = step(sm, s, &p, &text, NULL)))
			break;
		/* the window's text covers [last.off, p.off) */
		if (p.off <= off + done)
			continue;
		uint64_t from = off + done - last.off;
		size_t k = (size_t)(p.off - (off + done));
		if (k > len - done)
			k = len - done;
		memcpy(out + done, text.p + from, k);
		done += k;
	}
	sf_str_free(&text);
	if (rc)
		rc = failed(s, rc, "producing samples.jsonl", e);
	scratch_free(s);
	if (rc)
		return rc;
	if (done < len)
		return sf_fail(e, -EIO, "%s: samples.jsonl came out shorter than counted (a shard changed?)",
			       f->view->path);
	keep_cursor(sm, &last);
	return 0;
}

void tx_samples_free(struct tx_samples *sm)
{
	if (!sm)
		return;
	samples_clear(sm);
	pthread_mutex_destroy(&sm->lock);
	free(sm);
}

static int build(struct sf_node *n, struct sf_cache *c, struct sf_err *e)
{
	struct tx_fold *f = n->arg;
	struct tx_samples *sm = f->samples;
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	struct scratch *s = scratch_new(f);
	if (!s)
		return sf_fail(e, -ENOMEM, "%s: out of memory counting samples.jsonl", f->view->path);
	/* a host that reads the file whole keeps what the count rendered */
	struct sf_str text = { 0 };
	bool keep = f->view->host.keep_generated;
	rc = count_all(sm, s, keep ? &text : NULL);
	if (rc)
		rc = failed(s, rc, "counting samples.jsonl", e);
	scratch_free(s);
	/* kept in the budget, else rendered per read as the mount does */
	struct sf_err ignored = { { 0 } };
	keep = keep && !rc && sf_file_charge(n, text.len, "keeping samples.jsonl", &ignored) == 0;
	if (!rc && sm->size && (keep ? sf_file_add_str(n, &text) : sf_file_add_gen(n, gen, sm, 0, sm->size)))
		rc = sf_fail(e, -ENOMEM, "%s: out of memory counting samples.jsonl", f->view->path);
	sf_str_free(&text);
	return rc;
}

int tx_samples_add(struct tx_fold *f, struct sf_node *meta)
{
	struct tx_samples *sm = calloc(1, sizeof *sm);
	if (!sm)
		return -ENOMEM;
	sm->f = f;
	pthread_mutex_init(&sm->lock, NULL);
	f->samples = sm;
	struct sf_node *n = sf_dir_add_exact(meta, SF_FILE, "samples.jsonl");
	if (!n)
		return -ENOMEM;
	sf_file_set_build(n, build, f);
	return 0;
}

int tx_samples_count(struct tx_fold *f, uint64_t *n, struct sf_err *e)
{
	/* a pass of its own: the file's state is built in the view's turn,
	 * which info (a part) must not take */
	struct tx_samples sm = { .f = f };
	struct scratch *s = scratch_new(f);
	if (!s)
		return sf_fail(e, -ENOMEM, "%s: out of memory counting samples", f->view->path);
	int rc = count_all(&sm, s, NULL);
	if (rc)
		rc = failed(s, rc, "counting samples", e);
	scratch_free(s);
	*n = sm.nsamples;
	samples_clear(&sm);
	return rc;
}
