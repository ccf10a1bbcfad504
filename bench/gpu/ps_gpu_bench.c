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
 * the most upload-heavy case, the same as bench/dense/ps-dense-bench's (bench/common/
 * ps_bench_dense.h makes it for both). Compare with bench/gpu/torch_dense_gpu.py on the same
 * GPU. --pinned 0 downloads the row gradients into pageable memory (through the staging ring
 * and a host memcpy), as ps-worker did before session 10. Exit status 77 where no GPU is usable. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_dense.h"
#include "ps_cli.h"
#include "ps_dlrm.h"
#include "ps_kernels.h"
#include "ps_kernels_cuda.h"
#include "ps_log.h"
#include "ps_time.h"

/* Runs steps for at least `seconds` (and 3 steps); returns samples/s, or < 0 on failure. */
static double timed(ps_kern *k, ps_dlrm *m, ps_bench_synth *s, const ps_dlrm_opt *opt,
                    bool rowgrads, double seconds, double *ms_per_step) {
  ps_status st = ps_kern_sync(k);
  uint64_t t0 = ps_now_ns(), t1 = t0;
  long steps = 0;
  while (st == PS_OK && (t1 - t0 < (uint64_t)(seconds * 1e9) || steps < 3)) {
    st = ps_bench_synth_step(m, s, opt, rowgrads);
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
  const char *device = "cuda", *batches = "2048,16384,65536", *json_path = NULL;
  ps_bench_model mb = PS_BENCH_KAGGLE_MODEL;
  int warmup = 5, tf32 = 0, gemm_steps = 20, pinned = 1;
  double seconds = 2.0;
  const ps_cli_opt opts[] = {
      {"device", 0, PS_CLI_STRING, &device, "NAME", "backend: cuda or cuda:N", false, 0, 0},
      PS_BENCH_BATCH_OPT(&batches),
      {"seconds", 's', PS_CLI_DOUBLE, &seconds, "S", "timed seconds per batch size and mode", false,
       0.01, 3600},
      PS_BENCH_WARMUP_OPT(&warmup),
      {"gemm-steps", 0, PS_CLI_INT, &gemm_steps, "N", "steps for the cuBLAS share", false, 1, 1000},
      PS_BENCH_MODEL_OPTS(&mb),
      {"tf32", 0, PS_CLI_INT, &tf32, "0|1", "TF32 tensor-core GEMMs (default 0: plain FP32)", false,
       0, 1},
      {"pinned", 0, PS_CLI_INT, &pinned, "0|1",
       "row gradients into page-locked memory, as ps-worker (0: pageable, staged)", false, 0, 1},
      PS_BENCH_JSON_OPT(&json_path),
  };
  ps_cli cli = {"ps-gpu-bench",
                "Dense DLRM step throughput on the CUDA backend, with the cuBLAS share", NULL, opts,
                sizeof(opts) / sizeof(opts[0])};
  int first = 0, rc = ps_cli_run(&cli, argc, argv, &first);
  if (rc >= 0) return rc;
  if (strncmp(device, "cuda", 4) != 0) {
    fprintf(stderr, "ps-gpu-bench: --device: expected cuda or cuda:N, got '%s'\n", device);
    return 2;
  }
  ps_dlrm_opt opt;
  int bs[PS_BENCH_MAX_BATCHES];
  int nb = ps_bench_dense_args("ps-gpu-bench", mb.opt_name, batches, &opt, bs);
  if (nb < 0) return 2;
  if (!ps_cuda_available()) {
    fprintf(stderr,
            "ps-gpu-bench: no usable CUDA device (cudaGetDeviceCount failed or found none)\n");
    return 77;
  }
  ps_kern *k = NULL;
  ps_error err;
  ps_status st = ps_kern_create(device, 0, &k, &err);
  if (st != PS_OK) {
    fprintf(stderr, "ps-gpu-bench: --device %s: %s\n", device, err.msg);
    return 1;
  }
  if (tf32 && ps_kern_cuda_set_tf32(k, true) != PS_OK) return 1;
  char desc[160] = "";
  ps_cuda_device_describe(ps_kern_cuda_device(k), desc, sizeof desc);
  json_t *root = json_object(), *res = json_array();
  json_object_set_new(root, "device", json_string(desc));
  ps_bench_dense_json_model(root, &mb);
  json_object_set_new(root, "tf32", json_boolean(tf32));
  json_object_set_new(root, "pinned_grads", json_boolean(pinned));
  printf("ps-gpu-bench: %s; bot %s, top %s, dim %d, %d tables, opt %s, %s GEMMs\n", desc,
         mb.mlp_bot, mb.mlp_top, mb.emb_dim, mb.num_sparse, mb.opt_name, tf32 ? "TF32" : "FP32");
  int ret = 0;
  for (int i = 0; i < nb && ret == 0; i++) {
    ps_dlrm *m;
    ps_bench_synth s;
    if (ps_bench_dense_open("ps-gpu-bench", k, &mb, bs[i], pinned, warmup, &opt, &m, &s) != 0) {
      ret = 1;
      break;
    }
    double ms_train = 0, ms_dense = 0;
    double sps_train = st == PS_OK ? timed(k, m, &s, &opt, true, seconds, &ms_train) : -1;
    double sps_dense = sps_train > 0 ? timed(k, m, &s, &opt, false, seconds, &ms_dense) : -1;
    double gemm_ms = 0, share = 0, wall_ms = 0;
    long calls = 0;
    if (sps_dense > 0) {
      ps_kern_sync(k);
      ps_kern_cuda_gemm_timing(k, true);
      uint64_t t0 = ps_now_ns();
      for (int j = 0; j < gemm_steps && st == PS_OK; j++)
        st = ps_bench_synth_step(m, &s, &opt, false);
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
    ps_bench_synth_free(&s);
  }
  ret = ps_bench_dense_json_finish("ps-gpu-bench", root, res, json_path, ret);
  ps_kern_destroy(&k);
  return ret;
}
