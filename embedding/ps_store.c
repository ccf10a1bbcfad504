/* ps_store: a store's life — open, flush, close — and what it reports (stats, exported rows).
 * See ps_store.h for the API and ps_store_int.h for the design and the map of the other
 * ps_store_*.c files.
 *
 * - Write-back is the one place where the hot tier meets the cold tier in bulk: at flush,
 *   snapshot, expire and close every dirty row is written, tables with many dirty rows as one
 *   ingested SST file (ps_store_cold.c), the rest through each partition's WriteBatch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_store_int.h"

ps_status store_open_dir(const ps_store_options *opt, ps_store **out, ps_error *err) {
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

uint64_t store_cold_rows(ps_store *s, size_t t) {
  uint64_t v = 0;
  return rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.estimate-num-keys", &v) == 0
             ? v
             : 0;
}

/* Writes every dirty hot row (store write-locked): tables with many, in bulk; the rest (and
 * anything the bulk path could not take) through each partition's WriteBatch. Dirty bits are
 * cleared only for rows whose write succeeded; the first failure ends the pass (RocksDB then
 * refuses every write until it recovers). */
ps_status store_write_dirty(ps_store *s, ps_error *err) {
  for (size_t t = 0; t < s->ntables; t++) {
    size_t rows = 0, n = 0;
    for (uint32_t p = 0; p < s->nparts; p++) rows += s->parts[p].tabs[t].count;
    if (rows < INGEST_MIN_ROWS) continue; /* cannot have enough dirty rows: no scan for them */
    for (uint32_t p = 0; p < s->nparts; p++) n += s->parts[p].ndirty;
    if (n < INGEST_MIN_ROWS) continue;
    store_dirty_ref *d = malloc(n * sizeof *d);
    if (!d) continue; /* the WriteBatch path below still writes them */
    size_t m = 0;
    for (uint32_t p = 0; p < s->nparts; p++) {
      ptable *pt = &s->parts[p].tabs[t];
      for (size_t i = 0; i < pt->cap && m < n; i++)
        if (pt->slots[i].p & F_DIRTY) d[m++] = (store_dirty_ref){pt->slots[i].key, &pt->slots[i]};
    }
    ps_error ie = {0};
    ps_status is = m >= INGEST_MIN_ROWS ? store_cold_ingest(s, t, d, m, &ie) : PS_ERR_NOT_FOUND;
    if (is == PS_OK) {
      for (size_t i = 0; i < m; i++) {
        partition *pa = &s->parts[part_of_hash(key_hash(d[i].key), s->nparts)];
        clear_dirty(pa, s->tables[t].alloc_bytes, d[i].e);
        pa->writebacks++;
      }
    } else if (is != PS_ERR_NOT_FOUND) { /* not found: too few of them are this table's */
      PS_WARN("store %s: bulk write of %zu dirty rows of table %u failed (%s); writing them in "
              "batches", s->path, m, s->tables[t].spec.id, ps_error_str(&ie));
    }
    free(d);
  }
  enum { WB_ROWS = 4096 };
  hentry **done = malloc(WB_ROWS * sizeof *done);
  size_t *alloc = malloc(WB_ROWS * sizeof *alloc);
  ps_status st = PS_OK;
  if (!done || !alloc) st = ps_error_set(err, PS_ERR_NOMEM, "no memory to write dirty rows");
  for (uint32_t p = 0; st == PS_OK && p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    size_t t = 0, i = 0, nb;
    do { /* in batches of WB_ROWS; the last one (maybe empty) also writes what pa->wb held */
      nb = store_wb_put_dirty(s, pa, &t, &i, done, alloc, WB_ROWS);
      st = store_cold_flush_wb(s, pa, err);
      for (size_t k = 0; st == PS_OK && k < nb; k++) clear_dirty(pa, alloc[k], done[k]);
      if (st == PS_OK) pa->writebacks += nb;
    } while (st == PS_OK && nb == WB_ROWS);
    rocksdb_writebatch_clear(pa->wb);
  }
  free(done);
  free(alloc);
  return st;
}

/* Flushes one family's memtables and waits until none is left. rocksdb_flush_cf(wait) alone
 * is not enough right after RocksDB recovered from a full disk by itself: in RocksDB 7.8 it
 * then returned OK with the memtable still queued for flush, and a close right after dropped
 * it (every row written since the recovery, seen in tests/embedding/test_store_disk_full.c).
 * So the immutable memtables are counted, and the flush asked again, for up to 20 s. */
static ps_status flush_family(ps_store *s, rocksdb_column_family_handle_t *cf, ps_error *err) {
  for (int i = 0; i < 400; i++) {
    char *rerr = NULL;
    rocksdb_flush_cf(s->db, s->fo, cf, &rerr);
    if (rerr) return store_rdb_error(err, "flush", rerr);
    uint64_t imm = 0;
    if (rocksdb_property_int_cf(s->db, cf, "rocksdb.num-immutable-mem-table", &imm) != 0 || !imm)
      return PS_OK;
    usleep(50 * 1000);
  }
  return ps_error_set(err, PS_ERR_IO, "rocksdb flush: memtables still unflushed after 20 s");
}

ps_status store_flush_locked(ps_store *s, ps_error *err) {
  ps_status st = store_write_dirty(s, err);
  if (st == PS_OK) st = flush_family(s, s->meta_cf, err);
  for (size_t t = 0; st == PS_OK && t < s->ntables; t++) st = flush_family(s, s->tables[t].cf, err);
  if (st == PS_OK) store_wb_ok(s);
  else if (st == PS_ERR_IO) store_wb_failed(s, "flush", err->msg);
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
  if (s->db && !s->opt.read_only) {
    ps_error err; /* close has no status to return: its one failure goes to the log */
    ps_status st = store_flush_locked(s, &err);
    /* After a full disk RocksDB resumes writes by itself once its write buffer's worth of
     * space is free (it looks every 5 s): while there is that much, wait for it (up to 20 s)
     * rather than lose the rows kept in memory. */
    for (int i = 0; st != PS_OK && i < 80 && store_wb_space_back(s); i++) {
      usleep(250 * 1000);
      st = store_flush_locked(s, &err);
    }
    if (st != PS_OK) {
      size_t lost = 0;
      for (uint32_t p = 0; p < s->nparts; p++) lost += s->parts[p].ndirty;
      PS_ERROR("flush at close failed: %s; %zu rows updated since they were last written are "
               "lost (the last checkpoint has them as they were then)", err.msg, lost);
    }
  }
  store_cold_close(s);
  store_hot_drop(s);
  if (s->parts) store_track_reset(s);
  for (uint32_t p = 0; s->parts && p < s->nparts; p++) {
    pthread_mutex_destroy(&s->parts[p].mu);
    free(s->parts[p].huge);
    if (s->parts[p].wb) rocksdb_writebatch_destroy(s->parts[p].wb);
    free(s->parts[p].stage);
  }
  store_cold_options_destroy(s);
  pthread_rwlock_destroy(&s->lock);
  free(s->parts);
  free(s->idmap);
  free(s->path);
  if (s->compose_dir && ps_rm_rf(s->compose_dir) != PS_OK)
    PS_WARN("could not remove %s: %s", s->compose_dir, strerror(errno));
  free(s->compose_dir);
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
  const size_t need = t->rec_bytes;
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
    rec_fill(t, e, buf);
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
      st = store_cold_decode(t, key, v, vl, (char *)buf + REC_HDR,
                             (char *)buf + REC_HDR + ROW_META, err ? err : &local);
      if (st == PS_OK) memcpy(buf, t->hdr, REC_HDR);
    }
    free(v);
  }
  pthread_mutex_unlock(&pa->mu);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_import_rows(ps_store *s, uint32_t table_id, const uint64_t *keys,
                               const void *recs, size_t n, ps_error *err) {
  if (!s || (n && (!keys || !recs)))
    return ps_error_set(err, PS_ERR_INVALID, "import rows: no store, keys or records");
  if (s->opt.read_only)
    return ps_error_set(err, PS_ERR_INVALID, "import rows: store %s is read-only", s->path);
  pthread_rwlock_wrlock(&s->lock);
  size_t ti = 0;
  const table *t = find_table(s, table_id, &ti);
  ps_status st = t ? PS_OK : ps_error_set(err, PS_ERR_UNKNOWN_TABLE, "import rows: table %u: %s",
                                          table_id, ps_status_str(PS_ERR_UNKNOWN_TABLE));
  const size_t rb = t ? t->rec_bytes : 0;
  const char *r = recs;
  /* Every header first: a record of another table (its optimizer or dim) writes nothing. */
  for (size_t i = 0; st == PS_OK && i < n; i++)
    if (!store_cold_row_of(t, r + i * rb, rb))
      st = ps_error_set(err, PS_ERR_INVALID, "import rows: table %u key %llu: the record's "
                        "header is not the table's (another optimizer or dim)", table_id,
                        (unsigned long long)keys[i]);
  rocksdb_writebatch_t *wb = st == PS_OK ? rocksdb_writebatch_create() : NULL;
  for (size_t i = 0; wb && i < n; i++) {
    /* A hot copy would shadow the imported record: dropped (its update is replaced). */
    uint64_t h = key_hash(keys[i]);
    partition *pa = &s->parts[part_of_hash(h, s->nparts)];
    hentry *e = idx_find(&pa->tabs[ti], keys[i], h);
    if (e) store_hot_remove(s, pa, ti, e);
    store_cold_put_row(wb, t, keys[i], r + i * rb + REC_HDR, r + i * rb + REC_HDR + ROW_META);
  }
  if (wb) {
    char *rerr = NULL;
    rocksdb_write(s->db, s->wo, wb, &rerr);
    if (rerr) {
      st = store_rdb_error(err, "write", rerr);
      ps_error_prefix(err, "import rows into %s: ", s->path);
    }
    rocksdb_writebatch_destroy(wb);
  }
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_scan(ps_store *s, uint32_t table_id, ps_store_row_fn fn, void *ctx,
                        ps_error *err) {
  if (!s || !fn || !s->opt.read_only)
    return ps_error_set(err, PS_ERR_INVALID, "scan: needs a store open read-only");
  size_t ti;
  ps_status st;
  const table *t = store_read_table(s, table_id, &ti, &st);
  if (!t) {
    ps_error_set(err, st, "scan: table %u: %s", table_id, ps_status_str(st));
    pthread_rwlock_unlock(&s->lock);
    return st;
  }
  void *row = malloc(t->row_bytes); /* aligned copy: a RocksDB value has no float alignment */
  rocksdb_iterator_t *it = row ? rocksdb_create_iterator_cf(s->db, s->ro_iter, t->cf) : NULL;
  st = row ? PS_OK : ps_error_set(err, PS_ERR_NOMEM, "scan: out of memory");
  if (it) rocksdb_iter_seek_to_first(it);
  for (; it && st == PS_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    if (kl != 8) {
      st = ps_error_set(err, PS_ERR_CORRUPT, "%s: table %u: a key of %zu bytes", s->path,
                        table_id, kl);
      break;
    }
    uint64_t key = be_key(k);
    if ((st = store_cold_decode(t, key, v, vl, NULL, row, err)) != PS_OK) break;
    if (tab_narrow(t)) { /* values widened (exact): fn sees f32 whatever the row type */
      float wide[PS_TABLE_MAX_DIM];
      ps_row_widen(t->spec.row_type, row, wide, t->spec.dim);
      st = fn(ctx, key, wide);
    } else {
      st = fn(ctx, key, row);
    }
  }
  char *rerr = NULL;
  if (it && st == PS_OK) rocksdb_iter_get_error(it, &rerr);
  if (rerr) st = store_rdb_error(err, "scan", rerr);
  if (it) rocksdb_iter_destroy(it);
  free(row);
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
    o->prefetched += pa->prefetched;
    o->hot_bytes += pa->used;
    o->unwritten_rows += pa->ndirty;
    o->unwritten_bytes += pa->dirty_bytes;
    pthread_mutex_unlock(&pa->mu);
  }
  o->write_failures = atomic_load(&s->write_failures);
  o->writes_failing = store_failing(s) ? 1 : 0;
  for (size_t t = 0; t < s->ntables; t++) {
    o->rows_cold += store_cold_rows(s, t);
    uint64_t v = 0;
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

