/* ps-dense-bench: samples/s of the dense DLRM step (forward + backward + optimizer) on one
 * backend, per batch size, with a breakdown of where the time goes.
 *
 * The breakdown comes from a timing backend that wraps the real one: the same ps_kern_i
 * vtable, forwarding every call and adding its wall time (bracketed by syncs, so it is honest
 * for asynchronous backends too) to a per-operation counter. The model does not know. Timed
 * runs use the unwrapped backend, so the headline figure carries no timing overhead.
 *
 * Batches are synthetic one-hot Criteo-shaped: 13 dense floats, 26 bags of one row each, every
 * row unique (the worst case for pooling: nrows = batch * 26); bench/common/ps_bench_dense.h
 * makes them, the same as ps-gpu-bench's. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_dense.h"
#include "ps_cli.h"
#include "ps_dlrm.h"
#include "ps_kernels.h"
#include "ps_log.h"
#include "ps_time.h"

/* ---- timing backend ---- (its "sgemm" counts every GEMM, FP32 or bf16) */

enum { OP_SGEMM, OP_BIAS_ACT, OP_INTERACT, OP_POOL, OP_BCE, OP_OPT, OP_COPY, OP_CROSS, OP_N };
static const char *op_names[OP_N] = {"sgemm", "bias_act", "interact", "pool", "bce", "optimizer", "copy",
                                     "cross"};

typedef struct timing {
  ps_kern *inner;
  uint64_t ns[OP_N];
  uint64_t calls[OP_N];
} timing;

#define INNER(k) (((timing *)(k)->ctx)->inner)
#define TIMED(op, call)                                      \
  do {                                                       \
    timing *t_ = (timing *)k->ctx;                           \
    ps_kern_sync(t_->inner);                                 \
    uint64_t t0_ = ps_now_ns();                              \
    ps_status st_ = (call);                                  \
    ps_kern_sync(t_->inner);                                 \
    t_->ns[op] += ps_now_ns() - t0_;                         \
    t_->calls[op]++;                                         \
    return st_;                                              \
  } while (0)

static ps_status t_alloc(ps_kern *k, size_t n, void **o) { return ps_kern_alloc(INNER(k), n, o); }
static void t_free(ps_kern *k, void *p) { ps_kern_free(INNER(k), p); }
static ps_status t_memset0(ps_kern *k, void *d, size_t n) { TIMED(OP_COPY, ps_kern_memset0(INNER(k), d, n)); }
static ps_status t_to_device(ps_kern *k, void *d, const void *s, size_t n) { TIMED(OP_COPY, ps_kern_to_device(INNER(k), d, s, n)); }
static ps_status t_to_host(ps_kern *k, void *d, const void *s, size_t n) { TIMED(OP_COPY, ps_kern_to_host(INNER(k), d, s, n)); }
static ps_status t_copy(ps_kern *k, void *d, const void *s, size_t n) { TIMED(OP_COPY, ps_kern_copy(INNER(k), d, s, n)); }
static ps_status t_sync(ps_kern *k) { return ps_kern_sync(INNER(k)); }
static void t_destroy(ps_kern *k) {
  free(k->ctx);
  free(k);
}
static ps_status t_sgemm(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float al, const float *a, int lda,
                         const float *b, int ldb, float be, float *c, int ldc) {
  TIMED(OP_SGEMM, ps_kern_sgemm(INNER(k), ta, tb, m, n, kk, al, a, lda, b, ldb, be, c, ldc));
}
static ps_status t_gemm_bf16(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float al, const float *a,
                             int lda, const float *b, int ldb, float be, float *c, int ldc) {
  TIMED(OP_SGEMM, ps_kern_gemm(INNER(k), PS_KERN_BF16, ta, tb, m, n, kk, al, a, lda, b, ldb, be, c, ldc));
}
static ps_status t_baf(ps_kern *k, ps_kern_act a, int m, int n, const float *x, const float *b, float *y) {
  TIMED(OP_BIAS_ACT, ps_kern_bias_act_fwd(INNER(k), a, m, n, x, b, y));
}
static ps_status t_bab(ps_kern *k, ps_kern_act a, int m, int n, const float *y, const float *dy, float *dx, float *db) {
  TIMED(OP_BIAS_ACT, ps_kern_bias_act_bwd(INNER(k), a, m, n, y, dy, dx, db));
}
static ps_status t_if(ps_kern *k, int B, int S, int D, const float *bo, const float *e, float *o) {
  TIMED(OP_INTERACT, ps_kern_interact_fwd(INNER(k), B, S, D, bo, e, o));
}
static ps_status t_ib(ps_kern *k, int B, int S, int D, const float *bo, const float *e, const float *g, float *db,
                      float *de) {
  TIMED(OP_INTERACT, ps_kern_interact_bwd(INNER(k), B, S, D, bo, e, g, db, de));
}
static ps_status t_pf(ps_kern *k, ps_kern_pool md, int nb, int D, int nr, const float *r, int nnz, const int32_t *i,
                      const int32_t *o, float *out) {
  TIMED(OP_POOL, ps_kern_pool_fwd(INNER(k), md, nb, D, nr, r, nnz, i, o, out));
}
static ps_status t_pb(ps_kern *k, ps_kern_pool md, int nb, int D, int nr, int nnz, const int32_t *i, const int32_t *o,
                      const float *g, float *dr) {
  TIMED(OP_POOL, ps_kern_pool_bwd(INNER(k), md, nb, D, nr, nnz, i, o, g, dr));
}
static ps_status t_bf(ps_kern *k, int n, const float *z, const float *y, float *p, float *l) {
  TIMED(OP_BCE, ps_kern_bce_fwd(INNER(k), n, z, y, p, l));
}
static ps_status t_bb(ps_kern *k, int n, const float *z, const float *y, float s, float *g) {
  TIMED(OP_BCE, ps_kern_bce_bwd(INNER(k), n, z, y, s, g));
}
static ps_status t_scale(ps_kern *k, size_t n, float a, float *x) { TIMED(OP_OPT, ps_kern_scale(INNER(k), n, a, x)); }
static ps_status t_sgd(ps_kern *k, size_t n, float *w, const float *g, float lr, float wd) {
  TIMED(OP_OPT, ps_kern_sgd(INNER(k), n, w, g, lr, wd));
}
static ps_status t_adagrad(ps_kern *k, size_t n, float *w, const float *g, float *s, float lr, float e, float wd) {
  TIMED(OP_OPT, ps_kern_adagrad(INNER(k), n, w, g, s, lr, e, wd));
}
static ps_status t_adam(ps_kern *k, size_t n, float *w, const float *g, float *m, float *v, float lr, float b1,
                        float b2, float e, float wd, int64_t step) {
  TIMED(OP_OPT, ps_kern_adam(INNER(k), n, w, g, m, v, lr, b1, b2, e, wd, step));
}

static ps_status t_copy2d(ps_kern *k, int r, int c, const float *s, int ls, float *d, int ld) {
  TIMED(OP_COPY, ps_kern_copy2d(INNER(k), r, c, s, ls, d, ld));
}
static ps_status t_cf(ps_kern *k, int m, int n, const float *x0, const float *z, const float *b,
                      const float *xl, float *zb, float *y) {
  TIMED(OP_CROSS, ps_kern_cross_fwd(INNER(k), m, n, x0, z, b, xl, zb, y));
}
static ps_status t_cb(ps_kern *k, int m, int n, const float *x0, const float *zb, const float *dy,
                      float r, float *dz, float *dx0) {
  TIMED(OP_CROSS, ps_kern_cross_bwd(INNER(k), m, n, x0, zb, dy, r, dz, dx0));
}

static void *t_stream(ps_kern *k) { return ps_kern_stream(INNER(k)); }

static const ps_kern_i timing_iface = {
    .alloc = t_alloc, .free = t_free, .memset0 = t_memset0, .to_device = t_to_device,
    .to_host = t_to_host, .copy = t_copy, .sync = t_sync, .destroy = t_destroy, .sgemm = t_sgemm,
    .gemm_bf16 = t_gemm_bf16,
    .bias_act_fwd = t_baf, .bias_act_bwd = t_bab, .interact_fwd = t_if, .interact_bwd = t_ib,
    .pool_fwd = t_pf, .pool_bwd = t_pb, .bce_fwd = t_bf, .bce_bwd = t_bb, .scale = t_scale,
    .sgd = t_sgd, .adagrad = t_adagrad, .adam = t_adam, .copy2d = t_copy2d, .cross_fwd = t_cf,
    .cross_bwd = t_cb, .stream = t_stream};

static ps_kern *timing_wrap(ps_kern *inner) {
  ps_kern *k = calloc(1, sizeof(*k));
  timing *t = calloc(1, sizeof(*t));
  if (!k || !t) {
    free(k);
    free(t);
    return NULL;
  }
  t->inner = inner;
  k->iface = &timing_iface;
  k->ctx = t;
  k->name = "timing";
  k->host_memory = inner->host_memory;
  k->bf16 = inner->bf16;
  return k;
}

int main(int argc, char **argv) {
  const char *device = "cpu", *batches = "128,2048,8192", *json_path = NULL;
  ps_bench_model mb = PS_BENCH_KAGGLE_MODEL;
  int threads = 2, warmup = 3, profile = 1;
  double seconds = 3.0;
  const ps_cli_opt opts[] = {
      {"device", 0, PS_CLI_STRING, &device, "NAME", "backend: cpu, cuda, cuda:N", false, 0, 0},
      {"threads", 't', PS_CLI_INT, &threads, "T", "CPU threads (OpenMP + OpenBLAS)", false, 0, 1024},
      PS_BENCH_BATCH_OPT(&batches),
      {"seconds", 's', PS_CLI_DOUBLE, &seconds, "S", "timed seconds per batch size", false, 0.01, 3600},
      PS_BENCH_WARMUP_OPT(&warmup),
      PS_BENCH_MODEL_OPTS(&mb),
      {"profile", 0, PS_CLI_INT, &profile, "0|1", "also run a per-operation breakdown", false, 0, 1},
      PS_BENCH_JSON_OPT(&json_path),
  };
  ps_cli cli = {"ps-dense-bench", "Dense DLRM step throughput (forward+backward+optimizer)", NULL, opts,
                sizeof(opts) / sizeof(opts[0])};
  int first = 0, rc = ps_cli_run(&cli, argc, argv, &first);
  if (rc >= 0) return rc;
  ps_dlrm_opt opt;
  int bs[PS_BENCH_MAX_BATCHES];
  int nb = ps_bench_dense_args("ps-dense-bench", mb.opt_name, batches, &opt, bs);
  if (nb < 0) return 2;
  ps_kern *k = NULL;
  ps_error err;
  ps_status st = ps_kern_create(device, threads, &k, &err);
  if (st != PS_OK) {
    fprintf(stderr, "ps-dense-bench: --device %s: %s\n", device, err.msg);
    return 1;
  }
  json_t *root = json_object(), *res = json_array();
  json_object_set_new(root, "device", json_string(device));
  json_object_set_new(root, "threads", json_integer(threads));
  ps_bench_dense_json_model(root, &mb);
  printf("ps-dense-bench: device %s, %d threads, bot %s, top %s, dim %d, %d tables, opt %s, %s\n",
         device, threads, mb.mlp_bot, mb.mlp_top, mb.emb_dim, mb.num_sparse, mb.opt_name,
         mb.interaction);
  int ret = 0;
  for (int i = 0; i < nb && ret == 0; i++) {
    ps_dlrm_config cfg;
    ps_bench_dense_config(&mb, bs[i], &cfg);
    ps_dlrm *m;
    ps_bench_synth s;
    if (ps_bench_dense_open("ps-dense-bench", k, &mb, bs[i], true, warmup, &opt, &m, &s) != 0) {
      ret = 1;
      break;
    }
    ps_kern_sync(k);
    /* Each step is timed; the headline is the MEDIAN step (robust to other load on a shared
     * machine), the mean is reported beside it. */
    size_t cap = 1024, steps = 0;
    double *dt = malloc(cap * sizeof(double));
    uint64_t t0 = ps_now_ns(), t1 = t0;
    while (dt && st == PS_OK && (t1 - t0 < (uint64_t)(seconds * 1e9) || steps < 5)) {
      uint64_t a = ps_now_ns();
      st = ps_bench_synth_step(m, &s, &opt, true);
      ps_kern_sync(k); /* a trainer needs each step's results before the next */
      t1 = ps_now_ns();
      if (steps == cap) {
        double *n2 = realloc(dt, 2 * cap * sizeof(double));
        if (!n2) break;
        dt = n2, cap *= 2;
      }
      dt[steps++] = (double)(t1 - a) * 1e-9;
    }
    ps_dlrm_destroy(&m);
    if (st != PS_OK || !dt) {
      fprintf(stderr, "ps-dense-bench: step failed: %s\n", ps_status_str(st));
      ret = 1;
      free(dt);
      ps_bench_synth_free(&s);
      break;
    }
    ps_bench_sort(dt, steps);
    double med = dt[steps / 2], el = ps_ns_to_s(t1 - t0);
    double sps = bs[i] / med, sps_mean = (double)steps * bs[i] / el;
    free(dt);
    ps_dlrm_create(k, &cfg, &m, NULL);
    double gflops = ps_dlrm_flops_per_sample(m) * sps * 1e-9;
    ps_dlrm_destroy(&m);
    json_t *r = json_object();
    json_object_set_new(r, "batch", json_integer(bs[i]));
    json_object_set_new(r, "steps", json_integer(steps));
    json_object_set_new(r, "samples_per_s", json_real(sps));
    json_object_set_new(r, "samples_per_s_mean", json_real(sps_mean));
    json_object_set_new(r, "ms_per_step_median", json_real(med * 1e3));
    json_object_set_new(r, "gemm_gflops_effective", json_real(gflops));
    printf("batch %6d: %10.0f samples/s (median step %.3f ms; mean %.0f samples/s over %zu steps; %.1f GFLOP/s of GEMM work)\n",
           bs[i], sps, med * 1e3, sps_mean, steps, gflops);
    if (profile) {
      /* same steps through the timing wrapper: per-op wall time, syncs around each call */
      ps_kern *tk = timing_wrap(k);
      ps_dlrm *pm = NULL;
      if (tk && ps_dlrm_create(tk, &cfg, &pm, NULL) == PS_OK) {
        timing *t = tk->ctx;
        ps_bench_synth_step(pm, &s, &opt, true);
        memset(t->ns, 0, sizeof(t->ns));
        memset(t->calls, 0, sizeof(t->calls));
        /* the fastest of 10 profiled steps (least disturbed by other load) */
        uint64_t best_ns[OP_N] = {0};
        double tot = 1e30;
        for (int j = 0; j < 10; j++) {
          memset(t->ns, 0, sizeof(t->ns));
          uint64_t p0 = ps_now_ns();
          ps_bench_synth_step(pm, &s, &opt, true);
          double el1 = (double)(ps_now_ns() - p0);
          if (el1 < tot) tot = el1, memcpy(best_ns, t->ns, sizeof(best_ns));
        }
        memcpy(t->ns, best_ns, sizeof(best_ns));
        const int ps = 1;
        json_t *bd = json_object();
        printf("              breakdown (ms/step):");
        double sum = 0;
        for (int o = 0; o < OP_N; o++) {
          double ms = (double)t->ns[o] / ps * 1e-6;
          sum += (double)t->ns[o];
          json_object_set_new(bd, op_names[o], json_real(ms));
          printf(" %s %.3f", op_names[o], ms);
        }
        double other = (tot - sum) / ps * 1e-6;
        json_object_set_new(bd, "other", json_real(other));
        json_object_set_new(bd, "total", json_real(tot / ps * 1e-6));
        printf(" other %.3f | total %.3f; sgemm %.0f%%\n", other, tot / ps * 1e-6, 100.0 * (double)t->ns[OP_SGEMM] / tot);
        json_object_set_new(r, "breakdown_ms", bd);
      }
      ps_dlrm_destroy(&pm);
      if (tk) tk->iface->destroy(tk);
    }
    json_array_append_new(res, r);
    ps_bench_synth_free(&s);
  }
  ret = ps_bench_dense_json_finish("ps-dense-bench", root, res, json_path, ret);
  ps_kern_destroy(&k);
  return ret;
}
