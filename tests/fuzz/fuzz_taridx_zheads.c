/* libFuzzer target for a compressed tar's header blocks as --index-dir
 * keeps them (format/taridx/tx_zheads.c, read back by tx_zkeep.c): a
 * buffer that passes tx_zheads_ok is searched at each of its stretches
 * and between them, and whatever is found lies inside its decoded chunk.
 *
 * Input: u64 LE the tar's decoded size, then the buffer. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "sf_buf.h"
#include "sf_bytes.h"
#include "taridx/tx_z.h"

static void probe(const struct sf_buf *b, uint64_t at, uint64_t need)
{
	uint64_t ci, pos, end;
	if (!tx_zheads_find(b, at, need, &ci, &pos, &end))
		return;
	struct sf_buf *c = tx_zheads_chunk(b, ci);
	if (c && (end < at + need || pos > c->len || end - at > c->len - pos))
		abort();
	if (c && end > at)
		(void)*(volatile const uint8_t *)(c->data + pos + (end - at) - 1);
	sf_buf_unref(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 8)
		return 0;
	uint64_t tarsize = sf_le64(data);
	struct sf_buf *b = sf_buf_new(size - 8);
	if (!b)
		abort();
	memcpy(b->data, data + 8, size - 8);
	if (tx_zheads_ok(b, tarsize)) {
		uint64_t nr = sf_le64(b->data);
		for (uint64_t i = 0; i < nr && i < 4096; i++) {
			const uint8_t *r = b->data + 16 + 16 * i;
			uint64_t off = sf_le64(r), len = sf_le32(r + 8);
			probe(b, off, len);
			probe(b, off + len / 2, len - len / 2);
			probe(b, off + len, 1);
			probe(b, off ? off - 1 : 0, 2);
		}
	}
	sf_buf_unref(b);
	return 0;
}
