/* The view model: what a container looks like as a tree of files.
 *
 * A format module turns a container into a `struct sf_view`: directories,
 * files and symlinks. A file has an exact size and a content made of
 * extents (docs/design.md §2): spans of a mapping (zero-copy), slices of a decoded
 * part (decoded once, held by a cache the caller supplies), owned buffers,
 * or generated ranges. Nothing here knows FUSE: the daemon serves these
 * trees, and the tools read them with the same paths.
 *
 * Threading: a view may be read by many threads. Lazy work (populating a
 * directory, building a file's extents, making an on-demand node) runs
 * once, in the view's turn: one thread at a time, holding no lock (it reads
 * the container, so it may wait on the source), the others waiting for the
 * turn on a condition. What needs no lazy work (a find in a complete
 * directory of a name whose node exists, or of no name, the pins and hosts
 * of on-demand nodes, the warnings) takes only the short names lock, never
 * the turn: it answers while lazy work of the same view waits on the
 * source. Hooks run in the turn and call only what expects it held.
 */
#ifndef SF_VIEW_H
#define SF_VIEW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sf_buf.h"
#include "sf_err.h"
#include "sf_hash.h"
#include "sf_host.h"
#include "sf_recent.h"
#include "sf_turn.h"

struct sf_format;
struct sf_map;

/* ---- parts: decoded units shared by files ----------------------------- */

struct sf_part;
struct sf_cache;
struct sf_idle;
/* Produces the whole decoded content of a part into a new buffer. It must be
 * deterministic: the cache may drop the buffer and call it again. Other
 * parts it builds on (a region holding this value, a chunk a text view
 * prints) are fetched through `cache`, so they too are decoded once. It
 * must not take the view's turn: a reader may hold it while waiting for
 * this very part. */
typedef int (*sf_produce_fn)(const struct sf_part *part, struct sf_cache *cache,
			     struct sf_buf **out, struct sf_err *e);

#define SF_SIZE_UNKNOWN UINT64_MAX

struct sf_part {
	uint64_t id;          /* unique in the process: the cache key */
	sf_produce_fn produce;
	void *arg;            /* the format's; freed with the view */
	void *arg2;
	uint64_t aux;
	_Atomic uint64_t size; /* SF_SIZE_UNKNOWN until first produced */
	struct sf_view *view;
	const char *what;     /* names the part in messages ("regions/forward") */
};

/* Where decoded parts live while they are in use. The daemon passes its LRU
 * cache; tools pass sf_nocache (decode on each get). */
struct sf_cache {
	/* On success *out holds a reference the caller drops. */
	int (*get)(struct sf_cache *c, struct sf_part *part, struct sf_buf **out,
		   struct sf_err *e);
	/* The most bytes a buffer decoded while making a part may take (the
	 * daemon's --cache-size; 0: no limit): a file can claim any size. */
	uint64_t limit;
	/* Optional (sf_cache_charge): holds budget for working memory that is
	 * not a part, and gives it back. A cache that has them outlives every
	 * view read through it (a view may hold a charge for its life). */
	int (*charge)(struct sf_cache *c, uint64_t bytes, const char *path, const char *what,
		      struct sf_err *e);
	void (*uncharge)(struct sf_cache *c, uint64_t bytes);
	/* Counts the times the cache gave memory back (0 in a cache without
	 * charges): a charge that failed for lack of room is not tried again
	 * before it changes, so that such a failure costs no wait. */
	_Atomic uint64_t freed;
	/* Optional (sf_cache_idle): keeps or lets go of a charge its owner
	 * can drop and make again. */
	void (*idle)(struct sf_cache *c, struct sf_idle *i, bool keep);
	/* Optional (sf_cache_buf, sf_cache_drop): a buffer for a part being
	 * made out of one a part let go of, and letting go of a part. */
	struct sf_buf *(*buf)(struct sf_cache *c, size_t len);
	bool (*drop)(struct sf_cache *c, struct sf_part *part, struct sf_part *past);
	/* Optional (sf_file_read_held): the decoded copy of `part` the cache
	 * holds now, got as `get` gets it; false when it holds none (nothing
	 * is decoded, nothing waited for). */
	bool (*held)(struct sf_cache *c, struct sf_part *part, struct sf_buf **out);
	/* Optional (sf_cache_keep): holds a part decoded on the way to
	 * another. */
	bool (*keep)(struct sf_cache *c, struct sf_part *part, struct sf_buf *buf);
	/* Optional (sf_cache_ahead, sf_cache_after): decodes a part before a
	 * reader asks. */
	void (*ahead)(struct sf_cache *c, struct sf_part *next, bool follows);
};
extern struct sf_cache sf_nocache;

/* A charge its owner can drop while nothing uses it and make again when
 * next used (a file's extents, built again at its next read). A cache
 * short of room drops such charges, the least recently kept first, before
 * any reader waits for room or fails for the want of it. */
struct sf_idle {
	struct sf_idle *prev, *next;
	bool kept; /* the cache's, under its lock for them */
	/* Drops what the charge holds and uncharges it, without calling
	 * sf_cache_idle: false when in use (kept, as recently used). */
	bool (*drop)(struct sf_idle *i);
};
/* Keeps `i` in the cache's list of droppable charges, or takes it out
 * (waiting for a drop of it running); nothing in a cache without a
 * budget. */
void sf_cache_idle(struct sf_cache *c, struct sf_idle *i, bool keep);

/* Runs a part's produce function between checks of the view's mappings
 * (sf_mapcheck.h): what a cache calls to decode. On failure *out is NULL. */
int sf_part_produce(const struct sf_part *p, struct sf_cache *c, struct sf_buf **out,
		    struct sf_err *e);
/* Decodes a part through the cache, recording its size. */
int sf_part_get(struct sf_cache *c, struct sf_part *p, struct sf_buf **out,
		struct sf_err *e);
/* Holds `bytes` of the cache's budget for working memory whose size a file
 * sets and that is no part (a JSON parse: sf_json_parse_cost), until
 * sf_cache_uncharge; waits a while for room. 0, or -EIO with e naming
 * `path` and `what` when they cannot be had. A cache without a budget
 * (sf_nocache) holds nothing. */
int sf_cache_charge(struct sf_cache *c, uint64_t bytes, const char *path, const char *what,
		    struct sf_err *e);
void sf_cache_uncharge(struct sf_cache *c, uint64_t bytes);
/* A buffer of len bytes for a part its produce is making, not zero-filled
 * (produce writes it whole): the memory of a part the cache let go of when
 * it has one of that size, since the first touch of fresh memory costs a
 * page fault per 4 KiB (8-15 us each on the VMs measured), else new. NULL
 * when out of memory. */
struct sf_buf *sf_cache_buf(struct sf_cache *c, size_t len);
/* Lets go of `part`'s decoded copy now that a reader has got `past`, the
 * part after it, unless a reader holds it or it is being made: a stream
 * read through in order is in the kernel's page cache, and its pieces'
 * memory serves the pieces after them (sf_cache_buf). True when the cache
 * holds no copy of it after (false: one kept, `past` not got yet or no
 * longer held, or a cache that cannot drop). */
bool sf_cache_drop(struct sf_cache *c, struct sf_part *part, struct sf_part *past);
/* Holds buf as `part`'s decoded copy (a reference of its own), as though
 * a reader had got it: a decoder that had to run through `part` to reach
 * the part it makes offers it, so that a read of it later decodes
 * nothing. Only when the cache holds no copy of `part` nor makes one, and
 * buf fits in the budget without waiting (evicting what no reader holds).
 * True when kept (false: not, or a cache that holds nothing). */
bool sf_cache_keep(struct sf_cache *c, struct sf_part *part, struct sf_buf *buf);
/* Decode ahead: a part's produce names the part of the same view a reader
 * reading in order asks for next (the next piece of a decoded stream), as
 * does a read from a file's start that ends in a part (sf_read.c). The
 * cache decodes it on a thread of its own while the reader uses this one:
 * at once when a reader names it, or, when the naming part was itself
 * decoded ahead, once a reader first gets that part, so that the thread
 * stays one part ahead and stops when the reader goes elsewhere. At most
 * two parts ahead and not yet got, each reserved like any decode, and
 * nothing when it does not fit at once (the cache is short), its size is
 * unknown, or the cache decodes nothing ahead (sf_dcache.c does). The
 * decode holds a reference to the part's view: a view closed meanwhile is
 * freed when it ends. */
void sf_cache_ahead(struct sf_cache *c, struct sf_part *next);
/* sf_cache_ahead for a part that goes on from where the part being made
 * ends (it needs the decoder this produce leaves), named as the produce
 * ends: a thread decoding ahead decodes it next itself, rather than wake
 * another (0.3-0.6 ms on another CPU here) that would only wait for it. */
void sf_cache_after(struct sf_cache *c, struct sf_part *next);

/* ---- extents ---------------------------------------------------------- */

/* Fills `len` bytes of a generated extent starting `off` bytes into it. */
typedef int (*sf_gen_fn)(void *arg, uint64_t off, uint8_t *out, size_t len,
			 struct sf_cache *c, struct sf_err *e);

enum sf_ext_kind {
	SF_EXT_MAP,  /* map: bytes in a mapping the view keeps alive */
	SF_EXT_BUF,  /* buf + off: bytes of an owned buffer */
	SF_EXT_PART, /* part + off: bytes of a decoded part */
	SF_EXT_GEN,  /* gen(arg, off...) computes the bytes per read */
	SF_EXT_ZERO, /* zeros */
};

struct sf_ext {
	enum sf_ext_kind kind;
	uint64_t len;
	uint64_t off; /* BUF, PART: where in the buffer; GEN: passed through */
	union {
		const uint8_t *map;
		struct sf_buf *buf;
		struct sf_part *part;
		struct {
			sf_gen_fn fn;
			void *arg;
		} gen;
	} u;
};

/* ---- nodes ------------------------------------------------------------ */

enum sf_kind { SF_DIR, SF_FILE, SF_LINK };

struct sf_node;
/* Adds a lazily populated directory's entries (called once). */
typedef int (*sf_populate_fn)(struct sf_node *dir, struct sf_err *e);
/* Resolves one name in a directory without populating it (optional; e.g. the
 * taridx flat-name lookup). Sets *out to NULL when the name does not exist;
 * returns SF_LOOKUP_LIST when only the directory's listing can tell (it is
 * then populated and searched). Runs in the view's turn. */
#define SF_LOOKUP_LIST 1
typedef int (*sf_lookup_fn)(struct sf_node *dir, const char *name,
			    struct sf_node **out, struct sf_err *e);
/* Where a file's bytes lie when they are stored as-is in one mapping of
 * its view: [off, off + size) of map. */
struct sf_stored {
	struct sf_map *map;
	uint64_t off, size;
	/* Set by the caller of sf_view_locate: a read of the file's first
	 * `along` bytes waits on the locate (0: none), so a hook may copy the
	 * payload along with the header it checks, one pread for both, into
	 * `pre` (the caller's to sf_recent_free; sf_recent.h). */
	size_t along;
	struct sf_recent pre;
};
/* Where the bytes of the file `name` of a directory not yet populated lie
 * (optional; the taridx flat-name lookup without a node): 0 and *out; 1
 * (SF_LOOKUP_LIST) when the hook cannot say so cheaply, and the lookup
 * hook then a read answer instead (never otherwise than they would). Runs
 * in the view's turn. */
typedef int (*sf_locate_fn)(struct sf_node *dir, const char *name, struct sf_stored *out,
			    struct sf_err *e);
/* Builds a lazily described file's extents (called once), using
 * sf_file_add_* on `f`. */
typedef int (*sf_build_fn)(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
/* Gives the node of an on-demand entry (sf_dir_add_lazy) its content: `n`
 * has its kind, name, key and aux set (called in the view's turn). */
typedef int (*sf_make_fn)(struct sf_node *n, struct sf_err *e);

/* A view and its nodes are opaque to hosts: they ask the functions below
 * ("asking about trees"). Their insides are format/'s (sf_view_impl.h). */
struct sf_view;

/* Creates a view whose root is an empty directory. `path` names the
 * container in messages. */
struct sf_view *sf_view_new(const struct sf_format *fmt, const char *path);
/* Makes the root of a new view (with no entries yet) a symlink to `target`. */
int sf_view_set_link(struct sf_view *v, const char *target);
struct sf_view *sf_view_ref(struct sf_view *v);
void sf_view_unref(struct sf_view *v);
/* Whether a single reference holds v (a host closing views nobody uses). */
bool sf_view_held_once(const struct sf_view *v);
/* Whether a request does the view's lazy work now (a lookup or listing that
 * walks, populates or builds): in use, however long ago it was entered. */
bool sf_view_busy(const struct sf_view *v);
/* Drops a reference unless it is the last one (which would free the view
 * and close its files); true when dropped. */
bool sf_view_unref_shared(struct sf_view *v);
/* Keeps `m` alive as long as the view (takes a new reference). */
int sf_view_hold_map(struct sf_view *v, struct sf_map *m);
void sf_view_warn(struct sf_view *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A part owned by the view. `size` may be SF_SIZE_UNKNOWN. */
struct sf_part *sf_view_part(struct sf_view *v, sf_produce_fn fn, void *arg,
			     uint64_t size, const char *what);

/* ---- building trees ----------------------------------------------------
 *
 * Names: sf_dir_add_* take a raw name (bytes from the file, or our own
 * fixed names) and escape it with sf_name_escape (sf_name.h); an empty, ".",
 * "..", or already present result gets "#<n>". Fixed names of ours pass
 * through the same code unchanged. All return NULL on ENOMEM.
 */

struct sf_node *sf_dir_add_dir(struct sf_node *dir, const void *raw, size_t len);
struct sf_node *sf_dir_add_file(struct sf_node *dir, const void *raw, size_t len);
/* The same, for a name already escaped and made unique by the caller. */
struct sf_node *sf_dir_add_exact(struct sf_node *dir, enum sf_kind kind, const char *name);

/* Makes `name` (escaped) unique in dir by appending "#<n>" with the smallest
 * n >= 1, also when it is empty, "." or "..". `out` has SF_NAME_MAX+16
 * bytes (sf_name.h). `taken` (optional) says whether a further name counts
 * as taken (tet: a dataset's .npy twin). */
void sf_dir_unique(struct sf_node *dir, const char *name, char *out,
		   bool (*taken)(struct sf_node *dir, const char *name));

/* On-demand entries. A directory with a million entries (a fold's
 * members) should not hold a million nodes: after sf_dir_set_lazy, its
 * populate adds entries with sf_dir_add_lazy (a name, a kind and two
 * numbers of the format's, about 30 bytes each), and a node is made by
 * `make` when the entry is looked up, and freed when its host lets it go
 * (sf_node_set_host) and nobody has it pinned. sf_dir_find and
 * sf_dir_child pin such nodes; the daemon unpins once its inode holds the
 * node, tools keep them until the view is freed. */
int sf_dir_set_lazy(struct sf_node *dir, sf_make_fn make);
/* Adds an entry named from `raw` (escaped and made unique as
 * sf_dir_add_file does). */
int sf_dir_add_lazy(struct sf_node *dir, const void *raw, size_t len, enum sf_kind kind,
		    uint32_t key, uint32_t aux);
/* The node of entry `key`, named `name` (escaped, unique), made now if it is
 * not alive: for a lookup hook answering before the directory is populated
 * (its populate must then give the entry of `key` this name). Pinned. Only
 * from a lookup hook: the view's turn is held. */
int sf_dir_lazy_node(struct sf_node *dir, enum sf_kind kind, const char *name, uint32_t key,
		     uint32_t aux, struct sf_node **out, struct sf_err *e);
/* Entries a format numbers and names itself, with no table per entry (a
 * tatami blob column's present rows: ten million entries cost what the
 * format keeps to number them). Set by a populate instead of adding
 * entries: the directory then holds `n` files and nothing else; entry i is
 * named by name(dir, i, out) (escaped and unique, shorter than
 * SF_COUNTED_NAME), find gives the entry of a name (-1: none), and `make`
 * makes the node of entry i with key i and aux 0. name and find read only
 * what the format holds in memory: they run under the names lock. */
#define SF_COUNTED_NAME 24
struct sf_counted {
	void (*name)(const struct sf_node *dir, uint32_t i, char out[SF_COUNTED_NAME]);
	long (*find)(const struct sf_node *dir, const char *name);
};
int sf_dir_set_counted(struct sf_node *dir, sf_make_fn make, const struct sf_counted *ops,
		       uint32_t n);
void sf_node_unpin(struct sf_node *n);
/* Sets the daemon's slot; a lazy node with no host left and no pin is freed. */
void sf_node_set_host(struct sf_node *n, void *host);

/* Marks a directory lazy: `fn` adds its entries on first listing/lookup. */
void sf_dir_set_populate(struct sf_node *dir, sf_populate_fn fn, void *arg);
void sf_dir_set_lookup(struct sf_node *dir, sf_lookup_fn fn);
void sf_dir_set_locate(struct sf_node *dir, sf_locate_fn fn);

/* Content of files. Extents are appended in order. */
int sf_file_add_map(struct sf_node *f, const uint8_t *p, uint64_t len);
int sf_file_add_buf(struct sf_node *f, struct sf_buf *b, uint64_t off, uint64_t len); /* takes a ref */
int sf_file_add_part(struct sf_node *f, struct sf_part *p, uint64_t off, uint64_t len);
int sf_file_add_gen(struct sf_node *f, sf_gen_fn fn, void *arg, uint64_t off, uint64_t len);
int sf_file_add_zero(struct sf_node *f, uint64_t len);
/* Makes room for `more` extents (a sparse member's thousands of pieces),
 * held in the budget of the view's cache until the extents are dropped with
 * the node (or a failed build): 0, or -EIO with e naming `what` when the
 * budget has no room, or -ENOMEM. */
int sf_file_reserve(struct sf_node *f, size_t more, const char *what, struct sf_err *e);
/* Holds `bytes` more in the budget of the view's cache for what the file
 * keeps (a rendered text it takes with sf_file_add_str), given back with
 * its extents: 0, or as sf_cache_charge. */
int sf_file_charge(struct sf_node *f, uint64_t bytes, const char *what, struct sf_err *e);
/* Appends what s holds, taking it (s is left empty); -ENOMEM if building s
 * ran out of memory. */
int sf_file_add_str(struct sf_node *f, struct sf_str *s);
/* Convenience: the file's content is a copy of these bytes. */
int sf_file_set_bytes(struct sf_node *f, const void *p, size_t len);
/* The file is exactly one part (size may be unknown until produced). */
void sf_file_set_whole(struct sf_node *f, struct sf_part *p);
/* The file's extents are built on first use. */
void sf_file_set_build(struct sf_node *f, sf_build_fn fn, void *arg);
/* The same, for a build that places exactly `size` bytes without decoding:
 * the size can be shown before the build runs. */
void sf_file_set_build_sized(struct sf_node *f, sf_build_fn fn, void *arg, uint64_t size);
/* The file is listed with the given size but every read fails with EIO. */
int sf_file_set_broken(struct sf_node *f, uint64_t size, const char *why);

/* Adds the hidden ".shardfs/" of the view root with info.txt, info.json and
 * verify (docs/design.md §3.2), each produced when read (`arg` goes to each part).
 * Returns the directory so a format can add more (rows/, tiles/). Call it
 * before adding entries named from user data, so that ".shardfs" counts as
 * taken. */
struct sf_node *sf_view_add_meta(struct sf_view *v, sf_produce_fn info_txt,
				 sf_produce_fn info_json, sf_produce_fn verify, void *arg);

/* ---- using trees ------------------------------------------------------ */

/* Finds an entry by its shown name (populating or asking the lookup hook
 * first). *out is NULL if absent. */
int sf_dir_find(struct sf_node *dir, const char *name, struct sf_node **out,
		struct sf_err *e);
/* What sf_dir_find answers from what a complete directory already holds:
 * 1 with *out (pinned as sf_dir_find pins it, or NULL: no such name), or 0
 * when the answer needs lazy work (then only sf_dir_find answers). Takes
 * the names lock only: it never waits on lazy work, nor on the source. */
int sf_dir_find_known(struct sf_node *dir, const char *name, struct sf_node **out);
/* Makes sure a directory is populated. */
int sf_dir_ready(struct sf_node *dir, struct sf_err *e);
/* The same from a hook of the directory's view (its turn held: the turn
 * is not recursive). */
int sf_dir_ready_held(struct sf_node *dir, struct sf_err *e);
/* Entries of a ready directory: its nodes, then its on-demand entries. */
size_t sf_dir_count(const struct sf_node *dir);
/* Entry i without making its node (the view's turn held): `node` is NULL for an
 * on-demand entry, and `id` is unique among the directory's entries. A
 * counted entry's name is written into `own`: keep the sf_dirent while
 * using `name`. */
struct sf_dirent {
	const char *name;
	enum sf_kind kind;
	bool hidden;
	struct sf_node *node;
	const void *id;
	char own[SF_COUNTED_NAME];
};
void sf_dir_entry(const struct sf_node *dir, size_t i, struct sf_dirent *out);
/* The node of entry i, made if needed (pinned when on demand); NULL when
 * out of memory or its make failed (e says why). */
struct sf_node *sf_dir_child(struct sf_node *dir, size_t i, struct sf_err *e);
/* Makes sure a file's size and extents are known. */
int sf_file_ready(struct sf_node *f, struct sf_cache *c, struct sf_err *e);
/* ---- asking about trees -----------------------------------------------
 *
 * What a host may learn of a node without reading its fields, so that the
 * model can change beneath it. */

enum sf_kind sf_node_kind(const struct sf_node *n);
const char *sf_node_name(const struct sf_node *n);
/* Resolvable but never listed (".shardfs"). */
bool sf_node_hidden(const struct sf_node *n);
struct sf_view *sf_node_view(const struct sf_node *n);
/* The host's slot (sf_node_set_host); NULL when none. */
void *sf_node_host(const struct sf_node *n);
/* A symlink's target. */
const char *sf_link_target(const struct sf_node *n);
/* A view's root: a directory, or a symlink (alias views). */
struct sf_node *sf_view_root(const struct sf_view *v);
/* The container's path, as messages name it. */
const char *sf_view_path(const struct sf_view *v);
/* The format the view was opened with (NULL for a view made bare). */
const struct sf_format *sf_view_format(const struct sf_view *v);
/* The mappings the view holds (sf_view_hold_map), i < sf_view_nmaps. */
size_t sf_view_nmaps(const struct sf_view *v);
struct sf_map *sf_view_map(const struct sf_view *v, size_t i);
/* The container's own mapping when the view holds it, else NULL. */
struct sf_map *sf_view_source(const struct sf_view *v);
/* Calls fn(arg, v's path, warning) for each warning raised since the last
 * call (sf_view_warn), so that a host reports each once. */
void sf_view_take_warnings(struct sf_view *v, void (*fn)(void *arg, const char *path,
							 const char *msg), void *arg);
/* Whether a directory's entries are all known (never lazy, or populated):
 * a find or a listing then does no work for the format. */
bool sf_dir_is_populated(const struct sf_node *dir);
/* Whether it is populated with no lazy work running (sf_dir.complete): a
 * listing of it then takes no turn, and never waits on the source. */
bool sf_dir_is_complete(const struct sf_node *dir);
/* Whether a lazy directory answers a find through a lookup hook instead of
 * populating itself. */
bool sf_dir_has_lookup(const struct sf_node *dir);
/* What can be said of a file's size without building it, from one look at
 * its state: `known` once built, or announced (sf_file_set_build_sized);
 * `size` is then the size (before the build, the one announced);
 * `broken` when every read fails (sf_file_set_broken). */
struct sf_file_size {
	uint64_t size;
	bool known;
	bool broken;
};
struct sf_file_size sf_file_size(const struct sf_node *f);

/* Resolves a path relative to `from` ("a/b/c"; no "..", no links followed). */
int sf_view_walk(struct sf_node *from, const char *path, struct sf_node **out,
		 struct sf_err *e);

/* A read by name without a node (the C API's reads of members, many
 * thousands a second): 0 and where the bytes of the file at `path` lie,
 * when the root's locate hook can tell so for a name at the root before
 * the root is listed; 1 when it cannot, and the caller
 * walks to the file (the walk is the authority, and says why a name
 * fails); or a negative errno, e set. The caller sets out->along; what
 * out->pre then holds is the caller's, whatever the answer. */
int sf_view_locate(struct sf_view *v, const char *path, struct sf_stored *out,
		   struct sf_err *e);

#endif
