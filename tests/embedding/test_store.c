/* test_store: ps_store behaviour with exact expectations — declare/conflict, deterministic init,
 * 10x-over-budget eviction (bit-identical rows, RSS bound, restart), admission and TTL counts,
 * snapshot/restore bit-exactness, corrupted stored values, concurrent pushes.
 * Expected values are computed here independently (SGD's one-op update in float, whose result
 * is exact to the bit), never read back from the store under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "ps_hash.h"
#include "ps_log.h"
#include "ps_store.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static char g_root[256];

static int rm_cb(const char *p, const struct stat *sb, int f, struct FTW *w) {
  (void)sb, (void)f, (void)w;
  return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static void mkpath(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_root, name); }

static ps_table_spec spec_sgd(uint32_t id, const char *name, uint32_t dim, float lr) {
  ps_table_spec s;
  memset(&s, 0, sizeof(s));
  s.id = id;
  snprintf(s.name, sizeof(s.name), "%s", name);
  s.dim = dim;
  s.optimizer = PS_OPT_SGD;
  s.lr = lr;
  s.init = PS_INIT_UNIFORM;
  s.init_a = -0.05f;
  s.init_b = 0.05f;
  s.seed = 1234;
  return s;
}

static ps_store *open_store(const char *path, size_t cache, uint32_t parts) {
  ps_store_options o = {.path = path, .cache_bytes = cache, .partitions = parts,
                        .durability = PS_DURABILITY_NONE, .block_cache_bytes = 8 << 20,
                        .write_buffer_bytes = 4 << 20};
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&o, &s, NULL), PS_OK);
  assert_non_null(s);
  return s;
}

static float grad_of(uint64_t key, uint32_t j, uint32_t pass) {
  uint64_t r = ps_mix64(key * 31 + j + ((uint64_t)pass << 40));
  return (float)((double)(r >> 11) * 0x1.0p-53 - 0.5);
}

/* The SGD row after one push of grad_of(key, ., pass) per pass, computed as the store must:
 * w = fma(-lr, g, w) in float (what torch.optim.SGD computes). */
static void expected_sgd(const ps_table_spec *sp, uint64_t key, uint32_t passes, float *w) {
  ps_store_init_row(sp, key, w);
  for (uint32_t p = 0; p < passes; p++)
    for (uint32_t j = 0; j < sp->dim; j++) w[j] = fmaf(-sp->lr, grad_of(key, j, p), w[j]);
}

/* The n rows of out, pulled for keys, equal expected_sgd's after `passes` pushes of each. */
static void assert_sgd_rows(const ps_table_spec *sp, const uint64_t *keys, size_t n,
                            const float *out, uint32_t passes) {
  float *exp = malloc(sp->dim * sizeof(float));
  assert_non_null(exp);
  for (size_t i = 0; i < n; i++) {
    expected_sgd(sp, keys[i], passes, exp);
    assert_memory_equal(exp, out + i * sp->dim, sp->dim * sizeof(float));
  }
  free(exp);
}

static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
  fclose(f);
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* ------------------------------------------------------------------ */

static void test_declare(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "declare");
  ps_store *s = open_store(p, 1 << 20, 2);
  ps_table_spec a = spec_sgd(7, "clicks", 16, 0.1f);
  assert_int_equal(ps_store_declare(s, &a, NULL), PS_OK);
  assert_int_equal(ps_store_declare(s, &a, NULL), PS_OK); /* same spec: no-op */
  ps_table_spec b = a;
  b.dim = 32;
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_CONFLICT);
  b = a;
  b.lr = 0.2f;
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_CONFLICT);
  b = a;
  b.id = 8; /* same name, other id */
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_CONFLICT);
  b = spec_sgd(0, "bad", 16, 0.1f);
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_INVALID);
  b = spec_sgd(9, "bad", 0, 0.1f);
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_INVALID);
  b = spec_sgd(9, "bad", 8, 0.1f);
  b.optimizer = (ps_optimizer)99;
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_INVALID);
  float out[16];
  uint64_t k = 5;
  assert_int_equal(ps_store_pull(s, 99, &k, 1, out), PS_ERR_UNKNOWN_TABLE);
  assert_int_equal(ps_store_push(s, 99, &k, 1, out), PS_ERR_UNKNOWN_TABLE);
  ps_table_spec got;
  assert_int_equal(ps_store_get_spec(s, 7, &got), PS_OK);
  assert_memory_equal(&got, &a, sizeof(a));
  assert_int_equal(ps_store_get_spec(s, 8, &got), PS_ERR_UNKNOWN_TABLE);
  ps_store_close(&s);
  assert_null(s);
  /* Specs persist: a reopened store knows the table and still refuses a conflict. */
  s = open_store(p, 1 << 20, 4);
  uint32_t ids[4];
  assert_int_equal(ps_store_tables(s, ids, 4), 1);
  assert_int_equal(ids[0], 7);
  assert_int_equal(ps_store_get_spec(s, 7, &got), PS_OK);
  assert_memory_equal(&got, &a, sizeof(a));
  assert_int_equal(ps_store_declare(s, &a, NULL), PS_OK);
  b = a;
  b.seed = 99;
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_ERR_CONFLICT);
  ps_store_close(&s);
}

/* The calls that can fail for a reason worth telling say it in their ps_error: the code they
 * return and a message naming what failed; a success leaves err untouched. */
static void expect_err(const ps_error *e, ps_status code, const char *part) {
  assert_int_equal(e->code, code);
  if (!strstr(e->msg, part)) fail_msg("message '%s' does not contain '%s'", e->msg, part);
}

/* A bulk write (one SST file ingested) that fails falls back to WriteBatches with ONE log line,
 * and that line carries RocksDB's reason: the ingest helper returns it in err and logs nothing
 * itself (docs/DESIGN.md "Errors": a library logs nothing it also returns). A directory takes
 * the SST file's path, so the writer cannot open it. */
static void test_bulk_fail_one_line(void **st) {
  (void)st;
  enum { N = 70000, D = 4 }; /* over the bulk path's threshold (65536 dirty rows) */
  char p[512], blocker[600], logf[600], line[1024];
  mkpath(p, sizeof(p), "bulkfail");
  ps_store *s = open_store(p, 256 << 20, 2);
  ps_table_spec a = spec_sgd(30, "bulkfail", D, 0.1f);
  assert_int_equal(ps_store_declare(s, &a, NULL), PS_OK);
  snprintf(blocker, sizeof(blocker), "%s/ingest-t30.sst", p);
  assert_int_equal(mkdir(blocker, 0755), 0);
  uint64_t *k = malloc(N * 8);
  float *g = calloc((size_t)N * D, 4);
  for (int i = 0; i < N; i++) k[i] = ps_mix64((uint64_t)i + 5);
  assert_int_equal(ps_store_push(s, 30, k, N, g), PS_OK);
  snprintf(logf, sizeof(logf), "%s/bulkfail.log", g_root);
  int saved = dup(STDERR_FILENO), fd = open(logf, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, STDERR_FILENO);
  close(fd);
  ps_status fs = ps_store_flush(s, NULL);
  dup2(saved, STDERR_FILENO);
  close(saved);
  assert_int_equal(fs, PS_OK); /* the WriteBatches wrote them */
  ps_store_stats ss;
  ps_store_get_stats(s, &ss);
  assert_true(ss.writebacks >= N);
  FILE *f = fopen(logf, "r");
  assert_non_null(f);
  int sst_lines = 0, told = 0;
  while (fgets(line, sizeof(line), f)) {
    if (!strstr(line, "SST")) continue;
    sst_lines++;
    told += strstr(line, "bulk write of 70000 dirty rows of table 30 failed (rocksdb writing an "
                         "SST file of dirty rows: ") != NULL;
  }
  fclose(f);
  assert_int_equal(sst_lines, 1);
  assert_int_equal(told, 1);
  ps_store_close(&s);
  rmdir(blocker);
  free(k);
  free(g);
}

static void test_errors_say_why(void **st) {
  (void)st;
  char p[512], snap[600];
  mkpath(p, sizeof(p), "errors");
  ps_error e;
  ps_store *s = NULL;
  ps_store_options o = {.path = p, .partitions = 2000};
  assert_int_equal(ps_store_open(&o, &s, &e), PS_ERR_INVALID);
  expect_err(&e, PS_ERR_INVALID, "2000 partitions");
  assert_null(s);
  char file[600]; /* a regular file where the database directory should be */
  snprintf(file, sizeof file, "%s/errors-file", g_root);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  o = (ps_store_options){.path = file, .partitions = 1};
  assert_int_equal(ps_store_open(&o, &s, &e), PS_ERR_IO);
  expect_err(&e, PS_ERR_IO, "rocksdb open");
  assert_null(s);
  s = open_store(p, 1 << 20, 2);
  ps_table_spec a = spec_sgd(7, "clicks", 16, 0.1f), b = a;
  ps_error_clear(&e);
  assert_int_equal(ps_store_declare(s, &a, &e), PS_OK);
  assert_int_equal(e.code, PS_OK); /* untouched */
  assert_string_equal(e.msg, "");
  b.dim = 32;
  assert_int_equal(ps_store_declare(s, &b, &e), PS_ERR_CONFLICT);
  expect_err(&e, PS_ERR_CONFLICT,
             "table 7 (clicks): declared again with a different spec (stored vs declared dim 16 "
             "vs 32)"); /* the field that differs, named */
  b = a;
  b.id = 8;
  assert_int_equal(ps_store_declare(s, &b, &e), PS_ERR_CONFLICT);
  expect_err(&e, PS_ERR_CONFLICT, "table name clicks already used by table 7");
  b = spec_sgd(9, "bad", 0, 0.1f);
  assert_int_equal(ps_store_declare(s, &b, &e), PS_ERR_INVALID);
  expect_err(&e, PS_ERR_INVALID, "dim 0");
  snprintf(snap, sizeof snap, "%s-snap", p);
  assert_int_equal(ps_store_snapshot(s, snap, &e), PS_OK);
  assert_int_equal(ps_store_snapshot(s, snap, &e), PS_ERR_INVALID);
  expect_err(&e, PS_ERR_INVALID, "already exists");
  assert_int_equal(ps_store_restore(s, "/nonexistent/snapshot", &e), PS_ERR_NOT_FOUND);
  expect_err(&e, PS_ERR_NOT_FOUND, "/nonexistent/snapshot is not a snapshot");
  assert_int_equal(ps_store_restore(s, snap, &e), PS_OK);
  assert_int_equal(ps_store_flush(s, &e), PS_OK);
  unsigned char rec[256];
  size_t len;
  assert_int_equal(ps_store_export_row(s, 7, 42, rec, sizeof rec, &len, &e), PS_ERR_NOT_FOUND);
  expect_err(&e, PS_ERR_NOT_FOUND, "table 7 key 42: no stored row");
  assert_int_equal(ps_store_export_row(s, 7, 42, rec, 4, &len, &e), PS_ERR_INVALID);
  expect_err(&e, PS_ERR_INVALID, "the buffer has 4");
  assert_int_equal(ps_store_export_row(s, 99, 42, rec, sizeof rec, &len, &e),
                   PS_ERR_UNKNOWN_TABLE);
  expect_err(&e, PS_ERR_UNKNOWN_TABLE, "table 99");
  ps_store_close(&s);
  assert_int_equal(ps_store_snapshot_remove(snap, &e), PS_OK);
  assert_int_equal(ps_store_snapshot_remove(snap, &e), PS_OK); /* none: fine */
}

static void test_init_deterministic(void **st) {
  (void)st;
  char p1[512], p2[512];
  mkpath(p1, sizeof(p1), "init1");
  mkpath(p2, sizeof(p2), "init4");
  ps_store *s1 = open_store(p1, 1 << 20, 1), *s4 = open_store(p2, 1 << 20, 4);
  ps_table_spec u = spec_sgd(1, "u", 33, 0.1f);
  ps_table_spec n = spec_sgd(2, "n", 33, 0.1f);
  n.init = PS_INIT_NORMAL;
  n.init_a = 0.5f;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ps_store_declare(s1, i ? &n : &u, NULL), PS_OK);
    assert_int_equal(ps_store_declare(s4, i ? &n : &u, NULL), PS_OK);
  }
  enum { N = 3000 };
  uint64_t *keys = malloc(N * sizeof(uint64_t));
  float *a = malloc(N * 33 * sizeof(float)), *b = malloc(N * 33 * sizeof(float));
  float row[33];
  for (int i = 0; i < N; i++) keys[i] = ps_mix64((uint64_t)i) ^ 0xabcdef;
  for (int t = 1; t <= 2; t++) {
    const ps_table_spec *sp = t == 1 ? &u : &n;
    assert_int_equal(ps_store_pull(s1, (uint32_t)t, keys, N, a), PS_OK);
    assert_int_equal(ps_store_pull(s4, (uint32_t)t, keys, N, b), PS_OK);
    assert_memory_equal(a, b, N * 33 * sizeof(float));
    double sum = 0, sum2 = 0;
    for (int i = 0; i < N; i++) {
      ps_store_init_row(sp, keys[i], row);
      assert_memory_equal(row, a + (size_t)i * 33, sizeof(row));
      for (int j = 0; j < 33; j++) {
        float v = row[j];
        if (t == 1) assert_true(v >= -0.05f && v < 0.05f);
        sum += v;
        sum2 += (double)v * v;
      }
    }
    double cnt = N * 33.0, mean = sum / cnt, sd = sqrt(sum2 / cnt - mean * mean);
    if (t == 1) { /* U(-0.05, 0.05): sd = 0.1 / sqrt(12) */
      assert_true(fabs(mean) < 0.002);
      assert_true(fabs(sd - 0.1 / sqrt(12.0)) < 0.001);
    } else {
      assert_true(fabs(mean) < 0.02);
      assert_true(fabs(sd - 0.5) < 0.01);
    }
  }
  /* Unseen keys are not stored by a pull. */
  ps_store_stats stt;
  ps_store_get_stats(s4, &stt);
  assert_int_equal(stt.rows_hot, 0);
  free(keys);
  free(a);
  free(b);
  ps_store_close(&s1);
  ps_store_close(&s4);
}

static void test_over_budget(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "overbudget");
  const size_t budget = SANITIZED ? (2u << 20) : (16u << 20);
  const uint32_t dim = 64;
  size_t rss0 = rss_bytes();
  ps_store *s = open_store(p, budget, 4);
  ps_table_spec sp = spec_sgd(3, "big", dim, 0.25f);
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  /* Row = 256 B values (SGD has no state; a jemalloc class), plus 24 B index entries at a load
   * of 0.35..0.7 (34-69 B): about 310 B per hot row. 10x the rows that fit: */
  const size_t nkeys = 10 * budget / 310;
  enum { B = 4096 };
  uint64_t *keys = malloc(B * sizeof(uint64_t));
  float *g = malloc((size_t)B * dim * sizeof(float)), *out = malloc((size_t)B * dim * sizeof(float));
  float *exp = malloc(dim * sizeof(float));
  for (size_t base = 0; base < nkeys; base += B) {
    size_t n = nkeys - base < B ? nkeys - base : B;
    for (size_t i = 0; i < n; i++) {
      keys[i] = (base + i) * 2654435761ull;
      for (uint32_t j = 0; j < dim; j++) g[i * dim + j] = grad_of(keys[i], j, 0);
    }
    assert_int_equal(ps_store_push(s, 3, keys, n, g), PS_OK);
  }
  ps_store_stats a;
  ps_store_get_stats(s, &a);
  assert_int_equal(a.admitted, nkeys);
  assert_true(a.evictions > nkeys / 2);
  assert_true(a.rows_hot < nkeys / 5);
  assert_true(a.hot_bytes <= budget + 4 * 288); /* per-partition budget, one row overshoot */
  /* Pull every key in a scrambled order (most from RocksDB): bit-identical to the reference. */
  size_t bad = 0;
  for (size_t base = 0; base < nkeys; base += B) {
    size_t n = nkeys - base < B ? nkeys - base : B;
    for (size_t i = 0; i < n; i++) keys[i] = (ps_mix64(base + i) % nkeys) * 2654435761ull;
    assert_int_equal(ps_store_pull(s, 3, keys, n, out), PS_OK);
    for (size_t i = 0; i < n; i++) {
      expected_sgd(&sp, keys[i], 1, exp);
      if (memcmp(exp, out + i * dim, dim * sizeof(float)) != 0) bad++;
    }
  }
  assert_int_equal(bad, 0);
  ps_store_stats b;
  ps_store_get_stats(s, &b);
  assert_true(b.misses > a.misses);
  size_t rss = rss_bytes();
  /* Stated overhead beyond the hot budget: RocksDB block cache (8 MB) + memtables
   * (2 x 4 MB x 2 column families) + 24 MB for table readers (filters, indexes), jemalloc
   * metadata and size-class slack, thread stacks. */
  const size_t overhead = (8u << 20) + (16u << 20) + (24u << 20);
  fprintf(stderr, "over_budget: %zu keys, budget %zu MB, hot rows %llu, RSS growth %.1f MB "
          "(bound %.1f MB)\n", nkeys, budget >> 20, (unsigned long long)b.rows_hot,
          (double)(rss - rss0) / 1048576.0, (double)(budget + overhead) / 1048576.0);
  if (!SANITIZED) assert_true(rss - rss0 <= budget + overhead);
  ps_store_close(&s);
  /* Restart on the same directory: same specs, same rows. */
  s = open_store(p, budget, 2);
  ps_table_spec got;
  assert_int_equal(ps_store_get_spec(s, 3, &got), PS_OK);
  assert_memory_equal(&got, &sp, sizeof(sp));
  for (size_t i = 0; i < B; i++) keys[i] = (ps_mix64(i + 777) % nkeys) * 2654435761ull;
  assert_int_equal(ps_store_pull(s, 3, keys, B, out), PS_OK);
  assert_sgd_rows(&sp, keys, B, out, 1);
  ps_store_close(&s);
  free(keys);
  free(g);
  free(out);
  free(exp);
  rm_rf(p);
}

/* ps_store_warm (a prefetch): rows in RocksDB come into the hot tier without a value changing
 * or a hit or miss counted; the pull after it then hits for every stored key (only the keys
 * stored nowhere miss), and a push after it lands in the cached row. Reference: expected_sgd. */
static void test_warm(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "warm");
  const uint32_t dim = 16;
  ps_store *s = open_store(p, 1u << 20, 4);
  ps_table_spec sp = spec_sgd(5, "warm", dim, 0.25f);
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  enum { NK = 40000, B = 256, NEW = 16 }; /* 40k rows of ~130 B: most of them in RocksDB */
  uint64_t *keys = malloc(NK * sizeof(uint64_t));
  float *g = malloc((size_t)NK * dim * sizeof(float)), *out = malloc((B + NEW) * dim * 4);
  for (size_t i = 0; i < NK; i++) {
    keys[i] = (i + 1) * 2654435761ull;
    for (uint32_t j = 0; j < dim; j++) g[i * dim + j] = grad_of(keys[i], j, 0);
  }
  assert_int_equal(ps_store_push(s, 5, keys, NK, g), PS_OK);
  /* The first B keys (pushed first: evicted since) and NEW keys never stored. */
  for (size_t i = 0; i < NEW; i++) keys[B + i] = (NK + 100 + i) * 2654435761ull;
  ps_store_stats a, b, c;
  ps_store_get_stats(s, &a);
  assert_int_equal(a.prefetched, 0);
  assert_int_equal(ps_store_warm(s, 5, keys, B + NEW), PS_OK);
  assert_int_equal(ps_store_warm(s, 5, keys, B + NEW), PS_OK); /* again: all hot now */
  ps_store_get_stats(s, &b);
  assert_true(b.prefetched > B / 2 && b.prefetched <= B); /* most were cold; each loaded once */
  assert_int_equal(b.hits, a.hits);
  assert_int_equal(b.misses, a.misses);
  assert_int_equal(ps_store_pull(s, 5, keys, B + NEW, out), PS_OK);
  ps_store_get_stats(s, &c);
  assert_int_equal(c.misses - b.misses, NEW);
  assert_int_equal(c.hits - b.hits, B);
  assert_sgd_rows(&sp, keys, B, out, 1);
  assert_sgd_rows(&sp, keys + B, NEW, out + (size_t)B * dim, 0);
  /* A push after the warm updates the row a pull then reads (2 passes). */
  for (size_t i = 0; i < B; i++)
    for (uint32_t j = 0; j < dim; j++) g[i * dim + j] = grad_of(keys[i], j, 1);
  assert_int_equal(ps_store_warm(s, 5, keys, B), PS_OK);
  assert_int_equal(ps_store_push(s, 5, keys, B, g), PS_OK);
  assert_int_equal(ps_store_pull(s, 5, keys, B, out), PS_OK);
  assert_sgd_rows(&sp, keys, B, out, 2);
  assert_int_equal(ps_store_warm(s, 99, keys, B), PS_ERR_UNKNOWN_TABLE);
  ps_store_close(&s);
  free(keys);
  free(g);
  free(out);
  rm_rf(p);
}

static void test_admission(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "admission");
  ps_store *s = open_store(p, 1 << 20, 3);
  ps_table_spec sp = spec_sgd(4, "adm", 8, 0.5f);
  sp.admit_threshold = 3;
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  enum { N = 100 };
  uint64_t keys[2 * N];
  float g[2 * N * 8], out[N * 8];
  for (int i = 0; i < N; i++) {
    keys[i] = 1000 + (uint64_t)i;
    for (int j = 0; j < 8; j++) g[i * 8 + j] = grad_of(keys[i], (uint32_t)j, 0);
  }
  /* Push twice: counted, not stored. A duplicate inside one call counts once. */
  for (int r = 0; r < 2; r++) {
    memcpy(keys + N, keys, N * sizeof(uint64_t));
    memcpy(g + N * 8, g, N * 8 * sizeof(float));
    assert_int_equal(ps_store_push(s, 4, keys, r == 0 ? 2 * N : N, g), PS_OK);
  }
  ps_store_stats a;
  ps_store_get_stats(s, &a);
  assert_int_equal(a.admitted, 0);
  assert_int_equal(a.pending_admission_pushes, 2 * N);
  assert_int_equal(a.rows_hot, 0);
  assert_int_equal(ps_store_pull(s, 4, keys, N, out), PS_OK);
  assert_sgd_rows(&sp, keys, N, out, 0);
  /* The third push admits each key and applies that push's gradient (only). */
  assert_int_equal(ps_store_push(s, 4, keys, N, g), PS_OK);
  ps_store_get_stats(s, &a);
  assert_int_equal(a.admitted, N);
  assert_int_equal(a.pending_admission_pushes, 2 * N);
  assert_int_equal(a.rows_hot, N);
  assert_int_equal(ps_store_pull(s, 4, keys, N, out), PS_OK);
  assert_sgd_rows(&sp, keys, N, out, 1);
  /* A fourth push updates normally, without touching the admission counters. */
  assert_int_equal(ps_store_push(s, 4, keys, N, g), PS_OK);
  ps_store_get_stats(s, &a);
  assert_int_equal(a.admitted, N);
  assert_int_equal(a.pending_admission_pushes, 2 * N);
  ps_store_close(&s);
}

static void test_ttl(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "ttl");
  /* A budget of ~40 rows so most of the 2000 rows live only in RocksDB. */
  ps_store *s = open_store(p, 16 << 10, 2);
  ps_table_spec sp = spec_sgd(5, "ttl", 16, 0.5f);
  sp.ttl_steps = 5;
  ps_table_spec keep = spec_sgd(6, "keep", 16, 0.5f); /* no TTL */
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  assert_int_equal(ps_store_declare(s, &keep, NULL), PS_OK);
  enum { N = 1000 };
  uint64_t *k1 = malloc(N * 8), *k2 = malloc(N * 8);
  float *g = malloc(N * 16 * 4), *out = malloc(N * 16 * 4);
  for (int i = 0; i < N; i++) {
    k1[i] = (uint64_t)i;
    k2[i] = (uint64_t)(N + i);
  }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 16; j++) g[i * 16 + j] = grad_of(k1[i], (uint32_t)j, 0);
  ps_store_set_step(s, 0);
  assert_int_equal(ps_store_push(s, 5, k1, N, g), PS_OK);
  assert_int_equal(ps_store_push(s, 6, k1, N, g), PS_OK);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 16; j++) g[i * 16 + j] = grad_of(k2[i], (uint32_t)j, 0);
  ps_store_set_step(s, 3);
  assert_int_equal(ps_store_push(s, 5, k2, N, g), PS_OK);
  ps_store_set_step(s, 5);
  assert_int_equal(ps_store_expire(s), 0); /* 5 - 0 = 5 steps untouched: still alive */
  ps_store_set_step(s, 6);
  assert_int_equal(ps_store_expire(s), N); /* k1 rows of table 5 */
  assert_int_equal(ps_store_expire(s), 0);
  ps_store_stats a;
  ps_store_get_stats(s, &a);
  assert_int_equal(a.expired, N);
  assert_int_equal(ps_store_pull(s, 5, k1, N, out), PS_OK);
  assert_sgd_rows(&sp, k1, N, out, 0);
  assert_int_equal(ps_store_pull(s, 6, k1, N, out), PS_OK); /* no TTL: kept */
  assert_sgd_rows(&keep, k1, N, out, 1);
  assert_int_equal(ps_store_pull(s, 5, k2, N, out), PS_OK);
  assert_sgd_rows(&sp, k2, N, out, 1);
  /* Touching half of k2 at step 8 keeps those alive at step 9. */
  ps_store_set_step(s, 8);
  assert_int_equal(ps_store_push(s, 5, k2, N / 2, g), PS_OK);
  ps_store_set_step(s, 9);
  assert_int_equal(ps_store_expire(s), N / 2);
  ps_store_set_step(s, 14);
  assert_int_equal(ps_store_expire(s), N / 2);
  ps_store_get_stats(s, &a);
  assert_int_equal(a.expired, 2 * N);
  free(k1);
  free(k2);
  free(g);
  free(out);
  ps_store_close(&s);
}

static void export_all(ps_store *s, uint32_t t, const uint64_t *keys, size_t n, size_t rec,
                       unsigned char *buf) {
  for (size_t i = 0; i < n; i++) {
    size_t len = 0;
    assert_int_equal(ps_store_export_row(s, t, keys[i], buf + i * rec, rec, &len, NULL), PS_OK);
    assert_int_equal(len, rec);
  }
}

/* A hot row is its floats alone: its last step lives in the index entry (an Adam row's step
 * count after its floats), so a dim-128 Adagrad row is 1024 bytes (it took jemalloc's 1280 class with 16 bytes of
 * metadata in front) and a dim-16 one 128 (160). A record keeps the layout on disk: header,
 * metadata (the step of the last push), then values and state. */
static void test_row_memory(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "rowmem");
  ps_store *s = open_store(p, 256 << 20, 2);
  ps_table_spec big = spec_sgd(7, "big", 128, 0.1f), small = spec_sgd(8, "small", 16, 0.1f);
  big.optimizer = small.optimizer = PS_OPT_ADAGRAD;
  big.initial_accumulator = small.initial_accumulator = 0.1f;
  big.eps = small.eps = 1e-10f;
  assert_int_equal(ps_store_declare(s, &big, NULL), PS_OK);
  assert_int_equal(ps_store_declare(s, &small, NULL), PS_OK);
  enum { N = 300 };
  uint64_t keys[N];
  float *g = malloc(N * 128 * sizeof(float)), *out = malloc(N * 128 * sizeof(float));
  for (int i = 0; i < N; i++) keys[i] = 1000 + 7 * (uint64_t)i;
  for (int i = 0; i < N * 128; i++) g[i] = grad_of(keys[i / 128], (uint32_t)(i % 128), 0);
  ps_store_set_step(s, 41);
  assert_int_equal(ps_store_push(s, 7, keys, N, g), PS_OK);
  assert_int_equal(ps_store_push(s, 8, keys, N, g), PS_OK);
  ps_store_stats a;
  ps_store_get_stats(s, &a);
  assert_int_equal(a.unwritten_rows, 2 * N);
  assert_int_equal(a.unwritten_bytes, (uint64_t)N * (128 * 2 * 4 + 16 * 2 * 4));
  /* The record of a hot row: the same bytes ps_store_record_bytes promises, in their order. */
  const size_t rec = ps_store_record_bytes(&big);
  assert_int_equal(rec, 8 + 16 + 4 * 256);
  unsigned char *buf = malloc(rec);
  assert_int_equal(ps_store_pull(s, 7, keys, N, out), PS_OK);
  for (int i = 0; i < N; i += 37) {
    size_t len = 0;
    assert_int_equal(ps_store_export_row(s, 7, keys[i], buf, rec, &len, NULL), PS_OK);
    uint64_t last;
    memcpy(&last, buf + 8, 8);
    assert_int_equal(last, 41);
    assert_memory_equal(buf + 8 + 16, out + (size_t)i * 128, 128 * sizeof(float));
  }
  free(buf);
  free(g);
  free(out);
  ps_store_close(&s);
}

static void test_snapshot_restore(void **st) {
  (void)st;
  char p[512], snap[512];
  mkpath(p, sizeof(p), "snapdb");
  mkpath(snap, sizeof(snap), "snap1");
  ps_store *s = open_store(p, 64 << 10, 2); /* small: rows in both tiers */
  ps_table_spec ad = spec_sgd(10, "adam", 8, 0.01f);
  ad.optimizer = PS_OPT_ADAM;
  ad.beta1 = 0.9f;
  ad.beta2 = 0.999f;
  ad.eps = 1e-8f;
  ps_table_spec ft = spec_sgd(11, "ftrl", 5, 0.1f);
  ft.optimizer = PS_OPT_FTRL;
  ft.l1 = 0.01f;
  ft.l2 = 0.1f;
  ft.lr_power = -0.5f;
  ft.eps = 1.0f;
  ft.initial_accumulator = 0.1f;
  assert_int_equal(ps_store_declare(s, &ad, NULL), PS_OK);
  assert_int_equal(ps_store_declare(s, &ft, NULL), PS_OK);
  enum { N = 2000 };
  uint64_t *keys = malloc(N * 8);
  float *g = malloc(N * 8 * 4);
  for (int i = 0; i < N; i++) keys[i] = ps_mix64((uint64_t)i + 5);
  for (uint32_t step = 0; step < 3; step++) {
    ps_store_set_step(s, step);
    for (int t = 0; t < 2; t++) {
      uint32_t d = t ? 5 : 8;
      for (int i = 0; i < N; i++)
        for (uint32_t j = 0; j < d; j++) g[i * d + j] = grad_of(keys[i], j, step);
      assert_int_equal(ps_store_push(s, t ? 11 : 10, keys, (size_t)N - step * 100, g), PS_OK);
    }
  }
  const size_t r10 = ps_store_record_bytes(&ad), r11 = ps_store_record_bytes(&ft);
  unsigned char *a10 = malloc(N * r10), *a11 = malloc(N * r11);
  unsigned char *b10 = malloc(N * r10), *b11 = malloc(N * r11);
  export_all(s, 10, keys, N, r10, a10);
  export_all(s, 11, keys, N, r11, a11);
  assert_int_equal(ps_store_snapshot(s, snap, NULL), PS_OK);
  assert_int_equal(ps_store_snapshot(s, snap, NULL), PS_ERR_INVALID); /* exists */
  /* Change everything after the snapshot, and declare another table. */
  ps_store_set_step(s, 10);
  for (int t = 0; t < 2; t++) {
    uint32_t d = t ? 5 : 8;
    for (int i = 0; i < N; i++)
      for (uint32_t j = 0; j < d; j++) g[i * d + j] = grad_of(keys[i], j, 9);
    assert_int_equal(ps_store_push(s, t ? 11 : 10, keys, N, g), PS_OK);
  }
  ps_table_spec extra = spec_sgd(12, "extra", 4, 0.1f);
  assert_int_equal(ps_store_declare(s, &extra, NULL), PS_OK);
  export_all(s, 10, keys, N, r10, b10);
  assert_memory_not_equal(a10, b10, N * r10);
  assert_int_equal(ps_store_restore(s, "/nonexistent/snapshot", NULL), PS_ERR_NOT_FOUND);
  assert_int_equal(ps_store_restore(s, snap, NULL), PS_OK);
  export_all(s, 10, keys, N, r10, b10);
  export_all(s, 11, keys, N, r11, b11);
  assert_memory_equal(a10, b10, N * r10);
  assert_memory_equal(a11, b11, N * r11);
  uint32_t ids[8];
  assert_int_equal(ps_store_tables(s, ids, 8), 2);
  ps_table_spec got;
  assert_int_equal(ps_store_get_spec(s, 12, &got), PS_ERR_UNKNOWN_TABLE);
  /* The restored store keeps working and survives a restart. */
  assert_int_equal(ps_store_push(s, 10, keys, 10, g), PS_OK);
  ps_store_close(&s);
  s = open_store(p, 64 << 10, 2);
  export_all(s, 11, keys, N, r11, b11);
  assert_memory_equal(a11, b11, N * r11);
  ps_store_close(&s);
  free(keys);
  free(g);
  free(a10);
  free(a11);
  free(b10);
  free(b11);
}

/* Many dirty rows at a flush go to RocksDB as a sorted SST file that is ingested (the bulk path
 * of write_dirty), a few through WriteBatches. Both must leave exactly the newest rows: a second
 * bulk flush over keys of an earlier one must win over it, and a reopened store with a tiny hot
 * tier (every pull from RocksDB) and a restored snapshot must give the rows the pushes made. */
static void test_bulk_flush(void **st) {
  (void)st;
  char p[512], snap[512];
  mkpath(p, sizeof(p), "bulkdb");
  mkpath(snap, sizeof(snap), "bulksnap");
  enum { NA = 100000, NB = 1000, DA = 8, DB = 4 };
  ps_store *s = open_store(p, 256 << 20, 2);
  ps_table_spec a = spec_sgd(20, "bulk", DA, 0.1f), b = spec_sgd(21, "few", DB, 0.1f);
  assert_int_equal(ps_store_declare(s, &a, NULL), PS_OK);
  assert_int_equal(ps_store_declare(s, &b, NULL), PS_OK);
  uint64_t *ka = malloc(NA * 8), *kb = malloc(NB * 8);
  float *g = malloc((size_t)NA * DA * 4), *got = malloc((size_t)NA * DA * 4);
  for (int i = 0; i < NA; i++) ka[i] = ps_mix64((uint64_t)i + 77);
  for (int i = 0; i < NB; i++) kb[i] = ps_mix64((uint64_t)i + 99999);
  for (uint32_t pass = 0; pass < 2; pass++) {
    for (int i = 0; i < NA; i++)
      for (uint32_t j = 0; j < DA; j++) g[(size_t)i * DA + j] = grad_of(ka[i], j, pass);
    assert_int_equal(ps_store_push(s, 20, ka, NA, g), PS_OK);
    for (int i = 0; i < NB; i++)
      for (uint32_t j = 0; j < DB; j++) g[(size_t)i * DB + j] = grad_of(kb[i], j, pass);
    assert_int_equal(ps_store_push(s, 21, kb, NB, g), PS_OK);
    if (pass == 0) assert_int_equal(ps_store_flush(s, NULL), PS_OK);
  }
  assert_int_equal(ps_store_snapshot(s, snap, NULL), PS_OK); /* flushes pass 1 over pass 0 */
  ps_store_stats ss;
  ps_store_get_stats(s, &ss);
  assert_true(ss.writebacks >= 2 * (NA + NB));
  ps_store_close(&s);
  char left[600];
  snprintf(left, sizeof left, "%s/ingest-t20.sst", p);
  assert_int_equal(access(left, F_OK), -1); /* the staging file does not stay behind */
  for (int round = 0; round < 2; round++) {
    s = open_store(p, 64 << 10, 2);
    if (round == 1) assert_int_equal(ps_store_restore(s, snap, NULL), PS_OK);
    assert_int_equal(ps_store_pull(s, 20, ka, NA, got), PS_OK);
    assert_sgd_rows(&a, ka, NA, got, 2);
    assert_int_equal(ps_store_pull(s, 21, kb, NB, got), PS_OK);
    assert_sgd_rows(&b, kb, NB, got, 2);
    ps_store_close(&s);
  }
  free(ka);
  free(kb);
  free(g);
  free(got);
}

static void put_raw(const char *path, const char *cf, uint64_t key, const char *val, size_t len) {
  char *err = NULL;
  rocksdb_options_t *o = rocksdb_options_create();
  size_t ncf = 0;
  char **names = rocksdb_list_column_families(o, path, &ncf, &err);
  assert_null(err);
  const rocksdb_options_t **cfo = malloc(ncf * sizeof(*cfo));
  rocksdb_column_family_handle_t **h = malloc(ncf * sizeof(*h));
  for (size_t i = 0; i < ncf; i++) cfo[i] = o;
  rocksdb_t *db = rocksdb_open_column_families(o, path, (int)ncf, (const char *const *)names, cfo, h, &err);
  assert_null(err);
  char kb[8];
  for (int i = 0; i < 8; i++) kb[i] = (char)(key >> (56 - 8 * i));
  rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
  int found = 0;
  for (size_t i = 0; i < ncf; i++)
    if (strcmp(names[i], cf) == 0) {
      rocksdb_put_cf(db, wo, h[i], kb, 8, val, len, &err);
      assert_null(err);
      found = 1;
    }
  assert_true(found);
  for (size_t i = 0; i < ncf; i++) rocksdb_column_family_handle_destroy(h[i]);
  rocksdb_close(db);
  rocksdb_writeoptions_destroy(wo);
  rocksdb_options_destroy(o);
  rocksdb_list_column_families_destroy(names, ncf);
  free(cfo);
  free(h);
}

static void test_corrupt(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "corrupt");
  ps_store *s = open_store(p, 1 << 20, 2);
  ps_table_spec sp = spec_sgd(20, "c", 8, 0.5f);
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  uint64_t keys[3] = {1, 2, 3};
  float g[24] = {0}, out[24];
  assert_int_equal(ps_store_push(s, 20, keys, 3, g), PS_OK);
  ps_store_close(&s);
  char junk[13] = "short value!";
  put_raw(p, "t20", 1, junk, sizeof(junk)); /* wrong length */
  size_t rec = ps_store_record_bytes(&sp);
  char *bad = calloc(1, rec);
  put_raw(p, "t20", 2, bad, rec); /* right length, bad header */
  s = open_store(p, 1 << 20, 2);
  ps_log_set_level(PS_LOG_OFF);
  assert_int_equal(ps_store_pull(s, 20, keys, 3, out), PS_ERR_CORRUPT);
  assert_int_equal(ps_store_pull(s, 20, keys + 1, 1, out), PS_ERR_CORRUPT);
  assert_int_equal(ps_store_push(s, 20, keys, 1, g), PS_ERR_CORRUPT);
  size_t len;
  ps_error e;
  assert_int_equal(ps_store_export_row(s, 20, 1, bad, rec, &len, &e), PS_ERR_CORRUPT);
  expect_err(&e, PS_ERR_CORRUPT, "table 20 key 1: stored row is corrupt (13 bytes");
  ps_log_set_level(PS_LOG_WARN);
  /* The healthy key still works. */
  assert_int_equal(ps_store_pull(s, 20, keys + 2, 1, out), PS_OK);
  ps_store_init_row(&sp, 3, out + 8);
  assert_memory_equal(out, out + 8, 8 * sizeof(float)); /* zero gradient: still initial */
  ps_store_close(&s);
  free(bad);
}

typedef struct thr_arg {
  ps_store *s;
  int id;
} thr_arg;

static void *pusher(void *arg) {
  thr_arg *a = arg;
  enum { N = 512 };
  uint64_t keys[N];
  static float ones[N * 4];
  for (int i = 0; i < N * 4; i++) ones[i] = 1.0f;
  for (int r = 0; r < 50; r++) {
    for (int i = 0; i < N; i++) keys[i] = (uint64_t)((i * 7 + r + a->id) % 1024);
    if (ps_store_push(a->s, 30, keys, N, ones) != PS_OK) return (void *)1;
  }
  return NULL;
}

static void test_concurrent(void **st) {
  (void)st;
  char p[512];
  mkpath(p, sizeof(p), "conc");
  ps_store *s = open_store(p, 16 << 10, 4); /* tiny: pushes also evict and reload */
  ps_table_spec sp = spec_sgd(30, "conc", 4, 0.5f);
  sp.init = PS_INIT_ZERO;
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  pthread_t th[2];
  thr_arg a[2] = {{s, 0}, {s, 1}};
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, pusher, &a[i]);
  for (int i = 0; i < 2; i++) {
    void *rv;
    pthread_join(th[i], &rv);
    assert_null(rv);
  }
  /* Each thread pushes each of 512 keys per round (key set shifts by round); count how many
   * times each key got +1 and compare w = -0.5 * count exactly. */
  static int cnt[1024];
  memset(cnt, 0, sizeof(cnt));
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 50; r++)
      for (int i = 0; i < 512; i++) cnt[(i * 7 + r + t) % 1024]++;
  uint64_t keys[1024];
  static float out[1024 * 4];
  for (int i = 0; i < 1024; i++) keys[i] = (uint64_t)i;
  assert_int_equal(ps_store_pull(s, 30, keys, 1024, out), PS_OK);
  for (int i = 0; i < 1024; i++)
    for (int j = 0; j < 4; j++) assert_true(out[i * 4 + j] == -0.5f * (float)cnt[i]);
  ps_store_close(&s);
}

/* Batches served by several threads, each on the partitions p % stride == first, must give
 * exactly what the whole-batch calls give: same rows at the same positions, pushes of
 * duplicate keys summed once. */
typedef struct batch_arg {
  ps_store *s;
  const ps_store_batch *b;
  uint32_t first, stride;
  float *out;
  const float *grads;
  ps_status st;
} batch_arg;

static void *batch_worker(void *p) {
  batch_arg *a = p;
  a->st = a->grads ? ps_store_push_batch(a->s, 40, a->b, a->first, a->stride, a->grads)
                   : ps_store_pull_batch(a->s, 40, a->b, a->first, a->stride, a->out);
  return NULL;
}

static void test_batch(void **st) {
  (void)st;
  enum { N = 3000, D = 8, T = 3 };
  char p1[512], p2[512];
  mkpath(p1, sizeof(p1), "batch-whole");
  mkpath(p2, sizeof(p2), "batch-split");
  ps_store *w = open_store(p1, 64 << 10, 8), *s = open_store(p2, 64 << 10, 8);
  ps_table_spec sp = spec_sgd(40, "batch", D, 0.1f);
  sp.optimizer = PS_OPT_ADAGRAD; /* not linear in the gradient: double application shows */
  sp.initial_accumulator = 0.1f;
  assert_int_equal(ps_store_declare(w, &sp, NULL), PS_OK);
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  static uint64_t keys[N];
  static float g[N * D], a[N * D], b[N * D];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) keys[i] = ps_mix64((uint64_t)(i % 1700) + 1000u * round) % 5000;
    for (int i = 0; i < N * D; i++) g[i] = grad_of(keys[i / D], (uint32_t)(i % D), (uint32_t)round);
    ps_store_batch *bt;
    assert_int_equal(ps_store_batch_create(s, keys, N, &bt), PS_OK);
    /* Every position appears once, in the partition that owns its key. */
    static int seen[N];
    memset(seen, 0, sizeof(seen));
    for (uint32_t q = 0; q < ps_store_partitions(s); q++) {
      const uint32_t *pos;
      size_t c = ps_store_batch_part(bt, q, &pos);
      for (size_t i = 0; i < c; i++) {
        assert_int_equal(ps_store_partition_of(s, keys[pos[i]]), q);
        seen[pos[i]]++;
      }
    }
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    for (int op = 0; op < 2; op++) {
      pthread_t th[T];
      batch_arg ar[T];
      for (uint32_t t = 0; t < T; t++) {
        ar[t] = (batch_arg){s, bt, t, T, op ? b : NULL, op ? NULL : g, PS_ERR_INTERNAL};
        pthread_create(&th[t], NULL, batch_worker, &ar[t]);
      }
      for (uint32_t t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(ar[t].st, PS_OK);
      }
    }
    ps_store_batch_destroy(&bt);
    assert_null(bt);
    assert_int_equal(ps_store_push(w, 40, keys, N, g), PS_OK);
    assert_int_equal(ps_store_pull(w, 40, keys, N, a), PS_OK);
    assert_memory_equal(a, b, sizeof(a));
  }
  ps_store_close(&w);
  ps_store_close(&s);
}

int main(void) {
  ps_log_set_level(PS_LOG_WARN);
  snprintf(g_root, sizeof(g_root), "/tmp/ember-test-store-%d", (int)getpid());
  rm_rf(g_root);
  if (mkdir(g_root, 0755) != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_declare),         cmocka_unit_test(test_init_deterministic),
      cmocka_unit_test(test_over_budget),     cmocka_unit_test(test_admission),
      cmocka_unit_test(test_ttl),             cmocka_unit_test(test_snapshot_restore),
      cmocka_unit_test(test_corrupt),         cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_batch),           cmocka_unit_test(test_bulk_flush),
      cmocka_unit_test(test_errors_say_why),  cmocka_unit_test(test_warm),
      cmocka_unit_test(test_row_memory),      cmocka_unit_test(test_bulk_fail_one_line),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rm_rf(g_root);
  return rc;
}
