/* ps_fs: mkdir -p and rm -rf (ps_fs.h), shared by the server's data dir, the store's snapshots
 * and the worker's checkpoint dir, with errno kept for the caller's message; and the canonical
 * form of a path that may not exist yet, for confining checkpoint paths; and the one atomic
 * file write (a temporary file, fsync, rename) of Ember. The canonical form is what the server
 * confines checkpoint paths with (realpath of the longest existing prefix, so a symlink
 * anywhere in it is followed; '..' is refused rather than resolved, so the part not yet made
 * cannot climb out). Also a file copy (synced), for the schema a checkpoint carries and
 * ps-export's copy of it. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "ps_fs.h"

#include <ftw.h>
#include <stdio.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

ps_status ps_path_canonical(const char *path, char *out, size_t len, ps_error *err) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return ps_error_set(err, PS_ERR_INVALID, "path of %zu bytes (1..%d)", n, PATH_MAX - 1);
  for (const char *c = path; *c;) { /* every component, "a//b" and a trailing "/" included */
    size_t cl = strcspn(c, "/");
    if (cl == 2 && c[0] == '.' && c[1] == '.')
      return ps_error_set(err, PS_ERR_INVALID, "'..' is not allowed in a path ('%s')", path);
    c += cl;
    c += strspn(c, "/");
  }
  memcpy(buf, path, n + 1);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
  /* Cut components off the end until what is left exists; the tail is what was cut. */
  char real[PATH_MAX];
  size_t cut = n;
  for (;;) {
    char save = buf[cut];
    buf[cut] = '\0';
    bool ok = realpath(cut ? buf : ".", real) != NULL;
    int e = errno;
    buf[cut] = save;
    if (ok) break;
    if ((e != ENOENT && e != ENOTDIR) || cut == 0)
      return ps_error_set(err, PS_ERR_IO, "resolving %s: %s", path, strerror(e));
    while (cut > 0 && buf[cut - 1] != '/') cut--; /* the last component */
    while (cut > 1 && buf[cut - 1] == '/') cut--; /* and its slashes ("/" stays) */
  }
  const char *tail = buf + cut;
  tail += strspn(tail, "/");
  size_t rl = strlen(real);
  int w = snprintf(out, len, "%s%s%s", real, (*tail && real[rl - 1] != '/') ? "/" : "", tail);
  if (w < 0 || (size_t)w >= len)
    return ps_error_set(err, PS_ERR_INVALID, "path %s is too long once resolved", path);
  /* "." components of the tail: a/./b is a/b. */
  char *d;
  while ((d = strstr(out, "/./")) != NULL) memmove(d, d + 2, strlen(d + 2) + 1);
  size_t ol = strlen(out);
  if (ol > 2 && strcmp(out + ol - 2, "/.") == 0) out[ol - 2] = '\0';
  while ((d = strstr(out, "//")) != NULL) memmove(d, d + 1, strlen(d + 1) + 1);
  return PS_OK;
}

bool ps_path_within(const char *path, const char *root) {
  size_t rl = strlen(root);
  if (rl == 1 && root[0] == '/') return path[0] == '/';
  return strncmp(path, root, rl) == 0 && (path[rl] == '\0' || path[rl] == '/');
}

ps_status ps_copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  char buf[8192];
  size_t n;
  int ok = in && out;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  if (in && ferror(in)) ok = 0;
  if (in) fclose(in);
  if (out && (fflush(out) != 0 || fsync(fileno(out)) != 0)) ok = 0;
  if (out && fclose(out) != 0) ok = 0;
  return ok ? PS_OK : PS_ERR_IO;
}

ps_status ps_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                          bool exclusive, ps_error *err) {
  char tmp[PATH_MAX + 32];
  if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return ps_error_set(err, PS_ERR_INVALID, "%s: path too long", path);
  const char *target = exclusive ? path : tmp;
  int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0600);
  if (fd < 0) {
    int e = errno;
    ps_status st = ps_error_set(err, e == EEXIST ? PS_ERR_CONFLICT : PS_ERR_IO,
                                "cannot create %s: %s", target, strerror(e));
    errno = e;
    return st;
  }
  bool ok = fchmod(fd, (mode_t)mode) == 0;
  for (size_t off = 0; ok && off < len;) {
    ssize_t w = write(fd, (const char *)data + off, len - off);
    if (w <= 0) ok = false;
    else off += (size_t)w;
  }
  if (ok) ok = fsync(fd) == 0;
  int e = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (ok && !exclusive && rename(tmp, path) != 0) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    unlink(target);
    ps_error_set(err, PS_ERR_IO, "cannot write %s: %s", path, strerror(e));
    errno = e;
    return PS_ERR_IO;
  }
  return PS_OK;
}

ps_status ps_fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PS_ERR_IO;
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  errno = e;
  return rc == 0 ? PS_OK : PS_ERR_IO;
}
