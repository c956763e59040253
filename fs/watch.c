#include "watch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "sf_buf.h"
#include "sf_format.h"
#include "sf_open.h"
#include "srcnode.h"

/* IN_MODIFY: a file truncated or written in place (truncate(2) raises
 * nothing else) */
#define EVENTS (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | \
		IN_MODIFY | IN_ATTRIB | IN_ONLYDIR)

/* What a watch descriptor stands for: the directory's inode as the kernel
 * knows it, and its path in SRC (formats match names by directory). An
 * inode number that outlives its fnode is harmless: the kernel ignores
 * notifications for nodes it does not know. */
struct wdir {
	fuse_ino_t ino;
	char *rel;
};

void watch_init(struct watch *w)
{
	*w = (struct watch){ .src_fd = -1, .fd = -1, .stop = { -1, -1 } };
	pthread_mutex_init(&w->lock, NULL);
}

void watch_dir(struct watch *w, struct fnode *node)
{
	struct src_dir *dir = src_dir_of(node);
	if (w->fd < 0 || atomic_load(&dir->watched))
		return;
	/* resolved beneath SRC as every path is (inotify would follow a
	 * symlink swapped in, or cross into a mount: maybe this very one), then
	 * watched through the directory's descriptor */
	struct sf_err e;
	int dfd = sf_open_beneath(w->src_fd, dir->s.rel, SF_WANT_DIR, dir->s.rel, &e);
	if (dfd < 0)
		return;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", dfd);
	/* added outside the lock: adding checks the caller's access, which a
	 * network filesystem may ask its server about. A watch removed
	 * meanwhile may have been this one (the directory's older node
	 * forgotten): it is added again, a few times at most (the last one
	 * kept may be gone: the one-second timeout still holds) */
	int wd;
	for (int tries = 0;; tries++) {
		unsigned long removed = atomic_load(&w->removed);
		wd = inotify_add_watch(w->fd, path, EVENTS);
		pthread_mutex_lock(&w->lock);
		if (wd < 0 || atomic_load(&w->removed) == removed || tries == 3)
			break;
		pthread_mutex_unlock(&w->lock);
	}
	close(dfd);
	if (wd < 0) {
		/* over the watch limit: the timeout still applies */
		pthread_mutex_unlock(&w->lock);
		return;
	}
	size_t had = w->ndirs;
	/* indexed by watch number: the slots grown are empty */
	if (sf_grow(&w->dirs, &w->ndirs, (size_t)wd, sizeof *w->dirs, 16) == 0)
		memset(w->dirs + had, 0, (w->ndirs - had) * sizeof *w->dirs);
	if ((size_t)wd < w->ndirs) {
		/* the same directory seen through a newer fnode takes it over */
		char *rel = strdup(dir->s.rel);
		if (rel) {
			free(w->dirs[wd].rel);
			w->dirs[wd].rel = rel;
			w->dirs[wd].ino = fnode_ino(node);
			dir->wd = wd;
			atomic_store(&dir->watched, true);
		}
	}
	pthread_mutex_unlock(&w->lock);
}

void watch_forget(void *arg, const struct fnode *dir)
{
	struct watch *w = arg;
	pthread_mutex_lock(&w->lock);
	size_t wd = (size_t)src_dir_of(dir)->wd;
	bool owner = w->fd >= 0 && wd < w->ndirs && w->dirs[wd].rel &&
		     w->dirs[wd].ino == fnode_ino(dir);
	if (owner) {
		free(w->dirs[wd].rel);
		w->dirs[wd].rel = NULL;
		inotify_rm_watch(w->fd, (int)wd);
		atomic_fetch_add(&w->removed, 1);
	}
	pthread_mutex_unlock(&w->lock);
}

static void inval(struct watch *w, fuse_ino_t dir, const char *name, size_t len)
{
	/* ENOENT: the kernel has no such entry cached, nothing to drop */
	fuse_lowlevel_notify_inval_entry(w->se, dir, name, len);
}

/* Drops the kernel's entries for `name` and for the views a container of
 * that name would have beside it; whether a format claims the name. */
static bool changed(struct watch *w, const struct wdir *d, const char *name)
{
	inval(w, d->ino, name, strlen(name));
	const struct sf_format *f = sf_format_for(d->rel, name);
	if (!f)
		return false;
	size_t stem = strlen(name) - strlen(f->ext);
	if (stem)
		inval(w, d->ino, name, stem);
	char dotd[NAME_MAX + 3];
	if (snprintf(dotd, sizeof dotd, "%s.d", name) < (int)sizeof dotd)
		inval(w, d->ino, dotd, strlen(dotd));
	return true;
}

static void handle(struct watch *w, const struct inotify_event *ev)
{
	if (ev->mask & IN_IGNORED) {
		pthread_mutex_lock(&w->lock);
		if (ev->wd >= 0 && (size_t)ev->wd < w->ndirs) {
			free(w->dirs[ev->wd].rel);
			w->dirs[ev->wd].rel = NULL;
		}
		pthread_mutex_unlock(&w->lock);
		return;
	}
	if (!ev->len || ev->wd < 0)
		return;
	struct wdir d = { 0 };
	pthread_mutex_lock(&w->lock);
	if ((size_t)ev->wd < w->ndirs && w->dirs[ev->wd].rel) {
		d.ino = w->dirs[ev->wd].ino;
		d.rel = strdup(w->dirs[ev->wd].rel);
	}
	pthread_mutex_unlock(&w->lock);
	/* notified outside the lock: the kernel may call back into the
	 * daemon while it drops the entries */
	if (d.rel && changed(w, &d, ev->name) && w->gone &&
	    (ev->mask & (IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)))
		w->gone(w->gone_arg, d.ino, ev->name);
	free(d.rel);
}

static void *run(void *arg)
{
	struct watch *w = arg;
	char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd p[2] = { { w->fd, POLLIN, 0 }, { w->stop[0], POLLIN, 0 } };
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		ssize_t n = read(w->fd, buf, sizeof buf);
		if (n <= 0) {
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			break;
		}
		for (char *q = buf; q < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)q;
			handle(w, ev);
			q += sizeof *ev + ev->len;
		}
	}
	return NULL;
}

int watch_start(struct watch *w, struct fuse_session *se, int src_fd)
{
	w->se = se;
	w->src_fd = src_fd;
	w->fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (w->fd < 0 || pipe2(w->stop, O_CLOEXEC) < 0) {
		int rc = -errno;
		watch_stop(w);
		return rc ? rc : -ENOMEM;
	}
	if (pthread_create(&w->thread, NULL, run, w) != 0) {
		watch_stop(w);
		return -EAGAIN;
	}
	w->running = true;
	return 0;
}

void watch_stop(struct watch *w)
{
	if (w->running) {
		if (write(w->stop[1], "x", 1) < 0)
			pthread_cancel(w->thread);
		pthread_join(w->thread, NULL);
		w->running = false;
	}
	for (int i = 0; i < 2; i++)
		if (w->stop[i] >= 0) {
			close(w->stop[i]);
			w->stop[i] = -1;
		}
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].rel);
	free(w->dirs);
	w->dirs = NULL;
	w->ndirs = 0;
}
