/* Regions: their stored bytes, the CRC checked on first access (spec A10),
 * and their decoding (zstd and shared-dictionary zstd decoded once into the
 * cache; codec 0 served from the mapping, and copied into the cache for the
 * parsers). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sf_codec.h"
#include "sf_crc32c.h"
#include "sf_map.h"
#include "tsm.h"
#include "sf_view_impl.h"

struct tsm_region *tsm_first(struct tsm_shard *s, uint8_t kind)
{
	for (size_t i = 0; i < s->nregions; i++)
		if (s->regions[i].kind == kind)
			return s->regions[i].bad ? NULL : &s->regions[i];
	return NULL;
}

const struct tsm_dict *tsm_dict_find(const struct tsm_shard *s, uint32_t id)
{
	for (size_t i = 0; i < s->ndicts; i++)
		if (s->dicts[i].id == id)
			return &s->dicts[i];
	return NULL;
}

/* The CRC of the region's stored bytes, found once: from `copy` when the
 * caller has them, else read a window at a time. */
static int region_crc(struct tsm_shard *s, struct tsm_region *r, const uint8_t *copy,
		      struct sf_err *e)
{
	if (r->bad)
		return sf_fail(e, -EIO, "%s: regions/%s: %s", s->view->path, r->name, r->bad);
	int st = atomic_load(&r->checked);
	if (st == 0 && copy) {
		st = sf_crc32c(0, copy, r->length) == r->crc ? 1 : -1;
	} else if (st == 0) {
		struct sf_win w = { .m = s->map };
		uint32_t crc = 0;
		uint64_t end = r->offset + r->length;
		int rc = 0;
		for (uint64_t at = r->offset, k; at < end && !rc; at += k) {
			const uint8_t *b;
			k = end - at < 65536 ? end - at : 65536;
			if (!(rc = sf_win_get(&w, at, (size_t)k, end, &b, r->name, e)))
				crc = sf_crc32c(crc, b, (size_t)k);
		}
		sf_win_free(&w);
		if (rc)
			return rc;
		st = crc == r->crc ? 1 : -1;
	}
	/* Racing threads compute the same answer; storing it twice is fine. */
	atomic_store(&r->checked, st);
	if (st < 0)
		return sf_fail(e, -EIO, "%s: regions/%s: region CRC mismatch", s->view->path, r->name);
	return 0;
}

int tsm_region_stored(struct tsm_shard *s, struct tsm_region *r, const uint8_t **p,
		      struct sf_err *e)
{
	int rc = region_crc(s, r, NULL, e);
	if (rc == 0)
		*p = s->map->data + r->offset;
	return rc;
}

int tsm_region_copy(struct tsm_shard *s, struct tsm_region *r, struct sf_buf **out,
		    struct sf_err *e)
{
	*out = NULL;
	if (r->bad)
		return region_crc(s, r, NULL, e);
	struct sf_buf *b = sf_buf_new(r->length);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: regions/%s: out of memory", s->view->path, r->name);
	int rc = sf_map_read(s->map, r->offset, r->length, b->data, r->name, e);
	if (!rc)
		rc = region_crc(s, r, b->data, e);
	if (rc) {
		sf_buf_unref(b);
		return rc;
	}
	*out = b;
	return 0;
}

/* Decodes the region's stored bytes `src` (a copy) into a new buffer. */
static int decode_from(struct tsm_shard *s, struct tsm_region *r, const uint8_t *src,
		       struct sf_buf **out, struct sf_err *e)
{
	int rc;
	const void *dict = NULL;
	size_t dictlen = 0;
	if (r->codec == TSM_ZSTD_DICT) {
		if (!s->has_dict_region)
			return sf_fail(e, -EIO, "%s: regions/%s: a dictionary-compressed region in a "
				       "shard without a dictionary region", s->view->path, r->name);
		/* Upstream picks the dictionary by the frame's id, not the
		 * descriptor's; id 0 (the empty frame) means none. */
		uint32_t id = 0;
		if (r->length && sf_zstd_frame_dict_id(src, r->length, &id))
			return sf_fail(e, -EIO, "%s: regions/%s: not a zstd frame", s->view->path,
				       r->name);
		if (id) {
			const struct tsm_dict *d = tsm_dict_find(s, id);
			if (!d)
				return sf_fail(e, -EIO, "%s: regions/%s: frame names dictionary %u, "
					       "which the shard does not have", s->view->path, r->name, id);
			dict = d->p;
			dictlen = d->len;
		}
	}
	struct sf_buf *b = sf_buf_new(r->raw_length);
	if (!b)
		return sf_fail(e, -ENOMEM, "%s: regions/%s: out of memory", s->view->path, r->name);
	char what[600];
	snprintf(what, sizeof what, "%s: regions/%s", s->view->path, r->name);
	rc = sf_zstd_decode(src, r->length, b->data, r->raw_length, dict, dictlen, what, e);
	if (rc) {
		sf_buf_unref(b);
		return rc == -ENOMEM ? rc : -EIO;
	}
	*out = b;
	return 0;
}

int tsm_region_decode(struct tsm_shard *s, struct tsm_region *r, struct sf_buf **out,
		      struct sf_err *e)
{
	struct sf_buf *stored;
	int rc = tsm_region_copy(s, r, &stored, e);
	if (rc || r->codec == TSM_NONE) {
		*out = stored;
		return rc;
	}
	rc = decode_from(s, r, stored->data, out, e);
	sf_buf_unref(stored);
	return rc;
}

static int produce_region(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	return tsm_region_decode(p->arg, p->arg2, out, e);
}

int tsm_region_bytes(struct tsm_shard *s, struct tsm_region *r, struct sf_cache *c,
		     const uint8_t **p, struct sf_buf **hold, struct sf_err *e)
{
	*hold = NULL;
	if (!r->decoded)
		return sf_fail(e, -EIO, "%s: regions/%s: %s", s->view->path, r->name,
			       r->bad ? r->bad : "cannot be read");
	int rc = sf_part_get(c, r->decoded, hold, e);
	if (rc == 0)
		*p = (*hold)->data;
	return rc;
}

int tsm_file_from_part(struct sf_node *f, struct sf_part *p, struct sf_cache *c,
		       struct sf_err *e)
{
	uint64_t size = atomic_load(&p->size);
	if (size == SF_SIZE_UNKNOWN) {
		struct sf_buf *b = NULL;
		int rc = sf_part_get(c, p, &b, e);
		if (rc == -EIO)
			return sf_file_set_broken(f, 0, e->msg);
		if (rc)
			return rc;
		size = b->len;
		sf_buf_unref(b);
	}
	return sf_file_add_part(f, p, 0, size);
}

/* regions/<name> of a codec-0 region and regions/<name>.zst: the stored
 * bytes straight from the mapping, once their CRC holds. */
static int build_stored(struct sf_node *f, struct sf_cache *c, struct sf_err *e)
{
	struct tsm_shard *s = f->arg;
	struct tsm_region *r = &s->regions[f->aux];
	const uint8_t *p;
	int rc = tsm_region_stored(s, r, &p, e);
	if (rc)
		return sf_file_set_broken(f, r->bad ? 0 : r->length, e->msg);
	return sf_file_add_map(f, p, r->length);
}

static int add_region_files(struct tsm_shard *s, struct sf_node *dir, size_t i)
{
	struct tsm_region *r = &s->regions[i];
	struct sf_node *f = sf_dir_add_file(dir, r->name, strlen(r->name));
	if (!f)
		return -ENOMEM;
	f->aux = i;
	/* The stored bytes of a zstd region, listed even when its descriptor
	 * fails a check: then, like the decoded file, it fails with EIO. */
	if (r->codec == TSM_ZSTD || r->codec == TSM_ZSTD_DICT) {
		char zname[40];
		snprintf(zname, sizeof zname, "%s.zst", r->name);
		struct sf_node *z = sf_dir_add_file(dir, zname, strlen(zname));
		if (!z)
			return -ENOMEM;
		z->aux = i;
		sf_file_set_build(z, build_stored, s);
	}
	if (r->bad) {
		char why[600];
		snprintf(why, sizeof why, "%s: regions/%s: %s", s->view->path, r->name, r->bad);
		return sf_file_set_broken(f, r->codec == TSM_NONE ? r->length : 0, why);
	}
	char what[48];
	snprintf(what, sizeof what, "regions/%s", r->name);
	char *owned = tsm_own(s, strdup(what));
	r->decoded = owned ? sf_view_part(s->view, produce_region, s, r->raw_length, owned) : NULL;
	if (!r->decoded)
		return -ENOMEM;
	r->decoded->arg2 = r;
	/* codec 0: the file is the mapped bytes, for the kernel; the part is
	 * the copy the parsers read (tsm_region_bytes) */
	if (r->codec == TSM_NONE) {
		sf_file_set_build(f, build_stored, s);
		return 0;
	}
	return sf_file_add_part(f, r->decoded, 0, r->raw_length);
}

int tsm_add_regions(struct tsm_shard *s, struct sf_node *root)
{
	struct sf_node *dir = sf_dir_add_dir(root, "regions", 7);
	if (!dir)
		return -ENOMEM;
	for (size_t i = 0; i < s->nregions; i++) {
		int rc = add_region_files(s, dir, i);
		if (rc)
			return rc;
	}
	return 0;
}
