/* ps_store_snapshot: a consistent copy of a store's content, and putting one back.
 *
 * - A snapshot is a RocksDB checkpoint (hard links where the file system allows) taken right
 *   after a flush under the exclusive lock, so it holds every row as of that moment and costs
 *   little disk while the live files are unchanged.
 * - Restore never leaves a half-copied store: the snapshot is copied beside the data
 *   directory, the directories are swapped by rename, and on a failed reopen the previous
 *   content is put back. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_log.h"
#include "ps_store_int.h"

ps_status ps_store_snapshot(ps_store *s, const char *dir) {
  if (!s || !dir || !dir[0]) return PS_ERR_INVALID;
  struct stat sb;
  if (stat(dir, &sb) == 0) return PS_ERR_INVALID; /* must not exist */
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = store_flush_locked(s);
  if (st == PS_OK) {
    char *err = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(s->db, &err);
    if (!err) rocksdb_checkpoint_create(cp, dir, 0, &err);
    if (err) st = store_rdb_log("checkpoint", err);
    if (cp) rocksdb_checkpoint_object_destroy(cp);
  }
  pthread_rwlock_unlock(&s->lock);
  if (st == PS_OK) PS_INFO("store %s: snapshot at %s", s->path, dir);
  return st;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}
static int rm_rf(const char *p) { return nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

ps_status ps_store_snapshot_remove(const char *dir) {
  if (!dir || !dir[0]) return PS_ERR_INVALID;
  struct stat sb;
  if (lstat(dir, &sb) != 0) return errno == ENOENT ? PS_OK : PS_ERR_IO;
  return rm_rf(dir) == 0 ? PS_OK : PS_ERR_IO;
}

static int copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return -1;
  }
  char buf[1 << 16];
  ssize_t r;
  int rc = 0;
  while ((r = read(in, buf, sizeof(buf))) > 0) {
    for (ssize_t o = 0; o < r;) {
      ssize_t w = write(out, buf + o, (size_t)(r - o));
      if (w <= 0) {
        rc = -1;
        break;
      }
      o += w;
    }
    if (rc) break;
  }
  if (r < 0) rc = -1;
  if (fsync(out) != 0) rc = -1;
  close(in);
  if (close(out) != 0) rc = -1;
  return rc;
}

static const char *copy_root_src, *copy_root_dst;
static int copy_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)ftw;
  char dst[4096];
  if (snprintf(dst, sizeof(dst), "%s%s", copy_root_dst, p + strlen(copy_root_src)) >= (int)sizeof(dst))
    return -1;
  if (flag == FTW_D) return (mkdir(dst, 0755) == 0 || errno == EEXIST) ? 0 : -1;
  if (flag == FTW_F && S_ISREG(sb->st_mode)) return copy_file(p, dst);
  return 0;
}

/* Drops both tiers' state (store write-locked): closes RocksDB, frees the hot tier. */
static void unload(ps_store *s) {
  store_cold_close(s);
  store_hot_drop(s);
}

/* Opens the database at s->path again and registers its tables; logs a failure. */
static ps_status reload(ps_store *s) {
  ps_error err;
  ps_status st = store_tables_open(s, &err);
  if (st != PS_OK) PS_ERROR("%s", err.msg);
  return st;
}

/* Restore: copy the snapshot beside the data dir, close RocksDB, swap directories, reopen.
 * The live directory is replaced only once the copy is complete; on a failed reopen the old
 * one is put back. */
ps_status ps_store_restore(ps_store *s, const char *dir) {
  if (!s || !dir || !dir[0]) return PS_ERR_INVALID;
  char cur[4096];
  if (snprintf(cur, sizeof(cur), "%s/CURRENT", dir) >= (int)sizeof(cur)) return PS_ERR_INVALID;
  if (access(cur, R_OK) != 0) {
    PS_ERROR("restore: %s is not a snapshot (no CURRENT file)", dir);
    return PS_ERR_NOT_FOUND;
  }
  char tmp[4096], old[4096];
  snprintf(tmp, sizeof(tmp), "%s.restore-tmp", s->path);
  snprintf(old, sizeof(old), "%s.restore-old", s->path);
  rm_rf(tmp);
  rm_rf(old);
  static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER; /* nftw callbacks use globals */
  pthread_mutex_lock(&copy_mu);
  copy_root_src = dir;
  copy_root_dst = tmp;
  int rc = nftw(dir, copy_cb, 16, FTW_PHYS);
  pthread_mutex_unlock(&copy_mu);
  if (rc != 0) {
    PS_ERROR("restore: copying %s failed", dir);
    rm_rf(tmp);
    return PS_ERR_IO;
  }
  pthread_rwlock_wrlock(&s->lock);
  unload(s);
  ps_status st = PS_OK;
  if (rename(s->path, old) != 0 || rename(tmp, s->path) != 0) {
    PS_ERROR("restore: swapping %s failed: %s", s->path, strerror(errno));
    st = PS_ERR_IO;
  }
  if (st == PS_OK) st = reload(s);
  if (st != PS_OK) {
    unload(s);
    rm_rf(s->path);
    if (rename(old, s->path) == 0) {
      ps_status rs = reload(s);
      if (rs != PS_OK) PS_ERROR("restore: reopening the previous content failed too");
    }
  } else {
    rm_rf(old);
  }
  for (uint32_t p = 0; p < s->nparts; p++) rocksdb_writebatch_clear(s->parts[p].wb);
  pthread_rwlock_unlock(&s->lock);
  if (st == PS_OK) PS_INFO("store %s: restored from %s (%zu tables)", s->path, dir, s->ntables);
  return st;
}
