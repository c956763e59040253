/* libFuzzer target: any bytes as a .tsumugi shard. Opens the view and reads
 * every file in it, so the lazy decoders see the hostile input too. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_open_and_walk(data, size, "in.tsumugi", NULL);
	return 0;
}
