/* 16-bit row types in the store (issue 33): a record is its header (byte 3 the row type), the
 * values in the row type padded to 4 bytes, and the f32 optimizer state; ps_store_pull_rows
 * gives the stored halves and ps_store_pull the same widened; rows evicted to RocksDB and read
 * back (a hot tier of 64 KB) equal the rows of a roomy store bit for bit; the spec's row type
 * survives a reopen; a record of an f16 table is refused by an f32 one; a checkpoint's
 * manifest names its row type (ps_store_checkpoint_spec) and restoring it over a table declared
 * f32 is refused, changing nothing; a spec stored before row types reads as f32. (Values against an independent reference: tests/lib/
 * test_py_row_type.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include <rocksdb/c.h>

#include "ps_store.h"
#include "ps_wire_half.h"

enum { DIM = 9, NKEYS = 3000 };

static char g_dir[4][128];

static ps_store *open_at(int i, size_t cache) {
  ps_store_options o = {.path = g_dir[i], .cache_bytes = cache, .partitions = 2};
  ps_store *s = NULL;
  ps_error e;
  if (ps_store_open(&o, &s, &e) != PS_OK) fail_msg("open: %s", e.msg);
  return s;
}

static ps_table_spec spec_of(ps_row_type rt) {
  ps_table_spec sp;
  ps_table_spec_default(&sp, 4, "rows", DIM);
  sp.optimizer = PS_OPT_ADAGRAD;
  sp.lr = 0.3f;
  sp.initial_accumulator = 0.1f;
  sp.init_a = -0.7f;
  sp.init_b = 0.7f;
  sp.seed = 9;
  sp.row_type = rt;
  return sp;
}

static void declare(ps_store *s, ps_row_type rt) {
  ps_table_spec sp = spec_of(rt);
  ps_error e;
  if (ps_store_declare(s, &sp, &e) != PS_OK) fail_msg("declare: %s", e.msg);
}

static void train(ps_store *s) {
  static uint64_t keys[NKEYS];
  static float g[NKEYS * DIM];
  for (int t = 0; t < 5; t++) {
    for (int i = 0; i < NKEYS; i++) {
      keys[i] = (uint64_t)((i * 7 + t * 13) % NKEYS) + 1;
      for (int j = 0; j < DIM; j++) g[i * DIM + j] = (float)((i + 3 * j + t) % 13 - 6) * 0.05f;
    }
    ps_store_set_step(s, (uint64_t)t + 1);
    assert_int_equal(ps_store_push(s, 4, keys, NKEYS, g), PS_OK);
  }
}

static void all_keys(uint64_t *k) {
  for (int i = 0; i < NKEYS; i++) k[i] = (uint64_t)i + 1;
}

/* Store i reopened: its table 4 has row type `want` and rows a (every key), bit for bit. */
static ps_store *reopened_same(int i, size_t cache, ps_row_type want, const float *a) {
  static uint64_t k[NKEYS];
  static float b[NKEYS * DIM];
  all_keys(k);
  ps_store *s = open_at(i, cache);
  ps_table_spec got;
  assert_int_equal(ps_store_get_spec(s, 4, &got), PS_OK);
  assert_int_equal(got.row_type, want);
  assert_int_equal(ps_store_pull(s, 4, k, NKEYS, b), PS_OK);
  assert_memory_equal(a, b, sizeof b);
  return s;
}

static void test_rows_are_halves(void **st) {
  (void)st;
  ps_table_spec sp = spec_of(PS_ROW_F16);
  /* header 8 + metadata 16 + 9 halves padded to 20 + 9 f32 sums */
  assert_int_equal(ps_store_record_bytes(&sp), 8 + 16 + 20 + 36);
  sp.row_type = PS_ROW_F32;
  assert_int_equal(ps_store_record_bytes(&sp), 8 + 16 + 36 + 36);

  ps_store *roomy = open_at(0, 64u << 20), *tiny = open_at(1, 64u << 10);
  declare(roomy, PS_ROW_F16);
  declare(tiny, PS_ROW_F16);
  train(roomy);
  train(tiny);
  static uint64_t k[NKEYS];
  static float a[NKEYS * DIM], b[NKEYS * DIM], w[NKEYS * DIM];
  static uint16_t h[NKEYS * DIM];
  all_keys(k);
  assert_int_equal(ps_store_pull(roomy, 4, k, NKEYS, a), PS_OK);
  assert_int_equal(ps_store_pull(tiny, 4, k, NKEYS, b), PS_OK);
  ps_store_stats stats;
  ps_store_get_stats(tiny, &stats);
  assert_true(stats.evictions > NKEYS / 2); /* the tiny store's rows went through RocksDB */
  assert_memory_equal(a, b, sizeof a);
  assert_int_equal(ps_store_pull_rows(tiny, 4, k, NKEYS, h), PS_OK);
  ps_wire_f16_to_f32(h, w, NKEYS * DIM);
  assert_memory_equal(w, a, sizeof a); /* the stored halves, widened: the f32 pull */
  /* a record: its header names f16, its values are the stored halves */
  char rec[128];
  size_t len = 0;
  assert_int_equal(ps_store_export_row(tiny, 4, 1, rec, sizeof rec, &len, NULL), PS_OK);
  assert_int_equal(len, 80);
  assert_int_equal(rec[3], PS_ROW_F16);
  assert_memory_equal(rec + 24, h, DIM * 2);
  assert_int_equal(rec[24 + DIM * 2] | rec[25 + DIM * 2], 0); /* the padding is zero */
  ps_store_close(&roomy);
  ps_store_close(&tiny);

  /* reopened: still f16 rows, the same bits; an f32 declaration is refused naming row_type */
  tiny = reopened_same(1, 64u << 10, PS_ROW_F16, a);
  ps_table_spec got;
  ps_table_spec f32 = spec_of(PS_ROW_F32);
  ps_error e;
  assert_int_equal(ps_store_declare(tiny, &f32, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "row_type f16 vs f32"));

  /* an f16 record into an f32 table: refused, nothing written */
  ps_store *other = open_at(2, 8u << 20);
  declare(other, PS_ROW_F32);
  uint64_t one = 1;
  assert_int_equal(ps_store_import_rows(other, 4, &one, rec, 1, &e), PS_ERR_INVALID);
  ps_store_close(&other);

  /* a checkpoint names its row type; restoring it over an f32 table is refused */
  char ck[160];
  snprintf(ck, sizeof ck, "%s/ck", g_dir[3]);
  assert_int_equal(mkdir(g_dir[3], 0755), 0);
  if (ps_store_checkpoint(tiny, ck, 5, 0, NULL, &e) != PS_OK) fail_msg("checkpoint: %s", e.msg);
  assert_int_equal(ps_store_checkpoint_commit(tiny, ck, &e), PS_OK);
  ps_table_spec cs;
  assert_int_equal(ps_store_checkpoint_spec(ck, 4, &cs, &e), PS_OK);
  assert_int_equal(cs.row_type, PS_ROW_F16);
  assert_int_equal(ps_store_checkpoint_spec(ck, 5, &cs, NULL), PS_ERR_NOT_FOUND);
  other = open_at(2, 8u << 20);
  assert_int_equal(ps_store_restore(other, ck, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "row_type f32 vs f16"));
  assert_int_equal(ps_store_get_spec(other, 4, &got), PS_OK);
  assert_int_equal(got.row_type, PS_ROW_F32); /* unchanged */
  ps_store_close(&other);
  ps_store_close(&tiny);
}

/* Rows that a hot budget holds, from the layout alone: each of the parts partitions has
 * budget/parts bytes for its index (24-byte entries, a power of two of them from 64, doubled
 * whenever one more key would load it past 0.7) and its rows (row bytes each, a jemalloc class:
 * 128 and 256 are classes). Once full, every insert evicts one row: the index stops where the
 * rows that fit beside it, plus the one coming in, load it to at most 0.7. */
static uint64_t rows_fitting(size_t budget, unsigned parts, size_t row) {
  const size_t b = budget / parts;
  for (size_t cap = 64;; cap *= 2) {
    size_t n = (b - cap * 24) / row;
    if ((n + 1) * 10 <= cap * 7) return (uint64_t)n * parts;
  }
}

/* The hot budget counts a row's real bytes: at the same cache_bytes an f16 SGD table of dim 64
 * (128-byte rows) keeps what the arithmetic above says (1.54x the rows of an f32 one, 256
 * bytes, in 1 MB: its index doubled once more), within budget. */
static void test_budget_counts_real_bytes(void **st) {
  (void)st;
  enum { N = 20000, D = 64 };
  static uint64_t k[N];
  static float g[N * D];
  uint64_t hot[2];
  for (int i = 0; i < N; i++) k[i] = (uint64_t)i * 7919u + 1;
  for (size_t i = 0; i < (size_t)N * D; i++) g[i] = 0.01f;
  for (int r = 0; r < 2; r++) {
    ps_store *s = open_at(r, 1u << 20);
    ps_table_spec sp;
    ps_table_spec_default(&sp, 2, "b", D);
    sp.row_type = r ? PS_ROW_F16 : PS_ROW_F32;
    ps_error e;
    assert_int_equal(ps_store_declare(s, &sp, &e), PS_OK);
    assert_int_equal(ps_store_push(s, 2, k, N, g), PS_OK);
    ps_store_stats stats;
    ps_store_get_stats(s, &stats);
    assert_true(stats.hot_bytes <= 1u << 20);
    hot[r] = stats.rows_hot;
    ps_store_close(&s);
    ps_store_snapshot_remove(g_dir[r], &e);
  }
  print_message("rows hot in 1 MB: f32 %llu, f16 %llu\n", (unsigned long long)hot[0],
                (unsigned long long)hot[1]);
  assert_int_equal(hot[0], rows_fitting(1u << 20, 2, 256));
  assert_int_equal(hot[1], rows_fitting(1u << 20, 2, 128));
  assert_true(hot[1] * 100 >= hot[0] * 150);
}

/* A data dir written before row types: its spec record is today's less the trailing row type
 * (4 bytes). Made by cutting them off with RocksDB directly; the store reads it as f32 rows. */
static void test_spec_before_row_types(void **st) {
  (void)st;
  ps_store *s = open_at(0, 8u << 20);
  declare(s, PS_ROW_F32);
  train(s);
  static uint64_t k[NKEYS];
  static float a[NKEYS * DIM];
  all_keys(k);
  assert_int_equal(ps_store_pull(s, 4, k, NKEYS, a), PS_OK);
  ps_store_close(&s);

  char *err = NULL;
  rocksdb_options_t *o = rocksdb_options_create();
  size_t ncf = 0;
  char **names = rocksdb_list_column_families(o, g_dir[0], &ncf, &err);
  assert_null(err);
  const rocksdb_options_t **cfo = malloc(ncf * sizeof *cfo);
  rocksdb_column_family_handle_t **h = malloc(ncf * sizeof *h);
  for (size_t i = 0; i < ncf; i++) cfo[i] = o;
  rocksdb_t *db = rocksdb_open_column_families(o, g_dir[0], (int)ncf, (const char *const *)names,
                                               cfo, h, &err);
  assert_null(err);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
  size_t len = 0;
  char *v = rocksdb_get(db, ro, "spec/00004", 10, &len, &err);
  assert_non_null(v);
  assert_int_equal(len, 148); /* 144 bytes before row types, then the u32 row type */
  rocksdb_put(db, wo, "spec/00004", 10, v, len - 4, &err);
  assert_null(err);
  free(v);
  for (size_t i = 0; i < ncf; i++) rocksdb_column_family_handle_destroy(h[i]);
  rocksdb_close(db);
  rocksdb_list_column_families_destroy(names, ncf);
  rocksdb_readoptions_destroy(ro);
  rocksdb_writeoptions_destroy(wo);
  rocksdb_options_destroy(o);
  free(cfo);
  free(h);

  s = reopened_same(0, 8u << 20, PS_ROW_F32, a);
  declare(s, PS_ROW_F32); /* the same spec as today's f32 declaration */
  ps_store_close(&s);
  ps_error e;
  ps_store_snapshot_remove(g_dir[0], &e);
}

static int setup(void **st) {
  (void)st;
  for (int i = 0; i < 4; i++)
    snprintf(g_dir[i], sizeof g_dir[i], "/tmp/ember-test-rowtype-%d-%d", i, (int)getpid());
  return 0;
}

static int teardown(void **st) {
  (void)st;
  ps_error e;
  for (int i = 0; i < 4; i++) ps_store_snapshot_remove(g_dir[i], &e);
  return 0;
}

PS_TEST_MAIN("store_rowtype", setup, teardown, cmocka_unit_test(test_budget_counts_real_bytes),
             cmocka_unit_test(test_spec_before_row_types), cmocka_unit_test(test_rows_are_halves))
