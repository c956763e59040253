/* Gathering a byte range of a view file: iovecs into mappings and buffers,
 * and the references that keep them valid. */
#ifndef SF_READ_H
#define SF_READ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "sf_recent.h"

struct sf_buf;
struct sf_cache;
struct sf_err;
struct sf_map;
struct sf_node;
struct sf_stored;
struct sf_view;

/* A read's answer: iovecs pointing into mappings and buffers, plus the
 * references that keep them valid until sf_readv_release. */
struct sf_readv {
	struct iovec *iov;
	size_t n, cap;
	/* Per piece, the mapping it lies in when known (copies pread its
	 * file rather than ask the kernel to read this process's memory), or
	 * NULL; `src` itself may be NULL when no piece has one. */
	const struct sf_map **src;
	size_t capsrc;
	struct sf_buf **hold;
	size_t nhold, caphold;
	/* The view of the file read: its buffers and mappings back the
	 * pieces, whatever lets go of the view meanwhile (a FORGET, a view
	 * closed past --max-open). An answer gathers from one file. */
	struct sf_view *view;
	/* What the locate of this read copied along (sf_stored.pre): pieces
	 * it holds are copied from it rather than read again. */
	struct sf_recent pre;
	uint64_t bytes;
	uint64_t from_map, from_cache, from_synth; /* byte accounting */
};

/* Collects [off, off+len) of a ready file (len clipped to the size). */
int sf_file_read(struct sf_node *f, uint64_t off, uint64_t len,
		 struct sf_cache *c, struct sf_readv *rv, struct sf_err *e);
/* The same read, of bytes memory holds already only: -EAGAIN where it
 * would need more (the file not built, a mapping, a part the cache does not
 * hold, a rendering per read, a view that must check its mappings first),
 * so that a host may answer it as a request that reads no source. */
int sf_file_read_held(struct sf_node *f, uint64_t off, uint64_t len,
		      struct sf_cache *c, struct sf_readv *rv, struct sf_err *e);
/* Collects [off, off+len) of a file whose bytes sf_view_locate found in
 * view v (len clipped to the size), checked as sf_file_read checks. */
int sf_stored_read(struct sf_view *v, const struct sf_stored *s, uint64_t off, uint64_t len,
		   struct sf_readv *rv, struct sf_err *e);
void sf_readv_release(struct sf_readv *rv);
/* Makes the answer at most `max` pieces (max >= 2), whatever it was
 * gathered from: runs of short pieces are copied into one buffer the answer
 * holds, long ones stay where they are. 0, or -ENOMEM, or -EIO when a
 * mapped page could not be read (the answer is then only fit for release). */
int sf_readv_fit(struct sf_readv *rv, size_t max);
/* Copies the collected bytes into dst (rv->bytes long): pieces the lookup
 * copied along from that copy; through the kernel the others, of a known
 * mapping by pread on its file, the rest by process_vm_readv. A source page that cannot be read is -EIO, never a
 * signal. */
int sf_readv_copy(const struct sf_readv *rv, void *dst, struct sf_err *e);

#endif
