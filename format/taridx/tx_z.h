/* Compressed tars (docs/tree-layout.md §3.8): the decoded tar as a map
 * (struct sf_map with a read hook) that the plain tar's walker and member
 * checks read as they read a tar, through a seek index built by one pass
 * over the archive: points where a decoder can start (a gzip member, a
 * zstd or lz4 frame, an xz or bzip2 stream, and inside a gzip member a
 * deflate block boundary with its 32 KiB window every few MiB). The
 * stretches between them are cut into pieces of at most TX_Z_PIECE bytes,
 * each a part decoded through the view's cache. */
#ifndef TX_Z_H
#define TX_Z_H

#include <stddef.h>
#include <stdint.h>

#include "sf_err.h"
#include "sf_format.h"
#include "sf_map.h"
#include "sf_view.h"

#define TX_Z_PIECE (4u << 20)

enum tx_zcodec { TX_Z_NONE, TX_Z_GZIP, TX_Z_ZSTD, TX_Z_XZ, TX_Z_BZIP2, TX_Z_LZ4 };

/* The codec whose magic bytes p (n bytes) starts with, or TX_Z_NONE. */
enum tx_zcodec tx_z_sniff(const uint8_t *p, size_t n);
const char *tx_z_name(enum tx_zcodec c);
/* A map of the tar compressed in src (which it references), empty until
 * tx_z_index: -ENOMEM or 0. */
int tx_z_map(struct sf_map *src, enum tx_zcodec c, struct sf_map **out, struct sf_err *e);
/* Builds m's seek index by one pass over the archive, checking every
 * stream's integrity as it goes, and sets m->size to the decoded size;
 * its pieces become parts of view v, decoded through v's cache, to which
 * the index's memory is charged. 0 at once for a plain map; else 0, or a
 * negative errno with e naming the archive, the byte and what was wrong. */
int tx_z_index(struct sf_map *m, struct sf_view *v, struct sf_progress *pr, struct sf_err *e);
/* Appends [off, off + len) of tar m to file n: a span of its mapping, or
 * the decoded pieces holding it. -ENOMEM or 0. */
int tx_add_bytes(struct sf_node *n, const struct sf_map *m, uint64_t off, uint64_t len);
/* For info: the codec (TX_Z_NONE for a plain map), the archive's size,
 * its decoder start points, pieces, and the index's bytes. */
struct tx_zinfo {
	enum tx_zcodec codec;
	uint64_t compressed, starts, pieces, index_bytes;
};
void tx_z_info(const struct sf_map *m, struct tx_zinfo *out);

#endif
