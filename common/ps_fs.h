/* ps_fs: file-system helpers shared by the servers and workers. */
#ifndef PS_FS_H
#define PS_FS_H

#include "ps_status.h"

/* mkdir -p: creates path and its missing parents (mode 0755); existing ones are fine.
 * PS_ERR_IO on failure, with errno from the mkdir that failed (ENAMETOOLONG for a path of
 * PATH_MAX bytes or more), so callers can report strerror(errno). */
ps_status ps_mkdir_p(const char *path);

#endif
