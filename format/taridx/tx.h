/* iTar folds (docs/specs/taridx.md): a `<fold>.taridx` index of 32-byte rows
 * pointing at members of the tars `<fold>_<S>.tar` beside it.
 *
 * This header is shared by the files of format/taridx/ and by the
 * shardfs-taridx tool; nothing outside them needs it. */
#ifndef TX_H
#define TX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sf_err.h"
#include "sf_format.h"
#include "sf_map.h"
#include "sf_turn.h"
#include "sf_view.h"

#define TX_HDR_SIZE 64
#define TX_ROW_SIZE 32
#define TX_BLOCK 512
/* Full paths (GNU long names, pax paths) longer than this are not shown,
 * and verify reports them. Far above what tar tools write: the mount has no
 * limit of its own on a path, since each component is cut to 255 bytes
 * (docs/design.md §3.3) and the kernel is only ever given one component at a time. */
#define TX_PATH_MAX 65536

/* ---- strings and tar header facts (tx_tar.c) -------------------------- */

struct tx_str {
	const uint8_t *p;
	size_t len;
};

/* A stem and extension as upstream derives them from a name (spec §4.1):
 * UTF-8 decoded with replacement, base name after the last '/', split at
 * its first '.', extension lowercased. The buffers hold the worst case of
 * a 100-byte name field; longer names are cut (see tx_key_from). */
struct tx_key {
	uint8_t stem[4 * TX_BLOCK];
	size_t stem_len;
	uint8_t ext[4 * TX_BLOCK];
	size_t ext_len;
	uint64_t hash; /* XXH64 of the stem, seed 0 */
	bool cut;      /* the name was too long to derive exactly */
};

/* Derives the key of `name` (len bytes, already cut at its NUL). */
void tx_key_from(const uint8_t *name, size_t len, struct tx_key *k);
/* Length of a NUL-terminated field of at most `max` bytes. */
size_t tx_field_len(const uint8_t *p, size_t max);
/* The header's size field as tar readers read it (tx_num). */
int tx_hdr_size(const uint8_t *hdr, uint64_t *size);
/* Whether a typeflag is an extension record (pax 'x'/'X'/'g', GNU 'L'/'K')
 * describing the header after it. */
bool tx_is_record(uint8_t typeflag);
/* True when the stored checksum matches the header's bytes. */
bool tx_hdr_checksum_ok(const uint8_t *hdr);
bool tx_block_is_zero(const uint8_t *p);
/* True when bytes are valid UTF-8. */
bool tx_utf8_valid(const uint8_t *p, size_t len);

/* ---- one tar entry as tar readers see it (tx_header.c) ---------------- */

/* Extension records read before one header, and pieces of one sparse map,
 * at most: real writers put one or two records before a header. */
#define TX_CHAIN_MAX 64
#define TX_CHAIN_MAX_S "64"
#define TX_SPARSE_MAX 65536
#define TX_SPARSE_MAX_S "65536"
/* Bytes of extension records before one header, at most: every check of a
 * member reads them, so they bound its cost (a 0.0 sparse map of
 * TX_SPARSE_MAX pieces fits). */
#define TX_RECORDS_MAX (4u << 20)
#define TX_RECORDS_MAX_S "4 MiB"

enum tx_sparse { TX_SPARSE_NONE, TX_SPARSE_OLDGNU, TX_SPARSE_00, TX_SPARSE_01, TX_SPARSE_10 };

/* A header and the extension records before it, as GNU tar, bsdtar and
 * tarfile read them. Strings point into the tar. */
struct tx_entry {
	uint64_t first;    /* offset of its first header block (a record, or the header) */
	uint32_t nrec;     /* extension records before the header */
	uint64_t hdr;      /* offset of the header the records describe */
	uint8_t type;      /* its typeflag; '5' for an old-style directory */
	bool posix;        /* a POSIX ustar header: its prefix field is a path's start */
	struct tx_str pax_path, pax_link; /* pax path (or GNU.sparse.name), linkpath */
	struct tx_str long_name, long_link; /* the last GNU 'L' and 'K' records */
	uint64_t size;     /* the member's size (a sparse member's real size) */
	uint64_t data;     /* offset of its stored data (after an old GNU sparse map) */
	uint64_t stored;   /* stored bytes there (pax size, else the header's) */
	/* the header's extent as a row states it: the next header is at
	 * hdr + 512 + row_size rounded up to a block */
	uint64_t row_size;
	uint64_t next;     /* offset of the next entry */
	enum tx_sparse sparse;
	struct tx_str map; /* pax 0.0: the records; 0.1: GNU.sparse.map */
	const char *bad;   /* why readers cannot read it (then bad_at says where) */
	uint64_t bad_at;
};

/* A numeric header field: octal (spaces around, NUL-ended; empty is 0) or
 * GNU base-256. -EINVAL otherwise, or when negative or over 2^63. */
int tx_num(const uint8_t *p, size_t n, uint64_t *v);
/* Reads the entry whose first block is at `at` of tar (tarsize bytes): 1
 * at the archive's end (its end, or a zero block), else 0 with *en filled
 * or en->bad set. Its cost is the records' bytes plus an old GNU sparse
 * map's blocks, never more than the blocks it reads. */
int tx_entry_read(const uint8_t *tar, uint64_t tarsize, uint64_t at, struct tx_entry *en);
/* Called for each piece of a sparse member's data, in order: `len` bytes
 * at `off` of the member are at offset `src` of the tar. 0 or a negative
 * errno. */
typedef int tx_piece_fn(void *arg, uint64_t off, uint64_t len, uint64_t src);
/* tx_entry_read when only tar[0 .. have) is at hand of a tar of tarsize
 * bytes (a copy of a stretch of it): -EAGAIN when a header, record or
 * sparse map block it must read lies beyond `have`. */
int tx_entry_read_in(const uint8_t *tar, uint64_t have, uint64_t tarsize, uint64_t at,
		     struct tx_entry *en);
/* The longest map text a 1.0 sparse member may start with: a count and
 * two numbers per piece of at most 20 digits and a newline each. */
#define TX_MAP_TEXT_MAX ((2 * (size_t)TX_SPARSE_MAX + 1) * 21)
/* Walks a sparse member's map (en->sparse set, en read from a copy of the
 * tar whose byte at offset x is at base + (x - base_off), holding its
 * records, sparse blocks and, for 1.0, the first TX_MAP_TEXT_MAX bytes of
 * its data, as tx_entry_read_copy makes it): 0, or -EINVAL with *why when
 * the map is malformed, out of order, has more than TX_SPARSE_MAX pieces
 * or does not account for the stored bytes exactly; or what fn returned.
 * Linear in the map. */
int tx_sparse_each(const uint8_t *base, uint64_t base_off, const struct tx_entry *en,
		   tx_piece_fn *fn, void *arg, const char **why);

/* ---- reading headers through copies (tx_window.c) ----------------------- */

/* Tar headers are read from copies (pread), never from the mapping, whose
 * lost page would raise a signal. A refill reads TX_WINDOW_SMALL bytes
 * from where it is asked, or `ahead` when a walk set it: a pass over every
 * header of a tar of small members copies TX_WINDOW_BYTES stretches (a
 * system call a header would cost more than copying the whole stretch). */
#define TX_WINDOW_BYTES (1u << 20)
#define TX_WINDOW_SMALL (16u << 10)
/* Index rows are parsed from copies too (tx_row_get, tx_rows_get): a read
 * of a row here and there copies the TX_ROWS_NEAR rows around it into a
 * copy the thread keeps (a row's look back at the records before it, a
 * sample's rows, and the lookup, the content and the build of one member
 * read the same rows one after another); a read of the row just past the highest
 * one asked, as a pass over the rows makes, copies TX_ROWS_PASS rows
 * (64 KiB) into the caller's, keeping TX_CHAIN_MAX rows before it. Neither
 * is shared between threads: no lock. */
#define TX_ROWS_NEAR 16
#define TX_ROWS_PASS 2048
struct tx_rows {
	uint64_t first, n;          /* rows held, from row `first` */
	uint64_t high;              /* rows below it have been asked */
	size_t cap;                 /* rows buf has room for */
	uint8_t *buf;
};
struct tx_window {
	const struct sf_map *map;   /* what the copy is of */
	uint64_t off, len;
	size_t cap;
	uint8_t *buf;
	size_t ahead;               /* a refill's length; 0 for TX_WINDOW_SMALL */
	/* a read waits on this lookup for up to `along` bytes of the found
	 * member's payload (sf_stored.along; 0: none) */
	size_t along;
	/* reads the archive itself, never the header blocks kept apart
	 * (verify: tx_z_heads_window) */
	bool archive;
	struct tx_rows rows;        /* the index rows a check reads */
};
void tx_window_free(struct tx_window *w);
/* Makes w's buffer hold at least len bytes: false when out of memory. */
bool tx_window_room(struct tx_window *w, size_t len);
/* Points *p at a copy of the `need` bytes at `at` of map (inside it), read
 * when they are not in the window yet. 0, or as sf_map_read (-EIO when
 * the tar was truncated or its storage fails). *p lasts until the window
 * moves. */
int tx_window_get(struct tx_window *w, const struct sf_map *map, uint64_t at, uint64_t need,
		  const uint8_t **p, struct sf_err *e);
/* Reads the entry at `at` of map as tx_entry_read does, from a copy held
 * in w that starts at most at `at` and holds its records, sparse blocks
 * and 1.0 map text. Offsets in en are the tar's; the block at offset x is
 * at *base + (x - *base_off), valid until the window moves. 0 or 1 as
 * tx_entry_read, or a negative errno with e set when the tar cannot be
 * read. */
int tx_entry_read_copy(struct tx_window *w, const struct sf_map *map, uint64_t at,
		       struct tx_entry *en, const uint8_t **base, uint64_t *base_off,
		       struct sf_err *e);
struct tx_fold;
/* Sets how far w reads ahead for row r of a pass over every row of f: a
 * TX_WINDOW_BYTES stretch when the headers of the rows just after it lie
 * in one (small members), else TX_WINDOW_SMALL (large ones, whose data
 * would be copied for nothing). A pass that needs `headers_only` reads
 * the header alone instead, and a stretch only where its rows are small
 * enough that copying them costs less than a read each. 0, or as
 * tx_rows_get. */
int tx_window_plan(const struct tx_fold *f, struct tx_window *w, uint64_t r, bool headers_only,
		   struct sf_err *e);

/* ---- the index file (tx_index.c) -------------------------------------- */

struct tx_row {
	uint16_t fid;
	uint64_t off;   /* the member's 512-byte header in tar `fid` */
	uint64_t size;  /* payload length */
	uint16_t extid;
	uint32_t crashid;
	uint64_t keyhash;
};

struct tx_index {
	/* An index in memory (built, or the tool's) has its rows read from
	 * data; an index file's are copied from map (pread) as they are read,
	 * never parsed from its mapping. */
	const uint8_t *data;
	const struct sf_map *map;
	uint64_t id;        /* an index file's: unique in the process, never reused */
	size_t size;
	/* A copy of an index file's header, extension and crash-stem blocks,
	 * which ext and crash point into (NULL when parsed from memory). */
	uint8_t *head;
	uint16_t major, minor, rec_size, hdr_size;
	uint64_t n_stems, n_rows, off_crash, off_arr;
	uint32_t n_ext, n_crash;
	uint8_t flags;
	struct tx_str *ext;    /* n_ext strings, in id order */
	struct tx_str *crash;  /* n_crash stems; crash id c is crash[c-1] */
	struct tx_crash_ent {
		uint64_t hash;
		uint32_t id;
	} *crash_by_hash;      /* the crash stems sorted by their XXH64 */
	/* The (keyhash, crashid) lookup, built on first use: rows grouped by
	 * the top bits of their key hash (perm), bucket b being
	 * perm[start[b] .. start[b+1]), and tag[i] the 8 bits of perm[i]'s
	 * key hash below the bucket's, so that a lookup reads (copies) only
	 * the rows its key may be. 5 bytes per row plus at most 4 per row for
	 * the buckets; while it is built, 12 more per row (each row's key hash
	 * and crash id, sorted by without reading rows again). */
	uint32_t *perm;
	uint8_t *tag;
	uint32_t *start;
	unsigned bits;
	/* counted as the lookup is built: distinct (keyhash, crashid) pairs
	 * (samples), and maximal runs of consecutive rows with one pair */
	uint64_t groups, runs;
	/* An index file's rows copied whole when its lookup is built for a
	 * host that keeps copies (sf_host.keep_copies: the Python module),
	 * 32 bytes a row; rows are then read from it, with no system call. */
	_Atomic(uint8_t *) kept;
};

/* Parses and checks the header, extension and crash blocks (spec §6.2).
 * `what` names the file in messages. The index keeps pointers into p (an
 * index in memory: built, or the tool's). */
int tx_index_parse(const uint8_t *p, size_t n, const char *what, struct tx_index *ix,
		   struct sf_err *e);
/* The same for the index file mapped in m: its header and blocks are
 * parsed from a copy (pread) the index keeps, bounded by the file, and its
 * rows are copied as they are read (tx_row_get, tx_rows_get). */
int tx_index_open(const struct sf_map *m, const char *what, struct tx_index *ix,
		  struct sf_err *e);
void tx_index_free(struct tx_index *ix);
/* The listing's check (sf_format.check): the header and the sizes it
 * implies. tx_index_parse starts with it. */
int tx_check(const struct sf_probe *p, struct sf_err *e);
/* Row r (below n_rows) into *out: 0, or -EIO (the index file truncated, its
 * storage failing) with a message naming the file and the row. From the
 * rows this thread copied last, else one small pread: for a row here and
 * there. */
int tx_row_get(const struct tx_index *ix, uint64_t r, struct tx_row *out, struct sf_err *e);
/* The same through w's copy (struct tx_rows): for passes and rows near
 * each other. */
int tx_rows_get(const struct tx_index *ix, struct tx_rows *w, uint64_t r, struct tx_row *out,
		struct sf_err *e);
void tx_rows_free(struct tx_rows *w);
/* Crash id of a stem: its position in the crash block (1-based), else 0. */
uint32_t tx_crash_id(const struct tx_index *ix, const uint8_t *stem, size_t len, uint64_t hash);
/* Extension id of an extension, or -1. */
long tx_ext_id(const struct tx_index *ix, const uint8_t *ext, size_t len);
/* Builds the lookup (once), and counts groups and runs, in one pass over
 * the rows; with `keep`, the pass is one copy of the rows, kept (kept).
 * 0, -ENOMEM, or as tx_rows_get. */
int tx_lookup_build(struct tx_index *ix, bool keep, struct sf_err *e);
/* Calls fn for each row with this key hash, crash id and extension id, in
 * row order, reading rows through w; stops early when fn returns true.
 * 0, or as tx_rows_get. */
int tx_lookup_each(const struct tx_index *ix, struct tx_rows *w, uint64_t keyhash,
		   uint32_t crashid, uint16_t extid, bool (*fn)(void *arg, uint32_t row), void *arg,
		   struct sf_err *e);

/* ---- shards ----------------------------------------------------------- */

struct tx_shard {
	char *name;          /* "<fold>_<S>.tar" */
	struct sf_map *map;  /* NULL when it could not be mapped */
	char *problem;       /* why map is NULL */
};

/* Picks the shards of `fold` from a directory's names: "<fold>_<S>.tar"
 * with no '_' in S, or when there is none "<fold>-<S>.tar" with no '-' in
 * S (WebDataset's names), sorted by S (the rank is the fid). Fills names
 * only. */
int tx_shards_find(const char *fold, const char *const *names, size_t n,
		   struct tx_shard **out, size_t *nout);
void tx_shards_free(struct tx_shard *s, size_t n);

/* ---- the fold (tx_fold.c, tx_member.c) --------------------------------------------- */

enum tx_kind { TX_FILE, TX_HARDLINK, TX_SYMLINK, TX_OTHER };

/* What one row turned out to be. */
struct tx_member {
	struct tx_row row;
	const uint8_t *hdr;   /* its 512-byte header, or NULL */
	/* NULL when the row verifies (docs/design.md §3.7, spec §6.2): only then is it
	 * a member */
	const char *bad;
	enum tx_kind kind;
	/* a member's header and records as tar readers read them (kind is
	 * not TX_OTHER, bad is NULL); hdr and en's strings point into the
	 * window the check was given */
	struct tx_entry en;
	char why[512]; /* what bad says when the tar could not be read */
};

struct tx_walked;

struct tx_fold {
	struct tx_index ix;
	struct tx_shard *shards;
	size_t nshards;
	char *fold;
	struct sf_view *view;
	struct sf_node *rows_dir;
	/* Rows whose name the root's lookup hook gave out before the
	 * listing: the listing names them first, so the names stay. */
	uint8_t *hooked_member;
	/* Hashes of the raw root names the index cannot key (tx_fold.c,
	 * find_unkeyed): directories, renamed members, hard links. Found at
	 * the first root lookup; a name among them is left to the listing.
	 * Sorted, each once (tx_unkeyed_has), charged to unkeyed_charged_to
	 * while the fold lives; NULL until found. An unindexed tar's come with
	 * its index, noted by its walk (noted). */
	struct sf_buf *unkeyed;
	uint64_t unkeyed_charged;
	struct sf_cache *unkeyed_charged_to;
	/* Why the budget refused them, remembered until the cache frees
	 * something (sf_cache.freed at unkeyed_why_at): the pass is not made
	 * again for each lookup meanwhile. */
	char *unkeyed_why;
	uint64_t unkeyed_why_at;
	struct sf_buf *noted;
	/* Rows read since the fold opened (tx_fold.c, read_rows). */
	uint64_t rows_read;
	/* Building the index's lookup once: lookups build it in the
	 * view's turn, but info and verify are produced outside it. */
	struct sf_turn lookup_turn;
	/* .shardfs/samples.jsonl (tx_samples.c) */
	struct tx_samples *samples;
	/* A bit per row: the row verified as a file with no extension record
	 * and no sparse map, so its row's size is its size (tx_member.c). Set
	 * by any thread that checks the row, outside the view's turn too. */
	_Atomic uint8_t *plain;
	/* Per row, for a host that keeps copies (the C API, whose readers
	 * read members by name, each many times): the tag of the root name
	 * whose lookup showed the row as a plain file, or 0. Looking that name
	 * up again takes the row without checking its member: the check is of
	 * bytes the mapping checks keep as they were. A tag is a hash keyed
	 * by a random seed, so no name can be made to take another's tag.
	 * Written in the view's turn; charged to the host's cache. */
	_Atomic uint64_t *named;
	uint64_t named_seed, named_charged;
	struct sf_cache *named_charged_to;
	/* A tar with no index (tx_lone.c): the index is built from its
	 * headers when the view is first used (tx_fold_ready) into `built`,
	 * its memory charged to `charged_to`. Folds of a .taridx are ready
	 * when opened; the rows a host that keeps copies keeps (tx_index.kept)
	 * are charged the same way. */
	bool unindexed;
	atomic_bool ready;
	struct sf_turn ready_turn;
	struct sf_buf *built;
	char *unready; /* why the tar could not be indexed: not walked again */
	struct tx_walked *walked; /* the walk, shared with views of the same file */
	struct sf_cache *charged_to;
	uint64_t charged;
};

/* Makes sure the fold has its index (an unindexed tar's is built on first use,
 * once, whichever thread asks first; the others wait for it, other views
 * never). 0, or a negative errno with e->msg (-EIO for a tar that cannot
 * be indexed, saying why). */
int tx_fold_ready(struct tx_fold *f, struct sf_err *e);
/* A fold's state for container a, named "<fold><ext>", set in *state
 * (freed by tx_fold_free whatever follows), not ready; NULL with e set
 * when out of memory. */
struct tx_fold *tx_fold_new(const struct sf_open_args *a, struct sf_view *v, void **state,
			    const char *ext, struct sf_err *e);
/* An unindexed tar's state (tx_lone.c): a fold of the one tar `tar` (a->map, or
 * the decoded map of a compressed tar), the view named without `ext`. */
int tx_unindexed_parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		       const char *ext, struct sf_map *tar, struct sf_err *e);
/* Frees a fold's state (both descriptors'). */
void tx_fold_free(void *state);

/* The index's (keyhash, crashid) lookup, built once whichever thread asks
 * first. */
int tx_fold_lookup(struct tx_fold *f, struct sf_err *e);
/* The descriptor's build: rows/ and samples.jsonl in .shardfs/, and the
 * root's lazy listing and lookup. */
int tx_fold_build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e);

/* Checks a row against its tar: its key, its header's checksum, and for a
 * member the records before it (the rows just before it) and its data as
 * tar readers find them, which the row's size must state (sparse map
 * included). Linear in the member's records and map. Its bytes and rows
 * are read through w (tx_window_free'd by the caller), whose copy m points
 * into: a tar that cannot be read makes the row bad, saying why. 0, or as
 * tx_rows_get when the index's rows cannot be read (then m is not set). */
/* Whether row r was checked before and found a plain file: a header
 * with no record before it and no sparse map, its payload right after it
 * and its row's size long. */
bool tx_row_plain(const struct tx_fold *f, uint64_t r);
int tx_member_check(const struct tx_fold *f, uint64_t r, struct tx_member *m, struct tx_window *w,
		    struct sf_err *e);
/* Gives file n the content of member row r (its size known now, its
 * extents placed on first read: zero-copy from the tar, holes of a
 * sparse member as zeros). 0, or -ENOMEM or as tx_rows_get with e set. */
int tx_member_set_content(struct tx_fold *f, struct sf_node *n, uint64_t r, struct sf_err *e);
/* Whether a row's payload lies inside its tar: then *off is where. */
bool tx_payload_at(const struct tx_fold *f, const struct tx_row *row, uint64_t *off);
/* Appends the components of `raw` to the path out[0 .. *len), dropping
 * empty and "." ones. -ENAMETOOLONG when the result is over cap bytes. */
int tx_path_append(uint8_t *out, size_t cap, size_t *len, const uint8_t *raw, size_t n);
/* What a header's typeflag makes a member (after tx_entry_read). */
enum tx_kind tx_kind_of(uint8_t typeflag);
/* The full path of entry en (header hdr) into path, at most cap bytes:
 * pax path, else GNU long name, else ustar prefix/name, empty and "."
 * components dropped. -ENOENT when empty, -ENAMETOOLONG when over cap. */
int tx_path_of(const struct tx_entry *en, const uint8_t *hdr, uint8_t *path, size_t cap, size_t *plen);
/* The full path of member row r into path (at most cap bytes: pax path,
 * else GNU long name, else ustar prefix/name; empty and "." components
 * dropped) and its link target. -ENOENT when the path is empty,
 * -ENAMETOOLONG when it is over cap bytes. */
int tx_member_names(const struct tx_fold *f, uint32_t r, const struct tx_member *m,
		    uint8_t *path, size_t cap, size_t *plen, struct tx_str *link);

/* ---- .shardfs/samples.jsonl (tx_samples.c) ------------------------------ */

/* Adds samples.jsonl to the fold's .shardfs/ (its size is counted on first
 * use); -ENOMEM. */
int tx_samples_add(struct tx_fold *f, struct sf_node *meta);
/* The number of lines samples.jsonl has, counted by a pass of its own
 * (reading every member's header; no lock held). */
int tx_samples_count(struct tx_fold *f, uint64_t *n, struct sf_err *e);
void tx_samples_free(struct tx_samples *sm);

/* ---- the view's metadata (tx_info.c, tx_verify.c) ---------------------- */

/* Counts that need a pass over the rows. */
struct tx_counts {
	/* (keyhash, crashid) groups of rows and their runs (index only) */
	uint64_t groups, runs;
	/* samples.jsonl's lines (tx_samples_count), for info only */
	uint64_t samples;
	uint64_t *per_fid;   /* rows per shard, nshards entries */
	uint64_t beyond;     /* rows whose fid names no shard */
};
/* Renders one of the fold's .shardfs files from the row counts into *out
 * (NULL when out of memory): 0, or a negative errno with e set when the
 * rows cannot be read. */
typedef int tx_render_fn(struct tx_fold *f, const struct tx_counts *c, struct sf_buf **out,
			 struct sf_err *e);
/* info.txt, info.json and verify all need a pass over the rows first: makes
 * it (with `samples`, also the count of samples.jsonl's lines), then
 * renders. */
int tx_render_counted(const struct sf_part *p, tx_render_fn *render, bool samples,
		      struct sf_buf **out, struct sf_err *e);
/* Whether upstream's own loader can read the index back: it splits the
 * blocks on any whitespace (spec §6.1). */
bool tx_upstream_loadable(const struct tx_index *ix);

int tx_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tx_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int tx_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

/* ---- building an index (tx_build.c) ----------------------------------- */

/* Reports progress after each tar: index of the tar, rows so far. */
typedef void (*tx_progress_fn)(void *arg, size_t tar, uint64_t rows);

/* Indexes the tars (in fid order) as upstream's parse_folder does, and
 * returns the index file's bytes. `names` name the tars in messages.
 * Empty tars are reported through `warn`: upstream's fid numbering skips
 * them (spec §2.3), and so does this unless `rank_fids` asks for fids that
 * are the tars' ranks, as readers expect. */
int tx_build_index(const struct sf_map *const *tars, const char *const *names, size_t n,
		   bool rank_fids, tx_progress_fn progress, void *parg,
		   void (*warn)(void *arg, const char *msg), struct sf_buf **out,
		   struct sf_err *e);
/* What a walk of a tar's headers makes (tx_index_tar), a compressed tar's
 * file in --index-dir keeps (tx_zkeep.c) and one walk per file shares
 * (tx_walked.c): the tar's index (fid 0), the hashes of the root names the
 * fold's lookup cannot key (tx_fold.c, find_unkeyed: sorted u64s, each
 * once, tx_unkeyed_has) and a compressed tar's header blocks kept apart
 * (tx_zheads.c; NULL for a plain tar, or none kept). Zeroed: none. */
struct tx_built {
	struct sf_buf *index, *unkeyed, *heads;
};
/* Drops the three, leaving b zeroed. */
void tx_built_drop(struct tx_built *b);
/* Their bytes. */
uint64_t tx_built_bytes(const struct tx_built *b);

/* The index of one tar with no index of its own, built in memory as
 * tx_build_index builds it, with its unkeyed root names and (a decoded
 * tar) its header blocks noted by the same walk, into *out; its walk
 * counted in `walked`. The walk's memory is charged to `cache` as it
 * grows, a chunk ahead; the walk stops when the budget cannot take more:
 * -EIO when the index would need more than the whole budget, -ENOBUFS when
 * there is no room now (e says which). On success *charged is what stays
 * charged for *out (the caller uncharges it); on failure nothing stays
 * charged and *out is zeroed. */
int tx_index_tar(const struct sf_map *tar, const char *name, struct sf_progress *walked,
		 struct sf_cache *cache, uint64_t *charged, struct tx_built *out, struct sf_err *e);
/* Whether hash h is among the sorted u64s of b (tx_index_tar's unkeyed). */
bool tx_unkeyed_has(const struct sf_buf *b, uint64_t h);
/* Sorts the n hashes at h and keeps each once, at the front: their count. */
size_t tx_unkeyed_sort(uint64_t *h, size_t n);

/* ---- one walk per tar file (tx_walked.c) ------------------------------- */

/* The index built for unindexed tar `tar` of view v (tx_index_tar, charged to v's
 * cache) in *out and its unkeyed root names in *unkeyed (references),
 * walked once for all views of the same file (device, inode, size, mtime)
 * and cache, whichever asks first; the others wait for it. A compressed
 * tar's seek index is made first (tx_z_index), once for them all too, and
 * kept in --index-dir (tx_z_keep). *held (NULL at first) keeps the shared
 * walk, also when it failed: its failure is remembered, one for lack of
 * room (-ENOBUFS) until the cache frees something, any other for good.
 * Drop it with tx_walked_put; the charges go with the last holder. */
int tx_walked_get(struct sf_map *tar, struct sf_view *v, struct tx_walked **held,
		  struct sf_buf **out, struct sf_buf **unkeyed, struct sf_err *e);
void tx_walked_put(struct tx_walked *w);

extern const struct sf_format tx_format;

#endif
