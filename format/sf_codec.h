/* Decompression shared by every format: zstd (plain and with raw-content
 * dictionaries) and lz4, always into a buffer of a size the container
 * records, since small zstd frames carry no content size. */
#ifndef SF_CODEC_H
#define SF_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "sf_err.h"

/* Decodes every zstd frame in src (concatenated frames; skippable frames are
 * skipped; 0 stored bytes decode to nothing) into dst. Fails unless the
 * output is exactly `want` bytes. With a dictionary (raw content, never
 * auto-detected), any Dictionary_ID in a frame header is removed before
 * decoding, because libzstd rejects a declared id on a raw-content
 * dictionary. `what` names the part for messages. */
int sf_zstd_decode(const uint8_t *src, size_t srclen, uint8_t *dst, size_t want,
		   const void *dict, size_t dictlen, const char *what,
		   struct sf_err *e);

struct sf_map;
/* Like sf_zstd_decode without a dictionary, but the srclen stored bytes are
 * read from file m at `off` a window at a time (pread: a lost page is an
 * EIO naming the file, `part` and the offset) and decoded as they come, so
 * they are never copied whole. Every frame is decoded (skippable ones
 * skipped); 0 stored bytes are a truncated frame here. */
int sf_zstd_decode_map(const struct sf_map *m, uint64_t off, uint64_t srclen, uint8_t *dst,
		       size_t want, const char *part, const char *what, struct sf_err *e);

/* The most the zstd frames of srclen bytes at `off` of file m can decode
 * to, as ZSTD_decompressBound finds it (a frame's recorded content size,
 * else its block count times its largest block), walking the frames'
 * block headers with small reads: for rejecting a hostile recorded size
 * before its buffer is allocated. 0, or -EIO when the frames are
 * malformed or the file cannot be read. */
int sf_zstd_bound_map(const struct sf_map *m, uint64_t off, uint64_t srclen, uint64_t *bound,
		      const char *part, const char *what, struct sf_err *e);

/* Checks that src decodes (as sf_zstd_decode would) to exactly `want`
 * bytes, using a small scratch buffer whatever the size: for verifying
 * parts too large to hold. libzstd keeps the window a frame declares (up to
 * 2 GiB) meanwhile: with `limit` (0: none), a frame whose window exceeds
 * it is decoded whole instead when `want` is within it, and not checked
 * (EIO) otherwise. */
int sf_zstd_check(const uint8_t *src, size_t srclen, uint64_t want, const void *dict,
		  size_t dictlen, uint64_t limit, const char *what, struct sf_err *e);

/* Like sf_zstd_decode, but the size is unknown in advance: allocates the
 * output (malloc) and grows it as needed, up to `limit` bytes. */
int sf_zstd_decode_alloc(const uint8_t *src, size_t srclen, size_t limit,
			 const void *dict, size_t dictlen, const char *what,
			 uint8_t **out, size_t *outlen, struct sf_err *e);

/* The Dictionary_ID a zstd frame header declares (0 if none). Returns 0 on
 * success, a negative errno if the header is malformed. */
int sf_zstd_frame_dict_id(const uint8_t *src, size_t srclen, uint32_t *id);

/* lz4 block decode to exactly `want` bytes. */
int sf_lz4_decode(const uint8_t *src, size_t srclen, uint8_t *dst, size_t want,
		  const char *what, struct sf_err *e);

#endif
