/* The seek index of compressed tars (format/taridx/tx_z.c), per codec: a
 * tar made here, compressed by each codec's library in one stream and in
 * three, indexed, then read back through the decoded map at offsets all
 * over it, in an order no decoder left behind can follow; the decoded size
 * and the start points are checked. Damaged archives fail with a reason. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fuzz/zpack.h"
#include "check.h"
#include "sf_bytes.h"
#include "sf_map.h"
#include "sf_view.h"
#include "taridx/tx.h"
#include "taridx/tx_z.h"

/* any compressed tar's descriptor: the view only holds the pieces' parts */
extern const struct sf_format tx_targz_format;

static char dir[96]; /* check_tmp: under $TMPDIR when set and short */

/* 9 MiB of text compressible about 4:1, so that gzip puts start points
 * inside its member. */
static uint8_t *make_plain(size_t *n)
{
	size_t cap = 9u << 20, len = 0;
	uint8_t *p = malloc(cap);
	uint64_t x = 88172645463325252u;
	while (len + 64 < cap) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		len += (size_t)snprintf((char *)p + len, 64, "row %llu value %llu\n",
					(unsigned long long)(len / 7), (unsigned long long)(x % 100000));
	}
	*n = len;
	return p;
}

static void put(const char *name, const void *p, size_t n)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(p, 1, n, f) == n);
	fclose(f);
}

/* Indexes file `name`: 0 with *m and *v, or the error. */
static int index_file(const char *name, struct sf_map **m, struct sf_view **v, struct sf_err *e)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	*m = NULL;
	*v = NULL;
	struct sf_map *src;
	int rc = sf_map_open(path, &src, e);
	if (rc)
		return rc;
	uint8_t head[6];
	CHECK(sf_map_read(src, 0, sizeof head, head, "head", e) == 0);
	*v = sf_view_new(&tx_targz_format, path);
	rc = tx_z_map(src, tx_z_sniff(head, sizeof head), m, e);
	sf_map_unref(src);
	if (!rc)
		rc = tx_z_index(*m, *v, NULL, NULL, NULL, e);
	return rc;
}

static void release(struct sf_map *m, struct sf_view *v)
{
	sf_map_unref(m);
	if (v)
		sf_view_unref(v);
}

/* Reads the decoded map at offsets all over it, back to front. */
static void check_reads(struct sf_map *m, const uint8_t *plain, size_t n)
{
	uint8_t buf[70000];
	struct sf_err e;
	for (size_t i = 12; i-- > 0;) {
		size_t off = (size_t)((i * 2654435761u) % (n - sizeof buf)), len = 1 + (i * 977) % sizeof buf;
		CHECK(sf_map_read(m, off, len, buf, "test", &e) == 0);
		CHECK(memcmp(buf, plain + off, len) == 0);
	}
	/* across a piece's end, and the last byte */
	CHECK(sf_map_read(m, TX_Z_PIECE - 100, 200, buf, "test", &e) == 0);
	CHECK(memcmp(buf, plain + TX_Z_PIECE - 100, 200) == 0);
	CHECK(sf_map_read(m, n - 1, 1, buf, "test", &e) == 0 && buf[0] == plain[n - 1]);
	CHECK(sf_map_read(m, n, 1, buf, "test", &e) == -EINVAL);
}

static void test_codec(enum tx_zcodec c, const uint8_t *plain, size_t n)
{
	static const char *const names[] = { "", "a.tar.gz", "a.tar.zst", "a.tar.xz", "a.tar.bz2",
					     "a.tar.lz4" };
	struct sf_err e;
	struct sf_map *m;
	struct sf_view *v;
	struct tx_zinfo zi;
	/* one stream */
	uint8_t *z;
	size_t zn = zpack(c, plain, n, &z);
	CHECK(zn > 0);
	put(names[c], z, zn);
	int rc = index_file(names[c], &m, &v, &e);
	CHECK(rc == 0);
	if (rc)
		fprintf(stderr, "%s: %s\n", names[c], e.msg);
	if (!rc) {
		CHECK_EQ_U(m->size, n);
		tx_z_info(m, &zi);
		CHECK(zi.codec == c && zi.compressed == zn);
		/* start points inside the stream: gzip and lz4 one every
		 * ~3.5 MiB, zstd every 8 windows (4 MiB at level 1) */
		CHECK(c == TX_Z_GZIP || c == TX_Z_LZ4 ? zi.starts >= 3 :
		      c == TX_Z_ZSTD ? zi.starts >= 2 : zi.starts == 1);
		CHECK(zi.pieces >= (n + TX_Z_PIECE - 1) / TX_Z_PIECE);
		/* gzip's stretches stay within a piece */
		CHECK(c != TX_Z_GZIP || zi.pieces == zi.starts);
		check_reads(m, plain, n);
	}
	release(m, v);
	/* truncated: the map is what was decoded before, exact, and the
	 * reason names it */
	put(names[c], z, zn - 7);
	rc = index_file(names[c], &m, &v, &e);
	tx_z_info(m, &zi);
	if (rc || !zi.damage)
		fprintf(stderr, "%s: rc %d size %zu of %zu: %s\n", names[c], rc, (size_t)(m ? m->size : 0), n, rc ? e.msg : "no damage");
	CHECK(rc == 0 && m->size <= n && zi.damage &&
	      (strstr(zi.damage, "truncated") || strstr(zi.damage, "data")));
	uint8_t *pre = malloc(m->size + 1);
	CHECK(pre && sf_map_read(m, 0, m->size, pre, "test", &e) == 0 && !memcmp(pre, plain, m->size));
	free(pre);
	release(m, v);
	/* trailing garbage after the last stream: all of it is there */
	uint8_t *t = malloc(zn + 16);
	memcpy(t, z, zn);
	memcpy(t + zn, "garbage-garbage!", 16);
	put(names[c], t, zn + 16);
	rc = index_file(names[c], &m, &v, &e);
	tx_z_info(m, &zi);
	CHECK(rc == 0 && m->size == n && zi.damage && strstr(zi.damage, "trailing garbage"));
	release(m, v);
	memset(t + zn, 0, 16);
	put(names[c], t, zn + 16);
	CHECK(index_file(names[c], &m, &v, &e) == 0 && m->size == n);
	release(m, v);
	free(t);
	free(z);
	/* three streams, cut anywhere */
	size_t cuts[] = { 0, n / 3 + 11, 2 * n / 3 + 5, n };
	struct sf_str all = { 0 };
	for (int i = 0; i < 3; i++) {
		zn = zpack(c, plain + cuts[i], cuts[i + 1] - cuts[i], &z);
		sf_str_add(&all, z, zn);
		free(z);
	}
	put(names[c], all.p, all.len);
	rc = index_file(names[c], &m, &v, &e);
	CHECK(rc == 0);
	if (!rc) {
		CHECK_EQ_U(m->size, n);
		tx_z_info(m, &zi);
		CHECK(zi.starts >= 3);
		check_reads(m, plain, n);
	}
	release(m, v);
	sf_str_free(&all);
}

/* xz in blocks of 1 MiB, as `xz -T2` writes it: a start point at each
 * block, from the stream's index. */
static void test_xz_blocks(const uint8_t *plain, size_t n)
{
	lzma_stream x = LZMA_STREAM_INIT;
	lzma_mt mt = { .threads = 1, .block_size = 1u << 20, .preset = 1, .check = LZMA_CHECK_CRC32 };
	CHECK(lzma_stream_encoder_mt(&x, &mt) == LZMA_OK);
	size_t cap = n + (1u << 20);
	uint8_t *o = malloc(cap);
	x.next_in = plain;
	x.avail_in = n;
	x.next_out = o;
	x.avail_out = cap;
	CHECK(lzma_code(&x, LZMA_FINISH) == LZMA_STREAM_END);
	put("b.tar.xz", o, x.total_out);
	lzma_end(&x);
	free(o);
	struct sf_err e;
	struct sf_map *m;
	struct sf_view *v;
	struct tx_zinfo zi;
	CHECK(index_file("b.tar.xz", &m, &v, &e) == 0);
	tx_z_info(m, &zi);
	CHECK_EQ_U(zi.starts, (n + (1u << 20) - 1) >> 20);
	check_reads(m, plain, n);
	release(m, v);
}

/* The seek index kept in a directory of its own: written, read back the same, and refused
 * when cut short, damaged or made for another archive. */
static void test_keep(const uint8_t *plain, size_t n)
{
	uint8_t *z;
	size_t zn = zpack(TX_Z_GZIP, plain, n, &z);
	put("k.tar.gz", z, zn);
	free(z);
	char path[256];
	snprintf(path, sizeof path, "%s/k.tar.gz", dir);
	struct sf_err e;
	struct sf_map *m, *src;
	struct sf_view *v;
	CHECK(index_file("k.tar.gz", &m, &v, &e) == 0);
	CHECK(sf_map_open(path, &src, &e) == 0);
	char path_k[256];
	memcpy(path_k, path, sizeof path_k);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct tx_zinfo zi;
	tx_z_info(m, &zi);
	/* made by hand: a start point, a window, the end */
	uint8_t w[8] = "window!";
	struct tx_zstart st[3] = { { 0 }, { .in = 100, .out = 5000, .mem = 7, .win = w, .wlen = 8,
					   .bits = 3, .byte = 0xa5 }, { .in = zn, .out = n } };
	/* the index of an empty tar stands for the tar's */
	uint8_t zeros[1024] = { 0 };
	put("e.tar", zeros, sizeof zeros);
	snprintf(path, sizeof path, "%s/e.tar", dir);
	struct sf_map *et;
	struct sf_buf *tarix = NULL, *unk = NULL;
	struct tx_built walked, gb = { 0 };
	CHECK(sf_map_open(path, &et, &e) == 0 &&
	      tx_index_tar(et, "e.tar", NULL, NULL, NULL, &walked, &e) == 0 && !walked.heads);
	tarix = walked.index;
	unk = walked.unkeyed;
	sf_map_unref(et);
	CHECK(unk && unk->len == 0);
	sf_buf_unref(unk);
	/* three root names the index cannot key, ascending */
	uint64_t names[3] = { 5, 1ull << 40, UINT64_MAX };
	CHECK((unk = sf_buf_new(sizeof names)) != NULL);
	memcpy(unk->data, names, sizeof names);
	/* header blocks: two that touch are one stretch, one apart, one
	 * noted out of order is left out */
	struct tx_zheads_make *hm = tx_zheads_begin();
	uint8_t blk[3][512];
	for (int i = 0; i < 3; i++)
		memset(blk[i], 'a' + i, sizeof blk[i]);
	tx_zheads_note(hm, 0, blk[0], 512);
	tx_zheads_note(hm, 512, blk[1], 512);
	tx_zheads_note(hm, 4096, blk[2], 512);
	tx_zheads_note(hm, 1024, blk[2], 512);
	struct sf_buf *heads = tx_zheads_end(hm);
	uint64_t ci, pos, end;
	CHECK(heads && tx_zheads_ok(heads, n) && !tx_zheads_ok(heads, 4000));
	CHECK(tx_zheads_find(heads, 100, 800, &ci, &pos, &end) && ci == 0 && pos == 100 && end == 1024);
	CHECK(tx_zheads_find(heads, 4096, 512, &ci, &pos, &end) && pos == 1024 && end == 4608);
	CHECK(!tx_zheads_find(heads, 1024, 1, &ci, &pos, &end) &&
	      !tx_zheads_find(heads, 900, 200, &ci, &pos, &end));
	/* a stretch shorter than a tar block is none: refused on load */
	struct sf_buf *bad = sf_buf_new(heads->len);
	memcpy(bad->data, heads->data, heads->len);
	sf_put_le32(bad->data + 16 + 16 + 8, 100);
	CHECK(!tx_zheads_ok(bad, n));
	sf_buf_unref(bad);
	struct sf_buf *raw = tx_zheads_chunk(heads, 0);
	CHECK(raw && raw->len == 1536 && raw->data[0] == 'a' && raw->data[600] == 'b' &&
	      raw->data[1535] == 'c');
	sf_buf_unref(raw);
	struct tx_built mine = { tarix, unk, heads };
	CHECK(tx_zkeep_save(dfd, -1, "k.zidx", src, TX_Z_GZIP, st, 3, &mine, &e) == 0);
	struct tx_zstart *got = NULL;
	size_t ngot = 0;
	int wfd = -1;
	CHECK(tx_zkeep_load(dfd, -1, "k.zidx", src, TX_Z_GZIP, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 0);
	CHECK(gb.index && gb.index->len == tarix->len && !memcmp(gb.index->data, tarix->data, tarix->len));
	size_t ix_len = tarix->len;
	CHECK(gb.unkeyed && gb.unkeyed->len == sizeof names && !memcmp(gb.unkeyed->data, names, sizeof names));
	CHECK(tx_unkeyed_has(gb.unkeyed, 1ull << 40) && tx_unkeyed_has(gb.unkeyed, UINT64_MAX) &&
	      !tx_unkeyed_has(gb.unkeyed, 6));
	CHECK(gb.heads && gb.heads->len == heads->len && !memcmp(gb.heads->data, heads->data, heads->len));
	sf_buf_unref(gb.index);
	sf_buf_unref(gb.unkeyed);
	sf_buf_unref(gb.heads);
	/* the window stays in the file, read back when used */
	uint8_t *gotw = NULL;
	CHECK(ngot == 3 && got && got[1].in == 100 && got[1].out == 5000 && got[1].wlen == 8 &&
	      !got[1].win && got[1].bits == 3 && got[1].byte == 0xa5 && got[2].out == n);
	CHECK(wfd >= 0 && tx_zkeep_window(wfd, "k", &got[1], &gotw, &e) == 0 && !memcmp(gotw, w, 8));
	free(gotw);
	/* a kept index is not kept again: its windows are its file's */
	CHECK(tx_zkeep_save(dfd, -1, "again.zidx", src, TX_Z_GZIP, got, 3, &mine, &e) == -EINVAL);
	/* the file changed in place after it was read: the window says so;
	 * put back, it reads again */
	char kp0[300];
	snprintf(kp0, sizeof kp0, "%s/k.zidx", dir);
	int wr = open(kp0, O_WRONLY);
	CHECK(wr >= 0 && pwrite(wr, "\x55", 1, (off_t)got[1].wat) == 1);
	CHECK(tx_zkeep_window(wfd, "k", &got[1], &gotw, &e) == -EIO && strstr(e.msg, "changed"));
	CHECK(wr >= 0 && pwrite(wr, w, 1, (off_t)got[1].wat) == 1);
	close(wr);
	CHECK(tx_zkeep_window(wfd, "k", &got[1], &gotw, &e) == 0 && !memcmp(gotw, w, 8));
	free(gotw);
	close(wfd);
	free(got);
	/* another codec, a bound too small, a byte changed, cut short */
	CHECK(tx_zkeep_load(dfd, -1, "k.zidx", src, TX_Z_ZSTD, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 1);
	CHECK(tx_zkeep_load(dfd, -1, "k.zidx", src, TX_Z_GZIP, 100, &got, &ngot, &wfd, &gb, &e) == 1);
	/* another name of the archive (a hard link) finds it by its key,
	 * and is linked to it */
	struct stat ks, ns;
	CHECK(tx_zkeep_load(dfd, -1, "other.zidx", src, TX_Z_GZIP, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 0);
	CHECK(ngot == 3 && got[1].in == 100 && gb.index && gb.index->len == ix_len);
	CHECK(fstatat(dfd, "k.zidx", &ks, 0) == 0 && fstatat(dfd, "other.zidx", &ns, 0) == 0 &&
	      ks.st_ino == ns.st_ino);
	sf_buf_unref(gb.index);
	sf_buf_unref(gb.unkeyed);
	sf_buf_unref(gb.heads);
	close(wfd);
	free(got);
	/* k.zidx, other.zidx and the key */
	CHECK(fstatat(dfd, "other.zidx", &ns, 0) == 0 && ns.st_nlink == 3);
	char kp[300];
	snprintf(kp, sizeof kp, "%s/k.zidx", dir);
	FILE *f = fopen(kp, "r+b");
	CHECK(f && fseek(f, 60, SEEK_SET) == 0 && fputc(0x55, f) != EOF);
	fclose(f);
	CHECK(tx_zkeep_load(dfd, -1, "k.zidx", src, TX_Z_GZIP, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 1);
	CHECK(truncate(kp, 70) == 0);
	CHECK(tx_zkeep_load(dfd, -1, "k.zidx", src, TX_Z_GZIP, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 1);
	/* kept anew for the archive changed since (its mtime): the old
	 * file's key goes, the other name alone keeps its bytes */
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { 12345, 0 } };
	struct sf_map *changed;
	CHECK(utimensat(AT_FDCWD, path_k, ts, 0) == 0 && sf_map_open(path_k, &changed, &e) == 0);
	CHECK(tx_zkeep_save(dfd, -1, "k.zidx", changed, TX_Z_GZIP, st, 3, &mine, &e) == 0);
	CHECK(fstatat(dfd, "other.zidx", &ns, 0) == 0 && ns.st_nlink == 1);
	CHECK(fstatat(dfd, "k.zidx", &ks, 0) == 0 && ks.st_nlink == 2);
	/* a name in another directory finds it by its key at the top */
	char far[300];
	snprintf(far, sizeof far, "%s/far", dir);
	int ffd = mkdir(far, 0755) == 0 ? open(far, O_RDONLY | O_DIRECTORY) : -1;
	CHECK(ffd >= 0);
	CHECK(tx_zkeep_load(ffd, -1, "f.zidx", changed, TX_Z_GZIP, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 1);
	CHECK(tx_zkeep_load(ffd, dfd, "f.zidx", changed, TX_Z_GZIP, 1 << 20, &got, &ngot, &wfd, &gb, &e) == 0);
	CHECK(ngot == 3 && fstatat(ffd, "f.zidx", &ns, 0) == 0 && ns.st_ino == ks.st_ino);
	/* let go as damaged: the names that name it go, k.zidx alone stays */
	tx_zkeep_forget(wfd, ffd, dfd, "f.zidx");
	CHECK(fstatat(ffd, "f.zidx", &ns, 0) == -1 && fstatat(dfd, "k.zidx", &ks, 0) == 0 &&
	      ks.st_nlink == 1);
	sf_buf_unref(gb.index);
	sf_buf_unref(gb.unkeyed);
	sf_buf_unref(gb.heads);
	close(wfd);
	free(got);
	close(ffd);
	sf_map_unref(changed);
	sf_buf_unref(tarix);
	sf_buf_unref(unk);
	sf_buf_unref(heads);
	close(dfd);
	sf_map_unref(src);
	release(m, v);
}

int main(void)
{
	check_tmp(dir, sizeof dir, "test_taridx_z");
	CHECK(mkdtemp(dir) != NULL);
	size_t n;
	uint8_t *plain = make_plain(&n);
	for (enum tx_zcodec c = TX_Z_GZIP; c <= TX_Z_LZ4; c++)
		test_codec(c, plain, n);
	test_xz_blocks(plain, n);
	test_keep(plain, n);
	/* a stream whose CRC fails */
	uint8_t *z;
	size_t zn = zpack(TX_Z_GZIP, plain, 100000, &z);
	z[zn - 6] ^= 1;
	put("a.tar.gz", z, zn);
	struct sf_err e;
	struct sf_map *m;
	struct sf_view *v;
	struct tx_zinfo zi;
	/* the one stream's damage may lie anywhere in it: nothing is left */
	CHECK(index_file("a.tar.gz", &m, &v, &e) == 0 && m->size == 0);
	tx_z_info(m, &zi);
	CHECK(zi.damage && strstr(zi.damage, "incorrect data check"));
	release(m, v);
	free(z);
	free(plain);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
	return check_failures;
}
