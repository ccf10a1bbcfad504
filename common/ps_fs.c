/* ps_fs: mkdir -p and rm -rf (ps_fs.h), shared by the server's data dir, the store's snapshots
 * and the worker's checkpoint dir, with errno kept for the caller's message. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "ps_fs.h"

#include <ftw.h>
#include <stdio.h>

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

ps_status ps_mkdir_p(const char *path) {
  char tmp[PATH_MAX];
  size_t n = strlen(path);
  if (n >= sizeof tmp) {
    errno = ENAMETOOLONG; /* what mkdir says of it, rather than creating a truncated path */
    return PS_ERR_IO;
  }
  memcpy(tmp, path, n + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return PS_ERR_IO;
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return PS_ERR_IO;
  return PS_OK;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

ps_status ps_rm_rf(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return errno == ENOENT ? PS_OK : PS_ERR_IO;
  return nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS) == 0 ? PS_OK : PS_ERR_IO;
}
