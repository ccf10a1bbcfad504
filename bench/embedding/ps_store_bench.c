/* ps-store-bench: in-process throughput of the embedding store (ps_store), beside the
 * physical limit measured in the same run.
 *
 * Cases, for each --dims value: pull and push rows/s at --batch keys per call, uniform and
 * Zipf(--zipf) keys, (a) all-hot: a key space of 70% of what the hot budget holds (or
 *   --hot-keys: a fixed one, so builds whose rows differ in bytes probe the same index), preloaded;
 * (b) over budget: a key space --over times what the budget holds, so most lookups go to
 * RocksDB. The reference is a plain random row gather (memcpy of dim floats from a flat
 * array of the same bytes as the store's hot tier, same key distribution), the speed a DRAM
 * lookup cannot beat. A contention case pulls with 1 thread, 2 threads over all partitions,
 * and 2 threads each owning half of the partitions (how ps-server's partition threads run).
 * Keys are ps_mix64(rank) so hot Zipf ranks spread over partitions; key lists are generated
 * before timing (Zipf by rejection-inversion, O(1) per sample). Prints a table, and JSON
 * with --json.
 *
 * --tail-calls N replaces the throughput cases with the latency of single calls: for each dim,
 * N pulls of --batch Zipf keys timed one by one, on a table whose rows exist (pushed once, as a
 * trained table's are: "warm"), on one that has none (each pull answered from the
 * initializer: "cold"), and as a plain gather of the same keys' rows from a flat array of the
 * same bytes ("gather": the memory work alone), interleaved in blocks of 100 calls so the
 * machine's moments hit all three; prints p50/p90/p99/p99.9/max and the calls over 1 ms. Why: ps-server's pull service time
 * has a tail that a request-level view cannot place; this shows what the store alone does with
 * no ZeroMQ, no server and no other thread (bench/RESULTS-pslat.md, session 8). */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps_cli.h"
#include "ps_hash.h"
#include "ps_log.h"
#include "ps_store.h"
#include "ps_time.h"

typedef struct rng {
  uint64_t s;
} rng;
static inline uint64_t rng_next(rng *r) { return ps_mix64(r->s++); }
static inline double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Zipf(s) over ranks 1..n by rejection-inversion (Hormann & Derflinger 1996, as in
 * Apache Commons RNG's RejectionInversionZipfSampler). */
typedef struct zipf {
  double s, hx1, hn, sdiv;
  uint64_t n;
} zipf;
static double zh1(double x) { return x != 0 ? log1p(x) / x : 1.0; }
static double zh2(double x) { return x != 0 ? expm1(x) / x : 1.0; }
static double zh(const zipf *z, double x) { return exp(-z->s * log(x)); }
static double zhi(const zipf *z, double x) {
  double lx = log(x);
  return zh2((1.0 - z->s) * lx) * lx;
}
static double zhiinv(const zipf *z, double x) {
  double t = x * (1.0 - z->s);
  if (t < -1.0) t = -1.0;
  return exp(zh1(t) * x);
}
static void zipf_init(zipf *z, uint64_t n, double s) {
  z->s = s;
  z->n = n;
  z->hx1 = zhi(z, 1.5) - 1.0;
  z->hn = zhi(z, (double)n + 0.5);
  z->sdiv = 2.0 - zhiinv(z, zhi(z, 2.5) - zh(z, 2.0));
}
static uint64_t zipf_next(const zipf *z, rng *r) {
  for (;;) {
    double u = z->hn + rng_unit(r) * (z->hx1 - z->hn);
    double x = zhiinv(z, u);
    double kd = floor(x + 0.5);
    if (kd < 1) kd = 1;
    if (kd > (double)z->n) kd = (double)z->n;
    if (kd - x <= z->sdiv || u >= zhi(z, kd + 0.5) - zh(z, kd)) return (uint64_t)kd;
  }
}

/* ranks (0-based) for a pool of nkeys lookups */
static uint64_t *gen_ranks(uint64_t space, size_t n, int is_zipf, double s, uint64_t seed) {
  uint64_t *v = malloc(n * sizeof(uint64_t));
  rng r = {seed};
  zipf z;
  if (is_zipf) zipf_init(&z, space, s);
  for (size_t i = 0; i < n; i++) v[i] = is_zipf ? zipf_next(&z, &r) - 1 : rng_next(&r) % space;
  return v;
}

/* --cpu-clock: the calling thread's CPU time instead of the wall clock, so that on a shared
 * machine the time other processes hold the core is not counted against a case. */
static bool g_cpu_clock;
static double now_s(void) {
  if (!g_cpu_clock) return (double)ps_now_ns() * 1e-9;
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct ctx {
  ps_store *s;
  uint32_t table, dim;
  size_t batch;
  const uint64_t *keys; /* pool of keys */
  size_t pool;
  double seconds;
  int push;
  float *buf;
  uint64_t rows;
  double elapsed;
  int rc;
  size_t *offp; /* where in the pool to continue (NULL: from the start) */
} ctx;

static void *run_ops(void *arg) {
  ctx *c = arg;
  size_t off = c->offp ? *c->offp : 0;
  uint64_t rows = 0;
  double t0 = now_s(), t;
  do {
    if (off + c->batch > c->pool) off = 0;
    ps_status st = c->push ? ps_store_push(c->s, c->table, c->keys + off, c->batch, c->buf)
                           : ps_store_pull(c->s, c->table, c->keys + off, c->batch, c->buf);
    if (st != PS_OK) {
      c->rc = 1;
      break;
    }
    off += c->batch;
    rows += c->batch;
    t = now_s();
  } while (t - t0 < c->seconds);
  c->rows = rows;
  c->elapsed = now_s() - t0;
  if (c->offp) *c->offp = off;
  return NULL;
}

/* The physical limit: memcpy of dim floats per index from a flat array. */
static double gather_rate(const float *base, uint64_t nrows, uint32_t dim, const uint64_t *ranks,
                          size_t pool, size_t batch, double seconds, float *out) {
  uint64_t *idx = malloc(pool * sizeof(uint64_t));
  for (size_t i = 0; i < pool; i++) idx[i] = ps_mix64(ranks[i]) % nrows; /* scatter ranks */
  size_t off = 0;
  uint64_t rows = 0;
  double t0 = now_s(), t;
  do {
    if (off + batch > pool) off = 0;
    for (size_t i = 0; i < batch; i++)
      memcpy(out + i * dim, base + idx[off + i] * dim, sizeof(float) * dim);
    off += batch;
    rows += batch;
    t = now_s();
  } while (t - t0 < seconds);
  double rate = (double)rows / (now_s() - t0);
  volatile float sink = out[0];
  (void)sink;
  free(idx);
  return rate;
}

static json_t *g_results;

static void report(const char *regime, const char *dist, const char *op, uint32_t dim, int threads,
                   double rate, double hit, double gather, uint64_t space) {
  char vs[32] = "-";
  if (gather > 0) snprintf(vs, sizeof(vs), "%.2fx", rate / gather);
  printf("%-9s %-8s %-10s %4u %7d %14.0f %8.3f %10s\n", regime, dist, op, dim, threads, rate,
         hit, vs);
  fflush(stdout);
  json_array_append_new(g_results,
                        json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:I}", "regime", regime,
                                  "dist", dist, "op", op, "dim", (int)dim, "threads", threads,
                                  "rows_per_s", rate, "hit_ratio", hit, "vs_gather",
                                  gather > 0 ? rate / gather : 0.0, "key_space", (json_int_t)space));
}

static ps_row_type g_row_type = PS_ROW_F32; /* --row-type */

static ps_table_spec mkspec(uint32_t dim, const char *opt) {
  ps_table_spec sp;
  memset(&sp, 0, sizeof(sp));
  sp.id = 1;
  snprintf(sp.name, sizeof(sp.name), "bench%u", dim);
  sp.dim = dim;
  sp.lr = 0.01f;
  sp.eps = 1e-8f;
  sp.beta1 = 0.9f;
  sp.beta2 = 0.999f;
  sp.l1 = 0.001f;
  sp.l2 = 0.01f;
  sp.lr_power = -0.5f;
  sp.initial_accumulator = 0.01f;
  sp.init = PS_INIT_UNIFORM;
  sp.init_a = -0.01f;
  sp.init_b = 0.01f;
  sp.seed = 7;
  sp.optimizer = PS_OPT_ADAGRAD;
  if (!strcmp(opt, "sgd")) sp.optimizer = PS_OPT_SGD;
  if (!strcmp(opt, "rowwise")) sp.optimizer = PS_OPT_ROWWISE_ADAGRAD;
  if (!strcmp(opt, "adam")) sp.optimizer = PS_OPT_ADAM;
  if (!strcmp(opt, "ftrl")) sp.optimizer = PS_OPT_FTRL;
  sp.row_type = g_row_type;
  return sp;
}

typedef struct cfg {
  size_t batch, cache_mb, over_cache_mb;
  int partitions;
  double seconds, zipf_s, over;
  const char *dir, *opt;
  uint64_t hot_keys; /* 0: 70% of the hot capacity */
} cfg;

static int open_table(const cfg *c, const char *path, size_t cache_mb, uint32_t dim, ps_store **s) {
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
  if (system(cmd) != 0) return 1;
  ps_store_options o = {.path = path, .cache_bytes = cache_mb << 20,
                        .partitions = (uint32_t)c->partitions, .block_cache_bytes = 64 << 20};
  ps_table_spec sp = mkspec(dim, c->opt);
  if (ps_store_open(&o, s, NULL) != PS_OK || ps_store_declare(*s, &sp, NULL) != PS_OK) return 1;
  return 0;
}

/* Pushes ranks [0, space) once, in batches (creates every row). */
static int preload(ps_store *s, uint32_t dim, uint64_t space, size_t batch, float *g) {
  uint64_t *k = malloc(batch * sizeof(uint64_t));
  for (uint64_t b = 0; b < space; b += batch) {
    size_t n = space - b < batch ? (size_t)(space - b) : batch;
    for (size_t i = 0; i < n; i++) k[i] = ps_mix64(b + i);
    if (ps_store_push(s, 1, k, n, g) != PS_OK) return 1;
  }
  free(k);
  (void)dim;
  return 0;
}

/* Bytes per hot row incl. index share, probed on a scratch store. */
static double probe_row_bytes(const cfg *c, uint32_t dim, float *g) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/probe%u", c->dir, dim);
  ps_store *s;
  if (open_table(c, path, 1024, dim, &s)) return 0;
  preload(s, dim, 50000, c->batch, g);
  ps_store_stats st;
  ps_store_get_stats(s, &st);
  ps_store_close(&s);
  return (double)st.hot_bytes / (double)st.rows_hot;
}

static int run_regime(const cfg *c, uint32_t dim, int over, float *g, float *out) {
  const char *regime = over ? "over10x" : "hot";
  size_t cache_mb = over ? c->over_cache_mb : c->cache_mb;
  double rb = probe_row_bytes(c, dim, g);
  if (rb <= 0) return 1;
  uint64_t cap = (uint64_t)((double)(cache_mb << 20) / rb);
  uint64_t space = over ? (uint64_t)(cap * c->over)
                        : c->hot_keys ? c->hot_keys : (uint64_t)(cap * 0.7);
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s%u", c->dir, regime, dim);
  ps_store *s;
  if (open_table(c, path, cache_mb, dim, &s)) return 1;
  double t0 = now_s();
  if (preload(s, dim, space, c->batch, g)) return 1;
  double tp = now_s() - t0;
  ps_store_stats st;
  ps_store_get_stats(s, &st);
  fprintf(stderr, "# %s dim %u: %.0f B/row, capacity %llu rows, key space %llu, preload %.2f s "
          "(%.0f rows/s), hot rows %llu, evictions %llu\n", regime, dim, rb,
          (unsigned long long)cap, (unsigned long long)space, tp, space / tp,
          (unsigned long long)st.rows_hot, (unsigned long long)st.evictions);
  size_t pool = over ? (size_t)(space < (1u << 20) ? space : (1u << 20)) : (size_t)1 << 18;
  if (pool < 16 * c->batch) pool = 16 * c->batch;
  /* The gather baseline reads a flat array of the same bytes as the hot tier. */
  uint64_t grows = st.hot_bytes / (sizeof(float) * dim);
  float *flat = malloc(grows * dim * sizeof(float));
  for (uint64_t i = 0; i < grows * dim; i++) flat[i] = (float)i;
  for (int zi = 0; zi < 2; zi++) {
    const char *dist = zi ? "zipf" : "uniform";
    uint64_t *ranks = gen_ranks(space, pool, zi, c->zipf_s, 99 + zi);
    uint64_t *keys = malloc(pool * sizeof(uint64_t));
    for (size_t i = 0; i < pool; i++) keys[i] = ps_mix64(ranks[i]);
    /* This machine is shared and noisy: the gather and the store ops alternate in ROUNDS
     * short rounds and each reports its best round, so both see the same conditions. */
    enum { ROUNDS = 3 };
    double gr = 0, best[2] = {0, 0};
    size_t poff = 0; /* successive runs continue through the pool instead of replaying it */
    uint64_t dh[2] = {0, 0}, dm[2] = {0, 0};
    { /* one warm-up pass per op so CLOCK state settles */
      ctx w0 = {s, 1, dim, c->batch, keys, pool, c->seconds * 0.2, 0, out, 0, 0, 0, &poff};
      run_ops(&w0);
      ctx w1 = {s, 1, dim, c->batch, keys, pool, c->seconds * 0.2, 1, g, 0, 0, 0, &poff};
      run_ops(&w1);
    }
    for (int rd = 0; rd < ROUNDS; rd++) {
      double r = gather_rate(flat, grows, dim, ranks, pool, c->batch, c->seconds / ROUNDS, out);
      if (r > gr) gr = r;
      for (int op = 0; op < 2; op++) {
        ps_store_stats a, b;
        ps_store_get_stats(s, &a);
        ctx x = {s, 1, dim, c->batch, keys, pool, c->seconds / ROUNDS, op, op ? g : out, 0, 0, 0, &poff};
        run_ops(&x);
        ps_store_get_stats(s, &b);
        if (x.rc) return 1;
        dh[op] += b.hits - a.hits;
        dm[op] += b.misses - a.misses;
        if (x.rows / x.elapsed > best[op]) best[op] = x.rows / x.elapsed;
      }
    }
    report(regime, dist, "gather", dim, 1, gr, 1.0, 0, grows);
    for (int op = 0; op < 2; op++)
      report(regime, dist, op ? "push" : "pull", dim, 1, best[op],
             (double)dh[op] / (double)(dh[op] + dm[op]), gr, space);
    /* Contention: dim 16 (first dim) hot uniform pull with 2 threads. */
    if (!over && zi == 0 && dim == 16) {
      uint32_t P = ps_store_partitions(s);
      uint64_t *own[2];
      size_t nown[2] = {0, 0};
      for (int t = 0; t < 2; t++) own[t] = malloc(pool * sizeof(uint64_t));
      for (size_t i = 0; i < pool; i++) {
        int t = (int)(ps_store_partition_of(s, keys[i]) % 2);
        own[t][nown[t]++] = keys[i];
      }
      for (int mode = 0; mode < 2; mode++) {
        ctx cx[2];
        pthread_t th[2];
        float *ob[2];
        for (int t = 0; t < 2; t++) {
          ob[t] = malloc(c->batch * dim * sizeof(float));
          const uint64_t *kp = mode ? own[t] : keys + (t ? pool / 2 : 0);
          size_t np = mode ? nown[t] : pool / 2;
          cx[t] = (ctx){s, 1, dim, c->batch, kp, np, c->seconds, 0, ob[t], 0, 0, 0, NULL};
          pthread_create(&th[t], NULL, run_ops, &cx[t]);
        }
        double rate = 0;
        for (int t = 0; t < 2; t++) {
          pthread_join(th[t], NULL);
          rate += cx[t].rows / cx[t].elapsed;
          free(ob[t]);
        }
        report(regime, mode ? "uni-own" : "uni-mix", "pull", dim, 2, rate, 1.0, gr, space);
      }
      (void)P;
      free(own[0]);
      free(own[1]);
    }
    free(ranks);
    free(keys);
  }
  free(flat);
  ps_store_close(&s);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --tail-calls: per-call pull latency, rows existing vs not (see the header). */
static int run_tail(const cfg *c, uint32_t dim, size_t calls, uint64_t space, float *out) {
  enum { WARM, COLD, GATHER, NCASE, BLOCK = 100 };
  const char *name[NCASE] = {"warm", "cold", "gather"};
  char path[2][700];
  ps_store *st[2] = {NULL, NULL};
  for (int w = 0; w < 2; w++) {
    snprintf(path[w], sizeof path[w], "%s/tail-%s-%u", c->dir, name[w], dim);
    if (open_table(c, path[w], c->cache_mb, dim, &st[w])) return 1;
  }
  /* Zero gradients: the rows keep their initial values, so both tables answer alike. */
  float *zg = calloc(c->batch * dim, sizeof(float));
  if (!zg || preload(st[WARM], dim, space, c->batch, zg)) return 1;
  free(zg);
  /* The plain gather's table: as many bytes a row as the store's (values, Adagrad state and
   * its 16-byte header), rows at rank * stride, touched once before timing as the warm rows
   * were: the same memory work with no store code around it. */
  const size_t stride = 2 * (size_t)dim + 4;
  float *flat = malloc(space * stride * sizeof(float));
  if (!flat) return 1;
  for (size_t i = 0; i < space * stride; i++) flat[i] = (float)(i & 1023) * 1e-4f;
  uint64_t *ranks = gen_ranks(space, calls * c->batch, 1, c->zipf_s, 11);
  uint64_t *keys = malloc(c->batch * sizeof(uint64_t));
  double *t[NCASE];
  for (int w = 0; w < NCASE; w++) t[w] = malloc(calls * sizeof(double));
  if (!ranks || !keys || !t[0] || !t[1] || !t[2]) return 1;
  size_t done[NCASE] = {0, 0, 0};
  /* Interleaved in blocks so a moment of the machine's hits every case alike. */
  while (done[WARM] < calls) {
    for (int w = 0; w < NCASE; w++) {
      for (size_t b = 0; b < BLOCK && done[w] < calls; b++, done[w]++) {
        const uint64_t *r = ranks + done[w] * c->batch;
        for (size_t i = 0; i < c->batch; i++) keys[i] = ps_mix64(r[i]);
        uint64_t t0 = ps_now_ns();
        if (w == GATHER) {
          for (size_t i = 0; i < c->batch; i++)
            memcpy(out + i * dim, flat + r[i] * stride + 4, dim * sizeof(float));
        } else if (ps_store_pull(st[w], 1, keys, c->batch, out) != PS_OK) {
          return 1;
        }
        t[w][done[w]] = (double)(ps_now_ns() - t0) * 1e-3;
      }
    }
  }
  for (int w = 0; w < NCASE; w++) {
    qsort(t[w], calls, sizeof(double), cmp_double);
    size_t slow = 0;
    for (size_t i = 0; i < calls; i++) slow += t[w][i] > 1000.0;
    double p50 = t[w][calls / 2], p90 = t[w][calls * 9 / 10], p99 = t[w][calls * 99 / 100],
           p999 = t[w][calls * 999 / 1000], mx = t[w][calls - 1];
    printf("tail  %-6s dim %4u  %zu calls of %zu keys: p50 %7.1f  p90 %7.1f  p99 %7.1f  "
           "p99.9 %8.1f  max %8.1f us  p99/p50 %5.2f  over 1 ms: %zu\n",
           name[w], dim, calls, c->batch, p50, p90, p99, p999, mx, p99 / p50, slow);
    json_array_append_new(
        g_results, json_pack("{s:s, s:s, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:I}", "case",
                             "tail", "rows", name[w], "dim", (int)dim, "calls", (json_int_t)calls,
                             "key_space", (json_int_t)space, "p50_us", p50, "p90_us", p90,
                             "p99_us", p99, "p999_us", p999, "max_us", mx, "over_1ms",
                             (json_int_t)slow));
    free(t[w]);
  }
  for (int w = 0; w < 2; w++) ps_store_close(&st[w]);
  free(flat);
  free(ranks);
  free(keys);
  return 0;
}

int main(int argc, char **argv) {
  const char *regimes = "hot,over", *dims_s = "16,64", *json_path = NULL, *dir = NULL, *opt = "adagrad";
  const char *row_type = "f32";
  int64_t batch = 4096, cache_mb = 64, over_cache_mb = 8;
  int partitions = 4;
  double seconds = 0.5, zipf_s = 1.1, over = 10;
  int64_t tail_calls = 0, tail_space = 100000, hot_keys = 0;
  ps_cli_opt opts[] = {
      {"dims", 0, PS_CLI_STRING, &dims_s, "D,D", "row dimensions", false, 0, 0},
      {"regimes", 0, PS_CLI_STRING, &regimes, "R,R", "hot and/or over (budget)", false, 0, 0},
      {"batch", 'b', PS_CLI_I64, &batch, "N", "keys per call", false, 1, 1 << 20},
      {"cache-mb", 0, PS_CLI_I64, &cache_mb, "MB", "hot budget of the all-hot cases", false, 1, 1 << 20},
      {"over-cache-mb", 0, PS_CLI_I64, &over_cache_mb, "MB", "hot budget of the over-budget cases", false, 1, 1 << 20},
      {"over", 0, PS_CLI_DOUBLE, &over, "X", "key space / hot capacity in the over-budget cases", false, 1.5, 1000},
      {"cpu-clock", 0, PS_CLI_FLAG, &g_cpu_clock, NULL, "time each case by its thread's CPU time, not the wall clock (a shared machine)", false, 0, 0},
      {"hot-keys", 0, PS_CLI_I64, &hot_keys, "N", "key space of the all-hot cases (0: 70% of what the budget holds)", false, 0, 1000000000},
      {"partitions", 'p', PS_CLI_INT, &partitions, "P", "store partitions", false, 1, 1024},
      {"seconds", 's', PS_CLI_DOUBLE, &seconds, "S", "measuring time per case", false, 0.01, 600},
      {"zipf", 0, PS_CLI_DOUBLE, &zipf_s, "A", "Zipf exponent", false, 0.5, 5},
      {"opt", 0, PS_CLI_STRING, &opt, "NAME", "sgd|adagrad|rowwise|adam|ftrl", false, 0, 0},
      {"row-type", 0, PS_CLI_STRING, &row_type, "f32|f16|bf16", "how the table stores its rows", false, 0, 0},
      {"dir", 0, PS_CLI_STRING, &dir, "DIR", "scratch directory (default /tmp/ps-store-bench-PID)", false, 0, 0},
      {"json", 0, PS_CLI_STRING, &json_path, "FILE", "write results as JSON", false, 0, 0},
      {"tail-calls", 0, PS_CLI_I64, &tail_calls, "N", "instead: latency of N single Zipf pulls per dim, rows existing vs not (0: off)", false, 0, 10000000},
      {"tail-keys", 0, PS_CLI_I64, &tail_space, "K", "key space of --tail-calls (all pushed once in the warm table)", false, 1, 100000000},
  };
  ps_cli cli = {"ps-store-bench", "Embedding store pull/push throughput beside a plain gather.", NULL, PS_CLI_OPTS(opts)};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  if (strcmp(opt, "sgd") && strcmp(opt, "adagrad") && strcmp(opt, "rowwise") &&
      strcmp(opt, "adam") && strcmp(opt, "ftrl")) {
    fprintf(stderr, "ps-store-bench: --opt: '%s' is not sgd|adagrad|rowwise|adam|ftrl\n", opt);
    return 2;
  }
  if (ps_row_type_parse(row_type, &g_row_type, NULL) != PS_OK) {
    fprintf(stderr, "ps-store-bench: --row-type: '%s' is not f32, f16 or bf16\n", row_type);
    return 2;
  }
  char *items[16];
  int nd = ps_split_list(dims_s, ',', items, 16);
  if (nd <= 0) {
    fprintf(stderr, "ps-store-bench: --dims: '%s' is not a list of dimensions\n", dims_s);
    return 2;
  }
  uint32_t dims[16];
  for (int i = 0; i < nd; i++) {
    int64_t d;
    if (ps_parse_i64(items[i], &d, NULL) != PS_OK || d < 1 || d > 4096) {
      fprintf(stderr, "ps-store-bench: --dims: '%s' is not a dimension in 1..4096\n", items[i]);
      return 2;
    }
    dims[i] = (uint32_t)d;
  }
  free(items[0]);
  char dbuf[256];
  if (!dir) {
    snprintf(dbuf, sizeof(dbuf), "/tmp/ps-store-bench-%d", (int)getpid());
    dir = dbuf;
  }
  ps_log_set_level(PS_LOG_WARN);
  cfg c = {(size_t)batch, (size_t)cache_mb, (size_t)over_cache_mb, partitions, seconds, zipf_s,
           over, dir, opt, (uint64_t)hot_keys};
  g_results = json_array();
  if (!tail_calls)
    printf("%-9s %-8s %-10s %4s %7s %14s %8s %10s\n", "regime", "dist", "op", "dim", "threads",
         "rows/s", "hit", "vs gather");
  float *g = malloc((size_t)batch * 4096 * sizeof(float));
  float *out = malloc((size_t)batch * 4096 * sizeof(float));
  rng r = {5};
  for (size_t i = 0; i < (size_t)batch * 64; i++) g[i] = (float)(rng_unit(&r) - 0.5) * 0.01f;
  for (size_t i = (size_t)batch * 64; i < (size_t)batch * 4096; i++) g[i] = g[i % ((size_t)batch * 64)];
  int err = 0;
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
  if (system(cmd) != 0) return 1;
  for (int i = 0; i < nd && !err; i++) {
    if (tail_calls) {
      err = run_tail(&c, dims[i], (size_t)tail_calls, (uint64_t)tail_space, out);
      continue;
    }
    for (int over_i = 0; over_i < 2 && !err; over_i++)
      if (strstr(regimes, over_i ? "over" : "hot")) err = run_regime(&c, dims[i], over_i, g, out);
  }
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) err = 1;
  if (json_path) {
    json_t *root = json_pack("{s:I, s:i, s:I, s:I, s:f, s:f, s:s, s:o}", "batch", (json_int_t)batch,
                             "partitions", partitions, "cache_mb", (json_int_t)cache_mb,
                             "over_cache_mb", (json_int_t)over_cache_mb, "over", over, "zipf", zipf_s,
                             "opt", opt, "results", g_results);
    if (json_dump_file(root, json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) err = 1;
    json_decref(root);
  } else {
    json_decref(g_results);
  }
  free(g);
  free(out);
  if (err) fprintf(stderr, "ps-store-bench: a case failed\n");
  return err ? 1 : 0;
}
