/* One tar entry as GNU tar, bsdtar and Python's tarfile read it: the
 * extension records before a header (pax 'x'/'g', GNU 'L'/'K'), the
 * header's numbers (octal or base-256), old-style directories, and where
 * the data lies, sparse members included (docs/formats/taridx.md, "Tars
 * as their writers write them"). The index builder walks tars with it and
 * the view re-reads a member's headers with it, so both see one archive. */
#include <errno.h>
#include <string.h>

#include "sf_bytes.h"
#include "tx.h"

static uint64_t padded(uint64_t n)
{
	return n > UINT64_MAX - (TX_BLOCK - 1) ? UINT64_MAX : (n + TX_BLOCK - 1) / TX_BLOCK * TX_BLOCK;
}

int tx_num(const uint8_t *p, size_t n, uint64_t *v)
{
	if (n && (p[0] == 0x80 || p[0] == 0xFF)) {
		/* base-256 (GNU, for values octal cannot hold): the first byte
		 * marks it, the rest is big-endian; 0xFF marks a negative value */
		if (p[0] == 0xFF)
			return -EINVAL;
		uint64_t x = 0;
		for (size_t i = 1; i < n; i++) {
			if (x >> 55)
				return -EINVAL;
			x = x << 8 | p[i];
		}
		if (x >> 63)
			return -EINVAL;
		*v = x;
		return 0;
	}
	/* octal up to the first NUL, spaces around it tolerated; an empty
	 * field is 0, as tarfile reads it */
	n = tx_field_len(p, n);
	size_t i = 0;
	while (n && p[n - 1] == ' ')
		n--;
	while (i < n && p[i] == ' ')
		i++;
	uint64_t x = 0;
	for (; i < n; i++) {
		if (p[i] < '0' || p[i] > '7' || x >> 60)
			return -EINVAL;
		x = x << 3 | (uint64_t)(p[i] - '0');
	}
	*v = x;
	return 0;
}

/* A decimal number filling exactly (p, n); false if not one. */
static bool decimal(const uint8_t *p, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9' || x > (UINT64_MAX >> 1) / 10)
			return false;
		x = x * 10 + (uint64_t)(p[i] - '0');
	}
	*v = x;
	return true;
}

static bool key_is(const struct tx_str *k, const char *s)
{
	size_t n = strlen(s);
	return k->len == n && memcmp(k->p, s, n) == 0;
}

/* Calls fn for each "LEN KEY=VALUE\n" record in order; false when the
 * records are malformed. Trailing NULs end them, as in tarfile. */
static bool pax_each(const uint8_t *p, size_t len,
		     bool (*fn)(void *arg, const struct tx_str *k, const struct tx_str *v), void *arg)
{
	size_t pos = 0;
	while (pos < len && p[pos]) {
		size_t i = pos, rec = 0;
		while (i < len && p[i] >= '0' && p[i] <= '9' && rec <= len)
			rec = rec * 10 + (size_t)(p[i++] - '0');
		if (i == pos || i >= len || p[i] != ' ' || rec <= i - pos + 1 || rec > len - pos ||
		    p[pos + rec - 1] != '\n')
			return false;
		const uint8_t *kv = p + i + 1, *end = p + pos + rec - 1;
		const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
		if (!eq || eq == kv)
			return false;
		struct tx_str k = { kv, (size_t)(eq - kv) }, v = { eq + 1, (size_t)(end - eq - 1) };
		if (fn && !fn(arg, &k, &v))
			return false;
		pos += rec;
	}
	return true;
}

struct pax_state {
	struct tx_entry *en;
	const struct tx_str *rec; /* the whole record block */
	bool has_size, has_real, has_map, has_offsets, has_sparse_size, major1, minor0;
	uint64_t size, real;
	struct tx_str sparse_name;
};

/* An empty value unsets a keyword (POSIX pax). */
static bool pax_one(void *arg, const struct tx_str *k, const struct tx_str *v)
{
	struct pax_state *s = arg;
	struct tx_entry *en = s->en;
	if (key_is(k, "path")) {
		en->pax_path = v->len ? *v : (struct tx_str){ 0 };
	} else if (key_is(k, "linkpath")) {
		en->pax_link = v->len ? *v : (struct tx_str){ 0 };
	} else if (key_is(k, "size")) {
		s->has_size = v->len != 0;
		if (v->len && !decimal(v->p, v->len, &s->size))
			return false;
	} else if (key_is(k, "GNU.sparse.name")) {
		s->sparse_name = *v;
	} else if (key_is(k, "GNU.sparse.size") || key_is(k, "GNU.sparse.realsize")) {
		if (!decimal(v->p, v->len, &s->real))
			return false;
		s->has_real = true;
		s->has_sparse_size |= key_is(k, "GNU.sparse.size");
	} else if (key_is(k, "GNU.sparse.map")) {
		s->has_map = true;
		en->map = *v;
	} else if (key_is(k, "GNU.sparse.offset")) {
		en->map = *s->rec; /* 0.0: the map is these records, in order */
		s->has_offsets = true;
	} else if (key_is(k, "GNU.sparse.major")) {
		s->major1 = v->len == 1 && v->p[0] == '1';
	} else if (key_is(k, "GNU.sparse.minor")) {
		s->minor0 = v->len == 1 && v->p[0] == '0';
	}
	return true;
}

bool tx_is_record(uint8_t t)
{
	return t == 'x' || t == 'X' || t == 'g' || t == 'L' || t == 'K';
}

static int fail(struct tx_entry *en, uint64_t at, const char *why)
{
	en->bad = why;
	en->bad_at = at;
	return 0;
}

/* Types whose header is all there is: writers store no data for them;
 * a size some old writers put there anyway is read by data_follows. */
static bool header_only(uint8_t t)
{
	return t >= '1' && t <= '6';
}

/* Whether the data a header without data (a hard link, mostly) says it
 * has follows it, decided from the block after the header: GNU tar,
 * tarfile and bsdtar (but in pax archives) read the next header there, so
 * when that block is a header, a zero block or the tar's end, no data
 * follows; otherwise bsdtar reads the data there (pax archives) and GNU
 * tar skips ahead to the next header, so the data is skipped (a next
 * header that is not where it ends makes that entry fail). 1, 0, or
 * -EAGAIN when the block is beyond `have`. */
static int data_follows(const uint8_t *tar, uint64_t have, uint64_t tarsize, uint64_t at)
{
	if (tarsize - at < TX_BLOCK)
		return 0;
	if (at > have || have - at < TX_BLOCK)
		return -EAGAIN;
	return !tx_block_is_zero(tar + at) && !tx_hdr_checksum_ok(tar + at);
}

int tx_entry_read(const uint8_t *tar, uint64_t tarsize, uint64_t at, struct tx_entry *en)
{
	return tx_entry_read_in(tar, tarsize, tarsize, at, en);
}

int tx_entry_read_in(const uint8_t *tar, uint64_t have, uint64_t tarsize, uint64_t at,
		     struct tx_entry *en)
{
	memset(en, 0, sizeof *en);
	en->first = at;
	struct pax_state ps = { .en = en };
	uint64_t recbytes = 0;
	/* the later of two records of a kind counts, as in GNU tar and Go */
	for (;;) {
		/* a record's padding may be cut at the end of the tar */
		if (at >= tarsize)
			return en->nrec ? fail(en, at, "extension records describe no header (truncated?)") : 1;
		if (tarsize - at < TX_BLOCK)
			return fail(en, at, "stray bytes shorter than a header at the end (truncated?)");
		if (at > have || have - at < TX_BLOCK)
			return -EAGAIN;
		const uint8_t *h = tar + at;
		if (tx_block_is_zero(h))
			return en->nrec ? fail(en, at, "extension records describe no header") : 1;
		if (!tx_hdr_checksum_ok(h))
			return fail(en, at, "a header block whose checksum fails (damaged, or not a tar)");
		uint64_t size;
		if (tx_num(h + 124, 12, &size))
			return fail(en, at, "a header whose size field is not a number");
		uint8_t t = h[156];
		if (!tx_is_record(t))
			break;
		if (en->nrec >= TX_CHAIN_MAX)
			return fail(en, at, "more extension records before one header than " TX_CHAIN_MAX_S);
		if (!sf_range_ok(tarsize, at + TX_BLOCK, size))
			return fail(en, at, "an extension record runs past the end of the tar (truncated?)");
		if (size > TX_RECORDS_MAX - recbytes)
			return fail(en, at, "extension records of more than " TX_RECORDS_MAX_S " before one header");
		if (at + TX_BLOCK + size > have)
			return -EAGAIN;
		recbytes += size;
		struct tx_str rec = { h + TX_BLOCK, (size_t)size };
		if (t == 'L') {
			en->long_name = (struct tx_str){ rec.p, tx_field_len(rec.p, rec.len) };
		} else if (t == 'K') {
			en->long_link = (struct tx_str){ rec.p, tx_field_len(rec.p, rec.len) };
		} else {
			/* global records are read for their form only: like bsdtar
			 * and Go, no reader renames or resizes members by them */
			ps.rec = &rec;
			if (!pax_each(rec.p, rec.len, t == 'g' ? NULL : pax_one, &ps))
				return fail(en, at, "a malformed pax extended header");
		}
		en->nrec++;
		at += TX_BLOCK + padded(size);
	}
	const uint8_t *h = tar + at;
	en->hdr = at;
	en->type = h[156];
	en->posix = memcmp(h + 257, "ustar\0", 6) == 0;
	uint64_t stored;
	tx_num(h + 124, 12, &stored);
	if (ps.has_size)
		stored = ps.size;
	if (ps.sparse_name.len)
		en->pax_path = ps.sparse_name;
	en->size = stored;
	uint64_t data = at + TX_BLOCK, ext = 0;
	if (en->type == 'S') {
		/* old GNU sparse: the map starts in the header and goes on in
		 * extension blocks while their last flag byte says so */
		en->sparse = TX_SPARSE_OLDGNU;
		if (tx_num(h + 483, 12, &en->size))
			return fail(en, at, "a sparse header whose real size is not a number");
		for (const uint8_t *flag = h + 482; *flag; flag = tar + data - TX_BLOCK + 504) {
			if (ext >= TX_SPARSE_MAX / 21 + 1)
				return fail(en, at, "a sparse map of more than " TX_SPARSE_MAX_S " pieces");
			if (!sf_range_ok(tarsize, data, TX_BLOCK))
				return fail(en, at, "sparse map blocks run past the end of the tar (truncated?)");
			if (data > have || have - data < TX_BLOCK)
				return -EAGAIN;
			data += TX_BLOCK;
			ext++;
		}
	} else if (ps.has_map || ps.has_sparse_size || ps.has_offsets) {
		en->sparse = ps.has_map ? TX_SPARSE_01 : TX_SPARSE_00;
	} else if (ps.major1 && ps.minor0) {
		en->sparse = TX_SPARSE_10;
	}
	if (en->sparse && en->sparse != TX_SPARSE_OLDGNU) {
		if (!ps.has_real)
			return fail(en, at, "a pax sparse member without its real size");
		en->size = ps.real;
	}
	if (header_only(en->type) && stored) {
		int d = data_follows(tar, have, tarsize, data);
		if (d < 0)
			return d;
		if (!d)
			stored = en->size = 0;
	}
	en->data = data;
	en->stored = stored;
	if (!sf_range_ok(tarsize, data, stored))
		return fail(en, at, "a member whose data runs past the end of the tar (truncated?)");
	en->row_size = ext * TX_BLOCK + stored;
	en->next = data + padded(stored);
	if (en->next > tarsize)
		en->next = tarsize; /* the last member's padding may be cut */
	/* a name ending in '/' on a file type is an old-style directory */
	struct tx_str p = en->pax_path.p ? en->pax_path : en->long_name;
	if (!p.p)
		p = (struct tx_str){ h, tx_field_len(h, 100) };
	if ((en->type == '0' || en->type == '\0' || en->type == '7') && p.len && p.p[p.len - 1] == '/')
		en->type = '5';
	if (en->type == '5' && en->sparse)
		return fail(en, at, "a sparse directory");
	return 0;
}

/* ---- sparse maps ---------------------------------------------------------- */

struct sparse_walk {
	const struct tx_entry *en;
	uint64_t src;         /* tar offset of the stored data */
	uint64_t avail;       /* its length */
	uint64_t used, end, n;
	tx_piece_fn *fn;
	void *arg;
	const char *why;
	int rc;
	bool have_off;        /* 0.0: an offset record waits for its numbytes */
	uint64_t off;
};

/* One piece of data at `off` of the member: in order, inside the real
 * size, and inside what is stored. */
static bool piece(struct sparse_walk *w, uint64_t off, uint64_t len)
{
	if (++w->n > TX_SPARSE_MAX)
		w->why = "a sparse map of more than " TX_SPARSE_MAX_S " pieces";
	else if (off < w->end || off > w->en->size || len > w->en->size - off)
		w->why = "a sparse map whose pieces overlap, go backwards or pass the real size";
	else if (len > w->avail - w->used)
		w->why = "a sparse map that holds more data than the member stores";
	if (w->why)
		return false;
	if (len && w->fn && (w->rc = w->fn(w->arg, off, len, w->src + w->used)))
		return false;
	w->used += len;
	w->end = off + len;
	return true;
}

/* The pairs of an old GNU map block: `n` slots of two 12-byte numbers;
 * an empty offset field is an unused slot. */
static bool gnu_slots(struct sparse_walk *w, const uint8_t *p, int n)
{
	for (int i = 0; i < n; i++, p += 24) {
		uint64_t off, len;
		if (!p[0])
			continue;
		if (tx_num(p, 12, &off) || tx_num(p + 12, 12, &len)) {
			w->why = "a sparse map entry that is not a number";
			return false;
		}
		if (!piece(w, off, len))
			return false;
	}
	return true;
}

static bool pair_00(void *arg, const struct tx_str *k, const struct tx_str *v)
{
	struct sparse_walk *w = arg;
	bool is_off = key_is(k, "GNU.sparse.offset");
	if (!is_off && !key_is(k, "GNU.sparse.numbytes"))
		return true;
	uint64_t x;
	if (!decimal(v->p, v->len, &x) || is_off == w->have_off) {
		w->why = w->why ? w->why : "a sparse map whose offsets and sizes do not alternate";
		return false;
	}
	w->have_off = is_off;
	if (is_off) {
		w->off = x;
		return true;
	}
	return piece(w, w->off, x);
}

/* Decimal numbers separated by `sep` in (p, n) from *pos on; false at
 * the end or on anything else. */
static bool next_number(const uint8_t *p, size_t n, size_t *pos, uint8_t sep, uint64_t *v)
{
	size_t i = *pos;
	if (i >= n)
		return false;
	const uint8_t *e = memchr(p + i, sep, n - i);
	size_t end = e ? (size_t)(e - p) : n;
	if (!decimal(p + i, end - i, v))
		return false;
	*pos = end + 1;
	return true;
}

/* Reads the lines of a 1.0 map from p[0 .. n), setting *end past them;
 * with `place`, walks its pieces too. */
static bool map_lines(const uint8_t *p, size_t n, size_t *end, struct sparse_walk *w, bool place)
{
	size_t pos = 0;
	uint64_t count, off, len;
	if (!next_number(p, n, &pos, '\n', &count))
		return false;
	for (uint64_t i = 0; i < count; i++) {
		if (i == TX_SPARSE_MAX) {
			w->why = "a sparse map of more than " TX_SPARSE_MAX_S " pieces";
			return false;
		}
		if (!next_number(p, n, &pos, '\n', &off) || !next_number(p, n, &pos, '\n', &len))
			return false;
		if (place && !piece(w, off, len))
			return false;
	}
	*end = pos;
	return pos <= n;
}

int tx_sparse_each(const uint8_t *base, uint64_t base_off, const struct tx_entry *en,
		   tx_piece_fn *fn, void *arg, const char **why)
{
	struct sparse_walk w = { .en = en, .src = en->data, .avail = en->stored, .fn = fn, .arg = arg };
	*why = NULL;
	bool ok = true;
	if (en->sparse == TX_SPARSE_OLDGNU) {
		const uint8_t *h = base + (en->hdr - base_off);
		ok = gnu_slots(&w, h + 386, 4);
		for (const uint8_t *b = h + TX_BLOCK; ok && b < base + (en->data - base_off); b += TX_BLOCK)
			ok = gnu_slots(&w, b, 21);
	} else if (en->sparse == TX_SPARSE_00) {
		ok = pax_each(en->map.p, en->map.len, pair_00, &w) && !w.have_off;
	} else if (en->sparse == TX_SPARSE_01) {
		size_t pos = 0;
		uint64_t off, len;
		while (ok && pos < en->map.len) {
			ok = next_number(en->map.p, en->map.len, &pos, ',', &off) &&
			     next_number(en->map.p, en->map.len, &pos, ',', &len) && piece(&w, off, len);
		}
	} else if (en->sparse == TX_SPARSE_10) {
		/* the map is text at the start of the data: a count, then an
		 * offset and a size per piece, one a line, padded to a block.
		 * Read once to find where the data starts, then placed. */
		const uint8_t *p = base + (en->data - base_off);
		size_t n = en->stored < TX_MAP_TEXT_MAX ? (size_t)en->stored : TX_MAP_TEXT_MAX, end = 0;
		ok = map_lines(p, n, &end, &w, false);
		if (ok && padded(end) <= en->stored) {
			w.src = en->data + padded(end);
			w.avail = en->stored - padded(end);
			ok = map_lines(p, n, &end, &w, true);
		} else if (ok) {
			ok = false;
		}
	}
	if (w.rc)
		return w.rc;
	if (ok && w.used != w.avail)
		w.why = "a sparse map that does not account for every stored byte";
	if (!ok || w.why) {
		*why = w.why ? w.why : "a malformed sparse map";
		return -EINVAL;
	}
	return 0;
}
