/* The request loop: a pool of threads taking requests from the FUSE device
 * in turn, the one waiting for the next request polling for it briefly
 * before it sleeps. */
#ifndef FS_LOOP_H
#define FS_LOOP_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

/* Serves `se` until it exits (unmount, or a signal through libfuse's
 * handlers) with at most `threads` request threads; the waiting thread
 * polls for `spin_us` microseconds before it sleeps. Returns 0, or a
 * negative errno when the device failed. */
int loop_run(struct fuse_session *se, unsigned threads, unsigned spin_us);

/* Called by a request handler before work that may take long or wait for
 * other requests: another thread waits for the next request meanwhile.
 * Does nothing the second time within a request, or outside the loop. */
void loop_hand_off(void);

#endif
