/* libFuzzer target for the Shardlake formats: the input is written as a
 * shard (beside a manifest and codebook made of the same bytes) and as an
 * alias, each opened and every file of its view read. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool laid_out;
	if (!laid_out) {
		fuzz_mkdirs("indexes/v/shards");
		fuzz_mkdirs("aliases");
		laid_out = true;
	}
	/* the first byte chooses which side files the shard sees */
	uint8_t mode = size ? data[0] : 0;
	fuzz_put("indexes/v/manifest.json", data, mode & 1 ? size : 0);
	fuzz_put("indexes/v/pq_codebook.bin", data, mode & 2 ? size : 0);
	fuzz_put("indexes/v/shards/shard-0000.sidx", data, size);
	fuzz_put("aliases/a.json", data, size);
	fuzz_open_walk("indexes/v/shards/shard-0000.sidx", NULL);
	fuzz_open_walk("aliases/a.json", NULL);
	return 0;
}
