/* libFuzzer target for taridx: the input is split into an index and one
 * tar shard (the first two bytes say where), written as f.taridx and
 * f_0000.tar in a private directory; the fold is opened, looked up by flat
 * names (the index path), listed, and every file of the view is read. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "a.jpg", "x.txt", "..", "%2F.jpg", ".shardfs#1",
					     ".shardfs" };
	static const struct fuzz_walk w = { .lookups = names,
					    .nlookups = sizeof names / sizeof names[0] };
	if (size < 2)
		return 0;
	size_t cut = (size_t)(data[0] | data[1] << 8);
	data += 2;
	size -= 2;
	if (cut > size)
		cut = size;
	fuzz_put("f_0000.tar", data + cut, size - cut);
	fuzz_open_and_walk(data, cut, "f.taridx", &w);
	return 0;
}
