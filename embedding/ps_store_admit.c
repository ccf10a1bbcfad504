/* ps_store_admit: what keeps rows out of the store — feature admission by a count-min sketch,
 * and expiry of rows not pushed for a table's ttl_steps.
 *
 * - Admission: a never-stored key gets a row only at its admit_threshold-th push; until then
 *   its pushes are counted (conservative-update count-min sketch, 4 rows of 16-bit saturating
 *   counters per table and partition, 2 MB per table over all partitions) and dropped. A
 *   sketch, not a table of pending keys, so the long tail of one-off features costs fixed
 *   memory.
 * - TTL works on the cold tier only: after a write-back of dirty rows every hot row has an
 *   identical cold copy, so one scan of RocksDB decides, and expired keys leave the hot index
 *   too. O(rows) per call, hence called every few hundred steps. */
#include <string.h>

#include "ps_log.h"
#include "ps_store_int.h"

ps_status store_cms_create(ptable *pt, uint32_t nparts) {
  /* 2^18 counters per table in all, split over partitions (>= 1024 each): 2 MB/table. */
  size_t w = 1024;
  while (w * nparts < (1u << 18)) w <<= 1;
  pt->cms = calloc(CMS_DEPTH * w, sizeof(uint16_t));
  if (!pt->cms) return PS_ERR_NOMEM;
  pt->cms_width = w;
  return PS_OK;
}

uint32_t store_cms_bump(ptable *pt, uint64_t h) {
  /* Conservative update: raise only the minimal counters; estimate = min. */
  size_t idx[CMS_DEPTH];
  uint32_t mn = UINT32_MAX;
  for (int d = 0; d < CMS_DEPTH; d++) {
    idx[d] = d * pt->cms_width + (ps_mix64(h + (uint64_t)d * 0x632be59bd9b4e019ull) & (pt->cms_width - 1));
    if (pt->cms[idx[d]] < mn) mn = pt->cms[idx[d]];
  }
  uint32_t nv = mn < UINT16_MAX ? mn + 1 : UINT16_MAX;
  for (int d = 0; d < CMS_DEPTH; d++)
    if (pt->cms[idx[d]] < nv) pt->cms[idx[d]] = (uint16_t)nv;
  return nv;
}

static void expire_write(ps_store *s, rocksdb_writebatch_t *wb) {
  char *err = NULL;
  rocksdb_write(s->db, s->wo, wb, &err);
  if (err) store_rdb_log("expire write", err);
  rocksdb_writebatch_clear(wb);
}

uint64_t ps_store_expire(ps_store *s) {
  if (!s) return 0;
  pthread_rwlock_wrlock(&s->lock);
  const uint64_t step = atomic_load(&s->step);
  uint64_t removed = 0;
  bool any_ttl = false;
  for (size_t ti = 0; ti < s->ntables; ti++) any_ttl |= s->tables[ti].spec.ttl_steps > 0;
  if (!any_ttl) goto done; /* cheap to call every step when no table uses TTL */
  /* After the write-back every hot row has an identical cold copy, so one scan of the cold
   * tier decides; expired keys are dropped from the hot index too. */
  ps_error err; /* expire returns a count, not a status: a failed write-back is logged */
  if (store_write_dirty(s, &err) != PS_OK) {
    PS_ERROR_RL("store %s: expire: %s", s->path, err.msg);
    goto done;
  }
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  for (size_t ti = 0; ti < s->ntables; ti++) {
    const table *t = &s->tables[ti];
    const uint64_t ttl = t->spec.ttl_steps;
    if (!ttl) continue;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro_iter, t->cf);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
      size_t kl, vl;
      const char *k = rocksdb_iter_key(it, &kl);
      const char *v = rocksdb_iter_value(it, &vl);
      if (kl != 8 || vl != t->rec_bytes) continue; /* corrupt: left for pull to report */
      row_meta m;
      memcpy(&m, v + REC_HDR, sizeof(m));
      if (step <= m.last_step || step - m.last_step <= ttl) continue;
      uint64_t key = be_key(k);
      uint64_t h = key_hash(key);
      partition *pa = &s->parts[part_of_hash(h, s->nparts)];
      hentry *e = idx_find(&pa->tabs[ti], key, h);
      if (e) store_hot_remove(s, pa, ti, e);
      store_track_keys(s, pa, ti, &key, &h, 1); /* a tombstone in the next delta */
      rocksdb_writebatch_delete_cf(wb, t->cf, k, 8);
      pa->expired++;
      removed++;
      if (rocksdb_writebatch_count(wb) >= 4096) expire_write(s, wb);
    }
    rocksdb_iter_destroy(it);
  }
  expire_write(s, wb);
  rocksdb_writebatch_destroy(wb);
done:
  pthread_rwlock_unlock(&s->lock);
  return removed;
}
