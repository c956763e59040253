/* The mode a view shows (fs/access.c): its container's, narrowed by every
 * file the view maps, so that no class of users gets more than it has on
 * each file, whoever owns them. */
#include <sys/stat.h>

#include "access.h"
#include "check.h"
#include "sf_map.h"
#include "sf_view_impl.h"

/* The mode a view of a container (uid 1, gid 10, `mode`) shows when it also
 * maps a file of owner `uid`, group `gid` and mode `fmode`. */
static mode_t narrowed(mode_t mode, uid_t uid, gid_t gid, mode_t fmode)
{
	struct sf_map container = { .st = { .st_uid = 1, .st_gid = 10, .st_mode = S_IFREG | mode } };
	struct sf_map side = { .st = { .st_uid = uid, .st_gid = gid, .st_mode = S_IFREG | fmode } };
	struct sf_map *maps[2] = { &container, &side };
	struct sf_view v = { .maps = maps, .nmaps = 2 };
	struct stat st = container.st;
	access_narrow(&st, &v);
	CHECK(S_ISREG(st.st_mode) && st.st_uid == 1 && st.st_gid == 10);
	return st.st_mode & 07777;
}

int main(void)
{
	/* same owner and group: the bits both have */
	CHECK_EQ_U(narrowed(0644, 1, 10, 0644), 0644);
	CHECK_EQ_U(narrowed(0644, 1, 10, 0600), 0600);
	CHECK_EQ_U(narrowed(0644, 1, 10, 0640), 0640);
	CHECK_EQ_U(narrowed(0640, 1, 10, 0604), 0600);
	/* another group: the container's group members may or may not be in
	 * it, so they get what both its group and others have */
	CHECK_EQ_U(narrowed(0644, 1, 20, 0640), 0600);
	CHECK_EQ_U(narrowed(0644, 1, 20, 0644), 0644);
	/* another owner: the view's owner has what the file's group and others
	 * both have; anyone else may be that owner */
	CHECK_EQ_U(narrowed(0644, 2, 10, 0600), 0000);
	CHECK_EQ_U(narrowed(0644, 2, 10, 0640), 0040);
	CHECK_EQ_U(narrowed(0644, 2, 10, 0644), 0444);
	CHECK_EQ_U(narrowed(0644, 2, 20, 0640), 0000);
	CHECK_EQ_U(narrowed(0644, 2, 20, 0444), 0444);
	CHECK_EQ_U(narrowed(0755, 2, 20, 0755), 0555);
	CHECK_DONE();
}
