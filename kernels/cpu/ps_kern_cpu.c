/* ps_kern_cpu: the CPU backend of ps_kernels.h — OpenBLAS sgemm plus OpenMP C loops.
 *
 * Design decisions:
 * - GEMM goes to OpenBLAS's OpenMP build, so its threads and ours come from one OpenMP pool
 *   and do not oversubscribe the cores (the pthread build fights OpenMP: measured 28k vs 18k
 *   samples/s with torch, see issue 6). The thread count is set once at creation, for both.
 * - Every loop uses a static schedule over contiguous row ranges, and reductions go through
 *   per-thread partials summed in a fixed order, so results are deterministic for a given
 *   thread count.
 * - Pooling backward partitions the gradient rows among threads (each scans all entries):
 *   no atomics, no races, and each gradient row is summed in entry order.
 * - Scratch (interaction buffers, bias partials) is owned by the backend and grows on demand, so a steady-state step
 *   allocates nothing. A backend instance is used by one thread at a time (like a stream).
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

#include "ps_kernels.h"
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

typedef struct cpu_ctx {
  int threads;
  void *scratch;
  size_t scratch_bytes;
} cpu_ctx;

/* Work below this many elements runs on the calling thread. */
#define PAR_MIN 16384

static inline cpu_ctx *CTX(ps_kern *k) { return (cpu_ctx *)k->ctx; }

static void *scratch_get(ps_kern *k, size_t bytes) {
  cpu_ctx *c = CTX(k);
  if (bytes > c->scratch_bytes) {
    size_t want = bytes + bytes / 2 + 64;
    void *p = realloc(c->scratch, want);
    if (!p) return NULL;
    c->scratch = p;
    c->scratch_bytes = want;
  }
  return c->scratch;
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

static int have_avx512(void);

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
    if (w == 16 && have_avx512()) {
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

/* ---- dot interaction ---- */

/* Per sample, T = [F, dim] stacks the bottom output and the pooled embeddings. The dots are
 * computed as rows of the Gram matrix T T^T with the inner loop running over j (a column of
 * T^T, padded to 16), not over d: each z[j] accumulates its own products in d order, so the
 * loop vectorizes without reassociating any sum (a dot-product loop over d would need
 * -ffast-math to vectorize). Backward is dT = (G + G^T) T with G the strictly-lower gradient
 * matrix, vectorized over d. Measured at batch 2048 on 2 threads: fwd + bwd from 6.3 ms (naive
 * per-pair dots) to ~1 ms. */
static inline void gather_t(float *restrict t, const float *restrict bb, const float *restrict eb,
                            int S, int D) {
  memcpy(t, bb, (size_t)D * sizeof(float));
  memcpy(t + D, eb, (size_t)S * D * sizeof(float));
}

/* dout's strictly-lower triangle gz (row-major, i > j) as the symmetric F x F matrix
 * G + G^T with a zero diagonal, the form both backward kernels multiply by T. */
static inline void grad_square(float *restrict g, const float *restrict gz, int F) {
  for (int i = 0; i < F; i++) g[(size_t)i * F + i] = 0.0f;
  for (int i = 1; i < F; i++)
    for (int j = 0; j < i; j++) {
      float v = *gz++;
      g[(size_t)i * F + j] = v;
      g[(size_t)j * F + i] = v;
    }
}

/* One sample, any dim: o = [bb, strictly-lower dots of T]. ws holds F*D + D*Fp + Fp floats
 * (T, T^T padded to Fp columns, one row of dots). */
static inline void inter_fwd_any(const float *bb, const float *eb, int S, int D, float *o,
                                 float *ws, int Fp) {
  int F = S + 1;
  float *restrict t = ws;
  float *restrict tt = t + (size_t)F * D;
  float *restrict z = tt + (size_t)D * Fp;
  gather_t(t, bb, eb, S, D);
  for (int d = 0; d < D; d++) {
    for (int f = 0; f < F; f++) tt[(size_t)d * Fp + f] = t[(size_t)f * D + d];
    for (int f = F; f < Fp; f++) tt[(size_t)d * Fp + f] = 0.0f;
  }
  memcpy(o, bb, (size_t)D * sizeof(float));
  float *oz = o + D;
  for (int i = 1; i < F; i++) {
    int jn = (i + 15) & ~15;
    for (int j = 0; j < jn; j++) z[j] = 0.0f;
    for (int d = 0; d < D; d++) {
      float a = t[(size_t)i * D + d];
      const float *restrict col = tt + (size_t)d * Fp;
      for (int j = 0; j < jn; j++) z[j] += a * col[j];
    }
    memcpy(oz, z, (size_t)i * sizeof(float));
    oz += i;
  }
}

/* One sample, any dim: db = gb[0:D] + row 0 of (G + G^T) T, de = its rows 1..S. ws holds
 * F*D + F*F + D floats (T, G + G^T, one accumulator row). */
static inline void inter_bwd_any(const float *bb, const float *eb, const float *gb, int S, int D,
                                 float *db, float *de, float *ws) {
  int F = S + 1;
  float *restrict t = ws;
  float *restrict g = t + (size_t)F * D;
  float *restrict acc = g + (size_t)F * F;
  gather_t(t, bb, eb, S, D);
  grad_square(g, gb + D, F);
  for (int i = 0; i < F; i++) {
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    const float *gi = g + (size_t)i * F;
    for (int j = 0; j < F; j++) {
      float w = gi[j];
      const float *restrict tj = t + (size_t)j * D;
      for (int d = 0; d < D; d++) acc[d] += w * tj[d];
    }
    if (i == 0) {
      for (int d = 0; d < D; d++) db[d] = gb[d] + acc[d];
    } else {
      memcpy(de + (size_t)(i - 1) * D, acc, (size_t)D * sizeof(float));
    }
  }
}

/* dim == 16 (DLRM's usual width): one AVX-512 register per vector, 4 independent FMA chains
 * (4 rows of the Gram matrix at a time) to hide FMA latency. Same sums as the generic code,
 * in the same d order, but fused (FMA). */
static inline const float *trow(const float *bb, const float *eb, int f) {
  return f == 0 ? bb : eb + (size_t)(f - 1) * 16;
}

__attribute__((target("avx512f"))) static void inter_fwd16(const float *bb, const float *eb, int S,
                                                           float *o, float *tt, float *zb, int Fp) {
  int F = S + 1;
  for (int f = 0; f < F; f++) {
    const float *src = trow(bb, eb, f);
    for (int d = 0; d < 16; d++) tt[(size_t)d * Fp + f] = src[d];
  }
  for (int d = 0; d < 16; d++)
    for (int f = F; f < Fp; f++) tt[(size_t)d * Fp + f] = 0.0f;
  memcpy(o, bb, 16 * sizeof(float));
  float *oz = o + 16;
  for (int i0 = 1; i0 < F; i0 += 4) {
    int ni = F - i0 < 4 ? F - i0 : 4;
    const float *r0 = trow(bb, eb, i0);
    const float *r1 = trow(bb, eb, ni > 1 ? i0 + 1 : i0);
    const float *r2 = trow(bb, eb, ni > 2 ? i0 + 2 : i0);
    const float *r3 = trow(bb, eb, ni > 3 ? i0 + 3 : i0);
    int nblk = (i0 + ni - 1 + 15) / 16;
    for (int blk = 0; blk < nblk; blk++) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int d = 0; d < 16; d++) {
        __m512 col = _mm512_loadu_ps(tt + (size_t)d * Fp + blk * 16);
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(r0[d]), col, a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(r1[d]), col, a1);
        a2 = _mm512_fmadd_ps(_mm512_set1_ps(r2[d]), col, a2);
        a3 = _mm512_fmadd_ps(_mm512_set1_ps(r3[d]), col, a3);
      }
      _mm512_storeu_ps(zb + blk * 16, a0);
      _mm512_storeu_ps(zb + Fp + blk * 16, a1);
      _mm512_storeu_ps(zb + 2 * Fp + blk * 16, a2);
      _mm512_storeu_ps(zb + 3 * Fp + blk * 16, a3);
    }
    for (int q = 0; q < ni; q++) {
      int i = i0 + q;
      memcpy(oz, zb + (size_t)q * Fp, (size_t)i * sizeof(float));
      oz += i;
    }
  }
}

__attribute__((target("avx512f"))) static void inter_bwd16(const float *bb, const float *eb,
                                                           const float *gb, int S, float *db,
                                                           float *de, float *g) {
  int F = S + 1;
  grad_square(g, gb + 16, F);
  for (int i0 = 0; i0 < F; i0 += 4) {
    int ni = F - i0 < 4 ? F - i0 : 4;
    const float *g0 = g + (size_t)i0 * F;
    const float *g1 = g + (size_t)(ni > 1 ? i0 + 1 : i0) * F;
    const float *g2 = g + (size_t)(ni > 2 ? i0 + 2 : i0) * F;
    const float *g3 = g + (size_t)(ni > 3 ? i0 + 3 : i0) * F;
    __m512 a[4];
    a[0] = _mm512_setzero_ps(), a[1] = a[0], a[2] = a[0], a[3] = a[0];
    for (int j = 0; j < F; j++) {
      __m512 tj = _mm512_loadu_ps(trow(bb, eb, j));
      a[0] = _mm512_fmadd_ps(_mm512_set1_ps(g0[j]), tj, a[0]);
      a[1] = _mm512_fmadd_ps(_mm512_set1_ps(g1[j]), tj, a[1]);
      a[2] = _mm512_fmadd_ps(_mm512_set1_ps(g2[j]), tj, a[2]);
      a[3] = _mm512_fmadd_ps(_mm512_set1_ps(g3[j]), tj, a[3]);
    }
    for (int q = 0; q < ni; q++) {
      int i = i0 + q;
      if (i == 0)
        _mm512_storeu_ps(db, _mm512_add_ps(_mm512_loadu_ps(gb), a[0]));
      else
        _mm512_storeu_ps(de + (size_t)(i - 1) * 16, a[q]);
    }
  }
}

static int have_avx512(void) {
  static int v = -1; /* set by ps_kern_cpu_create before any kernel runs */
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return v;
}

/* The interaction, forward (out = [bottom, dots]) or backward (dbottom and demb from dout):
 * the per-sample kernels above over the batch, the dim-16 AVX-512 ones where they apply. One
 * thread below 64 samples, where a parallel region costs more than it saves; each thread has
 * `per` floats of scratch, the workspace its kernel carves up. */
static ps_status interact(ps_kern *k, bool bwd, int batch, int S, int D, const float *bottom,
                          const float *emb, const float *dout, float *out, float *dbottom,
                          float *demb) {
  int F = S + 1, W = ps_kern_interact_width(S, D), Fp = (F + 15) & ~15;
  size_t per = bwd ? (size_t)F * D + (size_t)F * F + (size_t)D
                   : (size_t)F * D + (size_t)D * Fp + 4 * (size_t)Fp;
  int T = batch < 64 ? 1 : CTX(k)->threads;
  float *scr = scratch_get(k, (size_t)T * per * sizeof(float));
  if (!scr) return PS_ERR_NOMEM;
  const bool v16 = D == 16 && have_avx512();
#pragma omp parallel for schedule(static) num_threads(T)
  for (int b = 0; b < batch; b++) {
    float *ws = scr + (size_t)omp_get_thread_num() * per;
    const float *bb = bottom + (size_t)b * D, *eb = emb + (size_t)b * S * D;
    if (!bwd) {
      if (v16)
        inter_fwd16(bb, eb, S, out + (size_t)b * W, ws, ws + (size_t)16 * Fp, Fp);
      else
        inter_fwd_any(bb, eb, S, D, out + (size_t)b * W, ws, Fp);
    } else {
      float *db = dbottom + (size_t)b * D, *de = demb + (size_t)b * S * D;
      if (v16)
        inter_bwd16(bb, eb, dout + (size_t)b * W, S, db, de, ws);
      else
        inter_bwd_any(bb, eb, dout + (size_t)b * W, S, D, db, de, ws);
    }
  }
  return PS_OK;
}

static ps_status cpu_interact_fwd(ps_kern *k, int batch, int S, int D, const float *bottom,
                                  const float *emb, float *out) {
  return interact(k, false, batch, S, D, bottom, emb, NULL, out, NULL, NULL);
}

static ps_status cpu_interact_bwd(ps_kern *k, int batch, int S, int D, const float *bottom,
                                  const float *emb, const float *dout, float *dbottom,
                                  float *demb) {
  return interact(k, true, batch, S, D, bottom, emb, dout, NULL, dbottom, demb);
}

/* ---- embedding-bag pooling ---- */

static ps_status check_bags(int nbags, int nrows, int nnz, const int32_t *idx,
                            const int32_t *offsets) {
  if (offsets[0] != 0 || offsets[nbags] != nnz) return PS_ERR_INVALID;
  for (int i = 0; i < nbags; i++)
    if (offsets[i + 1] < offsets[i]) return PS_ERR_INVALID;
  for (int j = 0; j < nnz; j++)
    if (idx[j] < 0 || idx[j] >= nrows) return PS_ERR_INVALID;
  return PS_OK;
}

/* o[0..D) += s * r[0..D); with D == 16 a compile-time loop (one AVX-512 FMA). */
static inline void axpy_row(float *restrict o, const float *restrict r, float s, int D) {
  if (D == 16) {
    for (int d = 0; d < 16; d++) o[d] += s * r[d];
  } else {
    for (int d = 0; d < D; d++) o[d] += s * r[d];
  }
}

static ps_status cpu_pool_fwd(ps_kern *k, ps_kern_pool mode, int nbags, int D, int nrows,
                              const float *rows, int nnz, const int32_t *idx,
                              const int32_t *offsets, float *out) {
  int T = CTX(k)->threads;
  ps_status st = check_bags(nbags, nrows, nnz, idx, offsets);
  if (st != PS_OK) return st;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)nnz * D >= PAR_MIN)
  for (int i = 0; i < nbags; i++) {
    float *o = out + (size_t)i * D;
    memset(o, 0, (size_t)D * sizeof(float));
    int lo = offsets[i], hi = offsets[i + 1];
    /* rows are gathered in key order, bags in sample order: the reads are random, so fetch a
     * few bags ahead */
    if (i + 8 < nbags && offsets[i + 8] < nnz) __builtin_prefetch(rows + (size_t)idx[offsets[i + 8]] * D);
    for (int j = lo; j < hi; j++) axpy_row(o, rows + (size_t)idx[j] * D, 1.0f, D);
    if (mode == PS_KERN_POOL_MEAN && hi - lo > 1) {
      float inv = 1.0f / (float)(hi - lo);
      for (int d = 0; d < D; d++) o[d] *= inv;
    }
  }
  return PS_OK;
}

/* Each thread owns a contiguous range of gradient rows and scans every entry, adding only
 * those that land in its range: no atomics, no serial inversion pass, and every row is summed
 * in entry order whatever the thread count (so results do not depend on it). The scan is
 * O(threads * nnz) int reads, cheap next to the row traffic for the thread counts used.
 * (Measured at batch 2048, 2 threads: 1.1 ms with a serial CSR inversion, see RESULTS.) */
static ps_status cpu_pool_bwd(ps_kern *k, ps_kern_pool mode, int nbags, int D, int nrows,
                              int nnz, const int32_t *idx, const int32_t *offsets,
                              const float *dout, float *drows) {
  int T = CTX(k)->threads;
  ps_status st = check_bags(nbags, nrows, nnz, idx, offsets);
  if (st != PS_OK) return st;
  if ((size_t)nnz * D < PAR_MIN) T = 1;
  bool mean = mode == PS_KERN_POOL_MEAN;
  /* one junk row per thread: entries outside a thread's range are added there, branch-free
   * (a range test mispredicts half the time on random keys and cost more than the add) */
  float *junk = T > 1 ? scratch_get(k, (size_t)T * D * sizeof(float)) : NULL;
  if (T > 1 && !junk) return PS_ERR_NOMEM;
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int lo = (int)((long long)nrows * t / nt), hi = (int)((long long)nrows * (t + 1) / nt);
    memset(drows + (size_t)lo * D, 0, (size_t)(hi - lo) * D * sizeof(float));
    float *mine = nt > 1 ? junk + (size_t)t * D : NULL;
    unsigned span = (unsigned)(hi - lo);
    for (int b = 0; b < nbags; b++) {
      int e0 = offsets[b], e1 = offsets[b + 1];
      float s = mean && e1 - e0 > 1 ? 1.0f / (float)(e1 - e0) : 1.0f;
      const float *g = dout + (size_t)b * D;
      for (int j = e0; j < e1; j++) {
        int r = idx[j];
        if (nt == 1) {
          axpy_row(drows + (size_t)r * D, g, s, D);
        } else {
          bool in = (unsigned)(r - lo) < span;
          float *o = in ? drows + (size_t)r * D : mine;
          axpy_row(o, g, s, D);
        }
      }
    }
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
    .bias_act_fwd = cpu_bias_act_fwd,
    .bias_act_bwd = cpu_bias_act_bwd,
    .interact_fwd = cpu_interact_fwd,
    .interact_bwd = cpu_interact_bwd,
    .pool_fwd = cpu_pool_fwd,
    .pool_bwd = cpu_pool_bwd,
    .bce_fwd = cpu_bce_fwd,
    .bce_bwd = cpu_bce_bwd,
    .scale = cpu_scale,
    .sgd = cpu_sgd,
    .adagrad = cpu_adagrad,
    .adam = cpu_adam,
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
  (void)have_avx512(); /* settle the CPU-feature flag before any parallel region reads it */
  c->threads = threads > 0 ? threads : omp_get_max_threads();
  openblas_set_num_threads(c->threads);
  k->iface = &cpu_iface;
  k->ctx = c;
  k->name = "cpu";
  k->host_memory = true;
  *out = k;
  return PS_OK;
}
