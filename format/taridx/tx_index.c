/* The .taridx file: header, extension and crash-stem blocks, rows
 * (spec §3), and the (keyhash, crashid) lookup over the rows. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sf_big.h"
#include "sf_bytes.h"
#include "tx.h"

/* Splits a block on '\n' only (spec §3.2): `want` strings, where an empty
 * block is zero strings when want is 0 and one empty string when 1. */
static int split_block(const uint8_t *p, size_t len, uint64_t want, const char *what,
		       const char *block, struct tx_str **out, struct sf_err *e)
{
	uint64_t have = len || want ? 1 : 0;
	for (size_t i = 0; i < len; i++)
		have += p[i] == '\n';
	if (have != want)
		return sf_fail(e, -EINVAL, "%s: %s block holds %llu strings, header says %llu",
			       what, block, (unsigned long long)have, (unsigned long long)want);
	if (!tx_utf8_valid(p, len))
		return sf_fail(e, -EINVAL, "%s: %s block is not UTF-8", what, block);
	struct tx_str *s = calloc(want ? want : 1, sizeof *s);
	if (!s)
		return sf_fail(e, -ENOMEM, "%s: out of memory", what);
	size_t k = 0, from = 0;
	for (size_t i = 0; want && i <= len; i++) {
		if (i == len || p[i] == '\n') {
			s[k].p = p + from;
			s[k].len = i - from;
			k++;
			from = i + 1;
		}
	}
	*out = s;
	return 0;
}

static int cmp_crash(const void *a, const void *b)
{
	const struct tx_crash_ent *x = a, *y = b;
	return x->hash < y->hash ? -1 : x->hash > y->hash ? 1 : (x->id > y->id) - (x->id < y->id);
}

/* The header and the sizes it implies (p holds at least the header when
 * n allows one). */
static int parse_header(const uint8_t *p, uint64_t n, const char *what, struct tx_index *ix,
			struct sf_err *e)
{
	memset(ix, 0, sizeof *ix);
	if (n < TX_HDR_SIZE)
		return sf_fail(e, -EINVAL, "%s: %llu bytes, shorter than the 64-byte header", what,
			       (unsigned long long)n);
	if (memcmp(p, "TARIDX\0\0", 8) != 0)
		return sf_fail(e, -EINVAL, "%s: bad magic (not a .taridx index)", what);
	struct sf_cursor c = sf_cursor(p + 8, TX_HDR_SIZE - 8);
	ix->major = sf_cur_u16(&c);
	ix->minor = sf_cur_u16(&c);
	ix->rec_size = sf_cur_u16(&c);
	ix->hdr_size = sf_cur_u16(&c);
	ix->n_stems = sf_cur_u64(&c);
	ix->n_rows = sf_cur_u64(&c);
	ix->n_ext = sf_cur_u32(&c);
	ix->n_crash = sf_cur_u32(&c);
	ix->off_crash = sf_cur_u64(&c);
	ix->off_arr = sf_cur_u64(&c);
	ix->flags = sf_cur_u8(&c);
	if (ix->major != 1)
		return sf_fail(e, -EINVAL, "%s: version %u.%u, only 1.x is known", what,
			       ix->major, ix->minor);
	if (ix->rec_size != TX_ROW_SIZE || ix->hdr_size != TX_HDR_SIZE)
		return sf_fail(e, -EINVAL, "%s: rec_size %u / hdr_size %u, expected 32 / 64", what,
			       ix->rec_size, ix->hdr_size);
	if (ix->off_crash < TX_HDR_SIZE || ix->off_arr < ix->off_crash || ix->off_arr > n)
		return sf_fail(e, -EINVAL, "%s: block offsets %llu, %llu out of order or past the end (%llu bytes)",
			       what, (unsigned long long)ix->off_crash, (unsigned long long)ix->off_arr,
			       (unsigned long long)n);
	uint64_t rows_len = n - ix->off_arr, want;
	if (rows_len % TX_ROW_SIZE || !sf_mul_ok(ix->n_rows, TX_ROW_SIZE, &want) || want != rows_len)
		return sf_fail(e, -EINVAL, "%s: %llu bytes of rows, header says %llu rows (torn index?)",
			       what, (unsigned long long)rows_len, (unsigned long long)ix->n_rows);
	/* rows are numbered with 32 bits in the lookup */
	if (ix->n_rows >= UINT32_MAX)
		return sf_fail(e, -EFBIG, "%s: %llu rows, more than this reader handles", what,
			       (unsigned long long)ix->n_rows);
	return 0;
}

int tx_check(const struct sf_probe *p, struct sf_err *e)
{
	struct tx_index ix;
	return parse_header(p->head, p->size, p->path, &ix, e);
}

/* The extension and crash-stem blocks, from `head` (the file's first
 * off_arr bytes), after parse_header. */
static int parse_blocks(const uint8_t *head, const char *what, struct tx_index *ix,
			struct sf_err *e)
{
	int rc = split_block(head + TX_HDR_SIZE, ix->off_crash - TX_HDR_SIZE, ix->n_ext, what,
			     "extension", &ix->ext, e);
	if (!rc)
		rc = split_block(head + ix->off_crash, ix->off_arr - ix->off_crash, ix->n_crash, what,
				 "crash-stem", &ix->crash, e);
	if (!rc && ix->n_crash) {
		ix->crash_by_hash = malloc(ix->n_crash * sizeof *ix->crash_by_hash);
		if (!ix->crash_by_hash)
			rc = sf_fail(e, -ENOMEM, "%s: out of memory", what);
		for (uint32_t i = 0; !rc && i < ix->n_crash; i++) {
			ix->crash_by_hash[i].hash = XXH64(ix->crash[i].p, ix->crash[i].len, 0);
			ix->crash_by_hash[i].id = i + 1;
		}
		if (!rc)
			qsort(ix->crash_by_hash, ix->n_crash, sizeof *ix->crash_by_hash, cmp_crash);
	}
	if (rc)
		tx_index_free(ix);
	return rc;
}

int tx_index_parse(const uint8_t *p, size_t n, const char *what, struct tx_index *ix,
		   struct sf_err *e)
{
	int rc = parse_header(p, n, what, ix, e);
	if (rc)
		return rc;
	ix->data = p;
	ix->size = n;
	return parse_blocks(p, what, ix, e);
}

int tx_index_open(const struct sf_map *m, const char *what, struct tx_index *ix,
		  struct sf_err *e)
{
	uint8_t hdr[TX_HDR_SIZE] = { 0 };
	/* parse_header refuses a shorter file before reading hdr */
	int rc = m->size < TX_HDR_SIZE ? 0 : sf_map_read(m, 0, TX_HDR_SIZE, hdr, "its header", e);
	if (!rc)
		rc = parse_header(hdr, m->size, what, ix, e);
	if (!rc)
		rc = sf_map_copy(m, 0, ix->off_arr, &ix->head, "its extension and crash-stem blocks", e);
	if (rc)
		return rc;
	static _Atomic uint64_t ids;
	ix->map = m;
	ix->id = atomic_fetch_add(&ids, 1) + 1;
	ix->size = m->size;
	return parse_blocks(ix->head, what, ix, e);
}

void tx_index_free(struct tx_index *ix)
{
	free(ix->ext);
	free(ix->crash);
	free(ix->crash_by_hash);
	sf_big_free(ix->perm);
	sf_big_free(ix->tag);
	sf_big_free(ix->start);
	free(ix->head);
	ix->head = NULL;
	ix->ext = ix->crash = NULL;
	ix->crash_by_hash = NULL;
	ix->perm = ix->start = NULL;
	ix->tag = NULL;
	sf_big_free(atomic_load(&ix->kept));
	atomic_store(&ix->kept, NULL);
}

static void row_decode(const uint8_t *p, struct tx_row *out)
{
	out->fid = sf_le16(p);
	out->off = sf_le64(p + 2);
	out->size = sf_le64(p + 10);
	out->extid = sf_le16(p + 18);
	out->crashid = sf_le32(p + 20);
	out->keyhash = sf_le64(p + 24);
}

/* Copies rows [first, first + n) of an index file into dst, for row r. */
static int rows_read(const struct tx_index *ix, uint64_t r, uint64_t first, uint64_t n,
		     uint8_t *dst, struct sf_err *e)
{
	char what[80];
	snprintf(what, sizeof what, "row %llu (read with rows %llu to %llu)", (unsigned long long)r,
		 (unsigned long long)first, (unsigned long long)(first + n - 1));
	return sf_map_read(ix->map, ix->off_arr + first * TX_ROW_SIZE, n * TX_ROW_SIZE, dst, what, e);
}

/* The rows around the last row this thread read here and there, of the
 * index file `id` (0: none). */
static _Thread_local struct {
	uint64_t id, first, n;
	uint8_t buf[TX_ROWS_NEAR * TX_ROW_SIZE];
} near;

int tx_row_get(const struct tx_index *ix, uint64_t r, struct tx_row *out, struct sf_err *e)
{
	const uint8_t *kept = atomic_load_explicit(&ix->kept, memory_order_acquire);
	if (kept || !ix->map) {
		row_decode(kept ? kept + r * TX_ROW_SIZE : ix->data + ix->off_arr + r * TX_ROW_SIZE, out);
		return 0;
	}
	if (near.id != ix->id || r < near.first || r - near.first >= near.n) {
		if (r >= ix->n_rows)
			return sf_fail(e, -EINVAL, "%s: row %llu of %llu rows", ix->map->path,
				       (unsigned long long)r, (unsigned long long)ix->n_rows);
		uint64_t first = r > TX_ROWS_NEAR / 2 ? r - TX_ROWS_NEAR / 2 : 0;
		uint64_t n = ix->n_rows - first < TX_ROWS_NEAR ? ix->n_rows - first : TX_ROWS_NEAR;
		near.id = 0;
		int rc = rows_read(ix, r, first, n, near.buf, e);
		if (rc)
			return rc;
		near.id = ix->id;
		near.first = first;
		near.n = n;
	}
	row_decode(near.buf + (r - near.first) * TX_ROW_SIZE, out);
	return 0;
}

int tx_rows_get(const struct tx_index *ix, struct tx_rows *w, uint64_t r, struct tx_row *out,
		struct sf_err *e)
{
	if (!ix->map || atomic_load_explicit(&ix->kept, memory_order_acquire))
		return tx_row_get(ix, r, out, e);
	bool pass = w->high && r == w->high;
	if (r >= w->high)
		w->high = r + 1;
	if (w->n && r >= w->first && r - w->first < w->n) {
		row_decode(w->buf + (r - w->first) * TX_ROW_SIZE, out);
		return 0;
	}
	if (!pass || r >= ix->n_rows)
		return tx_row_get(ix, r, out, e);
	uint64_t first = r > TX_CHAIN_MAX ? r - TX_CHAIN_MAX : 0, want = TX_ROWS_PASS;
	if (want > ix->n_rows - first)
		want = ix->n_rows - first;
	if (want > w->cap) {
		uint8_t *b = realloc(w->buf, (size_t)want * TX_ROW_SIZE);
		if (!b)
			return sf_fail(e, -ENOMEM, "%s: out of memory reading rows", ix->map->path);
		w->buf = b;
		w->cap = (size_t)want;
	}
	w->n = 0;
	int rc = rows_read(ix, r, first, want, w->buf, e);
	if (rc)
		return rc;
	w->first = first;
	w->n = want;
	row_decode(w->buf + (r - first) * TX_ROW_SIZE, out);
	return 0;
}

void tx_rows_free(struct tx_rows *w)
{
	free(w->buf);
	*w = (struct tx_rows){ 0 };
}

uint32_t tx_crash_id(const struct tx_index *ix, const uint8_t *stem, size_t len, uint64_t hash)
{
	size_t lo = 0, hi = ix->n_crash;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ix->crash_by_hash[mid].hash < hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < ix->n_crash && ix->crash_by_hash[lo].hash == hash; lo++) {
		const struct tx_str *s = &ix->crash[ix->crash_by_hash[lo].id - 1];
		if (s->len == len && memcmp(s->p, stem, len) == 0)
			return ix->crash_by_hash[lo].id;
	}
	return 0;
}

long tx_ext_id(const struct tx_index *ix, const uint8_t *ext, size_t len)
{
	for (uint32_t i = 0; i < ix->n_ext && i < 65536; i++)
		if (ix->ext[i].len == len && memcmp(ix->ext[i].p, ext, len) == 0)
			return (long)i;
	return -1;
}

static size_t bucket_of(const struct tx_index *ix, uint64_t keyhash)
{
	return ix->bits ? (size_t)(keyhash >> (64 - ix->bits)) : 0;
}

static uint8_t tag_of(const struct tx_index *ix, uint64_t keyhash)
{
	return (uint8_t)(keyhash >> (56 - ix->bits));
}

/* Each row's key hash and crash id, gathered in one pass for the sort. */
struct row_keys {
	uint64_t *hash;
	uint32_t *crash;
};

/* Order within a bucket: by key hash, crash id, then row, so that the rows
 * of one (keyhash, crashid) pair sit together in row order. */
static int cmp_rows(const void *a, const void *b, void *arg)
{
	const struct row_keys *k = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	if (k->hash[x] != k->hash[y])
		return k->hash[x] < k->hash[y] ? -1 : 1;
	if (k->crash[x] != k->crash[y])
		return k->crash[x] < k->crash[y] ? -1 : 1;
	return (x > y) - (x < y);
}

static void sort_bucket(struct row_keys *k, uint32_t *p, size_t n)
{
	if (n > 16) {
		qsort_r(p, n, sizeof *p, cmp_rows, k);
		return;
	}
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && cmp_rows(&p[j - 1], &p[j], k) > 0; j--) {
			uint32_t t = p[j];
			p[j] = p[j - 1];
			p[j - 1] = t;
		}
}

static bool same_keys(const struct row_keys *k, uint32_t x, uint32_t y)
{
	return k->hash[x] == k->hash[y] && k->crash[x] == k->crash[y];
}

/* Gathers every row's key hash and crash id, counting runs of one pair. */
static int gather_keys(struct tx_index *ix, struct row_keys *k, struct sf_err *e)
{
	struct tx_rows w = { 0 };
	int rc = 0;
	uint64_t runs = 0;
	for (uint64_t r = 0; !rc && r < ix->n_rows; r++) {
		struct tx_row row;
		if ((rc = tx_rows_get(ix, &w, r, &row, e)))
			break;
		k->hash[r] = row.keyhash;
		k->crash[r] = row.crashid;
		runs += r == 0 || !same_keys(k, (uint32_t)r - 1, (uint32_t)r);
	}
	tx_rows_free(&w);
	ix->runs = runs;
	return rc;
}

/* Copies the rows of an index file whole, for rows read with no system
 * call from then on (published before the lookup that reads them). */
static int keep_rows(struct tx_index *ix, struct sf_err *e)
{
	if (!ix->map || atomic_load(&ix->kept))
		return 0;
	uint8_t *rows = sf_big_alloc(ix->n_rows, TX_ROW_SIZE);
	if (!rows)
		return sf_fail(e, -ENOMEM, "%s: out of memory for its rows", ix->map->path);
	int rc = sf_map_read(ix->map, ix->off_arr, ix->n_rows * TX_ROW_SIZE, rows, "its rows", e);
	if (rc)
		sf_big_free(rows);
	else
		atomic_store_explicit(&ix->kept, rows, memory_order_release);
	return rc;
}

int tx_lookup_build(struct tx_index *ix, bool keep, struct sf_err *e)
{
	if (ix->start)
		return 0;
	int kr = keep ? keep_rows(ix, e) : 0;
	if (kr)
		return kr;
	/* the largest power of two not above the row count: one or two rows
	 * per bucket on average, and at most 4 bytes per row for the starts */
	unsigned bits = 0;
	while (bits < 31 && (2ull << bits) <= ix->n_rows)
		bits++;
	size_t nb = (size_t)1 << bits, nr = ix->n_rows ? (size_t)ix->n_rows : 1;
	/* in huge pages (sf_big.h): a million rows' arrays are 17 MB of
	 * fresh memory */
	uint32_t *start = sf_big_alloc(nb + 1, sizeof *start);
	uint32_t *perm = sf_big_alloc(nr, sizeof *perm);
	uint8_t *tag = sf_big_alloc(nr, 1);
	struct row_keys k = { sf_big_alloc(nr, sizeof *k.hash), sf_big_alloc(nr, sizeof *k.crash) };
	int rc = start && perm && tag && k.hash && k.crash ? 0 : sf_fail(e, -ENOMEM, "out of memory for the row lookup");
	if (!rc)
		rc = gather_keys(ix, &k, e);
	if (rc) {
		sf_big_free(start);
		sf_big_free(perm);
		sf_big_free(tag);
		sf_big_free(k.hash);
		sf_big_free(k.crash);
		return rc;
	}
	ix->bits = bits;
	for (uint64_t r = 0; r < ix->n_rows; r++)
		start[bucket_of(ix, k.hash[r]) + 1]++;
	for (size_t b = 0; b < nb; b++)
		start[b + 1] += start[b];
	/* place rows; start[b] walks forward and is restored after */
	for (uint64_t r = 0; r < ix->n_rows; r++)
		perm[start[bucket_of(ix, k.hash[r])]++] = (uint32_t)r;
	for (size_t b = nb; b > 0; b--)
		start[b] = start[b - 1];
	start[0] = 0;
	for (size_t b = 0; b < nb; b++)
		sort_bucket(&k, perm + start[b], start[b + 1] - start[b]);
	/* the lookup keeps each pair's rows together */
	ix->groups = 0;
	for (uint64_t i = 0; i < ix->n_rows; i++) {
		ix->groups += i == 0 || !same_keys(&k, perm[i - 1], perm[i]);
		tag[i] = tag_of(ix, k.hash[perm[i]]);
	}
	sf_big_free(k.hash);
	sf_big_free(k.crash);
	ix->perm = perm;
	ix->tag = tag;
	ix->start = start;
	return 0;
}

int tx_lookup_each(const struct tx_index *ix, struct tx_rows *w, uint64_t keyhash,
		   uint32_t crashid, uint16_t extid, bool (*fn)(void *arg, uint32_t row), void *arg,
		   struct sf_err *e)
{
	size_t b = bucket_of(ix, keyhash);
	uint8_t tag = tag_of(ix, keyhash);
	for (uint32_t i = ix->start[b]; i < ix->start[b + 1]; i++) {
		struct tx_row row;
		if (ix->tag[i] != tag)
			continue;
		int rc = tx_rows_get(ix, w, ix->perm[i], &row, e);
		if (rc)
			return rc;
		if (row.keyhash == keyhash && row.crashid == crashid && row.extid == extid &&
		    fn(arg, ix->perm[i]))
			return 0;
	}
	return 0;
}
