/* ps_fs: mkdir -p (ps_fs.h), shared by the server's data dir and the worker's checkpoint dir, with
 * errno kept for the caller's message. */
#include "ps_fs.h"

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
