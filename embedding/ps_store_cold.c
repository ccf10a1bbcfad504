/* ps_store_cold: the cold tier — RocksDB, which holds every row that was ever written back
 * and the table specs, and is the store's only durable state.
 *
 * - Layout: column family "t<id>" per table, "default" holds the specs ("spec/%05u" ->
 *   SPEC_BYTES-long record). Row keys are 8-byte big-endian (so numeric order is RocksDB's
 *   order); values are an 8-byte header {'E', version 1, optimizer, 0, dim u32 LE} + row. A
 *   value of another length or header gives PS_ERR_CORRUPT (said in the caller's ps_error, or
 *   on the data path in a rate-limited log line).
 * - At open this file only reports what it found (the decoded specs with their families);
 *   registering them as tables is ps_store_tables.c's job, so nothing here calls back into
 *   table code. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ps_log.h"
#include "ps_store_int.h"

#define SPEC_VERSION 1

ps_status store_rdb_error(ps_error *err, const char *what, char *rerr) {
  ps_error_set(err, PS_ERR_IO, "rocksdb %s: %s", what, rerr ? rerr : "?");
  free(rerr);
  return PS_ERR_IO;
}

ps_status store_rdb_log(const char *what, char *rerr) {
  ps_error e;
  store_rdb_error(&e, what, rerr);
  PS_ERROR_RL("%s", e.msg);
  return PS_ERR_IO;
}

/* ------------------------------------------------------------- records */

const char *store_cold_row_of(const table *t, const char *v, size_t len) {
  return len == t->rec_bytes && memcmp(v, t->hdr, REC_HDR) == 0 ? v + REC_HDR : NULL;
}

ps_status store_cold_decode(const table *t, uint64_t key, const char *v, size_t len, void *meta,
                            void *row, ps_error *err) {
  const size_t want = t->rec_bytes;
  if (!store_cold_row_of(t, v, len)) {
    ps_error local; /* the data path passes no err: the line goes to the log */
    ps_error_set(err ? err : &local, PS_ERR_CORRUPT,
                 "table %u key %llu: stored row is corrupt (%zu bytes, expected %zu, header %s)",
                 t->spec.id, (unsigned long long)key, len, want,
                 len >= REC_HDR && memcmp(v, t->hdr, REC_HDR) == 0 ? "ok" : "bad");
    if (!err) PS_ERROR_RL("%s", local.msg);
    return PS_ERR_CORRUPT;
  }
  if (meta) memcpy(meta, v + REC_HDR, ROW_META);
  memcpy(row, v + REC_HDR + ROW_META, t->float_bytes);
  return PS_OK;
}

/* MultiGet for n keys of one table. vals[i] is NULL when absent; the caller destroys them. */
ps_status store_cold_multiget(ps_store *s, const table *t, const uint64_t *keys, size_t n,
                              rocksdb_pinnableslice_t **vals) {
  if (!atomic_load_explicit(&t->on_disk, memory_order_acquire)) {
    for (size_t i = 0; i < n; i++) vals[i] = NULL; /* stored nowhere: no lookup finds them */
    return PS_OK;
  }
  char *kbuf = malloc(n * 8 + 1);
  const char **kl = calloc(n + 1, sizeof(char *));
  size_t *ks = calloc(n + 1, sizeof(size_t));
  char **errs = calloc(n + 1, sizeof(char *));
  ps_status st = PS_OK;
  if (!kbuf || !kl || !ks || !errs) {
    st = PS_ERR_NOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    key_be(keys[i], kbuf + 8 * i);
    kl[i] = kbuf + 8 * i;
    ks[i] = 8;
    vals[i] = NULL;
  }
  rocksdb_batched_multi_get_cf(s->db, s->ro, t->cf, n, kl, ks, vals, errs, false);
  for (size_t i = 0; i < n; i++) {
    if (errs[i]) {
      if (st == PS_OK) st = store_rdb_log("multiget", errs[i]);
      else free(errs[i]);
    }
  }
out:
  free(kbuf);
  free(kl);
  free(ks);
  free(errs);
  return st;
}

ps_status store_cold_flush_wb(ps_store *s, partition *pa, ps_error *err) {
  if (rocksdb_writebatch_count(pa->wb) == 0) return PS_OK;
  char *rerr = NULL;
  rocksdb_write(s->db, s->wo, pa->wb, &rerr);
  rocksdb_writebatch_clear(pa->wb);
  return rerr ? store_rdb_error(err, "write", rerr) : PS_OK;
}

/* The one field written through the shared (const) view of a table: a monotonic flag, atomic,
 * so partition threads under the store's read lock may set it. */
void store_cold_mark(const table *t) {
  atomic_store_explicit((atomic_bool *)&t->on_disk, true, memory_order_release);
}

void store_cold_put_row(rocksdb_writebatch_t *wb, const table *t, uint64_t key, const void *meta,
                        const void *row) {
  store_cold_mark(t);
  char kb[8];
  key_be(key, kb);
  const char *kl[1] = {kb};
  size_t ks[1] = {8};
  const char *vl[3] = {t->hdr, (const char *)meta, (const char *)row};
  size_t vs[3] = {REC_HDR, ROW_META, t->float_bytes};
  rocksdb_writebatch_putv_cf(wb, t->cf, 1, kl, ks, 3, vl, vs);
}

/* The bulk path of write-back: through the memtable, millions of rows cost far more than the
 * writes, since the hash memtable (see store_cold_options_create) re-sorts every entry through
 * a skip list when it is flushed (measured: 2M dirty dim-16 rows took 9.4 s to shut down, 61%
 * in that flush). Sorted keys into an SST file are sequential I/O, and ingestion only links
 * the file in. The caller clears dirty bits only once the file is in the database. */
static int dirty_cmp(const void *a, const void *b) {
  uint64_t x = ((const store_dirty_ref *)a)->key, y = ((const store_dirty_ref *)b)->key;
  return x < y ? -1 : x > y;
}

ps_status store_cold_ingest(ps_store *s, size_t ti, store_dirty_ref *d, size_t n,
                            ps_error *err) {
  const table *t = &s->tables[ti];
  qsort(d, n, sizeof *d, dirty_cmp); /* big-endian keys: numeric order is RocksDB's order */
  size_t plen = strlen(s->path) + 64;
  char *file = malloc(plen);
  char *val = malloc(t->rec_bytes);
  if (!file || !val) {
    free(file);
    free(val);
    return ps_error_set(err, PS_ERR_NOMEM, "no memory for an SST file of %zu rows", n);
  }
  snprintf(file, plen, "%s/ingest-t%u.sst", s->path, t->spec.id);
  unlink(file); /* a leftover of a crash during an earlier flush */
  ps_status st = PS_OK;
  char *rerr = NULL;
  rocksdb_envoptions_t *eo = rocksdb_envoptions_create();
  rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(eo, s->dbopt);
  rocksdb_sstfilewriter_open(w, file, &rerr);
  memcpy(val, t->hdr, REC_HDR);
  for (size_t i = 0; !rerr && i < n; i++) {
    char kb[8];
    key_be(d[i].key, kb);
    rec_fill(t, d[i].e, val);
    rocksdb_sstfilewriter_put(w, kb, 8, val, t->rec_bytes, &rerr);
  }
  if (!rerr) rocksdb_sstfilewriter_finish(w, &rerr);
  if (rerr) st = store_rdb_error(err, "writing an SST file of dirty rows", rerr);
  rocksdb_sstfilewriter_destroy(w);
  rocksdb_envoptions_destroy(eo);
  if (st == PS_OK) {
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
    const char *files[1] = {file};
    rerr = NULL;
    store_cold_mark(t);
    rocksdb_ingest_external_file_cf(s->db, t->cf, files, 1, io, &rerr);
    rocksdb_ingestexternalfileoptions_destroy(io);
    if (rerr) st = store_rdb_error(err, "ingesting dirty rows", rerr);
  }
  unlink(file); /* moved into the database (hard link) or failed: either way not needed */
  free(file);
  free(val);
  return st;
}

/* --------------------------------------------------------------- specs */

/* The fields after version, id and name, in stored order, each as host bytes of its own size
 * (optimizer and init as u32 locals opt and init). One list for both directions, so encode
 * and decode cannot disagree. S is the spec's access prefix ("sp->" or "tmp."). */
#define SPEC_FIELDS(F, S)                                                                    \
  F(S dim) F(opt) F(S lr) F(S beta1) F(S beta2) F(S eps) F(S l1) F(S l2) F(S lr_power)       \
  F(S initial_accumulator) F(init) F(S init_a) F(S init_b) F(S seed) F(S admit_threshold)    \
  F(S ttl_steps)

size_t store_spec_encode(const ps_table_spec *sp, char *b) {
  memset(b, 0, SPEC_BYTES);
  size_t o = 0;
#define PUT(x) (memcpy(b + o, &(x), sizeof(x)), o += sizeof(x));
  uint32_t ver = SPEC_VERSION, opt = (uint32_t)sp->optimizer, init = (uint32_t)sp->init;
  PUT(ver)
  PUT(sp->id)
  memcpy(b + o, sp->name, strnlen(sp->name, sizeof(sp->name)));
  o += sizeof(sp->name);
  SPEC_FIELDS(PUT, sp->)
  /* Last, so a spec stored before row types (4 bytes shorter) decodes as f32. */
  uint32_t rt = (uint32_t)sp->row_type;
  PUT(rt)
#undef PUT
  return o;
}

ps_status store_spec_decode(const char *b, size_t len, ps_table_spec *sp) {
  ps_table_spec tmp;
  char chk[SPEC_BYTES];
  memset(&tmp, 0, sizeof(tmp));
  size_t need = store_spec_encode(&tmp, chk);
  if (len != need && len != need - 4) return PS_ERR_CORRUPT;
  size_t o = 0;
#define GET(x) (memcpy(&(x), b + o, sizeof(x)), o += sizeof(x));
  uint32_t ver, opt, init;
  GET(ver)
  if (ver != SPEC_VERSION) return PS_ERR_CORRUPT;
  GET(tmp.id)
  memcpy(tmp.name, b + o, sizeof(tmp.name));
  tmp.name[sizeof(tmp.name) - 1] = 0;
  o += sizeof(tmp.name);
  SPEC_FIELDS(GET, tmp.)
  uint32_t rt = PS_ROW_F32;
  if (len == need) GET(rt)
#undef GET
  tmp.row_type = (ps_row_type)rt;
  tmp.optimizer = (ps_optimizer)opt;
  tmp.init = (ps_init)init;
  *sp = tmp;
  return PS_OK;
}

/* The store checks the row fields only: the stepping fields are the server's (ps_table.h). */
ps_status store_spec_validate(const ps_table_spec *sp, ps_error *err) {
  ps_table_spec rows = *sp;
  rows.consistency = PS_CONS_ASYNC;
  rows.staleness = 0;
  rows.num_workers = 1;
  return ps_table_spec_validate(&rows, err);
}

static void spec_key(uint32_t id, char k[16]) { snprintf(k, 16, "spec/%05u", id); }

ps_status store_cold_table_create(ps_store *s, const ps_table_spec *spec,
                                  rocksdb_column_family_handle_t **out, ps_error *err) {
  char cfname[16];
  snprintf(cfname, sizeof(cfname), "t%u", spec->id);
  for (size_t i = 0; i < s->norphan; i++)
    if (s->orphan[i] && strcmp(s->orphan_names[i], cfname) == 0) {
      /* A family left without its spec (crash between create and spec write): its rows
       * cannot be trusted to match this spec, so start it empty. */
      char *rerr = NULL;
      rocksdb_drop_column_family(s->db, s->orphan[i], &rerr);
      if (rerr) return store_rdb_error(err, "drop orphan column family", rerr);
      rocksdb_column_family_handle_destroy(s->orphan[i]);
      s->orphan[i] = NULL;
    }
  char *rerr = NULL;
  rocksdb_column_family_handle_t *cf = rocksdb_create_column_family(s->db, s->dbopt, cfname, &rerr);
  if (rerr) return store_rdb_error(err, "create column family", rerr);
  char k[16], enc[SPEC_BYTES];
  spec_key(spec->id, k);
  size_t elen = store_spec_encode(spec, enc);
  rocksdb_put_cf(s->db, s->wo_sync, s->meta_cf, k, strlen(k), enc, elen, &rerr);
  if (rerr) {
    rocksdb_column_family_handle_destroy(cf);
    return store_rdb_error(err, "put spec", rerr);
  }
  *out = cf;
  return PS_OK;
}

/* ---------------------------------------------------------- open / close */

/* Keeps a family that no spec names (rows of a table whose spec write never happened). */
static void keep_orphan(ps_store *s, rocksdb_column_family_handle_t *h, const char *name) {
  PS_WARN("%s: column family %s has no table spec; kept until declared", s->path, name);
  void *no = realloc(s->orphan, (s->norphan + 1) * sizeof(*s->orphan));
  void *nn = no ? realloc(s->orphan_names, (s->norphan + 1) * sizeof(char *)) : NULL;
  if (no) s->orphan = no;
  if (nn) s->orphan_names = nn;
  if (!no || !nn) {
    rocksdb_column_family_handle_destroy(h);
    return;
  }
  s->orphan[s->norphan] = h;
  s->orphan_names[s->norphan++] = strdup(name);
}

/* Reads the specs of the "default" family and pairs each with its family (taken out of h,
 * created when missing). On failure the families already paired are destroyed. */
static ps_status load_specs(ps_store *s, const char **cfn, rocksdb_column_family_handle_t **h,
                            size_t n, store_cold_table **found, size_t *nfound, ps_error *err) {
  store_cold_table *f = NULL;
  size_t nf = 0, cap = 0;
  ps_status st = PS_OK;
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro_iter, s->meta_cf);
  rocksdb_iter_seek(it, "spec/", 5);
  for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl);
    const char *v = rocksdb_iter_value(it, &vl);
    if (kl < 5 || memcmp(k, "spec/", 5) != 0) break;
    ps_table_spec sp;
    if (store_spec_decode(v, vl, &sp) != PS_OK || store_spec_validate(&sp, NULL) != PS_OK) {
      st = ps_error_set(err, PS_ERR_CORRUPT, "%s: stored table spec %.*s is corrupt", s->path,
                        (int)kl, k);
      break;
    }
    if (nf == cap) {
      size_t nc = cap ? 2 * cap : 16;
      store_cold_table *g = realloc(f, nc * sizeof *g);
      if (!g) {
        st = ps_error_set(err, PS_ERR_NOMEM, "%s: no memory for the table specs", s->path);
        break;
      }
      f = g;
      cap = nc;
    }
    char cfname[16];
    snprintf(cfname, sizeof(cfname), "t%u", sp.id);
    rocksdb_column_family_handle_t *cf = NULL;
    for (size_t i = 0; i < n; i++)
      if (h[i] && strcmp(cfn[i], cfname) == 0) {
        cf = h[i];
        h[i] = NULL;
      }
    if (!cf && s->opt.read_only) {
      st = ps_error_set(err, PS_ERR_CORRUPT, "%s: table %u has no column family", s->path, sp.id);
      break;
    }
    if (!cf) {
      char *rerr = NULL;
      cf = rocksdb_create_column_family(s->db, s->dbopt, cfname, &rerr);
      if (rerr) {
        st = store_rdb_error(err, "create column family", rerr);
        break;
      }
    }
    f[nf++] = (store_cold_table){sp, cf};
  }
  rocksdb_iter_destroy(it);
  if (st != PS_OK) {
    for (size_t i = 0; i < nf; i++) rocksdb_column_family_handle_destroy(f[i].cf);
    free(f);
    return st;
  }
  *found = f;
  *nfound = nf;
  return PS_OK;
}

ps_status store_cold_open(ps_store *s, store_cold_table **found, size_t *nfound, ps_error *err) {
  *found = NULL;
  *nfound = 0;
  char *rerr = NULL;
  size_t ncf = 0;
  char **names = rocksdb_list_column_families(s->dbopt, s->path, &ncf, &rerr);
  if (rerr && s->opt.read_only) { /* nothing to read: never a new database */
    free(names);
    return store_rdb_error(err, "open read-only", rerr);
  }
  if (rerr) { /* a new database (RocksDB still returns a malloc(0) array) */
    free(rerr);
    rerr = NULL;
    free(names);
    names = NULL;
    ncf = 0;
  }
  const char *defname = "default";
  size_t n = ncf ? ncf : 1;
  const char **cfn = malloc(n * sizeof(char *));
  const rocksdb_options_t **cfo = malloc(n * sizeof(rocksdb_options_t *));
  rocksdb_column_family_handle_t **h = calloc(n, sizeof(*h));
  ps_status st = PS_OK;
  if (!cfn || !cfo || !h) {
    st = ps_error_set(err, PS_ERR_NOMEM, "%s: no memory to open the database", s->path);
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    cfn[i] = ncf ? names[i] : defname;
    cfo[i] = s->dbopt;
  }
  if (s->opt.read_only)
    s->db = rocksdb_open_for_read_only_column_families(s->dbopt, s->path, (int)n, cfn, cfo, h, 0,
                                                       &rerr);
  else
    s->db = rocksdb_open_column_families(s->dbopt, s->path, (int)n, cfn, cfo, h, &rerr);
  if (rerr) {
    st = store_rdb_error(err, "open", rerr);
    s->db = NULL;
    goto out;
  }
  /* Specs first, then match families by name. */
  for (size_t i = 0; i < n; i++)
    if (strcmp(cfn[i], "default") == 0) s->meta_cf = h[i];
  st = load_specs(s, cfn, h, n, found, nfound, err);
  for (size_t i = 0; i < n; i++)
    if (h[i] && h[i] != s->meta_cf) keep_orphan(s, h[i], cfn[i]);
out:
  if (names) rocksdb_list_column_families_destroy(names, ncf);
  free(cfn);
  free(cfo);
  free(h);
  return st;
}

void store_cold_close(ps_store *s) {
  for (size_t i = 0; i < s->ntables; i++) {
    if (s->tables[i].cf) rocksdb_column_family_handle_destroy(s->tables[i].cf);
    s->tables[i].cf = NULL;
  }
  for (size_t i = 0; i < s->norphan; i++) {
    if (s->orphan[i]) rocksdb_column_family_handle_destroy(s->orphan[i]);
    free(s->orphan_names[i]);
  }
  free(s->orphan);
  free(s->orphan_names);
  s->orphan = NULL;
  s->orphan_names = NULL;
  s->norphan = 0;
  if (s->meta_cf) rocksdb_column_family_handle_destroy(s->meta_cf);
  s->meta_cf = NULL;
  if (s->db) rocksdb_close(s->db);
  s->db = NULL;
}

void store_cold_options_destroy(ps_store *s) {
  if (s->ro) rocksdb_readoptions_destroy(s->ro);
  if (s->ro_iter) rocksdb_readoptions_destroy(s->ro_iter);
  if (s->wo) rocksdb_writeoptions_destroy(s->wo);
  if (s->wo_sync) rocksdb_writeoptions_destroy(s->wo_sync);
  if (s->fo) rocksdb_flushoptions_destroy(s->fo);
  if (s->dbopt) rocksdb_options_destroy(s->dbopt);
  if (s->bbto) rocksdb_block_based_options_destroy(s->bbto);
  if (s->cache) rocksdb_cache_destroy(s->cache);
}

/* RocksDB tuned for random point lookups of small fixed-size values (see the file comment
 * of bench/embedding/ps_store_bench.c and bench/RESULTS-embedding.md):
 * - full-key bloom filters (10 bits/key, ~1% false positives) so a miss for a never-stored
 *   key (first pull of a new feature) rarely reads a data block; memtable bloom too;
 * - 4 KB blocks with the in-block hash index (kDataBlockBinaryAndHash): a lookup inside a
 *   cached block is a hash probe, not a binary search;
 * - index and filter blocks held by the table readers (not in the LRU block cache, where
 *   row blocks would push them out), max_open_files = -1 so no reader is ever closed;
 * - no compression: rows are float32 with random mantissas that do not compress, and every
 *   miss would pay decompression;
 * - WAL by durability: NONE disables it (rows become durable at flush/snapshot — the server
 *   checkpoints at step boundaries anyway), WAL keeps it unsynced, SYNC syncs each batch.
 *   Table specs are always written with a synced WAL write. */
void store_cold_options_create(ps_store *s) {
  s->dbopt = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(s->dbopt, !s->opt.read_only);
  rocksdb_options_set_create_missing_column_families(s->dbopt, !s->opt.read_only);
  rocksdb_options_set_max_open_files(s->dbopt, -1);
  rocksdb_options_set_max_background_jobs(s->dbopt, 2);
  rocksdb_options_set_compression(s->dbopt, rocksdb_no_compression);
  rocksdb_options_set_level_compaction_dynamic_level_bytes(s->dbopt, 1);
  rocksdb_options_set_write_buffer_size(s->dbopt, s->opt.write_buffer_bytes);
  rocksdb_options_set_max_write_buffer_number(s->dbopt, 2);
  /* Memtable: a hash of short sorted lists keyed by the whole 8-byte key (fixed-prefix
   * extractor of 8) instead of the default skip list: every write-back of an evicted row and
   * every memtable probe of a miss is a hash lookup, not a log(n) walk of cache misses
   * (measured: the skip list insert was the largest cost of the over-budget cases).
   * Iteration (specs at open, expire) then needs total_order_seek. */
  rocksdb_options_set_prefix_extractor(s->dbopt, rocksdb_slicetransform_create_fixed_prefix(8));
  rocksdb_options_set_hash_link_list_rep(s->dbopt, 1u << 16);
  rocksdb_options_set_allow_concurrent_memtable_write(s->dbopt, 0);
  rocksdb_options_set_memtable_prefix_bloom_size_ratio(s->dbopt, 0.02);
  rocksdb_options_set_memtable_whole_key_filtering(s->dbopt, 1);
  /* RocksDB's own LOG file gets fatal errors only: it lives on the data disk, and once an
   * append to it failed (a full disk) the next message it logs aborts the process in Debian's
   * librocksdb, which is built with assertions (seen: the free-space poll's "Cannot clear hard
   * error" line, tests/embedding/test_store_disk_full.c). What fails reaches the store's own
   * log with RocksDB's text anyway. */
  rocksdb_options_set_info_log_level(s->dbopt, 4 /* FATAL */);
  rocksdb_options_set_keep_log_file_num(s->dbopt, 2);
  s->bbto = rocksdb_block_based_options_create();
  rocksdb_block_based_options_set_block_size(s->bbto, 4096);
  rocksdb_block_based_options_set_filter_policy(s->bbto, rocksdb_filterpolicy_create_bloom_full(10));
  rocksdb_block_based_options_set_whole_key_filtering(s->bbto, 1);
  rocksdb_block_based_options_set_data_block_index_type(s->bbto, 1 /* binary and hash */);
  rocksdb_block_based_options_set_data_block_hash_ratio(s->bbto, 0.75);
  rocksdb_block_based_options_set_format_version(s->bbto, 5);
  s->cache = rocksdb_cache_create_lru(s->opt.block_cache_bytes);
  rocksdb_block_based_options_set_block_cache(s->bbto, s->cache);
  rocksdb_options_set_block_based_table_factory(s->dbopt, s->bbto);
  s->ro = rocksdb_readoptions_create();
  s->ro_iter = rocksdb_readoptions_create();
  rocksdb_readoptions_set_total_order_seek(s->ro_iter, 1);
  rocksdb_readoptions_set_fill_cache(s->ro_iter, 0); /* scans must not flush the block cache */
  s->wo = rocksdb_writeoptions_create();
  s->wo_sync = rocksdb_writeoptions_create();
  rocksdb_writeoptions_set_sync(s->wo_sync, 1);
  if (s->opt.durability == PS_DURABILITY_NONE) rocksdb_writeoptions_disable_WAL(s->wo, 1);
  if (s->opt.durability == PS_DURABILITY_SYNC) rocksdb_writeoptions_set_sync(s->wo, 1);
  s->fo = rocksdb_flushoptions_create();
  rocksdb_flushoptions_set_wait(s->fo, 1);
}
