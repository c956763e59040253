/* Read-only memory mappings of source files, shared by reference count:
 * every extent that points into a mapping keeps it alive through its view.
 *
 * A mapped page can be lost (the file truncated under the mapping, its
 * storage failing): touched in user space it raises SIGBUS. So mapped
 * bytes go only to the kernel (reply iovecs; copies pread the file, or use
 * process_vm_readv), which turns a lost page into an error; parsers and
 * decoders read the bytes they need through sf_map_read / sf_map_copy
 * (pread on the mapping's fd), where a lost page is -EIO. */
#ifndef SF_MAP_H
#define SF_MAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sf_err.h"

struct sf_map {
	atomic_uint refs;
	const uint8_t *data; /* NULL when size == 0 */
	size_t size;
	struct stat st;      /* as fstat saw the file when it was mapped */
	char *path;          /* for messages */
	/* Kept open to check the file against st (sf_map_check): a path may
	 * name another file by now. */
	int fd;
	/* The file was truncated, extended or rewritten in place since it was
	 * mapped: final, every later check fails. */
	atomic_bool changed;
	/* A check this soon (ns, CLOCK_MONOTONIC_COARSE) after one that passed
	 * trusts it without a system call (sf_map_set_recheck); 0 looks every
	 * time, as the daemon does. */
	uint64_t recheck_ns;
	_Atomic uint64_t passed_at;
	/* A file whose bytes are decoded, not mapped (a compressed tar: data
	 * is NULL, size the decoded size, fd and st the compressed file's):
	 * sf_map_read reads through `read`, and the last unref frees `src`. */
	int (*read)(const struct sf_map *m, uint64_t off, uint64_t len, void *dst, const char *what,
		    struct sf_err *e);
	void *src;
	void (*src_free)(void *src);
};

/* Maps the regular file `path` beneath directory `top`, with no symlink
 * followed (sf_open.h). `shown` is what messages call the file. */
int sf_map_beneath(int top, const char *path, const char *shown,
		   struct sf_map **out, struct sf_err *e);
/* Maps `path` as a tool's user named it (symlinks followed): only a regular
 * file, looked at before it is opened, so a FIFO never blocks. */
int sf_map_open(const char *path, struct sf_map **out, struct sf_err *e);
struct sf_map *sf_map_ref(struct sf_map *m);

/* Copies [off, off+len) of the file into dst with pread: 0, -EINVAL when
 * the range is not inside the size mapped, -EIO when the file ends early
 * (truncated) or its storage fails; the message names the file, `what`
 * (the part read) and the offset. */
int sf_map_read(const struct sf_map *m, uint64_t off, uint64_t len, void *dst,
		const char *what, struct sf_err *e);
/* The same into a fresh heap buffer of len bytes (*out, freed by the
 * caller). The caller bounds len (a range the file holds, charged to the
 * cache budget where it may be large). */
int sf_map_copy(const struct sf_map *m, uint64_t off, uint64_t len, uint8_t **out,
		const char *what, struct sf_err *e);
/* A window of a file read ahead piece by piece: for walking a region too large
 * to copy whole (an index, records) a few bytes at a time. Zero it, set
 * m, and sf_win_free it after. */
struct sf_win {
	const struct sf_map *m;
	uint64_t off;   /* file offset of buf[0] */
	size_t len, cap;
	uint8_t *buf;
};
/* Points *p at a copy of the `need` bytes at file offset `off`, reading
 * ahead as far as `end` (the end of the region walked) a window at a
 * time. 0, or as sf_map_read; *p lasts until the next call. */
int sf_win_get(struct sf_win *w, uint64_t off, size_t need, uint64_t end, const uint8_t **p,
	       const char *what, struct sf_err *e);
void sf_win_free(struct sf_win *w);

/* The offset of address p inside m's mapping (p from m->data + offset):
 * for parsers that keep ranges as pointers. */
static inline uint64_t sf_map_off(const struct sf_map *m, const void *p)
{
	return (uint64_t)((const uint8_t *)p - m->data);
}
/* Takes the mapping's pages out of this process's page tables (the page
 * cache keeps them, so the next access refaults them cheaply): resident
 * memory then holds only what is in use. */
void sf_map_drop_pages(const struct sf_map *m);
void sf_map_unref(struct sf_map *m);

/* Whether the file still is what was mapped: 0, or -EIO with a message
 * when its size or mtime differ (a change in place; remembered in
 * m->changed) or it cannot be stat'ed (storage failing: not remembered,
 * the source may come back). A mapped page past a file's new end reads as
 * zeros or faults, so bytes served or decoded from a mapping are trusted
 * only when a check after reading them passes. */
int sf_map_check(struct sf_map *m, struct sf_err *e);
/* Lets checks of `m` within `ns` of the last one that passed trust it: a
 * host reading many small pieces (the Python module) pays a fstat every
 * `ns` instead of one per read, and notices a change that much later. */
void sf_map_set_recheck(struct sf_map *m, uint64_t ns);
/* How many mappings have been found changed so far: while it stays the
 * same, no mapping needs its flag looked at again. */
uint64_t sf_map_changes(void);

#endif
