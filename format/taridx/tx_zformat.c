/* Compressed tars (docs/tree-layout.md §3.7, "Compressed tars"): `<name>.tar.gz` and its
 * siblings get the view `<name>/` a plain tar gets, the fold of one tar
 * (tx_lone.c) whose tar is the decoded map over a seek index (tx_z.c). The
 * codec is the one the file's magic bytes name, whatever its extension. */
#include <errno.h>

#include "tx.h"
#include "tx_z.h"

static int check(const struct sf_probe *p, struct sf_err *e)
{
	if (tx_z_sniff(p->head, p->nhead) == TX_Z_NONE)
		return sf_fail(e, -EINVAL, "%s: starts with no gzip, zstd, xz, bzip2 or lz4 magic",
			       p->path);
	return 0;
}

static int parse_ext(const struct sf_open_args *a, struct sf_view *v, void **state, const char *ext,
		     struct sf_err *e)
{
	struct sf_map *tar = NULL;
	int rc = tx_z_open(a->map, &tar, e);
	if (!rc && a->has_keepdir && tx_z_keep_in(tar, a->keepdir, a->keeptop, a->name))
		sf_view_warn(v, "%s: --index-dir cannot keep its seek index", a->path);
	if (!rc)
		rc = tx_unindexed_parse(a, v, state, ext, tar, e);
	sf_map_unref(tar);
	return rc;
}

/* One descriptor per extension: the view is named without it. */
#define TX_Z_FORMAT(id, extension)                                                             \
	static int parse_##id(const struct sf_open_args *a, struct sf_view *v, void **state,   \
			      struct sf_err *e)                                                \
	{                                                                                      \
		return parse_ext(a, v, state, extension, e);                                   \
	}                                                                                      \
	const struct sf_format tx_##id##_format = {                                            \
		.name = "tar",                                                                 \
		.ext = extension,                                                              \
		.check = check,                                                                \
		.keeps = true,                                                                 \
		.parse = parse_##id,                                                           \
		.free_state = tx_fold_free,                                                    \
		.info_txt = tx_info_txt,                                                       \
		.info_json = tx_info_json,                                                     \
		.verify = tx_verify,                                                           \
		.build = tx_fold_build,                                                        \
	};

TX_Z_FORMAT(targz, ".tar.gz")
TX_Z_FORMAT(tgz, ".tgz")
TX_Z_FORMAT(tarzst, ".tar.zst")
TX_Z_FORMAT(tzst, ".tzst")
TX_Z_FORMAT(tarxz, ".tar.xz")
TX_Z_FORMAT(txz, ".txz")
TX_Z_FORMAT(tarbz2, ".tar.bz2")
TX_Z_FORMAT(tbz2, ".tbz2")
TX_Z_FORMAT(tbz, ".tbz")
TX_Z_FORMAT(tarlz4, ".tar.lz4")
