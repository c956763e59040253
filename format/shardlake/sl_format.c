/* Shardlake's two descriptors (docs/design.md §3.8): the view beside each
 * .sidx shard (the centroid and record areas zero-copy, ids/vectors/codes
 * gathered and PQ codes reconstructed per read), and aliases/<alias>.json
 * (spec shardlake §4.2) shown as a symlink aliases/<alias> ->
 * ../indexes/<index_version>. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sf_bytes.h"
#include "sf_json.h"
#include "sl_codebook.h"
#include "sl_manifest.h"
#include "sl.h"
#include "sf_view_impl.h"

/* Maps a file of the index directory (above the shard's), recording why
 * when it cannot: beneath the top only, so a shard lying directly in SRC
 * reads no ../manifest.json. One that is there but refused (a symlink, a
 * FIFO) is reported too. */
static struct sf_map *map_beside(struct sf_view *v, const struct sf_open_args *a,
				 const char *rel, struct sf_err *why)
{
	struct sf_map *m = NULL;
	int rc = sf_map_beside(a, rel, &m, why);
	if (rc == -ELOOP || rc == -EINVAL || rc == -EISDIR)
		sf_view_warn(v, "%s", why->msg);
	return rc == 0 ? m : NULL;
}

static void sidx_free(void *state)
{
	struct sl_sidx *s = state;
	if (!s)
		return;
	free(s->name);
	free(s);
}

/* Appends a .npy header to `f`; the caller appends exactly the data. */
static int add_npy_header(struct sf_node *f, const char *descr, const uint64_t *shape, int ndim)
{
	struct sf_str s = { 0 };
	int rc = sf_npy_header(&s, descr, shape, (size_t)ndim);
	if (!rc)
		rc = sf_file_add_str(f, &s);
	sf_str_free(&s);
	return rc;
}

/* Adds `name`: a .npy header, then `len` bytes of the mapping at `off`. */
static int add_mapped_npy(struct sf_node *dir, const char *name, const char *descr,
			  const uint64_t *shape, int ndim, uint64_t off, uint64_t len)
{
	const struct sl_sidx *s = dir->arg;
	struct sf_node *f = sf_dir_add_file(dir, name, strlen(name));
	if (!f)
		return -ENOMEM;
	int rc = add_npy_header(f, descr, shape, ndim);
	return rc ? rc : sf_file_add_map(f, s->map->data + off, len);
}

/* Adds `name`: a .npy header, then `len` bytes that `fn` generates per read
 * from the shard (sl_gather.c). */
static int add_gen_npy(struct sf_node *dir, const char *name, const char *descr,
		       const uint64_t *shape, int ndim, sf_gen_fn fn, uint64_t len)
{
	struct sf_node *f = sf_dir_add_file(dir, name, strlen(name));
	if (!f)
		return -ENOMEM;
	int rc = add_npy_header(f, descr, shape, ndim);
	return rc ? rc : sf_file_add_gen(f, fn, dir->arg, 0, len);
}

/* reconstructed.npy, when the index directory holds a codebook: listed
 * with its exact size even when the codebook does not fit the shard, so
 * that the failure shows as EIO on read. */
static int add_reconstructed(struct sf_node *dir)
{
	struct sl_sidx *s = dir->arg;
	const struct sl_shard *h = &s->hdr;
	uint64_t shape[2] = { h->nrecords, h->dims }, len;
	struct sl_codebook cb;
	struct sf_err e = { { 0 } };
	bool fits = sf_mul_ok(h->nrecords, (uint64_t)h->dims * 4, &len);
	int rc = fits ? sl_codebook_for(s, &cb, &e)
			 : sf_fail(&e, -EIO, "%s: reconstructed.npy: %llu x %u floats overflow 64 bits",
				   dir->view->path, (unsigned long long)h->nrecords, h->dims);
	if (rc == 0)
		return add_gen_npy(dir, "reconstructed.npy", "<f4", shape, 2, sl_gen_reconstructed, len);
	struct sf_node *f = sf_dir_add_file(dir, "reconstructed.npy", strlen("reconstructed.npy"));
	if (!f || add_npy_header(f, "<f4", shape, 2))
		return -ENOMEM;
	uint64_t size;
	return sf_file_set_broken(f, fits && sf_add_ok(f->u.file.size, len, &size) ? size : 0, e.msg);
}

static int sidx_populate(struct sf_node *dir, struct sf_err *e)
{
	struct sl_sidx *s = dir->arg;
	const struct sl_shard *h = &s->hdr;
	char rec_descr[128];
	uint64_t cshape[2] = { h->ncentroids, h->dims }, n[1] = { h->nrecords };
	uint64_t payload = h->record_size - 8;
	if (h->version == 1)
		snprintf(rec_descr, sizeof rec_descr, "[('id', '<u8'), ('vector', '<f4', (%u,))]", h->dims);
	else
		snprintf(rec_descr, sizeof rec_descr, "[('id', '<u8'), ('codes', '|u1', (%u,))]", h->pq_m);
	int rc = add_mapped_npy(dir, "centroids.npy", "<f4", cshape, 2, h->centroids_off,
				h->centroids_len);
	if (!rc)
		rc = add_mapped_npy(dir, "records.npy", rec_descr, n, 1, h->records_off, h->records_len);
	if (!rc)
		rc = add_gen_npy(dir, "ids.npy", "<u8", n, 1, sl_gen_ids, h->nrecords * 8);
	if (!rc) {
		struct sf_part *p = sf_view_part(dir->view, sl_ids_txt, s, SF_SIZE_UNKNOWN, "ids.txt");
		struct sf_node *f = p ? sf_dir_add_file(dir, "ids.txt", strlen("ids.txt")) : NULL;
		if (f)
			sf_file_set_whole(f, p);
		else
			rc = -ENOMEM;
	}
	uint64_t pshape[2] = { h->nrecords, h->version == 1 ? h->dims : h->pq_m };
	const char *pname = h->version == 1 ? "vectors.npy" : "codes.npy";
	if (!rc)
		rc = add_gen_npy(dir, pname, h->version == 1 ? "<f4" : "|u1", pshape, 2,
				 sl_gen_payload, h->nrecords * payload);
	if (!rc && h->version == 2 && s->codebook)
		rc = add_reconstructed(dir);
	if (rc)
		return sf_fail(e, rc, "%s: cannot build the view: %s", dir->view->path, strerror(-rc));
	return 0;
}

static int sidx_parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		      struct sf_err *e)
{
	struct sl_shard h;
	uint8_t head[SL_SIDX_HEAD] = { 0 };
	size_t n = a->map->size < sizeof head ? a->map->size : sizeof head;
	int rc = sf_map_read(a->map, 0, n, head, "header", e);
	if (!rc)
		rc = sl_shard_parse(head, a->map->size, a->path, &h, e);
	if (rc)
		return rc;
	struct sl_sidx *s = calloc(1, sizeof *s);
	if (!(*state = s))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	s->hdr = h;
	s->map = a->map;
	s->name = strdup(a->name);
	s->manifest = map_beside(v, a, "../manifest.json", &s->manifest_err);
	if (h.version == 2)
		s->codebook = map_beside(v, a, "../pq_codebook.bin", &s->codebook_err);
	/* the view holds every mapping; the state only borrows them */
	if (s->manifest)
		rc = sf_view_hold_map(v, s->manifest);
	if (!rc && s->codebook)
		rc = sf_view_hold_map(v, s->codebook);
	sf_map_unref(s->manifest);
	sf_map_unref(s->codebook);
	if (rc || !s->name)
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	struct sf_err me;
	if (s->manifest && sl_manifest_check(s->manifest, &me))
		sf_view_warn(v, "%s", me.msg);
	if (h.trailing)
		sf_view_warn(v, "%s: %llu trailing bytes after the records (upstream ignores them)",
			     a->path, (unsigned long long)h.trailing);
	return 0;
}

static int sidx_build(struct sf_view *v, void *state, struct sf_node *meta, struct sf_err *e)
{
	sf_dir_set_populate(v->root, sidx_populate, state);
	return 0;
}

/* The header and the sizes it implies (sl_shard_parse reads no further). */
static int sidx_check(const struct sf_probe *p, struct sf_err *e)
{
	struct sl_shard h;
	return sl_shard_parse(p->head, p->size, p->path, &h, e);
}

const struct sf_format sl_sidx_format = {
	.name = "sidx",
	.ext = ".sidx",
	.maps_beside = true, /* ../manifest.json, ../pq_codebook.bin */
	.check = sidx_check,
	.parse = sidx_parse,
	.free_state = sidx_free,
	.info_txt = sl_info_txt,
	.info_json = sl_info_json,
	.verify = sl_verify,
	.build = sidx_build,
};

/* ---- aliases ----------------------------------------------------------- */

/* Only JSON files directly inside a directory named "aliases". */
static bool alias_match(const char *dirpath, const char *name)
{
	(void)name;
	const char *base = strrchr(dirpath, '/');
	return strcmp(base ? base + 1 : dirpath, "aliases") == 0;
}

/* A version names one directory under indexes/: never a path, never empty,
 * "." or "..", which would point the link elsewhere. */
static bool version_ok(const char *v)
{
	return v[0] && !strchr(v, '/') && strcmp(v, ".") != 0 && strcmp(v, "..") != 0;
}

/* The state is the link's target, "../indexes/<version>". */
static int alias_parse(const struct sf_open_args *a, struct sf_view *view, void **state,
		       struct sf_err *e)
{
	json_error_t je;
	const struct sf_map *m = a->map;
	uint8_t *p;
	int rc = sf_map_copy(m, 0, m->size, &p, "alias", e);
	if (rc)
		return rc;
	json_t *j = json_loadb((const char *)p, m->size, 0, &je);
	free(p);
	if (!j)
		return sf_fail(e, -EINVAL, "%s: alias is not JSON: line %d: %s", a->path, je.line, je.text);
	const char *v = json_string_value(json_object_get(j, "index_version"));
	if (!v)
		rc = sf_fail(e, -EINVAL, "%s: alias has no \"index_version\" string", a->path);
	else if (!version_ok(v))
		rc = sf_fail(e, -EINVAL, "%s: alias index_version \"%s\" is not a version name",
			     a->path, v);
	char *target = NULL;
	if (!rc && asprintf(&target, "../indexes/%s", v) < 0)
		rc = sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	if (!rc) {
		*state = target;
		if (!sf_dir_beside(a, target))
			sf_view_warn(view, "%s: alias points at index version \"%s\", which does not exist (dangling link)",
				     a->path, v);
		const char *named = json_string_value(json_object_get(j, "alias"));
		size_t stem = strlen(a->name) - strlen(".json");
		if (named && (strlen(named) != stem || memcmp(named, a->name, stem) != 0))
			sf_view_warn(view, "%s: the file names alias \"%.*s\" but its \"alias\" field says \"%s\"",
				     a->path, (int)stem, a->name, named);
	}
	json_decref(j);
	return rc;
}

static const char *alias_link(const void *state)
{
	return state;
}

const struct sf_format sl_alias_format = {
	.name = "alias",
	.ext = ".json",
	.match = alias_match,
	.parse = alias_parse,
	.free_state = free,
	.link = alias_link,
};
