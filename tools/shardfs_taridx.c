/* shardfs-taridx: index the tars DIR/FOLD_*.tar (or DIR/FOLD-*.tar) into DIR/FOLD.taridx
 * (or OUT/FOLD.taridx), byte-identical to what upstream's indexer writes for the same tars;
 * with --zidx, build compressed tars' seek indexes ahead of the mount. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "taridx/tx.h"
#include "taridx/tx_z.h"

static const char *prog = "shardfs-taridx";

static void usage(FILE *to)
{
	fprintf(to,
		"usage: %s [--rank-fids] [--quiet] [--out OUT] DIR FOLD\n"
		"       %s --zidx [--quiet] [--out OUT] ARCHIVE...\n"
		"\n"
		"Indexes DIR/FOLD_<S>.tar (S without '_', in string order of S), or when there\n"
		"is none DIR/FOLD-<S>.tar (S without '-': WebDataset's shard names), and writes\n"
		"DIR/FOLD.taridx atomically. The index is byte-identical to upstream's, which\n"
		"numbers an empty tar with no fid; --rank-fids numbers every tar by its rank\n"
		"instead, so that readers find the members of the tars after an empty one.\n"
		"--out OUT writes OUT/FOLD.taridx instead (OUT must exist), for a DIR its\n"
		"readers cannot write.\n"
		"\n"
		"--zidx builds each compressed tar's seek index and tar index (.tar.gz,\n"
		".tar.zst, .tar.xz, .tar.bz2, .tar.lz4 and their short forms) into\n"
		"OUT/ARCHIVE.zidx (default: beside the archive), as the mount keeps them in\n"
		"--index-dir: for SRC/P/A.tar.gz and a mount with --index-dir IDX, OUT is\n"
		"IDX/P. The mount then starts at once, with no pass over the archive.\n",
		prog, prog);
}

struct progress {
	bool tty;
	size_t ntars;
	const char *const *names;
	struct timespec t0;
};

static double since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void on_progress(void *arg, size_t tar, uint64_t rows)
{
	struct progress *p = arg;
	if (!p->tty)
		return;
	const int width = 30;
	int done = (int)((tar + 1) * (size_t)width / p->ntars);
	fprintf(stderr, "\r[%.*s%*s] %zu/%zu tars  %llu rows  %.1fs", done,
		"##############################", width - done, "", tar + 1, p->ntars,
		(unsigned long long)rows, since(&p->t0));
	if (tar + 1 == p->ntars)
		fputc('\n', stderr);
	fflush(stderr);
}

static void on_warn(void *arg, const char *msg)
{
	struct progress *p = arg;
	fprintf(stderr, "%s%s: warning: %s\n", p->tty ? "\r\033[K" : "", prog, msg);
}

static int list_dir(const char *dir, char ***names, size_t *n)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	size_t cap = 0;
	struct dirent *de;
	*names = NULL;
	*n = 0;
	while ((de = readdir(d))) {
		if (sf_grow(names, &cap, *n, sizeof **names, 64))
			break;
		if (!((*names)[*n] = strdup(de->d_name)))
			break;
		(*n)++;
	}
	int rc = de ? -ENOMEM : 0;
	closedir(d);
	return rc;
}

/* Writes buf to DIR/FILE through a temporary file renamed into place, so
 * that readers never see a torn index. */
static int write_atomic(const char *dir, const char *file, const struct sf_buf *buf)
{
	char *tmp = NULL, *dst = NULL;
	if (asprintf(&dst, "%s/%s", dir, file) < 0 || asprintf(&tmp, "%s/.%s.XXXXXX", dir, file) < 0) {
		fprintf(stderr, "%s: out of memory\n", prog);
		free(dst);
		return -1;
	}
	int fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, tmp, strerror(errno));
		free(tmp);
		free(dst);
		return -1;
	}
	size_t off = 0;
	while (off < buf->len) {
		ssize_t k = write(fd, buf->data + off, buf->len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	int err = off == buf->len ? 0 : errno ? errno : EIO;
	if (!err && (fchmod(fd, 0644) || fsync(fd)))
		err = errno;
	if (close(fd) && !err)
		err = errno;
	if (!err && rename(tmp, dst))
		err = errno;
	if (err) {
		fprintf(stderr, "%s: writing %s: %s\n", prog, dst, strerror(err));
		unlink(tmp);
	}
	free(tmp);
	free(dst);
	return err ? -1 : 0;
}

/* --zidx: each archive's indexes built ahead into OUT/<name>.zidx (the
 * archive's directory without OUT), as a mount with --index-dir keeps
 * them. 0, or 1 when any failed. */
static int keep_ahead(const char *out_dir, char *const *archives, int n, bool quiet)
{
	int failed = 0;
	for (int k = 0; k < n; k++) {
		const char *path = archives[k], *slash = strrchr(path, '/');
		const char *name = slash ? slash + 1 : path;
		char *dir = out_dir ? strdup(out_dir) :
			    slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
		struct sf_err e = { { 0 } };
		struct sf_map *src = NULL;
		struct tx_zinfo zi;
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		int rc = !dir ? sf_fail(&e, -ENOMEM, "out of memory") :
			 dfd < 0 ? sf_fail(&e, -errno, "%s: %s", dir, strerror(errno)) :
			 sf_map_open(path, &src, &e);
		if (!rc)
			rc = tx_z_keep_ahead(src, dfd, name, &zi, &e);
		if (rc) {
			fprintf(stderr, "%s: %s\n", prog, e.msg);
			failed = 1;
		} else if (!quiet) {
			bool made = strcmp(zi.kept, "written to --index-dir") == 0;
			fprintf(stderr, "%s: %s: %s, %llu start points: %s/%s.zidx %s (%.2fs)\n", prog,
				path, tx_z_name(zi.codec), (unsigned long long)zi.starts, dir, name,
				made ? "written" : "already there and matching", since(&t0));
		}
		if (dfd >= 0)
			close(dfd);
		sf_map_unref(src);
		free(dir);
	}
	return failed;
}

int main(int argc, char **argv)
{
	bool rank = false, quiet = false, zidx = false;
	const char *out_dir = NULL;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
			out_dir = argv[++i];
		} else if (strcmp(argv[i], "--rank-fids") == 0) {
			rank = true;
		} else if (strcmp(argv[i], "--quiet") == 0) {
			quiet = true;
		} else if (strcmp(argv[i], "--zidx") == 0) {
			zidx = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (zidx && i < argc && !rank)
		return keep_ahead(out_dir, argv + i, argc - i, quiet);
	if (zidx || argc - i != 2 || strchr(argv[i + 1], '/')) {
		usage(stderr);
		return 2;
	}
	const char *dir = argv[i], *fold = argv[i + 1];
	if (!out_dir)
		out_dir = dir;
	char **names = NULL;
	size_t nnames = 0;
	int rc = list_dir(dir, &names, &nnames);
	if (rc) {
		fprintf(stderr, "%s: %s: %s\n", prog, dir, strerror(-rc));
		return 1;
	}
	struct tx_shard *shards = NULL;
	size_t n = 0;
	rc = tx_shards_find(fold, (const char *const *)names, nnames, &shards, &n);
	for (size_t k = 0; k < nnames; k++)
		free(names[k]);
	free(names);
	if (rc || !n) {
		fprintf(stderr, "%s: %s\n", prog, rc ? strerror(-rc) : "no tars to index");
		if (!rc)
			fprintf(stderr, "%s: looked for %s/%s_<suffix>.tar and %s/%s-<suffix>.tar\n", prog,
				dir, fold, dir, fold);
		tx_shards_free(shards, n);
		return 1;
	}
	const struct sf_map **maps = calloc(n, sizeof *maps);
	const char **tar_names = calloc(n, sizeof *tar_names);
	struct sf_err e = { { 0 } };
	for (size_t k = 0; maps && tar_names && k < n && !rc; k++) {
		char *path = NULL;
		if (asprintf(&path, "%s/%s", dir, shards[k].name) < 0)
			break;
		rc = sf_map_open(path, &shards[k].map, &e);
		free(path);
		maps[k] = shards[k].map;
		tar_names[k] = shards[k].name;
	}
	if (!maps || !tar_names || (!rc && !maps[n - 1]))
		rc = sf_fail(&e, -ENOMEM, "out of memory");
	struct sf_buf *out = NULL;
	struct progress p = { isatty(2) && !quiet, n, tar_names, { 0, 0 } };
	clock_gettime(CLOCK_MONOTONIC, &p.t0);
	if (!rc)
		rc = tx_build_index(maps, tar_names, n, rank, on_progress, &p, on_warn, &out, &e);
	if (rc) {
		fprintf(stderr, "%s%s: %s\n", p.tty ? "\n" : "", prog, e.msg);
	} else {
		char file[4096];
		snprintf(file, sizeof file, "%s.taridx", fold);
		rc = write_atomic(out_dir, file, out);
		struct tx_index ix;
		if (!rc && !quiet && tx_index_parse(out->data, out->len, file, &ix, &e) == 0) {
			fprintf(stderr, "%s: indexed %zu tars, %llu rows, %llu stems into %s/%s in %.2fs\n",
				prog, n, (unsigned long long)ix.n_rows, (unsigned long long)ix.n_stems,
				out_dir, file, since(&p.t0));
			tx_index_free(&ix);
		}
	}
	sf_buf_unref(out);
	free(maps);
	free(tar_names);
	tx_shards_free(shards, n);
	return rc ? 1 : 0;
}
