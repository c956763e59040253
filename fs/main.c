/* shardfs SRC MNT: checks the command line, mounts, and runs the session. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sf_dcache.h"
#include "daemon.h"
#include "dirs.h"
#include "fnode.h"
#include "listing.h"
#include "ops.h"
#include "options.h"
#include "prune.h"
#include "push.h"
#include "reading.h"
#include "src.h"
#include "stats.h"
#include "transport.h"
#include "watch.h"

/* The readahead of the mount, in KiB: the largest read the kernel sends
 * (max_pages, 1 MiB), so sequential reads come in whole 1 MiB requests. */
#define READAHEAD_KB "1024"

/* The cache is short of room for a reader: idle views give theirs. */
static void press_views(void *views)
{
	openviews_press(views);
}

/* Freeing nodes that may close files of SRC runs in a section at the
 * source (fs/fnode.h): it always enters. */
static void forget_open(void *sections)
{
	section_open(sections, "forget", ".", NULL, false);
}

static void forget_close(void *sections)
{
	section_close(sections);
}

static int fail(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "shardfs: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
	return 1;
}

/* What the transport reports: its name and queue counters for stats.json,
 * and its problems to .shardfs/errors. */
static void transport_serving(void *stats, const char *name, atomic_uint_fast64_t *queues,
			      unsigned n)
{
	stats_set_transport(stats, name, queues, n);
}

static void transport_log(void *stats, const char *msg)
{
	errlog_add(stats, ".", msg);
}

/* A dead daemon leaves its mount answering ENOTCONN: say how to clear it. */
static int mountpoint_error(const char *mnt)
{
	/* ECONNABORTED: one that served over io_uring */
	if (errno == ENOTCONN || errno == ECONNABORTED)
		return fail("%s is a stale mount left by a daemon that died; "
			    "unmount it with 'fusermount3 -u %s' and try again", mnt, mnt);
	return fail("mount point %s: %s", mnt, strerror(errno));
}

/* MNT must be an empty directory that is not a dead mount. */
static int check_mountpoint(const char *mnt)
{
	struct stat st;
	if (stat(mnt, &st) < 0)
		return mountpoint_error(mnt);
	if (!S_ISDIR(st.st_mode))
		return fail("mount point %s is not a directory%s", mnt, "");
	DIR *d = opendir(mnt);
	if (!d)
		return mountpoint_error(mnt);
	struct dirent *de;
	bool empty = true;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = false;
	closedir(d);
	if (!empty)
		return fail("mount point %s is not empty%s", mnt, "");
	return 0;
}

static int check_src(const char *src, char **abs)
{
	struct stat st;
	if (stat(src, &st) < 0)
		return fail("source %s: %s", src, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail("source %s is not a directory%s", src, "");
	*abs = realpath(src, NULL);
	if (!*abs)
		return fail("source %s: %s", src, strerror(errno));
	return 0;
}

/* MNT inside SRC (or SRC itself) would put the mount in its own tree:
 * every look at it from SRC's side would wait on this daemon. Each of
 * MNT's directories up to "/" is compared with SRC by device and inode,
 * which also sees SRC reached under another name (a bind mount). */
static int check_not_inside(const char *src, const char *mnt_abs)
{
	struct stat s, d;
	if (stat(src, &s) < 0)
		return fail("source %s: %s", src, strerror(errno));
	char *p = strdup(mnt_abs);
	if (!p)
		return fail("out of memory%s%s", "", "");
	bool inside = false;
	for (char *slash; !inside; *slash = 0) {
		inside = stat(p[0] ? p : "/", &d) == 0 && d.st_dev == s.st_dev && d.st_ino == s.st_ino;
		if (!p[0] || !(slash = strrchr(p, '/')))
			break;
	}
	free(p);
	if (inside)
		return fail("mount point %s is inside the source %s: the daemon would wait on "
			    "its own mount; choose a mount point outside it", mnt_abs, src);
	return 0;
}

/* Builds the argv libfuse parses: our fixed options first, then the user's. */
static int fuse_argv(const struct options *o, const char *src, struct fuse_args *args)
{
	char *opts = NULL;
	/* a comma would end the fsname option early */
	const char *fsname = strchr(src, ',') ? "shardfs" : src;
	/* nosuid,nodev last, after the user's (the last of suid/nosuid wins):
	 * a set-user-ID file or a device node in SRC must not gain through
	 * the mount what a nosuid or nodev SRC denies (docs/security.md) */
	if (asprintf(&opts, "ro,default_permissions,subtype=shardfs,fsname=%s%s%s,nosuid,nodev",
		     fsname, o->fuse_opts ? "," : "", o->fuse_opts ? o->fuse_opts : "") < 0)
		return -1;
	int rc = fuse_opt_add_arg(args, "shardfs") || fuse_opt_add_arg(args, "-o") ||
		 fuse_opt_add_arg(args, opts) || (o->debug && fuse_opt_add_arg(args, "-d"));
	free(opts);
	return rc ? -1 : 0;
}

/* Many mappings and listings may be open at once. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* The descriptors open views may keep: half of what RLIMIT_NOFILE leaves
 * once a listing's batched checks (two batches of 64) and the daemon's own
 * (transport, inotify, a few dozen) have theirs, at least 16; the other
 * half is for SRC files being read and directories being listed
 * (docs/options.md). */
#define FDS_RESERVED 192
static size_t view_fd_share(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return SIZE_MAX;
	size_t n = (size_t)rl.rlim_cur;
	return n > FDS_RESERVED + 32 ? (n - FDS_RESERVED) / 2 : 16;
}

/* The mappings SRC files may hold from their lookup (no-open, fs/src.c):
 * half of the descriptors the views leave, and a quarter of the mappings
 * the kernel allows a process (vm.max_map_count), which views and the
 * decode cache need too. */
static size_t src_pin_max(void)
{
	size_t n = view_fd_share() / 2;
	unsigned long maps = 0;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
	if (!f || fscanf(f, "%lu", &maps) != 1)
		maps = 65530; /* the kernel's default */
	if (f)
		fclose(f);
	return n < maps / 4 ? n : maps / 4;
}

/* mountinfo writes a space, tab, newline or backslash in a path as \ooo. */
static bool same_mount_point(char *field, const char *path)
{
	char *w = field;
	for (const char *r = field; *r; w++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] && r[3]) {
			*w = (char)((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
			r += 4;
		} else {
			*w = *r++;
		}
	}
	*w = 0;
	return strcmp(field, path) == 0;
}

/* The kernel gives a FUSE mount 128 KiB of readahead whatever max_readahead
 * the daemon asks for, and sequential reads of big parts run much faster
 * with more. Only root may raise it; otherwise the default stays. */
static void raise_readahead(const char *mnt_abs)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return;
	char line[8192], point[4096];
	unsigned maj, min, dev_maj = 0, dev_min = 0;
	bool found = false;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, point) == 3 &&
		    same_mount_point(point, mnt_abs)) {
			/* the last one is on top */
			dev_maj = maj;
			dev_min = min;
			found = true;
		}
	fclose(f);
	char path[64];
	snprintf(path, sizeof path, "/sys/class/bdi/%u:%u/read_ahead_kb", dev_maj, dev_min);
	int fd = found ? open(path, O_WRONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		if (write(fd, READAHEAD_KB, strlen(READAHEAD_KB)) < 0)
			fprintf(stderr, "shardfs: cannot raise readahead: %s\n", strerror(errno));
		close(fd);
	}
}

int main(int argc, char **argv)
{
	struct options o;
	if (options_parse(argc, argv, &o)) {
		free(o.fuse_opts);
		return 2;
	}
	if (o.help) {
		options_usage(stdout);
		return 0;
	}
	if (o.version) {
		printf("shardfs %s (libfuse %s)\n", SHARDFS_VERSION, fuse_pkgversion());
		return 0;
	}
	char *src = NULL, *mnt_abs = NULL;
	int rc = 1;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	bool mounted = false, handlers = false;
	struct daemon dm = { .src_fd = -1, .index_fd = -1, .view_cache = &sf_nocache };
	struct prune prune = { 0 };
	atomic_init(&dm.residency_visible, -1);
	stats_init(&dm.stats);
	dm.stats.sections.on_open = transport_section_open;
	dm.stats.sections.on_close = transport_section_close;
	watch_init(&dm.watch);
	openviews_init(&dm.views, &dm.stats);
	listings_init(&dm.listings);
	pthread_mutex_init(&dm.dirs_lock, NULL);

	if (check_src(o.src, &src) || check_mountpoint(o.mnt))
		goto out;
	/* resolved now: once mounted, looking at MNT would wait for ourselves;
	 * and mounted by its absolute path, because the unmount at SIGTERM or
	 * SIGINT comes after libfuse has changed to "/" */
	mnt_abs = realpath(o.mnt, NULL);
	if (!mnt_abs) {
		fail("mount point %s: %s", o.mnt, strerror(errno));
		goto out;
	}
	if (check_not_inside(src, mnt_abs))
		goto out;
	if (access("/dev/fuse", R_OK | W_OK) < 0) {
		fail("/dev/fuse is not available (%s): load the fuse module, or run the "
		     "container with --device /dev/fuse%s", strerror(errno), "");
		goto out;
	}
	char why[512];
	if (transport_check(&dm.transport, o.io_uring != IO_URING_OFF, o.io_uring == IO_URING_ON,
			    why, sizeof why)) {
		fail("--io-uring on: %s%s", why, "");
		goto out;
	}
	raise_fd_limit();
	/* A fixed threshold: decoded parts get their own mappings, returned to
	 * the system when evicted, instead of glibc raising the threshold and
	 * keeping freed parts in its arenas (resident memory over the budget). */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	/* No fastbins: a freed node (a view node's 112 bytes is one) merges
	 * with its free neighbours at once (past the 7 a size each thread's
	 * tcache keeps), and a free that reaches an arena's top trims it.
	 * Fastbin chunks stay apart until a consolidation, which merges them
	 * into the top but trims only the main arena's (malloc_trim never
	 * trims another's top): what a FORGET burst freed stayed resident
	 * there, 0-4 MiB from run to run after find of a 200,000-member fold
	 * (tests/scale/check.py). */
	mallopt(M_MXFAST, 0);
	dm.src_fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct sf_err e = { { 0 } };
	if (dm.src_fd < 0) {
		fail("source %s: %s", src, strerror(errno));
		goto out;
	}
	if (o.index_dir && (dm.index_fd = open(o.index_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		fail("--index-dir %s: %s", o.index_dir, strerror(errno));
		goto out;
	}
	dm.tree.dir_gone = watch_forget;
	dm.tree.dir_gone_arg = &dm.watch;
	dm.tree.open_section = forget_open;
	dm.tree.close_section = forget_close;
	dm.tree.section_arg = &dm.stats.sections;
	dm.tree.cap = o.max_nodes;
	if (src_init_root(&dm.tree, src, &e)) {
		fail("%s%s", e.msg, "");
		goto out;
	}
	dm.cache = sf_dcache_new(o.cache_size, &dm.stats.cache);
	if (!dm.cache || fuse_argv(&o, src, &args)) {
		fail("out of memory%s%s", "", "");
		goto out;
	}
	sf_dcache_on_slow(dm.cache, transport_hand_off);
	sf_dcache_on_short(dm.cache, press_views, &dm.views);
	dm.view_cache = sf_dcache_iface(dm.cache);
	dm.host = (struct sf_host){ .cache = dm.view_cache, .progress = &dm.stats.progress };
	se = fuse_session_new(&args, &shardfs_ops, sizeof shardfs_ops, &dm);
	if (!se) {
		fail("cannot start a FUSE session (bad -o option?)%s%s", "", "");
		goto out;
	}
	dm.se = se;
	/* a store waits for any READ of its pages: a single request thread
	 * could be the one owing it */
	dm.push_on_open = o.threads > 1;
	dm.no_open = o.no_open;
	dm.src_pin_max = src_pin_max();
	dm.tree.maps_cap = dm.src_pin_max;
	dm.readdirplus = o.readdirplus;
	/* SIGTERM and SIGINT unmount whatever disposition was inherited:
	 * libfuse installs its handlers only over the default, and a shell
	 * starts a background job (`shardfs -f SRC MNT &` in a script) with
	 * SIGINT ignored. SIGHUP keeps the inherited one (nohup). */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (fuse_set_signal_handlers(se)) {
		fail("cannot install signal handlers%s%s", "", "");
		goto out;
	}
	handlers = true;
	/* The kernel mount exists once this returns, so a script may use MNT
	 * as soon as we (or our parent, when daemonized) exit. */
	if (fuse_session_mount(se, mnt_abs)) {
		fail("cannot mount on %s%s", o.mnt, "");
		goto out;
	}
	mounted = true;
	const struct transport_host host = { .arg = &dm.stats, .serving = transport_serving,
					     .log = transport_log,
					     .device_requests = &dm.stats.device_requests,
					     .polls_skipped = &dm.stats.polls_skipped };
	if (transport_attach(&dm.transport, se, o.threads, &host)) {
		fail("cannot take over the FUSE device%s%s", "", "");
		goto out;
	}
	/* a script waiting on --ready-fd may use MNT now */
	if (o.ready_fd >= 0) {
		if (write(o.ready_fd, "ready\n", 6) < 0)
			fprintf(stderr, "shardfs: --ready-fd: %s\n", strerror(errno));
		close(o.ready_fd);
	}
	raise_readahead(mnt_abs);
	if (fuse_daemonize(o.foreground)) {
		fail("cannot daemonize%s%s", "", "");
		goto out;
	}
	/* after daemonizing: a thread would not survive the fork. Stderr is
	 * gone then: what is missing goes to .shardfs/errors too. */
	if (openviews_start(&dm.views, se, o.max_open, view_fd_share())) {
		const char *no_closer = "no thread to close unused views: --max-open is not kept, all stay open";
		errlog_add(&dm.stats, ".", no_closer);
		if (o.foreground)
			fprintf(stderr, "shardfs: %s\n", no_closer);
	}
	if (prune_start(&prune, &dm.tree, se)) {
		const char *no_pruner = "no thread to keep inodes under --max-nodes: they are not capped";
		errlog_add(&dm.stats, ".", no_pruner);
		if (o.foreground)
			fprintf(stderr, "shardfs: %s\n", no_pruner);
	}
	if (dm.no_open) {
		/* no RELEASE tells of a view's last reader (fs/reading.h) */
		dm.watch.gone = views_gone_in;
		dm.watch.gone_arg = &dm;
	}
	int wrc = watch_start(&dm.watch, se, dm.src_fd);
	if (wrc) {
		char no_watch[160];
		snprintf(no_watch, sizeof no_watch,
			 "no inotify (%s): SRC changes show within a second", strerror(-wrc));
		errlog_add(&dm.stats, ".", no_watch);
		if (o.foreground)
			fprintf(stderr, "shardfs: %s\n", no_watch);
	}
	int prc = push_start(&dm, o.push_ahead);
	if (prc) {
		char no_push[120];
		snprintf(no_push, sizeof no_push, "no thread to push ahead (%s): --push-ahead is off",
			 strerror(-prc));
		errlog_add(&dm.stats, ".", no_push);
		if (o.foreground)
			fprintf(stderr, "shardfs: %s\n", no_push);
	}
	rc = transport_run(&dm.transport, o.threads, o.spin_us);
out:
	prune_stop(&prune);
	push_stop(&dm);
	openviews_stop(&dm.views);
	watch_stop(&dm.watch);
	if (mounted)
		fuse_session_unmount(se);
	if (handlers)
		fuse_remove_signal_handlers(se);
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	dirs_fini(&dm);
	fnode_fini(&dm.tree);
	listings_fini(&dm.listings);
	sf_dcache_free(dm.cache);
	stats_fini(&dm.stats);
	if (dm.src_fd >= 0)
		close(dm.src_fd);
	if (dm.index_fd >= 0)
		close(dm.index_fd);
	free(src);
	free(mnt_abs);
	free(o.fuse_opts);
	return rc;
}
