/* A compressed tar's seek index kept in --index-dir (tx_z.h), so that the
 * next mount skips the pass over the archive. The file, little-endian:
 *
 *   0  "SFZIDX\0\5"
 *   8  u32 codec, u32 zero
 *  16  u64 archive size, u64 mtime seconds, u64 mtime nanoseconds
 *  40  u64 XXH64 of the archive's sampled bytes (4 KiB at its start,
 *      middle and end)
 *  48  u64 n: start points, the last one the end
 *  56  n records of 48 bytes: u64 in, out, mem; u32 wlen; u8 bits, byte,
 *      block, check; u64 XXH64 of its window (0 with none)
 *      the windows, wlen bytes each, in order
 *      u64 t, and t bytes: the tar's index as tx_index_tar builds it
 *      u64 u, and u u64s: the hashes of the root names that index cannot
 *      key, noted by the same walk (tx_index_tar), ascending
 *      u64 k, and k bytes: the tar's header blocks the walk read
 *      (tx_zheads.c), so that a listing decodes none; k is 0 when none
 *      were kept
 *      u64 XXH64 of every byte before it but the windows'
 *
 * Version 1 kept no root names, so its first lookup read every header
 * again; version 2 no start points inside a zstd or lz4 frame (its reads
 * decoded from the frame's start); version 3 no header blocks (a listing
 * decoded the whole archive); version 4 summed the windows with the rest,
 * so a mount read them all at its first lookup (22 MB for the bench's
 * zstd archive): all are made anew.
 *
 * Every name of one archive (hard links) finds the file: besides
 * `<name>.zidx` it is linked as `.archive-<K>.zidx` in the same directory
 * and at --index-dir's top (for names in other directories), K the XXH64
 * of the header's bytes 8 to 48 (codec, size, mtime, sampled bytes), which
 * any name of the same archive computes alike; a name that has no file of
 * its own, or one that does not match, reads that one and is linked to
 * it. Names are only where to look: whatever is found is checked as above.
 *
 * It is read as untrusted: bounded, checked whole, and every record
 * checked against the archive before it is used. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "sf_bytes.h"
#include "sf_buf.h"
#include "tx.h"
#include "tx_z.h"

#define HEAD 56
#define REC 48
#define SAMPLE 4096u
/* ".archive-" 16 hex digits ".zidx" */
#define KEYNAME 32
static const uint8_t magic[8] = { 'S', 'F', 'Z', 'I', 'D', 'X', 0, 5 };

/* The name every name of the archive whose header is h finds it by. */
static void key_name(const uint8_t *h, char *out)
{
	snprintf(out, KEYNAME, ".archive-%016llx.zidx", (unsigned long long)XXH64(h + 8, 40, 0));
}

/* A temporary name for `name`, this process's and this call's alone (two
 * hosts of one process may keep at once). */
static void tmp_name(char *out, size_t cap, const char *name)
{
	static atomic_uint seq;
	snprintf(out, cap, ".%.200s.%ld.%u.tmp", name, (long)getpid(), atomic_fetch_add(&seq, 1));
}

/* Makes `to` in directory tofd name the file `from` in fromfd names,
 * unless it does already: a hard link under a temporary name, renamed
 * over `to`. true when `to` names it; false where hard links cannot be
 * made (a read-only --index-dir, a file system without them), which only
 * leaves `to` to be made by the next pass. */
static bool link_as(int fromfd, const char *from, int tofd, const char *to)
{
	struct stat a, b;
	if (fstatat(fromfd, from, &a, AT_SYMLINK_NOFOLLOW))
		return false;
	if (!fstatat(tofd, to, &b, AT_SYMLINK_NOFOLLOW) && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
		return true;
	char tmp[300];
	tmp_name(tmp, sizeof tmp, to);
	if (linkat(fromfd, from, tofd, tmp, 0))
		return false;
	if (!renameat(tofd, tmp, tofd, to))
		return true;
	unlinkat(tofd, tmp, 0);
	return false;
}

/* Writes len bytes at p as `name` in dirfd, whole or not at all (a
 * temporary file renamed): 0 or a negative errno. */
static int put_file(int dirfd, const char *name, const void *p, size_t len)
{
	char tmp[300];
	tmp_name(tmp, sizeof tmp, name);
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	int rc = fd < 0 ? -errno : 0;
	if (!rc && write(fd, p, len) != (ssize_t)len)
		rc = -EIO;
	if (fd >= 0 && close(fd) && !rc)
		rc = -errno;
	if (!rc && renameat(dirfd, tmp, dirfd, name))
		rc = -errno;
	if (rc && fd >= 0)
		unlinkat(dirfd, tmp, 0);
	return rc;
}

/* Before `name` in dirfd is replaced by a file of key `key`: the links
 * the file it names now has by another key (in dirfd and topfd: the
 * archive changed since) are removed, so that its bytes do not stay on
 * disk under those names alone. */
static void drop_old_key(int dirfd, int topfd, const char *name, const char *key)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	uint8_t h[HEAD];
	char old[KEYNAME];
	struct stat a, b;
	if (fd < 0)
		return;
	if (pread(fd, h, HEAD, 0) == HEAD && !fstat(fd, &a)) {
		key_name(h, old);
		for (int i = 0; i < 2 && strcmp(old, key); i++) {
			int at = i ? topfd : dirfd;
			if (at >= 0 && !fstatat(at, old, &b, AT_SYMLINK_NOFOLLOW) &&
			    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
				unlinkat(at, old, 0);
		}
	}
	close(fd);
}

/* XXH64 of the archive's first, middle and last SAMPLE bytes. */
static int sample_hash(const struct sf_map *src, uint64_t *h, struct sf_err *e)
{
	uint8_t buf[3 * SAMPLE];
	uint64_t k = src->size < SAMPLE ? src->size : SAMPLE;
	uint64_t at[3] = { 0, (src->size - k) / 2, src->size - k };
	for (int i = 0; i < 3; i++) {
		int rc = sf_map_read(src, at[i], k, buf + i * k, "sampled bytes", e);
		if (rc)
			return rc;
	}
	*h = XXH64(buf, 3 * k, 0);
	return 0;
}

/* The header the archive as it is now would have. */
static int head_of(const struct sf_map *src, enum tx_zcodec c, uint64_t n, uint8_t *h,
		   struct sf_err *e)
{
	uint64_t hash;
	int rc = sample_hash(src, &hash, e);
	if (rc)
		return rc;
	memset(h, 0, HEAD);
	memcpy(h, magic, sizeof magic);
	sf_put_le32(h + 8, (uint32_t)c);
	sf_put_le64(h + 16, src->size);
	sf_put_le64(h + 24, (uint64_t)src->st.st_mtim.tv_sec);
	sf_put_le64(h + 32, (uint64_t)src->st.st_mtim.tv_nsec);
	sf_put_le64(h + 40, hash);
	sf_put_le64(h + 48, n);
	return 0;
}

/* Whether record r (of n) can be a start point of archive src of codec c
 * after record prev (NULL for the first). */
static bool record_ok(const struct tx_zstart *r, const struct tx_zstart *prev, size_t i, size_t n,
		      const struct sf_map *src, enum tx_zcodec c)
{
	/* a window: gzip's inside a member, zstd's at a block of a frame;
	 * blocks of xz streams and zstd and lz4 frames */
	bool zblock = c == TX_Z_ZSTD && r->block;
	if (r->in > src->size || r->bits > 7 || r->mem > (1ull << 32) ||
	    r->wlen > ZSTD_compressBound(zblock ? TX_Z_ZSTD_WINDOW_MAX : TX_Z_WINDOW) ||
	    (r->wlen && c != TX_Z_GZIP && !zblock) || (zblock && !r->wlen) ||
	    (r->block && c != TX_Z_XZ && c != TX_Z_ZSTD && c != TX_Z_LZ4) ||
	    (r->bits && (!r->wlen || c != TX_Z_GZIP)))
		return false;
	if (!prev)
		return r->in == 0 && r->out == 0 && !r->wlen && !r->block;
	if (r->in < prev->in || r->out < prev->out)
		return false;
	return i + 1 < n || (r->in == src->size && !r->wlen && !r->block);
}

/* The root names' block at p + *at into *out, *at then after it: 0, or 1
 * when it is not one (its count off, its hashes not ascending) or out of
 * memory. */
static int names_at(const uint8_t *p, size_t len, size_t *at, struct sf_buf **out)
{
	if (len - 8 - *at < 8)
		return 1;
	uint64_t u = sf_le64(p + *at), prev = 0;
	size_t rest = len - 16 - *at;
	if (u > rest / 8 || !(*out = sf_buf_new((size_t)u * 8)))
		return 1;
	const uint8_t *from = p + *at;
	*at += 8 + 8 * (size_t)u;
	for (size_t i = 0; i < u; i++) {
		uint64_t h = sf_le64(from + 8 + 8 * i);
		if (i && h <= prev) {
			sf_buf_unref(*out);
			*out = NULL;
			return 1;
		}
		memcpy((*out)->data + 8 * i, &h, sizeof h);
		prev = h;
	}
	return 0;
}

/* The header blocks' block at p + at, the last before the sum, into
 * *out (NULL when it says none): 0, or 1 when it is not one or out of
 * memory. */
static int heads_at(const uint8_t *p, size_t len, size_t at, uint64_t tarsize, struct sf_buf **out)
{
	*out = NULL;
	if (len - 8 - at < 8)
		return 1;
	uint64_t k = sf_le64(p + at);
	if (k != len - 16 - at)
		return 1;
	if (!k)
		return 0;
	if (!(*out = sf_buf_new((size_t)k)))
		return 1;
	memcpy((*out)->data, p + at + 8, (size_t)k);
	if (tx_zheads_ok(*out, tarsize))
		return 0;
	sf_buf_unref(*out);
	*out = NULL;
	return 1;
}

/* Reads len bytes at `at` of fd into p, adding them to the file's sum:
 * true when they were all there. */
static bool read_summed(int fd, void *p, size_t len, uint64_t at, XXH64_state_t *sum)
{
	if (pread(fd, p, len, (off_t)at) != (ssize_t)len)
		return false;
	XXH64_update(sum, p, len);
	return true;
}

/* tx_zkeep_load of the file `name`, for the archive whose header (but its
 * count of start points) is `want`. The windows stay in the file (*wfd,
 * kept open), unread: each is read and checked against its record's sum
 * when a decoder starts there (tx_zkeep_window), so that the index holds
 * none of them (a zstd frame's are an eighth of the tar) and a mount
 * reading it touches a few bytes a start point. */
static int load_one(int dirfd, const char *name, const uint8_t *want, const struct sf_map *src,
		    enum tx_zcodec c, uint64_t max, struct tx_zstart **out, size_t *nout, int *wfd,
		    struct tx_built *b, struct sf_err *e)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return 1;
	uint8_t h[HEAD], *recs = NULL, *tail = NULL;
	struct tx_zstart *s = NULL;
	XXH64_state_t *sum = XXH64_createState();
	uint64_t n = 0;
	size_t len = 0, at = HEAD;
	int rc = sum ? 1 : -ENOMEM;
	bool ok = rc == 1 && !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size >= HEAD + 8 &&
		  (uint64_t)st.st_size <= max;
	if (ok) {
		len = (size_t)st.st_size;
		XXH64_reset(sum, 0);
		ok = read_summed(fd, h, HEAD, 0, sum) && !memcmp(h, want, HEAD - 8);
	}
	/* the records, then where the windows they say lie */
	if (ok) {
		n = sf_le64(h + 48);
		ok = n >= 2 && n <= (len - HEAD - 8) / REC;
	}
	if (ok && (!(s = calloc((size_t)n, sizeof *s)) || !(recs = malloc((size_t)n * REC))))
		rc = -ENOMEM;
	ok = ok && rc == 1 && read_summed(fd, recs, (size_t)n * REC, HEAD, sum);
	at = HEAD + (size_t)n * REC;
	for (size_t i = 0; ok && i < n; i++) {
		const uint8_t *r = recs + i * REC;
		s[i] = (struct tx_zstart){ .in = sf_le64(r), .out = sf_le64(r + 8), .mem = sf_le64(r + 16),
					   .wlen = sf_le32(r + 24), .bits = r[28], .byte = r[29],
					   .block = r[30] != 0, .check = r[31], .wsum = sf_le64(r + 40) };
		ok = record_ok(&s[i], i ? &s[i - 1] : NULL, i, n, src, c) && s[i].wlen <= len - 8 - at;
		if (ok && s[i].wlen) {
			s[i].wat = at;
			at += s[i].wlen;
		}
	}
	/* the rest, the sum of every byte before it but the windows last */
	if (ok && rc == 1 && !(tail = malloc(len - at)))
		rc = -ENOMEM;
	ok = ok && rc == 1 && read_summed(fd, tail, len - at - 8, at, sum) &&
	     pread(fd, tail + len - at - 8, 8, (off_t)(len - 8)) == 8 &&
	     sf_le64(tail + len - at - 8) == XXH64_digest(sum);
	/* the tar's index, which must parse as one, then the root names and
	 * the header blocks */
	size_t tl = len - at, ta = 0;
	ok = ok && tl - 8 >= 8;
	uint64_t t = ok ? sf_le64(tail) : 0;
	*b = (struct tx_built){ 0 };
	ok = ok && t <= tl - 16 && (b->index = sf_buf_new((size_t)t));
	if (ok) {
		memcpy(b->index->data, tail + 8, (size_t)t);
		ta = 8 + (size_t)t;
		struct tx_index ix = { 0 };
		struct sf_err ignored;
		ok = !tx_index_parse(b->index->data, (size_t)t, name, &ix, &ignored);
		tx_index_free(&ix);
		ok = ok && !names_at(tail, tl, &ta, &b->unkeyed) &&
		     !heads_at(tail, tl, ta, s[n - 1].out, &b->heads);
	}
	if (!ok)
		tx_built_drop(b);
	free(recs);
	free(tail);
	XXH64_freeState(sum);
	if (ok && rc == 1) {
		*out = s;
		*nout = (size_t)n;
		*wfd = fd;
		return 0;
	}
	close(fd);
	free(s);
	return rc == -ENOMEM ? sf_fail(e, rc, "out of memory") : 1;
}

int tx_zkeep_window(int fd, const char *path, const struct tx_zstart *st, uint8_t **out,
		    struct sf_err *e)
{
	uint8_t *w = malloc(st->wlen);
	if (!w)
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	if (pread(fd, w, st->wlen, (off_t)st->wat) != (ssize_t)st->wlen ||
	    XXH64(w, st->wlen, 0) != st->wsum) {
		free(w);
		return sf_fail(e, -EIO, "%s: its seek index kept in --index-dir is damaged, or changed "
			       "after it was read (the window of the start point at archive byte "
			       "%llu is not the one its record sums)",
			       path, (unsigned long long)st->in);
	}
	*out = w;
	return 0;
}

void tx_zkeep_forget(int fd, int dirfd, int topfd, const char *name)
{
	uint8_t h[HEAD];
	char key[KEYNAME];
	struct stat a, b;
	if (fd < 0 || fstat(fd, &a) || pread(fd, h, HEAD, 0) != HEAD)
		return;
	key_name(h, key);
	const int at[3] = { dirfd, dirfd, topfd };
	const char *as[3] = { name, key, key };
	for (int i = 0; i < 3; i++)
		if (at[i] >= 0 && as[i] && !fstatat(at[i], as[i], &b, AT_SYMLINK_NOFOLLOW) &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			unlinkat(at[i], as[i], 0);
}

int tx_zkeep_load(int dirfd, int topfd, const char *name, const struct sf_map *src, enum tx_zcodec c,
		  uint64_t max, struct tx_zstart **out, size_t *nout, int *wfd, struct tx_built *b,
		  struct sf_err *e)
{
	uint8_t want[HEAD];
	char key[KEYNAME];
	struct sf_err ignored;
	if (head_of(src, c, 0, want, &ignored))
		return 1;
	key_name(want, key);
	/* its own name, then what another name of the archive kept: beside
	 * it, or in another directory (found at the top) */
	const int at[3] = { dirfd, dirfd, topfd };
	const char *as[3] = { name, key, key };
	int rc = 1, i;
	for (i = 0; i < 3; i++)
		if (at[i] >= 0 && (rc = load_one(at[i], as[i], want, src, c, max, out, nout, wfd,
						  b, e)) != 1)
			break;
	if (rc)
		return rc;
	/* linked where it was not found (kept for another name, or by an
	 * older build, with no key yet), so that each name finds it */
	if (i)
		drop_old_key(dirfd, topfd, name, key);
	for (int j = 0; j < 3; j++)
		if (j != i && at[j] >= 0)
			link_as(at[i], as[i], at[j], as[j]);
	return 0;
}

int tx_zkeep_save(int dirfd, int topfd, const char *name, const struct sf_map *src, enum tx_zcodec c,
		  const struct tx_zstart *st, size_t n, const struct tx_built *b, struct sf_err *e)
{
	const struct sf_buf *tarix = b->index, *unkeyed = b->unkeyed, *heads = b->heads;
	uint8_t h[HEAD];
	/* windows left in another kept file are that file's (tx_zkeep_load):
	 * only a pass's index is kept */
	for (size_t i = 0; i < n; i++)
		if (st[i].wlen && !st[i].win)
			return sf_fail(e, -EINVAL, "%s: its seek index was read from --index-dir", src->path);
	int rc = head_of(src, c, n, h, e);
	if (rc)
		return rc;
	struct sf_str f = { 0 };
	sf_str_add(&f, h, HEAD);
	for (size_t i = 0; i < n; i++) {
		uint8_t r[REC] = { 0 };
		sf_put_le64(r, st[i].in);
		sf_put_le64(r + 8, st[i].out);
		sf_put_le64(r + 16, st[i].mem);
		sf_put_le32(r + 24, st[i].wlen);
		r[28] = st[i].bits;
		r[29] = st[i].byte;
		r[30] = st[i].block;
		r[31] = st[i].check;
		sf_put_le64(r + 40, st[i].wlen ? XXH64(st[i].win, st[i].wlen, 0) : 0);
		sf_str_add(&f, r, REC);
	}
	size_t wat = f.len;
	for (size_t i = 0; i < n; i++)
		sf_str_add(&f, st[i].win, st[i].wlen);
	size_t wend = f.len;
	uint8_t t[8];
	sf_put_le64(t, tarix->len);
	sf_str_add(&f, t, sizeof t);
	sf_str_add(&f, tarix->data, tarix->len);
	sf_put_le64(t, unkeyed->len / 8);
	sf_str_add(&f, t, sizeof t);
	for (size_t i = 0; i < unkeyed->len / 8; i++) {
		uint64_t root;
		memcpy(&root, unkeyed->data + 8 * i, sizeof root);
		sf_put_le64(t, root);
		sf_str_add(&f, t, sizeof t);
	}
	sf_put_le64(t, heads ? heads->len : 0);
	sf_str_add(&f, t, sizeof t);
	if (heads)
		sf_str_add(&f, heads->data, heads->len);
	uint8_t sum[8];
	XXH64_state_t *all = f.oom ? NULL : XXH64_createState();
	if (all) {
		XXH64_reset(all, 0);
		XXH64_update(all, f.p, wat);
		XXH64_update(all, f.p + wend, f.len - wend);
		sf_put_le64(sum, XXH64_digest(all));
		XXH64_freeState(all);
		sf_str_add(&f, sum, sizeof sum);
	}
	if (f.oom || !all) {
		sf_str_free(&f);
		return sf_fail(e, -ENOMEM, "out of memory");
	}
	char key[KEYNAME];
	key_name(h, key);
	drop_old_key(dirfd, topfd, name, key);
	rc = put_file(dirfd, name, f.p, f.len);
	/* where no hard link can be made, a key gets a copy */
	for (int i = 0; !rc && i < 2; i++) {
		int at = i ? topfd : dirfd;
		if (at >= 0 && !link_as(dirfd, name, at, key))
			put_file(at, key, f.p, f.len);
	}
	sf_str_free(&f);
	return rc ? sf_fail(e, rc, "%s: cannot keep its seek index in --index-dir: %s", src->path,
			    strerror(-rc)) : 0;
}
