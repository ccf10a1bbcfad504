/* ps_store_writeback: dirty rows on their way to RocksDB, and what the store does while RocksDB
 * refuses writes (a full disk).
 *
 * - An acknowledged push lives in a dirty hot row until that row is written. So a dirty row
 *   leaves memory only once its write succeeded: eviction stages it (record into the
 *   partition's WriteBatch, entry out of the index, memory kept), and the end of the data call
 *   (store_wb_settle) frees the staged rows after the batch is written, or puts them back in
 *   the index, still dirty, when the write failed. A failed write-back therefore never fails
 *   the pull or push that caused it: the call's own rows are all in memory.
 * - After a failure the store is "failing": eviction takes clean rows only, pulls that find
 *   no clean row to evict serve RocksDB's row without caching it, and pushes that need new
 *   rows go over the hot budget, by at most what ps_store_push_admit lets in. That check is
 *   the one refusal of a push for lack of disk, made before anything is applied, so a push
 *   refused for it has changed nothing and its retry applies it exactly once.
 * - Recovery: RocksDB stops all writes after a flush hits ENOSPC and resumes by itself (its
 *   default SstFileManager checks every 5 s for a write buffer's worth of free space; the C
 *   API of RocksDB 7.8 has no DB::Resume). The store finds out by trying: once per RETRY_NS a
 *   data call writes up to RETRY_ROWS of its partition's dirty rows (a probe record when it
 *   has none), and so does a push's admission (which may refuse it: no data call then); the
 *   first success ends the failing state, and the rows over the budget are
 *   then written as eviction comes to them. One log line when writes start failing, one when
 *   they work again. */
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "ps_grow.h"
#include "ps_log.h"
#include "ps_store_int.h"
#include "ps_time.h"

#define RETRY_NS 500000000ull /* how often a failing store tries a write */
#define RETRY_ROWS 1024

bool store_wb_stage(ps_store *s, partition *pa, size_t ti, hentry *e) {
  if (!ps_grow((void **)&pa->stage, &pa->stage_cap, pa->nstage + 1, sizeof *pa->stage, 64))
    return false;
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  const row_meta m = ent_meta(t, e);
  store_cold_put_row(pa->wb, t, e->key, &m, ent_row(e));
  pa->stage[pa->nstage++] = (staged_row){ti, e->key, ent_row(e)};
  clear_dirty(pa, t->alloc_bytes, e);
  pa->used -= t->alloc_bytes;
  store_idx_delete_at(pt, (size_t)(e - pt->slots));
  return true;
}

/* Puts the staged rows back in the index, dirty (their write failed). A key is never both
 * staged and indexed: a call stages only rows it did not read from RocksDB in the same call. */
static void unstage(ps_store *s, partition *pa) {
  for (size_t i = 0; i < pa->nstage; i++) {
    const staged_row *r = &pa->stage[i];
    const table *t = &s->tables[r->ti];
    ptable *pt = &pa->tabs[r->ti];
    if (idx_full(pt) && store_idx_grow(pa, pt) != PS_OK &&
        pt->count + 1 >= pt->cap) {
      PS_ERROR_RL("store %s: table %u key %llu: no memory to keep a row that could not be "
                  "written; its updates since the last write are lost", s->path, t->spec.id,
                  (unsigned long long)r->key);
      row_free(r->row, t->row_bytes);
      continue;
    }
    hentry *e = store_idx_put(pt, r->key, key_hash(r->key), (uintptr_t)r->row);
    pa->used += t->alloc_bytes;
    mark_dirty(pa, t->alloc_bytes, e);
  }
  pa->nstage = 0;
}

size_t store_wb_put_dirty(ps_store *s, partition *pa, size_t *t, size_t *i, hentry **done,
                          size_t *alloc, size_t max) {
  size_t n = 0;
  for (; *t < s->ntables; (*t)++, *i = 0) {
    const table *tb = &s->tables[*t];
    ptable *pt = &pa->tabs[*t];
    for (; *i < pt->cap; (*i)++) {
      if (n == max) return n;
      hentry *e = &pt->slots[*i];
      if (!(e->p & F_DIRTY)) continue;
      const row_meta m = ent_meta(tb, e);
      store_cold_put_row(pa->wb, tb, e->key, &m, ent_row(e));
      done[n] = e;
      alloc[n++] = tb->alloc_bytes;
    }
  }
  return n;
}

/* A failing store's try: writes some of pa's dirty rows (clearing their bits) or a probe. */
static void retry(ps_store *s, partition *pa) {
  uint64_t now = ps_now_ns(), at = atomic_load(&s->retry_ns);
  if (now < at || !atomic_compare_exchange_strong(&s->retry_ns, &at, now + RETRY_NS)) return;
  hentry *done[RETRY_ROWS];
  size_t alloc[RETRY_ROWS], t = 0, i = 0;
  size_t n = store_wb_put_dirty(s, pa, &t, &i, done, alloc, RETRY_ROWS);
  if (!n) rocksdb_writebatch_put_cf(pa->wb, s->meta_cf, "wb-probe", 8, "", 0);
  ps_error err;
  if (store_cold_flush_wb(s, pa, &err) != PS_OK) {
    atomic_fetch_add(&s->write_failures, 1);
    return;
  }
  for (size_t k = 0; k < n; k++) clear_dirty(pa, alloc[k], done[k]);
  pa->writebacks += n;
  store_wb_ok(s);
}

void store_wb_settle(ps_store *s, partition *pa) {
  if (!pa->nstage) {
    if (store_failing(s)) retry(s, pa);
    return;
  }
  ps_error err;
  if (store_cold_flush_wb(s, pa, &err) != PS_OK) {
    store_wb_failed(s, "writing evicted rows back", err.msg);
    unstage(s, pa);
    return;
  }
  for (size_t i = 0; i < pa->nstage; i++)
    row_free(pa->stage[i].row, s->tables[pa->stage[i].ti].row_bytes);
  pa->writebacks += pa->nstage;
  pa->nstage = 0;
  if (store_failing(s)) store_wb_ok(s);
}

void store_wb_failed(ps_store *s, const char *what, const char *msg) {
  atomic_fetch_add(&s->write_failures, 1);
  atomic_store(&s->retry_ns, ps_now_ns() + RETRY_NS);
  int was = 0;
  if (!atomic_compare_exchange_strong(&s->failing, &was, 1)) return;
  s->failing_since_ns = ps_now_ns();
  PS_ERROR("store %s: %s failed (%s); rows not yet written stay in memory and are written "
           "when writes work again; reads go on, pushes are refused once unwritten rows fill "
           "the hot tier (%.1f MB)", s->path, what, msg, (double)s->opt.cache_bytes / 1048576.0);
}

void store_wb_ok(ps_store *s) {
  int was = 1;
  if (!atomic_compare_exchange_strong(&s->failing, &was, 0)) return;
  PS_INFO("store %s: writes work again after %.1f s of failures; rows kept in memory are "
          "written back as usual", s->path, (double)(ps_now_ns() - s->failing_since_ns) / 1e9);
}

bool store_wb_space_back(const ps_store *s) {
  struct statvfs v;
  if (statvfs(s->path, &v) != 0) return false;
  return (uint64_t)v.f_bavail * v.f_frsize >= s->opt.write_buffer_bytes;
}

ps_status ps_store_push_admit(ps_store *s, uint32_t table_id, size_t n, ps_error *err) {
  if (!s) return ps_error_set(err, PS_ERR_INVALID, "push admit: no store");
  if (!store_failing(s)) return PS_OK;
  size_t ti;
  ps_status st;
  const table *t = store_read_table(s, table_id, &ti, &st);
  if (!t) {
    ps_error_set(err, st, "table %u: %s", table_id, ps_status_str(st));
  } else {
    /* Finding out that writes work again is a data call's (store_wb_settle), and a push
     * refused here makes none: with only pushes coming, nothing tried, and once space was
     * back every push was still refused. So admission tries too (retry: once per interval). */
    size_t dirty = 0;
    for (uint32_t p = 0; p < s->nparts; p++) {
      pthread_mutex_lock(&s->parts[p].mu);
      if (store_failing(s)) retry(s, &s->parts[p]);
      dirty += s->parts[p].dirty_bytes;
      pthread_mutex_unlock(&s->parts[p].mu);
    }
    if (store_failing(s) && dirty + n * t->alloc_bytes > s->opt.cache_bytes)
      st = ps_error_set(err, PS_ERR_NOMEM,
                        "store %s: writes to disk are failing (disk full?) and %.1f MB of rows "
                        "not yet written fill the hot tier (%.1f MB): push of %zu keys to table "
                        "%u refused, nothing applied; retry once there is space",
                        s->path, (double)dirty / 1048576.0,
                        (double)s->opt.cache_bytes / 1048576.0, n, table_id);
  }
  pthread_rwlock_unlock(&s->lock);
  return st;
}
