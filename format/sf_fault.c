/* The SIGBUS guard around code that reads mapped source bytes (sf_fault.h). */
#include "sf_fault.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sf_buf.h"
#include "sf_map.h"
#include "sf_read.h"
#include "sf_view.h"

#define FRESH_MAX 16

struct guard {
	sigjmp_buf env;
	struct guard *up;        /* the guard this one runs inside */
	struct sf_view *view;
	struct sf_map *map;
	const void *volatile addr; /* where the fault was */
	/* Buffers made under this guard whose maker still holds its
	 * reference (it has not dropped one yet): a fault drops it for the
	 * maker, who is jumped over. Past FRESH_MAX, a fault leaks them. */
	struct sf_buf *fresh[FRESH_MAX];
	size_t nfresh;
	/* The same for the bytes of strings being built in frames the jump
	 * would skip (sf_guard_note_grow). */
	void *raw[FRESH_MAX];
	size_t nraw;
};

/* The innermost guard of this thread, NULL when none is armed. */
static _Thread_local struct guard *volatile armed;

static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static uintptr_t page_size;

void sf_guard_note_new(struct sf_buf *b)
{
	struct guard *g = armed;
	if (g && g->nfresh < FRESH_MAX)
		g->fresh[g->nfresh++] = b;
}

void sf_guard_note_unref(struct sf_buf *b)
{
	/* the first reference dropped is the maker's own, or one it handed
	 * on and that is now spent: either way no longer the guard's to drop */
	for (struct guard *g = armed; g; g = g->up)
		for (size_t i = 0; i < g->nfresh; i++)
			if (g->fresh[i] == b) {
				g->fresh[i] = g->fresh[--g->nfresh];
				return;
			}
}

void sf_guard_note_grow(const void *owner, void *old, void *now)
{
	struct guard *g = armed;
	if (old) {
		for (; g; g = g->up)
			for (size_t i = 0; i < g->nraw; i++)
				if (g->raw[i] == old) {
					g->raw[i] = now;
					return;
				}
		return;
	}
	/* only strings of the frames between the guard and here (the stack
	 * grows down): a string kept elsewhere outlives the jump */
	uintptr_t at = (uintptr_t)owner;
	if (g && g->nraw < FRESH_MAX && at < (uintptr_t)g &&
	    at > (uintptr_t)__builtin_frame_address(0))
		g->raw[g->nraw++] = now;
}

void sf_guard_note_gone(void *p)
{
	for (struct guard *g = armed; p && g; g = g->up)
		for (size_t i = 0; i < g->nraw; i++)
			if (g->raw[i] == p) {
				g->raw[i] = g->raw[--g->nraw];
				return;
			}
}

static bool in_map(const struct sf_map *m, uintptr_t a)
{
	/* the last page is mapped whole: past the file's end it faults too */
	uintptr_t lo = (uintptr_t)m->data;
	return m->data && a >= lo && a - lo < ((m->size + page_size - 1) & ~(page_size - 1));
}

static bool covers(const struct guard *g, uintptr_t a)
{
	for (; g; g = g->up) {
		if (!g->view && !g->map)
			return true;
		if (g->map && in_map(g->map, a))
			return true;
		for (size_t i = 0; g->view && i < g->view->nmaps; i++)
			if (in_map(g->view->maps[i], a))
				return true;
	}
	return false;
}

/* Only SIGBUS: reading a PROT_READ file mapping raises nothing else, and a
 * SIGSEGV is a bug of ours that must not be papered over. */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	struct guard *g = armed;
	if (g && covers(g, (uintptr_t)si->si_addr)) {
		g->addr = si->si_addr;
		/* to the innermost guard: it undoes what it set up (a cache
		 * placeholder) and returns an error to the code around it */
		siglongjmp(g->env, 1);
	}
	/* not ours: what was there before (a sanitizer's report, or the
	 * default action, which the faulting access raises again) */
	if (previous.sa_flags & SA_SIGINFO) {
		previous.sa_sigaction(sig, si, uc);
	} else if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
		signal(sig, SIG_DFL);
	} else {
		previous.sa_handler(sig);
	}
}

static void install(void)
{
	page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigbus;
	/* SA_NODEFER: the jump leaves the handler without restoring the
	 * signal mask, so SIGBUS must not be blocked while it runs */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &previous);
}

/* Views of a few mappings: each is checked (a fstat apiece). A fold of a
 * thousand tars: its index only; what it serves of the tars is served
 * zero-copy and checked as it is read (sf_file_read). */
#define CHECK_ALL_MAX 8

static int check(struct sf_view *v, struct sf_map *m, struct sf_err *e)
{
	if (m)
		return sf_map_check(m, e);
	if (!v)
		return 0;
	if (v->nmaps > CHECK_ALL_MAX)
		return v->source ? sf_map_check(v->source, e) : 0;
	return sf_view_check(v, e);
}

/* A SIGBUS raised while blocked kills the process whatever the handler,
 * and request threads are started with every signal blocked (fs/transport/loop.c,
 * libfuse): each thread lets it through before its first guard. */
static void let_sigbus_through(void)
{
	static _Thread_local bool done;
	if (done)
		return;
	sigset_t bus;
	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
	done = true;
}

int sf_guard_run(struct sf_view *v, struct sf_map *m, sf_guarded_fn fn, void *ctx,
		 struct sf_err *e)
{
	pthread_once(&installed, install);
	let_sigbus_through();
	int rc = check(v, m, e);
	if (rc)
		return rc;
	struct guard g = { .up = armed, .view = v, .map = m };
	if (sigsetjmp(g.env, 0) == 0) {
		armed = &g;
		rc = fn(ctx, e);
		armed = g.up;
	} else {
		armed = g.up;
		for (size_t i = 0; i < g.nfresh; i++)
			sf_buf_unref(g.fresh[i]);
		for (size_t i = 0; i < g.nraw; i++)
			free(g.raw[i]);
		const struct sf_map *hit = v ? sf_view_map_at(v, g.addr) : m;
		if (hit && in_map(hit, (uintptr_t)g.addr))
			return sf_fail(e, -EIO, "%s: reading byte %llu of its mapping failed "
				       "(truncated or its storage fails)", hit->path,
				       (unsigned long long)((uintptr_t)g.addr - (uintptr_t)hit->data));
		return sf_fail(e, -EIO, "reading a source file failed (truncated or its storage fails)");
	}
	/* a page past a new end reads as zeros: what was read counts only if
	 * the files are still as mapped */
	int after = check(v, m, e);
	return after ? after : rc;
}

int sf_view_check(struct sf_view *v, struct sf_err *e)
{
	for (size_t i = 0; i < v->nmaps; i++) {
		int rc = sf_map_check(v->maps[i], e);
		if (rc)
			return rc;
	}
	return 0;
}

int sf_view_refused(struct sf_view *v, struct sf_err *e)
{
	/* a read of a fold must not look at each of its thousand tars */
	uint64_t now = sf_map_changes();
	if (atomic_load(&v->intact_at) == now)
		return 0;
	for (size_t i = 0; i < v->nmaps; i++)
		if (atomic_load(&v->maps[i]->changed))
			return sf_map_check(v->maps[i], e);
	atomic_store(&v->intact_at, now);
	return 0;
}

struct sf_map *sf_view_map_at(const struct sf_view *v, const void *p)
{
	/* maps are kept in address order (sf_view_hold_map) */
	uintptr_t a = (uintptr_t)p;
	size_t lo = 0, hi = v->nmaps;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if ((uintptr_t)v->maps[mid]->data <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	struct sf_map *m = v->maps[lo - 1];
	return a - (uintptr_t)m->data < m->size ? m : NULL;
}
