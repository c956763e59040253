/* The tetration `.tet` tensor container (docs/specs/tet.md): the parsed file and
 * the pieces of its zarr v2 view (docs/design.md §3.9). */
#ifndef TET_H
#define TET_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "sf_err.h"
#include "sf_hash.h"
#include "sf_name.h"
#include "sf_view.h"

struct sf_probe;

#define TET_MAX_DIM 8
#define TET_ENTRY_SIZE 104
#define TET_NO_ENTRY UINT64_MAX
/* Dataset entries are cut shorter than SF_NAME_MAX so "<entry>.npy" fits. */
#define TET_ENTRY_MAX 250

enum tet_codec { TET_RAW = 0, TET_ZSTD = 1 };

/* One chunk index entry (spec §6.2). */
struct tet_entry {
	uint64_t dataset_id;
	uint64_t coords[TET_MAX_DIM];
	uint64_t off, raw, stored;
	uint32_t codec;
};

struct tet_file;
struct tet_dataset;
struct tet_group;

/* A coordinate array: the footer's labels of one dimension of a group's
 * datasets (docs/formats/tet.md, Coordinates), as fixed-width unicode. */
struct tet_coord {
	struct tet_coord *next;
	struct tet_group *group;
	char *name;               /* the dimension's name: the entry in the group */
	char *path;               /* its path in the view, for messages */
	const json_t *labels;     /* borrowed from the footer */
	uint64_t n;               /* labels */
	uint64_t width;           /* code points of the longest label (>= 1) */
};

/* A zarr group of the view: the root, or one made by names that nest. */
struct tet_group {
	struct tet_file *file;
	struct tet_group *parent;
	struct tet_group *kids, *last_kid, *next;  /* nested groups, in order made */
	struct tet_dataset *ds, *last_ds;          /* its datasets, in file order */
	struct tet_coord *coords;
	struct tet_group *all_next;                /* every group of the file */
	char *name;               /* the entry in the parent ("" for the root) */
	char *path;               /* from the root ("" for the root) */
	json_t *cand;             /* while building: dimension -> labels, null on conflict */
	json_t *phony;            /* while building: "size:k" -> phony_dim number */
	/* at most the bytes of its .zmetadata: checked against the cache
	 * limit before making it (duplicate names share footer metadata, so
	 * this can grow as their product) */
	uint64_t zbytes;
};

/* A grid cell, as the argument of its chunk file's generator. */
struct tet_cellref {
	struct tet_dataset *ds;
	uint64_t cell;
};

/* One dataset record (spec §5.2) and what validation found (spec §11.3). */
struct tet_dataset {
	struct tet_file *file;
	uint32_t id;
	const uint8_t *name;
	uint32_t name_len;
	uint32_t dtype, ndim;
	uint64_t shape[TET_MAX_DIM], cshape[TET_MAX_DIM];
	/* grid cells per axis, and the zarr chunk shape (min(cshape, shape), >= 1) */
	uint64_t grid[TET_MAX_DIM], zchunk[TET_MAX_DIM];
	size_t esize;
	const char *descr, *dtype_name;
	uint64_t nelem, nbytes, nchunks, zbytes;
	uint64_t nentries;        /* entries naming this dataset */
	uint64_t *cell;           /* row-major grid cell -> entry index */
	char *problem;            /* why the dataset is not shown, or NULL */
	bool zero_copy;           /* spec §7.6: the C-order array is one file span */
	uint64_t zero_copy_off;
	char esc[SF_NAME_MAX + 1];       /* the escaped name, for messages */
	char entry[SF_NAME_MAX + 16];    /* its directory in its group (valid only) */
	struct tet_group *group;  /* where it is (valid only) */
	struct tet_dataset *next; /* in its group */
	char *path;               /* its directory from the view's root */
	uint32_t leaf_off;        /* where its leaf component starts (nested only) */
	json_t *meta;             /* footer metadata.datasets[name], borrowed */
	json_t *dims;             /* its _ARRAY_DIMENSIONS (tet_tree.c) */
	/* per grid cell, made on first use in the view's turn: the decoded
	 * tile parts (zstd cells only) and the cells' generator arguments */
	struct sf_part **tile;
	struct tet_cellref *refs;
};

struct tet_file {
	const struct sf_map *map; /* the container: read with sf_map_read */
	uint8_t *blob;            /* a copy of the dataset blob: names point in */
	uint64_t len;
	const char *path;
	/* superblock (§4) */
	uint32_t version, dataset_count, flags;
	uint64_t index_off, index_len, blob_len;
	/* chunk index (§6) */
	uint64_t entry_count;
	uint16_t budget_bps;
	uint32_t budget_bytes;
	struct tet_entry *entries;
	struct tet_dataset *ds;
	uint64_t orphans;         /* entries whose dataset_id names no record */
	/* footer (§9) */
	bool footer;              /* flag set and a THST tail present */
	uint64_t json_len, spill_off, spill_len;
	uint64_t payload_bound;   /* P of §9.3 */
	json_t *footer_json;      /* the footer object when it is valid */
	json_t *history, *metadata; /* borrowed from footer_json / spill_json */
	json_t *spill_json;
	char *footer_error;       /* why the footer JSON was not usable */
	/* the group tree (tet_tree.c), made when the view is built */
	struct tet_group *root, *groups;
	struct sf_hash names;     /* struct tet_name by (group, name) */
};

/* The listing's check (sf_format.check): superblock magic, version, and
 * the chunk index inside the file. tet_parse starts with it. */
int tet_check(const struct sf_probe *p, struct sf_err *e);
/* Parses and validates a whole container, reading the bytes it needs out
 * of the mapped file `m` (its tiles are left where they are). Container-level
 * failures (spec §11.1 except the footer JSON) return an error; dataset and
 * footer problems are recorded in the result. */
int tet_parse(const struct sf_map *m, const char *path, struct tet_file **out,
	      struct sf_err *e);
void tet_free(struct tet_file *tf);
/* The per-dataset checks of §11.3 (part of tet_parse). */
int tet_validate(struct tet_file *tf, struct sf_err *e);

/* The extent of the tile of `en` on each axis (§7.2). */
void tet_tile_ext(const struct tet_dataset *ds, const struct tet_entry *en, uint64_t *ext);
/* A heap copy of the tile's stored bytes (free it). */
int tet_tile_load(const struct tet_dataset *ds, const struct tet_entry *en, uint8_t **src,
		  struct sf_err *e);
/* Fails (EIO) when a zstd tile's frames cannot produce en->raw bytes
 * (their block headers are read from the file, not the whole tile). */
int tet_tile_fits(const struct tet_dataset *ds, const struct tet_entry *en, struct sf_err *e);
/* Checks that a tile decodes to its recorded size without holding it. */
/* `limit`: the host's sf_cache limit (sf_zstd_check). */
int tet_tile_check(const struct tet_dataset *ds, const struct tet_entry *en, uint64_t limit,
		   struct sf_err *e);
/* Creates the dataset's tile parts and cell references once. */
int tet_make_parts(struct sf_view *v, struct tet_dataset *ds);
/* Chunk file, tile file, stored-zstd file and whole-array .npy contents. */
int tet_build_chunk(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
int tet_build_tile(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
int tet_build_stored(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
int tet_build_npy(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
/* Copies [off, off+len) of the dataset's C-order bytes into out (§7.4). */
int tet_assemble(struct tet_dataset *ds, uint64_t off, uint8_t *out, size_t len,
		 struct sf_cache *c, struct sf_err *e);

/* Places every shown dataset in the group tree, names every entry and
 * finds the coordinate arrays (docs/formats/tet.md, Names, Coordinates). */
int tet_tree_build(struct sf_view *v, struct tet_file *tf, struct sf_err *e);
void tet_tree_free(struct tet_file *tf);
/* Footer dim_names usable as xarray dimensions: one distinct string per axis. */
bool tet_dims_usable(const json_t *dims, uint32_t ndim);

/* The zarr metadata documents; a part's aux says which, its arg of what. */
enum tet_doc {
	TET_ZGROUP,        /* arg: group */
	TET_GROUP_ATTRS,   /* arg: the file (the root's .zattrs) */
	TET_ZARRAY,        /* arg: dataset */
	TET_ARRAY_ATTRS,   /* arg: dataset */
	TET_COORD_ZARRAY,  /* arg: coordinate */
	TET_COORD_ATTRS,   /* arg: coordinate */
	TET_ZMETADATA,     /* arg: group: all of the above under it */
};
int tet_produce_doc(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
/* A coordinate array's one chunk (UTF-32LE, width code points per label). */
int tet_produce_coord_chunk(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

/* A u64 as a JSON integer, or as its decimal string past INT64_MAX (where
 * jansson's signed integers end); and an array of them. */
json_t *tet_json_u64s(const uint64_t *v, uint32_t n);

/* .shardfs/info.txt, info.json and verify. */
int tet_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tet_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tet_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

/* Footer JSON (§9): fills history/metadata or footer_error. 0, or an
 * error reading it out of the file. */
int tet_footer_parse(struct tet_file *tf, uint64_t json_off, struct sf_err *e);

/* Dtype facts (§5.3): element size (0 if unknown), numpy descr, label. */
size_t tet_dtype_size(uint32_t dtype);
const char *tet_dtype_descr(uint32_t dtype);
const char *tet_dtype_name(uint32_t dtype);

#endif
