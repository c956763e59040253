/* libFuzzer target for the tar header reader the taridx index builder and
 * view share (format/taridx/tx_header.c): the input is one tar, walked
 * entry by entry as shardfs-taridx walks it, every sparse map placed. The
 * walk must move forward and stay inside the tar, and every piece of a map
 * inside the member and the stored data. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "taridx/tx.h"

struct placed {
	uint64_t at, size;
	uint64_t lo, hi; /* the stored data's offsets */
};

static int check_piece(void *arg, uint64_t off, uint64_t len, uint64_t src)
{
	struct placed *p = arg;
	if (off < p->at || off > p->size || len > p->size - off || src < p->lo || p->hi - src < len)
		abort();
	p->at = off + len;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy of its own size, so that any read past it is caught */
	uint8_t *tar = malloc(size ? size : 1);
	if (!tar)
		return 0;
	memcpy(tar, data, size);
	struct tx_entry en;
	uint64_t at = 0;
	while (tx_entry_read(tar, size, at, &en) == 0 && !en.bad) {
		if (en.next <= at || en.next > size || en.data > size || en.stored > size - en.data)
			abort();
		if (en.sparse) {
			struct placed p = { 0, en.size, en.data, en.data + en.stored };
			const char *why;
			tx_sparse_each(tar, 0, &en, check_piece, &p, &why);
		}
		at = en.next;
	}
	free(tar);
	return 0;
}
