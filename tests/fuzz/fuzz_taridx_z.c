/* libFuzzer target for compressed tars (format/taridx/tx_z.c): the seek
 * index's pass over hostile streams, and the plain tar walk over what
 * they decode to.
 *
 * Input: u8 how, u16 cut, then the body.
 *   how & 7   the codec (1 gzip, 2 zstd, 3 xz, 4 bzip2, 5 lz4; others gzip),
 *             which names the file (x.tar.gz ...)
 *   how & 8   the body is a tar, compressed here as two streams cut at
 *             `cut` (so the index has streams to start from and the walk
 *             hostile headers to read); else the body is the file itself
 * The view is opened, listed and every file read. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "zpack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "x.tar.gz", "x.tar.gz", "x.tar.zst", "x.tar.xz",
					     "x.tar.bz2", "x.tar.lz4", "x.tgz", "x.tbz" };
	if (size < 3)
		return 0;
	unsigned how = data[0];
	size_t cut = (size_t)(data[1] | data[2] << 8);
	data += 3;
	size -= 3;
	enum tx_zcodec c = (how & 7) >= TX_Z_GZIP && (how & 7) <= TX_Z_LZ4 ? (enum tx_zcodec)(how & 7) :
			   (how & 7) == 7 ? TX_Z_BZIP2 : TX_Z_GZIP;
	if (!(how & 8)) {
		fuzz_open_and_walk(data, size, names[how & 7], NULL);
		return 0;
	}
	if (cut > size)
		cut = size;
	uint8_t *a, *b;
	size_t na = zpack(c, data, cut, &a), nb = zpack(c, data + cut, size - cut, &b);
	uint8_t *all = malloc(na + nb + 1);
	if (!all)
		abort();
	memcpy(all, a, na);
	memcpy(all + na, b, nb);
	fuzz_open_and_walk(all, na + nb, names[how & 7], NULL);
	free(all);
	free(a);
	free(b);
	return 0;
}
