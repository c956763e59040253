/* The tsumugi (TSM1) search shard as the view sees it: the container facts
 * read at open, lazily checked regions, and the pieces each view file uses.
 * Internal to format/tsumugi/. */
#ifndef TSM_H
#define TSM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>

#include "sf_err.h"
#include "sf_map.h"
#include "sf_turn.h"
#include "sf_view.h"

struct sf_probe;
struct sf_report;

#define TSM_HEADER_SIZE 64
#define TSM_TRAILER_SIZE 16
#define TSM_DESC_SIZE 36

enum tsm_kind {
	TSM_LEXICAL = 1,
	TSM_FORWARD = 2,
	TSM_FEATURE = 3,
	TSM_GRAPH = 4,
	TSM_VECTOR = 5,
	TSM_DICTIONARY = 6,
};

enum tsm_codec { TSM_NONE = 0, TSM_ZSTD = 1, TSM_ZSTD_DICT = 2 };

struct tsm_header {
	uint16_t major, minor;
	uint64_t flags;
	uint32_t doc_count, region_count;
	uint64_t footer_offset, footer_length;
	uint64_t node_base, build_epoch;
	uint32_t crc, reserved;
};

struct tsm_region {
	uint8_t kind, codec;
	uint16_t flags;
	uint64_t offset, length, raw_length;
	uint32_t crc, dict_id;
	bool first_of_kind;
	/* Why the descriptor cannot be served (bounds, codec), or NULL. */
	const char *bad;
	char name[32];      /* "forward", "forward.1", "kind-9" */
	atomic_int checked; /* CRC of the stored bytes: 0 not yet, 1 ok, -1 bad */
	struct sf_part *decoded; /* codec 1/2: the decoded bytes */
};

struct tsm_schema_col {
	uint8_t *name;
	size_t name_len;
	uint8_t type, codec, nullable;
};

struct tsm_stat {
	uint8_t *key;
	size_t key_len;
	uint64_t bits;
};

struct tsm_dict {
	uint32_t id;
	const uint8_t *p;
	size_t len;
};

struct tsm_fwd;

struct tsm_shard {
	struct sf_view *view;
	const struct sf_map *map; /* the file: read with sf_map_read */
	size_t size;
	char *file_name;     /* as `tsumugi inspect` would be given it */
	struct tsm_header h;
	struct tsm_region *regions;
	size_t nregions;
	struct tsm_schema_col *schema;
	size_t nschema;
	struct tsm_stat *stats; /* sorted by key bytes */
	size_t nstats;
	bool has_dict_region;
	struct tsm_dict *dicts;   /* pointing into dict_bytes */
	size_t ndicts;
	uint8_t *dict_bytes;      /* a copy of the dictionary region */
	/* Parsing the forward header once, which verify may do while a
	 * reader holds the view's turn. */
	struct sf_turn fwd_turn;
	/* The forward region's parsed header (parsed once, in the view's turn). */
	struct tsm_fwd *fwd;
	/* What docs/'s entries hold of the budget of `docs_cache` while the
	 * view lives (sf_cache_charge). */
	struct sf_cache *docs_cache;
	uint64_t docs_charged;
	/* Allocations owned by view files (freed with the state). */
	void **owned;
	size_t nowned, capowned;
};

/* tsm_container.c: A11 validation and footer parsing. */
/* The listing's check (sf_format.check): trailer magic and footer length,
 * header magic, CRC and version. tsm_parse starts with it. */
int tsm_check(const struct sf_probe *p, struct sf_err *e);
int tsm_parse(struct tsm_shard *s, const char *path, struct sf_err *e);
void tsm_shard_free(void *state);
const char *tsm_kind_name(uint8_t kind);  /* "unknown" for others */
const char *tsm_codec_name(uint8_t codec); /* "unknown" for others */
const char *tsm_flag_name(int bit);        /* NULL for unused bits */
bool tsm_stat_is_hash(const uint8_t *key, size_t len);
/* Keeps `p` until the view goes; returns p, or NULL (and frees p) on OOM. */
void *tsm_own(struct tsm_shard *s, void *p);

/* tsm_region.c: stored bytes, CRC on first access, decoding. */
/* The first region of `kind` that has no descriptor problem, or NULL. */
struct tsm_region *tsm_first(struct tsm_shard *s, uint8_t kind);
/* Checks the region's CRC (once, reading the file a window at a time) and
 * points *p at its stored bytes in the mapping: for the kernel only
 * (sf_file_add_map), never read in place. */
int tsm_region_stored(struct tsm_shard *s, struct tsm_region *r, const uint8_t **p,
		      struct sf_err *e);
/* A heap copy of the region's stored bytes, its CRC checked (once). */
int tsm_region_copy(struct tsm_shard *s, struct tsm_region *r, struct sf_buf **out,
		    struct sf_err *e);
/* The decoded bytes, from the cache (*hold is the reference to drop): for
 * codec 0 a copy of the stored bytes, charged to the budget like a decode. */
int tsm_region_bytes(struct tsm_shard *s, struct tsm_region *r, struct sf_cache *c,
		     const uint8_t **p, struct sf_buf **hold, struct sf_err *e);
/* Decodes stored bytes of `r` (copied out of the file) into a new buffer
 * without any cache; for codec 0 the copy itself. */
int tsm_region_decode(struct tsm_shard *s, struct tsm_region *r, struct sf_buf **out,
		      struct sf_err *e);
/* The dictionary registered under `id`, or NULL. */
const struct tsm_dict *tsm_dict_find(const struct tsm_shard *s, uint32_t id);
/* Adds regions/ with every descriptor's files. */
int tsm_add_regions(struct tsm_shard *s, struct sf_node *root);
/* Gives `f` the content of part p, learning its size by producing it; a
 * source that fails a check (-EIO) makes the file broken instead. */
int tsm_file_from_part(struct sf_node *f, struct sf_part *p, struct sf_cache *c,
		       struct sf_err *e);

/* tsm_forward.c: docs/, docs.jsonl. */
int tsm_add_docs(struct tsm_shard *s, struct sf_node *root);
/* Decodes every value of the forward region (for verify); appends findings. */
int tsm_forward_verify(struct tsm_shard *s, struct sf_report *r);

/* tsm_feature.c: features.npy, features.csv. */
int tsm_add_features(struct tsm_shard *s, struct sf_node *root);
int tsm_feature_verify(struct tsm_shard *s, struct sf_report *r);

/* tsm_info.c, tsm_verify.c: .shardfs/info.txt, info.json and verify. */
int tsm_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tsm_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tsm_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

#endif
