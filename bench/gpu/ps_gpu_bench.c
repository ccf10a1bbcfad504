/* ps-gpu-bench: samples/s of the dense DLRM step on the CUDA backend, per batch size, and the
 * share of the step spent in cuBLAS.
 *
 * Two figures per batch size, both through worker/model exactly as ps-worker drives it:
 *   train  forward + backward + optimizer, with the batch uploaded from host memory and the
 *          embedding-row gradients downloaded to host memory every step (what the PS client
 *          pushes) — one host synchronisation per step, as in training;
 *   dense  the same without the row-gradient download: uploads are still enqueued each step
 *          through the pinned staging ring, and the host synchronises only at the end.
 * The cuBLAS share comes from CUDA events around every sgemm (ps_kern_cuda_gemm_timing),
 * summed over `dense` steps and divided by their wall time; events add no synchronisation.
 *
 * The batch is synthetic, Criteo-shaped and one-hot with every row unique (nrows = 26 B),
 * the most upload-heavy case, as in bench/dense/ps-dense-bench. Compare with
 * bench/gpu/torch_dense_gpu.py on the same GPU. Exit status 77 where no GPU is usable. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_dlrm.h"
#include "ps_kernels.h"
#include "ps_kernels_cuda.h"
#include "ps_log.h"
#include "ps_time.h"

typedef struct synth {
  int B, S, D, nd;
  float *dense, *labels, *rows, *drows;
  int32_t *idx, *off;
} synth;

static uint64_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 11;
}
static double unit(uint64_t *x) { return (double)lcg(x) / 9007199254740992.0; }

static int synth_make(synth *s, int B, int S, int D, int nd, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->B = B, s->S = S, s->D = D, s->nd = nd;
  size_t nnz = (size_t)B * S;
  s->dense = malloc((size_t)B * nd * sizeof(float));
  s->labels = malloc((size_t)B * sizeof(float));
  s->rows = malloc(nnz * D * sizeof(float));
  s->drows = malloc(nnz * D * sizeof(float));
  s->idx = malloc(nnz * sizeof(int32_t));
  s->off = malloc((nnz + 1) * sizeof(int32_t));
  if (!s->dense || !s->labels || !s->rows || !s->drows || !s->idx || !s->off) return -1;
  uint64_t x = seed;
  for (size_t i = 0; i < (size_t)B * nd; i++) s->dense[i] = (float)(unit(&x) * 5.0);
  for (int i = 0; i < B; i++) s->labels[i] = unit(&x) < 0.25 ? 1.0f : 0.0f;
  for (size_t i = 0; i < nnz * D; i++) s->rows[i] = (float)((unit(&x) - 0.5) * 0.1);
  for (size_t i = 0; i < nnz; i++) s->idx[i] = (int32_t)i;
  for (size_t i = nnz; i > 1; i--) { /* rows arrive in key order, not bag order */
    size_t j = (size_t)(unit(&x) * (double)i);
    int32_t t = s->idx[i - 1];
    s->idx[i - 1] = s->idx[j];
    s->idx[j] = t;
  }
  for (size_t i = 0; i <= nnz; i++) s->off[i] = (int32_t)i;
  return 0;
}

static void synth_free(synth *s) {
  free(s->dense), free(s->labels), free(s->rows), free(s->drows), free(s->idx), free(s->off);
}

static ps_status one_step(ps_dlrm *m, synth *s, const ps_dlrm_opt *opt, bool rowgrads) {
  ps_dlrm_batch b = {.batch = s->B,
                     .dense = s->dense,
                     .labels = s->labels,
                     .nrows = s->B * s->S,
                     .rows = s->rows,
                     .nnz = s->B * s->S,
                     .idx = s->idx,
                     .offsets = s->off};
  ps_status st = ps_dlrm_forward(m, &b, NULL);
  if (st == PS_OK) st = ps_dlrm_backward(m, rowgrads ? s->drows : NULL);
  if (st == PS_OK) st = ps_dlrm_step(m, opt);
  return st;
}

/* Runs steps for at least `seconds` (and 3 steps); returns samples/s, or < 0 on failure. */
static double timed(ps_kern *k, ps_dlrm *m, synth *s, const ps_dlrm_opt *opt, bool rowgrads,
                    double seconds, double *ms_per_step) {
  ps_status st = ps_kern_sync(k);
  uint64_t t0 = ps_now_ns(), t1 = t0;
  long steps = 0;
  while (st == PS_OK && (t1 - t0 < (uint64_t)(seconds * 1e9) || steps < 3)) {
    st = one_step(m, s, opt, rowgrads);
    steps++;
    if (!rowgrads && steps % 8 == 0) st = st == PS_OK ? ps_kern_sync(k) : st; /* bound run-ahead */
    t1 = ps_now_ns();
  }
  if (st == PS_OK) st = ps_kern_sync(k);
  t1 = ps_now_ns();
  if (st != PS_OK) {
    fprintf(stderr, "ps-gpu-bench: step failed: %s\n", ps_status_str(st));
    return -1.0;
  }
  double el = ps_ns_to_s(t1 - t0);
  *ms_per_step = el * 1e3 / (double)steps;
  return (double)steps * s->B / el;
}

int main(int argc, char **argv) {
  const char *device = "cuda", *batches = "2048,16384,65536", *json_path = NULL, *opt_name = "sgd";
  const char *mlp_bot = "13-512-256-64-16", *mlp_top = "512-256-1";
  int emb_dim = 16, num_sparse = 26, warmup = 5, tf32 = 0, gemm_steps = 20;
  double seconds = 2.0;
  const ps_cli_opt opts[] = {
      {"device", 0, PS_CLI_STRING, &device, "NAME", "backend: cuda or cuda:N", false, 0, 0},
      {"batch", 'b', PS_CLI_STRING, &batches, "LIST", "comma-separated batch sizes", false, 0, 0},
      {"seconds", 's', PS_CLI_DOUBLE, &seconds, "S", "timed seconds per batch size and mode", false,
       0.01, 3600},
      {"warmup", 0, PS_CLI_INT, &warmup, "N", "untimed steps first", false, 0, 1000},
      {"gemm-steps", 0, PS_CLI_INT, &gemm_steps, "N", "steps for the cuBLAS share", false, 1, 1000},
      {"mlp-bot", 0, PS_CLI_STRING, &mlp_bot, "DIMS", "bottom MLP widths", false, 0, 0},
      {"mlp-top", 0, PS_CLI_STRING, &mlp_top, "DIMS", "top MLP widths (input prepended)", false, 0,
       0},
      {"emb-dim", 0, PS_CLI_INT, &emb_dim, "D", "embedding dimension", false, 1, 4096},
      {"num-sparse", 0, PS_CLI_INT, &num_sparse, "N", "sparse features (tables)", false, 0, 1024},
      {"opt", 0, PS_CLI_STRING, &opt_name, "NAME", "dense optimizer: sgd, adagrad, adam", false, 0,
       0},
      {"tf32", 0, PS_CLI_INT, &tf32, "0|1", "TF32 tensor-core GEMMs (default 0: plain FP32)", false,
       0, 1},
      {"json", 0, PS_CLI_STRING, &json_path, "FILE", "write results as JSON", false, 0, 0},
  };
  ps_cli cli = {"ps-gpu-bench",
                "Dense DLRM step throughput on the CUDA backend, with the cuBLAS share", NULL, opts,
                sizeof(opts) / sizeof(opts[0])};
  int first = 0, rc = ps_cli_parse(&cli, argc, argv, &first, NULL);
  if (rc == PS_CLI_HELP) return 0;
  if (rc != PS_CLI_OK) return 2;
  if (strncmp(device, "cuda", 4) != 0) {
    fprintf(stderr, "ps-gpu-bench: --device: expected cuda or cuda:N, got '%s'\n", device);
    return 2;
  }
  ps_dlrm_opt_kind kind;
  if (ps_dlrm_opt_parse(opt_name, &kind) != PS_OK) {
    fprintf(stderr, "ps-gpu-bench: --opt: unknown optimizer '%s'\n", opt_name);
    return 2;
  }
  ps_dlrm_opt opt = ps_dlrm_opt_default(kind, 0.01f);
  char *items[64];
  int nb = ps_split_list(batches, ',', items, 64), bs[64];
  if (nb <= 0) {
    fprintf(stderr, "ps-gpu-bench: --batch: bad list '%s'\n", batches);
    return 2;
  }
  for (int i = 0; i < nb; i++) {
    int64_t v;
    if (ps_parse_i64(items[i], &v) != 0 || v < 1 || v > (1 << 20)) {
      fprintf(stderr, "ps-gpu-bench: --batch: bad size '%s'\n", items[i]);
      free(items[0]);
      return 2;
    }
    bs[i] = (int)v;
  }
  free(items[0]);
  if (!ps_cuda_available()) {
    fprintf(stderr,
            "ps-gpu-bench: no usable CUDA device (cudaGetDeviceCount failed or found none)\n");
    return 77;
  }
  ps_kern *k = NULL;
  ps_status st = ps_kern_create(device, 0, &k);
  if (st != PS_OK) {
    fprintf(stderr, "ps-gpu-bench: --device %s: %s\n", device, ps_status_str(st));
    return 1;
  }
  if (tf32 && ps_kern_cuda_set_tf32(k, true) != PS_OK) return 1;
  char desc[160] = "";
  ps_cuda_device_describe(ps_kern_cuda_device(k), desc, sizeof desc);
  json_t *root = json_object(), *res = json_array();
  json_object_set_new(root, "device", json_string(desc));
  json_object_set_new(root, "mlp_bot", json_string(mlp_bot));
  json_object_set_new(root, "mlp_top", json_string(mlp_top));
  json_object_set_new(root, "emb_dim", json_integer(emb_dim));
  json_object_set_new(root, "num_sparse", json_integer(num_sparse));
  json_object_set_new(root, "optimizer", json_string(opt_name));
  json_object_set_new(root, "tf32", json_boolean(tf32));
  printf("ps-gpu-bench: %s; bot %s, top %s, dim %d, %d tables, opt %s, %s GEMMs\n", desc, mlp_bot,
         mlp_top, emb_dim, num_sparse, opt_name, tf32 ? "TF32" : "FP32");
  int ret = 0;
  for (int i = 0; i < nb && ret == 0; i++) {
    ps_dlrm_config cfg;
    ps_dlrm_config_default(&cfg);
    cfg.mlp_bot = mlp_bot, cfg.mlp_top = mlp_top, cfg.emb_dim = emb_dim;
    cfg.num_sparse = num_sparse, cfg.max_batch = bs[i];
    ps_dlrm *m = NULL;
    synth s;
    if ((st = ps_dlrm_create(k, &cfg, &m)) != PS_OK ||
        synth_make(&s, bs[i], num_sparse, emb_dim, ps_dlrm_num_dense(m), 42) != 0) {
      fprintf(stderr, "ps-gpu-bench: batch %d: %s\n", bs[i],
              st != PS_OK ? ps_status_str(st) : "out of memory");
      ret = 1;
      if (st == PS_OK) synth_free(&s);
      ps_dlrm_destroy(&m);
      break;
    }
    for (int w = 0; w < warmup && st == PS_OK; w++) st = one_step(m, &s, &opt, true);
    double ms_train = 0, ms_dense = 0;
    double sps_train = st == PS_OK ? timed(k, m, &s, &opt, true, seconds, &ms_train) : -1;
    double sps_dense = sps_train > 0 ? timed(k, m, &s, &opt, false, seconds, &ms_dense) : -1;
    double gemm_ms = 0, share = 0, wall_ms = 0;
    long calls = 0;
    if (sps_dense > 0) {
      ps_kern_sync(k);
      ps_kern_cuda_gemm_timing(k, true);
      uint64_t t0 = ps_now_ns();
      for (int j = 0; j < gemm_steps && st == PS_OK; j++) st = one_step(m, &s, &opt, false);
      if (st == PS_OK) st = ps_kern_cuda_gemm_time(k, &gemm_ms, &calls); /* syncs */
      wall_ms = (double)(ps_now_ns() - t0) * 1e-6;
      ps_kern_cuda_gemm_timing(k, false);
      share = wall_ms > 0 ? gemm_ms / wall_ms : 0;
    }
    if (sps_train < 0 || sps_dense < 0 || st != PS_OK) {
      ret = 1;
    } else {
      double gflops = ps_dlrm_flops_per_sample(m) * sps_dense * 1e-9;
      printf(
          "batch %6d: train %11.0f samples/s (%7.3f ms/step) | dense %11.0f samples/s (%7.3f "
          "ms/step, %.0f GFLOP/s) | cuBLAS %.1f%% (%.3f of %.3f ms/step, %ld GEMMs/step)\n",
          bs[i], sps_train, ms_train, sps_dense, ms_dense, gflops, 100.0 * share,
          gemm_ms / gemm_steps, wall_ms / gemm_steps, calls / gemm_steps);
      json_t *r = json_object();
      json_object_set_new(r, "batch", json_integer(bs[i]));
      json_object_set_new(r, "train_samples_per_s", json_real(sps_train));
      json_object_set_new(r, "train_ms_per_step", json_real(ms_train));
      json_object_set_new(r, "dense_samples_per_s", json_real(sps_dense));
      json_object_set_new(r, "dense_ms_per_step", json_real(ms_dense));
      json_object_set_new(r, "gemm_gflops_effective", json_real(gflops));
      json_object_set_new(r, "cublas_ms_per_step", json_real(gemm_ms / gemm_steps));
      json_object_set_new(r, "cublas_share", json_real(share));
      json_object_set_new(r, "gemms_per_step", json_integer(calls / gemm_steps));
      json_array_append_new(res, r);
    }
    ps_dlrm_destroy(&m);
    synth_free(&s);
  }
  json_object_set_new(root, "results", res);
  if (json_path && ret == 0 &&
      json_dump_file(root, json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
    fprintf(stderr, "ps-gpu-bench: cannot write %s\n", json_path);
    ret = 1;
  }
  json_decref(root);
  ps_kern_destroy(&k);
  return ret;
}
