/* ps-ckpt-bench: a delta checkpoint vs a full one of the same store, when a fraction of the
 * rows changed (issue 20's "size and time of a delta vs a full checkpoint when 1% changed").
 *
 * A store of --rows rows (dim --dim, Adagrad) is filled and given a full checkpoint (the base).
 * Each round then pushes --changed of the rows (distinct random keys) and takes, from that same
 * state, a full checkpoint (flush + RocksDB checkpoint) and a delta (ps_store_checkpoint), in an
 * order that alternates between rounds so neither always pays the flush; the delta is committed
 * (the next round's base), the full one removed. Reported per round: seconds and bytes of each,
 * and the seconds of a read-only open of each (round r's delta composes a chain of the base and
 * r deltas).
 * --ckpt-dir puts the checkpoints on another file system: RocksDB hard-links a full checkpoint's
 * SST files on the same one (bytes the directory holds, not bytes written), and copies them on
 * another. Medians and the delta/full ratios of the medians at the end; last, what change
 * tracking costs a push (every row pushed once untracked, before the first checkpoint, and
 * once tracked, after the last round). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_cli.h"
#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_log.h"
#include "ps_store.h"
#include "ps_time.h"

static uint64_t tree_bytes_sum;
static int add_size(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)p;
  (void)f;
  if (flag == FTW_F) tree_bytes_sum += (uint64_t)sb->st_size;
  return 0;
}
static uint64_t tree_bytes(const char *dir) {
  tree_bytes_sum = 0;
  nftw(dir, add_size, 16, FTW_PHYS);
  return tree_bytes_sum;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void push_keys(ps_store *s, const uint64_t *k, size_t n, uint32_t dim) {
  enum { B = 65536 };
  float *g = malloc((size_t)B * dim * sizeof *g);
  for (size_t i = 0; i < (size_t)B * dim; i++) g[i] = 0.01f * (float)(i % 7) - 0.03f;
  for (size_t o = 0; o < n; o += B)
    if (ps_store_push(s, 1, k + o, n - o < B ? n - o : B, g) != PS_OK) {
      fprintf(stderr, "ps-ckpt-bench: push failed\n");
      exit(1);
    }
  free(g);
}

static double open_ro(const char *dir) {
  uint64_t t0 = ps_now_ns();
  ps_store_options o = {.path = dir, .partitions = 1, .read_only = true};
  ps_store *s = NULL;
  ps_error e;
  if (ps_store_open(&o, &s, &e) != PS_OK) {
    fprintf(stderr, "ps-ckpt-bench: opening %s: %s\n", dir, e.msg);
    exit(1);
  }
  ps_store_close(&s);
  return (double)(ps_now_ns() - t0) / 1e9;
}

static void check(ps_status st, const ps_error *e) {
  if (st == PS_OK) return;
  fprintf(stderr, "ps-ckpt-bench: %s\n", e->msg);
  exit(1);
}

int main(int argc, char **argv) {
  int64_t rows = 1000000, dim = 16, rounds = 5;
  double changed = 0.01;
  const char *dir = NULL, *ckdir = NULL;
  ps_cli_opt opts[] = {
      {"rows", 0, PS_CLI_I64, &rows, "N", "rows in the store", false, 1000, 1e9},
      {"dim", 0, PS_CLI_I64, &dim, "D", "values per row (Adagrad: as many again of state)", false, 1, 4096},
      {"changed", 0, PS_CLI_DOUBLE, &changed, "F", "fraction of the rows pushed between checkpoints", false, 1e-6, 1},
      {"rounds", 0, PS_CLI_I64, &rounds, "R", "checkpoint pairs measured", false, 1, 1000},
      {"dir", 0, PS_CLI_STRING, &dir, "DIR", "the store's directory (default /tmp/ps-ckpt-bench-PID)", false, 0, 0},
      {"ckpt-dir", 0, PS_CLI_STRING, &ckdir, "DIR", "where checkpoints go (default: beside the store)", false, 0, 0},
  };
  ps_cli cli = {"ps-ckpt-bench", "Delta vs full checkpoint of an embedding store: size and time.", NULL, PS_CLI_OPTS(opts)};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  ps_log_set_level(PS_LOG_WARN);
  char root[512], live[600], ck[600], p[700], q[700];
  if (dir) snprintf(root, sizeof root, "%s", dir);
  else snprintf(root, sizeof root, "/tmp/ps-ckpt-bench-%d", (int)getpid());
  snprintf(live, sizeof live, "%s/live", root);
  if (ckdir) snprintf(ck, sizeof ck, "%s/ps-ckpt-bench-%d", ckdir, (int)getpid());
  else snprintf(ck, sizeof ck, "%s/ckpt", root);
  if (ps_mkdir_p(root) != PS_OK || ps_mkdir_p(ck) != PS_OK) {
    fprintf(stderr, "ps-ckpt-bench: cannot create %s or %s\n", root, ck);
    return 1;
  }
  ps_store_options o = {.path = live, .partitions = 1, .cache_bytes = (size_t)1 << 30};
  ps_store *s = NULL;
  ps_error e;
  check(ps_store_open(&o, &s, &e), &e);
  ps_table_spec sp;
  ps_table_spec_default(&sp, 1, "emb", (uint32_t)dim);
  sp.optimizer = PS_OPT_ADAGRAD;
  check(ps_store_declare(s, &sp, &e), &e);
  uint64_t *all = malloc((size_t)rows * sizeof *all);
  for (int64_t i = 0; i < rows; i++) all[i] = ps_mix64((uint64_t)i + 1);
  ps_store_set_step(s, 1);
  push_keys(s, all, (size_t)rows, (uint32_t)dim);
  /* What tracking costs a push: every row updated once before the first checkpoint (nothing
   * tracked) and once after the last round (every key recorded, the set growing to all). */
  uint64_t t0 = ps_now_ns();
  push_keys(s, all, (size_t)rows, (uint32_t)dim);
  double push_off = (double)(ps_now_ns() - t0) / 1e9;
  ps_store_ckpt_info info;
  snprintf(p, sizeof p, "%s/step-0", ck);
  check(ps_store_checkpoint(s, p, 1, 1000, &info, &e), &e);
  check(ps_store_checkpoint_commit(s, p, &e), &e);
  size_t nchg = (size_t)(changed * (double)rows);
  if (!nchg) nchg = 1;
  uint64_t *chg = malloc(nchg * sizeof *chg);
  double *ft = calloc((size_t)rounds, sizeof(double)), *dt = calloc((size_t)rounds, sizeof(double));
  double *fb = calloc((size_t)rounds, sizeof(double)), *db = calloc((size_t)rounds, sizeof(double));
  double *fo = calloc((size_t)rounds, sizeof(double)), *dop = calloc((size_t)rounds, sizeof(double));
  printf("rows %lld dim %lld changed %zu (%.3g%%) per round; checkpoints in %s\n",
         (long long)rows, (long long)dim, nchg, 100.0 * (double)nchg / (double)rows, ck);
  printf("%-6s %-6s %10s %12s %10s | %-6s %10s %12s %10s\n", "round", "first", "full s",
         "full bytes", "open s", "", "delta s", "delta bytes", "open s");
  for (int64_t r = 0; r < rounds; r++) {
    /* nchg distinct rows: a random start in a random permutation is enough (keys are mixed) */
    size_t start = (size_t)(ps_mix64((uint64_t)r * 7919u) % (uint64_t)rows);
    for (size_t i = 0; i < nchg; i++) chg[i] = all[(start + i * 7919u) % (size_t)rows];
    ps_store_set_step(s, (uint64_t)r + 2);
    push_keys(s, chg, nchg, (uint32_t)dim);
    snprintf(p, sizeof p, "%s/full-%lld", ck, (long long)r);
    snprintf(q, sizeof q, "%s/step-%lld", ck, (long long)r + 1);
    for (int k = 0; k < 2; k++) {
      bool full = (k == 0) == (r % 2 == 0);
      uint64_t t0 = ps_now_ns();
      if (full) check(ps_store_snapshot(s, p, &e), &e);
      else check(ps_store_checkpoint(s, q, (uint64_t)r + 2, 1000, &info, &e), &e);
      double secs = (double)(ps_now_ns() - t0) / 1e9;
      if (full) ft[r] = secs;
      else dt[r] = secs;
    }
    check(ps_store_checkpoint_commit(s, q, &e), &e);
    if (!info.delta) {
      fprintf(stderr, "ps-ckpt-bench: round %lld: the store wrote a full checkpoint\n",
              (long long)r);
      return 1;
    }
    fb[r] = (double)tree_bytes(p);
    db[r] = (double)tree_bytes(q);
    fo[r] = open_ro(p);
    dop[r] = open_ro(q);
    printf("%-6lld %-6s %10.4f %12.0f %10.4f | %-6s %10.4f %12.0f %10.4f\n", (long long)r + 1,
           r % 2 == 0 ? "full" : "delta", ft[r], fb[r], fo[r], "", dt[r], db[r], dop[r]);
    ps_store_snapshot_remove(p, NULL);
  }
  double mft = median(ft, (int)rounds), mdt = median(dt, (int)rounds);
  double mfb = median(fb, (int)rounds), mdb = median(db, (int)rounds);
  double mfo = median(fo, (int)rounds), mdo = median(dop, (int)rounds);
  printf("median  full %.4f s %.0f bytes (open %.4f s) | delta %.4f s %.0f bytes (open %.4f s)\n",
         mft, mfb, mfo, mdt, mdb, mdo);
  printf("delta/full: time %.3f, bytes %.4f, open %.2f\n", mdt / mft, mdb / mfb, mdo / mfo);
  double push_on[2];
  for (int i = 0; i < 2; i++) {
    t0 = ps_now_ns();
    push_keys(s, all, (size_t)rows, (uint32_t)dim);
    push_on[i] = (double)(ps_now_ns() - t0) / 1e9;
  }
  printf("push of every row: %.0f rows/s untracked; tracked %.0f rows/s (%.2fx) while the set "
         "grows to every key, %.0f rows/s (%.2fx) once it holds them\n", (double)rows / push_off,
         (double)rows / push_on[0], push_off / push_on[0], (double)rows / push_on[1],
         push_off / push_on[1]);
  ps_store_close(&s);
  ps_rm_rf(ck);
  ps_rm_rf(root);
  free(all);
  free(chg);
  free(ft);
  free(dt);
  free(fb);
  free(db);
  free(fo);
  free(dop);
  return 0;
}
