/* Unit tests of the tet view: the upstream fixtures against their fact
 * table, files built here with known element bytes (every dtype size, rank
 * 1..8, raw/zstd mixes, reversed payloads, zero-length axes), and every
 * malformation of spec §11. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

#include "check.h"
#include "sf_bytes.h"
#include "sf_format.h"
#include "sf_read.h"
#include "sf_view_impl.h"

/* ---- reading views ---------------------------------------------------- */

static struct sf_node *find(struct sf_view *v, const char *path)
{
	struct sf_node *n = NULL;
	struct sf_err e;
	return sf_view_walk(v->root, path, &n, &e) == 0 ? n : NULL;
}

/* Reads [off, off+len) of a view file into a new buffer; NULL on error
 * (*rc says which). */
static uint8_t *read_range(struct sf_node *f, uint64_t off, uint64_t len, int *rc)
{
	struct sf_err e;
	struct sf_readv rv = { 0 };
	*rc = sf_file_ready(f, &sf_nocache, &e);
	if (*rc == 0)
		*rc = sf_file_read(f, off, len, &sf_nocache, &rv, &e);
	uint8_t *out = NULL;
	if (*rc == 0 && (out = malloc(rv.bytes + 1)))
		sf_readv_copy(&rv, out, NULL);
	sf_readv_release(&rv);
	return out;
}

static uint64_t size_of(struct sf_node *f)
{
	struct sf_err e;
	return f && sf_file_ready(f, &sf_nocache, &e) == 0 ? f->u.file.size : UINT64_MAX;
}

static uint8_t *read_all(struct sf_view *v, const char *path, uint64_t *len)
{
	struct sf_node *f = find(v, path);
	int rc;
	*len = size_of(f);
	return f ? read_range(f, 0, *len, &rc) : NULL;
}

static char tmpdir[64];

/* Writes bytes to <tmpdir>/<name> and opens its view. */
static int open_bytes(const char *name, const uint8_t *p, size_t n, struct sf_view **v,
		      struct sf_err *e)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		if (f)
			fclose(f);
		return -EIO;
	}
	fclose(f);
	return sf_open_path(path, NULL, v, e);
}

/* ---- the upstream fixtures -------------------------------------------- */

static size_t itemsize(const char *descr)
{
	return (size_t)atoi(descr + 2);
}

static void test_fixture(json_t *fx)
{
	const char *file = json_string_value(json_object_get(fx, "file"));
	char path[1024];
	snprintf(path, sizeof path, "%s/tet/%s", fixtures_dir(), file);
	struct sf_view *v = NULL;
	struct sf_err e;
	int rc = sf_open_path(path, NULL, &v, &e);
	CHECK(rc == 0);
	if (rc) {
		fprintf(stderr, "%s: %s\n", file, e.msg);
		return;
	}
	/* the source bytes, read independently of the view */
	FILE *src = fopen(path, "rb");
	uint64_t flen = json_integer_value(json_object_get(fx, "file_len"));
	uint8_t *bytes = malloc(flen);
	CHECK(src && fread(bytes, 1, flen, src) == flen);
	if (src)
		fclose(src);

	/* info.json reports what the fact table says */
	uint64_t n;
	uint8_t *info = read_all(v, ".shardfs/info.json", &n);
	json_t *ij = info ? json_loadb((char *)info, n, 0, NULL) : NULL;
	CHECK(ij != NULL);
	json_t *sum = json_object_get(ij, "summary");
	CHECK(json_equal(json_object_get(json_object_get(fx, "superblock"), "chunk_index_offset"),
			 json_object_get(json_object_get(sum, "superblock"), "chunk_index_offset")));
	json_t *footer = json_object_get(fx, "footer");
	if (json_is_true(json_object_get(footer, "present"))) {
		CHECK(json_equal(json_object_get(footer, "payload_limit"),
				 json_object_get(json_object_get(ij, "footer"), "payload_limit")));
		/* plan.tet: damaged footer JSON reported, datasets still shown */
		CHECK(json_is_string(json_object_get(json_object_get(ij, "footer"), "error")));
		CHECK(v->nwarnings >= 1);
		uint8_t *za = read_all(v, ".zattrs", &n);
		CHECK(za && memmem(za, n, "footer_error", 12));
		free(za);
	}
	json_t *chunks = json_object_get(fx, "chunks"), *got = json_object_get(sum, "chunks");
	CHECK_EQ_U(json_array_size(chunks), json_array_size(got));
	size_t i;
	json_t *ch;
	json_array_foreach(chunks, i, ch) {
		json_t *g = json_array_get(got, i);
		static const char *const keys[] = { "payload_offset", "raw_byte_len",
						    "stored_byte_len", "codec", "dataset_id" };
		for (int k = 0; k < 5; k++)
			CHECK(json_equal(json_object_get(ch, keys[k]), json_object_get(g, keys[k])));
	}
	json_t *ds;
	json_array_foreach(json_object_get(fx, "datasets"), i, ds) {
		const char *name = json_string_value(json_object_get(ds, "name"));
		const char *descr = json_string_value(json_object_get(ds, "numpy"));
		json_t *shape = json_object_get(ds, "shape"), *cs = json_object_get(ds, "chunk_shape");
		size_t es = itemsize(descr), nd = json_array_size(shape);
		uint64_t zbytes = es, nbytes = json_integer_value(json_object_get(ds, "logical_nbytes"));
		for (size_t d = 0; d < nd; d++) {
			uint64_t s = json_integer_value(json_array_get(shape, d));
			uint64_t c = json_integer_value(json_array_get(cs, d));
			zbytes *= c < s ? c : s;
		}
		/* the whole array: header, then the C-order bytes assembled here from
		 * the fact table's chunk offsets */
		char p[600];
		snprintf(p, sizeof p, "%s.npy", name);
		uint8_t *npy = read_all(v, p, &n);
		CHECK(npy && n > nbytes && memcmp(npy, "\x93NUMPY", 6) == 0);
		if (!npy)
			continue;
		CHECK_EQ_U(10 + npy[8] + 256u * npy[9], n - nbytes);
		uint8_t *want = calloc(1, nbytes + 1);
		size_t k;
		json_array_foreach(chunks, k, ch) {
			json_t *co = json_object_get(ch, "coords");
			uint64_t off = json_integer_value(json_object_get(ch, "payload_offset"));
			uint64_t c0 = json_integer_value(json_array_get(co, 0));
			uint64_t c1 = json_integer_value(json_array_get(co, 1));
			uint64_t s1 = json_integer_value(json_array_get(shape, 1));
			uint64_t k0 = json_integer_value(json_array_get(cs, 0));
			uint64_t k1 = json_integer_value(json_array_get(cs, 1));
			uint64_t s0 = json_integer_value(json_array_get(shape, 0));
			uint64_t e0 = s0 - c0 * k0 < k0 ? s0 - c0 * k0 : k0;
			uint64_t e1 = s1 - c1 * k1 < k1 ? s1 - c1 * k1 : k1;
			for (uint64_t r = 0; r < e0; r++)
				memcpy(want + ((c0 * k0 + r) * s1 + c1 * k1) * es,
				       bytes + off + r * e1 * es, e1 * es);
			/* the tile as stored, the chunk padded to the zarr chunk shape */
			char tp[700], cp[700];
			snprintf(tp, sizeof tp, ".shardfs/tiles/%s/%llu.%llu", name,
				 (unsigned long long)c0, (unsigned long long)c1);
			snprintf(cp, sizeof cp, "%s/%llu.%llu", name, (unsigned long long)c0,
				 (unsigned long long)c1);
			uint64_t tl, cl;
			uint8_t *tile = read_all(v, tp, &tl), *chunk = read_all(v, cp, &cl);
			CHECK(tile && tl == e0 * e1 * es && memcmp(tile, bytes + off, tl) == 0);
			CHECK(chunk && cl == zbytes);
			for (uint64_t r = 0; chunk && tile && r < e0; r++)
				CHECK(memcmp(chunk + r * (zbytes / es / (k0 < s0 ? k0 : s0)) * es,
					     tile + r * e1 * es, e1 * es) == 0);
			free(tile);
			free(chunk);
		}
		CHECK(memcmp(npy + (n - nbytes), want, nbytes) == 0);
		free(want);
		free(npy);
	}
	uint8_t *ver = read_all(v, ".shardfs/verify", &n);
	bool upstream_ok = strcmp(json_string_value(json_object_get(fx, "upstream_verify")), "ok") == 0;
	CHECK(ver && (memcmp(ver, "status: ok\n", 11) == 0) == upstream_ok);
	free(ver);
	json_decref(ij);
	free(info);
	free(bytes);
	sf_view_unref(v);
}

static void test_fixtures(void)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/tet/EXPECTED.json", fixtures_dir());
	json_t *j = json_load_file(path, 0, NULL);
	CHECK(j != NULL);
	size_t i;
	json_t *fx;
	json_array_foreach(json_object_get(j, "files"), i, fx)
		test_fixture(fx);
	CHECK_EQ_U(json_array_size(json_object_get(j, "files")), 6);
	json_decref(j);
}

/* ---- files built here -------------------------------------------------- */

/* Byte b of element g of a built dataset: known without any reader. */
static uint8_t elem_byte(uint64_t g, size_t b, unsigned seed)
{
	return (uint8_t)(g * 31 + b * 7 + seed);
}

struct bds {
	const char *name;
	uint32_t dtype, ndim;
	uint64_t shape[8], cs[8];
	int codec; /* 0 raw, 1 zstd, 2 alternate by cell */
};

static const size_t esizes[11] = { 0, 4, 8, 4, 8, 1, 2, 2, 4, 2, 8 };

struct built {
	uint8_t *p;
	size_t len, cap;
	size_t index_off, entry_off[4096], npay;
	size_t pay_off[4096];
};

static void put(struct built *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 1024;
		b->p = realloc(b->p, b->cap);
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void put64(struct built *b, uint64_t v)
{
	uint8_t x[8];
	sf_put_le64(x, v);
	put(b, x, 8);
}

static void put32(struct built *b, uint32_t v)
{
	uint8_t x[4];
	sf_put_le32(x, v);
	put(b, x, 4);
}

/* The tile of cell `c` of dataset ds (bytes in C order over its extent). */
static size_t make_tile(const struct bds *ds, const uint64_t *c, unsigned seed, uint8_t *out)
{
	size_t es = esizes[ds->dtype], n = 0;
	uint64_t ext[8], l[8] = { 0 }, cnt = 1;
	for (uint32_t d = 0; d < ds->ndim; d++) {
		uint64_t left = ds->shape[d] - c[d] * ds->cs[d];
		ext[d] = left < ds->cs[d] ? left : ds->cs[d];
		cnt *= ext[d];
	}
	for (uint64_t i = 0; i < cnt; i++) {
		uint64_t g = 0;
		for (uint32_t d = 0; d < ds->ndim; d++)
			g = g * ds->shape[d] + c[d] * ds->cs[d] + l[d];
		for (size_t b = 0; b < es; b++)
			out[n++] = elem_byte(g, b, seed);
		for (uint32_t d = ds->ndim; d-- > 0;) {
			if (++l[d] < ext[d])
				break;
			l[d] = 0;
		}
	}
	return n;
}

/* Writes a container the way upstream does; reverse=1 stores payloads in
 * reverse index order. */
static void build(struct built *b, const struct bds *dss, size_t nds, int reverse)
{
	memset(b, 0, sizeof *b);
	struct built blob = { 0 };
	for (size_t i = 0; i < nds; i++) {
		const struct bds *ds = &dss[i];
		size_t nl = strlen(ds->name);
		put32(&blob, (uint32_t)nl);
		put32(&blob, ds->dtype);
		put32(&blob, ds->ndim);
		put32(&blob, 0);
		put(&blob, ds->name, nl);
		put(&blob, "\0\0\0\0\0\0\0", (8 - (16 + nl) % 8) % 8);
		for (uint32_t d = 0; d < ds->ndim; d++)
			put64(&blob, ds->shape[d]);
		for (uint32_t d = 0; d < ds->ndim; d++)
			put64(&blob, ds->cs[d]);
	}
	/* the entries and their payloads */
	struct built pay = { 0 };
	uint64_t meta[4096][12];
	size_t ne = 0;
	static uint8_t tile[1 << 20], z[1 << 21];
	for (size_t i = 0; i < nds; i++) {
		const struct bds *ds = &dss[i];
		uint64_t grid[8], ncell = 1, c[8] = { 0 };
		for (uint32_t d = 0; d < ds->ndim; d++) {
			grid[d] = (ds->shape[d] + ds->cs[d] - 1) / ds->cs[d];
			ncell *= grid[d];
		}
		for (uint64_t k = 0; k < ncell; k++, ne++) {
			size_t raw = make_tile(ds, c, (unsigned)i, tile);
			int zstd = ds->codec == 1 || (ds->codec == 2 && k % 2);
			const uint8_t *stored = tile;
			size_t slen = raw;
			if (zstd) {
				slen = ZSTD_compress(z, sizeof z, tile, raw, 3);
				stored = z;
			}
			meta[ne][0] = i;
			for (int d = 0; d < 8; d++)
				meta[ne][1 + d] = d < (int)ds->ndim ? c[d] : 0;
			meta[ne][9] = raw;
			meta[ne][10] = slen;
			meta[ne][11] = (uint64_t)zstd;
			b->pay_off[ne] = pay.len;
			put(&pay, stored, slen);
			for (uint32_t d = ds->ndim; d-- > 0;) {
				if (++c[d] < grid[d])
					break;
				c[d] = 0;
			}
		}
	}
	b->npay = ne;
	size_t index_off = 40 + blob.len, first = index_off + 32 + 104 * ne;
	if (reverse) {
		/* the same payload bytes, placed last-entry-first */
		struct built rev = { 0 };
		for (size_t k = ne; k-- > 0;) {
			size_t at = rev.len;
			put(&rev, pay.p + b->pay_off[k], meta[k][10]);
			b->pay_off[k] = at;
		}
		free(pay.p);
		pay = rev;
	}
	put(b, "TETR", 4);
	put32(b, 1);
	put32(b, (uint32_t)nds);
	put32(b, 0);
	put64(b, nds ? index_off : 32);
	put64(b, nds ? 32 + 104 * ne : 0);
	if (nds) {
		put64(b, blob.len);
		put(b, blob.p, blob.len);
		b->index_off = b->len;
		put(b, "TIDX", 4);
		put32(b, 1);
		put64(b, ne);
		put64(b, 0);
		put64(b, 0);
		for (size_t k = 0; k < ne; k++) {
			b->entry_off[k] = b->len;
			for (int f = 0; f < 9; f++)
				put64(b, meta[k][f]);
			put64(b, first + b->pay_off[k]);
			put64(b, meta[k][9]);
			put64(b, meta[k][10]);
			put32(b, (uint32_t)meta[k][11]);
			put32(b, 0);
			b->pay_off[k] += first;
		}
	}
	put(b, pay.p, pay.len);
	free(pay.p);
	free(blob.p);
}

/* Checks every view file of a built dataset against elem_byte. */
static void check_dataset(struct sf_view *v, const struct bds *ds, unsigned seed)
{
	size_t es = esizes[ds->dtype];
	uint64_t nelem = 1, zc[8], zelem = 1, grid[8], ncell = 1;
	for (uint32_t d = 0; d < ds->ndim; d++) {
		nelem *= ds->shape[d];
		zc[d] = ds->cs[d] < ds->shape[d] ? ds->cs[d] : (ds->shape[d] ? ds->shape[d] : 1);
		zelem *= zc[d];
		grid[d] = (ds->shape[d] + ds->cs[d] - 1) / ds->cs[d];
		ncell *= grid[d];
	}
	char p[600];
	snprintf(p, sizeof p, "%s.npy", ds->name);
	struct sf_node *f = find(v, p);
	uint64_t size = size_of(f), nbytes = nelem * es;
	CHECK(f && size >= nbytes + 64 && (size - nbytes) % 64 == 0);
	if (!f)
		return;
	uint64_t hdr = size - nbytes;
	/* whole, then pieces starting inside elements */
	uint64_t steps[] = { nbytes ? nbytes : 1, 1, 3, 7, 13, 100 };
	for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++)
		for (uint64_t off = 0; off < nbytes; off += steps[s] + 1) {
			int rc;
			uint8_t *got = read_range(f, hdr + off, steps[s], &rc);
			CHECK(rc == 0 && got);
			uint64_t n = off + steps[s] > nbytes ? nbytes - off : steps[s];
			for (uint64_t i = 0; got && i < n; i++)
				if (got[i] != elem_byte((off + i) / es, (off + i) % es, seed)) {
					CHECK(!"npy byte differs");
					break;
				}
			free(got);
		}
	/* chunk files: the tile at the corner of a zeroed zarr chunk */
	uint64_t c[8] = { 0 };
	static uint8_t tile[1 << 20];
	for (uint64_t k = 0; k < ncell; k++) {
		char name[200];
		size_t at = 0;
		for (uint32_t d = 0; d < ds->ndim; d++)
			at += (size_t)snprintf(name + at, sizeof name - at, "%s%llu", d ? "." : "",
					       (unsigned long long)c[d]);
		snprintf(p, sizeof p, "%s/%s", ds->name, name);
		uint64_t n;
		uint8_t *got = read_all(v, p, &n);
		CHECK(got && n == zelem * es);
		size_t tl = make_tile(ds, c, seed, tile);
		snprintf(p, sizeof p, ".shardfs/tiles/%s/%s", ds->name, name);
		uint64_t tn;
		uint8_t *t = read_all(v, p, &tn);
		CHECK(t && tn == tl && memcmp(t, tile, tl) == 0);
		free(t);
		for (uint64_t i = 0; got && i < zelem; i++) {
			uint64_t rem = i, lin = 0;
			bool inside = true;
			uint64_t l[8];
			for (uint32_t d = ds->ndim; d-- > 0;) {
				l[d] = rem % zc[d];
				rem /= zc[d];
			}
			for (uint32_t d = 0; d < ds->ndim; d++) {
				uint64_t left = ds->shape[d] - c[d] * ds->cs[d];
				uint64_t ext = left < ds->cs[d] ? left : ds->cs[d];
				inside &= l[d] < ext;
				lin = lin * ext + (l[d] < ext ? l[d] : 0);
			}
			for (size_t b = 0; b < es; b++)
				CHECK(got[i * es + b] == (inside ? tile[lin * es + b] : 0));
		}
		free(got);
		for (uint32_t d = ds->ndim; d-- > 0;) {
			if (++c[d] < grid[d])
				break;
			c[d] = 0;
		}
	}
}

static void test_built(void)
{
	static const struct bds cases[][3] = {
		{ { "f32", 1, 2, { 5, 7 }, { 2, 3 }, 0 }, { "f64", 2, 1, { 9 }, { 4 }, 1 },
		  { "u8", 5, 3, { 3, 4, 5 }, { 2, 4, 2 }, 2 } },
		{ { "i16", 7, 4, { 3, 2, 5, 2 }, { 2, 2, 2, 1 }, 2 }, { "u64", 10, 2, { 0, 4 }, { 2, 2 }, 0 },
		  { "f16", 9, 8, { 2, 1, 2, 3, 1, 2, 2, 3 }, { 1, 1, 2, 2, 1, 1, 2, 2 }, 2 } },
		{ { "slab", 3, 3, { 6, 4, 3 }, { 4, 4, 3 }, 0 }, { "big", 8, 2, { 3, 4 }, { 9, 9 }, 1 },
		  { "i64", 4, 2, { 4, 3 }, { 3, 2 }, 2 } },
	};
	for (int reverse = 0; reverse < 2; reverse++)
		for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
			struct built b;
			build(&b, cases[t], 3, reverse);
			struct sf_view *v = NULL;
			struct sf_err e;
			CHECK(open_bytes("built.tet", b.p, b.len, &v, &e) == 0);
			for (int i = 0; v && i < 3; i++)
				check_dataset(v, &cases[t][i], (unsigned)i);
			uint64_t n;
			uint8_t *ver = v ? read_all(v, ".shardfs/verify", &n) : NULL;
			CHECK(ver && memcmp(ver, "status: ok\n", 11) == 0);
			free(ver);
			sf_view_unref(v);
			free(b.p);
		}
}

/* ---- malformations of spec §11 ----------------------------------------- */

static const struct bds two[] = {
	{ "a", 1, 2, { 4, 3 }, { 2, 2 }, 2 },
	{ "b", 6, 1, { 5 }, { 2 }, 1 },
};

/* Builds the two-dataset file, lets `patch` damage it and opens it. */
static int open_patched(void (*patch)(struct built *), struct sf_view **v)
{
	struct built b;
	build(&b, two, 2, 0);
	patch(&b);
	struct sf_err e;
	*v = NULL;
	int rc = open_bytes("bad.tet", b.p, b.len, v, &e);
	free(b.p);
	return rc;
}

static void bad_magic(struct built *b) { b->p[0] = 'X'; }
static void bad_version(struct built *b) { b->p[4] = 2; }
static void index_past_end(struct built *b) { sf_put_le64(b->p + 24, b->len); }
static void truncated(struct built *b) { b->len -= 3; }
static void chunk_outside(struct built *b) { sf_put_le64(b->p + b->entry_off[1] + 72, b->len - 2); }
static void bad_codec(struct built *b) { sf_put_le32(b->p + b->entry_off[0] + 96, 7); }
static void raw_stored(struct built *b) { sf_put_le64(b->p + b->entry_off[0] + 88, 1); }
static void bad_ndim(struct built *b) { sf_put_le32(b->p + 48, 9); }
static void flag_no_footer(struct built *b) { b->p[12] = 1; }
static void bad_tail_version(struct built *b)
{
	uint8_t tail[16] = { 0 };
	sf_put_le32(tail + 8, 2);
	memcpy(tail + 12, "THST", 4);
	put(b, tail, 16);
}

static void test_refused(void)
{
	void (*const patches[])(struct built *) = {
		bad_magic, bad_version, index_past_end, truncated, chunk_outside,
		bad_codec, raw_stored, bad_ndim, flag_no_footer, bad_tail_version,
	};
	for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
		struct sf_view *v = NULL;
		int rc = open_patched(patches[i], &v);
		if (rc == 0)
			fprintf(stderr, "patch %zu opened\n", i);
		CHECK(rc < 0 && !v);
		sf_view_unref(v);
	}
}

/* entry 0 of "a" takes the coordinates of entry 2, (1,0), whose tile has
 * the same size: only the duplicate is wrong */
static void dup_coords(struct built *b)
{
	memcpy(b->p + b->entry_off[0] + 8, b->p + b->entry_off[2] + 8, 64);
}
static void zero_extent(struct built *b)
{
	/* "b" record: 16 header + "b" + 7 pad, then shape, chunk_shape */
	size_t rec_b = 40 + 16 + 8 + 32;
	sf_put_le64(b->p + rec_b + 24 + 8, 0);
}
static void overlap(struct built *b)
{
	/* a's entry 1 (a zstd tile) starts one byte before its own payload,
	 * over the end of entry 0's */
	sf_put_le64(b->p + b->entry_off[1] + 72, b->pay_off[1] - 1);
}
static void coords_past_grid(struct built *b) { sf_put_le64(b->p + b->entry_off[0] + 8, 5); }
static void bad_dtype(struct built *b) { sf_put_le32(b->p + 44, 11); }
static void orphan(struct built *b) { sf_put_le64(b->p + b->entry_off[0], 9); }

/* Problems confined to one dataset: the file opens, that dataset is not
 * shown and is reported, the other one reads as built. */
static void test_hidden(void)
{
	static const struct {
		void (*patch)(struct built *);
		const char *gone, *kept, *why; /* why: in the dataset's warning */
	} cases[] = {
		{ dup_coords, "a", "b", "same coordinates" },
		{ zero_extent, "b", "a", "chunk_shape[0] is 0" },
		{ overlap, "a", "b", "overlaps" },
		{ coords_past_grid, "a", "b", "past the grid" },
		{ bad_dtype, "a", "b", "unknown dtype" },
		{ orphan, "a", "b", "the grid has" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct sf_view *v = NULL;
		CHECK(open_patched(cases[i].patch, &v) == 0);
		if (!v)
			continue;
		char p[64];
		snprintf(p, sizeof p, "%s.npy", cases[i].gone);
		CHECK(!find(v, cases[i].gone) && !find(v, p));
		bool said = false;
		for (size_t w = 0; w < v->nwarnings; w++)
			said |= strstr(v->warnings[w], cases[i].why) != NULL;
		CHECK(said);
		check_dataset(v, &two[cases[i].kept[0] == 'b'], cases[i].kept[0] == 'b');
		uint64_t n;
		uint8_t *ver = read_all(v, ".shardfs/verify", &n);
		CHECK(ver && memcmp(ver, "status: failed\n", 15) == 0);
		free(ver);
		sf_view_unref(v);
	}
}

/* A zstd tile whose frame decodes to fewer bytes than raw_byte_len: listed
 * with its size, reads fail EIO, every other file still reads. */
static void test_bad_zstd(void)
{
	struct built b;
	build(&b, two, 2, 0);
	/* "b" chunk 0 (entry 4): recompress one byte less of content in place */
	size_t k = 4, off = b.pay_off[k];
	uint64_t stored = sf_le64(b.p + b.entry_off[k] + 88);
	uint8_t src[4] = { 1, 2, 3 }, z[64];
	size_t zl = ZSTD_compress(z, sizeof z, src, 3, 3);
	CHECK(zl <= stored);
	memcpy(b.p + off, z, zl);
	sf_put_le64(b.p + b.entry_off[k] + 88, zl);
	struct sf_view *v = NULL;
	struct sf_err e;
	CHECK(open_bytes("zbad.tet", b.p, b.len, &v, &e) == 0);
	free(b.p);
	if (!v)
		return;
	struct sf_node *f = find(v, "b/0");
	CHECK(size_of(f) == 4);
	int rc;
	free(read_range(f, 0, 4, &rc));
	CHECK(rc == -EIO);
	free(read_range(find(v, ".shardfs/tiles/b/0"), 0, 4, &rc));
	CHECK(rc == -EIO);
	free(read_range(find(v, "b.npy"), 0, 1 << 20, &rc));
	CHECK(rc == -EIO);
	uint64_t n;
	uint8_t *ok = read_all(v, "b/1", &n);
	CHECK(ok && n == 4);
	free(ok);
	check_dataset(v, &two[0], 0);
	uint8_t *ver = read_all(v, ".shardfs/verify", &n);
	CHECK(ver && memcmp(ver, "status: failed\n", 15) == 0 && memmem(ver, n, "chunk_decode", 12));
	free(ver);
	sf_view_unref(v);
}

static void test_empty(void)
{
	struct built b;
	build(&b, NULL, 0, 0);
	CHECK_EQ_U(b.len, 32);
	struct sf_view *v = NULL;
	struct sf_err e;
	CHECK(open_bytes("empty.tet", b.p, b.len, &v, &e) == 0);
	free(b.p);
	uint64_t n;
	uint8_t *info = v ? read_all(v, ".shardfs/info.txt", &n) : NULL;
	CHECK(info && memmem(info, n, "datasets: (empty file)", 22));
	free(info);
	sf_view_unref(v);
}

int main(void)
{
	check_tmp(tmpdir, sizeof tmpdir, "test-tet");
	if (!mkdtemp(tmpdir))
		return 1;
	test_fixtures();
	test_built();
	test_refused();
	test_hidden();
	test_bad_zstd();
	test_empty();
	static const char *const names[] = { "built.tet", "bad.tet", "zbad.tet", "empty.tet" };
	for (size_t i = 0; i < 4; i++) {
		char p[128];
		snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
		unlink(p);
	}
	rmdir(tmpdir);
	CHECK_DONE();
}
