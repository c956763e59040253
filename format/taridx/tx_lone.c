/* A tar with no index (docs/tree-layout.md §3.7, "an unindexed tar"): the view
 * `<name>/` beside `<name>.tar` is a fold of that one tar, whose index is
 * built in memory from the tar's headers when the view is first used, so
 * every rule of a fold's view applies to it. A tar some fold beside it
 * takes as a shard gets no view of its own. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sf_big.h"
#include "sf_map.h"
#include "tx.h"
#include "tx_z.h"
#include "sf_view_impl.h"

/* The listing's check: a first block that is a tar header, or the zero
 * block of an empty archive. */
static int check(const struct sf_probe *p, struct sf_err *e)
{
	uint64_t size;
	if (p->size < TX_BLOCK || p->nhead < TX_BLOCK)
		return sf_fail(e, -EINVAL, "%s: shorter than a tar header", p->path);
	if (tx_block_is_zero(p->head))
		return 0;
	if (!tx_hdr_checksum_ok(p->head) || tx_num(p->head + 124, 12, &size))
		return sf_fail(e, -EINVAL, "%s: its first block is no tar header (checksum or size field)",
			       p->path);
	return 0;
}

static bool has(const char *const *names, size_t n, const char *name)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(names[mid], name);
		if (!c)
			return true;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* Whether fold `fold` (len bytes of name) has a shard "<fold>_<S>.tar"
 * (S without '_') among the sorted names: those come first in
 * tx_shards_find's choice. */
static bool has_underscore_shard(const char *const *names, size_t n, const char *fold, size_t len)
{
	size_t lo = 0, hi = n;
	while (lo < hi) { /* the first name not below "<fold>_" */
		size_t mid = lo + (hi - lo) / 2;
		int c = strncmp(names[mid], fold, len);
		if (c < 0 || (c == 0 && (unsigned char)names[mid][len] < '_'))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n && strncmp(names[lo], fold, len) == 0 && names[lo][len] == '_'; lo++) {
		const char *s = names[lo] + len + 1;
		size_t k = strlen(s);
		if (k > 4 && strcmp(s + k - 4, ".tar") == 0 && !memchr(s, '_', k - 4))
			return true;
	}
	return false;
}

/* Whether "<fold>.taridx" is among the names, fold being the first len
 * bytes of `name`. */
static bool index_of(const char *const *names, size_t n, const char *name, size_t len)
{
	char idx[NAME_MAX + 8];
	if (len + sizeof ".taridx" > sizeof idx)
		return false;
	memcpy(idx, name, len);
	memcpy(idx + len, ".taridx", sizeof ".taridx");
	return has(names, n, idx);
}

/* A tar is a fold's shard (tx_shards_find) when it is "<F>_<S>.tar" with
 * no '_' in S, or "<F>-<S>.tar" with no '-' in S and F has no '_' shard,
 * and F.taridx is beside it. */
static bool covered(const char *name, const char *const *names, size_t n)
{
	size_t stem = strlen(name) - strlen(".tar");
	const char *u = memrchr(name, '_', stem), *d = memrchr(name, '-', stem);
	if (u && index_of(names, n, name, (size_t)(u - name)))
		return true;
	return d && index_of(names, n, name, (size_t)(d - name)) &&
	       !has_underscore_shard(names, n, name, (size_t)(d - name));
}

int tx_unindexed_parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		       const char *ext, struct sf_map *tar, struct sf_err *e)
{
	struct tx_fold *f = tx_fold_new(a, v, state, ext, e);
	if (!f)
		return -ENOMEM;
	f->unindexed = true;
	if (!(f->shards = calloc(1, sizeof *f->shards)) || !(f->shards[0].name = strdup(a->name)))
		return sf_fail(e, -ENOMEM, "%s: out of memory", a->path);
	f->nshards = 1;
	f->shards[0].map = sf_map_ref(tar);
	return 0;
}

static int parse(const struct sf_open_args *a, struct sf_view *v, void **state,
		 struct sf_err *e)
{
	return tx_unindexed_parse(a, v, state, ".tar", a->map, e);
}

/* Walks the tar's headers (of the decoded tar when it is compressed) into
 * an index (tx_index_tar, through copies), its memory charged to the budget
 * as it grows, once for every view of the file (tx_walked_get), then keeps
 * this view's two bits a row in the budget too: made once, they outlive a
 * shed (the names the lookup gave out first stay first). */
static int build_index(struct tx_fold *f, struct sf_err *e)
{
	struct sf_cache *c = f->view->cache;
	/* a compressed tar's seek index too, and kept in --index-dir */
	int rc = tx_walked_get(f->shards[0].map, f->view, &f->walked, &f->built, &f->noted, e);
	if (rc)
		return rc;
	f->charged_to = c;
	if ((rc = tx_index_parse(f->built->data, f->built->len, f->view->path, &f->ix, e)))
		return rc;
	uint64_t bits = f->ix.n_rows / 8 + 1;
	if (f->plain)
		return 0;
	if ((rc = sf_cache_charge(c, 2 * bits, f->view->path, "its index", e)))
		return c->limit && 2 * bits > c->limit ? -EIO : -ENOBUFS;
	f->hooked_member = calloc(bits, 1);
	f->plain = calloc(bits, 1);
	if (!f->hooked_member || !f->plain) {
		sf_cache_uncharge(c, 2 * bits);
		free(f->hooked_member);
		free((void *)f->plain);
		f->hooked_member = NULL;
		f->plain = NULL;
		return sf_fail(e, -ENOMEM, "%s: out of memory", f->view->path);
	}
	f->charged = 2 * bits;
	return 0;
}

/* This view's copy of the walk's index (with its unkeyed root names) and
 * what is made from it (the lookup, the tags of the names looked up) go;
 * they go back to being made at first use, by tx_fold_ready, from the same bytes (a tar changed in
 * place fails the mapping checks first), so every row keeps its number. */
static void unready(struct tx_fold *f)
{
	atomic_store(&f->ready, false);
	tx_index_free(&f->ix);
	memset(&f->ix, 0, sizeof f->ix);
	sf_buf_unref(f->built);
	sf_buf_unref(f->noted);
	f->built = NULL;
	f->noted = NULL;
	if (f->named_charged)
		sf_cache_uncharge(f->named_charged_to, f->named_charged);
	f->named_charged = 0;
	sf_big_free(f->named);
	f->named = NULL;
}

/* sf_format.shed: the view is unused. Its hold on the walk goes too: the
 * walk's charge with the last view of the file that holds it. */
static bool shed(void *state)
{
	struct tx_fold *f = state;
	if (!atomic_load(&f->ready))
		return false;
	unready(f);
	tx_walked_put(f->walked);
	f->walked = NULL;
	return true;
}

int tx_fold_ready(struct tx_fold *f, struct sf_err *e)
{
	if (atomic_load(&f->ready))
		return 0;
	sf_turn_take(&f->ready_turn);
	int rc = 0;
	if (f->unready) {
		rc = sf_fail(e, -EIO, "%s", f->unready);
	} else if (!atomic_load(&f->ready)) {
		/* the walk reads copies (a lost page is -EIO) into an index in
		 * memory; the tar is checked around it, so that a change in
		 * place fails it */
		struct sf_map *tar = f->shards[0].map;
		uint64_t size = tar->size;
		struct sf_progress *pr = f->view->host.progress;
		SF_PROGRESS_ADD(pr, walking, 1);
		SF_PROGRESS_ADD(pr, bytes_to_walk, size);
		rc = sf_map_check(tar, e);
		if (!rc)
			rc = build_index(f, e);
		if (!rc)
			rc = sf_map_check(tar, e);
		SF_PROGRESS_ADD(pr, walking, -1);
		SF_PROGRESS_ADD(pr, bytes_to_walk, -size);
		SF_PROGRESS_ADD(pr, walks_done, !rc);
		if (!rc) {
			atomic_store(&f->ready, true);
		} else {
			/* what is left of a failed build goes (the bits of a
			 * view shed before stay); a tar readers cannot read is
			 * not walked again (its view is made anew when it
			 * changes) */
			unready(f);
			/* one for lack of room is remembered with the walk
			 * (tx_walked.c) until the budget frees */
			if (rc != -ENOMEM && rc != -EMFILE && rc != -ENFILE && rc != -ENOBUFS)
				f->unready = strdup(e->msg);
			if (rc != -ENOMEM)
				rc = -EIO;
		}
	}
	sf_turn_give(&f->ready_turn);
	return rc;
}

const struct sf_format tx_tar_format = {
	.name = "tar",
	.ext = ".tar",
	.covered = covered,
	.check = check,
	.parse = parse,
	.free_state = tx_fold_free,
	.info_txt = tx_info_txt,
	.info_json = tx_info_json,
	.verify = tx_verify,
	.build = tx_fold_build,
	.shed = shed,
};
