#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CACHE (256ull << 20)
/* A walk over every view of 10,000 containers stays within 64 MiB, and
 * each open view maps its container: far below vm.max_map_count (65,530)
 * whatever the number of containers. */
#define DEFAULT_MAX_OPEN 1024
#define DEFAULT_MAX_NODES 131072

void options_usage(FILE *to)
{
	fputs("usage: shardfs SRC MNT [options]\n"
	      "\n"
	      "Mounts the directory SRC read-only at MNT. Everything in SRC shows through\n"
	      "unchanged; beside each recognised container (.tsumugi, .tatami, .taridx with\n"
	      "its _<n>.tar shards, a .tar with no index, .tar.gz/.tgz, .tar.zst/.tzst,\n"
	      ".tar.xz/.txz, .tar.bz2/.tbz2/.tbz, .tar.lz4, .sidx, .tet, Shardlake aliases) a\n"
	      "view directory shows its parts as ordinary files. MNT/.shardfs/ holds stats.json\n"
	      "and errors.\n"
	      "\n"
	      "options:\n"
	      "  -f                  stay in the foreground (default: daemonize once mounted)\n"
	      "  -d                  debug: print every FUSE request (implies -f)\n"
	      "  -o OPT[,OPT...]     FUSE mount options, e.g. allow_other (other users read\n"
	      "                      what SRC's owners and modes let them: modes follow SRC)\n"
	      "  --cache-size SIZE   budget for decoded parts and working memory (a plain\n"
	      "                      tar's index), bytes with K/M/G suffix (default 256M);\n"
	      "                      a larger part, or tar index, reads EIO\n"
	      "  --threads N         most request threads (default 16); with 1, small\n"
	      "                      files are not pushed to the page cache at open\n"
	      "  --spin-us N         how long the thread waiting for the next request polls\n"
	      "                      before it sleeps, in microseconds (default 200; 0 sleeps\n"
	      "                      at once: no CPU spent waiting, slower round trips);\n"
	      "                      none for 20 ms after another task held its CPU\n"
	      "  --io-uring MODE     off (default): /dev/fuse; on: FUSE over io_uring or no\n"
	      "                      mount; auto: io_uring when the kernel allows it, else\n"
	      "                      /dev/fuse. io_uring serves each CPU's requests on that\n"
	      "                      CPU; measured here it was slower on small files\n"
	      "                      (docs/performance.md). Root turns the kernel side on\n"
	      "                      (Linux 6.14+) with\n"
	      "                      'echo Y > /sys/module/fuse/parameters/enable_uring',\n"
	      "                      or for good with 'options fuse enable_uring=1' in\n"
	      "                      /etc/modprobe.d\n"
	      "  --open              ask the daemon at every open and last close of a file\n"
	      "                      (OPEN, RELEASE). By default the kernel opens and\n"
	      "                      closes files by itself (FUSE's no-open support;\n"
	      "                      --no-open says so): a file read once reads again\n"
	      "                      from the page cache with no request, and a SRC file\n"
	      "                      is mapped at lookup, within a budget (docs/options.md)\n"
	      "  --readdirplus MODE  small (default): a listing of a view directory of at\n"
	      "                      most 16,384 names gives every name its attributes,\n"
	      "                      so that a reader of the files it listed sends no\n"
	      "                      LOOKUP; SRC and larger ones give them in a listing's\n"
	      "                      first request, and in later ones when names were\n"
	      "                      used meanwhile (ls -l, du). auto: every directory\n"
	      "                      as a SRC one, the kernel's choice. always: every\n"
	      "                      name of every listing (names-only listings are\n"
	      "                      slower, and the kernel keeps an inode per name)\n"
	      "  --push-ahead SIZE   after a listing of a view directory (readdirplus),\n"
	      "                      push the content of its small files (128 KiB at\n"
	      "                      most) into the page cache in listing order, so that\n"
	      "                      a first read of a listed file sends no READ: at most\n"
	      "                      SIZE bytes a listing (a file counts at least 4 KiB)\n"
	      "                      and waiting at any time (default 0: off)\n"
	      "  --max-open N        views of containers kept open while unused (default\n"
	      "                      1024): past it the least recently entered are closed,\n"
	      "                      and opened again when entered (each costs memory and\n"
	      "                      a mapping of its container); their descriptors stay\n"
	      "                      within (RLIMIT_NOFILE - 192) / 2 whatever N is\n"
	      "  --max-nodes N       inodes the kernel may make the daemon hold (default\n"
	      "                      131072, from 16): past it the kernel is asked to drop\n"
	      "                      the entries looked up longest ago, and looks them up\n"
	      "                      again when used (each costs about 440 bytes)\n"
	      "  --index-dir DIR     where folds' indexes may lie apart from their tars (a\n"
	      "                      dataset directory its readers cannot write): the index\n"
	      "                      of the fold F whose shards are SRC/P/F_*.tar is read\n"
	      "                      from DIR/P/F.taridx (shardfs-taridx --out DIR/P SRC/P F),\n"
	      "                      unless SRC/P/F.taridx exists. One that does not match\n"
	      "                      its tars is refused, saying why (docs/tools.md). The\n"
	      "                      indexes of a compressed tar SRC/P/A are kept as\n"
	      "                      DIR/P/A.zidx, for the next mount to skip its pass\n"
	      "                      (whichever of the archive's names it uses first)\n"
	      "  --ready-fd FD       write \"ready\\n\" to the open descriptor FD once mounted,\n"
	      "                      then close it (EOF without it: the mount failed)\n"
	      "  -h, --help          this text\n"
	      "  -V, --version       the version\n"
	      "\n"
	      "Unmount with: fusermount3 -u MNT (or send the daemon SIGTERM).\n",
	      to);
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 0: break;
	default: return -1;
	}
	if (*end == 'B' || *end == 'b' || *end == 'i')
		end += (*end == 'i' && (end[1] == 'B' || end[1] == 'b')) ? 2 : 1;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Options that mount(8), fstab lines and mount.fuse3 pass along but that mean
 * nothing to this mount: libfuse rejects most of them, so they are dropped.
 * "rw" too (shardfs is read-only), and atime variants libfuse does not know
 * (a read-only mount never updates access times). */
static bool ignored_opt(const char *opt, size_t n)
{
	static const char *const names[] = {
		"defaults", "rw", "auto", "noauto", "user", "nouser", "users", "owner",
		"group", "nofail", "_netdev", "relatime", "norelatime", "strictatime",
		"nostrictatime", "diratime", "nodiratime", "lazytime", "nolazytime",
	};
	if (n == 0 || (n >= 2 && memcmp(opt, "x-", 2) == 0) ||
	    (n >= 8 && memcmp(opt, "comment=", 8) == 0))
		return true;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strlen(names[i]) == n && memcmp(names[i], opt, n) == 0)
			return true;
	return false;
}

/* Appends the comma-separated options of one -o, less the ignored ones. */
static int add_fuse_opts(struct options *o, const char *opts)
{
	for (const char *p = opts;; p++) {
		size_t n = strcspn(p, ",");
		if (!ignored_opt(p, n)) {
			size_t old = o->fuse_opts ? strlen(o->fuse_opts) : 0;
			char *q = realloc(o->fuse_opts, old + n + 2);
			if (!q)
				return -1;
			if (old)
				q[old++] = ',';
			memcpy(q + old, p, n);
			q[old + n] = 0;
			o->fuse_opts = q;
		}
		p += n;
		if (!*p)
			return 0;
	}
}

static int bad(const char *msg, const char *arg)
{
	bool shown = arg && *arg;
	fprintf(stderr, "shardfs: %s%s%s (see shardfs --help)\n", msg, shown ? ": " : "", shown ? arg : "");
	return 1;
}

/* Marks a long option given without its value. */
static const char MISSING[] = "";

/* The value of long option `name` at argv[*i], given as "--name=V" or as
 * "--name V" (then *i moves past V); NULL when argv[*i] is not `name`,
 * MISSING when its value is. */
static const char *long_value(int argc, char **argv, int *i, const char *name)
{
	const char *a = argv[*i];
	size_t k = strlen(name);
	if (strncmp(a, name, k) != 0)
		return NULL;
	if (a[k] == '=')
		return a[k + 1] ? a + k + 1 : MISSING;
	if (a[k])
		return NULL;
	return *i + 1 < argc ? argv[++*i] : MISSING;
}

/* A whole decimal number in [lo, hi]; non-zero otherwise. */
static int number(const char *val, long lo, long hi, long *out)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(val, &end, 10);
	if (val == MISSING || end == val || *end || errno || v < lo || v > hi)
		return 1;
	*out = v;
	return 0;
}

int options_parse(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof *o);
	o->cache_size = DEFAULT_CACHE;
	o->threads = 16;
	o->spin_us = 200;
	o->max_open = DEFAULT_MAX_OPEN;
	o->max_nodes = DEFAULT_MAX_NODES;
	o->ready_fd = -1;
	o->io_uring = IO_URING_OFF;
	o->no_open = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = NULL;
		long n;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			o->help = true;
		} else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			o->version = true;
		} else if (strcmp(a, "-f") == 0) {
			o->foreground = true;
		} else if (strcmp(a, "-d") == 0) {
			o->debug = o->foreground = true;
		} else if (strncmp(a, "-o", 2) == 0) {
			val = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
			if (!val)
				return bad("-o needs an argument", NULL);
			if (add_fuse_opts(o, val))
				return bad("out of memory", NULL);
		} else if (strcmp(a, "--no-open") == 0) {
			o->no_open = true;
		} else if (strcmp(a, "--open") == 0) {
			o->no_open = false;
		} else if ((val = long_value(argc, argv, &i, "--cache-size"))) {
			if (val == MISSING || parse_size(val, &o->cache_size))
				return bad("--cache-size needs a size like 512M", val);
		} else if ((val = long_value(argc, argv, &i, "--threads"))) {
			if (number(val, 1, 1024, &n))
				return bad("--threads needs a number from 1 to 1024", val);
			o->threads = (unsigned)n;
		} else if ((val = long_value(argc, argv, &i, "--spin-us"))) {
			if (number(val, 0, 100000, &n))
				return bad("--spin-us needs a number from 0 to 100000", val);
			o->spin_us = (unsigned)n;
		} else if ((val = long_value(argc, argv, &i, "--max-open"))) {
			if (number(val, 1, 1000000, &n))
				return bad("--max-open needs a number from 1 to 1000000", val);
			o->max_open = (unsigned)n;
		} else if ((val = long_value(argc, argv, &i, "--max-nodes"))) {
			if (number(val, 16, 1000000000, &n))
				return bad("--max-nodes needs a number from 16 to 1000000000", val);
			o->max_nodes = (size_t)n;
		} else if ((val = long_value(argc, argv, &i, "--io-uring"))) {
			if (strcmp(val, "auto") == 0)
				o->io_uring = IO_URING_AUTO;
			else if (strcmp(val, "on") == 0)
				o->io_uring = IO_URING_ON;
			else if (strcmp(val, "off") == 0)
				o->io_uring = IO_URING_OFF;
			else
				return bad("--io-uring needs auto, on or off", val);
		} else if ((val = long_value(argc, argv, &i, "--readdirplus"))) {
			if (strcmp(val, "small") == 0)
				o->readdirplus = RDP_SMALL;
			else if (strcmp(val, "auto") == 0)
				o->readdirplus = RDP_AUTO;
			else if (strcmp(val, "always") == 0)
				o->readdirplus = RDP_ALWAYS;
			else
				return bad("--readdirplus needs small, auto or always", val);
		} else if ((val = long_value(argc, argv, &i, "--push-ahead"))) {
			if (val == MISSING || parse_size(val, &o->push_ahead))
				return bad("--push-ahead needs a size like 64M (0: off)", val);
		} else if ((val = long_value(argc, argv, &i, "--index-dir"))) {
			if (val == MISSING || !*val)
				return bad("--index-dir needs a directory", NULL);
			o->index_dir = val;
		} else if ((val = long_value(argc, argv, &i, "--ready-fd"))) {
			if (number(val, 0, INT_MAX, &n) || fcntl((int)n, F_GETFD) < 0)
				return bad("--ready-fd needs an open file descriptor number", val);
			o->ready_fd = (int)n;
		} else if (a[0] == '-' && a[1]) {
			return bad("unknown option", a);
		} else if (!o->src) {
			o->src = a;
		} else if (!o->mnt) {
			o->mnt = a;
		} else {
			return bad("too many arguments", a);
		}
	}
	if (o->help || o->version)
		return 0;
	if (!o->src || !o->mnt)
		return bad("missing SRC and MNT", NULL);
	return 0;
}
