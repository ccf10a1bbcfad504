/* ps_store_snapshot: a consistent copy of a store's content (putting one back is
 * ps_store_restore.c's).
 *
 * - A snapshot is a RocksDB checkpoint (hard links where the file system allows) taken right
 *   after a flush under the exclusive lock, so it holds every row as of that moment and costs
 *   little disk while the live files are unchanged. */
#include <errno.h>
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

ps_status ps_store_snapshot_remove(const char *dir, ps_error *err) {
  if (!dir || !dir[0]) return ps_error_set(err, PS_ERR_INVALID, "removing a snapshot: no dir");
  if (ps_rm_rf(dir) != PS_OK) /* a dir that is not there is PS_OK */
    return ps_error_set(err, PS_ERR_IO, "removing snapshot %s: %s", dir, strerror(errno));
  return PS_OK;
}
