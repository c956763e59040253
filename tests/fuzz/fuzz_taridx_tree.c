/* libFuzzer target for the taridx fold tree: the input describes tar
 * members (type, name, link name, payload length), written as one ustar
 * shard f_0000.tar with pax and GNU long-name records where asked, indexed
 * as shardfs-taridx does, and opened as a fold. Member names are the
 * hostile part here, not the index bytes (fuzz_taridx covers those).
 *
 * Before the root is listed, the first component of every member's path
 * (and a few names the view makes up) is looked up; after the listing each
 * answer must agree with it: a name found must be listed, a name answered
 * absent must not be. Then the whole view is walked and read.
 *
 * Input: records of
 *   u8 kind      low 3 bits: 0 file, 1 hard link, 2 symlink, 3 directory,
 *                4 file named by a pax path, 5 file named by a GNU long
 *                name, 6 file split into ustar prefix and name, 7 file of
 *                typeflag NUL; bits 3-7: payload length
 *   u8 n, n bytes       the name (kinds 4 and 5: n & 127 bytes, and with
 *                       bit 7 set repeated up to 65535 bytes: "a/" makes
 *                       a path of 32,767 levels)
 *   u8 m, m bytes       the link name */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "tar_header.h"
#include "sf_name.h"
#include "taridx/tx.h"
#include "sf_view_impl.h"

#define MAX_MEMBERS 200
#define MAX_LOOKUPS (MAX_MEMBERS + 8)

struct tar {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct tar *t, const void *p, size_t n)
{
	if (t->len + n > t->cap) {
		t->cap = (t->len + n) * 2;
		if (!(t->p = realloc(t->p, t->cap)))
			abort();
	}
	memcpy(t->p + t->len, p, n);
	t->len += n;
}

static void pad(struct tar *t)
{
	static const uint8_t zero[512];
	put(t, zero, (512 - t->len % 512) % 512);
}

/* One header, then `size` payload bytes. */
static void header(struct tar *t, char type, const uint8_t *name, size_t nlen,
		   const uint8_t *prefix, size_t plen, const uint8_t *link, size_t llen,
		   const uint8_t *payload, size_t size)
{
	uint8_t h[512];
	tar_header(h, &(struct tar_names){ name, prefix, link, nlen, plen, llen }, type, size);
	put(t, h, 512);
	if (size)
		put(t, payload, size);
	pad(t);
}

/* A pax record "<len> path=<value>\n" (the length counts itself). */
static void pax_path(struct tar *t, const uint8_t *path, size_t n)
{
	size_t body = strlen(" path=") + n + 1, len = body + 1;
	while (snprintf(NULL, 0, "%zu", len) + body != len)
		len++;
	uint8_t *rec = malloc(len);
	if (!rec)
		abort();
	int d = snprintf((char *)rec, len, "%zu path=", len);
	memcpy(rec + d, path, n);
	rec[len - 1] = '\n';
	header(t, 'x', (const uint8_t *)"././@PaxHeader", 14, NULL, 0, NULL, 0, rec, len);
	free(rec);
}

static bool take(const uint8_t **p, size_t *left, size_t n, const uint8_t **out)
{
	if (*left < n)
		return false;
	*out = *p;
	*p += n;
	*left -= n;
	return true;
}

/* The first component of a member path as the root shows it (escaped). */
static void root_name(const uint8_t *path, size_t n, char *out)
{
	size_t i = 0;
	while (i < n && (path[i] == '/' || (path[i] == '.' && (i + 1 == n || path[i + 1] == '/'))))
		i++;
	const uint8_t *slash = memchr(path + i, '/', n - i);
	size_t end = slash ? (size_t)(slash - path) : n;
	sf_name_escape(path + i, end - i, SF_NAME_MAX, out);
}

static void build_tar(const uint8_t *data, size_t size, struct tar *t,
		      char names[][SF_NAME_MAX + 1], size_t *nnames)
{
	static const char types[8] = { '0', '1', '2', '5', '0', '0', '0', '\0' };
	static uint8_t payload[32], name[65536 + 1];
	const uint8_t *p = data, *kindp, *np, *raw, *mp, *link;
	size_t left = size;
	for (unsigned i = 0; i < MAX_MEMBERS; i++) {
		if (!take(&p, &left, 1, &kindp) || !take(&p, &left, 1, &np))
			break;
		unsigned kind = kindp[0] % 8;
		size_t plen = kindp[0] >> 3;
		bool long_kind = kind == 4 || kind == 5, repeat = long_kind && (*np & 128);
		size_t unit = long_kind ? *np & 127u : *np;
		if (!take(&p, &left, unit, &raw) || !take(&p, &left, 1, &mp) ||
		    !take(&p, &left, *mp, &link))
			break;
		size_t nlen = 0, times = repeat && unit ? 65535 / unit : 1;
		for (size_t k = 0; unit && k < times && nlen + unit <= 65535; k++, nlen += unit)
			memcpy(name + nlen, raw, unit);
		name[nlen] = 0;
		memset(payload, 'a' + i % 26, sizeof payload);
		root_name(name, nlen, names[(*nnames)++]);
		if (kind == 4)
			pax_path(t, name, nlen);
		else if (kind == 5)
			header(t, 'L', (const uint8_t *)"././@LongLink", 13, NULL, 0, NULL, 0, name, nlen + 1);
		if (kind == 6 && nlen > 1)
			header(t, types[kind], name + nlen / 2, nlen - nlen / 2, name, nlen / 2, link, *mp,
			       payload, plen);
		else if (long_kind)
			header(t, types[kind], (const uint8_t *)"stand-in.bin", 12, NULL, 0, link, *mp,
			       payload, plen);
		else
			header(t, types[kind], name, nlen, NULL, 0, link, *mp, payload,
			       kind >= 1 && kind <= 3 ? 0 : plen);
	}
	static const uint8_t end[1024];
	put(t, end, sizeof end);
}

static int index_tar(const struct tar *t)
{
	fuzz_put("f_0000.tar", t->p, t->len);
	char path[512];
	snprintf(path, sizeof path, "%s/f_0000.tar", fuzz_dir());
	struct sf_map *m = NULL;
	struct sf_err e;
	if (sf_map_open(path, &m, &e))
		return -1;
	const struct sf_map *maps[1] = { m };
	const char *names[1] = { "f_0000.tar" };
	struct sf_buf *out = NULL;
	int rc = tx_build_index(maps, names, 1, false, NULL, NULL, NULL, &out, &e);
	if (!rc)
		fuzz_put("f.taridx", out->data, out->len);
	sf_buf_unref(out);
	sf_map_unref(m);
	return rc;
}

/* Every answer the root gave before its listing agrees with the listing. */
static void check_root(struct sf_view *v, char names[][SF_NAME_MAX + 1], size_t n)
{
	static const char *const made_up[] = { ".shardfs#1", "..#1", "a#1", "a#1#1", "a.jpg",
					       "nothere.txt", "nothere" };
	const size_t nfixed = sizeof made_up / sizeof *made_up;
	bool found[MAX_LOOKUPS];
	struct sf_err e;
	for (size_t i = 0; i < n + nfixed; i++) {
		const char *name = i < n ? names[i] : made_up[i - n];
		struct sf_node *k = NULL;
		found[i] = !sf_dir_find(v->root, name, &k, &e) && k;
		sf_node_unpin(k);
	}
	if (sf_dir_ready(v->root, &e))
		return;
	for (size_t i = 0; i < n + nfixed; i++) {
		const char *name = i < n ? names[i] : made_up[i - n];
		struct sf_dirent d;
		size_t k = 0, count = sf_dir_count(v->root);
		while (k < count && (sf_dir_entry(v->root, k, &d), strcmp(d.name, name) != 0))
			k++;
		bool listed = k < count;
		if (listed != found[i]) {
			fprintf(stderr, "fuzz_taridx_tree: root name \"%s\" %s before the listing, %s after\n",
				name, found[i] ? "found" : "absent", listed ? "listed" : "not listed");
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char names[MAX_MEMBERS][SF_NAME_MAX + 1];
	size_t nnames = 0;
	struct tar t = { 0 };
	build_tar(data, size, &t, names, &nnames);
	if (index_tar(&t) == 0) {
		char path[512];
		snprintf(path, sizeof path, "%s/f.taridx", fuzz_dir());
		struct sf_view *v = NULL;
		struct sf_err e;
		if (sf_open_path(path, NULL, &v, &e) == 0) {
			if (v->root->kind == SF_DIR)
				check_root(v, names, nnames);
			fuzz_walk_view(v, NULL);
			sf_view_unref(v);
		}
	}
	free(t.p);
	return 0;
}
