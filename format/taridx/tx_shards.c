/* Which tars belong to a fold, and in what order (spec §2.1): the fid of a
 * shard is its rank by suffix string, not the number in its name. The
 * tars are "<fold>_<S>.tar", or when there is none "<fold>-<S>.tar"
 * (docs/formats/taridx.md). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tx.h"

struct cand {
	const char *name;
	const char *suffix;
	size_t slen;
};

static int cmp_suffix(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	size_t n = x->slen < y->slen ? x->slen : y->slen;
	int c = memcmp(x->suffix, y->suffix, n);
	return c ? c : (x->slen > y->slen) - (x->slen < y->slen);
}

/* The tars "<fold><delim><S>.tar" with no delim in S, in c; their count. */
static size_t pick(const char *fold, char delim, const char *const *names, size_t n,
		   struct cand *c)
{
	size_t flen = strlen(fold), k = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(names[i]);
		if (len < flen + 5 || memcmp(names[i], fold, flen) != 0 || names[i][flen] != delim ||
		    memcmp(names[i] + len - 4, ".tar", 4) != 0)
			continue;
		const char *s = names[i] + flen + 1;
		size_t slen = len - flen - 5;
		if (!memchr(s, delim, slen))
			c[k++] = (struct cand){ names[i], s, slen };
	}
	return k;
}

int tx_shards_find(const char *fold, const char *const *names, size_t n,
		   struct tx_shard **out, size_t *nout)
{
	struct cand *c = calloc(n ? n : 1, sizeof *c);
	if (!c)
		return -ENOMEM;
	/* upstream's delimiter, else WebDataset's "<prefix>-<n>.tar" (the
	 * delimiter upstream's reader can be given); never both */
	size_t k = pick(fold, '_', names, n, c);
	if (!k)
		k = pick(fold, '-', names, n, c);
	qsort(c, k, sizeof *c, cmp_suffix);
	struct tx_shard *s = calloc(k ? k : 1, sizeof *s);
	int rc = s ? 0 : -ENOMEM;
	for (size_t i = 0; !rc && i < k; i++)
		if (!(s[i].name = strdup(c[i].name)))
			rc = -ENOMEM;
	free(c);
	if (rc) {
		tx_shards_free(s, k);
		return rc;
	}
	*out = s;
	*nout = k;
	return 0;
}

void tx_shards_free(struct tx_shard *s, size_t n)
{
	if (!s)
		return;
	for (size_t i = 0; i < n; i++) {
		free(s[i].name);
		free(s[i].problem);
		sf_map_unref(s[i].map);
	}
	free(s);
}
