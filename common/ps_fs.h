/* ps_fs: file-system helpers shared by the servers, the store and the workers. */
#ifndef PS_FS_H
#define PS_FS_H

#include "ps_status.h"

/* mkdir -p: creates path and its missing parents (mode 0755); existing ones are fine.
 * PS_ERR_IO on failure, with errno from the mkdir that failed (ENAMETOOLONG for a path of
 * PATH_MAX bytes or more), so callers can report strerror(errno). */
ps_status ps_mkdir_p(const char *path);

/* rm -rf: removes path and everything under it, links not followed; a path that does not
 * exist is PS_OK. PS_ERR_IO on failure, with errno from the removal that failed. */
ps_status ps_rm_rf(const char *path);

#endif
