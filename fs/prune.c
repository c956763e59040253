#include "prune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "waits.h"

/* Entries asked to be dropped at a time, and the pause after each batch:
 * their FORGETs come back meanwhile, so the count is not read before they
 * could (which would ask for more than needed). Past the cap the tree is
 * brought down to seven eighths of it. */
#define BATCH 1024
#define PAUSE_NS 20000000L

static void pause_locked(struct prune *p)
{
	wait_at_most(&p->tree->crowded, &p->tree->lock, PAUSE_NS);
}

static void *run(void *arg)
{
	struct prune *p = arg;
	struct ftree *t = p->tree;
	struct fnode_leaf *batch = malloc(BATCH * sizeof *batch);
	pthread_mutex_lock(&t->lock);
	while (batch && !p->stop) {
		size_t maps = atomic_load(&t->src_maps);
		bool nodes_over = t->cap && t->live > t->cap;
		if (!nodes_over && !(t->maps_cap && maps > t->maps_cap)) {
			pthread_cond_wait(&t->crowded, &t->lock);
			continue;
		}
		size_t over = nodes_over ? t->live - (t->cap - t->cap / 8)
					 : maps - (t->maps_cap - t->maps_cap / 8);
		size_t want = over < BATCH ? over : BATCH;
		size_t k = fnode_oldest_leaves(t, batch, want);
		/* outside the lock: a request for these entries' directories,
		 * which the kernel may wait for before it drops them, may need it */
		pthread_mutex_unlock(&t->lock);
		for (size_t i = 0; i < k; i++) {
			/* ENOENT: the kernel had dropped it already */
			fuse_lowlevel_notify_inval_entry(p->se, batch[i].dir, batch[i].name,
							 strlen(batch[i].name));
			free(batch[i].name);
		}
		pthread_mutex_lock(&t->lock);
		if (!p->stop)
			pause_locked(p);
	}
	pthread_mutex_unlock(&t->lock);
	free(batch);
	return NULL;
}

int prune_start(struct prune *p, struct ftree *t, struct fuse_session *se)
{
	*p = (struct prune){ .tree = t, .se = se };
	if (!t->cap && !t->maps_cap)
		return 0;
	int rc = pthread_create(&p->thread, NULL, run, p);
	p->running = rc == 0;
	return -rc;
}

void prune_stop(struct prune *p)
{
	if (!p->running)
		return;
	pthread_mutex_lock(&p->tree->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->tree->crowded);
	pthread_mutex_unlock(&p->tree->lock);
	pthread_join(p->thread, NULL);
	p->running = false;
}
