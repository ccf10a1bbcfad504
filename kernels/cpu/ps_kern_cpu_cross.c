/* ps_kern_cpu_cross: the element-wise half of a DCNv2 cross layer on the CPU (its GEMMs are
 * cpu_sgemm's, i.e. OpenBLAS), and the strided 2-D copy that builds the cross network's
 * input x0 = [bottom | pooled embeddings] and splits its gradient.
 *
 * Design decisions: plain loops over contiguous rows (they vectorize without -ffast-math:
 * each element is one multiply-add, no reduction), parallel over rows like the other
 * element-wise kernels, single-threaded below PAR_MIN. The bias gradient is not summed here:
 * the model takes it from bias_act_bwd (NONE), whose column sums are already deterministic. */
#include <omp.h>
#include <string.h>

#include "ps_kern_cpu_int.h"

ps_status ps_kern_cpu_copy2d(ps_kern *k, int rows, int cols, const float *src, int lds,
                             float *dst, int ldd) {
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)rows * cols >= 4 * PAR_MIN)
  for (int i = 0; i < rows; i++)
    memcpy(dst + (size_t)i * ldd, src + (size_t)i * lds, (size_t)cols * sizeof(float));
  return PS_OK;
}

ps_status ps_kern_cpu_cross_fwd(ps_kern *k, int m, int n, const float *x0, const float *z,
                                const float *bias, const float *xl, float *zb, float *y) {
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)m * n >= PAR_MIN)
  for (int i = 0; i < m; i++) {
    size_t r = (size_t)i * n;
    for (int j = 0; j < n; j++) {
      float v = z[r + j] + bias[j];
      zb[r + j] = v;
      y[r + j] = x0[r + j] * v + xl[r + j];
    }
  }
  return PS_OK;
}

ps_status ps_kern_cpu_cross_bwd(ps_kern *k, int m, int n, const float *x0, const float *zb,
                                const float *dy, float resid, float *dz, float *dx0) {
  int T = CTX(k)->threads;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)m * n >= PAR_MIN)
  for (int i = 0; i < m; i++) {
    size_t r = (size_t)i * n;
    for (int j = 0; j < n; j++) {
      float g = dy[r + j];
      dz[r + j] = g * x0[r + j];
      dx0[r + j] += g * (zb[r + j] + resid);
    }
  }
  return PS_OK;
}
