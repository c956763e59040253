/* libFuzzer target: any bytes as a .tet file. The bytes are opened from an
 * in-memory map (no file system), and every file of the view is read, the
 * hidden .shardfs/ (info, verify, tiles) included, so the lazy decoders and
 * the whole-array assembly see the hostile input too. */
#include "fuzz_common.h"

extern const struct sf_format tet_format;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* in pieces, so reads that start inside an element are covered */
	static const struct fuzz_walk w = { .piece = 4093 };
	fuzz_open_map_and_walk(&tet_format, data, size, "fuzz.tet", &w);
	return 0;
}
