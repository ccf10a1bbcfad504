/* ps_store: a store's life — open, flush, close — and what it reports (stats, exported rows).
 * See ps_store.h for the API and ps_store_int.h for the design and the map of the other
 * ps_store_*.c files.
 *
 * - Write-back is the one place where the hot tier meets the cold tier in bulk: at flush,
 *   snapshot, expire and close every dirty row is written, tables with many dirty rows as one
 *   ingested SST file (ps_store_cold.c), the rest through each partition's WriteBatch. */
#include <stdio.h>
#include <string.h>

#include "ps_log.h"
#include "ps_store_int.h"

ps_status ps_store_open(const ps_store_options *opt, ps_store **out, ps_error *err) {
  if (!opt || !out || !opt->path || !opt->path[0])
    return ps_error_set(err, PS_ERR_INVALID, "store: no options, output or path");
  if ((unsigned)opt->durability > PS_DURABILITY_SYNC)
    return ps_error_set(err, PS_ERR_INVALID, "store %s: unknown durability %d", opt->path,
                        (int)opt->durability);
  *out = NULL;
  if (opt->partitions > 1024)
    return ps_error_set(err, PS_ERR_INVALID, "store %s: %u partitions (at most 1024)", opt->path,
                        opt->partitions);
  ps_store *s = calloc(1, sizeof(*s));
  if (!s) return ps_error_set(err, PS_ERR_NOMEM, "store %s: out of memory", opt->path);
  s->opt = *opt;
  if (!s->opt.partitions) s->opt.partitions = 1;
  if (!s->opt.cache_bytes) s->opt.cache_bytes = (size_t)256 << 20;
  if (!s->opt.block_cache_bytes) s->opt.block_cache_bytes = (size_t)32 << 20;
  if (!s->opt.write_buffer_bytes) s->opt.write_buffer_bytes = (size_t)16 << 20;
  s->path = strdup(opt->path);
  s->opt.path = s->path;
  s->nparts = s->opt.partitions;
  s->idmap = calloc(65536, sizeof(uint16_t));
  /* aligned_alloc wants a size that is a multiple of the alignment (ASan enforces it). */
  size_t parts_bytes = (sizeof(partition) * s->nparts + 63) & ~(size_t)63;
  s->parts = aligned_alloc(64, parts_bytes);
  if (!s->path || !s->idmap || !s->parts) {
    free(s->path);
    free(s->idmap);
    free(s->parts);
    free(s);
    return ps_error_set(err, PS_ERR_NOMEM, "store %s: out of memory", opt->path);
  }
  memset(s->parts, 0, sizeof(partition) * s->nparts);
  for (uint32_t p = 0; p < s->nparts; p++) {
    pthread_mutex_init(&s->parts[p].mu, NULL);
    s->parts[p].budget = s->opt.cache_bytes / s->nparts;
    s->parts[p].wb = rocksdb_writebatch_create();
  }
  pthread_rwlock_init(&s->lock, NULL);
  store_cold_options_create(s);
  ps_status st = store_tables_open(s, err);
  if (st != PS_OK) {
    ps_store_close(&s);
    return st;
  }
  PS_INFO("store %s: %zu tables, %u partitions, hot budget %zu MB", s->path, s->ntables,
          s->nparts, s->opt.cache_bytes >> 20);
  *out = s;
  return PS_OK;
}

/* Below this many dirty rows in a table a WriteBatch is cheaper than an SST file. */
#define INGEST_MIN_ROWS 65536

/* Writes every dirty hot row (store write-locked): tables with many, in bulk; the rest (and
 * anything the bulk path could not take) through each partition's WriteBatch. */
ps_status store_write_dirty(ps_store *s, ps_error *err) {
  ps_status st = PS_OK;
  for (size_t t = 0; t < s->ntables; t++) {
    size_t rows = 0, n = 0;
    for (uint32_t p = 0; p < s->nparts; p++) rows += s->parts[p].tabs[t].count;
    if (rows < INGEST_MIN_ROWS) continue; /* cannot have enough dirty rows: no scan for them */
    for (uint32_t p = 0; p < s->nparts; p++) {
      const ptable *pt = &s->parts[p].tabs[t];
      for (size_t i = 0; i < pt->cap; i++) n += (pt->slots[i].p & F_DIRTY) != 0;
    }
    if (n < INGEST_MIN_ROWS) continue;
    store_dirty_ref *d = malloc(n * sizeof *d);
    size_t *per = calloc(s->nparts, sizeof *per);
    if (!d || !per) { /* the WriteBatch path below still writes them */
      free(d);
      free(per);
      continue;
    }
    size_t m = 0;
    for (uint32_t p = 0; p < s->nparts; p++) {
      ptable *pt = &s->parts[p].tabs[t];
      const size_t before = m;
      for (size_t i = 0; i < pt->cap; i++)
        if (pt->slots[i].p & F_DIRTY) d[m++] = (store_dirty_ref){pt->slots[i].key, &pt->slots[i]};
      per[p] = m - before;
    }
    ps_status is = store_cold_ingest(s, t, d, m);
    if (is == PS_OK)
      for (uint32_t p = 0; p < s->nparts; p++) s->parts[p].writebacks += per[p];
    else
      PS_WARN("store %s: bulk write of %zu dirty rows of table %u failed (%s); writing them in "
              "batches", s->path, m, s->tables[t].spec.id, ps_status_str(is));
    free(d);
    free(per);
  }
  for (uint32_t p = 0; p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    for (size_t t = 0; t < s->ntables; t++) {
      ptable *pt = &pa->tabs[t];
      for (size_t i = 0; i < pt->cap; i++) {
        hentry *e = &pt->slots[i];
        if (!(e->p & F_DIRTY)) continue;
        store_cold_put_row(pa->wb, &s->tables[t], e->key, ent_row(e));
        e->p &= ~F_DIRTY;
        pa->writebacks++;
        if (rocksdb_writebatch_count(pa->wb) >= 4096) {
          if (st == PS_OK) st = store_cold_flush_wb(s, pa, err);
          else (void)store_cold_flush_wb(s, pa, NULL);
        }
      }
    }
    if (st == PS_OK) st = store_cold_flush_wb(s, pa, err);
    else (void)store_cold_flush_wb(s, pa, NULL);
  }
  return st;
}

ps_status store_flush_locked(ps_store *s, ps_error *err) {
  ps_status st = store_write_dirty(s, err);
  char *rerr = NULL;
  rocksdb_flush_cf(s->db, s->fo, s->meta_cf, &rerr);
  if (rerr && st == PS_OK) st = store_rdb_error(err, "flush", rerr);
  else free(rerr);
  for (size_t t = 0; t < s->ntables; t++) {
    rerr = NULL;
    rocksdb_flush_cf(s->db, s->fo, s->tables[t].cf, &rerr);
    if (rerr && st == PS_OK) st = store_rdb_error(err, "flush", rerr);
    else free(rerr);
  }
  if (st != PS_OK) ps_error_prefix(err, "store %s: ", s->path);
  return st;
}

ps_status ps_store_flush(ps_store *s, ps_error *err) {
  if (!s) return ps_error_set(err, PS_ERR_INVALID, "store: none to flush");
  ps_error local;
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = store_flush_locked(s, err ? err : &local);
  pthread_rwlock_unlock(&s->lock);
  return st;
}

void ps_store_close(ps_store **sp) {
  if (!sp || !*sp) return;
  ps_store *s = *sp;
  if (s->db) {
    ps_error err; /* close has no status to return: its one failure goes to the log */
    if (store_flush_locked(s, &err) != PS_OK) PS_ERROR("flush at close failed: %s", err.msg);
  }
  store_cold_close(s);
  store_hot_drop(s);
  for (uint32_t p = 0; s->parts && p < s->nparts; p++) {
    pthread_mutex_destroy(&s->parts[p].mu);
    free(s->parts[p].huge);
    if (s->parts[p].wb) rocksdb_writebatch_destroy(s->parts[p].wb);
  }
  store_cold_options_destroy(s);
  pthread_rwlock_destroy(&s->lock);
  free(s->parts);
  free(s->idmap);
  free(s->path);
  free(s);
  *sp = NULL;
}

ps_status ps_store_export_row(ps_store *s, uint32_t table_id, uint64_t key, void *buf, size_t cap,
                              size_t *len, ps_error *err) {
  if (!s || !buf) return ps_error_set(err, PS_ERR_INVALID, "export row: no store or buffer");
  size_t ti;
  ps_status st;
  const table *t = store_read_table(s, table_id, &ti, &st);
  if (!t) {
    ps_error_set(err, st, "export row: table %u: %s", table_id, ps_status_str(st));
    goto done;
  }
  const size_t need = REC_HDR + t->row_bytes;
  if (len) *len = need;
  if (cap < need) {
    st = ps_error_set(err, PS_ERR_INVALID, "export row: table %u: a record needs %zu bytes, "
                      "the buffer has %zu", table_id, need, cap);
    goto done;
  }
  uint64_t h = key_hash(key);
  partition *pa = &s->parts[part_of_hash(h, s->nparts)];
  pthread_mutex_lock(&pa->mu);
  hentry *e = idx_find(&pa->tabs[ti], key, h);
  if (e) {
    memcpy(buf, t->hdr, REC_HDR);
    memcpy((char *)buf + REC_HDR, ent_row(e), t->row_bytes);
  } else {
    char kb[8], *rerr = NULL;
    size_t vl = 0;
    key_be(key, kb);
    char *v = rocksdb_get_cf(s->db, s->ro, t->cf, kb, 8, &vl, &rerr);
    ps_error local; /* decode logs when given no err; this call only returns */
    if (rerr) {
      st = store_rdb_error(err, "get", rerr);
    } else if (!v) {
      st = ps_error_set(err, PS_ERR_NOT_FOUND, "export row: table %u key %llu: no stored row",
                        table_id, (unsigned long long)key);
    } else {
      st = store_cold_decode(t, key, v, vl, (char *)buf + REC_HDR, err ? err : &local);
      if (st == PS_OK) memcpy(buf, t->hdr, REC_HDR);
    }
    free(v);
  }
  pthread_mutex_unlock(&pa->mu);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

void ps_store_get_stats(ps_store *s, ps_store_stats *o) {
  if (!o) return;
  memset(o, 0, sizeof(*o));
  if (!s) return;
  pthread_rwlock_rdlock(&s->lock);
  for (uint32_t p = 0; p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    for (size_t t = 0; t < s->ntables; t++) o->rows_hot += pa->tabs[t].count;
    o->hits += pa->hits;
    o->misses += pa->misses;
    o->evictions += pa->evictions;
    o->writebacks += pa->writebacks;
    o->admitted += pa->admitted;
    o->pending_admission_pushes += pa->pending;
    o->expired += pa->expired;
    o->hot_bytes += pa->used;
    pthread_mutex_unlock(&pa->mu);
  }
  for (size_t t = 0; t < s->ntables; t++) {
    uint64_t v = 0;
    if (rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.estimate-num-keys", &v) == 0)
      o->rows_cold += v;
    v = 0;
    if (rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.estimate-live-data-size", &v) == 0)
      o->cold_bytes += v;
    v = 0;
    if (rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.cur-size-all-mem-tables", &v) == 0)
      o->cold_bytes += v;
  }
  pthread_rwlock_unlock(&s->lock);
}

uint32_t ps_store_partition_of(const ps_store *s, uint64_t key) {
  if (!s || s->nparts <= 1) return 0;
  return part_of_hash(key_hash(key), s->nparts);
}

uint32_t ps_store_partitions(const ps_store *s) { return s ? s->nparts : 0; }

void ps_store_set_step(ps_store *s, uint64_t step) {
  if (s) atomic_store_explicit(&s->step, step, memory_order_relaxed);
}

