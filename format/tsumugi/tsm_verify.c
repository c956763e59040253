/* .shardfs/verify of a tsumugi view: every CRC and bound, every region
 * decoded, every forward value decoded. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sf_bytes.h"
#include "sf_codec.h"
#include "sf_crc32c.h"
#include "sf_report.h"
#include "tsm.h"
#include "sf_view_impl.h"

/* Inner headers whose CRC covers a fixed prefix (spec A10). */
static void verify_inner_crc(const struct tsm_region *r, const uint8_t *p, struct sf_report *o,
			     const char *path)
{
	static const struct {
		char magic[5];
		size_t len;
	} fixed[] = { { "LEX1", 208 }, { "IMP1", 52 }, { "GRA1", 77 }, { "VEC1", 88 } };
	if (r->raw_length < 4)
		return;
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		if (memcmp(p, fixed[i].magic, 4) != 0)
			continue;
		if (r->raw_length < fixed[i].len + 4 ||
		    sf_crc32c(0, p, fixed[i].len) != sf_le32(p + fixed[i].len))
			sf_report_add(o, true, "%s: regions/%s: %s header CRC mismatch", path, r->name,
				      fixed[i].magic);
	}
}

static void verify_region(struct tsm_shard *s, struct tsm_region *r, struct sf_report *o)
{
	const char *path = s->view->path;
	struct sf_err e = { { 0 } };
	if (r->bad) {
		sf_report_add(o, true, "%s: regions/%s: %s", path, r->name, r->bad);
		return;
	}
	struct sf_buf *b = NULL;
	int rc = tsm_region_decode(s, r, &b, &e);
	if (rc) {
		sf_report_add(o, true, "%s", e.msg);
		return;
	}
	verify_inner_crc(r, b->data, o, path);
	if (r->codec == TSM_ZSTD_DICT && r->length >= 5) {
		uint32_t id = 0;
		uint8_t head[32];
		size_t n = r->length < sizeof head ? (size_t)r->length : sizeof head;
		if (sf_map_read(s->map, r->offset, n, head, r->name, &e) == 0 &&
		    sf_zstd_frame_dict_id(head, n, &id) == 0 && id != r->dict_id &&
		    (id || r->raw_length))
			sf_report_add(o, false, "%s: regions/%s: descriptor names dictionary %u, the "
				      "frame %u (the frame's is used)", path, r->name, r->dict_id, id);
	}
	sf_buf_unref(b);
}

/* Overlapping pairs listed at most; the rest are counted. */
#define OVERLAPS_LISTED 10

static int by_offset(const void *a, const void *b)
{
	const struct tsm_region *x = *(const struct tsm_region *const *)a;
	const struct tsm_region *y = *(const struct tsm_region *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Regions whose stored bytes overlap, found by sorting on offset and
 * sweeping: n log n. The first pairs are listed (a region is compared with
 * the earlier ones only while lines are left, and each comparison it makes
 * lists one), then the regions overlapping an earlier one, known from the
 * furthest end seen so far, are only counted: regions that all overlap
 * make a dozen lines, not one per pair. */
static int report_overlaps(struct tsm_shard *s, struct sf_report *rep)
{
	struct tsm_region **v = malloc((s->nregions ? s->nregions : 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < s->nregions; i++)
		if (!s->regions[i].bad && s->regions[i].length)
			v[n++] = &s->regions[i];
	qsort(v, n, sizeof *v, by_offset);
	uint64_t listed = 0, more = 0, reach = 0;
	for (size_t i = 0; i < n; i++) {
		const struct tsm_region *r = v[i];
		/* bounds were checked: offset + length does not wrap */
		/* overlaps at least one earlier region? */
		if (i && r->offset < reach && listed >= OVERLAPS_LISTED)
			more++;
		else if (i && r->offset < reach)
			for (size_t j = i; j-- > 0 && listed < OVERLAPS_LISTED;)
				if (v[j]->offset + v[j]->length > r->offset) {
					sf_report_add(rep, false, "%s: regions/%s overlaps regions/%s",
						      s->view->path, r->name, v[j]->name);
					listed++;
				}
		if (r->offset + r->length > reach)
			reach = r->offset + r->length;
	}
	if (more)
		sf_report_add(rep, false, "%s: %" PRIu64 " more regions overlap earlier ones (not listed)", s->view->path,
			      more);
	free(v);
	return 0;
}

int tsm_verify(const struct sf_part *part, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e)
{
	struct tsm_shard *s = part->arg;
	const char *path = s->view->path;
	struct sf_report rep = { 0 };
	int rc = 0;
	if (s->h.region_count != s->nregions)
		sf_report_add(&rep, false, "%s: header counts %u regions, the footer lists %zu",
			      path, s->h.region_count, s->nregions);
	for (size_t i = 0; i < s->nregions; i++) {
		struct tsm_region *r = &s->regions[i];
		verify_region(s, r, &rep);
		if (!r->first_of_kind)
			sf_report_add(&rep, false, "%s: regions/%s: a later region of the same kind, "
				      "which upstream readers never reach", path, r->name);
	}
	if (report_overlaps(s, &rep))
		rc = -ENOMEM;
	if (!rc && tsm_first(s, TSM_FORWARD))
		rc = tsm_forward_verify(s, &rep);
	if (!rc && tsm_first(s, TSM_FEATURE))
		rc = tsm_feature_verify(s, &rep);
	if (rc) {
		sf_str_free(&rep.body);
		return sf_fail(e, -ENOMEM, "%s: out of memory", path);
	}
	*out = sf_report_take(&rep);
	return *out ? 0 : sf_fail(e, -ENOMEM, "%s: out of memory", path);
}
