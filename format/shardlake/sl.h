/* A shard's view state, shared by the view, the gathered arrays and the
 * .shardfs files. */
#ifndef SL_H
#define SL_H

#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "sf_format.h"
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
	_Atomic bool codes_fit;  /* every PQ code is below K (found once) */
};

/* Generators of the gathered views (sl_gather.c): ids, the vectors or codes
 * (the record minus its id), and the PQ reconstruction; `arg` is the
 * struct sl_sidx. */
int sl_gen_ids(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c, struct sf_err *e);
int sl_gen_payload(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c, struct sf_err *e);
int sl_gen_reconstructed(void *arg, uint64_t off, uint8_t *out, size_t len, struct sf_cache *c, struct sf_err *e);
int sl_ids_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
struct sl_codebook;
/* Parses the index's codebook and checks that it fits this shard. */
int sl_codebook_for(const struct sl_sidx *s, struct sl_codebook *cb, struct sf_err *e);
/* sl_codebook_for, then a copy of the centroids charged to `c`
 * (sl_centroids_free after). */
int sl_centroids_load(const struct sl_sidx *s, struct sf_cache *c, struct sl_codebook *cb,
		      struct sf_err *e);
void sl_centroids_free(struct sl_codebook *cb, struct sf_cache *c);
/* Counts the PQ codes not below `limit` in *bad; the first one is *code,
 * in record *rec, sub-space *sub (left alone when there is none). 0, or
 * an error reading the records. */
int sl_bad_codes(const struct sl_sidx *s, uint32_t limit, uint64_t *bad, uint64_t *rec,
		 uint32_t *sub, uint8_t *code, struct sf_err *e);
/* Where the records end in the file. */
static inline uint64_t sl_records_end(const struct sl_shard *h)
{
	return h->records_off + h->records_len;
}

/* The descriptors (sl_format.c). */
extern const struct sf_format sl_sidx_format;
extern const struct sf_format sl_alias_format;

/* .shardfs/ files (sl_info.c, sl_verify.c). */
int sl_info_txt(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int sl_info_json(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);
int sl_verify(const struct sf_part *p, struct sf_cache *cache, struct sf_buf **out, struct sf_err *e);

/* The shard's manifest and its entry there, loaded per use (these files are
 * read rarely, and a parsed manifest is not worth keeping per shard). A
 * parse takes many times the file's size: it is charged to the cache's
 * budget first, for as long as it is held. */
struct sl_mf {
	json_t *root;  /* NULL when absent or unparseable */
	json_t *entry; /* NULL when the manifest has none for this shard */
	bool absent;   /* no manifest file at all */
	char err[sizeof(struct sf_err)];
	struct sf_cache *cache;
	uint64_t charged;
};
/* Loads it: 0 (a manifest that is absent or not one is said in m->err),
 * or -EIO when its parse does not fit in the budget. sl_mf_free after. */
int sl_mf_load(const struct sl_sidx *s, struct sf_cache *cache, struct sl_mf *m,
	       struct sf_err *e);
void sl_mf_free(struct sl_mf *m);
/* The index's codec ("none" when the manifest names none). */
const char *sl_mf_codec(const struct sl_mf *m);

#endif
