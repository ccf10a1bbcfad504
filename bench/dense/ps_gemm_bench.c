/* ps-gemm-bench: the GEMMs of ps-worker's dense step, FP32 against bf16, so that the bf16
 * library is chosen by measurement (bench/RESULTS-dense.md).
 *
 * For an MLP shape (--mlp-bot, --mlp-top, --batch) it lists every GEMM one training step
 * runs (per linear layer: forward X W^T, weight gradient dZ^T X, input gradient dZ W; the
 * first layer has no input gradient) and times, in interleaved rounds (A B C, A B C, ...):
 *   fp32  ps_kern_sgemm on the CPU backend (OpenBLAS sgemm + the thin-GEMM kernels);
 *   dnnl  ps_kern_gemm(PS_KERN_BF16): oneDNN's bf16 matmul, with the FP32 -> bf16 rounding;
 *   own   a plain AVX512_BF16 kernel (vdpbf16ps, 8 x 32 register tile) written here, with the
 *         same rounding, as the do-it-yourself candidate.
 * Prints per candidate the median over rounds of one whole step's GEMM time, and JSON. */
#include <immintrin.h>
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_dense.h"
#include "ps_cli.h"
#include "ps_dlrm.h"
#include "ps_kernels.h"
#include "ps_time.h"

typedef struct gemm_shape {
  bool ta, tb;
  int m, n, kk;
} gemm_shape;

/* ---- the own-kernel candidate ---- */

static inline uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* C[m, n] = op(A) op(B), bf16 inputs: A rounded to [m, kp] (kp = kk rounded up to even, zero
 * padded), B to pairs [kp / 2][n][2], the layout vdpbf16ps multiplies. */
__attribute__((target("avx512f,avx512bf16"))) static void own_gemm(int T, const gemm_shape *s,
                                                                    const float *a,
                                                                    const float *b, float *c,
                                                                    uint16_t *a16,
                                                                    uint16_t *b16) {
  int m = s->m, n = s->n, kk = s->kk, kp = (kk + 1) & ~1, np = (n + 31) & ~31;
#pragma omp parallel for num_threads(T) schedule(static)
  for (int i = 0; i < m; i++)
    for (int p = 0; p < kp; p++)
      a16[(size_t)i * kp + p] =
          p < kk ? bf16_of(s->ta ? a[(size_t)p * m + i] : a[(size_t)i * kk + p]) : 0;
#pragma omp parallel for num_threads(T) schedule(static)
  for (int p = 0; p < kp; p++)
    for (int j = 0; j < np; j++)
      b16[((size_t)(p / 2) * np + j) * 2 + (p & 1)] =
          p < kk && j < n ? bf16_of(s->tb ? b[(size_t)j * kk + p] : b[(size_t)p * n + j]) : 0;
  int mb = (m + 7) / 8;
#pragma omp parallel for num_threads(T) schedule(static)
  for (int ib = 0; ib < mb; ib++) {
    int i0 = ib * 8, ih = m - i0 < 8 ? m - i0 : 8;
    for (int j0 = 0; j0 < np; j0 += 32) {
      __m512 acc[8][2];
      for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (int p2 = 0; p2 < kp / 2; p2++) {
        const uint16_t *bp = b16 + ((size_t)p2 * np + j0) * 2;
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 32);
        for (int r = 0; r < ih; r++) {
          uint32_t pair;
          memcpy(&pair, a16 + (size_t)(i0 + r) * kp + 2 * p2, 4);
          __m512bh av = (__m512bh)_mm512_set1_epi32((int)pair);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
      }
      for (int r = 0; r < ih; r++) {
        float tmp[32];
        _mm512_storeu_ps(tmp, acc[r][0]);
        _mm512_storeu_ps(tmp + 16, acc[r][1]);
        int w = n - j0 < 32 ? n - j0 : 32;
        memcpy(c + (size_t)(i0 + r) * n + j0, tmp, (size_t)w * sizeof(float));
      }
    }
  }
}

/* ---- shapes ---- */

static int step_shapes(const char *bot, const char *top, int dim, int S, int B, gemm_shape *out,
                       int max) {
  int bd[PS_DLRM_MAX_LAYERS], td[PS_DLRM_MAX_LAYERS + 1];
  int nb = ps_dlrm_parse_mlp(bot, bd, PS_DLRM_MAX_LAYERS);
  int nt = ps_dlrm_parse_mlp(top, td + 1, PS_DLRM_MAX_LAYERS);
  if (nb < 2 || nt < 1) return -1;
  td[0] = ps_kern_interact_width(S, dim);
  int cnt = 0;
  for (int part = 0; part < 2; part++) {
    const int *d = part ? td : bd;
    int nl = part ? nt : nb - 1;
    for (int l = 0; l < nl && cnt + 3 <= max; l++) {
      int in = d[l], o = d[l + 1];
      out[cnt++] = (gemm_shape){false, true, B, o, in};  /* Y = X W^T */
      out[cnt++] = (gemm_shape){true, false, o, in, B};  /* dW = dZ^T X */
      if (part || l) out[cnt++] = (gemm_shape){false, false, B, in, o}; /* dX = dZ W */
    }
  }
  return cnt;
}

int main(int argc, char **argv) {
  const char *bot = "13-512-256-64-16", *top = "512-256-1", *json_path = NULL;
  int threads = 2, batch = 2048, rounds = 7, reps = 5;
  const ps_cli_opt opts[] = {
      {"mlp-bot", 0, PS_CLI_STRING, &bot, "W-W-..", "bottom MLP widths, input first", false, 0, 0},
      {"mlp-top", 0, PS_CLI_STRING, &top, "W-..-1", "top MLP output widths (input: the interaction's)", false, 0, 0},
      {"batch", 'b', PS_CLI_INT, &batch, "B", "batch size (rows of the activations)", false, 1, 1 << 20},
      {"threads", 't', PS_CLI_INT, &threads, "T", "threads for every candidate", false, 1, 1024},
      {"rounds", 0, PS_CLI_INT, &rounds, "N", "interleaved rounds (the median is reported)", false, 1, 1000},
      {"reps", 0, PS_CLI_INT, &reps, "N", "steps' GEMMs per candidate per round", false, 1, 100000},
      {"json", 0, PS_CLI_STRING, &json_path, "FILE", "write the results as JSON here", false, 0, 0},
  };
  ps_cli cli = {"ps-gemm-bench",
                "One dense step's GEMMs: OpenBLAS FP32 vs oneDNN bf16 vs an own AVX512_BF16 kernel",
                NULL, opts, sizeof(opts) / sizeof(opts[0])};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  gemm_shape sh[3 * 2 * PS_DLRM_MAX_LAYERS];
  int ns = step_shapes(bot, top, 16, 26, batch, sh, (int)(sizeof(sh) / sizeof(sh[0])));
  if (ns < 0) {
    fprintf(stderr, "ps-gemm-bench: bad --mlp-bot or --mlp-top\n");
    return 2;
  }
  ps_kern *k = NULL;
  if (ps_kern_cpu_create(threads, &k) != PS_OK) return 1;
  bool bf16 = ps_kern_has_bf16(k);
  if (!bf16) printf("this CPU has no AVX512_BF16: timing FP32 only\n");
  size_t big = 0;
  for (int i = 0; i < ns; i++) {
    size_t a = (size_t)sh[i].m * sh[i].kk, b = (size_t)(sh[i].kk + 1) * (sh[i].n + 32),
           c = (size_t)sh[i].m * sh[i].n;
    big = a > big ? a : big, big = b > big ? b : big, big = c > big ? c : big;
  }
  big += 64;
  float *A = malloc(big * 4), *Bm = malloc(big * 4), *C = malloc(big * 4);
  uint16_t *a16 = malloc(big * 4), *b16 = malloc(big * 4);
  if (!A || !Bm || !C || !a16 || !b16) return 1;
  for (size_t i = 0; i < big; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < big; i++) Bm[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  const char *names[3] = {"fp32_openblas", "bf16_onednn", "bf16_own"};
  int nc = bf16 ? 3 : 1;
  double *t[3];
  for (int c = 0; c < 3; c++) t[c] = calloc((size_t)rounds, sizeof(double));
  for (int r = -1; r < rounds; r++) { /* round -1 warms up (creates the primitives) */
    for (int c = 0; c < nc; c++) {
      uint64_t t0 = ps_now_ns();
      for (int rep = 0; rep < reps; rep++)
        for (int i = 0; i < ns; i++) {
          const gemm_shape *s = &sh[i];
          int lda = s->ta ? s->m : s->kk, ldb = s->tb ? s->kk : s->n;
          if (c == 2) {
            own_gemm(threads, s, A, Bm, C, a16, b16);
          } else if (ps_kern_gemm(k, c ? PS_KERN_BF16 : PS_KERN_FP32, s->ta, s->tb, s->m, s->n,
                                  s->kk, 1.0f, A, lda, Bm, ldb, 0.0f, C, s->n) != PS_OK) {
            fprintf(stderr, "ps-gemm-bench: %s failed\n", names[c]);
            return 1;
          }
        }
      if (r >= 0) t[c][r] = (double)(ps_now_ns() - t0) / 1e6 / (double)reps;
    }
  }
  double flops = 0;
  for (int i = 0; i < ns; i++) flops += 2.0 * sh[i].m * sh[i].n * sh[i].kk;
  printf("mlp-bot %s mlp-top %s batch %d threads %d: %d GEMMs, %.2f GFLOP per step\n", bot,
         top, batch, threads, ns, flops / 1e9);
  json_t *js = json_pack("{s:s,s:s,s:i,s:i,s:i,s:f}", "mlp_bot", bot, "mlp_top", top, "batch",
                         batch, "threads", threads, "rounds", rounds, "gflop",
                         flops / 1e9);
  double med[3];
  for (int c = 0; c < nc; c++) {
    ps_bench_sort(t[c], (size_t)rounds);
    med[c] = t[c][rounds / 2];
    printf("  %-14s median %8.3f ms/step (min %8.3f)  %7.1f GFLOP/s  %5.2fx fp32\n", names[c],
           med[c], t[c][0], flops / med[c] / 1e6, med[0] / med[c]);
    json_object_set_new(js, names[c], json_real(med[c]));
  }
  if (json_path && json_dump_file(js, json_path, JSON_INDENT(2)) != 0) return 1;
  json_decref(js);
  ps_kern_destroy(&k);
  return 0;
}
