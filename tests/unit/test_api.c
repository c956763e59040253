/* Unit test of the public C API (format/shardfs.h), linked against the
 * shared libshardfs-format and using nothing else of shardfs. Expectations
 * come from the fixtures' upstream truth files and from the fixture bytes
 * read directly. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "shardfs.h"

static char *fixture(const char *rel)
{
	static char path[8192];
	snprintf(path, sizeof path, "%s/%s", fixtures_dir(), rel);
	return path;
}

/* `len` bytes of a file at `off`, read with stdio. */
static unsigned char *file_bytes(const char *path, long off, size_t len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b = malloc(len ? len : 1);
	CHECK(f && b);
	if (!f || !b || fseek(f, off, SEEK_SET) || fread(b, 1, len, f) != len) {
		CHECK(!"fixture bytes readable");
		if (f)
			fclose(f);
		free(b);
		return NULL;
	}
	fclose(f);
	return b;
}

/* The whole file at `path` inside the container, through the API. */
static unsigned char *api_bytes(struct shardfs *h, const char *path, uint64_t *len)
{
	struct shardfs_entry st;
	if (shardfs_stat(h, path, &st) < 0 || st.kind != SHARDFS_FILE || st.error) {
		fprintf(stderr, "stat %s: %s\n", path, shardfs_last_error());
		CHECK(!"api file readable");
		return NULL;
	}
	unsigned char *b = malloc(st.size + 1);
	ssize_t n = shardfs_read(h, path, b, st.size + 1, 0);
	CHECK_EQ_U(n, st.size);
	*len = st.size;
	return b;
}

struct names {
	char seen[64][256];
	int kinds[64];
	int n;
	int stop_after; /* return 7 from the callback once this many were seen */
};

static int collect(const struct shardfs_entry *e, void *arg)
{
	struct names *ns = arg;
	if (ns->n < 64) {
		snprintf(ns->seen[ns->n], sizeof ns->seen[0], "%s", e->name);
		ns->kinds[ns->n] = e->kind;
	}
	ns->n++;
	return ns->stop_after && ns->n == ns->stop_after ? 7 : 0;
}

static int find_name(const struct names *ns, const char *name)
{
	for (int i = 0; i < ns->n && i < 64; i++)
		if (strcmp(ns->seen[i], name) == 0)
			return i;
	return -1;
}

/* tet: every dataset is a directory of the root, and every stored tile
 * (.shardfs/tiles/<ds>/<coords>) is exactly the bytes at its payload
 * offset, per upstream's EXPECTED.json. */
static void test_tet(void)
{
	json_error_t je;
	json_t *truth = json_load_file(fixture("tet/EXPECTED.json"), 0, &je);
	CHECK(truth);
	if (!truth)
		return;
	size_t i;
	json_t *file;
	int files = 0, tiles = 0;
	json_array_foreach(json_object_get(truth, "files"), i, file) {
		const char *name = json_string_value(json_object_get(file, "file"));
		if (strcmp(json_string_value(json_object_get(file, "upstream_parse")), "ok") != 0)
			continue;
		char path[1024];
		snprintf(path, sizeof path, "tet/%s", name);
		char *full = strdup(fixture(path));
		struct shardfs *h = NULL;
		int rc = shardfs_open(full, &h);
		CHECK_EQ_U(rc, 0);
		if (rc) {
			free(full);
			continue;
		}
		files++;
		CHECK_STR(shardfs_format(h), "tet");
		struct names ns = { .n = 0 };
		CHECK_EQ_U(shardfs_list(h, "", collect, &ns), 0);
		CHECK(find_name(&ns, ".shardfs") < 0);
		json_t *datasets = json_object_get(file, "datasets"), *ds, *chunk;
		size_t j;
		json_array_foreach(datasets, j, ds) {
			int at = find_name(&ns, json_string_value(json_object_get(ds, "name")));
			CHECK(at >= 0 && ns.kinds[at] == SHARDFS_DIR);
		}
		json_array_foreach(json_object_get(file, "chunks"), j, chunk) {
			json_t *d = json_array_get(datasets, (size_t)json_integer_value(
							       json_object_get(chunk, "dataset_id")));
			char tile[1024];
			int n = snprintf(tile, sizeof tile, ".shardfs/tiles/%s/",
					 json_string_value(json_object_get(d, "name")));
			size_t k;
			json_t *c;
			json_array_foreach(json_object_get(chunk, "coords"), k, c)
				n += snprintf(tile + n, sizeof tile - (size_t)n, "%s%lld", k ? "." : "",
					      (long long)json_integer_value(c));
			if (json_integer_value(json_object_get(chunk, "codec")) != 0)
				continue;
			size_t stored = (size_t)json_integer_value(json_object_get(chunk, "stored_byte_len"));
			unsigned char *want = file_bytes(full, (long)json_integer_value(
								   json_object_get(chunk, "payload_offset")), stored);
			uint64_t got_len = 0;
			unsigned char *got = api_bytes(h, tile, &got_len);
			CHECK_EQ_U(got_len, stored);
			CHECK(want && got && got_len == stored && memcmp(want, got, stored) == 0);
			tiles++;
			free(want);
			free(got);
		}
		shardfs_close(h);
		free(full);
	}
	CHECK(files >= 5);
	CHECK(tiles >= 150);
	json_decref(truth);
}

struct piece_reader {
	struct shardfs *h;
	const char *path;
	const unsigned char *whole;
	uint64_t len;
	int mismatches;
};

static void *read_in_pieces(void *arg)
{
	struct piece_reader *r = arg;
	unsigned char piece[97];
	for (uint64_t off = 0; off < r->len; off += sizeof piece) {
		ssize_t n = shardfs_read(r->h, r->path, piece, sizeof piece, off);
		uint64_t want = r->len - off < sizeof piece ? r->len - off : sizeof piece;
		if (n < 0 || (uint64_t)n != want || memcmp(piece, r->whole + off, want) != 0)
			r->mismatches++;
	}
	return NULL;
}

/* tsumugi: a zstd region decodes to its truth length, its .zst twin is the
 * stored bytes, and reading it in pieces from two threads at once (the
 * handle's one-part cache in use) gives the same bytes as one whole read. */
static void test_tsumugi(void)
{
	static const char *kinds[] = { NULL, "lexical", "forward", "feature", "graph",
				       "vector", "dictionary" };
	json_error_t je;
	json_t *truth = json_load_file(fixture("tsumugi/gold_prod.tsumugi.truth.json"), 0, &je);
	CHECK(truth);
	if (!truth)
		return;
	char *full = strdup(fixture("tsumugi/gold_prod.tsumugi"));
	struct shardfs *h = NULL;
	CHECK_EQ_U(shardfs_open(full, &h), 0);
	if (h)
		CHECK_STR(shardfs_format(h), "tsumugi");
	size_t i;
	json_t *r;
	int zst = 0;
	/* held past shardfs_close: a decoded region and a stored one */
	struct shardfs_hold *held[2] = { NULL, NULL };
	const void *held_data[2] = { NULL, NULL };
	unsigned char *held_want[2] = { NULL, NULL };
	uint64_t held_len[2] = { 0, 0 };
	json_array_foreach(json_object_get(truth, "regions"), i, r) {
		json_int_t kind = json_integer_value(json_object_get(r, "kind"));
		if (!h || json_integer_value(json_object_get(r, "codec")) != 1 ||
		    !json_is_true(json_object_get(r, "first_of_kind")) || kind < 1 || kind > 6)
			continue;
		char path[256], zpath[256];
		snprintf(path, sizeof path, "regions/%s", kinds[kind]);
		snprintf(zpath, sizeof zpath, "regions/%s.zst", kinds[kind]);
		uint64_t len = 0, zlen = 0;
		unsigned char *whole = api_bytes(h, path, &len);
		unsigned char *stored = api_bytes(h, zpath, &zlen);
		CHECK_EQ_U(len, json_integer_value(json_object_get(r, "raw_length")));
		size_t slen = (size_t)json_integer_value(json_object_get(r, "length"));
		unsigned char *want = file_bytes(full, (long)json_integer_value(json_object_get(r, "offset")), slen);
		CHECK(stored && want && zlen == slen && memcmp(stored, want, slen) == 0);
		if (whole) {
			struct piece_reader pr[2] = { { h, path, whole, len, 0 }, { h, path, whole, len, 0 } };
			pthread_t t;
			CHECK_EQ_U(pthread_create(&t, NULL, read_in_pieces, &pr[0]), 0);
			read_in_pieces(&pr[1]);
			pthread_join(t, NULL);
			CHECK_EQ_U(pr[0].mismatches + pr[1].mismatches, 0);
		}
		if (!held[0] && whole && stored) {
			const char *paths[2] = { path, zpath };
			for (int k = 0; k < 2; k++) {
				ssize_t n = shardfs_hold(h, paths[k], 0, SIZE_MAX, &held_data[k], &held[k]);
				CHECK_EQ_U(n, k ? zlen : len);
				held_len[k] = k ? zlen : len;
				/* the decoded region is the cache's, the stored one the file's pages */
				CHECK_EQ_U(held[k] ? shardfs_hold_mapped(held[k]) : -1, k);
			}
			held_want[0] = whole;
			held_want[1] = stored;
			whole = stored = NULL;
			/* a piece of it, and nothing past the end */
			const void *d;
			struct shardfs_hold *p = NULL;
			CHECK_EQ_U(shardfs_hold(h, path, 3, 5, &d, &p), 5);
			CHECK(p && memcmp(d, held_want[0] + 3, 5) == 0);
			shardfs_release(p);
			CHECK_EQ_U(shardfs_hold(h, path, len + 1, 5, &d, &p), 0);
			shardfs_release(p);
		}
		zst++;
		free(whole);
		free(stored);
		free(want);
	}
	CHECK(zst >= 2);
	shardfs_close(h);
	for (int k = 0; k < 2; k++) {
		CHECK(held[k] && memcmp(held_data[k], held_want[k], held_len[k]) == 0);
		/* a copy of the held bytes, checked, also past close */
		char *copy = malloc(held_len[k] + 1);
		CHECK(copy && shardfs_hold_copy(held[k], copy) == 0);
		CHECK(copy && memcmp(copy, held_want[k], held_len[k]) == 0);
		free(copy);
		shardfs_release(held[k]);
		free(held_want[k]);
	}
	free(full);
	json_decref(truth);
}

/* Failures return negative errnos with a message naming what was wrong. */
static void test_errors(void)
{
	struct shardfs *h = NULL;
	CHECK(shardfs_open(fixture("tet/no-such-file.tet"), &h) < 0);
	CHECK(strstr(shardfs_last_error(), "no-such-file.tet") != NULL);
	CHECK_EQ_U(shardfs_open(fixture("tet/EXPECTED.json"), &h), -EPROTONOSUPPORT);

	/* a torn copy (the first half of the file) does not open */
	char dir[64];
	check_tmp(dir, sizeof dir, "shardfs-api");
	CHECK(mkdtemp(dir) != NULL);
	char torn[4096];
	snprintf(torn, sizeof torn, "%s/torn.tet", dir);
	unsigned char *half = file_bytes(fixture("tet/large.tet"), 0, 11904);
	FILE *f = fopen(torn, "wb");
	CHECK(f && half && fwrite(half, 1, 11904, f) == 11904);
	if (f)
		fclose(f);
	free(half);
	CHECK(shardfs_open(torn, &h) < 0);
	CHECK(shardfs_last_error()[0] != 0);
	unlink(torn);
	rmdir(dir);

	CHECK_EQ_U(shardfs_open(fixture("tet/sample.tet"), &h), 0);
	if (!h)
		return;
	char buf[64];
	struct shardfs_entry st;
	CHECK_EQ_U(shardfs_stat(h, "nothing/here", &st), -ENOENT);
	CHECK(shardfs_last_error()[0] != 0);
	CHECK_EQ_U(shardfs_read(h, "temperature", buf, sizeof buf, 0), -EISDIR);
	CHECK_EQ_U(shardfs_list(h, "temperature/.zarray", collect, &(struct names){ .n = 0 }), -ENOTDIR);
	CHECK_EQ_U(shardfs_stat(h, "temperature/.zarray", &st), 0);
	CHECK_EQ_U(st.kind, SHARDFS_FILE);
	CHECK_EQ_U(shardfs_read(h, "temperature/.zarray", buf, sizeof buf, st.size), 0);
	CHECK_EQ_U(shardfs_read(h, "temperature/.zarray", buf, sizeof buf, st.size + 100), 0);
	CHECK_EQ_U(shardfs_read(h, "temperature/.zarray", buf, 1, st.size - 1), 1);
	CHECK(buf[0] == '}' || buf[0] == '\n');
	/* a callback's non-zero value stops the listing and is returned */
	struct names ns = { .n = 0, .stop_after = 1 };
	CHECK_EQ_U(shardfs_list(h, "", collect, &ns), 7);
	CHECK_EQ_U(ns.n, 1);
	/* the hidden .shardfs resolves though it is never listed */
	CHECK_EQ_U(shardfs_stat(h, ".shardfs/verify", &st), 0);
	uint64_t vlen = 0;
	unsigned char *report = api_bytes(h, ".shardfs/verify", &vlen);
	CHECK(report && vlen >= 11 && memcmp(report, "status: ok\n", 11) == 0);
	free(report);
	shardfs_close(h);
}

/* Which files get a view by their names (shardfs_view_ext), as the mount
 * places them: an unindexed tar gets one, a fold's shard none. */
static void test_view_ext(void)
{
	const char *const names[] = { "a.tar", "f.taridx", "f_0.tar", "n.txt", "w-0.tar", "w.taridx",
				      "x.tet" };
	size_t n = sizeof names / sizeof names[0];
	CHECK_STR(shardfs_view_ext("/d", "a.tar", names, n), ".tar");
	CHECK_STR(shardfs_view_ext("/d", "f.taridx", names, n), ".taridx");
	CHECK_STR(shardfs_view_ext("/d", "x.tet", names, n), ".tet");
	CHECK(!shardfs_view_ext("/d", "f_0.tar", names, n));
	CHECK(!shardfs_view_ext("/d", "w-0.tar", names, n));
	CHECK(!shardfs_view_ext("/d", "n.txt", names, n));
	CHECK(!shardfs_view_ext("/d", ".tar", names, n));
	/* an alias only in a directory named aliases */
	CHECK(!shardfs_view_ext("/d", "v.json", names, n));
	CHECK_STR(shardfs_view_ext("/lake/aliases", "v.json", names, n), ".json");
}

int main(void)
{
	test_view_ext();
	test_tet();
	test_tsumugi();
	test_errors();
	CHECK_DONE();
}
