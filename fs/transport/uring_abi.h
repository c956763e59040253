/* The kernel's FUSE-over-io_uring ABI, as of Linux 6.14 (FUSE protocol
 * 7.42; unchanged through 6.18). Debian 12's <linux/fuse.h> is 7.38 and
 * does not have it, so the layouts are written down here, once. */
#ifndef FS_URING_ABI_H
#define FS_URING_ABI_H

#include <linux/fuse.h>
#include <stdint.h>

/* INIT flag (bit 41: bit 9 of flags2): the daemon serves requests through
 * io_uring queues; the kernel offers it only when fuse.enable_uring is on. */
#define URING_INIT_FLAG2 (1u << 9)

/* Each entry's first buffer: the request (and reply) headers. */
struct fuse_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;  /* to give back with the reply */
	uint32_t payload_sz; /* bytes in the payload buffer, both ways */
	uint32_t padding;
	uint64_t reserved;
};

struct fuse_uring_req_header {
	char in_out[128];    /* fuse_in_header in, fuse_out_header back */
	char op_in[128];     /* the operation's own header (fuse_read_in...) */
	struct fuse_uring_ent_in_out ring_ent_in_out;
};

/* sqe->cmd_op of an IORING_OP_URING_CMD on /dev/fuse */
enum {
	FUSE_IO_URING_CMD_REGISTER = 1,         /* give an entry to a queue */
	FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2, /* reply, and take the next */
};

/* In sqe->cmd (needs IORING_SETUP_SQE128). */
struct fuse_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;        /* the queue: the CPU whose requests it serves */
	uint8_t padding[6];
};

_Static_assert(sizeof(struct fuse_uring_req_header) == 288, "fuse_uring_req_header");
_Static_assert(sizeof(struct fuse_uring_cmd_req) == 24, "fuse_uring_cmd_req");

#endif
