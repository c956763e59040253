/* tsumugi views against the upstream-written fixtures (their .truth.json),
 * against shards from tests/writers/tsumugi_writer.py (their .expect.json),
 * and against corrupted copies of the fixtures (spec A11). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "sf_crc32c.h"
#include "sf_read.h"
#include "views.h"
#include "sf_view_impl.h"

static char tmpdir[64];

static unsigned hexbyte(const char *h)
{
	unsigned v = 0;
	for (int i = 0; i < 2; i++)
		v = v << 4 | (unsigned)(h[i] <= '9' ? h[i] - '0' : h[i] - 'a' + 10);
	return v;
}

static const char *kind_name(int kind)
{
	static const char *const names[] = { "lexical", "forward", "feature", "graph", "vector",
					     "dictionary" };
	return kind >= 1 && kind <= 6 ? names[kind - 1] : NULL;
}

/* regions/<kind>, <kind>.1 ... in descriptor order. */
static void region_name(json_t *regions, size_t i, char *out, size_t cap)
{
	int kind = (int)json_integer_value(json_object_get(json_array_get(regions, i), "kind"));
	int before = 0;
	for (size_t j = 0; j < i; j++)
		before += json_integer_value(json_object_get(json_array_get(regions, j), "kind")) == kind;
	char base[16];
	if (kind_name(kind))
		snprintf(base, sizeof base, "%s", kind_name(kind));
	else
		snprintf(base, sizeof base, "kind-%d", kind);
	if (before)
		snprintf(out, cap, "regions/%s.%d", base, before);
	else
		snprintf(out, cap, "regions/%s", base);
}

static void check_npy(struct sf_view *v, json_t *want_rows, size_t rows, size_t cols)
{
	uint8_t *npy;
	size_t len;
	CHECK(read_view(v, "features.npy", &npy, &len) == 0);
	if (!npy)
		return;
	CHECK(memcmp(npy, "\x93NUMPY\x01\x00", 8) == 0);
	size_t hl = 10 + (size_t)(npy[8] | npy[9] << 8);
	char shape[64];
	snprintf(shape, sizeof shape, "'shape': (%zu, %zu)", rows, cols);
	CHECK(strstr((char *)npy + 10, shape) != NULL && strstr((char *)npy + 10, "'<f4'") != NULL);
	CHECK_EQ_U(len, hl + rows * cols * 4);
	for (size_t r = 0; r < rows && len == hl + rows * cols * 4; r++)
		for (size_t c = 0; c < cols; c++) {
			float got;
			memcpy(&got, npy + hl + (r * cols + c) * 4, 4);
			float want = (float)json_number_value(json_array_get(json_array_get(want_rows, r), c));
			/* upstream's exp may differ in the last ulp of the f64 */
			CHECK(fabsf(got - want) <= 1e-6f * fabsf(want));
		}
	free(npy);
}

static void check_verify_ok(struct sf_view *v)
{
	uint8_t *p;
	size_t len;
	CHECK(read_view(v, ".shardfs/verify", &p, &len) == 0);
	CHECK(p && strncmp((char *)p, "status: ok\n", 11) == 0);
	if (p && strncmp((char *)p, "status: ok\n", 11) != 0)
		fprintf(stderr, "%s", p);
	free(p);
}

/* ---- the fixtures against their truth --------------------------------- */

static void check_fixture_forward(struct sf_view *v, json_t *fwd, uint64_t node_base)
{
	size_t rows = json_integer_value(json_object_get(fwd, "rows"));
	json_t *values = json_object_get(fwd, "values");
	const char *col;
	json_t *vals;
	json_object_foreach(values, col, vals) {
		bool hex = json_is_object(vals);
		json_t *list = hex ? json_object_get(vals, "hex") : vals;
		CHECK_EQ_U(json_array_size(list), rows);
		for (size_t d = 0; d < rows; d++) {
			char path[300];
			snprintf(path, sizeof path, "docs/%zu/%s", d, col);
			const char *want = json_string_value(json_array_get(list, d));
			size_t wlen = strlen(want);
			uint8_t *got;
			size_t len;
			CHECK(read_view(v, path, &got, &len) == 0);
			if (hex && strcmp(col, "doc_id") != 0) {
				/* a binary column: the file holds the bytes */
				CHECK_EQ_U(len * 2, wlen);
				for (size_t i = 0; i < len && len * 2 == wlen; i++)
					CHECK_EQ_U(got[i], hexbyte(want + 2 * i));
			} else {
				CHECK_EQ_U(len, wlen);
				CHECK(got && memcmp(got, want, wlen) == 0);
			}
			free(got);
		}
	}
	uint8_t *jl;
	size_t len;
	CHECK(read_view(v, "docs.jsonl", &jl, &len) == 0);
	char *line = (char *)jl, *save = NULL;
	size_t n = 0;
	for (char *l = strtok_r(line, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++) {
		json_t *o = json_loads(l, 0, NULL);
		CHECK(o != NULL);
		CHECK_EQ_U(json_integer_value(json_object_get(o, "id")), node_base + n);
		json_object_foreach(values, col, vals) {
			const char *want = json_string_value(json_array_get(
				json_is_object(vals) ? json_object_get(vals, "hex") : vals, n));
			if (!json_is_object(vals) || strcmp(col, "doc_id") == 0)
				CHECK_STR(json_string_value(json_object_get(o, col)), want);
		}
		json_decref(o);
	}
	CHECK_EQ_U(n, rows);
	free(jl);
}

static void test_fixture(const char *name)
{
	char path[512], tpath[600];
	snprintf(path, sizeof path, "%s/tsumugi/%s", fixtures_dir(), name);
	snprintf(tpath, sizeof tpath, "%s.truth.json", path);
	json_error_t je;
	json_t *truth = json_load_file(tpath, 0, &je);
	CHECK(truth != NULL);
	if (!truth)
		return;
	CHECK(json_is_null(json_object_get(json_object_get(truth, "expect"), "open_error")));
	struct sf_view *v = open_ok(path);
	if (!v) {
		json_decref(truth);
		return;
	}
	size_t flen;
	uint8_t *file = slurp(path, &flen);
	json_t *hdr = json_object_get(truth, "header");

	/* info.json carries the header as upstream's reader reports it */
	uint8_t *info;
	size_t ilen;
	CHECK(read_view(v, ".shardfs/info.json", &info, &ilen) == 0);
	json_t *ij = json_loads((char *)info, 0, NULL);
	json_t *ih = json_object_get(ij, "header");
	const char *key;
	json_t *val;
	json_object_foreach(hdr, key, val)
		CHECK(json_equal(val, json_object_get(ih, key)));
	json_decref(ij);
	free(info);

	/* info.txt: the lines of `tsumugi inspect` that the truth determines */
	CHECK(read_view(v, ".shardfs/info.txt", &info, &ilen) == 0);
	char want[512];
	snprintf(want, sizeof want, "file:     %s\nversion:  1.0\ndocs:     %lld\nflags:    ", name,
		 json_integer_value(json_object_get(hdr, "doc_count")));
	json_t *fn = json_object_get(hdr, "flag_names");
	for (size_t i = 0; i < json_array_size(fn); i++)
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? "," : "",
			 json_string_value(json_array_get(fn, i)));
	if (!json_array_size(fn))
		strcat(want, "(none)");
	CHECK(info && strncmp((char *)info, want, strlen(want)) == 0);
	free(info);

	json_t *regions = json_object_get(truth, "regions");
	for (size_t i = 0; i < json_array_size(regions); i++) {
		json_t *r = json_array_get(regions, i);
		char rp[64], zp[70];
		region_name(regions, i, rp, sizeof rp);
		uint64_t off = json_integer_value(json_object_get(r, "offset"));
		uint64_t length = json_integer_value(json_object_get(r, "length"));
		uint64_t raw = json_integer_value(json_object_get(r, "raw_length"));
		int codec = (int)json_integer_value(json_object_get(r, "codec"));
		uint8_t *got;
		size_t len;
		CHECK(read_view(v, rp, &got, &len) == 0);
		CHECK_EQ_U(len, raw);
		if (codec == 0) {
			CHECK(got && memcmp(got, file + off, length) == 0);
		} else {
			free(got);
			snprintf(zp, sizeof zp, "%s.zst", rp);
			CHECK(read_view(v, zp, &got, &len) == 0);
			CHECK(len == length && memcmp(got, file + off, length) == 0);
			if (codec == 1 && length) {
				/* an independent decode of the plain zstd frame */
				uint8_t *plain = malloc(raw + 1), *dec;
				size_t dlen;
				CHECK(ZSTD_decompress(plain, raw + 1, file + off, length) == raw);
				CHECK(read_view(v, rp, &dec, &dlen) == 0);
				CHECK(dlen == raw && memcmp(dec, plain, raw) == 0);
				free(plain);
				free(dec);
			}
		}
		free(got);
	}
	json_t *inner = json_object_get(truth, "inner");
	for (size_t i = 0; i < json_array_size(inner); i++) {
		json_t *in = json_array_get(inner, i);
		json_t *fwd = json_object_get(in, "forward"), *fea = json_object_get(in, "feature");
		if (fwd)
			check_fixture_forward(v, fwd, json_integer_value(json_object_get(hdr, "node_base")));
		if (fea)
			check_npy(v, json_object_get(fea, "dequantized"),
				  json_integer_value(json_object_get(fea, "rows")),
				  json_integer_value(json_object_get(fea, "col_count")));
	}
	check_verify_ok(v);
	free(file);
	sf_view_unref(v);
	json_decref(truth);
}

/* ---- bad input ---------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Recomputes the header CRC and the footer CRC after an edit. */
static void reseal(uint8_t *p, size_t len)
{
	put32(p + 56, sf_crc32c(0, p, 56));
	uint64_t fl = get64(p + len - 16);
	if (fl <= len - 16)
		put32(p + len - 8, sf_crc32c(0, p + len - 16 - fl, fl));
}

/* The descriptor of region i inside the footer (regions section). */
static uint8_t *descriptor(uint8_t *p, size_t len, size_t i)
{
	uint64_t fl = get64(p + len - 16);
	uint8_t *f = p + len - 16 - fl;
	size_t pos = 0;
	while (pos + 5 <= fl) {
		uint32_t n = f[pos + 1] | f[pos + 2] << 8 | f[pos + 3] << 16 | (uint32_t)f[pos + 4] << 24;
		if (f[pos] == 2)
			return f + pos + 5 + 36 * i;
		pos += 5 + n;
	}
	return NULL;
}

/* Writes the bytes as a shard and expects the open to fail naming `code`. */
static void expect_refused(const uint8_t *p, size_t len, const char *code)
{
	char path[128];
	snprintf(path, sizeof path, "%s/bad.tsumugi", tmpdir);
	spit(path, p, len);
	struct sf_view *v = NULL;
	struct sf_err e = { { 0 } };
	int rc = sf_open_path(path, NULL, &v, &e);
	CHECK(rc < 0 && v == NULL);
	if (code && !strstr(e.msg, code))
		fprintf(stderr, "expected %s for a %zu-byte file, got: %s\n", code, len, e.msg);
	CHECK(code == NULL || strstr(e.msg, code) != NULL);
	if (v)
		sf_view_unref(v);
}

static void test_refused(void)
{
	char path[512];
	size_t len;
	snprintf(path, sizeof path, "%s/tsumugi/gold_prod.tsumugi", fixtures_dir());
	uint8_t *good = slurp(path, &len);
	uint8_t *p = malloc(len);

	/* every truncation point: too short below 80 bytes, else no trailer */
	for (size_t cut = 0; cut < len; cut += (cut < 200 || cut > len - 200) ? 1 : 61)
		expect_refused(good, cut, cut < 80 ? "short_file" : "bad_magic");

	memcpy(p, good, len);
	p[len - 16] = 0xff; /* footer length past the file */
	p[len - 10] = 0x7f;
	expect_refused(p, len, "corrupt_footer");

	memcpy(p, good, len);
	p[len - 40] ^= 1;
	expect_refused(p, len, "footer_crc");

	memcpy(p, good, len);
	p[0] = 'X';
	expect_refused(p, len, "bad_magic");

	memcpy(p, good, len);
	p[16] ^= 1; /* doc_count */
	expect_refused(p, len, "header_crc");

	memcpy(p, good, len);
	p[4] = 2;
	reseal(p, len);
	expect_refused(p, len, "bad_version");

	memcpy(p, good, len);
	p[24] ^= 1; /* footer_offset */
	reseal(p, len);
	expect_refused(p, len, "corrupt_footer");

	memcpy(p, good, len);
	uint64_t fl = get64(p + len - 16);
	p[len - 16 - fl] = 2; /* the schema section's tag: now a 1-byte region table */
	reseal(p, len);
	expect_refused(p, len, "corrupt_footer");
	free(p);
	free(good);

	/* the dictionary region is checked at open */
	snprintf(path, sizeof path, "%s/tsumugi/gold_dict.tsumugi", fixtures_dir());
	good = slurp(path, &len);
	p = malloc(len);
	memcpy(p, good, len);
	p[11418 + 20] ^= 1;
	expect_refused(p, len, "region_crc");
	memcpy(p, good, len);
	put32(p + 11418 + 12, 0); /* the first dictionary's id */
	put32(descriptor(p, len, 7) + 28, sf_crc32c(0, p + 11418, 2307));
	reseal(p, len);
	expect_refused(p, len, "bad_dictionary");
	free(p);
	free(good);
}

/* A bad region fails with EIO; the rest of the shard stays readable. */
static void test_bad_region(void)
{
	char path[512];
	size_t len;
	snprintf(path, sizeof path, "%s/tsumugi/gold_prod.tsumugi", fixtures_dir());
	uint8_t *p = slurp(path, &len);
	p[5471 + 3000] ^= 0x40; /* inside the forward region */
	uint8_t *d = descriptor(p, len, 3);
	put32(d + 4, 70000); /* graph region: offset past the footer */
	reseal(p, len);
	char bad[128];
	snprintf(bad, sizeof bad, "%s/crc.tsumugi", tmpdir);
	spit(bad, p, len);
	struct sf_view *v = open_ok(bad);
	if (v) {
		uint8_t *got;
		size_t n;
		CHECK(read_view(v, "regions/forward", &got, &n) == -EIO);
		free(got);
		CHECK(read_view(v, "docs/0/url", &got, &n) == -EIO);
		free(got);
		CHECK(read_view(v, "regions/graph", &got, &n) == -EIO);
		free(got);
		CHECK(read_view(v, "regions/lexical", &got, &n) == 0 && n == 8516);
		free(got);
		CHECK(read_view(v, "features.npy", &got, &n) == 0);
		free(got);
		CHECK(v->nwarnings == 1);
		CHECK(read_view(v, ".shardfs/verify", &got, &n) == 0);
		CHECK(got && strncmp((char *)got, "status: failed\n", 15) == 0);
		CHECK(got && strstr((char *)got, "regions/forward: region CRC mismatch"));
		CHECK(got && strstr((char *)got, "regions/graph: stored bytes lie outside"));
		free(got);
		sf_view_unref(v);
	}
	free(p);
}

/* ---- shards from our writer -------------------------------------------- */

static void check_written(const char *dir, const char *name)
{
	char path[512], epath[600];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(epath, sizeof epath, "%s.expect.json", path);
	json_t *x = json_load_file(epath, 0, NULL);
	struct sf_view *v = open_ok(path);
	CHECK(x != NULL);
	if (!x || !v)
		goto out;
	json_t *regions = json_object_get(x, "regions");
	for (size_t i = 0; i < json_array_size(regions); i++) {
		json_t *r = json_array_get(regions, i);
		char rp[80];
		snprintf(rp, sizeof rp, "regions/%s", json_string_value(json_object_get(r, "name")));
		uint8_t *got;
		size_t n;
		CHECK(read_view(v, rp, &got, &n) == 0);
		CHECK_EQ_U(n, json_integer_value(json_object_get(r, "size")));
		CHECK_EQ_U(sf_crc32c(0, got, n), json_integer_value(json_object_get(r, "crc32c")));
		free(got);
	}
	json_t *docs = json_object_get(x, "docs");
	if (docs) {
		json_t *files = json_object_get(docs, "files");
		const char *col;
		json_t *vals;
		json_object_foreach(files, col, vals)
			for (size_t d = 0; d < json_array_size(vals); d++) {
				char fp[300];
				snprintf(fp, sizeof fp, "docs/%zu/%s", d, col);
				const char *hex = json_string_value(json_array_get(vals, d));
				uint8_t *got;
				size_t n;
				CHECK(read_view(v, fp, &got, &n) == 0);
				size_t hlen = strlen(hex), bad = 0;
				CHECK_EQ_U(n * 2, hlen);
				for (size_t i = 0; i < n && n * 2 == hlen; i++)
					bad += got[i] != hexbyte(hex + 2 * i);
				CHECK_EQ_U(bad, 0);
				free(got);
			}
	}
	json_t *fea = json_object_get(x, "features");
	if (fea) {
		json_t *vals = json_object_get(fea, "values");
		check_npy(v, vals, json_array_size(vals), json_array_size(json_object_get(fea, "names")));
	}
	check_verify_ok(v);
out:
	if (v)
		sf_view_unref(v);
	json_decref(x);
}

/* A cache that counts what it produces, to see how much a read decodes. */
struct counting {
	struct sf_cache base;
	int produced;
	uint64_t bytes;
};

static int counting_get(struct sf_cache *c, struct sf_part *p, struct sf_buf **out,
			struct sf_err *e)
{
	struct counting *k = (struct counting *)c;
	int rc = p->produce(p, c, out, e);
	/* decodes of the body's blocks; the forward region's own copy (codec
	 * 0, read by the parser) is no decode */
	if (rc == 0 && strcmp(p->what, "forward body block") == 0) {
		k->produced++;
		k->bytes += (*out)->len;
	}
	return rc;
}

static void test_head_of_big_body(const char *dir)
{
	char path[512];
	snprintf(path, sizeof path, "%s/big_body.tsumugi", dir);
	struct sf_view *v = open_ok(path);
	if (!v)
		return;
	struct counting k = { { .get = counting_get }, 0, 0 };
	struct sf_err e;
	struct sf_node *n = NULL;
	CHECK(sf_view_walk(v->root, "docs/1/body", &n, &e) == 0);
	CHECK(n && sf_file_ready(n, &k.base, &e) == 0);
	CHECK(n && n->u.file.size > 900000);
	struct sf_readv rv = { 0 };
	CHECK(n && sf_file_read(n, 0, 100, &k.base, &rv, &e) == 0);
	CHECK_EQ_U(rv.bytes, 100);
	sf_readv_release(&rv);
	/* only block 0 was decoded (16 KiB of a 1 MiB body) */
	CHECK_EQ_U(k.produced, 1);
	CHECK_EQ_U(k.bytes, 16384);
	sf_view_unref(v);
}

static void test_writer(void)
{
	char dir[300], cmd[1024];
	snprintf(dir, sizeof dir, "%s/written", tmpdir);
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/writers/tsumugi_writer.py --out %s",
		 SHARDFS_SOURCE_ROOT, dir);
	CHECK(system(cmd) == 0);
	static const char *const names[] = { "all_codecs.tsumugi", "dict_regions.tsumugi",
					     "zero_docs.tsumugi", "big_body.tsumugi",
					     "features_only.tsumugi", "opaque_only.tsumugi" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		check_written(dir, names[i]);
	test_head_of_big_body(dir);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

int main(void)
{
	check_tmp(tmpdir, sizeof tmpdir, "test-tsumugi");
	if (!mkdtemp(tmpdir))
		return 1;
	static const char *const fixtures[] = { "gold_empty.tsumugi", "gold_prod.tsumugi",
						"gold_search_only.tsumugi", "gold_impact.tsumugi",
						"gold_sparse.tsumugi", "gold_dict.tsumugi" };
	for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
		test_fixture(fixtures[i]);
	test_refused();
	test_bad_region();
	test_writer();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
	CHECK(system(cmd) == 0);
	CHECK_DONE();
}
