/* Unit tests of the shared format pieces: byte cursors, CRC32C, name
 * escaping, the extent model, zstd with raw dictionaries, the verify
 * report, array growth, the hash map and on-demand directory entries. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "check.h"
#include "sf_bytes.h"
#include "sf_codec.h"
#include "sf_crc32c.h"
#include "sf_hash.h"
#include "sf_json.h"
#include "sf_map.h"
#include "sf_name.h"
#include "sf_read.h"
#include "sf_report.h"
#include "sf_turn.h"
#include "sf_view_impl.h"

static void test_crc(void)
{
	/* the standard check value of CRC32C */
	CHECK_EQ_U(sf_crc32c(0, "123456789", 9), 0xE3069283u);
	uint32_t part = sf_crc32c(0, "1234", 4);
	CHECK_EQ_U(sf_crc32c(part, "56789", 5), 0xE3069283u);
	uint8_t big[1000];
	for (int i = 0; i < 1000; i++)
		big[i] = (uint8_t)(i * 7);
	uint32_t one = sf_crc32c(0, big, 1000), split = sf_crc32c(sf_crc32c(0, big, 333), big + 333, 667);
	CHECK_EQ_U(one, split);
}

static void test_cursor(void)
{
	const uint8_t b[] = { 0xAC, 0x02, 0x01, 0x00, 0x80 };
	struct sf_cursor c = sf_cursor(b, sizeof b);
	CHECK_EQ_U(sf_cur_uvarint(&c), 300);
	CHECK_EQ_U(sf_cur_u16(&c), 1);
	CHECK(!c.bad);
	sf_cur_uvarint(&c); /* truncated varint */
	CHECK(c.bad);
	CHECK_EQ_U(sf_cur_u8(&c), 0);
	CHECK(sf_range_ok(10, 4, 6));
	CHECK(!sf_range_ok(10, 4, 7));
	CHECK(!sf_range_ok(10, 11, 0));
	CHECK(!sf_range_ok(UINT64_MAX, 2, UINT64_MAX));
}

static void test_escape(void)
{
	char out[SF_NAME_MAX + 16];
	sf_name_escape("a/b%c\\d\n\x7f", 9, SF_NAME_MAX, out);
	CHECK_STR(out, "a%2Fb%25c%5Cd%0A%7F");
	uint8_t raw[300];
	CHECK_EQ_U(sf_name_unescape(out, raw), 9);
	CHECK(memcmp(raw, "a/b%c\\d\n\x7f", 9) == 0);
	/* long names: first 200 bytes, never inside %XX, then ~ and XXH64 */
	char longname[400];
	memset(longname, 'x', sizeof longname);
	longname[199] = '/';
	sf_name_escape(longname, sizeof longname, SF_NAME_MAX, out);
	CHECK_EQ_U(strlen(out), 199 + 17);
	CHECK(out[199] == '~');
	memset(longname, 'y', 255);
	sf_name_escape(longname, 255, SF_NAME_MAX, out);
	CHECK_EQ_U(strlen(out), 255);

	struct sf_view *v = sf_view_new(NULL, "t");
	/* a duplicate of a 255-byte name cannot take "#1": it takes the cut form */
	struct sf_node *l1 = sf_dir_add_file(v->root, longname, 255);
	struct sf_node *l2 = sf_dir_add_file(v->root, longname, 255);
	CHECK(l1 && l2 && strlen(l1->name) == 255 && strlen(l2->name) == 217 && l2->name[200] == '~');
	struct sf_node *l3 = sf_dir_add_file(v->root, longname, 255);
	CHECK(l3 && strlen(l3->name) == 219 && strcmp(l3->name + 217, "#1") == 0);
	struct sf_view *w = v;
	v = sf_view_new(NULL, "t");
	sf_view_unref(w);
	CHECK(sf_dir_add_file(v->root, "", 0) && strcmp(v->root->u.dir.kids[0]->name, "#1") == 0);
	CHECK(sf_dir_add_file(v->root, "..", 2) && strcmp(v->root->u.dir.kids[1]->name, "..#1") == 0);
	CHECK(sf_dir_add_file(v->root, "a", 1));
	struct sf_node *dup = sf_dir_add_file(v->root, "a", 1);
	CHECK(dup && strcmp(dup->name, "a#1") == 0);
	/* many entries switch to the hashed index; every name must still resolve */
	for (int i = 0; i < 1000; i++) {
		char n[16];
		snprintf(n, sizeof n, "n%d", i);
		sf_dir_add_file(v->root, n, strlen(n));
	}
	struct sf_err e;
	struct sf_node *hit = NULL;
	CHECK(sf_dir_find(v->root, "n777", &hit, &e) == 0 && hit && strcmp(hit->name, "n777") == 0);
	CHECK(sf_dir_find(v->root, "a#1", &hit, &e) == 0 && hit == dup);
	CHECK(sf_dir_find(v->root, "nope", &hit, &e) == 0 && !hit);
	sf_view_unref(v);
}

static int produce_abc(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	(void)e;
	int *calls = p->arg;
	(*calls)++;
	*out = sf_buf_new(3);
	memcpy((*out)->data, "abc", 3);
	return 0;
}

static int gen_digits(void *arg, uint64_t off, uint8_t *out, size_t len,
		      struct sf_cache *c, struct sf_err *e)
{
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)('0' + (off + i) % 10);
	return 0;
}

static void test_extents(void)
{
	struct sf_view *v = sf_view_new(NULL, "t");
	static const uint8_t mapped[] = "MAPPED";
	int calls = 0;
	struct sf_node *f = sf_dir_add_file(v->root, "f", 1);
	struct sf_part *p = sf_view_part(v, produce_abc, &calls, 3, "abc");
	sf_file_add_map(f, mapped, 6);
	sf_file_add_part(f, p, 1, 2);
	sf_file_add_zero(f, 2);
	sf_file_add_gen(f, gen_digits, NULL, 3, 4);
	sf_file_set_bytes(f, "!", 1);
	struct sf_err e;
	CHECK(sf_file_ready(f, &sf_nocache, &e) == 0);
	CHECK_EQ_U(f->u.file.size, 6 + 2 + 2 + 4 + 1);
	const char *want = "MAPPEDbc\0\0" "3456!";
	for (uint64_t off = 0; off <= 15; off++)
		for (uint64_t len = 0; len <= 16; len++) {
			struct sf_readv rv = { 0 };
			CHECK(sf_file_read(f, off, len, &sf_nocache, &rv, &e) == 0);
			uint8_t got[32];
			sf_readv_copy(&rv, got, NULL);
			uint64_t expect = off + len > 15 ? 15 - off : len;
			CHECK_EQ_U(rv.bytes, expect);
			CHECK(memcmp(got, want + off, rv.bytes) == 0);
			sf_readv_release(&rv);
		}
	CHECK(calls > 0);

	struct sf_node *w = sf_dir_add_file(v->root, "w", 1);
	struct sf_part *q = sf_view_part(v, produce_abc, &calls, SF_SIZE_UNKNOWN, "abc2");
	sf_file_set_whole(w, q);
	CHECK(sf_file_ready(w, &sf_nocache, &e) == 0);
	CHECK_EQ_U(w->u.file.size, 3);

	struct sf_node *b = sf_dir_add_file(v->root, "b", 1);
	sf_file_set_broken(b, 10, "t: b: CRC mismatch");
	struct sf_readv rv = { 0 };
	CHECK(sf_file_read(b, 0, 10, &sf_nocache, &rv, &e) == -EIO);
	sf_readv_release(&rv);
	sf_view_unref(v);
}

/* A file of thousands of pieces, some long: the answer fits any limit with
 * the same bytes, long pieces still point where they did; a piece on an
 * unreadable page is an error, not a crash. */
static void test_fit(void)
{
	struct sf_view *v = sf_view_new(NULL, "t");
	static uint8_t src[1 << 16];
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 7 + i / 251);
	struct sf_node *f = sf_dir_add_file(v->root, "f", 1);
	uint64_t size = 0;
	for (size_t i = 0, at = 0; i < 5000; i++) {
		size_t len = i % 500 == 0 ? 9000 : i % 5;
		at = (at + 13) % (sizeof src - len);
		sf_file_add_map(f, src + at, len);
		size += len;
	}
	struct sf_err e;
	CHECK(sf_file_ready(f, &sf_nocache, &e) == 0);
	CHECK_EQ_U(f->u.file.size, size);
	uint8_t *want = malloc(size), *got = malloc(size);
	struct sf_readv all = { 0 };
	CHECK(sf_file_read(f, 0, size, &sf_nocache, &all, &e) == 0);
	sf_readv_copy(&all, want, NULL);
	sf_readv_release(&all);
	static const size_t limits[] = { 2, 3, 16, 1023, 100000 };
	for (size_t k = 0; k < sizeof limits / sizeof *limits; k++)
		for (uint64_t off = 0; off < size; off += size / 3 + 1) {
			struct sf_readv rv = { 0 };
			CHECK(sf_file_read(f, off, size, &sf_nocache, &rv, &e) == 0);
			size_t before = rv.n;
			CHECK(sf_readv_fit(&rv, limits[k]) == 0);
			CHECK(rv.n <= limits[k]);
			CHECK(rv.n == before || limits[k] < before);
			size_t longs = 0;
			for (size_t i = 0; i < rv.n; i++)
				longs += rv.iov[i].iov_base >= (void *)src &&
					 rv.iov[i].iov_base < (void *)(src + sizeof src);
			CHECK(limits[k] < 1023 || longs > 0);
			sf_readv_copy(&rv, got, NULL);
			CHECK_EQ_U(rv.bytes, size - off);
			CHECK(memcmp(got, want + off, size - off) == 0);
			sf_readv_release(&rv);
		}
	free(want);
	free(got);

	struct sf_node *g = sf_dir_add_file(v->root, "g", 1);
	for (int i = 0; i < 10; i++)
		sf_file_add_map(g, i == 4 ? (const uint8_t *)16 : src, 1);
	CHECK(sf_file_ready(g, &sf_nocache, &e) == 0);
	struct sf_readv rv = { 0 };
	CHECK(sf_file_read(g, 0, 10, &sf_nocache, &rv, &e) == 0);
	CHECK(sf_readv_fit(&rv, 4) == -EIO);
	sf_readv_release(&rv);
	sf_view_unref(v);
}

static void test_zstd(void)
{
	const char dict[] = "the quick brown fox jumps over the lazy dog; ";
	char src[500];
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = dict[i % (sizeof dict - 1)];
	uint8_t frame[1024];
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_CCtx_loadDictionary_advanced(cc, dict, sizeof dict - 1, ZSTD_dlm_byCopy,
					  ZSTD_dct_rawContent);
	size_t n = ZSTD_compress2(cc, frame, sizeof frame, src, sizeof src);
	CHECK(!ZSTD_isError(n));
	ZSTD_freeCCtx(cc);
	/* declare a dictionary id in the header the way upstream writers do:
	 * shift everything after the header fields to make room for one byte */
	size_t pos = (frame[4] & 0x20) ? 5 : 6;
	CHECK((frame[4] & 3) == 0);
	uint8_t with_id[1100];
	memcpy(with_id, frame, pos);
	with_id[4] |= 1;
	with_id[pos] = 7;
	memcpy(with_id + pos + 1, frame + pos, n - pos);
	uint32_t id = 0;
	CHECK(sf_zstd_frame_dict_id(with_id, n + 1, &id) == 0 && id == 7);
	uint8_t out[500];
	struct sf_err e;
	CHECK(sf_zstd_decode(with_id, n + 1, out, sizeof out, dict, sizeof dict - 1, "t", &e) == 0);
	CHECK(memcmp(out, src, sizeof src) == 0);
	/* wrong recorded sizes are refused */
	CHECK(sf_zstd_decode(frame, n, out, 499, dict, sizeof dict - 1, "t", &e) == -EIO);
	uint8_t big[600];
	CHECK(sf_zstd_decode(frame, n, big, 600, dict, sizeof dict - 1, "t", &e) == -EIO);
	/* zero stored bytes are an empty region */
	CHECK(sf_zstd_decode(frame, 0, out, 0, NULL, 0, "t", &e) == 0);
	/* truncation */
	CHECK(sf_zstd_decode(frame, n - 3, out, sizeof out, dict, sizeof dict - 1, "t", &e) < 0);
	uint8_t *alloc = NULL;
	size_t alen = 0;
	CHECK(sf_zstd_decode_alloc(with_id, n + 1, 1 << 20, dict, sizeof dict - 1, "t", &alloc, &alen, &e) == 0);
	CHECK_EQ_U(alen, sizeof src);
	free(alloc);
}

static void test_zstd_check(void)
{
	/* 3 MiB of output, far more than the check's scratch buffer */
	size_t n = 3u << 20;
	uint8_t *src = malloc(n);
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	size_t cap = ZSTD_compressBound(n);
	uint8_t *frame = malloc(cap);
	size_t k = ZSTD_compress(frame, cap, src, n, 1);
	CHECK(!ZSTD_isError(k));
	struct sf_err e;
	CHECK(sf_zstd_check(frame, k, n, NULL, 0, 0, "t", &e) == 0);
	CHECK(sf_zstd_check(frame, k, n - 1, NULL, 0, 0, "t", &e) == -EIO);
	CHECK(sf_zstd_check(frame, k, n + 1, NULL, 0, 0, "t", &e) == -EIO);
	CHECK(sf_zstd_check(frame, k - 10, n, NULL, 0, 0, "t", &e) < 0);
	free(frame);
	free(src);

	/* A frame declaring a 128 MiB window (its check would keep one that
	 * large) with four RLE blocks of 128 KiB of 'x' (docs/specs are
	 * silent; RFC 8878 §3.1.1): within a 1 MiB limit it is decoded whole
	 * instead, under 256 KiB it is not checked. */
	uint8_t big[6 + 4 * 4] = { 0x28, 0xB5, 0x2F, 0xFD, 0x00, 17 << 3 };
	for (int b = 0; b < 4; b++) {
		uint32_t h = (uint32_t)(b == 3) | 1u << 1 | (128u << 10) << 3;
		big[6 + 4 * b] = (uint8_t)h;
		big[7 + 4 * b] = (uint8_t)(h >> 8);
		big[8 + 4 * b] = (uint8_t)(h >> 16);
		big[9 + 4 * b] = 'x';
	}
	CHECK(sf_zstd_check(big, sizeof big, 512u << 10, NULL, 0, 1u << 20, "t", &e) == 0);
	CHECK(sf_zstd_check(big, sizeof big, (512u << 10) - 1, NULL, 0, 1u << 20, "t", &e) == -EIO);
	CHECK(sf_zstd_check(big, sizeof big, 512u << 10, NULL, 0, 256u << 10, "t", &e) == -EIO);
	CHECK(strstr(e.msg, "not checked") != NULL);
	CHECK(sf_zstd_check(big, sizeof big, 512u << 10, NULL, 0, 0, "t", &e) == 0);
}

/* Writes len bytes to a temporary file and maps it. */
static struct sf_map *map_bytes(char *path, const uint8_t *p, size_t len)
{
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, p, len) == (ssize_t)len);
	close(fd);
	struct sf_map *m = NULL;
	struct sf_err e;
	CHECK(sf_map_open(path, &m, &e) == 0);
	return m;
}

static void test_zstd_from_file(void)
{
	/* two frames without a content size (as tet writes them) of 1.5 MiB,
	 * more than the streaming window, a skippable frame between them */
	size_t n = 3u << 19, cap = ZSTD_compressBound(n);
	uint8_t *src = malloc(n);
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)((i * 2654435761u >> 13) & 0x3F);
	uint8_t *file = malloc(2 * cap + 16);
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
	size_t a = ZSTD_compress2(cc, file, cap, src, n);
	CHECK(!ZSTD_isError(a));
	const uint8_t skip[12] = { 0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4 };
	memcpy(file + a, skip, sizeof skip);
	size_t b = ZSTD_compress2(cc, file + a + sizeof skip, cap, src, n);
	CHECK(!ZSTD_isError(b));
	ZSTD_freeCCtx(cc);
	size_t total = a + sizeof skip + b;
	char path[64];
	check_tmp(path, sizeof path, "sf_core");
	struct sf_map *m = map_bytes(path, file, total);
	struct sf_err e;
	/* the bound is the frames' blocks times their largest block, as
	 * ZSTD_decompressBound finds it from the same bytes */
	uint64_t bound = 0;
	CHECK(sf_zstd_bound_map(m, 0, total, &bound, "part", "t", &e) == 0);
	CHECK_EQ_U(bound, ZSTD_decompressBound(file, total));
	CHECK(bound >= 2 * n);
	CHECK(sf_zstd_bound_map(m, 0, a - 5, &bound, "part", "t", &e) == -EIO);
	uint8_t *out = malloc(2 * n + 1);
	CHECK(sf_zstd_decode_map(m, 0, total, out, 2 * n, "part", "t", &e) == 0);
	CHECK(memcmp(out, src, n) == 0 && memcmp(out + n, src, n) == 0);
	/* wrong recorded sizes and truncation are EIO */
	CHECK(sf_zstd_decode_map(m, 0, total, out, 2 * n - 1, "part", "t", &e) == -EIO);
	CHECK(sf_zstd_decode_map(m, 0, total, out, 2 * n + 1, "part", "t", &e) == -EIO);
	CHECK(sf_zstd_decode_map(m, 0, a - 5, out, n, "part", "t", &e) == -EIO);
	/* the file cut under its mapping: EIO naming the file, no signal */
	CHECK(truncate(path, (off_t)(a / 2)) == 0);
	CHECK(sf_zstd_decode_map(m, 0, total, out, 2 * n, "part", "t", &e) == -EIO);
	CHECK(strstr(e.msg, path) != NULL && strstr(e.msg, "part") != NULL);
	CHECK(sf_zstd_bound_map(m, 0, total, &bound, "part", "t", &e) == -EIO);
	sf_map_unref(m);
	unlink(path);
	free(out);
	free(file);
	free(src);
}

/* A read's pieces from a mapping the view holds are copied from the file:
 * the bytes come back exactly, through sf_readv_fit's moves too, and a file
 * cut after the read was gathered fails the copy with EIO (no signal). */
static void test_copy_from_file(void)
{
	static uint8_t bytes[3 << 12];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (uint8_t)(i * 13 + i / 509);
	char path[64];
	check_tmp(path, sizeof path, "sf_core");
	struct sf_map *m = map_bytes(path, bytes, sizeof bytes);
	struct sf_view *v = sf_view_new(NULL, "t");
	CHECK(sf_view_hold_map(v, m) == 0);
	struct sf_node *f = sf_dir_add_file(v->root, "f", 1);
	static const uint8_t mem[5] = { 1, 2, 3, 4, 5 };
	size_t at = 0, size = 0;
	for (int i = 0; i < 40; i++) {
		size_t len = i % 7 == 0 ? 3000 : (size_t)i % 4 + 1;
		at = (at + 4093) % (sizeof bytes - len);
		CHECK(i % 5 == 3 ? sf_file_add_map(f, mem, sizeof mem) == 0 :
				   sf_file_add_map(f, m->data + at, len) == 0);
		size += i % 5 == 3 ? sizeof mem : len;
	}
	struct sf_err e;
	CHECK(sf_file_ready(f, &sf_nocache, &e) == 0);
	uint8_t *want = malloc(size), *got = malloc(size);
	struct sf_readv rv = { 0 };
	CHECK(sf_file_read(f, 0, size, &sf_nocache, &rv, &e) == 0);
	CHECK(rv.src && rv.src[0] == m);
	CHECK(sf_readv_copy(&rv, want, &e) == 0);
	size_t k = 0;
	for (size_t i = 0; i < rv.n; k += rv.iov[i++].iov_len)
		CHECK(memcmp(want + k, rv.iov[i].iov_base, rv.iov[i].iov_len) == 0);
	CHECK(sf_readv_fit(&rv, 3) == 0);
	CHECK(sf_readv_copy(&rv, got, &e) == 0 && memcmp(got, want, size) == 0);
	sf_readv_release(&rv);
	CHECK(sf_file_read(f, 0, size, &sf_nocache, &rv, &e) == 0);
	CHECK(truncate(path, 4096) == 0);
	CHECK(sf_readv_copy(&rv, got, &e) == -EIO && strstr(e.msg, "t:"));
	sf_readv_release(&rv);
	sf_view_unref(v);
	sf_map_unref(m);
	unlink(path);
	free(want);
	free(got);
}

static void test_json(void)
{
	struct sf_str s = { 0 };
	sf_utf8_sanitize_add(&s, "a\xff" "b\xe2\x82\xac", 6);
	CHECK(s.len == 8 && memcmp(s.p, "a\xEF\xBF\xBD" "b\xe2\x82\xac", 8) == 0);
	sf_str_free(&s);
	sf_base64_add(&s, "ab", 2);
	CHECK(s.len == 4 && memcmp(s.p, "YWI=", 4) == 0);
	sf_str_free(&s);
	char f[32];
	sf_fmt_f32(f, 0.1f);
	CHECK_STR(f, "0.1");
	sf_fmt_f32(f, 1.0f / 3.0f);
	CHECK(strtof(f, NULL) == 1.0f / 3.0f);
}

/* The verify report (docs/design.md §3.2): the status follows errors only, and a
 * finding stays on one line whatever it quotes. */
static void test_report(void)
{
	struct sf_report r = { 0 };
	struct sf_buf *b = sf_report_take(&r);
	CHECK(b && b->len == 11 && memcmp(b->data, "status: ok\n", 11) == 0);
	sf_buf_unref(b);

	sf_report_add(&r, false, "odd: %d", 7);
	CHECK_EQ_U(r.warnings, 1);
	b = sf_report_take(&r);
	const char ok[] = "status: ok\nwarning: odd: 7\n";
	CHECK(b && b->len == sizeof ok - 1 && memcmp(b->data, ok, sizeof ok - 1) == 0);
	sf_buf_unref(b);
	CHECK_EQ_U(r.warnings, 0);

	sf_report_add(&r, false, "name %s", "a\nb\r\nc");
	sf_report_add(&r, true, "bad %s", "x\n");
	CHECK_EQ_U(r.errors, 1);
	b = sf_report_take(&r);
	const char failed[] = "status: failed\nwarning: name a b  c\nerror: bad x \n";
	CHECK(b && b->len == sizeof failed - 1 && memcmp(b->data, failed, sizeof failed - 1) == 0);
	sf_buf_unref(b);

	/* past the limit errors are counted, warnings still listed */
	r.error_limit = 1;
	sf_report_add(&r, true, "first");
	sf_report_add(&r, true, "second");
	sf_report_add(&r, false, "w");
	sf_report_add(&r, true, "third");
	sf_report_unlisted(&r);
	CHECK_EQ_U(r.errors, 3);
	b = sf_report_take(&r);
	const char capped[] = "status: failed\nerror: first\nwarning: w\nerror: ... and 2 more\n";
	CHECK(b && b->len == sizeof capped - 1 && memcmp(b->data, capped, sizeof capped - 1) == 0);
	sf_buf_unref(b);
}

static void test_grow(void)
{
	uint32_t *a = NULL;
	size_t cap = 0;
	for (size_t n = 0; n < 100; n++) {
		CHECK(sf_grow(&a, &cap, n, sizeof *a, 4) == 0);
		CHECK(cap > n && (cap == 4 || (cap & (cap - 1)) == 0));
		a[n] = (uint32_t)n;
	}
	CHECK(cap == 128);
	uint32_t *same = a;
	CHECK(sf_grow(&a, &cap, 100, sizeof *a, 4) == 0 && a == same && cap == 128);
	for (size_t n = 0; n < 100; n++)
		CHECK(a[n] == n);
	/* a size that cannot be allocated leaves the array as it was */
	CHECK(sf_grow(&a, &cap, 128, SIZE_MAX / 64, 4) == -ENOMEM && a == same && cap == 128);
	free(a);
}

/* A string that grows past SF_STR_BIG moves to huge pages with what it
 * held, and the buffer it is taken into frees it so (ASan sees a wrong
 * free); a small one stays in malloc's. */
static void test_str_big(void)
{
	struct sf_str s = { 0 };
	char line[32];
	size_t n = 0;
	while (s.len < SF_STR_BIG + 4096 && !s.oom) {
		int k = snprintf(line, sizeof line, "%zu\n", n++);
		sf_str_add(&s, line, (size_t)k);
	}
	CHECK(!s.oom && s.big && s.cap >= s.len);
	/* every line where it was written */
	size_t at = 0;
	bool same = true;
	for (size_t i = 0; i < n && same; i++) {
		int k = snprintf(line, sizeof line, "%zu\n", i);
		same = at + (size_t)k <= s.len && memcmp(s.p + at, line, (size_t)k) == 0;
		at += (size_t)k;
	}
	CHECK(same && at == s.len);
	size_t len = s.len;
	struct sf_buf *b = sf_str_take(&s);
	CHECK(b && b->big && b->len == len && !s.p && b->data[0] == '0');
	sf_buf_unref(b);
	struct sf_str small = { 0 };
	sf_str_add(&small, "abc", 3);
	CHECK(!small.big);
	b = sf_str_take(&small);
	CHECK(b && !b->big && b->len == 3);
	sf_buf_unref(b);
	/* freed while big, without a take */
	sf_str_add(&s, "x", 1);
	CHECK(sf_str_reserve(&s, SF_STR_BIG) && s.big && s.len == 1 && s.p[0] == 'x');
	sf_str_free(&s);
	CHECK(!s.p && !s.big);
}

struct hitem {
	uint64_t hash;
	int id;
};

static bool hitem_is(const void *key, const void *val)
{
	return ((const struct hitem *)val)->id == *(const int *)key;
}

static struct hitem *hget(const struct sf_hash *h, const struct hitem *it)
{
	return sf_hash_get(h, it->hash, hitem_is, &it->id);
}

static void test_hash(void)
{
	/* Few distinct hashes, so runs are long and share slots: half start
	 * at the table's first slots, half at its last ones and wrap round. */
	enum { N = 1000 };
	static struct hitem it[N];
	for (int i = 0; i < N; i++)
		it[i] = (struct hitem){ i % 2 ? (uint64_t)(i % 7) : UINT64_MAX - (uint64_t)(i % 5), i };
	struct sf_hash h = { 0 };
	CHECK(hget(&h, &it[0]) == NULL);
	CHECK(sf_hash_del(&h, it[0].hash, hitem_is, &it[0].id) == NULL);
	for (int i = 0; i < N; i++)
		CHECK(sf_hash_put(&h, it[i].hash, &it[i]) == 0);
	CHECK_EQ_U(h.n, N);
	CHECK(h.cap >= 2 * N && (h.cap & (h.cap - 1)) == 0);
	for (int i = 0; i < N; i++)
		CHECK(hget(&h, &it[i]) == &it[i]);
	struct hitem absent = { 3, N };
	CHECK(hget(&h, &absent) == NULL);
	/* without eq the hash alone decides */
	struct hitem *any = sf_hash_get(&h, 3, NULL, NULL);
	CHECK(any && any->hash == 3);

	/* deleting every third leaves the rest reachable past the holes */
	for (int i = 0; i < N; i += 3)
		CHECK(sf_hash_del(&h, it[i].hash, hitem_is, &it[i].id) == &it[i]);
	CHECK_EQ_U(h.n, N - (N + 2) / 3);
	for (int i = 0; i < N; i++)
		CHECK(hget(&h, &it[i]) == (i % 3 ? &it[i] : NULL));

	/* a walk sees each value once */
	static bool seen[N];
	size_t pos = 0, walked = 0;
	struct hitem *v;
	while ((v = sf_hash_next(&h, &pos))) {
		CHECK(!seen[v->id] && v->id % 3);
		seen[v->id] = true;
		walked++;
	}
	CHECK_EQ_U(walked, h.n);

	/* deleted slots are reused: churn does not grow the table */
	size_t cap = h.cap;
	for (int round = 0; round < 20 * N; round++) {
		struct hitem *x = &it[(round % (N / 3)) * 3];
		CHECK(sf_hash_put(&h, x->hash, x) == 0);
		CHECK(sf_hash_del(&h, x->hash, hitem_is, &x->id) == x);
	}
	CHECK_EQ_U(h.cap, cap);
	for (int i = 1; i < N; i++)
		if (i % 3)
			CHECK(sf_hash_del(&h, it[i].hash, hitem_is, &it[i].id) == &it[i]);
	CHECK_EQ_U(h.n, 0);
	pos = 0;
	CHECK(sf_hash_next(&h, &pos) == NULL);
	sf_hash_free(&h);
	CHECK(h.slot == NULL && h.cap == 0 && h.n == 0);
}

/* Names that come and go (rolling checkpoints) keep the map the size of
 * what it holds: deleted slots are free at once, and a map that empties
 * shrinks. */
static void test_hash_rolling(void)
{
	enum { LIVE = 8, ROUNDS = 200000, MANY = 10000 };
	static struct hitem keys[MANY];
	struct sf_hash h = { 0 };
	size_t max_cap = 0;
	for (int i = 0; i < ROUNDS; i++) {
		keys[i % MANY] = (struct hitem){ .hash = (uint64_t)i * 0x9E3779B97F4A7C15ull, .id = i };
		CHECK(sf_hash_put(&h, keys[i % MANY].hash, &keys[i % MANY]) == 0);
		if (i >= LIVE) {
			struct hitem *old = &keys[(i - LIVE) % MANY];
			CHECK(sf_hash_del(&h, old->hash, hitem_is, &old->id) == old);
		}
		if (h.cap > max_cap)
			max_cap = h.cap;
	}
	CHECK_EQ_U(h.n, LIVE);
	CHECK(max_cap <= 32);
	sf_hash_free(&h);
	for (int i = 0; i < MANY; i++) {
		keys[i] = (struct hitem){ .hash = (uint64_t)i * 0x9E3779B97F4A7C15ull, .id = i };
		CHECK(sf_hash_put(&h, keys[i].hash, &keys[i]) == 0);
	}
	size_t big = h.cap;
	for (int i = 10; i < MANY; i++)
		CHECK(sf_hash_del(&h, keys[i].hash, hitem_is, &keys[i].id) == &keys[i]);
	CHECK(h.cap < big / 64);
	for (int i = 0; i < MANY; i++) {
		void *hit = sf_hash_get(&h, keys[i].hash, hitem_is, &keys[i].id);
		CHECK(i < 10 ? hit == &keys[i] : hit == NULL);
	}
	sf_hash_free(&h);
}

static bool id_is(const void *key, uint32_t id)
{
	return id == *(const uint32_t *)key;
}

static void test_ids(void)
{
	/* Hashes that share their top 32 bits (only eq tells them apart), and
	 * runs that start at the last slots and wrap round. */
	enum { N = 3000 };
	static uint64_t hash[N];
	for (uint32_t i = 0; i < N; i++)
		hash[i] = i % 3 ? (uint64_t)(i % 11) << 32 | i : UINT64_MAX - (i % 4);
	struct sf_ids m = { .map = { 0 } };
	uint32_t key = 0;
	CHECK(sf_ids_find(&m, hash[0], id_is, &key) == NULL);
	CHECK(sf_ids_put(&m, 1, UINT32_MAX) == -EINVAL);
	for (uint32_t i = 0; i < N; i++)
		CHECK(sf_ids_put(&m, hash[i], i) == 0);
	CHECK_EQ_U(m.map.n, N);
	CHECK(m.map.cap / 4 * 3 >= N && (m.map.cap & (m.map.cap - 1)) == 0);
	for (key = 0; key < N; key++) {
		uint32_t *at = sf_ids_find(&m, hash[key], id_is, &key);
		CHECK(at && *at == key);
	}
	key = N;
	CHECK(sf_ids_find(&m, hash[1], id_is, &key) == NULL);
	/* without eq the kept top 32 bits alone decide */
	uint32_t *any = sf_ids_find(&m, (uint64_t)5 << 32 | 77, NULL, NULL);
	CHECK(any && hash[*any] >> 32 == 5);
	/* an id is overwritten in place */
	key = 4;
	*sf_ids_find(&m, hash[4], id_is, &key) = 7;
	key = 7;
	uint32_t *at = sf_ids_find(&m, hash[4], id_is, &key);
	CHECK(at && *at == 7);

	/* a reset for as many keeps the memory, and its room takes n puts
	 * without moving */
	void *slot = m.map.slot;
	size_t cap = m.map.cap;
	CHECK(sf_ids_reset(&m, N) == 0 && m.map.slot == slot && m.map.cap == cap && m.map.n == 0);
	key = 1;
	CHECK(sf_ids_find(&m, hash[1], id_is, &key) == NULL);
	for (uint32_t i = 0; i < N; i++)
		CHECK(sf_ids_put(&m, hash[i], i) == 0);
	CHECK(m.map.slot == slot && m.map.cap == cap);
	/* a reset for far fewer gives most back */
	CHECK(sf_ids_reset(&m, 10) == 0 && m.map.cap == 16 && m.map.n == 0);
	for (uint32_t i = 0; i < 12; i++)
		CHECK(sf_ids_put(&m, hash[i], i) == 0);
	CHECK_EQ_U(m.map.cap, 16);
	for (key = 0; key < 12; key++)
		CHECK(sf_ids_find(&m, hash[key], id_is, &key) != NULL);
	sf_ids_free(&m);
	CHECK(m.map.slot == NULL && m.map.cap == 0 && m.map.n == 0);
}

/* A BARE sf_ids: ids of numbers whose hash the map asks for when it grows;
 * a third of them share one hash. */
struct num_key {
	const uint64_t *num;
	uint64_t want;
};

static uint64_t num_hash(const void *ctx, uint32_t id)
{
	const uint64_t *num = ctx;
	return num[id] % 3 ? num[id] * 0x9E3779B97F4A7C15ull : 42;
}

static bool num_is(const void *key, uint32_t id)
{
	const struct num_key *k = key;
	return k->num[id] == k->want;
}

static void test_ids_bare(void)
{
	enum { N = 2000 };
	static uint64_t num[N];
	for (uint32_t i = 0; i < N; i++)
		num[i] = 1000 + 7 * (uint64_t)i;
	struct sf_ids m = { .hash_of = num_hash, .ctx = num };
	for (uint32_t i = 0; i < N; i++)
		CHECK(sf_ids_put(&m, num_hash(num, i), i) == 0);
	CHECK(m.map.cap >= 2 * N && m.map.cap < 4 * N);
	for (uint32_t i = 0; i < N; i++) {
		struct num_key k = { num, num[i] };
		uint32_t *at = sf_ids_find(&m, num_hash(num, i), num_is, &k);
		CHECK(at && *at == i);
	}
	struct num_key absent = { num, 3 };
	CHECK(sf_ids_find(&m, 42, num_is, &absent) == NULL);
	sf_ids_free(&m);
	CHECK(m.map.slot == NULL && m.hash_of == num_hash);
}

static int made;

static void expect_text(struct sf_node *f, const char *want)
{
	struct sf_err e = { { 0 } };
	struct sf_readv rv = { 0 };
	CHECK(sf_file_ready(f, &sf_nocache, &e) == 0);
	CHECK(sf_file_read(f, 0, 64, &sf_nocache, &rv, &e) == 0);
	uint8_t got[64];
	sf_readv_copy(&rv, got, NULL);
	CHECK(rv.bytes == strlen(want) && memcmp(got, want, rv.bytes) == 0);
	sf_readv_release(&rv);
}

/* Whether dir lists `name`, described in *d, read as a host reads a listing. */
static bool listed(const struct sf_node *dir, const char *name, struct sf_dirent *d)
{
	size_t i = 0;
	while (i < sf_dir_count(dir) && (sf_dir_entry(dir, i, d), strcmp(d->name, name) != 0))
		i++;
	return i < sf_dir_count(dir);
}

static int make_text(struct sf_node *n, struct sf_err *e)
{
	(void)e;
	made++;
	char text[32];
	snprintf(text, sizeof text, "%u/%u", n->key, (unsigned)n->aux);
	return sf_file_set_bytes(n, text, strlen(text));
}

static int lazy_populate(struct sf_node *dir, struct sf_err *e)
{
	(void)e;
	CHECK(sf_dir_add_lazy(dir, "a", 1, SF_FILE, 1, 10) == 0);
	/* escaped and made unique like any other name */
	CHECK(sf_dir_add_lazy(dir, "a", 1, SF_FILE, 2, 20) == 0);
	CHECK(sf_dir_add_lazy(dir, "x/y", 3, SF_FILE, 3, 30) == 0);
	return 0;
}

/* On-demand entries: listed without nodes, made when looked up, freed
 * when nobody holds them, made again the same on the next lookup. */
static void test_lazy(void)
{
	struct sf_view *v = sf_view_new(NULL, "lazy");
	struct sf_err e = { { 0 } };
	CHECK(v && sf_dir_add_exact(v->root, SF_DIR, "sub"));
	CHECK(sf_dir_set_lazy(v->root, make_text) == 0);
	sf_dir_set_populate(v->root, lazy_populate, NULL);
	CHECK(sf_dir_ready(v->root, &e) == 0);
	CHECK_EQ_U(sf_dir_count(v->root), 4);
	const char *want[] = { "sub", "a", "a#1", "x%2Fy" };
	for (size_t i = 0; i < 4; i++) {
		struct sf_dirent d;
		sf_dir_entry(v->root, i, &d);
		CHECK(strcmp(d.name, want[i]) == 0 && (i == 0) == (d.node != NULL));
	}
	CHECK_EQ_U(made, 0);
	struct sf_node *n = NULL, *again = NULL;
	CHECK(sf_dir_find(v->root, "a#1", &n, &e) == 0 && n && n->key == 2);
	CHECK(sf_dir_find(v->root, "a#1", &again, &e) == 0 && again == n);
	CHECK_EQ_U(made, 1);
	expect_text(n, "2/20");
	int host;
	sf_node_set_host(n, &host);
	sf_node_unpin(n);
	sf_node_unpin(again);
	CHECK(sf_dir_find(v->root, "a#1", &again, &e) == 0 && again == n);
	sf_node_unpin(again);
	sf_node_set_host(n, NULL); /* freed: the next lookup makes it anew */
	CHECK(sf_dir_find(v->root, "a#1", &n, &e) == 0 && n);
	CHECK_EQ_U(made, 2);
	expect_text(n, "2/20");
	struct sf_dirent d;
	CHECK(listed(v->root, "x%2Fy", &d) && d.kind == SF_FILE && !d.node);
	CHECK(!listed(v->root, "x", &d));
	/* still pinned: freed with the view */
	sf_view_unref(v);
}

static int build_abc(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	(void)c;
	(void)e;
	return sf_file_set_bytes(f, "abc", 3);
}

static void count_warning(void *arg, const char *path, const char *msg)
{
	(*(int *)arg)++;
	CHECK(strcmp(path, "q") == 0 && strncmp(msg, "w", 1) == 0);
}

/* What a host may ask of a node without reading its fields: a directory's
 * state, a file's size before and after its build. */
static void test_queries(void)
{
	struct sf_view *v = sf_view_new(NULL, "q");
	struct sf_err e = { { 0 } };
	struct sf_node *root = v ? sf_view_root(v) : NULL;
	CHECK(root && sf_node_kind(root) == SF_DIR && sf_node_view(root) == v);
	CHECK(sf_dir_is_populated(root) && !sf_dir_has_lookup(root));
	struct sf_node *sized = sf_dir_add_file(root, "sized", 5);
	struct sf_node *later = sf_dir_add_file(root, "later", 5);
	struct sf_node *bad = sf_dir_add_file(root, "bad", 3);
	struct sf_node *link = sf_dir_add_exact(root, SF_LINK, "l");
	CHECK(sized && later && bad && link && (link->u.target = strdup("sized")));
	CHECK(strcmp(sf_node_name(sized), "sized") == 0 && sf_node_host(sized) == NULL);
	CHECK(sf_node_kind(link) == SF_LINK && strcmp(sf_link_target(link), "sized") == 0);
	sf_file_set_build_sized(sized, build_abc, NULL, 3);
	sf_file_set_build(later, build_abc, NULL);
	CHECK(sf_file_set_broken(bad, 0, "damaged") == 0);
	struct sf_file_size s = sf_file_size(sized);
	CHECK(s.known && s.size == 3 && !s.broken);
	s = sf_file_size(later);
	CHECK(!s.known && s.size == 0 && !s.broken);
	CHECK(sf_file_size(bad).broken);
	CHECK(sf_file_ready(later, &sf_nocache, &e) == 0);
	s = sf_file_size(later);
	CHECK(s.known && s.size == 3);
	sf_dir_set_populate(root, lazy_populate, NULL);
	CHECK(!sf_dir_is_populated(root));
	CHECK(sf_dir_set_lazy(root, make_text) == 0 && sf_dir_ready(root, &e) == 0);
	CHECK(sf_dir_is_populated(root));
	/* each warning is passed on once */
	int seen = 0;
	sf_view_warn(v, "w1");
	sf_view_warn(v, "w2");
	sf_view_take_warnings(v, count_warning, &seen);
	CHECK_EQ_U(seen, 2);
	sf_view_take_warnings(v, count_warning, &seen);
	CHECK_EQ_U(seen, 2);
	sf_view_warn(v, "w3");
	sf_view_take_warnings(v, count_warning, &seen);
	CHECK_EQ_U(seen, 3);
	sf_view_unref(v);
}

/* Turns: one at a time per turn, whichever bucket its waiters share; a
 * waiter wakes when its own turn is given back, not before. */
struct turn_arg {
	struct sf_turn *t;
	atomic_int *inside;
	atomic_int worst;
};

static void *turn_worker(void *p)
{
	struct turn_arg *a = p;
	for (int i = 0; i < 2000; i++) {
		sf_turn_take(a->t);
		int n = atomic_fetch_add(a->inside, 1) + 1;
		if (n > atomic_load(&a->worst))
			atomic_store(&a->worst, n);
		atomic_fetch_sub(a->inside, 1);
		sf_turn_give(a->t);
	}
	return NULL;
}

static void test_turn(void)
{
	struct sf_turn t = SF_TURN_INIT, u;
	sf_turn_init(&u);
	CHECK(sf_turn_try(&t) && sf_turn_held(&t));
	CHECK(!sf_turn_try(&t));
	CHECK(sf_turn_try(&u)); /* another turn is free, whatever its bucket */
	sf_turn_give(&t);
	CHECK(!sf_turn_held(&t) && sf_turn_held(&u));
	sf_turn_give(&u);

	/* 4 threads on each of 2 turns: never two inside one turn */
	enum { TURNS = 2, PER = 4 };
	struct sf_turn turns[TURNS];
	atomic_int inside[TURNS];
	struct turn_arg args[TURNS * PER];
	pthread_t th[TURNS * PER];
	for (int k = 0; k < TURNS; k++) {
		sf_turn_init(&turns[k]);
		atomic_init(&inside[k], 0);
	}
	for (int i = 0; i < TURNS * PER; i++) {
		args[i] = (struct turn_arg){ &turns[i % TURNS], &inside[i % TURNS], 0 };
		CHECK(pthread_create(&th[i], NULL, turn_worker, &args[i]) == 0);
	}
	for (int i = 0; i < TURNS * PER; i++) {
		pthread_join(th[i], NULL);
		CHECK(atomic_load(&args[i].worst) == 1);
	}
	for (int k = 0; k < TURNS; k++) {
		CHECK(!sf_turn_held(&turns[k]));
		sf_turn_fini(&turns[k]);
	}
	sf_turn_fini(&t);
	sf_turn_fini(&u);
}

int main(void)
{
	test_crc();
	test_cursor();
	test_escape();
	test_extents();
	test_fit();
	test_zstd();
	test_zstd_check();
	test_zstd_from_file();
	test_copy_from_file();
	test_json();
	test_report();
	test_grow();
	test_str_big();
	test_hash();
	test_hash_rolling();
	test_ids();
	test_ids_bare();
	test_lazy();
	test_queries();
	test_turn();
	CHECK_DONE();
}
