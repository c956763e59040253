/* libFuzzer target: any bytes as a .tatami file; open it, then list every
 * directory and read every file of the view. Nothing may crash or hang. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_open_and_walk(data, size, "in.tatami", NULL);
	return 0;
}
