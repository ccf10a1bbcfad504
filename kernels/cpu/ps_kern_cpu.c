/* ps_kern_cpu: the CPU backend of ps_kernels.h — OpenBLAS sgemm plus OpenMP C loops.
 *
 * Design decisions:
 * - GEMM goes to OpenBLAS's OpenMP build, so its threads and ours come from one OpenMP pool
 *   and do not oversubscribe the cores (the pthread build fights OpenMP: measured 28k vs 18k
 *   samples/s with torch, see issue 6). The thread count is set once at creation, for both.
 * - Every loop uses a static schedule over contiguous row ranges, and reductions go through
 *   per-thread partials summed in a fixed order, so results are deterministic for a given
 *   thread count.
 * - Pooling backward inverts the bag->row map into a CSR (row -> entries) and then gathers per
 *   unique row: no atomics, no races, and each gradient row is summed in entry order.
 * - Scratch for those is owned by the backend and grows on demand, so a steady-state step
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

static ps_status cpu_sgemm(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha,
                           const float *a, int lda, const float *b, int ldb, float beta, float *c,
                           int ldc) {
  (void)k;
  if (kk == 0) {
    /* C = beta * C; BLAS would do this too, but be explicit about beta == 0 (C not read). */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
    return PS_OK;
  }
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

/* T[f] of sample b: f == 0 is the bottom output, f >= 1 the pooled embedding f-1. */
static inline const float *tvec(const float *bot_b, const float *emb_b, int f, int dim) {
  return f == 0 ? bot_b : emb_b + (size_t)(f - 1) * dim;
}

static ps_status cpu_interact_fwd(ps_kern *k, int batch, int S, int D, const float *bottom,
                                  const float *emb, float *out) {
  int T = CTX(k)->threads;
  int F = S + 1, W = ps_kern_interact_width(S, D);
#pragma omp parallel for schedule(static) num_threads(T) if (batch >= 64)
  for (int b = 0; b < batch; b++) {
    const float *bb = bottom + (size_t)b * D;
    const float *eb = emb + (size_t)b * S * D;
    float *o = out + (size_t)b * W;
    memcpy(o, bb, (size_t)D * sizeof(float));
    float *z = o + D;
    for (int i = 1; i < F; i++) {
      const float *ti = tvec(bb, eb, i, D);
      for (int j = 0; j < i; j++) {
        const float *tj = tvec(bb, eb, j, D);
        float s = 0.0f;
        for (int d = 0; d < D; d++) s += ti[d] * tj[d];
        *z++ = s;
      }
    }
  }
  return PS_OK;
}

static ps_status cpu_interact_bwd(ps_kern *k, int batch, int S, int D, const float *bottom,
                                  const float *emb, const float *dout, float *dbottom,
                                  float *demb) {
  int T = CTX(k)->threads;
  int F = S + 1, W = ps_kern_interact_width(S, D);
#pragma omp parallel for schedule(static) num_threads(T) if (batch >= 64)
  for (int b = 0; b < batch; b++) {
    const float *bb = bottom + (size_t)b * D;
    const float *eb = emb + (size_t)b * S * D;
    const float *g = dout + (size_t)b * W;
    float *db = dbottom + (size_t)b * D;
    float *de = demb + (size_t)b * S * D;
    memcpy(db, g, (size_t)D * sizeof(float));
    memset(de, 0, (size_t)S * D * sizeof(float));
    const float *gz = g + D;
    for (int i = 1; i < F; i++) {
      const float *ti = tvec(bb, eb, i, D);
      float *dti = de + (size_t)(i - 1) * D;
      for (int j = 0; j < i; j++) {
        const float *tj = tvec(bb, eb, j, D);
        float *dtj = j == 0 ? db : de + (size_t)(j - 1) * D;
        float gij = *gz++;
        for (int d = 0; d < D; d++) {
          dti[d] += gij * tj[d];
          dtj[d] += gij * ti[d];
        }
      }
    }
  }
  return PS_OK;
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

static ps_status cpu_pool_fwd(ps_kern *k, ps_kern_pool mode, int nbags, int D, int nrows,
                              const float *rows, int nnz, const int32_t *idx,
                              const int32_t *offsets, float *out) {
  int T = CTX(k)->threads;
  ps_status st = check_bags(nbags, nrows, nnz, idx, offsets);
  if (st != PS_OK) return st;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)nnz * D >= PAR_MIN)
  for (int i = 0; i < nbags; i++) {
    float *o = out + (size_t)i * D;
    for (int d = 0; d < D; d++) o[d] = 0.0f;
    int lo = offsets[i], hi = offsets[i + 1];
    for (int j = lo; j < hi; j++) {
      const float *r = rows + (size_t)idx[j] * D;
      for (int d = 0; d < D; d++) o[d] += r[d];
    }
    if (mode == PS_KERN_POOL_MEAN && hi - lo > 1) {
      float inv = 1.0f / (float)(hi - lo);
      for (int d = 0; d < D; d++) o[d] *= inv;
    }
  }
  return PS_OK;
}

static ps_status cpu_pool_bwd(ps_kern *k, ps_kern_pool mode, int nbags, int D, int nrows,
                              int nnz, const int32_t *idx, const int32_t *offsets,
                              const float *dout, float *drows) {
  int T = CTX(k)->threads;
  ps_status st = check_bags(nbags, nrows, nnz, idx, offsets);
  if (st != PS_OK) return st;
  /* CSR of row -> entries: start [nrows + 1], then the entries' bag ids [nnz] grouped by
   * row, in entry order within a row (so each gradient row is summed deterministically). */
  size_t need = ((size_t)nrows + 1 + (size_t)nnz) * sizeof(int32_t);
  int32_t *start = scratch_get(k, need);
  if (!start) return PS_ERR_NOMEM;
  int32_t *ebag = start + nrows + 1;
  memset(start, 0, ((size_t)nrows + 1) * sizeof(int32_t));
  for (int j = 0; j < nnz; j++) start[idx[j] + 1]++;
  for (int r = 0; r < nrows; r++) start[r + 1] += start[r];
  /* In-place fill: start[r] serves as row r's cursor, ending at the old start[r + 1]; one
   * shift right restores it. */
  for (int b = 0; b < nbags; b++)
    for (int j = offsets[b]; j < offsets[b + 1]; j++) ebag[start[idx[j]]++] = b;
  for (int r = nrows; r > 0; r--) start[r] = start[r - 1];
  start[0] = 0;
  bool mean = mode == PS_KERN_POOL_MEAN;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)nnz * D >= PAR_MIN)
  for (int r = 0; r < nrows; r++) {
    float *o = drows + (size_t)r * D;
    for (int d = 0; d < D; d++) o[d] = 0.0f;
    for (int e = start[r]; e < start[r + 1]; e++) {
      int b = ebag[e];
      const float *g = dout + (size_t)b * D;
      if (mean) {
        float s = 1.0f / (float)(offsets[b + 1] - offsets[b]);
        for (int d = 0; d < D; d++) o[d] += s * g[d];
      } else {
        for (int d = 0; d < D; d++) o[d] += g[d];
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
  c->threads = threads > 0 ? threads : omp_get_max_threads();
  openblas_set_num_threads(c->threads);
  k->iface = &cpu_iface;
  k->ctx = c;
  k->name = "cpu";
  k->host_memory = true;
  *out = k;
  return PS_OK;
}
