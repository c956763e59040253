#include "sl_codebook.h"

#include <errno.h>
#include <string.h>

#include "sf_bytes.h"

int sl_codebook_parse(const uint8_t *p, uint64_t size, const char *path,
		      struct sl_codebook *cb, struct sf_err *e)
{
	memset(cb, 0, sizeof *cb);
	if (size < SL_CODEBOOK_HEAD || memcmp(p, "SLKPQCB\0", 8) != 0)
		return sf_fail(e, -EINVAL, "%s: not a PQ codebook (bad magic or short)", path);
	struct sf_cursor c = sf_cursor(p + 8, 20);
	uint32_t version = sf_cur_u32(&c);
	cb->dims = sf_cur_u32(&c);
	cb->m = sf_cur_u32(&c);
	cb->k = sf_cur_u32(&c);
	cb->sub_dims = sf_cur_u32(&c);
	if (version != 1)
		return sf_fail(e, -EINVAL, "%s: unknown codebook version %u", path, version);
	if (cb->m == 0 || cb->k == 0 || cb->k > 256 || cb->sub_dims == 0 ||
	    (uint64_t)cb->m * cb->sub_dims != cb->dims)
		return sf_fail(e, -EINVAL, "%s: impossible codebook shape (dims=%u M=%u K=%u sub_dims=%u)",
			       path, cb->dims, cb->m, cb->k, cb->sub_dims);
	uint64_t len;
	if (!sf_mul_ok((uint64_t)cb->m * cb->k, (uint64_t)cb->sub_dims * 4, &len) ||
	    !sf_range_ok(size, SL_CODEBOOK_HEAD, len))
		return sf_fail(e, -EINVAL, "%s: truncated: the codebook needs %llu bytes after its header",
			       path, (unsigned long long)len);
	cb->len = len;
	return 0;
}
