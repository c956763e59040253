#include "access.h"


#include "sf_map.h"

/* What each class of a view's users (U its owner, members of group G,
 * others) may at most do with file f. A class whose members may stand in
 * several of f's classes gets only what all of those allow: U is in f's
 * group or not (unknown here), a member of G may be f's owner, and so on. */
static mode_t allowed(const struct stat *f, uid_t U, gid_t G)
{
	mode_t fu = (f->st_mode >> 6) & 7, fg = (f->st_mode >> 3) & 7, fo = f->st_mode & 7;
	mode_t maybe_owner = f->st_uid != U ? fu : 7;
	mode_t u = f->st_uid == U ? fu : fg & fo;
	mode_t g = (f->st_gid == G ? fg : fg & fo) & maybe_owner;
	mode_t o = (f->st_gid == G ? fo : fg & fo) & maybe_owner;
	return u << 6 | g << 3 | o;
}

void access_narrow(struct stat *st, const struct sf_view *v)
{
	for (size_t i = 0; i < sf_view_nmaps(v); i++)
		st->st_mode &= ~(mode_t)0777 |
			       allowed(&sf_view_map(v, i)->st, st->st_uid, st->st_gid);
}

bool access_unchanged(const struct sf_view *v)
{
	for (size_t i = 0; i < sf_view_nmaps(v); i++) {
		const struct sf_map *m = sf_view_map(v, i);
		struct stat now;
		/* the file the view maps, even renamed: a chmod changes it in place */
		if (fstat(m->fd, &now) == 0 && (now.st_uid != m->st.st_uid ||
		    now.st_gid != m->st.st_gid || now.st_mode != m->st.st_mode))
			return false;
	}
	return true;
}

void access_fill(const struct fnode *n, struct stat *st)
{
	const struct stat *was = fnode_st(n);
	st->st_uid = was->st_uid;
	st->st_gid = was->st_gid;
	n->ops->access(n, st);
}

void access_src(const struct fnode *n, struct stat *st)
{
	mode_t m = fnode_st(n)->st_mode & 0777;
	/* as every symlink of SRC; else no write, no set-id */
	mode_t perm = S_ISLNK(st->st_mode) ? 0777 : m & 0555;
	st->st_mode = (st->st_mode & S_IFMT) | perm;
}

void access_shown(const struct fnode *n, struct stat *st)
{
	mode_t r = fnode_st(n)->st_mode & 0444;
	mode_t perm = S_ISDIR(st->st_mode) ? r | r >> 2 : r;
	st->st_mode = (st->st_mode & S_IFMT) | perm;
}

bool access_can_read(const struct stat *st, uid_t uid, gid_t gid, const gid_t *groups, int ngroups)
{
	if (uid == 0)
		return true;
	if (uid == st->st_uid)
		return st->st_mode & S_IRUSR;
	/* as the kernel: a member of the group gets the group's bits only */
	bool member = gid == st->st_gid;
	for (int i = 0; i < ngroups && !member; i++)
		member = groups[i] == st->st_gid;
	return st->st_mode & (member ? S_IRGRP : S_IROTH);
}
