/* ps_kern_cpu: the CPU backend of ps_kernels.h — OpenBLAS sgemm plus OpenMP C loops.
 *
 * This file is the backend itself (context, memory, the vtable, creation) with its small
 * kernels: GEMM, bias + activation, the loss and the optimizers. The feature interaction,
 * embedding-bag pooling and the DCNv2 cross layer have files of their own
 * (ps_kern_cpu_interact.c, ps_kern_cpu_pool.c, ps_kern_cpu_cross.c); ps_kern_cpu_int.h is what
 * they share.
 *
 * Design decisions:
 * - GEMM goes to OpenBLAS's OpenMP build, so its threads and ours come from one OpenMP pool
 *   and do not oversubscribe the cores (the pthread build fights OpenMP: measured 28k vs 18k
 *   samples/s with torch, see issue 6). The thread count is set once at creation, for both.
 * - Every loop uses a static schedule over contiguous row ranges, and reductions go through
 *   per-thread partials summed in a fixed order, so results are deterministic for a given
 *   thread count.
 * - Scratch (interaction buffers, bias partials, thin-GEMM copies) is owned by the backend and
 *   grows on demand, so a steady-state step allocates nothing. A backend instance is used by
 *   one thread at a time (like a stream).
 * - Small loops run on one thread (the `if` clauses): forking costs more than they do.
 * - Debian's OpenBLAS is a DYNAMIC_ARCH build that picks its kernels from the CPU model. On a
 *   CPU it does not know (this VM reports "Intel(R) Xeon(R) Processor": Sapphire Rapids-class
 *   with AVX-512) it falls back to Prescott (SSE3) kernels, 5-6x slower (measured 35 vs 230
 *   GFLOP/s for 2048x512x367 on 2 threads). blas_core_fixup() re-selects the core by the CPU's
 *   features, unless the user chose one with OPENBLAS_CORETYPE. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <immintrin.h>

#include "ps_kern_cpu_int.h"
#include "ps_log.h"

/* OpenBLAS DYNAMIC_ARCH internals (exported by Debian's build); weak, so that a static or
 * single-arch OpenBLAS without them still links and simply skips the fix-up. */
extern char *openblas_get_corename(void);
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static const char *blas_core_wanted(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return NULL;
}

static void blas_core_fixup(void) {
  const char *core = openblas_get_corename();
  const char *want = blas_core_wanted();
  if (getenv("OPENBLAS_CORETYPE") || !want || !core || !gotoblas_dynamic_init || !gotoblas_dynamic_quit)
    return;
  /* Only upgrade from kernels older than the CPU's: a recognised modern core stays. */
  static const char *modern[] = {"skylakex", "cooperlake", "sapphirerapids", "haswell", "zen"};
  char lc[32] = {0};
  for (size_t i = 0; i + 1 < sizeof(lc) && core[i]; i++) lc[i] = (char)(core[i] | 0x20);
  for (size_t i = 0; i < sizeof(modern) / sizeof(modern[0]); i++) {
    if (strcmp(lc, modern[i]) == 0) {
      if (strcmp(want, "Haswell") == 0 || i < 3) return; /* already AVX-512, or as good as wanted */
    }
  }
  char old[32];
  snprintf(old, sizeof(old), "%s", core);
  setenv("OPENBLAS_CORETYPE", want, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  PS_INFO("OpenBLAS had chosen %s kernels for this CPU; switched to %s (set OPENBLAS_CORETYPE to override)",
          old, openblas_get_corename());
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

int ps_kern_cpu_have_avx512(void) {
  static int v = -1; /* set by ps_kern_cpu_create before any kernel runs */
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return v;
}

/* ---- memory ---- */

static ps_status cpu_alloc(ps_kern *k, size_t bytes, void **out) {
  (void)k;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes) return PS_ERR_NOMEM;
  void *p = aligned_alloc(64, rounded);
  if (!p) return PS_ERR_NOMEM;
  *out = p;
  return PS_OK;
}
static void cpu_free(ps_kern *k, void *p) {
  (void)k;
  free(p);
}
static ps_status cpu_memset0(ps_kern *k, void *dst, size_t bytes) {
  (void)k;
  memset(dst, 0, bytes);
  return PS_OK;
}
static ps_status cpu_memcpy(ps_kern *k, void *dst, const void *src, size_t bytes) {
  (void)k;
  memcpy(dst, src, bytes);
  return PS_OK;
}
static void cpu_destroy(ps_kern *k) {
  ps_kern_cpu_bf16_free(CTX(k)->bf16);
  free(CTX(k)->scratch);
  free(k->ctx);
  free(k);
}

/* ---- GEMM ---- */

/* Thin GEMMs that OpenBLAS handles poorly (its blocking assumes all three sizes are large):
 * DLRM's first layer has K = 13 in the forward (C = X W^T) and N = 13 in the weight gradient
 * (C = dZ^T X). Measured at batch 2048 on 2 threads: 0.73 / 0.98 ms in OpenBLAS. Both loops
 * below run over a contiguous row of 512 floats, so they vectorize; sums run over k in order. */
#define THIN 16

/* C[m, n] = alpha * A[m, kk] * B[n, kk]^T + beta * C, kk <= THIN */
static ps_status gemm_nt_small_k(ps_kern *k, int m, int n, int kk, float alpha, const float *a,
                                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  float *bt = scratch_get(k, (size_t)kk * n * sizeof(float));
  if (!bt) return PS_ERR_NOMEM;
  for (int j = 0; j < n; j++)
    for (int p = 0; p < kk; p++) bt[(size_t)p * n + j] = b[(size_t)j * ldb + p];
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)m * n * kk >= 8 * PAR_MIN)
  for (int i = 0; i < m; i++) {
    float *restrict ci = c + (size_t)i * ldc;
    const float *ai = a + (size_t)i * lda;
    if (beta == 0.0f) {
      for (int j = 0; j < n; j++) ci[j] = 0.0f;
    } else if (beta != 1.0f) {
      for (int j = 0; j < n; j++) ci[j] *= beta;
    }
    /* 64-column blocks held in registers across the kk products (the row's partial sums
     * never go back to memory between them) */
    int j0 = 0;
    for (; j0 + 64 <= n; j0 += 64) {
      float acc[64];
      for (int jj = 0; jj < 64; jj++) acc[jj] = ci[j0 + jj];
      for (int p = 0; p < kk; p++) {
        float s = alpha * ai[p];
        const float *restrict bp = bt + (size_t)p * n + j0;
        for (int jj = 0; jj < 64; jj++) acc[jj] += s * bp[jj];
      }
      for (int jj = 0; jj < 64; jj++) ci[j0 + jj] = acc[jj];
    }
    for (int p = 0; p < kk; p++) {
      float s = alpha * ai[p];
      const float *restrict bp = bt + (size_t)p * n;
      for (int j = j0; j < n; j++) ci[j] += s * bp[j];
    }
  }
  return PS_OK;
}


/* acc[j][ii] = sum_p b16[p][j] * a[p][ii] for a 16-wide column block of A: 16 accumulators in
 * registers, one broadcast-FMA per (p, j). */
__attribute__((target("avx512f"))) static void tn_tile16(const float *a, int lda, const float *b16,
                                                         int kk, float *acc_out) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
  for (int p = 0; p < kk; p++) {
    __m512 av = _mm512_loadu_ps(a + (size_t)p * lda);
    const float *bj = b16 + (size_t)p * 16;
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(bj[j]), av, acc[j]);
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) _mm512_storeu_ps(acc_out + j * 16, acc[j]);
}

/* C[m, n] = alpha * A[kk, m]^T * B[kk, n] + beta * C, n <= THIN. B is copied zero-padded to
 * [kk, 16]; then for each block of 16 columns of A^T (rows of C) a 16 x 16 tile of C^T stays in
 * 16 registers over all kk products. Threads split the blocks. */
static ps_status gemm_tn_small_n(ps_kern *k, int m, int n, int kk, float alpha, const float *a,
                                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  float *bp = scratch_get(k, (size_t)kk * THIN * sizeof(float));
  if (!bp) return PS_ERR_NOMEM;
  for (int p = 0; p < kk; p++)
    for (int j = 0; j < THIN; j++) bp[(size_t)p * THIN + j] = j < n ? b[(size_t)p * ldb + j] : 0.0f;
  int T = CTX(k)->threads;
  int nblk = (m + 15) / 16;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)m * n * kk >= 8 * PAR_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int i0 = blk * 16, w = m - i0 < 16 ? m - i0 : 16;
    float acc[THIN][16];
    for (int j = 0; j < THIN; j++)
      for (int ii = 0; ii < 16; ii++) acc[j][ii] = 0.0f;
    if (w == 16 && ps_kern_cpu_have_avx512()) {
      tn_tile16(a + i0, lda, bp, kk, &acc[0][0]);
    } else {
      for (int p = 0; p < kk; p++) {
        const float *ap = a + (size_t)p * lda + i0;
        const float *bj = bp + (size_t)p * THIN;
        for (int j = 0; j < n; j++)
          for (int ii = 0; ii < w; ii++) acc[j][ii] += bj[j] * ap[ii];
      }
    }
    for (int ii = 0; ii < w; ii++)
      for (int j = 0; j < n; j++) {
        float v = alpha * acc[j][ii];
        float *cij = c + (size_t)(i0 + ii) * ldc + j;
        *cij = beta == 0.0f ? v : v + beta * *cij;
      }
  }
  return PS_OK;
}

static ps_status cpu_sgemm(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha,
                           const float *a, int lda, const float *b, int ldb, float beta, float *c,
                           int ldc) {
  if (kk == 0) {
    /* C = beta * C; with beta == 0, C is not read */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
    return PS_OK;
  }
  if (!ta && tb && kk <= THIN && n >= 64)
    return gemm_nt_small_k(k, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
  if (ta && !tb && n <= THIN && m >= 64 && kk >= 64)
    return gemm_tn_small_n(k, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
  return PS_OK;
}

/* ---- bias + activation ---- */

static ps_status cpu_bias_act_fwd(ps_kern *k, ps_kern_act act, int m, int n, const float *x,
                                  const float *bias, float *y) {
  int T = CTX(k)->threads;
  bool relu = act == PS_KERN_ACT_RELU;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)m * n >= PAR_MIN)
  for (int i = 0; i < m; i++) {
    const float *xi = x + (size_t)i * n;
    float *yi = y + (size_t)i * n;
    if (relu) {
      for (int j = 0; j < n; j++) {
        float v = xi[j] + bias[j];
        yi[j] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int j = 0; j < n; j++) yi[j] = xi[j] + bias[j];
    }
  }
  return PS_OK;
}

static ps_status cpu_bias_act_bwd(ps_kern *k, ps_kern_act act, int m, int n, const float *y,
                                  const float *dy, float *dx, float *dbias) {
  int T = CTX(k)->threads;
  if ((size_t)m * n < PAR_MIN) T = 1;
  float *part = scratch_get(k, (size_t)T * n * sizeof(float));
  if (!part) return PS_ERR_NOMEM;
  bool relu = act == PS_KERN_ACT_RELU;
  int used = 1;
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single
    used = nt;
    float *acc = part + (size_t)t * n;
    for (int j = 0; j < n; j++) acc[j] = 0.0f;
    int lo = (int)((long long)m * t / nt), hi = (int)((long long)m * (t + 1) / nt);
    for (int i = lo; i < hi; i++) {
      const float *yi = y + (size_t)i * n;
      const float *gi = dy + (size_t)i * n;
      float *xi = dx + (size_t)i * n;
      if (relu) {
        for (int j = 0; j < n; j++) {
          float g = yi[j] > 0.0f ? gi[j] : 0.0f;
          xi[j] = g;
          acc[j] += g;
        }
      } else {
        for (int j = 0; j < n; j++) {
          float g = gi[j];
          xi[j] = g;
          acc[j] += g;
        }
      }
    }
  }
  for (int j = 0; j < n; j++) {
    float s = 0.0f;
    for (int t = 0; t < used; t++) s += part[(size_t)t * n + j];
    dbias[j] = s;
  }
  return PS_OK;
}

/* ---- sigmoid + BCE ---- */

static inline float sigmoidf_stable(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
  float e = expf(z);
  return e / (1.0f + e);
}

static ps_status cpu_bce_fwd(ps_kern *k, int n, const float *logits, const float *labels,
                             float *probs, float *loss) {
  (void)k;
  double acc = 0.0;
  for (int i = 0; i < n; i++) {
    float z = logits[i];
    if (probs) probs[i] = sigmoidf_stable(z);
    if (labels) acc += (double)fmaxf(z, 0.0f) - (double)z * labels[i] + log1p(exp(-fabs((double)z)));
  }
  if (labels) *loss = (float)(acc / n);
  return PS_OK;
}

static ps_status cpu_bce_bwd(ps_kern *k, int n, const float *logits, const float *labels,
                             float scale, float *dlogits) {
  (void)k;
  for (int i = 0; i < n; i++) dlogits[i] = scale * (sigmoidf_stable(logits[i]) - labels[i]);
  return PS_OK;
}

/* ---- elementwise / optimizers ---- */

static ps_status cpu_scale(ps_kern *k, size_t n, float alpha, float *x) {
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if (n >= 4 * PAR_MIN)
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
  return PS_OK;
}

static ps_status cpu_sgd(ps_kern *k, size_t n, float *w, const float *g, float lr, float wd) {
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if (n >= 4 * PAR_MIN)
  for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
  return PS_OK;
}

static ps_status cpu_adagrad(ps_kern *k, size_t n, float *w, const float *g, float *sum,
                             float clr, float eps, float wd) {
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if (n >= 4 * PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] + wd * w[i];
    sum[i] += gi * gi;
    w[i] -= clr * gi / (sqrtf(sum[i]) + eps);
  }
  return PS_OK;
}

static ps_status cpu_adam(ps_kern *k, size_t n, float *w, const float *g, float *m, float *v,
                          float lr, float b1, float b2, float eps, float wd, int64_t step) {
  int T = CTX(k)->threads;
  /* Bias corrections in double, as torch computes them on Python floats. */
  float step_size = (float)(lr / (1.0 - pow(b1, (double)step)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)step));
#pragma omp parallel for schedule(static) num_threads(T) if (n >= 4 * PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
  }
  return PS_OK;
}

static const ps_kern_i cpu_iface = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .to_device = cpu_memcpy,
    .to_host = cpu_memcpy,
    .copy = cpu_memcpy,
    .sync = NULL,
    .destroy = cpu_destroy,
    .sgemm = cpu_sgemm,
    .gemm_bf16 = ps_kern_cpu_gemm_bf16,
    .bias_act_fwd = cpu_bias_act_fwd,
    .bias_act_bwd = cpu_bias_act_bwd,
    .interact_fwd = ps_kern_cpu_interact_fwd,
    .interact_bwd = ps_kern_cpu_interact_bwd,
    .pool_fwd = ps_kern_cpu_pool_fwd,
    .pool_bwd = ps_kern_cpu_pool_bwd,
    .bce_fwd = cpu_bce_fwd,
    .bce_bwd = cpu_bce_bwd,
    .scale = cpu_scale,
    .sgd = cpu_sgd,
    .adagrad = cpu_adagrad,
    .adam = cpu_adam,
    .copy2d = ps_kern_cpu_copy2d,
    .cross_fwd = ps_kern_cpu_cross_fwd,
    .cross_bwd = ps_kern_cpu_cross_bwd,
};

ps_status ps_kern_cpu_create(int threads, ps_kern **out) {
  if (!out || threads < 0 || threads > 4096) return PS_ERR_INVALID;
  *out = NULL;
  ps_kern *k = calloc(1, sizeof(*k));
  cpu_ctx *c = calloc(1, sizeof(*c));
  if (!k || !c) {
    free(k);
    free(c);
    return PS_ERR_NOMEM;
  }
  pthread_once(&blas_once, blas_core_fixup);
  (void)ps_kern_cpu_have_avx512(); /* settle the flag before any parallel region reads it */
  k->bf16 = ps_kern_cpu_have_bf16() != 0;
  c->threads = threads > 0 ? threads : omp_get_max_threads();
  openblas_set_num_threads(c->threads);
  k->iface = &cpu_iface;
  k->ctx = c;
  k->name = "cpu";
  k->host_memory = true;
  *out = k;
  return PS_OK;
}
