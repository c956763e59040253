/* The command line of shardfs. */
#ifndef FS_OPTIONS_H
#define FS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* --io-uring: FUSE over io_uring when the kernel allows it, always, never
 * (the default: docs/performance.md) */
enum io_uring_mode { IO_URING_AUTO, IO_URING_ON, IO_URING_OFF };

/* --readdirplus: which listing requests give names their attributes */
enum readdirplus {
	RDP_SMALL,  /* every one of a view directory of at most RDP_SMALL_MAX
		     * names, else as RDP_AUTO (the daemon decides: fs/dirs.c);
		     * the default */
	RDP_AUTO,   /* the kernel's automatic choice */
	RDP_ALWAYS, /* every one */
};
#define RDP_SMALL_MAX 16384

struct options {
	const char *src, *mnt;
	bool foreground, debug, help, version;
	uint64_t cache_size;
	unsigned threads;
	unsigned spin_us;   /* --spin-us: polling before the waiting thread sleeps */
	unsigned max_open;  /* --max-open: views kept open while unused */
	size_t max_nodes;   /* --max-nodes: inodes the kernel may make us hold */
	char *fuse_opts;   /* comma-joined -o options, or NULL */
	int ready_fd;      /* --ready-fd: gets "ready\n" once mounted; -1 if none */
	const char *index_dir; /* --index-dir: folds' indexes away from their tars */
	enum io_uring_mode io_uring;
	bool no_open;      /* the kernel opens files without asking (--open: off) */
	enum readdirplus readdirplus; /* --readdirplus */
	uint64_t push_ahead; /* --push-ahead: the window, bytes (0: off) */
};

/* Parses argv; on a bad command line prints one line to stderr and returns
 * non-zero. */
int options_parse(int argc, char **argv, struct options *o);
void options_usage(FILE *to);
/* "64M" -> 67108864; returns -1 on a malformed size. */
int parse_size(const char *s, uint64_t *out);

#endif
