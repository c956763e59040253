/* Unit tests of the Shardlake formats: every fixture shard's view against
 * the fixtures' truth files and against the shard bytes read directly;
 * aliases; and hostile or broken inputs written here. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sf_bytes.h"
#include "shardlake/sl.h"
#include "views.h"
#include "sf_view_impl.h"

/* ---- helpers ------------------------------------------------------------ */

/* Checks a .npy file's framing and returns where its data starts. */
static size_t npy_data(const uint8_t *p, size_t len, const char *shape)
{
	CHECK(len >= 10 && memcmp(p, "\x93NUMPY\x01\x00", 8) == 0);
	if (len < 10)
		return len;
	size_t start = 10 + sf_le16(p + 8);
	CHECK(start % 64 == 0 && start <= len && p[start - 1] == '\n');
	char hdr[512] = { 0 };
	memcpy(hdr, p + 10, start - 10 < sizeof hdr - 1 ? start - 10 : sizeof hdr - 1);
	if (!strstr(hdr, shape)) {
		fprintf(stderr, "npy header %s lacks %s\n", hdr, shape);
		CHECK(0);
	}
	return start;
}

/* ---- fixtures ----------------------------------------------------------- */

struct raw {
	uint8_t *p;
	size_t len;
	uint32_t version, dims, c, m, k;
	uint64_t n, hdr, rec_off, rec_size;
};

/* The shard's layout computed here from its bytes, independently of the
 * format module. */
static void raw_layout(struct raw *r)
{
	r->version = sf_le32(r->p + 8);
	r->dims = sf_le32(r->p + 16);
	r->c = sf_le32(r->p + 20);
	r->n = sf_le64(r->p + 24);
	r->hdr = r->version == 2 ? 40 : 32;
	r->m = r->version == 2 ? sf_le32(r->p + 32) : 0;
	r->k = r->version == 2 ? sf_le32(r->p + 36) : 0;
	r->rec_off = r->hdr + 4ull * r->c * r->dims;
	r->rec_size = 8 + (r->version == 2 ? r->m : 4ull * r->dims);
}

static void check_reconstructed(struct sf_view *v, const struct raw *r, const char *cbpath)
{
	size_t cblen;
	uint8_t *cb = slurp(cbpath, &cblen);
	CHECK(cb != NULL);
	if (!cb)
		return;
	uint32_t k = sf_le32(cb + 20), sub = sf_le32(cb + 24);
	uint8_t *got;
	size_t len;
	char shape[64];
	CHECK_EQ_U(read_view(v, "reconstructed.npy", &got, &len), 0);
	snprintf(shape, sizeof shape, "(%" PRIu64 ", %u)", r->n, r->dims);
	size_t d = got ? npy_data(got, len, shape) : 0;
	CHECK_EQ_U(len - d, r->n * r->dims * 4);
	for (uint64_t i = 0; got && i < r->n && len - d == r->n * r->dims * 4; i++)
		for (uint32_t m = 0; m < r->m; m++) {
			uint8_t code = r->p[r->rec_off + i * r->rec_size + 8 + m];
			CHECK(memcmp(got + d + (i * r->dims + m * sub) * 4,
				     cb + 28 + ((uint64_t)m * k + code) * sub * 4, sub * 4) == 0);
		}
	free(got);
	free(cb);
}

static void check_shard(const char *root, json_t *truth)
{
	const char *key = json_string_value(json_object_get(truth, "artifact_key"));
	char path[8192];
	snprintf(path, sizeof path, "%s/%s", root, key);
	struct raw r = { 0 };
	r.p = slurp(path, &r.len);
	CHECK(r.p != NULL);
	struct sf_view *v = r.p ? open_ok(path) : NULL;
	if (!v) {
		free(r.p);
		return;
	}
	raw_layout(&r);
	CHECK(v->format == &sl_sidx_format);
	CHECK_EQ_U(r.version, json_integer_value(json_object_get(truth, "format_version")));
	CHECK_EQ_U(r.n, json_integer_value(json_object_get(truth, "vector_count")));
	CHECK_EQ_U(r.rec_off, json_integer_value(json_object_get(truth, "records_offset")));
	CHECK_EQ_U(r.len, json_integer_value(json_object_get(truth, "file_size")));
	uint8_t *got;
	size_t len, d;
	char shape[64];

	/* centroids.npy: the truth's values, zero-copy */
	json_t *cs = json_object_get(truth, "centroids");
	CHECK_EQ_U(json_array_size(cs), r.c);
	CHECK_EQ_U(read_view(v, "centroids.npy", &got, &len), 0);
	snprintf(shape, sizeof shape, "'shape': (%u, %u)", r.c, r.dims);
	d = npy_data(got, len, shape);
	CHECK_EQ_U(len - d, 4ull * r.c * r.dims);
	for (size_t i = 0; i < json_array_size(cs) && len - d == 4ull * r.c * r.dims; i++)
		for (uint32_t j = 0; j < r.dims; j++) {
			json_t *x = json_array_get(json_array_get(cs, i), j);
			float want = (float)json_number_value(x), have = sf_lef32(got + d + 4 * (i * r.dims + j));
			CHECK(json_is_null(x) || memcmp(&want, &have, 4) == 0);
		}
	free(got);

	/* records.npy: the record area exactly, served from the mapping */
	CHECK_EQ_U(read_view(v, "records.npy", &got, &len), 0);
	snprintf(shape, sizeof shape, "'shape': (%" PRIu64 ",)", r.n);
	d = npy_data(got, len, shape);
	CHECK(strstr((char *)got + 10, r.version == 1 ? "('vector', '<f4'" : "('codes', '|u1'") != NULL);
	CHECK_EQ_U(len - d, r.n * r.rec_size);
	CHECK(memcmp(got + d, r.p + r.rec_off, len - d) == 0);
	free(got);
	struct sf_node *rec = NULL;
	struct sf_err e;
	sf_view_walk(v->root, "records.npy", &rec, &e);
	CHECK(rec && (r.n == 0 || (rec->u.file.n == 2 && rec->u.file.ext[1].kind == SF_EXT_MAP)));

	/* ids.npy and ids.txt against the records and the truth's ids */
	json_t *ids = json_object_get(truth, "ids");
	CHECK(!ids || json_array_size(ids) == r.n);
	CHECK_EQ_U(read_view(v, "ids.npy", &got, &len), 0);
	d = npy_data(got, len, shape);
	CHECK_EQ_U(len - d, r.n * 8);
	uint8_t *txt;
	size_t tlen;
	CHECK_EQ_U(read_view(v, "ids.txt", &txt, &tlen), 0);
	char *line = (char *)txt;
	for (uint64_t i = 0; i < r.n && len - d == r.n * 8; i++) {
		uint64_t id = sf_le64(r.p + r.rec_off + i * r.rec_size);
		CHECK_EQ_U(sf_le64(got + d + 8 * i), id);
		if (ids)
			CHECK_EQ_U((uint64_t)json_integer_value(json_array_get(ids, i)), id);
		char *end;
		CHECK_EQ_U(strtoull(line, &end, 10), id);
		CHECK(*end == '\n');
		line = end + 1;
	}
	CHECK(line == (char *)txt + tlen);
	free(got);
	free(txt);

	/* vectors.npy / codes.npy: every record's payload, in order */
	const char *pname = r.version == 1 ? "vectors.npy" : "codes.npy";
	uint64_t width = r.rec_size - 8;
	CHECK_EQ_U(read_view(v, pname, &got, &len), 0);
	snprintf(shape, sizeof shape, "'shape': (%" PRIu64 ", %" PRIu64 ")", r.n,
		 r.version == 1 ? (uint64_t)r.dims : (uint64_t)r.m);
	d = npy_data(got, len, shape);
	CHECK_EQ_U(len - d, r.n * width);
	for (uint64_t i = 0; i < r.n && len - d == r.n * width; i++)
		CHECK(memcmp(got + d + i * width, r.p + r.rec_off + i * r.rec_size + 8, width) == 0);
	free(got);
	if (r.version == 2) {
		CHECK_EQ_U(r.m, json_integer_value(json_object_get(truth, "pq_m")));
		CHECK_EQ_U(r.k, json_integer_value(json_object_get(truth, "pq_k")));
		char cb[8192];
		snprintf(cb, sizeof cb, "%s/%.*s/pq_codebook.bin", root,
			 (int)(strstr(key, "/shards/") - key), key);
		check_reconstructed(v, &r, cb);
	} else {
		struct sf_node *none = NULL;
		CHECK(sf_dir_find(v->root, "codes.npy", &none, &e) == 0 && !none);
	}

	/* verify: the manifest's fingerprint matches; trailing bytes are a warning */
	CHECK_EQ_U(read_view(v, ".shardfs/verify", &got, &len), 0);
	if (got) {
		CHECK(strncmp((char *)got, "status: ok\n", 11) == 0);
		bool trailing = json_integer_value(json_object_get(truth, "trailing_bytes")) > 0;
		CHECK((strstr((char *)got, "warning: ") != NULL) == trailing);
		CHECK(strstr((char *)got, "error") == NULL);
		if (strncmp((char *)got, "status: ok\n", 11) != 0)
			fprintf(stderr, "%s: %s", path, got);
	}
	free(got);
	CHECK_EQ_U(v->nwarnings, json_integer_value(json_object_get(truth, "trailing_bytes")) > 0);
	CHECK_EQ_U(read_view(v, ".shardfs/info.json", &got, &len), 0);
	json_t *info = got ? json_loadb((char *)got, len, 0, NULL) : NULL;
	json_t *entry = json_object_get(json_object_get(info, "manifest"), "entry");
	CHECK_STR(json_string_value(json_object_get(entry, "artifact_key")) ?: "", key);
	CHECK_EQ_U(json_integer_value(json_object_get(json_object_get(info, "header"), "shard_id")),
		   json_integer_value(json_object_get(truth, "shard_id")));
	json_decref(info);
	free(got);
	CHECK_EQ_U(read_view(v, ".shardfs/info.txt", &got, &len), 0);
	CHECK(got && strstr((char *)got, json_string_value(json_object_get(truth, "fingerprint"))));
	free(got);
	sf_view_unref(v);
	free(r.p);
}

static void check_root(const char *name)
{
	char root[2048], truthpath[4096];
	snprintf(root, sizeof root, "%s/shardlake/%s", fixtures_dir(), name);
	snprintf(truthpath, sizeof truthpath, "%s.truth.json", root);
	json_t *t = json_load_file(truthpath, 0, NULL);
	CHECK(t != NULL);
	const char *iv;
	json_t *idx, *al;
	size_t shards = 0;
	json_object_foreach(json_object_get(t, "indexes"), iv, idx) {
		size_t i;
		json_t *s;
		json_array_foreach(json_object_get(idx, "shards"), i, s) {
			check_shard(root, s);
			shards++;
		}
	}
	CHECK(shards > 5);
	const char *an;
	json_object_foreach(json_object_get(t, "aliases"), an, al) {
		char path[4096], target[1024];
		snprintf(path, sizeof path, "%s/aliases/%s.json", root, an);
		snprintf(target, sizeof target, "../indexes/%s",
			 json_string_value(json_object_get(al, "index_version")));
		struct sf_view *v = open_ok(path);
		if (!v)
			continue;
		CHECK(v->format == &sl_alias_format && v->root->kind == SF_LINK);
		CHECK_STR(v->root->u.target, target);
		CHECK_EQ_U(v->nwarnings, json_is_true(json_object_get(al, "dangling")));
		sf_view_unref(v);
	}
	json_decref(t);
}

/* ---- broken and hostile input ----------------------------------------- */

static char tmp[64];

static void put_header(uint8_t *p, uint32_t version, uint32_t dims, uint32_t c, uint64_t n)
{
	memcpy(p, "SLKIDX\0\0", 8);
	sf_put_le32(p + 8, version);
	sf_put_le32(p + 12, 0);
	sf_put_le32(p + 16, dims);
	sf_put_le32(p + 20, c);
	sf_put_le64(p + 24, n);
}

static int open_err(const char *path, struct sf_err *e)
{
	struct sf_view *v = NULL;
	int rc = sf_open_path(path, NULL, &v, e);
	sf_view_unref(v);
	return rc;
}

static void test_bad_shards(void)
{
	char dir[128], path[256];
	snprintf(dir, sizeof dir, "%s/indexes/bad/shards", tmp);
	uint8_t b[256] = { 0 };
	struct sf_err e;
	snprintf(path, sizeof path, "%s/shard-0000.sidx", dir);

	/* truncated: header promises 3 records of dims 2 (16 bytes each) */
	put_header(b, 1, 2, 1, 3);
	spit(path, b, 32 + 8 + 16 * 3 - 1);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	CHECK(strstr(e.msg, "truncated") && strstr(e.msg, "shard-0000.sidx"));
	/* counts whose product overflows 64 bits */
	put_header(b, 1, 0xFFFFFFFFu, 1, UINT64_MAX / 3);
	spit(path, b, 64);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	CHECK(strstr(e.msg, "overflow") != NULL);
	/* shorter than a header, a bad magic, an unknown version, dims 0 */
	spit(path, b, 20);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	put_header(b, 3, 2, 0, 0);
	spit(path, b, 32);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	put_header(b, 1, 0, 0, 0);
	spit(path, b, 32);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	put_header(b, 1, 2, 0, 0);
	b[0] = 'X';
	spit(path, b, 32);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	/* PQ: K out of 1..256, M = 0, and a v2 header cut at 36 bytes */
	put_header(b, 2, 4, 0, 0);
	sf_put_le32(b + 32, 2);
	sf_put_le32(b + 36, 257);
	spit(path, b, 40);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	sf_put_le32(b + 32, 0);
	sf_put_le32(b + 36, 16);
	spit(path, b, 40);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
	spit(path, b, 36);
	CHECK_EQ_U(open_err(path, &e), -EINVAL);
}

/* A valid PQ shard (dims 4, M 2, K 4, two records) beside a manifest and
 * codebook of our choosing. */
static size_t pq_shard(uint8_t *b, uint8_t code)
{
	put_header(b, 2, 4, 1, 2);
	sf_put_le32(b + 32, 2);
	sf_put_le32(b + 36, 4);
	for (int i = 0; i < 4; i++)
		sf_put_le32(b + 40 + 4 * i, 0x3f800000); /* centroid 1.0 */
	for (int r = 0; r < 2; r++) {
		sf_put_le64(b + 56 + 10 * r, 100 + r);
		b[56 + 10 * r + 8] = (uint8_t)r;
		b[56 + 10 * r + 9] = code;
	}
	return 76;
}

static void test_pq_and_manifest(void)
{
	char idx[128], path[256], mpath[256], cbpath[256];
	snprintf(idx, sizeof idx, "%s/indexes/pq", tmp);
	snprintf(path, sizeof path, "%s/shards/shard-0000.sidx", idx);
	snprintf(mpath, sizeof mpath, "%s/manifest.json", idx);
	snprintf(cbpath, sizeof cbpath, "%s/pq_codebook.bin", idx);
	uint8_t b[128];
	size_t n = pq_shard(b, 3);
	spit(path, b, n);
	uint8_t *got;
	size_t len;

	/* no manifest, no codebook: fine, said as warnings; no reconstructed.npy */
	struct sf_view *v = open_ok(path);
	if (!v)
		return;
	CHECK_EQ_U(read_view(v, ".shardfs/verify", &got, &len), 0);
	CHECK(got && strncmp((char *)got, "status: ok\nwarning: no manifest", 31) == 0);
	free(got);
	CHECK_EQ_U(read_view(v, "reconstructed.npy", &got, &len), -ENOENT);
	sf_view_unref(v);

	/* a manifest that does not parse: verify fails, info still reads */
	spit(mpath, "{\"shards\": [", 12);
	v = open_ok(path);
	CHECK(v->nwarnings == 1 && strstr(v->warnings[0], "manifest.json: not JSON"));
	CHECK_EQ_U(read_view(v, ".shardfs/verify", &got, &len), 0);
	CHECK(got && strncmp((char *)got, "status: failed\nerror: manifest: ", 32) == 0);
	free(got);
	CHECK_EQ_U(read_view(v, ".shardfs/info.json", &got, &len), 0);
	CHECK(got && strstr((char *)got, "not JSON"));
	free(got);
	sf_view_unref(v);

	/* a manifest whose fingerprint, count and codec disagree */
	const char *m = "{\"dims\": 4, \"shards\": [{\"shard_id\": 0, \"artifact_key\": "
			"\"indexes/pq/shards/shard-0000.sidx\", \"vector_count\": 3, "
			"\"sha256\": \"0000000000000000\"}]}";
	spit(mpath, m, strlen(m));
	v = open_ok(path);
	CHECK_EQ_U(read_view(v, ".shardfs/verify", &got, &len), 0);
	CHECK(got && strncmp((char *)got, "status: failed\n", 15) == 0);
	CHECK(got && strstr((char *)got, "fingerprint mismatch: manifest 0000000000000000, actual "));
	CHECK(got && strstr((char *)got, "vector count mismatch"));
	CHECK(got && strstr((char *)got, "codec is none"));
	free(got);
	sf_view_unref(v);

	/* a codebook that fits: reconstructed = codebook rows picked by code */
	uint8_t cb[28 + 2 * 4 * 2 * 4];
	memcpy(cb, "SLKPQCB\0", 8);
	sf_put_le32(cb + 8, 1);
	sf_put_le32(cb + 12, 4);
	sf_put_le32(cb + 16, 2);
	sf_put_le32(cb + 20, 4);
	sf_put_le32(cb + 24, 2);
	for (int i = 0; i < 16; i++) {
		float f = (float)i;
		memcpy(cb + 28 + 4 * i, &f, 4);
	}
	spit(cbpath, cb, sizeof cb);
	v = open_ok(path);
	CHECK_EQ_U(read_view(v, "reconstructed.npy", &got, &len), 0);
	if (got && len == 128 + 32) {
		/* record r: sub-space 0 code r, sub-space 1 code 3 */
		const float want[8] = { 0, 1, 14, 15, 2, 3, 14, 15 };
		CHECK(memcmp(got + 128, want, 32) == 0);
	}
	free(got);
	sf_view_unref(v);

	/* a code not below K: reconstructed.npy is listed with its size, reads fail */
	n = pq_shard(b, 4);
	spit(path, b, n);
	v = open_ok(path);
	struct sf_node *f = NULL;
	struct sf_err e;
	CHECK(sf_view_walk(v->root, "reconstructed.npy", &f, &e) == 0 && f);
	CHECK(f && sf_file_ready(f, &sf_nocache, &e) == 0 && f->u.file.size == 128 + 32);
	CHECK_EQ_U(read_view(v, "reconstructed.npy", &got, &len), -EIO);
	CHECK_EQ_U(read_view(v, ".shardfs/verify", &got, &len), 0);
	CHECK(got && strstr((char *)got, "2 PQ codes are not below K=4 (first in record 0)"));
	free(got);
	sf_view_unref(v);

	/* a codebook of other dims: listed, EIO, and verify says why */
	sf_put_le32(cb + 12, 6);
	sf_put_le32(cb + 24, 3);
	spit(cbpath, cb, sizeof cb);
	n = pq_shard(b, 1);
	spit(path, b, n);
	v = open_ok(path);
	CHECK_EQ_U(read_view(v, "reconstructed.npy", &got, &len), -EIO);
	CHECK(sf_view_walk(v->root, "reconstructed.npy", &f, &e) == 0 && f && f->u.file.size == 128 + 32);
	CHECK_EQ_U(read_view(v, ".shardfs/verify", &got, &len), 0);
	CHECK(got && strstr((char *)got, "error: codebook: "));
	free(got);
	sf_view_unref(v);
}

static void test_aliases(void)
{
	char path[256];
	struct sf_err e;
	CHECK(sf_format_for("root/aliases", "a.json") == &sl_alias_format);
	CHECK(sf_format_for("aliases", "a.json") == &sl_alias_format);
	CHECK(sf_format_for("root/indexes/v", "manifest.json") == NULL);
	CHECK(sf_format_for("root/my-aliases", "a.json") == NULL);
	CHECK(sf_format_for("root/x/shards", "shard-0000.sidx") == &sl_sidx_format);
	static const char *const bad[] = {
		"{\"alias\": \"a\", \"index_version\": \"../etc\"}",
		"{\"alias\": \"a\", \"index_version\": \"..\"}",
		"{\"alias\": \"a\", \"index_version\": \".\"}",
		"{\"alias\": \"a\", \"index_version\": \"\"}",
		"{\"alias\": \"a\", \"index_version\": 7}",
		"{\"alias\": \"a\"",
		"[]",
	};
	snprintf(path, sizeof path, "%s/aliases/a.json", tmp);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		spit(path, bad[i], strlen(bad[i]));
		CHECK_EQ_U(open_err(path, &e), -EINVAL);
		CHECK(strstr(e.msg, "a.json") != NULL);
	}
	const char *ok = "{\"alias\": \"b\", \"index_version\": \"pq\"}";
	spit(path, ok, strlen(ok));
	struct sf_view *v = open_ok(path);
	if (v) {
		CHECK_STR(v->root->u.target, "../indexes/pq");
		/* the version exists; the alias field naming another alias is odd */
		CHECK_EQ_U(v->nwarnings, 1);
		CHECK(strstr(v->warnings[0], "\"b\"") != NULL);
		sf_view_unref(v);
	}
}

int main(void)
{
	check_root("main");
	check_root("legacy");
	check_tmp(tmp, sizeof tmp, "test_shardlake");
	CHECK(mkdtemp(tmp) != NULL);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "mkdir -p %s/indexes/bad/shards %s/indexes/pq/shards %s/aliases",
		 tmp, tmp, tmp);
	CHECK(system(cmd) == 0);
	test_bad_shards();
	test_pq_and_manifest();
	test_aliases();
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
	CHECK(system(cmd) == 0);
	CHECK_DONE();
}
