/* A shard's view state, shared by the view, the gathered arrays and the
 * .shardfs files. */
#ifndef SL_SIDX_H
#define SL_SIDX_H

#include "sf_map.h"
#include "sf_view.h"
#include "sl_shard.h"

struct sl_sidx {
	struct sl_shard hdr;
	struct sf_map *map;      /* the shard (the view holds it too) */
	char *name;              /* its file name, to find its manifest entry */
	/* ../manifest.json and, for PQ shards, ../pq_codebook.bin, mapped at
	 * open (the directory is not reachable later); NULL when absent, with
	 * the reason in *_err. */
	struct sf_map *manifest, *codebook;
	struct sf_err manifest_err, codebook_err;
};

/* Part producers of the gathered views (sl_gather.c). A gather part's aux
 * says which field: SL_FIELD_ID or SL_FIELD_PAYLOAD (vector or codes). */
enum { SL_FIELD_ID, SL_FIELD_PAYLOAD };
int sl_produce_field(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int sl_produce_ids_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
struct sl_codebook;
/* Parses the index's codebook and checks that it fits this shard. */
int sl_codebook_for(const struct sl_sidx *s, struct sl_codebook *cb, struct sf_err *e);
int sl_produce_reconstructed(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

/* .shardfs/ files (sl_meta.c). */
int sl_produce_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int sl_produce_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int sl_produce_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

#endif
