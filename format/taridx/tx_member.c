/* What an index row points at: checking a row against its tar (spec §6.2,
 * §6.3) and the member's full path (docs/design.md §3.7). */
#include <errno.h>
#include <string.h>

#include "sf_bytes.h"
#include "tx.h"

const uint8_t *tx_payload(const struct tx_fold *f, const struct tx_row *row)
{
	if (row->fid >= f->nshards || !f->shards[row->fid].map)
		return NULL;
	const struct sf_map *m = f->shards[row->fid].map;
	uint64_t start;
	if (!sf_add_ok(row->off, TX_BLOCK, &start) || !sf_range_ok(m->size, start, row->size))
		return NULL;
	return m->data + start;
}

static enum tx_kind kind_of(uint8_t typeflag)
{
	switch (typeflag) {
	case '0':
	case '\0':
	case '7':
		return TX_FILE;
	case '1':
		return TX_HARDLINK;
	case '2':
		return TX_SYMLINK;
	default:
		return TX_OTHER;
	}
}

void tx_member_check(const struct tx_fold *f, uint64_t r, struct tx_member *m)
{
	memset(m, 0, sizeof *m);
	tx_row_get(&f->ix, r, &m->row);
	m->kind = TX_OTHER;
	const struct tx_row *row = &m->row;
	if (row->fid >= f->nshards) {
		m->bad = "fid names no shard beside the index";
		return;
	}
	const struct sf_map *map = f->shards[row->fid].map;
	if (!map) {
		m->bad = "its shard could not be opened";
		return;
	}
	if (!sf_range_ok(map->size, row->off, TX_BLOCK)) {
		m->bad = "tar header lies past the end of the shard";
		return;
	}
	m->hdr = map->data + row->off;
	m->kind = kind_of(m->hdr[156]);
	if (row->extid >= f->ix.n_ext) {
		m->bad = "extension id out of range";
		return;
	}
	struct tx_key k;
	tx_key_from(m->hdr, tx_field_len(m->hdr, 100), &k);
	const struct tx_str *ext = &f->ix.ext[row->extid];
	if (k.hash != row->keyhash)
		m->bad = "the tar header's stem does not hash to the row's key";
	else if (k.ext_len != ext->len || memcmp(k.ext, ext->p, ext->len) != 0)
		m->bad = "the tar header's extension differs from the row's";
	else if (tx_crash_id(&f->ix, k.stem, k.stem_len, k.hash) != row->crashid)
		m->bad = "the row's crash id does not match the header's stem";
	/* checked after the key, so that a row pointing at the wrong tar is
	 * reported as such; the row's size is the payload's extent (spec §3.4) */
	else if (!tx_payload(f, row))
		m->bad = "its payload runs past the end of the tar";
}

static uint64_t padded(uint64_t size)
{
	return size > UINT64_MAX - (TX_BLOCK - 1) ? UINT64_MAX : (size + TX_BLOCK - 1) / TX_BLOCK * TX_BLOCK;
}

/* Text up to its first NUL. */
static struct tx_str cut_nul(const uint8_t *p, size_t len)
{
	return (struct tx_str){ p, tx_field_len(p, len) };
}

int tx_path_append(uint8_t *out, size_t cap, size_t *len, const uint8_t *raw, size_t n)
{
	size_t i = 0;
	while (i < n) {
		const uint8_t *slash = memchr(raw + i, '/', n - i);
		size_t end = slash ? (size_t)(slash - raw) : n, clen = end - i;
		if (clen && !(clen == 1 && raw[i] == '.')) {
			if (*len + (*len ? 1 : 0) + clen > cap)
				return -ENAMETOOLONG;
			if (*len)
				out[(*len)++] = '/';
			memcpy(out + *len, raw + i, clen);
			*len += clen;
		}
		i = end + 1;
	}
	return 0;
}

int tx_member_names(const struct tx_fold *f, uint32_t r, const struct tx_member *m,
		    uint8_t *path, size_t cap, size_t *plen, struct tx_str *link)
{
	struct tx_str pax_path = { 0 }, pax_link = { 0 }, long_name = { 0 }, long_link = { 0 };
	bool has_pax_path = false, has_pax_link = false;
	/* the records describing this member sit right before its header and
	 * upstream indexed each of them as a row of its own */
	uint64_t at = m->row.off;
	for (uint32_t q = r; q > 0 && r - q < 8; q--) {
		struct tx_row prev;
		tx_row_get(&f->ix, q - 1, &prev);
		const uint8_t *data = tx_payload(f, &prev);
		if (!data || prev.fid != m->row.fid || prev.off + TX_BLOCK + padded(prev.size) != at)
			break;
		/* only the record type matters here, not whether its key matches */
		uint8_t t = data[156 - TX_BLOCK];
		size_t n = (size_t)prev.size;
		if (t == 'L' && !long_name.p)
			long_name = cut_nul(data, n);
		else if (t == 'K' && !long_link.p)
			long_link = cut_nul(data, n);
		else if (t == 'x') {
			if (!has_pax_path)
				has_pax_path = tx_pax_get(data, n, "path", &pax_path);
			if (!has_pax_link)
				has_pax_link = tx_pax_get(data, n, "linkpath", &pax_link);
		} else if (t != 'g')
			break;
		at = prev.off;
	}
	*plen = 0;
	int rc;
	if (has_pax_path) {
		rc = tx_path_append(path, cap, plen, pax_path.p, pax_path.len);
	} else if (long_name.p) {
		rc = tx_path_append(path, cap, plen, long_name.p, long_name.len);
	} else {
		struct tx_str name = cut_nul(m->hdr, 100);
		rc = 0;
		/* only POSIX ustar headers have a prefix; GNU keeps times there */
		if (memcmp(m->hdr + 257, "ustar\0", 6) == 0) {
			struct tx_str prefix = cut_nul(m->hdr + 345, 155);
			rc = tx_path_append(path, cap, plen, prefix.p, prefix.len);
		}
		if (!rc)
			rc = tx_path_append(path, cap, plen, name.p, name.len);
	}
	*link = has_pax_link ? pax_link : long_link.p ? long_link : cut_nul(m->hdr + 157, 100);
	return rc ? rc : *plen ? 0 : -ENOENT;
}
