/* libshardfs-format: read the containers shardfs understands without FUSE.
 *
 * A container (a .tsumugi, .tatami, .taridx with its tars, .sidx or .tet
 * file) opens into a read-only tree of parts: the same tree the mount shows
 * in the file's view directory, with the same paths ("regions/forward",
 * "columns/price/values.npy", ".shardfs/verify"). Nothing here needs
 * /dev/fuse.
 *
 *     struct shardfs *h;
 *     if (shardfs_open("weights.tet", &h) < 0)
 *             fprintf(stderr, "%s\n", shardfs_last_error());
 *     char buf[4096];
 *     ssize_t n = shardfs_read(h, "w/.zarray", buf, sizeof buf, 0);
 *     shardfs_close(h);
 *
 * Errors: functions return 0 (or a byte count) on success and a negative
 * errno on failure; shardfs_last_error() then says what was wrong, naming
 * the file and the part. A part whose bytes fail a check reads as -EIO.
 *
 * A source that shrinks or whose storage fails while a handle is open: the
 * opens and reads that need a lost page return -EIO, and so does every
 * read after a change in place (size or mtime) is seen: reads compare a
 * file with what was opened at most every 10 ms (a fstat per read would
 * cost more than the read), so a change is noticed within 10 ms of it.
 * The library parses and decodes only bytes it has copied out of the
 * files (pread), and copies mapped bytes for the caller through the kernel
 * (process_vm_readv), so no signal is raised and it installs no signal
 * handler. (shardfs_hold's mapped bytes are the caller's to touch: see
 * there.)
 *
 * Memory: a file rendered from the whole container (a fold's
 * .shardfs/samples.jsonl, about 70 bytes a sample, held in the decode
 * cache's budget, else rendered per read) is kept whole from its
 * first use until shardfs_close, where the mount renders it per read; so
 * are a fold's index rows (32 bytes a member, held in the decode cache's
 * budget, else read per lookup) from its first lookup by name, where the
 * mount copies the rows each lookup reads; and, in the same budget, 8
 * bytes a member for the names looked up: a member's tar header is
 * checked at the first read of its name, not again while the handle is
 * open (the 10 ms checks above see a tar changed in place).
 *
 * Threads: a handle may be used by several threads at once. The last error
 * message is kept per thread.
 *
 * Link with `pkg-config --cflags --libs shardfs-format`.
 */
#ifndef SHARDFS_H
#define SHARDFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opened container. */
struct shardfs;

enum shardfs_kind {
	SHARDFS_DIR = 1,
	SHARDFS_FILE = 2,
	SHARDFS_LINK = 3,
};

/* One entry of the tree. The strings belong to the handle: shardfs_stat's
 * stay valid until shardfs_close, shardfs_list's while its callback runs
 * (a listing of millions keeps no entry). */
struct shardfs_entry {
	const char *name;        /* the entry's name as the mount shows it */
	enum shardfs_kind kind;
	uint64_t size;           /* files: the exact size; otherwise 0 */
	const char *target;      /* links: the link's target; otherwise NULL */
	int error;               /* files: 0, or the negative errno learning the
				  * size failed with (size is then 0) */
};

/* Opens a container file. The format is chosen by the file's name, as the
 * mount does; a .taridx finds its tars beside it. */
int shardfs_open(const char *path, struct shardfs **out);
void shardfs_close(struct shardfs *h);

/* The ending (".tar", ".taridx", ...) of the format whose view the mount
 * places beside file `name` of directory `dir`, or NULL when it places
 * none. `names` are the names of the directory's n entries sorted by
 * strcmp: a tar that a fold beside it takes as a shard gets no view of its
 * own. By the names alone: the mount also checks the file's first and
 * last bytes before placing a view. */
const char *shardfs_view_ext(const char *dir, const char *name, const char *const *names,
			     size_t n);

/* The name of the format module that opened the file: "tsumugi", "tatami",
 * "taridx", "tar" (an unindexed tar), "sidx" (a Shardlake shard), "alias" (a
 * Shardlake alias) or "tet". */
const char *shardfs_format(const struct shardfs *h);

/* Calls fn for every entry of the directory `dir` ("" is the top of the
 * tree) in listing order, hidden ".shardfs" excluded. Stops early, returning
 * fn's value, when fn returns non-zero. */
typedef int (*shardfs_list_fn)(const struct shardfs_entry *e, void *arg);
int shardfs_list(struct shardfs *h, const char *dir, shardfs_list_fn fn, void *arg);

/* Describes the entry at `path` ("" is the top of the tree). */
int shardfs_stat(struct shardfs *h, const char *path, struct shardfs_entry *out);

/* Reads up to `len` bytes of the file at `path` from offset `off`. Returns
 * the number of bytes read (0 at or past the end). A compressed part is
 * decoded once and kept while it is read piece by piece. */
ssize_t shardfs_read(struct shardfs *h, const char *path, void *buf, size_t len,
		     uint64_t off);

/* The bytes of a file where they lie, without a copy (shardfs_hold). */
struct shardfs_hold;

/* Like shardfs_read, but sets *data to the bytes [off, off+len) where they
 * lie instead of copying them: in the container's mapping for a part stored
 * as-is, in the decoded part for a compressed one; a range that lies in
 * several pieces is copied once into memory the hold owns. Returns the
 * number of bytes and sets *out (0 bytes at or past the end), or a negative
 * errno. The bytes stay valid until shardfs_release(*out), also past
 * shardfs_close. Mapped bytes are the source file's pages, as with mmap(2):
 * should the file shrink meanwhile, touching them raises SIGBUS. */
ssize_t shardfs_hold(struct shardfs *h, const char *path, uint64_t off, size_t len,
		     const void **data, struct shardfs_hold **out);
/* Copies the held bytes into dst (as many as shardfs_hold returned): 0,
 * or -EIO when a mapped page cannot be read (the file shrank) instead of
 * a SIGBUS. A whole file in one call: hold it, size the copy, copy. */
int shardfs_hold_copy(const struct shardfs_hold *hold, void *dst);
/* 1 when the held bytes are the source file's mapped pages, else 0. */
int shardfs_hold_mapped(const struct shardfs_hold *hold);
void shardfs_release(struct shardfs_hold *hold);

/* The process's decode cache, shared by its handles (256 MiB at first, the
 * mount's --cache-size default): decoded parts and the working memory a
 * view sizes by its files (a tar's index, tables) are held within it.
 * shardfs_set_cache_size sets its budget: parts and charges made from then
 * on keep within it (0: -EINVAL). When it is short, what handles not used
 * for a second hold that can be made again is given back (shed) first. */
int shardfs_set_cache_size(uint64_t bytes);
struct shardfs_cache_stats {
	uint64_t budget;        /* bytes */
	uint64_t bytes_held;    /* decoded parts */
	uint64_t bytes_charged; /* working memory */
	uint64_t sheds;         /* times an idle handle gave back what it held */
};
void shardfs_cache_stats(struct shardfs_cache_stats *out);

/* The message of the calling thread's last failure ("" if none). */
const char *shardfs_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
