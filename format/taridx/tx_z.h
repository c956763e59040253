/* Compressed tars (docs/tree-layout.md §3.7, "Compressed tars"): the decoded tar as a map
 * (struct sf_map with a read hook) that the plain tar's walker and member
 * checks read as they read a tar, through a seek index built by one pass
 * over the archive: points where a decoder can start (a gzip member, a
 * zstd or lz4 frame, an xz or bzip2 stream, and inside a gzip member a
 * deflate block boundary with its 32 KiB window every few MiB). The
 * stretches between them are cut into pieces of at most TX_Z_PIECE bytes
 * (half that in zstd), each a part decoded through the view's cache. */
#ifndef TX_Z_H
#define TX_Z_H

#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>
#include <zstd.h>

#include "sf_err.h"
#include "sf_format.h"

struct tx_built; /* tx.h */
#include "sf_map.h"
#include "sf_view.h"

#define TX_Z_PIECE (4u << 20)
/* deflate's window: what a decoder started inside a gzip member needs */
#define TX_Z_WINDOW 32768u
/* a zstd frame whose window is larger gets no start point inside it (the
 * window is kept with each) */
#define TX_Z_ZSTD_WINDOW_MAX (8u << 20)

enum tx_zcodec { TX_Z_NONE, TX_Z_GZIP, TX_Z_ZSTD, TX_Z_XZ, TX_Z_BZIP2, TX_Z_LZ4 };

/* The codec whose magic bytes p (n bytes) starts with, or TX_Z_NONE. */
enum tx_zcodec tx_z_sniff(const uint8_t *p, size_t n);
const char *tx_z_name(enum tx_zcodec c);

/* Where a decoder can start. */
struct tx_zstart {
	uint64_t in, out;  /* archive offset to read from; decoded offset */
	uint64_t mem;      /* the decoder's memory from here (measured by the pass) */
	/* gzip inside a member, zstd inside a frame: the window (the bytes
	 * decoded before the point, 32 KiB or the frame's window),
	 * zstd-compressed; NULL when it was left in the file kept in
	 * --index-dir, at byte `wat`, its XXH64 `wsum` (tx_zkeep_window) */
	uint8_t *win;
	uint64_t wat, wsum;
	uint32_t wlen;     /* its bytes; 0 at a stream's start */
	uint8_t bits, byte; /* gzip: bits of the byte before `in` still to be decoded */
	/* a block inside a stream, `in` at its header: an xz block after its
	 * stream's first (`check` the stream's check type); a zstd block
	 * (`byte` the frame's window descriptor) or an lz4 block of a frame of
	 * independent blocks (`check` and `byte` the frame's FLG and BD) */
	bool block;
	uint8_t check;
};

/* ---- the seek index kept in --index-dir (tx_zkeep.c) ---- */

/* Reads the seek index kept as `name` in directory dirfd for archive src
 * of codec c: 0 with *st (n start points, the last one the end, their
 * windows left in the file, open as *wfd: tx_zkeep_window), *tarix (the
 * tar's index, which parses), *unkeyed (its
 * unkeyed root names, sorted, each once) and *heads (its header blocks,
 * tx_zheads_ok, or NULL) when it is there, whole, and made
 * for src as it is now (its size, mtime and sampled bytes); 1 when there
 * is none or it does not match; -ENOMEM. Its bytes are bounded by `max`.
 * When `name` has none that matches, the one kept for another name of the
 * archive is read: by its key in dirfd, or in topfd (--index-dir's top;
 * -1: none), and linked as `name` and in both (tx_zkeep.c). */
int tx_zkeep_load(int dirfd, int topfd, const char *name, const struct sf_map *src, enum tx_zcodec c,
		  uint64_t max, struct tx_zstart **st, size_t *n, int *wfd, struct tx_built *b,
		  struct sf_err *e);
/* The window of start point st of archive `path`, read from the kept file
 * fd (tx_zkeep_load) into *out (malloc'd, st->wlen bytes) and checked
 * against its record's sum: 0, -ENOMEM, or -EIO when it differs (the file
 * is damaged, or changed since it was read). */
int tx_zkeep_window(int fd, const char *path, const struct tx_zstart *st, uint8_t **out,
		    struct sf_err *e);
/* Removes the names of the kept file fd (a window found damaged): `name`
 * in dirfd and its key in dirfd and topfd (if not -1), where they name
 * it, so that the archive's next open builds it again. */
void tx_zkeep_forget(int fd, int dirfd, int topfd, const char *name);
/* Writes the seek index (n start points, the end included), the tar's
 * index, its unkeyed root names and its header blocks (or NULL) as `name`
 * in dirfd, whole or not at all
 * (a temporary file renamed), linked by its key in dirfd and topfd (if not
 * -1) for the archive's other names: 0, or a negative errno with e set (a
 * read-only --index-dir: the next mount builds them again). */
int tx_zkeep_save(int dirfd, int topfd, const char *name, const struct sf_map *src, enum tx_zcodec c,
		  const struct tx_zstart *st, size_t n, const struct tx_built *b, struct sf_err *e);

/* ---- the tar's header blocks, kept apart (tx_zheads.c) ---- */

/* What the walk reads of a compressed tar to index it (each entry's
 * headers, extension records and sparse map), zstd-compressed in chunks:
 * a listing reads them there rather than decode the archive again, on a
 * mount that read the seek index from --index-dir too. A buffer (its
 * layout in tx_zheads.c), made by noting the stretches in order. */
struct tx_zheads_make;
struct tx_zheads_make *tx_zheads_begin(void);
/* Notes the `len` bytes at p, at decoded offset `off` (after the last
 * noted); one that cannot be kept is left to be read from the archive. */
void tx_zheads_note(struct tx_zheads_make *h, uint64_t off, const uint8_t *p, uint64_t len);
/* The memory h holds after one more note, at most (for the budget). */
uint64_t tx_zheads_after(const struct tx_zheads_make *h);
/* The buffer (NULL: nothing noted, or out of memory); frees h. */
struct sf_buf *tx_zheads_end(struct tx_zheads_make *h);
void tx_zheads_abort(struct tx_zheads_make *h);
/* Whether b is such a buffer, for a tar of `size` bytes (read from a
 * file: untrusted). */
bool tx_zheads_ok(const struct sf_buf *b, uint64_t size);
/* Whether [at, at + need) was noted: in chunk *ci at *pos, its stretch
 * ending at *end. */
bool tx_zheads_find(const struct sf_buf *b, uint64_t at, uint64_t need, uint64_t *ci, uint64_t *pos,
		    uint64_t *end);
/* Chunk ci decoded (a buffer), or NULL (out of memory, or bytes that do
 * not decode to its length). */
struct sf_buf *tx_zheads_chunk(const struct sf_buf *b, uint64_t ci);

/* ---- one decoder of any codec (tx_zdec.c) ---- */

struct tx_zdec {
	enum tx_zcodec c;
	bool live;
	z_stream gz;
	ZSTD_DStream *zs;
	uint8_t *pre;      /* zstd inside a frame: the window it refers to */
	size_t pre_cap;
	lzma_stream xz;
	bz_stream bz;
	/* bzip2's block table (3.6 MB at 900k): the one in use, and the one
	 * kept from the stream before for the next (bz_alloc) */
	void *bz_big, *bz_kept;
	size_t bz_big_len, bz_kept_len;
	LZ4F_dctx *lz;
	/* lz4: the input its decoder asks next (LZ4F's hint, a block and the
	 * header after it): given whole, a block is decoded straight from
	 * it, given in parts it is copied first. 0: any */
	size_t need;
};
/* Starts decoding a stream of codec c at its start (at NULL, or a start
 * point with neither window nor block), or at start point `at` inside it:
 * a gzip member's deflate block boundary (its window), a zstd frame's block
 * (its window) or an lz4 frame's independent block, the decoder then given
 * the stream from at->in on (an xz block is xz_block_begin's, tx_z.c). A
 * decoder of the same codec (d live) starts again in the memory it has:
 * the first touch of fresh memory costs a fault a page, and bzip2's table
 * alone is 3.6 MB a stream (pbzip2 writes a stream a block). Other
 * decoders are ended first. 0, -ENOMEM, or -EIO with *why. */
int tx_zdec_begin(struct tx_zdec *d, enum tx_zcodec c, const struct tx_zstart *at, const char **why);
/* The decoded size of window `win` (wlen bytes) of a zstd start point,
 * or 0 when it is none (above TX_Z_ZSTD_WINDOW_MAX, or not a zstd frame). */
uint64_t tx_zdec_window(const uint8_t *win, uint32_t wlen);

/* ---- a walk beside the pass (tx_zfeed.c) ---- */

/* The walk of the decoded tar (its caller's tx_index_tar) that a first
 * pass runs on a thread of its own, reading the bytes the pass decodes as
 * it decodes them rather than decoding the archive again through the
 * pieces. `walk` gets a map of them, whose size is unknown (huge: zeros
 * past the decoded end) and a progress of its own; `walked` then says
 * whether its result stands: the pass ran whole, and the walk ended at a
 * zero block that is the tar's own bytes, or at the decoded end, as a walk
 * of the whole map would. Else the caller drops what it made and walks
 * the map (headers and bytes: what the walk counted). */
struct tx_zbeside {
	int (*walk)(const struct sf_map *tar, struct sf_progress *pr, void *arg, struct sf_err *e);
	void *arg;
	bool walked;
	uint64_t headers, bytes;
};
struct tx_zfeed;
/* Starts beside->walk (path names the archive): NULL when it cannot (a
 * budget under four rings, or no room in it; memory, a thread), the pass
 * then going alone. */
struct tx_zfeed *tx_zfeed_start(struct tx_zbeside *beside, struct sf_cache *cache, const char *path);
/* Hands the pass's next n decoded bytes to the walk, waiting while they
 * would overwrite what the walk still reads (nothing once it ended). */
void tx_zfeed_push(struct tx_zfeed *f, const uint8_t *p, size_t n);
/* The pass ended: decoded `size` bytes, ok when whole (not failed nor cut
 * short). Waits for the walk, sets beside's fields and frees f. */
void tx_zfeed_end(struct tx_zfeed *f, uint64_t size, bool ok);

/* ---- the blocks of a zstd or lz4 frame (tx_zblock.c) ---- */

/* Where the next block of a frame begins, walked by the blocks' headers:
 * the start points a pass makes inside a frame. */
struct tx_zwalk {
	uint64_t next;     /* archive offset of its header; UINT64_MAX: none */
	uint64_t window;   /* zstd: the frame's window */
	uint8_t flg, bd;   /* lz4: FLG and BD; zstd: bd is the window descriptor */
};
/* Reads the header of the frame at archive offset `at` of src: w->next is
 * its first block, or UINT64_MAX when no block of it can be a start point
 * (lz4 blocks that depend on the ones before, a zstd frame in one segment
 * or with a window above TX_Z_ZSTD_WINDOW_MAX, a header it cannot read). */
void tx_zwalk_frame(struct tx_zwalk *w, const struct sf_map *src, enum tx_zcodec c, uint64_t at);
/* From the block whose header is at w->next to the one after it, or to
 * UINT64_MAX after the frame's last. */
void tx_zwalk_step(struct tx_zwalk *w, const struct sf_map *src, enum tx_zcodec c);
/* Decodes from in[0 .. *inlen) into out[0 .. *outlen), setting both to
 * what was used; with `block` (gzip) stops at a deflate block's end too.
 * 1 at the stream's (frame's, member's) end, 0, or -EIO with *why. */
int tx_zdec_step(struct tx_zdec *d, const uint8_t *in, size_t *inlen, uint8_t *out, size_t *outlen,
		 bool block, const char **why);
/* What the decoder holds now, for the budget. */
uint64_t tx_zdec_mem(const struct tx_zdec *d);
void tx_zdec_end(struct tx_zdec *d);
/* A map of the tar compressed in src (which it references), empty until
 * tx_z_index: -ENOMEM or 0. */
int tx_z_map(struct sf_map *src, enum tx_zcodec c, struct sf_map **out, struct sf_err *e);
/* Keeps m's seek index as "<name>.zidx" in directory dirfd (the
 * daemon's --index-dir beside the archive), found by other names of the
 * archive there and in topfd (--index-dir's top, or -1; both dup'ed):
 * tx_z_index reads it from there when it matches the archive, else writes
 * it there after its pass. 0 or a negative errno. */
int tx_z_keep_in(struct sf_map *m, int dirfd, int topfd, const char *name);
/* What the walk of the tar's headers built (tx_index_tar), kept with the
 * seek index tx_z_index read from --index-dir, handed over into *out:
 * true; false when the tar's headers must be walked (a plain map, or
 * nothing kept). */
bool tx_z_kept_tar_index(struct sf_map *m, struct tx_built *out);
/* The header blocks the walk kept apart (tx_zheads.c) for m's reads of
 * headers (a reference; NULL: none). */
void tx_z_use_heads(struct sf_map *m, struct sf_buf *heads);
/* Fills window w with [at, e) of tar m from those header blocks, e the
 * end of the kept stretch holding [at, at + need): true, else false (not
 * kept there, out of memory) and w as it was. */
struct tx_window;
bool tx_z_heads_window(const struct sf_map *m, struct tx_window *w, uint64_t at, uint64_t need);
/* Keeps m's seek index and what the walk of the tar's headers built in
 * --index-dir, when m has a place there and did not read them from it; a
 * failure is a warning of view v. */
void tx_z_keep(struct sf_map *m, const struct tx_built *b, struct sf_view *v);
/* A map of the tar compressed in src, of the codec its magic bytes name
 * (tx_z_map): 0, or -EINVAL (no such magic) or as sf_map_read with e set. */
int tx_z_open(struct sf_map *src, struct sf_map **out, struct sf_err *e);
/* A seek index (start points and windows) that the maps of one archive
 * file share: hard links, a view made anew (tx_walked.c). */
struct tx_zseek;
/* Builds m's seek index by one pass over the archive, checking every
 * stream's integrity as it goes, and sets m->size to the decoded size;
 * its pieces become parts of view v, decoded through v's cache, to which
 * the index's memory is charged. With `shared` (not NULL), the index in
 * *shared is taken when there is one (only the pieces are then m's, and
 * charged), else the one built is put there, a reference for the caller
 * (tx_zseek_put). With `beside` (not NULL), a pass has the walk of the
 * tar run beside it (tx_zfeed.c). 0 at once for a plain map; else 0, or a
 * negative errno with e naming the archive, the byte and what was wrong. */
struct tx_zbeside;
int tx_z_index(struct sf_map *m, struct sf_view *v, struct sf_progress *pr,
	       struct tx_zseek **shared, struct tx_zbeside *beside, struct sf_err *e);
void tx_zseek_put(struct tx_zseek *s);
/* Appends [off, off + len) of tar m to file n: a span of its mapping, or
 * the decoded pieces holding it. -ENOMEM or 0. */
int tx_add_bytes(struct sf_node *n, const struct sf_map *m, uint64_t off, uint64_t len);
/* For info: the codec (TX_Z_NONE for a plain map), the archive's size,
 * its decoder start points, pieces, and the index's bytes. */
struct tx_zinfo {
	enum tx_zcodec codec;
	uint64_t compressed, starts, pieces, index_bytes;
	uint64_t header_bytes; /* the header blocks kept apart (tx_zheads.c) */
	const char *kept; /* what became of it in --index-dir, or NULL */
	/* why the archive was cut short (its decoded tar ends before the
	 * damage, tx_z.c salvage), or NULL */
	const char *damage;
};
void tx_z_info(const struct sf_map *m, struct tx_zinfo *out);
/* Builds the seek index of the compressed tar src and the tar's index (the
 * pass and the walk a mount's first use makes) and keeps them as
 * "<name>.zidx" in directory dirfd, as a mount with --index-dir would
 * (shardfs-taridx --zidx); one there that matches the archive is read
 * instead. 0 with *info (kept: "written to --index-dir" or "read from
 * --index-dir"), or a negative errno with e naming the archive and what
 * was wrong. */
int tx_z_keep_ahead(struct sf_map *src, int dirfd, const char *name, struct tx_zinfo *info,
		    struct sf_err *e);

#endif
