/* ps_store_snapshot: a consistent copy of a store's content, and putting one back.
 *
 * - A snapshot is a RocksDB checkpoint (hard links where the file system allows) taken right
 *   after a flush under the exclusive lock, so it holds every row as of that moment and costs
 *   little disk while the live files are unchanged.
 * - Restore never leaves a half-copied store: the snapshot is copied beside the data
 *   directory (a delta's chain composed there, ps_store_chain.c), the directories are swapped
 *   by rename, and on a failed reopen the previous content is put back. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_store_int.h"

ps_status store_snapshot_locked(ps_store *s, const char *dir, ps_error *err) {
  ps_status st = store_flush_locked(s, err);
  if (st != PS_OK) return st;
  char *rerr = NULL;
  rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(s->db, &rerr);
  if (!rerr) rocksdb_checkpoint_create(cp, dir, 0, &rerr);
  if (rerr) {
    st = store_rdb_error(err, "checkpoint", rerr);
    ps_error_prefix(err, "snapshot %s: ", dir);
  }
  if (cp) rocksdb_checkpoint_object_destroy(cp);
  return st;
}

ps_status ps_store_snapshot(ps_store *s, const char *dir, ps_error *err) {
  if (!s || !dir || !dir[0]) return ps_error_set(err, PS_ERR_INVALID, "snapshot: no store or dir");
  struct stat sb;
  if (stat(dir, &sb) == 0)
    return ps_error_set(err, PS_ERR_INVALID, "snapshot: %s already exists", dir);
  ps_error local;
  if (!err) err = &local;
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = store_snapshot_locked(s, dir, err);
  pthread_rwlock_unlock(&s->lock);
  if (st == PS_OK) PS_INFO("store %s: snapshot at %s", s->path, dir);
  return st;
}

static int rm_rf(const char *p) { return ps_rm_rf(p) == PS_OK ? 0 : -1; }

ps_status ps_store_snapshot_remove(const char *dir, ps_error *err) {
  if (!dir || !dir[0]) return ps_error_set(err, PS_ERR_INVALID, "removing a snapshot: no dir");
  if (ps_rm_rf(dir) != PS_OK) /* a dir that is not there is PS_OK */
    return ps_error_set(err, PS_ERR_IO, "removing snapshot %s: %s", dir, strerror(errno));
  return PS_OK;
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
static bool copy_link;
static int copy_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  char dst[4096];
  if (snprintf(dst, sizeof(dst), "%s%s", copy_root_dst, p + strlen(copy_root_src)) >= (int)sizeof(dst))
    return -1;
  if (flag == FTW_D) return (mkdir(dst, 0755) == 0 || errno == EEXIST) ? 0 : -1;
  if (flag != FTW_F || !S_ISREG(sb->st_mode)) return 0;
  /* RocksDB never changes an SST file once written, so a link shares it safely; every other
   * file (MANIFEST, WAL, OPTIONS, CURRENT) is copied, since opening a database writable may
   * append to or truncate them. */
  size_t n = strlen(p + ftw->base);
  if (copy_link && n > 4 && !strcmp(p + ftw->base + n - 4, ".sst") && link(p, dst) == 0) return 0;
  return copy_file(p, dst);
}

ps_status store_copy_tree(const char *src, const char *dst, bool link_sst, ps_error *err) {
  static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER; /* nftw callbacks use globals */
  pthread_mutex_lock(&copy_mu);
  copy_root_src = src;
  copy_root_dst = dst;
  copy_link = link_sst;
  int rc = nftw(src, copy_cb, 16, FTW_PHYS);
  pthread_mutex_unlock(&copy_mu);
  if (rc == 0) return PS_OK;
  ps_error_set(err, PS_ERR_IO, "copying %s to %s failed: %s", src, dst, strerror(errno));
  rm_rf(dst);
  return PS_ERR_IO;
}

/* Drops both tiers' state (store write-locked): closes RocksDB, frees the hot tier. */
static void unload(ps_store *s) {
  store_cold_close(s);
  store_hot_drop(s);
}

/* Restore: copy the snapshot beside the data dir, close RocksDB, swap directories, reopen.
 * The live directory is replaced only once the copy is complete; on a failed reopen the old
 * one is put back. */
ps_status ps_store_restore(ps_store *s, const char *dir, ps_error *err) {
  if (!s || !dir || !dir[0]) return ps_error_set(err, PS_ERR_INVALID, "restore: no store or dir");
  char tmp[4096], old[4096];
  snprintf(tmp, sizeof(tmp), "%s.restore-tmp", s->path);
  snprintf(old, sizeof(old), "%s.restore-old", s->path);
  rm_rf(tmp);
  rm_rf(old);
  /* A delta's chain is composed into tmp (base copied, deltas applied); a full snapshot is
   * just copied. */
  store_ckpt_ref head = {0};
  ps_status cst = store_chain_compose(dir, tmp, false, &head, err);
  if (cst != PS_OK) {
    rm_rf(tmp);
    ps_error_prefix(err, "restore: ");
    return cst;
  }
  ps_error local;
  if (!err) err = &local;
  pthread_rwlock_wrlock(&s->lock);
  /* The rows changed since the last flush go to RocksDB first, so that a restore that fails
   * halfway puts back exactly the content it found (a successful one replaces them anyway). */
  ps_status st = store_flush_locked(s, err);
  if (st != PS_OK) {
    pthread_rwlock_unlock(&s->lock);
    rm_rf(tmp);
    store_ckpt_ref_clear(&head);
    return ps_error_prefix(err, "restore: writing back the live rows first: ");
  }
  unload(s);
  /* Which renames happened decides what a failure puts back: the live directory is removed
   * only once it has been moved aside (a failed first rename leaves it where it is). */
  bool moved_old = false, moved_new = false;
  if (rename(s->path, old) != 0)
    st = ps_error_set(err, PS_ERR_IO, "restore: moving %s aside failed: %s", s->path,
                      strerror(errno));
  else if (moved_old = true, rename(tmp, s->path) != 0)
    st = ps_error_set(err, PS_ERR_IO, "restore: swapping %s failed: %s", s->path, strerror(errno));
  else
    moved_new = true;
  if (st == PS_OK && (st = store_tables_open(s, err)) != PS_OK)
    ps_error_prefix(err, "restore from %s: ", dir);
  if (st != PS_OK) {
    unload(s);
    if (moved_new) rm_rf(s->path);
    else rm_rf(tmp);
    ps_error back;
    ps_error_clear(&back);
    bool in_place = !moved_old || rename(old, s->path) == 0;
    if (!in_place)
      ps_error_set(&back, PS_ERR_IO, "moving %s back failed: %s", old, strerror(errno));
    if (!in_place || store_tables_open(s, &back) != PS_OK) {
      char first[PS_ERROR_MSG_MAX];
      snprintf(first, sizeof first, "%s", err->msg);
      ps_error_set(err, st, "%s; reopening the previous content failed too: %s", first, back.msg);
    }
  } else {
    rm_rf(old);
  }
  for (uint32_t p = 0; p < s->nparts; p++) rocksdb_writebatch_clear(s->parts[p].wb);
  /* The changes tracked so far were against the content just replaced (or dropped with the
   * hot tier): the restored checkpoint is the next delta's base, or none on failure. */
  store_track_reset(s);
  if (st == PS_OK && head.have) {
    s->base = head;
    s->track = true;
    head.dir = NULL;
  }
  store_ckpt_ref_clear(&head);
  pthread_rwlock_unlock(&s->lock);
  if (st == PS_OK) PS_INFO("store %s: restored from %s (%zu tables)", s->path, dir, s->ntables);
  return st;
}
