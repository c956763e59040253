/* Requests at the source. Every request that may make a system call on SRC
 * (a lookup, an open, a read of mapped bytes, a listing, a decode) runs in a
 * section between section_open and section_close. The sections say which files
 * wait on the source and since when (stats.json's "stuck", lines of
 * .shardfs/errors), and tell the request loop how many of its threads the
 * source holds, so that requests needing no source always find a thread
 * (fs/transport/loop.h). A source that stops answering (a hard NFS mount whose server
 * is gone) then holds only the requests for its files. */
#ifndef FS_SECTION_H
#define FS_SECTION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* A request waits this long before it counts as stuck. */
#define STUCK_NS 1000000000ull
/* A request that would take the last thread waits this long at most for
 * another to leave the source, before it is refused: a burst of quick
 * requests (16 lookups of one user's loop) frees one in microseconds,
 * while a source that stopped answering keeps them. */
#define LAST_WAIT_NS 100000000L

struct section;

/* The sections of a mount's request threads (in struct stats). */
struct sections {
	pthread_mutex_t lock;   /* the list; each record's path has its own lock */
	struct section *head;
	pthread_key_t key;      /* unlinks a thread's record when it ends */
	/* the request loop's count of threads at the source (fs/transport/loop.h,
	 * set by main; NULL: not counted) */
	int (*on_open)(bool may_refuse);
	void (*on_close)(void);
	/* requests waiting for the last thread (LAST_WAIT_NS), woken as a
	 * section closes */
	pthread_mutex_t left_lock;
	pthread_cond_t left;
	atomic_uint waiting;
	atomic_uint_fast64_t last_waits; /* such waits, ever (stats.json) */
};

/* A request stuck at the source, as reported. */
struct stuck {
	char path[512];
	const char *op;
	struct timespec since;  /* wall clock */
	double seconds;
};

void sections_init(struct sections *w);
void sections_fini(struct sections *w);

/* Opens a section of this thread for a request `op` ("read", "lookup"...)
 * on `path` (relative to the mount root; `name` is appended when not NULL,
 * for a lookup in a directory). Sections nest: only the outermost one
 * counts. `may_refuse`: when the request loop has no thread left to give
 * the source and some request has been stuck there STUCK_NS or more,
 * returns -EIO instead, and -EBUSY when only its last thread is left
 * (fs/transport/loop.h) for LAST_WAIT_NS, with no section open (the request
 * is answered EIO); requests that cannot fail (FORGET, RELEASE) pass false
 * and always open one. */
int section_open(struct sections *w, const char *op, const char *path, const char *name,
		 bool may_refuse);
/* Closes it. */
void section_close(struct sections *w);

/* Up to `max` requests that have waited at least STUCK_NS, oldest first;
 * returns how many, and in *total how many are at the source now. */
size_t sections_stuck(struct sections *w, struct stuck *out, size_t max, size_t *total);

#endif
