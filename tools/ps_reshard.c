/* ps_reshard: a checkpoint's rows moved from its N shards to M (ps_reshard.h says what and
 * why). The flow: every table of every source shard is declared on M fresh stores (one per
 * destination shard, in step-N/shards/shard-J.build), each source shard's rows are scanned in
 * RocksDB order and batched per destination (ps_shard_of on M), each batch imported as whole
 * records; then each destination is snapshotted to shard-J (as a server's checkpoint is), its
 * shard-J.json written (the step, M, the servers' table metadata of the source), the rows
 * counted again from the snapshots, the dense state copied and `latest` written last. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_ckpt_layout.h"
#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_log.h"
#include "ps_reshard.h"
#include "ps_time.h"

#define PROGRESS_ROWS (1u << 20) /* a progress line every this many rows */

/* One destination shard while rows arrive: its store and the rows not yet imported. */
typedef struct dest {
  ps_store *store;
  uint64_t *keys;
  char *recs;
  size_t n;
} dest;

typedef struct mover {
  ps_store *src;
  uint32_t table, m;
  size_t rb, cap; /* record bytes; rows per import batch */
  dest *d;
  uint64_t rows, t0;
  ps_error *err;
} mover;

static ps_status drain(mover *mv, dest *d) {
  ps_status st = d->n ? ps_store_import_rows(d->store, mv->table, d->keys, d->recs, d->n, mv->err)
                      : PS_OK;
  d->n = 0;
  return st;
}

/* ps_store_row_fn over a source shard: the row's whole record to its destination's batch. */
static ps_status move_row(void *ctx, uint64_t key, const float *values) {
  (void)values; /* the record (values, optimizer state, metadata) is read whole below */
  mover *mv = ctx;
  dest *d = &mv->d[ps_shard_of(key, mv->m)];
  size_t len = 0;
  ps_status st = ps_store_export_row(mv->src, mv->table, key, d->recs + d->n * mv->rb, mv->rb,
                                     &len, mv->err);
  if (st != PS_OK) return st;
  d->keys[d->n++] = key;
  if (++mv->rows % PROGRESS_ROWS == 0) {
    double s = ps_ns_to_s(ps_now_ns() - mv->t0);
    PS_INFO("%" PRIu64 " rows moved (%.0f rows/s)", mv->rows, s > 0 ? (double)mv->rows / s : 0.0);
  }
  return d->n == mv->cap ? drain(mv, d) : PS_OK;
}

static bool dir_empty(const char *path) {
  DIR *dp = opendir(path);
  if (!dp) return false;
  struct dirent *e;
  bool empty = true;
  while (empty && (e = readdir(dp)))
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  closedir(dp);
  return empty;
}

/* The union (by id) of the source shards' table metadata (shard-I.json "tables"). */
static ps_status tables_meta(ps_ckpt *ck, json_t **out, ps_error *err) {
  json_t *all = json_array();
  for (uint32_t i = 0; i < ps_ckpt_nshards(ck); i++) {
    char p[4400];
    ps_ckpt_step_shard_path(p, sizeof p, ps_ckpt_dir(ck), i, PS_CKPT_SHARD_META);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je), *tabs = json_object_get(j, "tables"), *t;
    if (!json_is_array(tabs)) {
      json_decref(j);
      json_decref(all);
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: no \"tables\" (%s)", p, j ? "" : je.text);
    }
    size_t k, l;
    json_t *have;
    json_array_foreach(tabs, k, t) {
      bool dup = false;
      json_array_foreach(all, l, have) dup |= json_equal(json_object_get(have, "id"),
                                                         json_object_get(t, "id"));
      if (!dup) json_array_append(all, t);
    }
    json_decref(j);
  }
  *out = all;
  return PS_OK;
}

static ps_status write_shard_json(const char *shards, uint32_t j, uint32_t m, uint64_t step,
                                  json_t *tables, ps_error *err) {
  char p[4400];
  ps_ckpt_shard_path(p, sizeof p, shards, j, PS_CKPT_SHARD_META);
  json_t *o = json_pack("{s:i, s:I, s:I, s:I, s:O}", "format", 1, "step", (json_int_t)step,
                        "shard", (json_int_t)j, "shards", (json_int_t)m, "tables", tables);
  int rc = o ? json_dump_file(o, p, JSON_INDENT(1) | JSON_SORT_KEYS) : -1;
  json_decref(o);
  return rc == 0 ? PS_OK : ps_error_set(err, PS_ERR_IO, "cannot write %s", p);
}

/* Opens the M destination stores and declares every table of every source shard on each. */
static ps_status open_dests(ps_ckpt *ck, const char *shards, dest *d, uint32_t m, ps_error *err) {
  size_t wbuf = ((size_t)256 << 20) / m;
  if (wbuf < ((size_t)1 << 20)) wbuf = (size_t)1 << 20;
  if (wbuf > ((size_t)16 << 20)) wbuf = (size_t)16 << 20;
  static uint32_t ids[PS_STORE_MAX_TABLES];
  for (uint32_t j = 0; j < m; j++) {
    char p[4400];
    ps_ckpt_shard_path(p, sizeof p, shards, j, PS_CKPT_SHARD_BUILD);
    ps_store_options o = {.path = p, .cache_bytes = (size_t)16 << 20, .partitions = 1,
                          .block_cache_bytes = (size_t)8 << 20, .write_buffer_bytes = wbuf};
    ps_status st = ps_store_open(&o, &d[j].store, err);
    for (uint32_t i = 0; st == PS_OK && i < ps_ckpt_nshards(ck); i++) {
      ps_store *src = ps_ckpt_shard(ck, i);
      size_t n = ps_store_tables(src, ids, PS_STORE_MAX_TABLES);
      for (size_t t = 0; st == PS_OK && t < n; t++) {
        ps_table_spec sp;
        st = ps_store_get_spec(src, ids[t], &sp);
        if (st != PS_OK) ps_error_set(err, st, "shard %u: table %u: %s", i, ids[t], ps_status_str(st));
        else if ((st = ps_store_declare(d[j].store, &sp, err)) != PS_OK)
          ps_error_prefix(err, "table %u of source shard %u: ", ids[t], i);
      }
    }
    if (st != PS_OK) return st;
  }
  return PS_OK;
}

/* Every row of every table of every source shard into the destinations' stores. */
static ps_status move_rows(ps_ckpt *ck, dest *d, uint32_t m, ps_reshard_stats *stats,
                           ps_error *err) {
  static uint32_t ids[PS_STORE_MAX_TABLES];
  size_t nt = ps_store_tables(d[0].store, ids, PS_STORE_MAX_TABLES);
  mover mv = {.m = m, .d = d, .t0 = ps_now_ns(), .err = err};
  ps_status st = PS_OK;
  size_t cap_rb = 0; /* the batch buffers, sized for the widest record */
  for (size_t t = 0; t < nt; t++) {
    ps_table_spec sp;
    if (ps_store_get_spec(d[0].store, ids[t], &sp) == PS_OK && ps_store_record_bytes(&sp) > cap_rb)
      cap_rb = ps_store_record_bytes(&sp);
  }
  size_t cap = ((size_t)32 << 20) / ((size_t)m * (cap_rb ? cap_rb : 1));
  mv.cap = cap < 64 ? 64 : cap > 4096 ? 4096 : cap;
  for (uint32_t j = 0; j < m; j++) {
    d[j].keys = malloc(mv.cap * sizeof(uint64_t));
    d[j].recs = malloc(mv.cap * (cap_rb ? cap_rb : 1));
    if (!d[j].keys || !d[j].recs) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  for (size_t t = 0; st == PS_OK && t < nt; t++) {
    ps_table_spec sp;
    ps_store_get_spec(d[0].store, ids[t], &sp);
    mv.table = ids[t];
    mv.rb = ps_store_record_bytes(&sp);
    for (uint32_t i = 0; st == PS_OK && i < ps_ckpt_nshards(ck); i++) {
      mv.src = ps_ckpt_shard(ck, i);
      ps_table_spec have;
      if (ps_store_get_spec(mv.src, ids[t], &have) != PS_OK) continue; /* not on this shard */
      if ((st = ps_store_scan(mv.src, ids[t], move_row, &mv, err)) != PS_OK)
        ps_error_prefix(err, "source shard %u: ", i);
    }
    for (uint32_t j = 0; st == PS_OK && j < m; j++) st = drain(&mv, &d[j]);
  }
  stats->rows = mv.rows;
  stats->tables = (uint32_t)nt;
  stats->seconds = ps_ns_to_s(ps_now_ns() - mv.t0);
  return st;
}

typedef struct counter {
  uint32_t j, m;
  uint64_t rows;
  ps_error *err;
} counter;

static ps_status count_row(void *ctx, uint64_t key, const float *values) {
  (void)values;
  counter *c = ctx;
  c->rows++;
  if (ps_shard_of(key, c->m) == c->j) return PS_OK;
  return ps_error_set(c->err, PS_ERR_CORRUPT, "key %" PRIu64 " was written to shard %u, it "
                      "routes to %u", key, c->j, ps_shard_of(key, c->m));
}

/* The rows of the finished snapshots, counted and their routing checked: every row once. */
static ps_status check_rows(const char *shards, uint32_t m, uint64_t want, ps_error *err) {
  static uint32_t ids[PS_STORE_MAX_TABLES];
  uint64_t have = 0;
  ps_status st = PS_OK;
  for (uint32_t j = 0; st == PS_OK && j < m; j++) {
    char p[4400];
    ps_ckpt_shard_path(p, sizeof p, shards, j, PS_CKPT_SHARD_DIR);
    ps_store_options o = {.path = p, .cache_bytes = (size_t)16 << 20, .partitions = 1,
                          .read_only = true};
    ps_store *s = NULL;
    if ((st = ps_store_open(&o, &s, err)) != PS_OK) break;
    counter c = {j, m, 0, err};
    size_t nt = ps_store_tables(s, ids, PS_STORE_MAX_TABLES);
    for (size_t t = 0; st == PS_OK && t < nt; t++) st = ps_store_scan(s, ids[t], count_row, &c, err);
    have += c.rows;
    ps_store_close(&s);
  }
  if (st == PS_OK && have != want)
    st = ps_error_set(err, PS_ERR_CORRUPT, "%" PRIu64 " rows read, %" PRIu64 " written: a key "
                      "is stored on two shards of the checkpoint", want, have);
  return st;
}

/* config, dense.bin and schema.json (when the run had one) of the source step directory. */
static ps_status copy_dense(ps_ckpt *ck, const char *step_dir, ps_error *err) {
  static const ps_ckpt_file files[] = {PS_CKPT_CONFIG, PS_CKPT_DENSE, PS_CKPT_SCHEMA};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char from[4400], to[4400];
    ps_ckpt_file_path(from, sizeof from, ps_ckpt_dir(ck), files[i]);
    ps_ckpt_file_path(to, sizeof to, step_dir, files[i]);
    if (files[i] == PS_CKPT_SCHEMA && access(from, F_OK) != 0) continue;
    if (ps_copy_file(from, to) != PS_OK)
      return ps_error_set(err, PS_ERR_IO, "copying %s to %s: %s", from, to, strerror(errno));
  }
  return PS_OK;
}

/* Each destination's store snapshotted to shard-J (then the build store deleted), and its
 * shard-J.json. */
static ps_status finish_shards(ps_ckpt *ck, const char *shards, dest *d, uint32_t m,
                               ps_error *err) {
  json_t *tables = NULL;
  ps_status st = tables_meta(ck, &tables, err);
  for (uint32_t j = 0; st == PS_OK && j < m; j++) {
    char p[4400], b[4400];
    ps_ckpt_shard_path(p, sizeof p, shards, j, PS_CKPT_SHARD_DIR);
    ps_ckpt_shard_path(b, sizeof b, shards, j, PS_CKPT_SHARD_BUILD);
    st = ps_store_snapshot(d[j].store, p, err);
    ps_store_close(&d[j].store);
    if (st == PS_OK && ps_rm_rf(b) != PS_OK)
      st = ps_error_set(err, PS_ERR_IO, "removing %s: %s", b, strerror(errno));
    if (st == PS_OK) st = write_shard_json(shards, j, m, ps_ckpt_step(ck), tables, err);
  }
  json_decref(tables);
  return st;
}

ps_status ps_reshard(ps_ckpt *ck, uint32_t m, const char *out, ps_reshard_stats *stats,
                     ps_error *err) {
  ps_reshard_stats local = {0};
  if (!stats) stats = &local;
  if (!ck || !out || !out[0]) return ps_error_set(err, PS_ERR_INVALID, "no checkpoint or output");
  if (m < 1 || m > PS_RESHARD_MAX_SHARDS)
    return ps_error_set(err, PS_ERR_INVALID, "%u shards: 1 to %u", m, PS_RESHARD_MAX_SHARDS);
  struct stat sb;
  if (stat(out, &sb) == 0 && (!S_ISDIR(sb.st_mode) || !dir_empty(out)))
    return ps_error_set(err, PS_ERR_INVALID, "%s exists and is not an empty directory", out);
  char step_dir[4200], shards[4300];
  if (ps_ckpt_step_path(step_dir, sizeof step_dir, out, ps_ckpt_step(ck)) != PS_OK ||
      ps_ckpt_file_path(shards, sizeof shards, step_dir, PS_CKPT_SHARDS) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "%s: path too long", out);
  if (ps_mkdir_p(shards) != PS_OK)
    return ps_error_set(err, PS_ERR_IO, "cannot create %s: %s", shards, strerror(errno));
  dest *d = calloc(m, sizeof *d);
  ps_status st = d ? open_dests(ck, shards, d, m, err) : ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  if (st == PS_OK) st = move_rows(ck, d, m, stats, err);
  if (st == PS_OK) st = finish_shards(ck, shards, d, m, err);
  for (uint32_t j = 0; d && j < m; j++) {
    ps_store_close(&d[j].store); /* after a failure: the rest is deleted below */
    free(d[j].keys);
    free(d[j].recs);
  }
  free(d);
  uint64_t t0 = ps_now_ns();
  if (st == PS_OK) st = check_rows(shards, m, stats->rows, err);
  stats->check_seconds = ps_ns_to_s(ps_now_ns() - t0);
  if (st == PS_OK) st = copy_dense(ck, step_dir, err);
  if (st == PS_OK) st = ps_ckpt_latest_write(out, ps_ckpt_step(ck), err);
  if (st != PS_OK) ps_rm_rf(step_dir); /* not a checkpoint: no `latest` names it */
  return st;
}
