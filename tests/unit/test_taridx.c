/* taridx: the fold view against upstream's fixtures (EXPECTED.json), the
 * index builder against upstream's indexes, the flat-name lookup without a
 * listing, and hostile input made here (bad names, torn indexes, rows past
 * the end of a tar, missing shards). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "../fuzz/tar_header.h"
#include "check.h"
#include "sf_bytes.h"
#include "sf_format.h"
#include "taridx/tx.h"
#include "sf_read.h"
#include "sf_recent.h"
#include "sf_view_impl.h"

/* The whole content of a view file, or NULL when a read fails (*rc). */
static struct sf_buf *read_all(struct sf_node *f, int *rc)
{
	struct sf_err e;
	*rc = sf_file_ready(f, &sf_nocache, &e);
	if (*rc)
		return NULL;
	struct sf_readv rv = { 0 };
	*rc = sf_file_read(f, 0, f->u.file.size, &sf_nocache, &rv, &e);
	struct sf_buf *b = *rc ? NULL : sf_buf_new(rv.bytes);
	if (b)
		sf_readv_copy(&rv, b->data, NULL);
	sf_readv_release(&rv);
	return b;
}

static struct sf_node *walk(struct sf_view *v, const char *path)
{
	struct sf_node *n = NULL;
	struct sf_err e;
	return sf_view_walk(v->root, path, &n, &e) ? NULL : n;
}

/* The full path of fixture row i as tar readers see it: the GNU long name
 * or pax path of the record before it, else ustar prefix + "/" + name. */
static void full_path(const char *casedir, json_t *rows, size_t i, char *out, size_t cap)
{
	json_t *row = json_array_get(rows, i), *prev = i ? json_array_get(rows, i - 1) : NULL;
	const char *name = json_string_value(json_object_get(row, "member_name"));
	const char *prefix = json_string_value(json_object_get(row, "ustar_prefix"));
	snprintf(out, cap, "%s%s%s", prefix, *prefix ? "/" : "", name);
	const char *ptf = prev ? json_string_value(json_object_get(prev, "typeflag")) : "";
	if (strcmp(ptf, "L") && strcmp(ptf, "x"))
		return;
	char path[8192];
	snprintf(path, sizeof path, "%s/%s", casedir, json_string_value(json_object_get(prev, "tar")));
	size_t tlen;
	uint8_t *t = slurp(path, &tlen);
	if (!t)
		return;
	uint64_t off = (uint64_t)json_integer_value(json_object_get(prev, "offset")) + 512;
	uint64_t size = (uint64_t)json_integer_value(json_object_get(prev, "size"));
	const char *data = (const char *)t + off;
	if (!strcmp(ptf, "L")) {
		snprintf(out, cap, "%.*s", (int)size, data);
	} else {
		const char *p = memmem(data, size, " path=", 6);
		const char *nl = p ? memchr(p, '\n', size - (size_t)(p - data)) : NULL;
		if (nl)
			snprintf(out, cap, "%.*s", (int)(nl - p - 6), p + 6);
	}
	free(t);
}

/* Every row's payload (rows/<row>) and every member at its path equal the
 * bytes upstream recorded: read independently at the recorded offset. */
static void check_fold(const char *casedir, const char *fold, json_t *fj)
{
	char path[8192], full[8192];
	snprintf(path, sizeof path, "%s/%s", casedir, json_string_value(json_object_get(fj, "taridx")));
	struct sf_view *v = NULL;
	struct sf_err e;
	CHECK(sf_open_path(path, NULL, &v, &e) == 0);
	if (!v)
		return;
	struct tx_fold *f = v->state;
	json_t *h = json_object_get(fj, "header");
	CHECK_EQ_U(f->ix.n_rows, json_integer_value(json_object_get(h, "n_rows")));
	CHECK_EQ_U(f->ix.n_stems, json_integer_value(json_object_get(h, "n_stems")));
	CHECK_EQ_U(f->ix.n_ext, json_integer_value(json_object_get(h, "n_ext")));
	json_t *tars = json_object_get(fj, "tars_in_fid_order");
	CHECK_EQ_U(f->nshards, json_array_size(tars));
	for (size_t i = 0; i < f->nshards && i < json_array_size(tars); i++)
		CHECK_STR(f->shards[i].name, json_string_value(json_array_get(tars, i)));
	json_t *exts = json_object_get(fj, "extensions");
	for (size_t i = 0; i < f->ix.n_ext && i < json_array_size(exts); i++) {
		const char *want = json_string_value(json_array_get(exts, i));
		CHECK(f->ix.ext[i].len == strlen(want) && memcmp(f->ix.ext[i].p, want, strlen(want)) == 0);
	}
	json_t *rows = json_object_get(fj, "rows"), *row;
	size_t i;
	/* flat names resolve without listing the fold */
	json_array_foreach(rows, i, row) {
		const char *tf = json_string_value(json_object_get(row, "typeflag"));
		full_path(casedir, rows, i, full, sizeof full);
		if (strcmp(tf, "0") || strchr(full, '/') || !json_is_true(json_object_get(row, "header_stem_hashes_to_keyhash")))
			continue;
		struct sf_node *n = NULL;
		CHECK(sf_dir_find(v->root, full, &n, &e) == 0 && n);
		if (!n || v->root->u.dir.populated)
			fprintf(stderr, "flat name %s of %s/%s not found through the index\n", full, casedir, fold);
		CHECK(!v->root->u.dir.populated);
	}
	/* a name no member has is absent without listing the fold, whatever
	 * records (directories, pax, long names) the fold holds */
	size_t x = 0;
	while (x < f->ix.n_ext && !f->ix.ext[x].len)
		x++;
	const char *misses[] = { "no-such-key-xyz", "no-such-key-xyz.unknown-ext", NULL };
	char missing[300];
	if (x < f->ix.n_ext) {
		snprintf(missing, sizeof missing, "no-such-key-xyz.%.*s", (int)f->ix.ext[x].len,
			 (const char *)f->ix.ext[x].p);
		misses[2] = missing;
	}
	for (size_t m = 0; m < 3 && misses[m]; m++) {
		struct sf_node *n = NULL;
		CHECK(sf_dir_find(v->root, misses[m], &n, &e) == 0 && !n);
		CHECK(!v->root->u.dir.populated);
	}
	json_array_foreach(rows, i, row) {
		const char *tar = json_string_value(json_object_get(row, "tar"));
		uint64_t off = (uint64_t)json_integer_value(json_object_get(row, "offset"));
		uint64_t size = (uint64_t)json_integer_value(json_object_get(row, "size"));
		snprintf(path, sizeof path, "%s/%s", casedir, tar);
		size_t tlen;
		uint8_t *t = slurp(path, &tlen);
		CHECK(t && off + 512 + size <= tlen);
		if (!t)
			continue;
		snprintf(path, sizeof path, ".shardfs/rows/%zu", i);
		struct sf_node *n = walk(v, path);
		int rc;
		struct sf_buf *got = n ? read_all(n, &rc) : NULL;
		CHECK(got && got->len == size && memcmp(got->data, t + off + 512, size) == 0);
		sf_buf_unref(got);
		/* members: regular files whose header upstream's stem matches */
		const char *tf = json_string_value(json_object_get(row, "typeflag"));
		if (!strcmp(tf, "0") && json_is_true(json_object_get(row, "header_stem_hashes_to_keyhash"))) {
			full_path(casedir, rows, i, full, sizeof full);
			n = walk(v, full);
			got = n && n->kind == SF_FILE ? read_all(n, &rc) : NULL;
			if (!got)
				fprintf(stderr, "member %s of %s/%s missing\n", full, casedir, fold);
			CHECK(got && got->len == size && memcmp(got->data, t + off + 512, size) == 0);
			sf_buf_unref(got);
		}
		free(t);
	}
	sf_view_unref(v);
}

static void test_fixtures(void)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/taridx/EXPECTED.json", fixtures_dir());
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	CHECK(root != NULL);
	if (!root)
		return;
	const char *cname;
	json_t *c;
	int folds = 0;
	json_object_foreach(json_object_get(root, "cases"), cname, c) {
		const char *fname;
		json_t *fj;
		json_object_foreach(json_object_get(c, "folds"), fname, fj) {
			char dir[4096];
			snprintf(dir, sizeof dir, "%s/taridx/%s", fixtures_dir(), cname);
			check_fold(dir, fname, fj);
			folds++;
		}
	}
	CHECK_EQ_U(folds, 8);
	json_decref(root);
}

/* Links in the edge fold, and verify's verdict on every fixture fold. */
static void test_links_and_verify(void)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/taridx/edge/edge.taridx", fixtures_dir());
	struct sf_view *v = NULL;
	struct sf_err e;
	CHECK(sf_open_path(path, NULL, &v, &e) == 0);
	if (v) {
		struct sf_node *l = walk(v, "d1/link.jpg");
		CHECK(l && l->kind == SF_LINK && strcmp(l->u.target, "a.jpg") == 0);
		struct sf_node *h = walk(v, "d1/hard.cls"), *a = walk(v, "d1/a.cls");
		int rc;
		struct sf_buf *hb = h ? read_all(h, &rc) : NULL, *ab = a ? read_all(a, &rc) : NULL;
		CHECK(hb && ab && hb->len == 1 && ab->len == 1 && hb->data[0] == ab->data[0]);
		sf_buf_unref(hb);
		sf_buf_unref(ab);
		/* directory, long-name and pax records are not members */
		CHECK(walk(v, "p/PaxHeaders") == NULL);
		CHECK(walk(v, "@LongLink") == NULL);
		sf_view_unref(v);
	}
	static const char *const folds[] = { "small/train", "small/val", "gnutar/data", "edge/edge",
					     "crash/wr", "crash/pt", "noncontig/mix", "emptyshard/es" };
	for (size_t i = 0; i < sizeof folds / sizeof folds[0]; i++) {
		snprintf(path, sizeof path, "%s/taridx/%s.taridx", fixtures_dir(), folds[i]);
		CHECK(sf_open_path(path, NULL, &v, &e) == 0);
		struct sf_node *n = v ? walk(v, ".shardfs/verify") : NULL;
		int rc;
		struct sf_buf *b = n ? read_all(n, &rc) : NULL;
		bool ok = b && b->len >= 11 && memcmp(b->data, "status: ok\n", 11) == 0;
		CHECK(ok == (i != 7));
		sf_buf_unref(b);
		if (v)
			sf_view_unref(v);
	}
}

/* The builder writes what upstream wrote, for every fixture fold. */
static void test_builder(void)
{
	static const char *const folds[][2] = {
		{ "small", "train" }, { "small", "val" }, { "gnutar", "data" }, { "edge", "edge" },
		{ "crash", "wr" }, { "crash", "pt" }, { "noncontig", "mix" }, { "emptyshard", "es" },
	};
	for (size_t i = 0; i < sizeof folds / sizeof folds[0]; i++) {
		char dir[4096], path[4200];
		snprintf(dir, sizeof dir, "%s/taridx/%s", fixtures_dir(), folds[i][0]);
		snprintf(path, sizeof path, "%s/%s.taridx", dir, folds[i][1]);
		struct sf_view *v = NULL;
		struct sf_err e;
		CHECK(sf_open_path(path, NULL, &v, &e) == 0);
		if (!v)
			continue;
		struct tx_fold *f = v->state;
		const struct sf_map *maps[8];
		const char *names[8];
		for (size_t k = 0; k < f->nshards; k++) {
			maps[k] = f->shards[k].map;
			names[k] = f->shards[k].name;
		}
		struct sf_buf *out = NULL;
		size_t wlen;
		uint8_t *want = slurp(path, &wlen);
		CHECK(tx_build_index(maps, names, f->nshards, false, NULL, NULL, NULL, &out, &e) == 0);
		CHECK(out && want && out->len == wlen && memcmp(out->data, want, out->len) == 0);
		sf_buf_unref(out);
		free(want);
		sf_view_unref(v);
	}
}

/* ---- hostile folds made here ------------------------------------------ */

/* Appends a ustar member (header + padded data) to b. */
static void tar_add(struct sf_str *b, const char *name, size_t nlen, char type,
		    const char *data, size_t len)
{
	uint8_t h[512];
	tar_header(h, &(struct tar_names){ .name = name, .nlen = nlen }, type, len);
	sf_str_add(b, h, 512);
	sf_str_add(b, data, len);
	static const uint8_t zero[512];
	sf_str_add(b, zero, (512 - len % 512) % 512);
}

static void write_file(const char *dir, const char *name, const void *p, size_t len)
{
	char path[8192];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	spit(path, p, len);
}

/* Ends the tar in `t` (consumed), writes it as <stem>_0000.tar and the
 * index of the tar in `index_from` (consumed; the same rows, or t) as
 * <stem>.taridx into dir; returns the index. */
static struct sf_buf *write_fold_from(const char *dir, const char *stem, struct sf_str *t,
				      struct sf_str *index_from)
{
	static const uint8_t end[1024];
	sf_str_add(t, end, sizeof end);
	sf_str_add(index_from, end, sizeof end);
	char tar[64], index[64];
	snprintf(tar, sizeof tar, "%s_0000.tar", stem);
	snprintf(index, sizeof index, "%s.taridx", stem);
	write_file(dir, tar, t->p, t->len);
	/* the indexer reads files (pread), so the rows' tar is one too */
	char from[PATH_MAX];
	snprintf(from, sizeof from, "%s/%s.from", dir, stem);
	write_file(dir, strrchr(from, '/') + 1, index_from->p, index_from->len);
	struct sf_map *m = NULL;
	struct sf_err e;
	CHECK(sf_map_open(from, &m, &e) == 0);
	const struct sf_map *maps[1] = { m };
	const char *names[1] = { tar };
	struct sf_buf *ix = NULL;
	CHECK(tx_build_index(maps, names, 1, false, NULL, NULL, NULL, &ix, &e) == 0);
	sf_map_unref(m);
	unlink(from);
	if (index_from != t)
		sf_str_free(index_from);
	sf_str_free(t);
	if (ix)
		write_file(dir, index, ix->data, ix->len);
	return ix;
}

/* Ends the tar in `t` (consumed), writes it as <stem>_0000.tar and its
 * index as <stem>.taridx into dir; returns the index. */
static struct sf_buf *write_fold(const char *dir, const char *stem, struct sf_str *t)
{
	return write_fold_from(dir, stem, t, t);
}

/* Writes DIR/h_0000.tar with hostile names and DIR/h.taridx for it. */
static struct sf_buf *make_hostile(const char *dir)
{
	struct sf_str t = { 0 };
	tar_add(&t, "../evil.jpg", 11, '0', "E", 1);
	tar_add(&t, "a\001b.jpg", 7, '0', "C", 1);
	tar_add(&t, "x/../../y.jpg", 13, '0', "Y", 1);
	tar_add(&t, "/abs/z.jpg", 10, '0', "Z", 1);
	tar_add(&t, "p%2Fq.jpg", 9, '0', "P", 1);
	tar_add(&t, ".shardfs", 8, '0', "S", 1);
	tar_add(&t, "dup.jpg", 7, '0', "1", 1);
	tar_add(&t, "dup.jpg", 7, '0', "22", 2);
	tar_add(&t, "ok.jpg", 6, '0', "fine", 4);
	return write_fold(dir, "h", &t);
}

static int open_as(const char *dir, const char *name, const struct sf_host *host,
		   struct sf_view **v)
{
	char path[8192];
	struct sf_err e;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	*v = NULL;
	return sf_open_path(path, host, v, &e);
}

static int open_in(const char *dir, const char *name, struct sf_view **v)
{
	return open_as(dir, name, NULL, v);
}

/* A host that keeps copies, as the C API is. */
static const struct sf_host copying = { .keep_copies = true };

static void expect_content(struct sf_view *v, const char *path, const char *want)
{
	struct sf_node *n = walk(v, path);
	int rc = 0;
	struct sf_buf *b = n && n->kind == SF_FILE ? read_all(n, &rc) : NULL;
	if (!b)
		fprintf(stderr, "%s: missing or unreadable\n", path);
	CHECK(b && b->len == strlen(want) && memcmp(b->data, want, b->len) == 0);
	sf_buf_unref(b);
}

static void test_hostile_names(const char *dir)
{
	struct sf_buf *ix = make_hostile(dir);
	sf_buf_unref(ix);
	struct sf_view *v;
	CHECK(open_in(dir, "h.taridx", &v) == 0);
	if (!v)
		return;
	/* flat name through the index; the later of two same paths wins */
	struct sf_node *n = NULL;
	struct sf_err e;
	CHECK(sf_dir_find(v->root, "dup.jpg", &n, &e) == 0 && n);
	CHECK(!v->root->u.dir.populated);
	expect_content(v, "dup.jpg", "22");
	expect_content(v, "ok.jpg", "fine");
	CHECK(!v->root->u.dir.populated);
	/* a name that is not there: answered (after listing once) */
	CHECK(sf_dir_find(v->root, "nothere.jpg", &n, &e) == 0 && !n);
	/* names stay inside the view, escaped as docs/design.md §3.3 says */
	expect_content(v, "..#1/evil.jpg", "E");
	expect_content(v, "a%01b.jpg", "C");
	expect_content(v, "x/..#1/..#1/y.jpg", "Y");
	expect_content(v, "abs/z.jpg", "Z");
	expect_content(v, "p%252Fq.jpg", "P");
	expect_content(v, ".shardfs#1", "S");
	CHECK(walk(v, ".shardfs/verify") != NULL);
	/* dup.jpg shows once, though the hook made it before the listing */
	int dups = 0;
	for (size_t i = 0; i < sf_dir_count(v->root); i++) {
		struct sf_dirent d;
		sf_dir_entry(v->root, i, &d);
		dups += strncmp(d.name, "dup.jpg", 7) == 0;
	}
	CHECK_EQ_U(dups, 1);
	sf_view_unref(v);
}

/* Appends a pax record "<len> path=<path>\n" as an 'x' member to b. */
/* A pax header with one record `key` (4 bytes) = value. */
static void pax_add_key(struct sf_str *b, const char *key, const char *path)
{
	size_t body = strlen(" path=\n") + strlen(path), len = body + 1;
	while (snprintf(NULL, 0, "%zu", len) + body > len)
		len++;
	char *rec = malloc(len + 1);
	snprintf(rec, len + 1, "%zu %.4s=%s\n", len, key, path);
	tar_add(b, "PaxHeaders/x", 12, 'x', rec, len);
	free(rec);
}

static void pax_add(struct sf_str *b, const char *path)
{
	pax_add_key(b, "path", path);
}

/* Over 4 KiB of pax path shows at its escaped, cut components (docs/design.md
 * §3.3); a path over TX_PATH_MAX is not shown, and verify says so. */
static void test_long_paths(const char *dir)
{
	char *deep = malloc(TX_PATH_MAX + 256), *far = malloc(TX_PATH_MAX + 256), overlong[401];
	size_t d = 0, fl = 0;
	memset(overlong, 'o', 400);
	overlong[400] = 0;
	for (int i = 0; i < 40; i++)
		d += (size_t)sprintf(deep + d, "%s%02d%0108d", i ? "/" : "", i, 0);
	d += (size_t)sprintf(deep + d, "/%s/leaf.jpg", overlong);
	while (fl <= TX_PATH_MAX)
		fl += (size_t)sprintf(far + fl, "%0109d/", 7);
	sprintf(far + fl, "far.jpg");
	/* shardfs-taridx refuses a path the view cannot show: the index is
	 * made from a tar with the same rows whose record for `far` is not a
	 * path, as another indexer would write it */
	struct sf_str t = { 0 }, u = { 0 };
	for (int i = 0; i < 2; i++) {
		struct sf_str *b = i ? &u : &t;
		pax_add(b, deep);
		tar_add(b, "leaf.jpg", 8, '0', "L", 1);
		pax_add_key(b, i ? "note" : "path", far);
		tar_add(b, "far.jpg", 7, '0', "F", 1);
		tar_add(b, "ok.jpg", 6, '0', "fine", 4);
	}
	sf_buf_unref(write_fold_from(dir, "l", &t, &u));
	struct sf_view *v;
	CHECK(open_in(dir, "l.taridx", &v) == 0);
	if (v) {
		/* the over-long component keeps 200 bytes, then ~ and its XXH64 */
		char *shown = malloc(TX_PATH_MAX), *cut = strstr(deep, overlong);
		snprintf(shown, TX_PATH_MAX, "%.*s%.200s~%016llx/leaf.jpg", (int)(cut - deep), deep,
			 overlong, (unsigned long long)XXH64(overlong, 400, 0));
		CHECK(strlen(shown) > 4096);
		expect_content(v, shown, "L");
		expect_content(v, "ok.jpg", "fine");
		struct sf_node *n = NULL;
		struct sf_err e;
		CHECK(sf_dir_find(v->root, "far.jpg", &n, &e) == 0 && !n);
		/* nor any directory of its path */
		char first[110];
		snprintf(first, sizeof first, "%.109s", far);
		CHECK(sf_dir_find(v->root, first, &n, &e) == 0 && !n);
		n = walk(v, ".shardfs/verify");
		int rc = 0;
		struct sf_buf *rep = n ? read_all(n, &rc) : NULL;
		CHECK(rep && memcmp(rep->data, "status: failed\n", 15) == 0);
		CHECK(rep && memmem(rep->data, rep->len, "member not shown: its full path is longer than 65536 bytes", 58));
		sf_buf_unref(rep);
		free(shown);
		sf_view_unref(v);
	}
	free(deep);
	free(far);
}

/* Rows past the end of a tar and missing shards: the rest still reads;
 * a row whose payload runs past its tar's end does not verify, so its
 * member is neither found nor listed, while its rows/ entry keeps the
 * row's size and reads fail EIO. */
static void test_broken(const char *dir)
{
	struct sf_buf *ix = make_hostile(dir);
	if (!ix)
		return;
	struct tx_index p;
	struct sf_err e;
	CHECK(tx_index_parse(ix->data, ix->len, "h", &p, &e) == 0);
	/* row of ok.jpg claims 1 MiB */
	uint64_t last = p.n_rows - 1;
	sf_put_le64(ix->data + p.off_arr + last * 32 + 10, 1 << 20);
	/* row 0 points at a fid with no shard */
	sf_put_le16(ix->data + p.off_arr, 5);
	tx_index_free(&p);
	write_file(dir, "h.taridx", ix->data, ix->len);
	struct sf_view *v;
	CHECK(open_in(dir, "h.taridx", &v) == 0);
	if (v) {
		struct sf_node *n = NULL;
		CHECK(sf_dir_find(v->root, "ok.jpg", &n, &e) == 0 && !n);
		CHECK(!v->root->u.dir.populated);
		/* nor does a name without an extension list the fold */
		CHECK(walk(v, "no-such-name") == NULL && !v->root->u.dir.populated);
		CHECK(walk(v, "ok.jpg") == NULL);
		int rc = 0;
		char rowpath[64];
		snprintf(rowpath, sizeof rowpath, ".shardfs/rows/%llu", (unsigned long long)last);
		n = walk(v, rowpath);
		CHECK(n && sf_file_ready(n, &sf_nocache, &e) == 0 && n->u.file.size == 1 << 20);
		CHECK(n && !read_all(n, &rc) && rc == -EIO);
		CHECK(walk(v, "..#1/evil.jpg") == NULL);
		expect_content(v, "dup.jpg", "22");
		n = walk(v, ".shardfs/verify");
		struct sf_buf *rep = n ? read_all(n, &rc) : NULL;
		CHECK(rep && memcmp(rep->data, "status: failed\n", 15) == 0);
		CHECK(rep && memmem(rep->data, rep->len, "runs past the end", 17));
		CHECK(rep && memmem(rep->data, rep->len, "beyond the 1 shards", 19));
		sf_buf_unref(rep);
		sf_view_unref(v);
	}
	/* torn, truncated and corrupt indexes refuse to open */
	size_t cuts[] = { 0, 10, 63, 64, ix->len - 1, ix->len - 31 };
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		write_file(dir, "h.taridx", ix->data, cuts[i]);
		CHECK(open_in(dir, "h.taridx", &v) != 0 && !v);
	}
	uint8_t saved = ix->data[0];
	ix->data[0] = 'X';
	write_file(dir, "h.taridx", ix->data, ix->len);
	CHECK(open_in(dir, "h.taridx", &v) != 0);
	ix->data[0] = saved;
	sf_put_le32(ix->data + 32, 7); /* n_ext disagrees with the block */
	write_file(dir, "h.taridx", ix->data, ix->len);
	CHECK(open_in(dir, "h.taridx", &v) != 0);
	sf_put_le64(ix->data + 40, UINT64_MAX); /* off_crash past the end */
	write_file(dir, "h.taridx", ix->data, ix->len);
	CHECK(open_in(dir, "h.taridx", &v) != 0);
	sf_buf_unref(ix);
	/* the shard is gone: the fold still opens and says so */
	ix = make_hostile(dir);
	sf_buf_unref(ix);
	char path[4096];
	snprintf(path, sizeof path, "%s/h_0000.tar", dir);
	unlink(path);
	CHECK(open_in(dir, "h.taridx", &v) == 0);
	if (v) {
		CHECK(v->nwarnings == 1);
		struct sf_node *n = NULL;
		CHECK(sf_dir_find(v->root, "ok.jpg", &n, &e) == 0 && !n);
		sf_view_unref(v);
	}
}

/* Shards are ranked by suffix string: "1-" sorts after "1" though its
 * file name sorts before. */
static void test_shard_order(void)
{
	const char *names[] = { "f_1-.tar", "f_1.tar", "f_10.tar", "f_a_b.tar", "f.tar", "g_1.tar", "f_2.tar" };
	struct tx_shard *s = NULL;
	size_t n = 0;
	CHECK(tx_shards_find("f", names, 7, &s, &n) == 0);
	CHECK_EQ_U(n, 4);
	if (n == 4) {
		CHECK_STR(s[0].name, "f_1.tar");
		CHECK_STR(s[1].name, "f_1-.tar");
		CHECK_STR(s[2].name, "f_10.tar");
		CHECK_STR(s[3].name, "f_2.tar");
	}
	tx_shards_free(s, n);
	/* WebDataset's names: "<fold>-<S>.tar" with no '-' in S, only when no
	 * "<fold>_<S>.tar" is there; the fold name may hold '-' */
	const char *wds[] = { "img-train-000010.tar", "img-train-000002.tar", "img-000001.tar",
			      "img-train-x-1.tar", "img-train.tar", "img-val-000000.tar" };
	CHECK(tx_shards_find("img-train", wds, 6, &s, &n) == 0);
	CHECK_EQ_U(n, 2);
	if (n == 2) {
		CHECK_STR(s[0].name, "img-train-000002.tar");
		CHECK_STR(s[1].name, "img-train-000010.tar");
	}
	tx_shards_free(s, n);
	/* "img-train.tar" is img's shard "train", as the rule says */
	CHECK(tx_shards_find("img", wds, 6, &s, &n) == 0);
	CHECK(n == 2 && strcmp(s[0].name, "img-000001.tar") == 0 &&
	      strcmp(s[1].name, "img-train.tar") == 0);
	tx_shards_free(s, n);
	const char *mixed[] = { "m-0.tar", "m_0.tar", "m-1.tar" };
	CHECK(tx_shards_find("m", mixed, 3, &s, &n) == 0);
	CHECK(n == 1 && strcmp(s[0].name, "m_0.tar") == 0);
	tx_shards_free(s, n);
}

/* Stems as upstream derives them (spec §4.1), including Python's UTF-8
 * replacement of ill-formed bytes and lowercased extensions. */
static void test_keys(void)
{
	struct tx_key k;
	tx_key_from((const uint8_t *)"sub/dir/PHOTO.B.JPG", 19, &k);
	CHECK(k.stem_len == 5 && !memcmp(k.stem, "PHOTO", 5));
	CHECK(k.ext_len == 5 && !memcmp(k.ext, "b.jpg", 5));
	CHECK_EQ_U(k.hash, XXH64("PHOTO", 5, 0));
	tx_key_from((const uint8_t *)"d1/", 3, &k);
	CHECK_EQ_U(k.hash, 0xef46db3751d8e999ull);
	/* b'\xe2\x82x\xff.TXT' decodes to U+FFFD 'x' U+FFFD */
	tx_key_from((const uint8_t *)"\xe2\x82x\xff.\xc3\x89T", 8, &k);
	CHECK(k.stem_len == 7 && !memcmp(k.stem, "\xEF\xBF\xBDx\xEF\xBF\xBD", 7));
	CHECK(k.ext_len == 3 && !memcmp(k.ext, "\xc3\xa9t", 3));
	uint8_t h[512] = { 0 };
	memcpy(h + 124, " 0000644 \0", 10);
	uint64_t size = 0;
	CHECK(tx_hdr_size(h, &size) == 0 && size == 0644);
	h[124] = (uint8_t)0x80;
	CHECK(tx_hdr_size(h, &size) != 0);
}

/* Appends a pax header holding `text` (records already formed). */
static void pax_text(struct sf_str *b, const char *text)
{
	tar_add(b, "PaxHeaders/m", 12, 'x', text, strlen(text));
}

/* Appends "LEN key=value\n" to s. */
static void pax_rec(struct sf_str *s, const char *key, const char *val)
{
	size_t body = strlen(key) + strlen(val) + 3, len = body + 1;
	while ((size_t)snprintf(NULL, 0, "%zu", len) + body > len)
		len++;
	char rec[256];
	snprintf(rec, sizeof rec, "%zu %s=%s\n", len, key, val);
	sf_str_add(s, rec, strlen(rec));
}

/* Numbers as tar readers read them, and the entry reader on hostile maps:
 * each is refused with its cause in time linear in its bytes. */
static void test_headers(void)
{
	uint64_t v = 1;
	CHECK(tx_num((const uint8_t *)"\0\0\0\0\0\0\0\0\0\0\0\0", 12, &v) == 0 && v == 0);
	CHECK(tx_num((const uint8_t *)"   17 \0", 8, &v) == 0 && v == 017);
	CHECK(tx_num((const uint8_t *)"0o17", 4, &v) != 0);
	uint8_t b256[12] = { 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 5 };
	CHECK(tx_num(b256, 12, &v) == 0 && v == (8ull << 30) + 5);
	b256[0] = 0xFF;
	CHECK(tx_num(b256, 12, &v) != 0);

	/* pax 1.0 with a map of more pieces than allowed: bounded, refused */
	struct sf_str recs = { 0 }, t = { 0 }, map = { 0 };
	pax_rec(&recs, "GNU.sparse.major", "1");
	pax_rec(&recs, "GNU.sparse.minor", "0");
	pax_rec(&recs, "GNU.sparse.realsize", "100");
	sf_str_addc(&recs, 0);
	pax_text(&t, (const char *)recs.p);
	sf_str_add(&map, "70000\n", 6);
	for (int i = 0; i < 70000; i++)
		sf_str_add(&map, "0\n0\n", 4);
	tar_add(&t, "GNUSparseFile.0/s.bin", 21, '0', (const char *)map.p, map.len);
	struct tx_entry en;
	const char *why = NULL;
	CHECK(tx_entry_read(t.p, t.len, 0, &en) == 0 && !en.bad && en.sparse == TX_SPARSE_10 &&
	      en.size == 100 && en.nrec == 1 && en.hdr == 1024);
	CHECK(tx_sparse_each(t.p, 0, &en, NULL, NULL, &why) == -EINVAL && why && strstr(why, "more than 65536"));
	sf_str_free(&t);
	sf_str_free(&map);
	sf_str_free(&recs);

	/* pax 0.1: pieces must go forward and account for the stored bytes */
	static const char *const maps[] = { "0,2,10,2", "10,2,0,2", "0,2,10,3", "0,2,10" };
	for (int i = 0; i < 4; i++) {
		pax_rec(&recs, "GNU.sparse.size", "12");
		pax_rec(&recs, "GNU.sparse.map", maps[i]);
		pax_rec(&recs, "GNU.sparse.name", "real/name.bin");
		sf_str_addc(&recs, 0);
		pax_text(&t, (const char *)recs.p);
		tar_add(&t, "GNUSparseFile.0/n.bin", 21, '0', "abcd", 4);
		CHECK(tx_entry_read(t.p, t.len, 0, &en) == 0 && !en.bad && en.size == 12 &&
		      en.pax_path.len == 13 && !memcmp(en.pax_path.p, "real/name.bin", 13));
		CHECK((tx_sparse_each(t.p, 0, &en, NULL, NULL, &why) == 0) == (i == 0));
		sf_str_free(&t);
		sf_str_free(&recs);
	}

	/* a pax size over the header's, an old-style directory, a header whose
	 * checksum fails, records that describe nothing */
	pax_rec(&recs, "size", "700");
	sf_str_addc(&recs, 0);
	pax_text(&t, (const char *)recs.p);
	char big[700] = { 0 };
	tar_add(&t, "p.bin", 5, '0', big, 700);
	memset((uint8_t *)t.p + 1024 + 124, 0, 12);
	put_octal((uint8_t *)t.p + 1024 + 124, 12, 0);
	CHECK(tx_entry_read(t.p, t.len, 0, &en) == 0 && en.bad); /* checksum now wrong */
	sf_str_free(&t);
	pax_text(&t, (const char *)recs.p);
	tar_add(&t, "p.bin", 5, '0', big, 700);
	CHECK(tx_entry_read(t.p, t.len, 0, &en) == 0 && !en.bad && en.size == 700 && en.row_size == 700 &&
	      en.next == t.len);
	/* read from a copy of a stretch (tx_entry_read_in): the same entry
	 * when its header blocks are at hand, whatever data follows them;
	 * -EAGAIN when the record or the header is past the copy */
	struct tx_entry cp;
	CHECK(tx_entry_read_in(t.p, 1536, t.len, 0, &cp) == 0 && !cp.bad && cp.size == 700 &&
	      cp.next == t.len);
	CHECK(tx_entry_read_in(t.p, 1535, t.len, 0, &cp) == -EAGAIN);
	CHECK(tx_entry_read_in(t.p, 600, t.len, 0, &cp) == -EAGAIN);
	tar_add(&t, "old/", 4, '\0', "", 0);
	CHECK(tx_entry_read(t.p, t.len, en.next, &en) == 0 && !en.bad && en.type == '5');
	pax_text(&t, (const char *)recs.p);
	CHECK(tx_entry_read(t.p, t.len, en.next, &en) == 0 && en.bad && strstr(en.bad, "describe no header"));
	/* the same with the record's padding cut off: the walk stays inside */
	CHECK(tx_entry_read(t.p, t.len - 400, en.bad_at - 1024, &en) == 0 && en.bad &&
	      strstr(en.bad, "describe no header"));
	sf_str_free(&t);
	sf_str_free(&recs);
}

/* ---- .shardfs/samples.jsonl -------------------------------------------- */

/* Reads samples.jsonl of DIR/<stem>.taridx whole, then in pieces of `piece`
 * bytes from `from` on (a reader resuming each time), and checks both give
 * `want`. */
/* Counts a sparse map's pieces and checks that they are placed by tar
 * offset, one byte each, right after the map text. */
struct pieces {
	uint64_t n, first_src;
};

static int count_piece(void *arg, uint64_t off, uint64_t len, uint64_t src)
{
	struct pieces *p = arg;
	if (!p->n++)
		p->first_src = src;
	return off == (p->n - 1) * 4 && len == 1 ? 0 : -EINVAL;
}

/* Entries read from copies of a tar file (tx_entry_read_copy): a copy
 * grows while a record or a 1.0 map text past its first 16 KiB asks for
 * more, the map is walked from the copy, and a tar cut short under the
 * mapping is -EIO naming it, never a signal. */
static void test_copies(const char *dir)
{
	struct sf_str t = { 0 }, recs = { 0 }, map = { 0 };
	/* a pax record of 100,000 bytes before a header */
	size_t vlen = 100000, rlen = 6 + 1 + 8 + vlen + 1;
	char *rec = malloc(rlen + 1);
	CHECK(rec != NULL);
	int k = snprintf(rec, rlen + 1, "%zu comment=", rlen);
	memset(rec + k, 'c', vlen);
	rec[k + vlen] = '\n';
	rec[rlen] = 0;
	pax_text(&t, rec);
	free(rec);
	tar_add(&t, "a.bin", 5, '0', "abc", 3);
	/* then a 1.0 sparse member of 10000 one-byte pieces: its map text is
	 * past 16 KiB */
	pax_rec(&recs, "GNU.sparse.major", "1");
	pax_rec(&recs, "GNU.sparse.minor", "0");
	pax_rec(&recs, "GNU.sparse.realsize", "40000");
	sf_str_addc(&recs, 0);
	pax_text(&t, (const char *)recs.p);
	char line[64];
	sf_str_add(&map, "10000\n", 6);
	for (int i = 0; i < 10000; i++) {
		int n = snprintf(line, sizeof line, "%d\n1\n", i * 4);
		sf_str_add(&map, line, (size_t)n);
	}
	size_t text = map.len;
	while (map.len % 512)
		sf_str_addc(&map, 0);
	for (int i = 0; i < 10000; i++)
		sf_str_addc(&map, 'x');
	tar_add(&t, "GNUSparseFile.0/s.bin", 21, '0', (const char *)map.p, map.len);
	static const uint8_t end[1024];
	sf_str_add(&t, end, sizeof end);
	CHECK(text > TX_WINDOW_SMALL);
	write_file(dir, "copies.tar", t.p, t.len);
	char path[4096];
	snprintf(path, sizeof path, "%s/copies.tar", dir);
	struct sf_map *m = NULL;
	struct sf_err e;
	CHECK(sf_map_open(path, &m, &e) == 0);
	struct tx_window w = { 0 };
	struct tx_entry en;
	const uint8_t *base;
	uint64_t boff;
	uint64_t rec_end = 512 + (rlen + 511) / 512 * 512;
	CHECK(tx_entry_read_copy(&w, m, 0, &en, &base, &boff, &e) == 0 && !en.bad && en.nrec == 1 &&
	      en.hdr == rec_end && en.size == 3 && !memcmp(base + (en.data - boff), "abc", 3));
	uint64_t second = en.next;
	CHECK(tx_entry_read_copy(&w, m, second, &en, &base, &boff, &e) == 0 && !en.bad &&
	      en.sparse == TX_SPARSE_10 && en.size == 40000);
	struct pieces pc = { 0 };
	const char *why = NULL;
	CHECK(tx_sparse_each(base, boff, &en, count_piece, &pc, &why) == 0 && pc.n == 10000 &&
	      pc.first_src == en.data + (text + 511) / 512 * 512);
	/* cut short under the mapping: an error, not a signal */
	tx_window_free(&w);
	CHECK(truncate(path, 512) == 0);
	CHECK(tx_entry_read_copy(&w, m, second, &en, &base, &boff, &e) == -EIO && strstr(e.msg, "copies.tar"));
	tx_window_free(&w);
	sf_map_unref(m);
	unlink(path);
	sf_str_free(&t);
	sf_str_free(&recs);
	sf_str_free(&map);
}

static void expect_samples(const char *dir, const char *stem, const char *want, size_t piece,
			   size_t from)
{
	char name[64];
	snprintf(name, sizeof name, "%s.taridx", stem);
	struct sf_view *v;
	CHECK(open_in(dir, name, &v) == 0);
	if (!v)
		return;
	struct sf_node *n = walk(v, ".shardfs/samples.jsonl");
	int rc = 0;
	struct sf_buf *b = n ? read_all(n, &rc) : NULL;
	size_t len = strlen(want);
	CHECK(b && b->len == len && memcmp(b->data, want, len) == 0);
	if (b && (b->len != len || memcmp(b->data, want, len)))
		fprintf(stderr, "samples.jsonl of %s:\n%.*s\nwanted:\n%s", stem, (int)b->len,
			(const char *)b->data, want);
	sf_buf_unref(b);
	uint8_t *got = malloc(piece);
	for (size_t off = from; n && got && off < len; off += piece) {
		struct sf_readv rv = { 0 };
		struct sf_err e;
		CHECK(sf_file_read(n, off, piece, &sf_nocache, &rv, &e) == 0);
		size_t k = len - off < piece ? len - off : piece;
		CHECK_EQ_U(rv.bytes, k);
		sf_readv_copy(&rv, got, NULL);
		CHECK(rv.bytes == k && memcmp(got, want + off, k) == 0);
		sf_readv_release(&rv);
	}
	free(got);
	sf_view_unref(v);
}

static void test_samples(const char *dir)
{
	/* odd names, links, a directory record */
	struct sf_str t = { 0 };
	tar_add(&t, "a.jpg", 5, '0', "A", 1);
	tar_add(&t, "a.cls", 5, '0', "1", 1);
	tar_add(&t, "sub/a.jpg", 9, '0', "SA", 2);
	tar_add(&t, "sub/a.lnk", 9, '2', "", 0);
	tar_add(&t, "sub/", 4, '5', "", 0);
	tar_add(&t, "README", 6, '0', "R", 1);
	tar_add(&t, "README.", 7, '0', "R.", 2);
	tar_add(&t, "PHOTO.JPG", 9, '0', "P", 1);
	tar_add(&t, "PHOTO.Tar.GZ", 12, '0', "P", 1);
	tar_add(&t, "PHOTO.hard", 10, '1', "", 0);
	tar_add(&t, "100%.jpg", 8, '0', "%", 1);
	tar_add(&t, "q\"t.jpg", 7, '0', "Q", 1);
	/* valid UTF-8 kept, an invalid byte shown as U+FFFD (docs/design.md §3.4) */
	tar_add(&t, "x\xc3\xa9\xffy.jpg", 9, '0', "X", 1);
	tar_add(&t, "a.jpg", 5, '0', "A2", 2);
	sf_buf_unref(write_fold(dir, "sa", &t));
	expect_samples(dir, "sa",
		       "{\"i\": 0, \"key\": \"a\", \"members\": {\"jpg\": \"a.jpg\", \"cls\": \"a.cls\"}}\n"
		       "{\"i\": 1, \"key\": \"sub/a\", \"members\": {\"jpg\": \"sub/a.jpg\", \"lnk\": \"sub/a.lnk\"}}\n"
		       "{\"i\": 2, \"key\": \"README\", \"members\": {\"\": \"README\"}}\n"
		       "{\"i\": 3, \"key\": \"PHOTO\", \"members\": {\"JPG\": \"PHOTO.JPG\", \"Tar.GZ\": \"PHOTO.Tar.GZ\", \"hard\": \"PHOTO.hard\"}}\n"
		       "{\"i\": 4, \"key\": \"100%25\", \"members\": {\"jpg\": \"100%25.jpg\"}}\n"
		       "{\"i\": 5, \"key\": \"q\\\"t\", \"members\": {\"jpg\": \"q\\\"t.jpg\"}}\n"
		       "{\"i\": 6, \"key\": \"x\xc3\xa9\xef\xbf\xbdy\", \"members\": {\"jpg\": \"x\xc3\xa9\xef\xbf\xbdy.jpg\"}}\n",
		       7, 0);
	/* the second a.jpg comes last in the index: the rows of stem "a" are
	 * not contiguous, so the sample gathers them from anywhere */
	struct sf_view *v;
	CHECK(open_in(dir, "sa.taridx", &v) == 0);
	CHECK(v && !(((struct tx_fold *)v->state)->ix.flags & 1));
	sf_view_unref(v);

	/* one run of rows holding many samples, and a sample of many members:
	 * grouping stays linear */
	struct sf_str lines = { 0 };
	enum { W = 3000 };
	for (int k = 0; k < W; k++) {
		char name[32];
		int len = snprintf(name, sizeof name, "d%04d/x.jpg", k);
		tar_add(&t, name, (size_t)len, '0', "", 0);
		sf_str_addf(&lines, "{\"i\": %d, \"key\": \"d%04d/x\", \"members\": {\"jpg\": \"d%04d/x.jpg\"}}\n", k, k, k);
	}
	sf_str_addf(&lines, "{\"i\": %d, \"key\": \"y\", \"members\": {", W);
	for (int k = 0; k < W; k++) {
		char name[32];
		int len = snprintf(name, sizeof name, "y.e%04d", k);
		tar_add(&t, name, (size_t)len, '0', "", 0);
		sf_str_addf(&lines, "%s\"e%04d\": \"y.e%04d\"", k ? ", " : "", k, k);
	}
	sf_str_add(&lines, "}}\n", 4);
	struct sf_buf *wide = write_fold(dir, "sw", &t);
	CHECK(wide && (wide->data[56] & 1));
	sf_buf_unref(wide);
	expect_samples(dir, "sw", (const char *)lines.p, 65536, 0);
	sf_str_free(&lines);

	/* more samples than one mark spans, both ways */
	enum { N = 10000 };
	for (int contiguous = 0; contiguous < 2; contiguous++) {
		struct sf_str want = { 0 };
		for (int i = 0; i < 2 * N; i++) {
			int k = contiguous ? i / 2 : i % N;
			char name[32];
			int len = snprintf(name, sizeof name, "d/%05d.%s", k, (contiguous ? i % 2 : i >= N) ? "cls" : "jpg");
			tar_add(&t, name, (size_t)len, '0', name, (size_t)len);
		}
		for (int k = 0; k < N; k++)
			sf_str_addf(&want, "{\"i\": %d, \"key\": \"d/%05d\", \"members\": {\"jpg\": \"d/%05d.jpg\", \"cls\": \"d/%05d.cls\"}}\n",
				    k, k, k, k);
		sf_str_addc(&want, 0);
		const char *stem = contiguous ? "sc" : "sn";
		struct sf_buf *ix = write_fold(dir, stem, &t);
		CHECK(ix && (ix->data[56] & 1) == contiguous);
		sf_buf_unref(ix);
		expect_samples(dir, stem, (const char *)want.p, 4093, want.len / 2);
		sf_str_free(&want);
	}
}

/* Index rows are read from copies of the file: a pass, rows here and
 * there and the lookup give what the rows in memory give; an index cut
 * short under its mapping fails with EIO naming it and the row, never a
 * signal, and a view over it fails its lookups with EIO naming it. */
static bool same_row(const struct tx_row *a, const struct tx_row *b)
{
	return a->fid == b->fid && a->off == b->off && a->size == b->size && a->extid == b->extid &&
	       a->crashid == b->crashid && a->keyhash == b->keyhash;
}

static void test_rows_cut(const char *dir)
{
	struct sf_str t = { 0 };
	enum { N = 5000 };
	for (int i = 0; i < N; i++) {
		char name[32];
		int n = snprintf(name, sizeof name, "m%04d.%s", i / 2, i % 2 ? "cls" : "jpg");
		tar_add(&t, name, (size_t)n, '0', "x", 1);
	}
	struct sf_buf *mem = write_fold(dir, "cut", &t);
	CHECK(mem != NULL);
	if (!mem)
		return;
	char path[4096];
	snprintf(path, sizeof path, "%s/cut.taridx", dir);
	struct sf_map *m = NULL;
	struct sf_err e = { { 0 } };
	struct tx_index in_mem, in_file, cut, kept;
	CHECK(sf_map_open(path, &m, &e) == 0);
	CHECK(tx_index_parse(mem->data, mem->len, "mem", &in_mem, &e) == 0 && in_mem.n_rows == N);
	CHECK(tx_index_open(m, path, &in_file, &e) == 0 && !in_file.data);
	CHECK(tx_index_open(m, path, &cut, &e) == 0);
	CHECK(tx_index_open(m, path, &kept, &e) == 0);
	struct tx_rows w = { 0 }, near = { 0 };
	struct tx_row a, b;
	bool same = true;
	for (uint64_t r = 0; r < N; r++) {
		CHECK(tx_row_get(&in_mem, r, &a, &e) == 0);
		same = same && tx_rows_get(&in_file, &w, r, &b, &e) == 0 && same_row(&a, &b);
		/* here and there, backwards and forwards */
		uint64_t q = (r * 7919) % N;
		CHECK(tx_row_get(&in_mem, q, &a, &e) == 0);
		same = same && tx_rows_get(&in_file, &near, q, &b, &e) == 0 && same_row(&a, &b);
		same = same && tx_row_get(&in_file, q, &b, &e) == 0 && same_row(&a, &b);
	}
	CHECK(same);
	/* a pass copies at most TX_ROWS_PASS rows at a time */
	CHECK(w.cap <= TX_ROWS_PASS);
	tx_rows_free(&w);
	tx_rows_free(&near);
	CHECK(tx_lookup_build(&in_mem, false, &e) == 0 && tx_lookup_build(&in_file, false, &e) == 0);
	CHECK(in_file.groups == N / 2 && in_file.runs == N / 2 && in_mem.groups == in_file.groups &&
	      in_mem.runs == in_file.runs);
	CHECK(memcmp(in_mem.perm, in_file.perm, N * sizeof *in_mem.perm) == 0);
	/* a host that keeps copies: the rows copied whole, the same lookup */
	CHECK(!in_file.kept && tx_lookup_build(&kept, true, &e) == 0 && kept.kept);
	CHECK(kept.groups == in_file.groups && kept.runs == in_file.runs);
	CHECK(memcmp(kept.perm, in_file.perm, N * sizeof *kept.perm) == 0);
	struct sf_view *v = NULL;
	CHECK(open_in(dir, "cut.taridx", &v) == 0 && v);
	expect_content(v, "m0100.cls", "x");
	/* cut short: the rows past the new end cannot be read */
	CHECK(truncate(path, (off_t)(in_file.off_arr + 100 * TX_ROW_SIZE)) == 0);
	CHECK(tx_row_get(&in_file, 10, &b, &e) == 0);
	CHECK(tx_row_get(&in_file, N - 1, &b, &e) == -EIO && strstr(e.msg, path) &&
	      strstr(e.msg, "row 4999"));
	CHECK(tx_rows_get(&cut, &w, 3000, &b, &e) == -EIO && strstr(e.msg, path) &&
	      strstr(e.msg, "rows 2992 to 3007"));
	tx_rows_free(&w);
	CHECK(tx_lookup_build(&cut, false, &e) == -EIO && strstr(e.msg, path) &&
	      strstr(e.msg, "rows 0 to 2047") && !cut.perm);
	/* rows kept are read from their copy, cut file or not */
	CHECK(tx_row_get(&kept, N - 1, &b, &e) == 0 && tx_row_get(&in_mem, N - 1, &a, &e) == 0 &&
	      same_row(&a, &b));
	CHECK(tx_rows_get(&kept, &w, 3000, &b, &e) == 0 && tx_row_get(&in_mem, 3000, &a, &e) == 0 &&
	      same_row(&a, &b));
	tx_rows_free(&w);
	struct sf_node *n = NULL;
	CHECK(v && sf_dir_find(v->root, "m2000.jpg", &n, &e) == -EIO && !n && strstr(e.msg, "cut.taridx"));
	sf_view_unref(v);
	tx_index_free(&in_mem);
	tx_index_free(&in_file);
	tx_index_free(&cut);
	tx_index_free(&kept);
	sf_map_unref(m);
	sf_buf_unref(mem);
}

/* A locate a read waits on copies the member's payload along with its
 * header (sf_stored.along), and the read copies from that: the bytes are
 * right when the tar is cut after the read was gathered (nothing is read
 * again). A member larger than the read asks for, or a locate no read
 * waits on, copies nothing along. */
static void test_read_along(const char *dir)
{
	struct sf_str t = { 0 };
	char big[3000];
	memset(big, 'b', sizeof big);
	tar_add(&t, "a.bin", 5, '0', "alpha", 5);
	tar_add(&t, "b.bin", 5, '0', big, sizeof big);
	tar_add(&t, "c.bin", 5, '0', "gamma", 5);
	struct sf_buf *ix = write_fold(dir, "ra", &t);
	sf_buf_unref(ix);
	char tar[4096];
	snprintf(tar, sizeof tar, "%s/ra_0000.tar", dir);
	struct sf_view *v = NULL;
	struct sf_err e = { { 0 } };
	CHECK(open_in(dir, "ra.taridx", &v) == 0 && v);
	if (!v)
		return;
	/* no read waits: nothing copied along */
	struct sf_stored st = { 0 };
	CHECK(sf_view_locate(v, "a.bin", &st, &e) == 0 && !st.pre.buf);
	/* larger than the read asks for: nothing copied along */
	st = (struct sf_stored){ .along = 100 };
	CHECK(sf_view_locate(v, "b.bin", &st, &e) == 0 && !st.pre.buf);
	st = (struct sf_stored){ .along = 1 << 16 };
	CHECK(sf_view_locate(v, "c.bin", &st, &e) == 0 && st.pre.buf && st.pre.len >= 512 + 5);
	struct sf_readv rv = { 0 };
	CHECK(sf_stored_read(v, &st, 0, 5, &rv, &e) == 0 && rv.bytes == 5);
	rv.pre = st.pre;
	/* the tar cut: the read copies from the locate's copy */
	CHECK(truncate(tar, 1024) == 0);
	uint8_t out[5] = { 0 };
	CHECK(sf_readv_copy(&rv, out, &e) == 0 && memcmp(out, "gamma", 5) == 0);
	/* without it, the cut is the read's error */
	sf_recent_free(&rv.pre);
	CHECK(sf_readv_copy(&rv, out, &e) == -EIO);
	sf_readv_release(&rv);
	sf_view_unref(v);
}

/* [0, size) of what sf_view_locate found, or NULL. */
static struct sf_buf *read_located(struct sf_view *v, const struct sf_stored *st)
{
	struct sf_err e;
	struct sf_readv rv = { 0 };
	int rc = sf_stored_read(v, st, 0, st->size, &rv, &e);
	struct sf_buf *b = rc ? NULL : sf_buf_new(rv.bytes);
	if (b && sf_readv_copy(&rv, b->data, &e)) {
		sf_buf_unref(b);
		b = NULL;
	}
	sf_readv_release(&rv);
	return b;
}

static bool located_as(struct sf_view *v, const char *name, const char *want)
{
	struct sf_stored st;
	struct sf_err e;
	if (sf_view_locate(v, name, &st, &e) != 0)
		return false;
	struct sf_buf *b = read_located(v, &st);
	bool same = b && b->len == strlen(want) && memcmp(b->data, want, b->len) == 0;
	sf_buf_unref(b);
	return same;
}

/* Reads by name without a node (the C API's): the bytes a lookup then a
 * read give, files stored as-is only (the others are walked to); the names given
 * out keep their names in the listing; a second lookup of a name takes the
 * row its first one found, reading no header. */
static void test_located(const char *dir)
{
	struct sf_str t = { 0 };
	tar_add(&t, "a.bin", 5, '0', "alpha", 5);
	pax_add(&t, "p.bin");
	tar_add(&t, "x.bin", 5, '0', "pax", 3);
	pax_add(&t, "q.bin");
	tar_add(&t, "q.bin", 5, '0', "after a record", 14);
	tar_add(&t, "d.bin", 5, '0', "one", 3);
	tar_add(&t, "d.bin", 5, '0', "two!", 4);
	tar_add(&t, "c.bin", 5, '0', "gamma", 5);
	struct sf_buf *ix = write_fold(dir, "lo", &t);
	sf_buf_unref(ix);
	sf_str_free(&t);
	char tar[4096];
	snprintf(tar, sizeof tar, "%s/lo_0000.tar", dir);
	struct sf_view *v = NULL, *fresh = NULL;
	struct sf_stored st;
	struct sf_err e;
	CHECK(open_as(dir, "lo.taridx", &copying, &v) == 0 && v);
	if (!v)
		return;
	CHECK(located_as(v, "a.bin", "alpha"));
	CHECK(located_as(v, "d.bin", "two!"));
	CHECK(located_as(v, "/c.bin", "gamma"));
	/* after a pax record: its data where its headers say, checked at each
	 * lookup (no tag) */
	CHECK(located_as(v, "q.bin", "after a record") && located_as(v, "q.bin", "after a record"));
	/* a member shown by another name (a pax path), an absent name, a
	 * path, the view's own directory: walked to */
	CHECK(sf_view_locate(v, "p.bin", &st, &e) == SF_LOOKUP_LIST);
	CHECK(sf_view_locate(v, "none.bin", &st, &e) == SF_LOOKUP_LIST);
	CHECK(sf_view_locate(v, ".shardfs", &st, &e) == SF_LOOKUP_LIST);
	CHECK(sf_view_locate(v, ".shardfs/info.json", &st, &e) == SF_LOOKUP_LIST);
	/* a.bin's header renamed in place, its size and time put back: the
	 * second lookup of a.bin does not read it (the mapping checks see
	 * what changes a file's size or time), a view that never looked it
	 * up finds no a.bin */
	struct stat before;
	CHECK(stat(tar, &before) == 0);
	int fd = open(tar, O_RDWR);
	CHECK(fd >= 0 && pwrite(fd, "z", 1, 0) == 1);
	close(fd);
	struct timespec times[2] = { before.st_atim, before.st_mtim };
	CHECK(utimensat(AT_FDCWD, tar, times, 0) == 0);
	CHECK(located_as(v, "a.bin", "alpha"));
	CHECK(open_as(dir, "lo.taridx", &copying, &fresh) == 0 && fresh);
	if (fresh) {
		CHECK(sf_view_locate(fresh, "a.bin", &st, &e) == SF_LOOKUP_LIST && !walk(fresh, "a.bin"));
		sf_view_unref(fresh);
	}
	/* p.bin is no name the index keys: its lookup lists the fold;
	 * locating stops there (the listing names the entries from then on) */
	expect_content(v, "p.bin", "pax");
	CHECK(v->root->u.dir.populated && walk(v, "x.bin") == NULL);
	expect_content(v, "d.bin", "two!");
	CHECK(sf_view_locate(v, "c.bin", &st, &e) == SF_LOOKUP_LIST);
	/* the tar cut: a read of what was located fails, it serves no stale
	 * bytes */
	sf_view_unref(v);
	CHECK(open_as(dir, "lo.taridx", &copying, &v) == 0 && v);
	if (!v)
		return;
	CHECK(sf_view_locate(v, "c.bin", &st, &e) == 0);
	CHECK(truncate(tar, 1024) == 0);
	CHECK(read_located(v, &st) == NULL);
	sf_view_unref(v);
}

int main(void)
{
	char dir[64];
	check_tmp(dir, sizeof dir, "test_taridx");
	CHECK(mkdtemp(dir) != NULL);
	test_keys();
	test_headers();
	test_shard_order();
	test_fixtures();
	test_builder();
	test_links_and_verify();
	test_hostile_names(dir);
	test_long_paths(dir);
	test_broken(dir);
	test_samples(dir);
	test_copies(dir);
	test_rows_cut(dir);
	test_read_along(dir);
	test_located(dir);
	char path[4096];
	static const char *const made[] = { "l", "h", "sa", "sw", "sc", "sn", "cut", "ra", "lo" };
	for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
		snprintf(path, sizeof path, "%s/%s.taridx", dir, made[i]);
		unlink(path);
		snprintf(path, sizeof path, "%s/%s_0000.tar", dir, made[i]);
		unlink(path);
	}
	rmdir(dir);
	CHECK_DONE();
}
