/* The harness every libFuzzer target shares: puts the input where a format
 * finds it (a file in a private directory, or an in-memory map), opens it,
 * lists every directory and reads every file of the view, hidden .shardfs/
 * included, copying what each read returns so the sanitizers check every
 * byte. A target is a thin LLVMFuzzerTestOneInput that lays out its files
 * and calls these.
 *
 * Reads go through a per-walk memo cache (struct sf_cache): each part is
 * produced once per input, as under the daemon's cache, not once per file
 * that shows it. Failures are remembered too (produce is deterministic).
 * The memo keeps at most FUZZ_MEMO_BYTES; parts beyond that are produced
 * and not kept.
 *
 * The work of one walk is capped so that a hostile input cannot make one
 * iteration take seconds: at most FUZZ_MAX_NODES nodes visited, FUZZ_MAX_FILES
 * files read and FUZZ_MAX_BYTES bytes read; a file longer than
 * FUZZ_FILE_BYTES is read at its head and its tail only. */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "sf_format.h"
#include "sf_view.h"

#define FUZZ_MEMO_BYTES (64u << 20)
#define FUZZ_MAX_NODES 20000
#define FUZZ_MAX_FILES 4096
#define FUZZ_MAX_BYTES (64u << 20)
#define FUZZ_FILE_BYTES (8u << 20)
#define FUZZ_MAX_DEPTH 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a target may vary; a NULL or zeroed struct means the defaults. */
struct fuzz_walk {
	/* Read each file in pieces of this many bytes (so reads starting
	 * inside an extent or element are covered); 0: in one read. */
	uint64_t piece;
	/* Names looked up in the view root (and the subtree found read)
	 * before the root is listed: formats with a lookup hook (taridx flat
	 * names) resolve these without populating. */
	const char *const *lookups;
	size_t nlookups;
};

/* This process's private directory (made on first use, removed at exit). */
const char *fuzz_dir(void);
/* Makes fuzz_dir()/rel and its parents. */
void fuzz_mkdirs(const char *rel);
/* Writes n bytes as fuzz_dir()/rel (replacing it). Aborts on failure. */
void fuzz_put(const char *rel, const void *p, size_t n);

/* Lists and reads a view, within the caps above. Does not drop the view. */
void fuzz_walk_view(struct sf_view *v, const struct fuzz_walk *w);
/* Opens fuzz_dir()/rel as the tools do (sf_open_path) and walks it.
 * Returns the open's result. */
int fuzz_open_walk(const char *rel, const struct fuzz_walk *w);
/* The common case: the input is one container named file_name, alone in
 * the private directory. */
int fuzz_open_and_walk(const uint8_t *data, size_t size, const char *file_name,
		       const struct fuzz_walk *w);
/* The input as a container opened by `fmt` from an in-memory map (no file
 * system, no siblings). */
int fuzz_open_map_and_walk(const struct sf_format *fmt, const uint8_t *data, size_t size,
			   const char *file_name, const struct fuzz_walk *w);

#endif
