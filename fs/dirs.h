/* Listing directories (fs/dirs.c). */
#ifndef FS_DIRS_H
#define FS_DIRS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

struct daemon;
struct fnode;
struct listing;
struct sf_dirent;
struct sf_node;

/* What a directory handle lists, decided below the handlers (and tested
 * without a mount, tests/unit/test_daemon.c). */
struct dirsnap;
/* An entry a handle lists. */
struct dent {
	char *name;
	unsigned char type; /* DT_* */
	ino_t ino;
	struct sf_node *vn; /* in a view: the node listed, if made */
};
/* Whether taking dir's snapshot makes system calls on SRC (to be made in
 * a section at the source). */
bool dir_at_source(const struct fnode *dir);
/* The names a handle on `dir` lists from now on: ".", "..", then its own
 * (-ENOTDIR: no directory). */
int dirsnap_take(struct daemon *dm, struct fnode *dir, struct dirsnap **out);
void dirsnap_free(struct dirsnap *s);
/* Entry i of a handle (0 <= i < dent_count), its name borrowed (a view's
 * from `vd`, where a counted entry's name is written); a hidden view entry
 * has a NULL name, to be skipped. */
size_t dent_count(const struct dirsnap *s);
struct dent dent_at(const struct dirsnap *s, size_t i, struct sf_dirent *vd);
/* A readdirplus entry of `dir`: its node, with the lookup reference a
 * LOOKUP reply takes, and its attributes in *ep; NULL when the entry is
 * listed by name only. `*l` as for find_src (fs/names.h). */
struct fnode *plus_entry(struct daemon *dm, struct fnode *dir, const struct dent *d,
			 struct listing **l, struct fuse_entry_param *ep);

/* Frees the snapshots of handles the kernel never released (after the
 * session ended). */
void dirs_fini(struct daemon *dm);

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		struct fuse_file_info *fi);
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi);
void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif
