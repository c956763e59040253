/* The tatami columnar container (docs/specs/tatami.md): what open() learns from
 * the header and footer, and the pieces that decode the rest on demand. */
#ifndef TAT_H
#define TAT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sf_bytes.h"
#include "sf_err.h"
#include "sf_map.h"
#include "sf_turn.h"
#include "sf_view.h"

struct sf_probe;
struct sf_report;

#define TAT_HEADER 64
#define TAT_TRAILER 12
#define TAT_REC 32

enum tat_type {
	TAT_BOOL, TAT_INT8, TAT_INT16, TAT_INT32, TAT_INT64, TAT_UINT8, TAT_UINT16,
	TAT_UINT32, TAT_UINT64, TAT_FLOAT32, TAT_FLOAT64, TAT_STRING, TAT_BYTES,
	TAT_TIMESTAMP, TAT_LIST, TAT_BLOBREF,
};

enum tat_codec { TAT_NONE, TAT_LZ4, TAT_ZSTD, TAT_ZSTD_DICT };

#define TAT_F_NULLABLE 0x01
#define TAT_F_SORT_KEY 0x02

#define TAT_H_SEARCH 0x10
#define TAT_H_BLOCK_TREE 0x20

/* A byte string inside the mapped footer. */
struct tat_bytes {
	const uint8_t *p;
	size_t len;
};

struct tat_field {
	struct tat_bytes name;
	uint8_t type, flags, element;
	struct tat_blobcol *blob; /* BLOBREF: its BLOB_DESC entry */
	struct tat_blobrows *rows; /* BLOBREF: blobs/<col>/'s entries, once listed */
};

struct tat_file;

struct tat_chunk {
	struct tat_file *tf;
	uint32_t group;
	uint64_t column;
	uint64_t first_page, total_compressed, total_uncompressed;
	uint64_t num_values, null_count, num_pages;
	uint8_t encoding, codec, flags;
	struct tat_bytes zmin, zmax;
	uint64_t bloom_ref, page_index;
	uint64_t blob_base;   /* BLOBREF: ordinal of the group's first present row */
	uint64_t data_base;   /* where this group starts in columns/<c>/data.bin */
	struct sf_part *part; /* decoded: valid | values, or valid | offsets | data */
	struct sf_part *text; /* values.jsonl of this chunk */
	char what[48];
};

struct tat_group {
	uint64_t first_row, num_rows, total_bytes;
	uint8_t flags;
	struct tat_bytes smin, smax;
	struct tat_chunk *chunks; /* as listed in the footer */
	size_t nchunks;
	struct sf_part *rows_text; /* rows.jsonl lines of this group */
	char what[32];
};

struct tat_run {
	uint64_t offset, csize, usize, nvals, cum;
	struct tat_blobcol *col;
	struct sf_part *part; /* u64 offsets[count+1] | value bytes */
	char what[48];
};

struct tat_blobcol {
	uint64_t column, dict_index;
	uint8_t record_codec;
	struct tat_run *runs;
	size_t nruns;
	uint64_t nvals; /* ordinals the runs hold */
};

struct tat_dict {
	uint64_t offset, length;
	struct sf_buf *memo; /* decoded once, kept (at most one small buffer each) */
};

struct tat_bloom {
	uint64_t offset, length;
	uint8_t kind;
};

struct tat_invert {
	bool present;
	uint64_t dict_off, dict_len, post_off, post_len, skip_off, skip_len;
	uint64_t num_terms, num_docs, live_off, live_len;
};

struct tat_search; /* parsed term dictionary and run indexes (tat_search.c) */

struct tat_file {
	struct sf_view *view;
	const char *name;
	const struct sf_map *map; /* the file: read with sf_map_read */
	uint8_t *footer;          /* a copy of the footer, which the parse points into */
	uint64_t size;
	/* header */
	uint16_t vmajor, vminor, hflags;
	uint8_t checksum_algo, default_codec;
	uint32_t page_hint, creator;
	uint8_t uuid[16];
	uint64_t row_count, footer_off, created_ms;
	uint32_t footer_len;
	/* footer */
	struct tat_field *fields;
	size_t nfields;
	struct tat_group *groups;
	size_t ngroups;
	struct tat_blobcol *blobs;
	size_t nblobs;
	struct tat_dict *dicts;
	size_t ndicts;
	struct tat_bloom *blooms;
	size_t nblooms;
	struct tat_bytes *kv; /* key, value, key, value ... */
	size_t nkv;
	uint64_t st_rows, st_raw, st_stored;
	struct tat_invert inv;
	int sort_col; /* -1 when none */
	struct sf_turn memo_turn; /* making dictionary and search memos */
	struct tat_search *search;
	char *name_copy;
};

/* tat_footer.c: header, trailer and footer, checked as upstream does. */
/* The listing's check (sf_format.check): end magic and footer length,
 * header magic, checksum and version. tat_parse starts with it. */
int tat_check(const struct sf_probe *p, struct sf_err *e);
int tat_parse(struct tat_file *tf, struct sf_err *e);
void tat_free(struct tat_file *tf);
/* The chunk of column `col` in group `g`, or NULL when the footer lacks it. */
struct tat_chunk *tat_chunk_of(struct tat_group *g, size_t col);
const char *tat_type_name(uint8_t t, char buf[16]);
const char *tat_enc_name(uint8_t x, char buf[16]);
const char *tat_codec_name(uint8_t x, char buf[16]);
/* Bytes per value of a fixed-width type, 0 for variable-length ones. */
unsigned tat_width(uint8_t type);
bool tat_is_var(uint8_t type);

/* tat_record.c: the 32-byte record header and its payload. */
struct tat_rec {
	uint8_t kind, encoding, codec, flags;
	uint32_t num_values, usize, csize, null_count, first_row, crc;
	const uint8_t *stored; /* csize bytes, copied out of the file */
	uint8_t *own;
};
/* Reads the record at `off` (its payload copied: tat_rec_free after);
 * checks it lies in the body and its CRC. On failure nothing is held. */
int tat_rec_read(const struct tat_file *tf, uint64_t off, struct tat_rec *r,
		 const char *what, struct sf_err *e);
void tat_rec_free(struct tat_rec *r);
/* Undoes `codec` (NONE or ZSTD; with `dict`, zstd against that raw dictionary)
 * into a new buffer of exactly r->usize bytes. */
int tat_rec_decode(const struct tat_file *tf, const struct tat_rec *r, uint8_t codec,
		   const struct sf_buf *dict, const char *what, struct sf_buf **out,
		   struct sf_err *e);

/* tat_ints.c: the integer encodings, into dense uint64 arrays. */
int tat_unpack(struct sf_cursor *c, unsigned width, size_t n, uint64_t *out);
int tat_dec_bitpack(struct sf_cursor *c, size_t n, uint64_t *out);
int tat_dec_delta(struct sf_cursor *c, size_t n, uint64_t *out);
int tat_dec_rle(struct sf_cursor *c, size_t n, uint64_t *out);
int tat_dec_groupvarint(struct sf_cursor *c, size_t n, uint64_t *out);
int tat_dec_pfordelta(struct sf_cursor *c, size_t n, uint64_t *out);

/* tat_chunk.c: decoding a column chunk. */
int tat_chunk_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
/* Byte size of the decoded chunk when it is fixed-width, else SF_SIZE_UNKNOWN. */
uint64_t tat_chunk_size(const struct tat_chunk *ch, uint8_t type);
/* Sums the pages' row counts from their headers, before anything is
 * allocated or sized from the footer's: they must add up to the chunk's. */
int tat_chunk_rows(const struct tat_chunk *ch, struct sf_err *e);
/* Walks the page headers: the chunk's byte extent in the file. */
int tat_chunk_extent(const struct tat_chunk *ch, uint64_t *len, struct sf_err *e);
/* The chunk's validity (one byte per row), decoded from its pages. */
int tat_chunk_validity(const struct tat_chunk *ch, uint8_t **valid, struct sf_err *e);

/* tat_blob.c: blob runs and dictionaries. */
int tat_run_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
/* Decodes a run into the part layout (offsets table, then values). */
int tat_run_decode(struct tat_file *tf, const struct tat_run *run, struct sf_buf **out,
		   struct sf_err *e);
/* The run holding ordinal `ord`, or NULL. */
struct tat_run *tat_run_of(struct tat_blobcol *bc, uint64_t ord);
/* Appends the values of ordinals [first, first+n) to data, their lengths to len. */
int tat_blob_values(struct tat_file *tf, struct tat_blobcol *bc, uint64_t first, uint64_t n,
		    struct sf_str *data, uint64_t *len, struct sf_err *e);

/* tat_json.c: values as upstream's `tatami cat` prints them. */
void tat_json_string(struct sf_str *s, const uint8_t *p, size_t len);
int tat_text_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tat_rows_produce(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

/* tat_tree.c: the view. */
int tat_build_tree(struct tat_file *tf, struct sf_err *e);
/* A file whose content is one part of unknown size: produced at stat, and
 * EIO (still listed) when producing fails. */
int tat_build_whole(struct sf_node *f, struct sf_cache *c, struct sf_err *e);

/* tat_blobdir.c: blobs/<col>/, a file per present row (the directory's
 * populate; its table is freed, and its charge given back, with the file). */
int tat_blobdir_populate(struct sf_node *dir, struct sf_err *e);
void tat_blobrows_free(struct tat_blobrows *r);

/* tat_search.c: inverted/. */
int tat_search_add(struct tat_file *tf, struct sf_node *root);
void tat_search_free(struct tat_search *s);
/* Decodes every posting list; problems go to the verify report. */
void tat_search_check(struct tat_file *tf, struct sf_report *r);

/* tat_info.c, tat_verify.c: .shardfs/info.txt, info.json and verify. */
int tat_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tat_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tat_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

#endif
