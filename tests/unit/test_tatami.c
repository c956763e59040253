/* tatami: the upstream-written fixtures must show exactly what upstream's
 * reader recovers (their .upstream.json), and damaged copies must fail the
 * way docs/design.md §3 says: no view when the footer/header is bad, EIO on the one
 * file whose pages are bad. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "sf_bytes.h"
#include "views.h"
#include "sf_view_impl.h"

static int hexval(char c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* One decoded chunk against the truth's "values" list. */
static void check_chunk(struct sf_view *v, int g, const char *name, const char *type, json_t *want)
{
	char path[256];
	uint8_t *valid = NULL, *vals = NULL, *offs = NULL, *data = NULL;
	size_t nvalid = 0, nvals = 0, noffs = 0, ndata = 0;
	size_t rows = json_array_size(want);
	snprintf(path, sizeof path, "rowgroups/%d/%s/valid.bin", g, name);
	CHECK(read_view(v, path, &valid, &nvalid) == 0);
	CHECK_EQ_U(nvalid, rows);
	bool var = !strcmp(type, "string") || !strcmp(type, "bytes") || !strcmp(type, "blobref");
	if (var) {
		snprintf(path, sizeof path, "rowgroups/%d/%s/offsets.bin", g, name);
		CHECK(read_view(v, path, &offs, &noffs) == 0);
		snprintf(path, sizeof path, "rowgroups/%d/%s/data.bin", g, name);
		CHECK(read_view(v, path, &data, &ndata) == 0);
		CHECK_EQ_U(noffs, 8 * (rows + 1));
	} else {
		snprintf(path, sizeof path, "rowgroups/%d/%s/values.bin", g, name);
		CHECK(read_view(v, path, &vals, &nvals) == 0);
	}
	size_t w = rows ? nvals / rows : 0;
	for (size_t i = 0; i < rows && nvalid == rows; i++) {
		json_t *x = json_array_get(want, i);
		CHECK_EQ_U(valid[i], !json_is_null(x));
		if (var) {
			uint64_t a = sf_le64(offs + 8 * i), z = sf_le64(offs + 8 * i + 8);
			const char *s = json_is_string(x) ? json_string_value(x) : "";
			if (!strcmp(type, "string")) {
				CHECK(z - a == strlen(s) && memcmp(data + a, s, z - a) == 0);
			} else {
				bool same = z - a == strlen(s) / 2;
				for (size_t k = 0; same && k < z - a; k++)
					same = data[a + k] == (hexval(s[2 * k]) << 4 | hexval(s[2 * k + 1]));
				CHECK(same);
			}
			continue;
		}
		const uint8_t *p = vals + i * w;
		if (json_is_null(x)) {
			for (size_t k = 0; k < w; k++)
				CHECK_EQ_U(p[k], 0);
		} else if (!strcmp(type, "bool")) {
			CHECK_EQ_U(p[0], json_is_true(x));
		} else if (!strcmp(type, "float32")) {
			CHECK(json_is_string(x) ? isnan(sf_lef32(p)) : sf_lef32(p) == (float)json_number_value(x));
		} else if (!strcmp(type, "float64")) {
			CHECK(json_is_string(x) ? isnan(sf_lef64(p)) : sf_lef64(p) == json_number_value(x));
		} else {
			uint64_t got = 0;
			for (size_t k = 0; k < w; k++)
				got |= (uint64_t)p[k] << (8 * k);
			uint64_t mask = w == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * w)) - 1;
			CHECK_EQ_U(got, (uint64_t)json_integer_value(x) & mask);
		}
	}
	free(valid);
	free(vals);
	free(offs);
	free(data);
}

static void check_fixture(const char *file)
{
	char path[1024], truth[1100];
	snprintf(path, sizeof path, "%s/tatami/%s", fixtures_dir(), file);
	snprintf(truth, sizeof truth, "%s.upstream.json", path);
	json_error_t je;
	json_t *t = json_load_file(truth, 0, &je);
	CHECK(t != NULL);
	struct sf_view *v = NULL;
	struct sf_err e = { { 0 } };
	CHECK(sf_open_path(path, NULL, &v, &e) == 0);
	if (!t || !v) {
		fprintf(stderr, "%s: %s\n", file, e.msg);
		json_decref(t);
		return;
	}
	uint8_t *buf = NULL;
	size_t len = 0;
	CHECK(read_view(v, ".shardfs/info.txt", &buf, &len) == 0);
	CHECK_STR((char *)buf, json_string_value(json_object_get(t, "inspect")));
	free(buf);
	json_t *schema = json_object_get(t, "schema"), *groups = json_object_get(t, "row_groups");
	for (size_t g = 0; g < json_array_size(groups); g++) {
		json_t *chunks = json_object_get(json_array_get(groups, g), "chunks");
		for (size_t c = 0; c < json_array_size(chunks); c++) {
			json_t *ch = json_array_get(chunks, c);
			json_t *fd = json_array_get(schema, json_integer_value(json_object_get(ch, "column_id")));
			check_chunk(v, (int)g, json_string_value(json_object_get(fd, "name")),
				    json_string_value(json_object_get(fd, "type")),
				    json_object_get(json_object_get(ch, "decoded"), "values"));
		}
	}
	/* rows.jsonl: one line per row, the first ones exactly `tatami cat`'s */
	CHECK(read_view(v, "rows.jsonl", &buf, &len) == 0);
	size_t lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += buf[i] == '\n';
	CHECK_EQ_U(lines, json_integer_value(json_object_get(json_object_get(t, "header"), "row_count")));
	json_t *head = json_object_get(t, "cat_head");
	char *line = (char *)buf;
	for (size_t i = 0; i < json_array_size(head) && line; i++) {
		char *nl = strchr(line, '\n');
		*nl = 0;
		CHECK_STR(line, json_string_value(json_array_get(head, i)));
		line = nl + 1;
	}
	free(buf);
	json_t *inv = json_object_get(t, "inverted");
	if (inv) {
		json_t *terms = json_object_get(inv, "terms");
		CHECK(read_view(v, "inverted/terms.txt", &buf, &len) == 0);
		size_t n = 0;
		for (char *l = (char *)buf; l && *l; n++) {
			char *nl = strchr(l, '\n'), *tab = strchr(l, '\t');
			*nl = 0;
			*tab = 0;
			json_t *want = json_object_get(terms, l);
			CHECK(want && json_integer_value(json_object_get(want, "df")) == atoll(tab + 1));
			l = nl + 1;
		}
		CHECK_EQ_U(n, json_object_size(terms));
		free(buf);
	}
	CHECK(read_view(v, ".shardfs/verify", &buf, &len) == 0);
	CHECK(strncmp((char *)buf, "status: ok\n", 11) == 0);
	free(buf);
	sf_view_unref(v);
	json_decref(t);
}

/* Writes a copy of a fixture with one byte changed (or cut to `keep`). */
static void damaged(const char *file, const char *out, long at, uint8_t xor, long keep)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/tatami/%s", fixtures_dir(), file);
	size_t n;
	uint8_t *b = slurp(path, &n);
	CHECK(b != NULL && (at < 0 || (size_t)at < n) && (keep < 0 || (size_t)keep <= n));
	if (!b)
		return;
	if (at >= 0)
		b[at] ^= xor;
	if (keep >= 0)
		n = (size_t)keep;
	spit(out, b, n);
	free(b);
}

static void test_damage(void)
{
	char dir[64];
	check_tmp(dir, sizeof dir, "test-tatami");
	CHECK(mkdtemp(dir) != NULL);
	char p[128];
	snprintf(p, sizeof p, "%s/t.tatami", dir);
	struct sf_view *v = NULL;
	struct sf_err e = { { 0 } };
	uint8_t *buf = NULL;
	size_t len = 0;

	/* g06 (spec §22): footer at 114, page payload at 96, header CRC at 60 */
	damaged("g06_tiny.tatami", p, 120, 1, -1);
	CHECK(sf_open_path(p, NULL, &v, &e) < 0 && strstr(e.msg, "footer checksum mismatch"));
	damaged("g06_tiny.tatami", p, 20, 1, -1);
	CHECK(sf_open_path(p, NULL, &v, &e) < 0 && strstr(e.msg, "header checksum mismatch"));
	damaged("g06_tiny.tatami", p, -1, 0, 189);
	CHECK(sf_open_path(p, NULL, &v, &e) < 0 && strstr(e.msg, "bad end magic"));
	damaged("g06_tiny.tatami", p, -1, 0, 40);
	CHECK(sf_open_path(p, NULL, &v, &e) < 0 && strstr(e.msg, "too small"));

	/* a bad page CRC: the view opens, the files stat, reads fail EIO */
	damaged("g06_tiny.tatami", p, 100, 0x40, -1);
	CHECK(sf_open_path(p, NULL, &v, &e) == 0);
	if (v) {
		struct sf_node *n = NULL;
		CHECK(sf_view_walk(v->root, "columns/n/values.bin", &n, &e) == 0);
		CHECK(n && sf_file_ready(n, &sf_nocache, &e) == 0 && n->u.file.size == 12);
		CHECK(read_view(v, "columns/n/values.bin", &buf, &len) == -EIO);
		CHECK(read_view(v, "rowgroups/0/n/values.jsonl", &buf, &len) == -EIO);
		CHECK(read_view(v, "rows.jsonl", &buf, &len) == -EIO);
		/* chunk.bin is the stored bytes: still readable */
		CHECK(read_view(v, "rowgroups/0/n/chunk.bin", &buf, &len) == 0 && len == 50);
		free(buf);
		CHECK(read_view(v, ".shardfs/verify", &buf, &len) == 0);
		CHECK(strncmp((char *)buf, "status: failed\n", 15) == 0 && strstr((char *)buf, "checksum"));
		free(buf);
		sf_view_unref(v);
	}

	/* g02: a damaged blob run fails only the blobs it holds; info.json says
	 * where the first run of `body` (blob column 2 of 2) is */
	char orig[1024];
	snprintf(orig, sizeof orig, "%s/tatami/g02_blob.tatami", fixtures_dir());
	long run = -1;
	if (sf_open_path(orig, NULL, &v, &e) == 0) {
		CHECK(read_view(v, ".shardfs/info.json", &buf, &len) == 0);
		json_error_t je;
		json_t *j = json_loads((char *)buf, 0, &je);
		json_t *r = json_array_get(json_object_get(json_array_get(json_object_get(j, "blob_columns"), 1), "runs"), 0);
		run = (long)json_integer_value(json_object_get(r, "record_offset"));
		json_decref(j);
		free(buf);
		sf_view_unref(v);
	}
	CHECK(run > 0);
	damaged("g02_blob.tatami", p, run + 40, 0x10, -1);
	CHECK(sf_open_path(p, NULL, &v, &e) == 0);
	if (v) {
		CHECK(read_view(v, "columns/id/values.bin", &buf, &len) == 0);
		free(buf);
		int failed = 0, ok = 0;
		struct sf_node *d = NULL;
		CHECK(sf_view_walk(v->root, "blobs/body", &d, &e) == 0 && sf_dir_ready(d, &e) == 0);
		for (size_t i = 0; d && i < sf_dir_count(d); i++) {
			char path[64];
			struct sf_dirent de;
			sf_dir_entry(d, i, &de);
			snprintf(path, sizeof path, "blobs/body/%s", de.name);
			int rc = read_view(v, path, &buf, &len);
			if (rc == 0)
				free(buf);
			failed += rc == -EIO;
			ok += rc == 0;
		}
		CHECK(failed > 0 && ok > 0);
		sf_view_unref(v);
	}
	unlink(p);
	rmdir(dir);
}

int main(void)
{
	const char *files[] = { "g01_alltypes.tatami", "g02_blob.tatami", "g03_search_full.tatami",
				"g04_search_snippet.tatami", "g05_empty.tatami", "g06_tiny.tatami" };
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		check_fixture(files[i]);
	test_damage();
	CHECK_DONE();
}
