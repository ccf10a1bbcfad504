/* ps_fs: file-system helpers shared by the servers, the store and the workers. */
#ifndef PS_FS_H
#define PS_FS_H

#include <stdbool.h>
#include <stddef.h>

#include "ps_status.h"

/* mkdir -p: creates path and its missing parents (mode 0755); existing ones are fine.
 * PS_ERR_IO on failure, with errno from the mkdir that failed (ENAMETOOLONG for a path of
 * PATH_MAX bytes or more), so callers can report strerror(errno). */
ps_status ps_mkdir_p(const char *path);

/* rm -rf: removes path and everything under it, links not followed; a path that does not
 * exist is PS_OK. PS_ERR_IO on failure, with errno from the removal that failed. */
ps_status ps_rm_rf(const char *path);

/* The canonical form of path (absolute, no symlinks, no "." or ".." components) into out, even
 * when its tail does not exist yet (a checkpoint about to be made): the longest existing
 * prefix goes through realpath and the missing components are appended as they are. A ".."
 * component anywhere is refused (PS_ERR_INVALID), so what is appended cannot climb back out of
 * the prefix. A relative path is taken from the working directory. PS_ERR_INVALID also when
 * the result does not fit in len, PS_ERR_IO when the existing prefix cannot be resolved. */
ps_status ps_path_canonical(const char *path, char *out, size_t len, ps_error *err);

/* cp from to, then fsync: PS_ERR_IO on failure, with errno from the call that failed (a
 * partial copy is left for the caller to remove or overwrite). */
ps_status ps_copy_file(const char *from, const char *to);

/* Writes len bytes of data to path atomically: into a temporary file beside it (path.tmpPID),
 * fsync'd, then renamed over path, so a reader sees the old content or the new, never part.
 * mode: the new file's permissions (0644 for checkpoint files; 0600 for secrets). exclusive:
 * path must not exist (PS_ERR_CONFLICT if it does), and it is created in place instead.
 * PS_ERR_INVALID for a path too long, PS_ERR_IO (errno kept) otherwise; err names the file
 * and the reason. Nothing is left behind on failure. */
ps_status ps_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                          bool exclusive, ps_error *err);

/* fsync of a directory (after a rename in it): PS_ERR_IO on failure, errno kept. */
ps_status ps_fsync_dir(const char *path);

/* Whether the canonical path lies in the canonical directory root (or is root itself). */
bool ps_path_within(const char *path, const char *root);

#endif
