/* ps_store_restore: putting a checkpoint back into a live store (ps_store_restore).
 *
 * - Restore never leaves a half-copied store: the snapshot is copied beside the data
 *   directory (a delta's chain composed there, ps_store_chain.c), the directories are swapped
 *   by rename, and on a failed reopen the previous content is put back.
 * - It sits above the composition (it composes, then swaps), so nothing the composition or
 *   the plain open uses comes back here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_store_int.h"

static int rm_rf(const char *p) { return ps_rm_rf(p) == PS_OK ? 0 : -1; }

/* Drops both tiers' state (store write-locked): closes RocksDB, frees the hot tier. */
static void unload(ps_store *s) {
  store_cold_close(s);
  store_hot_drop(s);
}

/* A checkpoint's rows are records of its tables' row types: restoring one over a table declared
 * here with another row type would replace the declared table by another, so it is refused (the
 * store write-locked). A checkpoint without a manifest (from before them) is not checked. */
static ps_status check_row_types(ps_store *s, const char *dir, ps_error *err) {
  store_manifest m;
  memset(&m, 0, sizeof m);
  if (store_manifest_read(dir, &m, NULL) != PS_OK) return PS_OK; /* compose said what is wrong */
  ps_status st = PS_OK;
  for (size_t i = 0; st == PS_OK && i < m.ntables; i++) {
    const ps_table_spec *c = &m.tables[i].spec;
    size_t ti;
    const table *t = find_table(s, c->id, &ti);
    if (t && t->spec.row_type != c->row_type)
      st = ps_error_set(err, PS_ERR_CONFLICT,
                        "restore: table %u '%s' is declared with another row type than the "
                        "checkpoint %s holds: row_type %s vs %s (declared vs checkpoint)",
                        c->id, c->name, dir, ps_row_type_name(t->spec.row_type),
                        ps_row_type_name(c->row_type));
  }
  store_manifest_free(&m);
  return st;
}

ps_status ps_store_checkpoint_spec(const char *dir, uint32_t table, ps_table_spec *out,
                                   ps_error *err) {
  store_manifest m;
  memset(&m, 0, sizeof m);
  ps_status st = store_manifest_read(dir, &m, err);
  if (st != PS_OK) return st;
  st = ps_error_set(err, PS_ERR_NOT_FOUND, "checkpoint %s has no table %u", dir, table);
  for (size_t i = 0; i < m.ntables; i++)
    if (m.tables[i].spec.id == table) {
      *out = m.tables[i].spec;
      st = PS_OK;
      ps_error_clear(err);
    }
  store_manifest_free(&m);
  return st;
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
  ps_status rt = check_row_types(s, dir, err);
  if (rt != PS_OK) {
    pthread_rwlock_unlock(&s->lock);
    rm_rf(tmp);
    store_ckpt_ref_clear(&head);
    return rt;
  }
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
