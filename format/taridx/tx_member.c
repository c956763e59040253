/* What an index row points at: checking a row against its tar (spec §6.2,
 * §6.3) and the member's full path (docs/design.md §3.7). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sf_bytes.h"
#include "tx.h"
#include "tx_z.h"
#include "sf_view_impl.h"

bool tx_payload_at(const struct tx_fold *f, const struct tx_row *row, uint64_t *off)
{
	if (row->fid >= f->nshards || !f->shards[row->fid].map)
		return false;
	const struct sf_map *m = f->shards[row->fid].map;
	return sf_add_ok(row->off, TX_BLOCK, off) && sf_range_ok(m->size, *off, row->size);
}

enum tx_kind tx_kind_of(uint8_t typeflag)
{
	switch (typeflag) {
	case '0':
	case '\0':
	case '7':
	case 'S':
		return TX_FILE;
	case '1':
		return TX_HARDLINK;
	case '2':
		return TX_SYMLINK;
	default:
		return TX_OTHER;
	}
}

/* (its tar's changes in place are the mapping checks' to find) */
bool tx_row_plain(const struct tx_fold *f, uint64_t r)
{
	return atomic_load_explicit(&f->plain[r / 8], memory_order_relaxed) >> (r % 8) & 1;
}

/* The first block of the records that describe the header of row r: the
 * rows just before it that are records and end where the next begins
 * (the indexer made a row of each). 0; 1 when the tar cannot be read (te
 * says why); or as tx_rows_get (e). */
static int chain_start(const struct tx_fold *f, const struct tx_row *row, uint64_t r,
		       const struct sf_map *map, struct tx_window *w, uint64_t *start,
		       struct sf_err *te, struct sf_err *e)
{
	struct tx_row prev;
	uint64_t at = row->off, end;
	for (uint64_t q = tx_row_plain(f, r) ? 0 : r; q > 0 && r - q < TX_CHAIN_MAX; q--) {
		int rc = tx_rows_get(&f->ix, &w->rows, q - 1, &prev, e);
		if (rc)
			return rc;
		if (prev.fid != row->fid || !sf_range_ok(map->size, prev.off, TX_BLOCK) ||
		    !sf_add_ok(prev.off + TX_BLOCK, prev.size, &end) || end > at || at - end >= TX_BLOCK)
			break;
		const uint8_t *h;
		if (tx_window_get(w, map, prev.off, TX_BLOCK, &h, te))
			return 1;
		if (!tx_is_record(h[156]))
			break;
		at = prev.off;
	}
	*start = at;
	return 0;
}

/* Why a member cannot be read when its tar cannot: the message names the
 * tar, the part and what failed, as the view's errors say it. */
static const char *unreadable(struct tx_member *m, struct sf_err *e)
{
	snprintf(m->why, sizeof m->why, "%s", e->msg);
	return m->why;
}

/* The member's headers as tar readers read them, or why not (m->bad). 0,
 * or as tx_rows_get. */
static int read_member(const struct tx_fold *f, uint64_t r, const struct sf_map *map,
		       struct tx_member *m, struct tx_window *w, struct sf_err *e)
{
	struct tx_entry *en = &m->en;
	struct sf_err te = { 0 };
	const uint8_t *base;
	uint64_t start, boff;
	int rc = chain_start(f, &m->row, r, map, w, &start, &te, e);
	if (rc < 0)
		return rc;
	if (!rc && (rc = tx_entry_read_copy(w, map, start, en, &base, &boff, &te)) > 0) {
		m->bad = en->bad ? en->bad : "the extension records before it do not lead to its header";
		return 0;
	}
	if (rc) {
		m->bad = unreadable(m, &te);
		return 0;
	}
	if (en->hdr != m->row.off) {
		m->bad = en->bad ? en->bad : "the extension records before it do not lead to its header";
		return 0;
	}
	m->hdr = base + (en->hdr - boff);
	if (en->bad)
		m->bad = en->bad;
	else if (en->row_size != m->row.size)
		m->bad = "the row's size is not the extent its tar headers give";
	else if (en->sparse)
		tx_sparse_each(base, boff, en, NULL, NULL, &m->bad);
	return 0;
}

/* The check's first copy, its header (*hdr). A fresh window (a lookup's
 * check of one row) copies just that header and, when the row before ends
 * right before it (unless r is plain), that row's header, which
 * chain_start reads next: one pread of those bytes rather than two of
 * TX_WINDOW_SMALL; and the payload after it when a read of it waits on
 * the lookup. A window in use
 * (a pass) reads on as it does. 0; 1 when the tar cannot be read (te says
 * why); or as tx_rows_get (e). */
static int first_copy(const struct tx_fold *f, uint64_t r, const struct tx_row *row,
		      const struct sf_map *map, struct tx_window *w, const uint8_t **hdr,
		      struct sf_err *te, struct sf_err *e)
{
	uint64_t from = row->off, end;
	bool lone = !w->len && !w->ahead;
	if (lone && r > 0 && !tx_row_plain(f, r)) {
		struct tx_row prev;
		int rc = tx_rows_get(&f->ix, &w->rows, r - 1, &prev, e);
		if (rc)
			return rc;
		if (prev.fid == row->fid && prev.off < row->off &&
		    row->off - prev.off <= TX_WINDOW_SMALL &&
		    sf_add_ok(prev.off + TX_BLOCK, prev.size, &end) && end <= row->off &&
		    row->off - end < TX_BLOCK)
			from = prev.off;
	}
	size_t hdrs = (size_t)(row->off + TX_BLOCK - from), along = 0;
	/* a read waits on this lookup: the payload too, in the same pread
	 * (the lookup hands the copy to the read, sf_stored.pre) */
	if (lone && row->size && row->size <= w->along &&
	    sf_range_ok(map->size, row->off + TX_BLOCK, row->size))
		along = (size_t)row->size;
	if (lone)
		w->ahead = hdrs + along;
	const uint8_t *p;
	int bad = tx_window_get(w, map, from, hdrs, &p, te);
	/* a payload that cannot be read is the read's to report, not the
	 * check's: the headers alone again */
	if (bad && along) {
		w->ahead = hdrs;
		bad = tx_window_get(w, map, from, hdrs, &p, te);
	}
	if (lone)
		w->ahead = 0;
	if (bad)
		return 1;
	*hdr = p + (row->off - from);
	return 0;
}

int tx_member_check(const struct tx_fold *f, uint64_t r, struct tx_member *m, struct tx_window *w,
		    struct sf_err *e)
{
	memset(m, 0, sizeof *m);
	int rc = tx_rows_get(&f->ix, &w->rows, r, &m->row, e);
	if (rc)
		return rc;
	m->kind = TX_OTHER;
	const struct tx_row *row = &m->row;
	if (row->fid >= f->nshards) {
		m->bad = "fid names no shard beside the index";
		return 0;
	}
	const struct sf_map *map = f->shards[row->fid].map;
	if (!map) {
		m->bad = "its shard could not be opened";
		return 0;
	}
	if (!sf_range_ok(map->size, row->off, TX_BLOCK)) {
		m->bad = "tar header lies past the end of the shard";
		return 0;
	}
	struct sf_err te = { 0 };
	if ((rc = first_copy(f, r, row, map, w, &m->hdr, &te, e)) < 0)
		return rc;
	if (rc) {
		m->bad = unreadable(m, &te);
		return 0;
	}
	if (row->extid >= f->ix.n_ext) {
		m->bad = "extension id out of range";
		return 0;
	}
	struct tx_key k;
	tx_key_from(m->hdr, tx_field_len(m->hdr, 100), &k);
	const struct tx_str *ext = &f->ix.ext[row->extid];
	if (k.hash != row->keyhash)
		m->bad = "the tar header's stem does not hash to the row's key";
	else if (k.ext_len != ext->len || memcmp(k.ext, ext->p, ext->len) != 0)
		m->bad = "the tar header's extension differs from the row's";
	else if (tx_crash_id(&f->ix, k.stem, k.stem_len, k.hash) != row->crashid)
		m->bad = "the row's crash id does not match the header's stem";
	/* checked after the key, so that a row pointing at the wrong tar is
	 * reported as such */
	else if (!tx_payload_at(f, row, &(uint64_t){ 0 }))
		m->bad = "its payload runs past the end of the tar";
	/* a member's checksum is checked with its records (read_member) */
	else if (tx_is_record(m->hdr[156]) && !tx_hdr_checksum_ok(m->hdr))
		m->bad = "its tar header fails its checksum";
	if (m->bad || tx_is_record(m->hdr[156]))
		return 0;
	if ((rc = read_member(f, r, map, m, w, e)) || m->bad)
		return rc;
	m->kind = tx_kind_of(m->en.type);
	if (m->kind == TX_FILE && !m->en.nrec && !m->en.sparse)
		atomic_fetch_or_explicit(&f->plain[r / 8], (uint8_t)(1u << (r % 8)), memory_order_relaxed);
	return 0;
}

/* Places a sparse member's pieces, zeros between them. */
struct placer {
	struct sf_node *n;
	const struct sf_map *tar;
	uint64_t at;
};

/* The pieces' bytes go to the kernel from the mapping (zero-copy). */
static int place(void *arg, uint64_t off, uint64_t len, uint64_t src)
{
	struct placer *p = arg;
	if (off > p->at && sf_file_add_zero(p->n, off - p->at))
		return -ENOMEM;
	p->at = off + len;
	return tx_add_bytes(p->n, p->tar, src, len) ? -ENOMEM : 0;
}

static int count(void *arg, uint64_t off, uint64_t len, uint64_t src)
{
	(void)off, (void)len, (void)src;
	++*(uint64_t *)arg;
	return 0;
}

/* Places a sparse member's pieces: a mapped and a zero extent each (96
 * bytes), kept while the node is, so held in the budget before they are
 * made. */
static int place_sparse(struct sf_node *n, const struct sf_map *tar, const struct tx_entry *en,
			const uint8_t *base, uint64_t boff, struct sf_err *e)
{
	struct placer p = { n, tar, 0 };
	const char *why = NULL;
	uint64_t pieces = 0;
	int rc = tx_sparse_each(base, boff, en, count, &pieces, &why);
	if (rc == 0 && (rc = sf_file_reserve(n, 2 * pieces + 1, "its sparse map", e)))
		return rc;
	if (rc == 0)
		rc = tx_sparse_each(base, boff, en, place, &p, &why);
	if (rc == 0 && p.at < en->size)
		rc = sf_file_add_zero(n, en->size - p.at) ? -ENOMEM : 0;
	if (rc)
		rc = sf_fail(e, rc == -ENOMEM ? rc : -EIO, "%s: row %llu: %s", n->view->path,
			     (unsigned long long)n->aux, rc == -ENOMEM ? "out of memory" : why);
	return rc;
}

static int build_member(struct sf_node *n, struct sf_cache *c, struct sf_err *e)
{
	(void)c;
	struct tx_fold *f = n->arg;
	struct tx_member m;
	struct tx_window w = { 0 };
	/* a build may come after a shed (tx_lone.c): the index first */
	int rc = tx_fold_ready(f, e);
	if (rc)
		return rc;
	if (tx_row_plain(f, n->aux)) {
		/* checked when its node was made, a plain file: its bytes follow
		 * its header, as its row says (a change in place since is the
		 * mapping checks' to find) */
		rc = tx_row_get(&f->ix, n->aux, &m.row, e);
		uint64_t at;
		if (!rc && !tx_payload_at(f, &m.row, &at))
			rc = sf_fail(e, -EIO, "%s: row %llu: payload outside its tar", f->view->path,
				     (unsigned long long)n->aux);
		return rc ? rc : tx_add_bytes(n, f->shards[m.row.fid].map, at, m.row.size) ?
		       sf_fail(e, -ENOMEM, "out of memory") : 0;
	}
	rc = tx_member_check(f, n->aux, &m, &w, e);
	if (!rc && (m.bad || m.kind != TX_FILE)) {
		rc = sf_fail(e, -EIO, "%s: row %llu: %s", f->view->path, (unsigned long long)n->aux,
			     m.bad ? m.bad : "no longer a file");
	} else if (!rc && !m.en.sparse) {
		const struct sf_map *tar = f->shards[m.row.fid].map;
		rc = tx_add_bytes(n, tar, m.en.data, m.en.size) ? sf_fail(e, -ENOMEM, "out of memory") : 0;
	} else if (!rc) {
		const struct sf_map *tar = f->shards[m.row.fid].map;
		const uint8_t *base;
		uint64_t boff;
		/* the window was moved by nothing since the check: the entry
		 * is read again from it at no cost */
		rc = tx_entry_read_copy(&w, tar, m.en.first, &m.en, &base, &boff, e);
		if (rc > 0)
			rc = sf_fail(e, -EIO, "%s: row %llu: no longer a file", f->view->path,
				     (unsigned long long)n->aux);
		else if (!rc)
			rc = place_sparse(n, tar, &m.en, base, boff, e);
	}
	tx_window_free(&w);
	return rc;
}

int tx_member_set_content(struct tx_fold *f, struct sf_node *n, uint64_t r, struct sf_err *e)
{
	n->aux = r;
	/* A listing or a lookup checked the member before making its node:
	 * when that found a plain file, its size and bytes are its row's
	 * (build_member reads no header again). */
	if (tx_row_plain(f, r)) {
		struct tx_row row;
		int rc = tx_row_get(&f->ix, r, &row, e);
		if (!rc)
			sf_file_set_build_sized(n, build_member, f, row.size);
		return rc;
	}
	struct tx_member m;
	struct tx_window w = { 0 };
	int rc = tx_member_check(f, r, &m, &w, e);
	tx_window_free(&w);
	if (rc)
		return rc;
	if (m.bad || m.kind != TX_FILE) {
		char why[400];
		snprintf(why, sizeof why, "%s: row %llu: %s", f->view->path, (unsigned long long)r,
			 m.bad ? m.bad : "not a file");
		return sf_file_set_broken(n, 0, why) ? sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path) : 0;
	}
	sf_file_set_build_sized(n, build_member, f, m.en.size);
	return 0;
}

/* Text up to its first NUL. */
static struct tx_str cut_nul(const uint8_t *p, size_t len)
{
	return (struct tx_str){ p, tx_field_len(p, len) };
}

int tx_path_append(uint8_t *out, size_t cap, size_t *len, const uint8_t *raw, size_t n)
{
	size_t i = 0;
	while (i < n) {
		const uint8_t *slash = memchr(raw + i, '/', n - i);
		size_t end = slash ? (size_t)(slash - raw) : n, clen = end - i;
		if (clen && !(clen == 1 && raw[i] == '.')) {
			if (*len + (*len ? 1 : 0) + clen > cap)
				return -ENAMETOOLONG;
			if (*len)
				out[(*len)++] = '/';
			memcpy(out + *len, raw + i, clen);
			*len += clen;
		}
		i = end + 1;
	}
	return 0;
}

int tx_path_of(const struct tx_entry *en, const uint8_t *hdr, uint8_t *path, size_t cap, size_t *plen)
{
	*plen = 0;
	int rc;
	if (en->pax_path.p) {
		rc = tx_path_append(path, cap, plen, en->pax_path.p, en->pax_path.len);
	} else if (en->long_name.p) {
		rc = tx_path_append(path, cap, plen, en->long_name.p, en->long_name.len);
	} else {
		struct tx_str name = cut_nul(hdr, 100);
		rc = 0;
		/* only POSIX ustar headers have a prefix; GNU keeps times there */
		if (en->posix) {
			struct tx_str prefix = cut_nul(hdr + 345, 155);
			rc = tx_path_append(path, cap, plen, prefix.p, prefix.len);
		}
		if (!rc)
			rc = tx_path_append(path, cap, plen, name.p, name.len);
	}
	return rc ? rc : *plen ? 0 : -ENOENT;
}

int tx_member_names(const struct tx_fold *f, uint32_t r, const struct tx_member *m,
		    uint8_t *path, size_t cap, size_t *plen, struct tx_str *link)
{
	(void)f;
	(void)r;
	const struct tx_entry *en = &m->en;
	*link = en->pax_link.p ? en->pax_link : en->long_link.p ? en->long_link : cut_nul(m->hdr + 157, 100);
	return tx_path_of(en, m->hdr, path, cap, plen);
}
