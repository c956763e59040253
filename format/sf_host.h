/* What a host (the daemon, the C API, a tool) wants of the views it opens,
 * passed once at open (sf_open_args.host, sf_open_path): the cache views
 * read through, where long work is counted, and how members are read.
 * The format library keeps no state of a host's anywhere else: no global,
 * no thread-local passed between layers (docs/architecture.md). */
#ifndef SF_HOST_H
#define SF_HOST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct sf_cache;

/* Long work under way in a host's views, for the mount's stats.json: tars
 * whose headers are being walked to index them (a tar with no index), with
 * their bytes, the bytes and headers walked so far, and the walks done;
 * and what the charges that last hold, by kind. */
struct sf_progress {
	atomic_uint_fast64_t walking, bytes_to_walk, bytes_walked, headers_walked;
	atomic_uint_fast64_t walks_done;
	atomic_uint_fast64_t indexes_held, index_bytes_held; /* tx_walked.c */
	/* files' extents (sparse maps) and kept texts (sf_view.c); counted
	 * directories' tables (tatami blobs/, tat_blobdir.c) */
	atomic_uint_fast64_t file_bytes_held, table_bytes_held;
	/* files whose idle extents the cache dropped (sf_view.c file_drop) */
	atomic_uint_fast64_t files_dropped;
	/* decoded bytes a compressed tar's decoders ran through to reach the
	 * piece a read wanted (tx_z.c produce) */
	atomic_uint_fast64_t bytes_skipped;
};

/* Adds n (which may wrap: a subtraction) to a counter of `pr`, when the
 * host counts (pr not NULL). */
#define SF_PROGRESS_ADD(pr, field, n)                                          \
	do {                                                                   \
		struct sf_progress *pr_ = (pr);                                \
		if (pr_)                                                       \
			atomic_fetch_add(&pr_->field, (uint_fast64_t)(n));     \
	} while (0)

/* Lookups of stored members between drops of the mappings' pages from the
 * page tables, unless the host says otherwise (sf_host.drop_every). */
#define SF_DROP_EVERY 4096

struct sf_host {
	/* What the views read through once open (NULL: sf_nocache, decode
	 * on each get); the open itself reads through none. It outlives every
	 * view opened with it (a view may hold a charge for its life). */
	struct sf_cache *cache;
	/* Where the views count long work and what they hold (NULL: not
	 * counted); outlives every view opened with it. */
	struct sf_progress *progress;
	/* Lookups of stored members between drops of the mappings' pages
	 * (sf_map_drop_pages; a fold's listing and lookups touch a header
	 * apiece): 0 is SF_DROP_EVERY, which keeps the daemon's resident
	 * memory low; a host reading members itself drops less often, as each
	 * drop costs the next reads their page faults. */
	uint32_t drop_every;
	/* Files a format renders from the whole container (a fold's
	 * samples.jsonl) are kept whole once their size is counted, instead of
	 * rendered again for each read: for a host that reads them whole once
	 * (the Python module's Fold); the daemon's readers read pieces, and
	 * its memory is budgeted. */
	bool keep_generated;
	/* Indexes a lookup reads are copied whole on first use and kept (a
	 * fold's rows, 32 bytes a member, charged to the cache), so that a
	 * lookup makes no system call to read them: for a host that reads
	 * members at random itself (the Python module); the daemon copies
	 * rows as it reads them, its memory bounded per member. */
	bool keep_copies;
};

#endif
