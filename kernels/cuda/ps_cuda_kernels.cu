/* ps_cuda_kernels.cu: the CUDA kernels of the dense DLRM operations (ps_kernels.h), each the
 * twin of a loop in kernels/cpu/ and checked against it by tests/cuda/.
 *
 * Design decisions:
 * - Reductions that feed parameters (bias gradients, the loss) are deterministic: fixed-shape
 *   partial sums in a caller-provided workspace, then summed in index order. Replicas that
 *   allreduce their gradients therefore see the same bits run after run.
 * - Embedding-bag backward aggregates repeated rows with atomicAdd (red.global.add.f32 on
 *   sm_80+). The order of the adds varies, so drows can differ in the last bits between runs;
 *   these go to the parameter server, where a sparse optimizer applies them once.
 * - The dot interaction is one fused kernel per group of samples: the F = 1 + num_sparse
 *   vectors of a sample are staged in shared memory (row stride padded to an odd number of
 *   floats so neighbouring pairs hit different banks) and the strictly-lower-triangle dots are
 *   written straight into the output row, next to the pass-through copy. No [B, F, F] matrix
 *   is materialised. Shapes too large for shared memory fall back to a global-memory kernel.
 * - Bad pooling offsets or indices are skipped and reported through a device flag rather than
 *   read out of bounds; the backend turns the flag into PS_ERR_INVALID at the next sync. */
#include <cuda_runtime.h>
/* Launches and dynamic shared memory go through these macros, so that a stand-in for the CUDA
 * headers that runs the kernels on CPU threads (the tests' emulator) can define them first. */
#ifndef PS_CU_LAUNCH
#define PS_CU_LAUNCH(k, grid, block, smem, stream, ...) \
  k<<<grid, block, smem, stream>>>(__VA_ARGS__)
/* the same launch, marking a kernel that uses __syncthreads (the emulator needs to know) */
#define PS_CU_LAUNCH_SYNC PS_CU_LAUNCH
#define PS_CU_DYN_SMEM(type, name) extern __shared__ type name[]
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ps_cuda_kernels.h"

namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(size_t n, int threads = kThreads) {
  size_t g = (n + threads - 1) / threads;
  const size_t cap = 1u << 20; /* grid-stride loops cover the rest */
  return (unsigned)(g < 1 ? 1 : (g > cap ? cap : g));
}

/* ---- bias + activation -------------------------------------------------------------- */

__global__ void bias_act_fwd_k(int act, size_t total, int n, const float *x, /* may be y */
                               const float *__restrict__ bias, float *y) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i] + bias[i % (size_t)n];
    y[i] = (act == 1 && !(v > 0.0f)) ? 0.0f : v; /* ReLU maps NaN to 0, as fmaxf(v, 0) does */
  }
}

/* n % 4 == 0 and 16-byte aligned pointers: four columns per thread. */
__global__ void bias_act_fwd4_k(int act, size_t total4, int n4, const float4 *x,
                                const float4 *__restrict__ bias, float4 *y) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total4;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 v = x[i], b = bias[i % (size_t)n4];
    v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
    if (act == 1) {
      v.x = v.x > 0.0f ? v.x : 0.0f;
      v.y = v.y > 0.0f ? v.y : 0.0f;
      v.z = v.z > 0.0f ? v.z : 0.0f;
      v.w = v.w > 0.0f ? v.w : 0.0f;
    }
    y[i] = v;
  }
}

/* Row chunks of the bias-gradient reduction: at most 128, each at least 64 rows. */
inline int colsum_chunks(int m) {
  int r = (m + 63) / 64;
  return r < 1 ? 1 : (r > 128 ? 128 : r);
}

constexpr int kColX = 32, kColY = 8;

/* Block (32, 8) covers 32 columns; chunk blockIdx.y takes rows by*8+ty, stride chunks*8.
 * Writes the masked gradient and one partial column sum per chunk into ws[chunk, n]. */
__global__ void bias_act_bwd_k(int act, int m, int n, const float *__restrict__ y, const float *dy,
                               float *dx, float *__restrict__ ws) {
  __shared__ float part[kColY][kColX + 1];
  const int col = blockIdx.x * kColX + threadIdx.x;
  float acc = 0.0f;
  if (col < n) {
    for (int r = blockIdx.y * kColY + threadIdx.y; r < m; r += gridDim.y * kColY) {
      size_t i = (size_t)r * n + col;
      float g = dy[i];
      if (act == 1 && !(y[i] > 0.0f)) g = 0.0f;
      dx[i] = g;
      acc += g;
    }
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float s = 0.0f;
    for (int t = 0; t < kColY; t++) s += part[t][threadIdx.x];
    ws[(size_t)blockIdx.y * n + col] = s;
  }
}

__global__ void colsum_finish_k(int chunks, int n, const float *__restrict__ ws, float *out) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  float s = 0.0f;
  for (int r = 0; r < chunks; r++) s += ws[(size_t)r * n + col];
  out[col] = s;
}

/* ---- dot interaction ----------------------------------------------------------------- */

/* Pair p of the strictly lower triangle in (i-major, then j) order: p = i(i-1)/2 + j. */
__device__ __forceinline__ void pair_of(int p, int *pi, int *pj) {
  int i = (int)((1.0f + sqrtf(1.0f + 8.0f * (float)p)) * 0.5f);
  while (i * (i - 1) / 2 > p) i--;
  while ((i + 1) * i / 2 <= p) i++;
  *pi = i;
  *pj = p - i * (i - 1) / 2;
}

/* Shared-memory layout per sample: T [F, ld] (ld odd), then for bwd G [F, F]. */
__device__ __forceinline__ void load_sample(float *T, int ld, int b, int S, int dim,
                                            const float *__restrict__ bottom,
                                            const float *__restrict__ emb, int tid, int nt) {
  const int F = S + 1;
  for (int e = tid; e < F * dim; e += nt) {
    int f = e / dim, k = e - f * dim;
    T[f * ld + k] = f == 0 ? bottom[(size_t)b * dim + k] : emb[((size_t)b * S + (f - 1)) * dim + k];
  }
}

__global__ void interact_fwd_smem_k(int batch, int S, int dim, int ld, int spb,
                                    const float *__restrict__ bottom, const float *__restrict__ emb,
                                    float *__restrict__ out) {
  PS_CU_DYN_SMEM(float, sm);
  const int F = S + 1, P = F * (F - 1) / 2, W = dim + P;
  const int b0 = blockIdx.x * spb;
  for (int s = 0; s < spb && b0 + s < batch; s++)
    load_sample(sm + s * F * ld, ld, b0 + s, S, dim, bottom, emb, threadIdx.x, blockDim.x);
  __syncthreads();
  for (int s = 0; s < spb && b0 + s < batch; s++) {
    const float *T = sm + s * F * ld;
    float *o = out + (size_t)(b0 + s) * W;
    for (int w = threadIdx.x; w < W; w += blockDim.x) {
      if (w < dim) {
        o[w] = T[w];
      } else {
        int i, j;
        pair_of(w - dim, &i, &j);
        const float *ti = T + i * ld, *tj = T + j * ld;
        float acc = 0.0f;
        for (int k = 0; k < dim; k++) acc = fmaf(ti[k], tj[k], acc);
        o[w] = acc;
      }
    }
  }
}

__device__ __forceinline__ const float *feat_ptr(int b, int f, int S, int dim, const float *bottom,
                                                 const float *emb) {
  return f == 0 ? bottom + (size_t)b * dim : emb + ((size_t)b * S + (f - 1)) * dim;
}

/* Fallback for F * dim beyond shared memory: one thread per output element. */
__global__ void interact_fwd_gmem_k(int batch, int S, int dim, const float *__restrict__ bottom,
                                    const float *__restrict__ emb, float *__restrict__ out) {
  const int F = S + 1, P = F * (F - 1) / 2, W = dim + P;
  const size_t total = (size_t)batch * W;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
       e += (size_t)gridDim.x * blockDim.x) {
    int b = (int)(e / W), w = (int)(e - (size_t)b * W);
    if (w < dim) {
      out[e] = bottom[(size_t)b * dim + w];
    } else {
      int i, j;
      pair_of(w - dim, &i, &j);
      const float *ti = feat_ptr(b, i, S, dim, bottom, emb),
                  *tj = feat_ptr(b, j, S, dim, bottom, emb);
      float acc = 0.0f;
      for (int k = 0; k < dim; k++) acc = fmaf(ti[k], tj[k], acc);
      out[e] = acc;
    }
  }
}

/* dT[i, k] = sum_{j != i} G[i, j] T[j, k] with G symmetric, G[i, j] = dout dot-part of pair
 * (max(i,j), min(i,j)). Feature 0 also gets the pass-through gradient dout[b, k]. */
__global__ void interact_bwd_smem_k(int batch, int S, int dim, int ld, int spb,
                                    const float *__restrict__ bottom, const float *__restrict__ emb,
                                    const float *__restrict__ dout, float *__restrict__ dbottom,
                                    float *__restrict__ demb) {
  PS_CU_DYN_SMEM(float, sm);
  const int F = S + 1, P = F * (F - 1) / 2, W = dim + P;
  const int per = F * ld + F * F;
  const int b0 = blockIdx.x * spb;
  for (int s = 0; s < spb && b0 + s < batch; s++) {
    float *T = sm + s * per, *G = T + F * ld;
    const int b = b0 + s;
    load_sample(T, ld, b, S, dim, bottom, emb, threadIdx.x, blockDim.x);
    const float *dz = dout + (size_t)b * W + dim;
    for (int e = threadIdx.x; e < F * F; e += blockDim.x) {
      int i = e / F, j = e - i * F;
      float g = 0.0f;
      if (i > j)
        g = dz[i * (i - 1) / 2 + j];
      else if (j > i)
        g = dz[j * (j - 1) / 2 + i];
      G[e] = g;
    }
  }
  __syncthreads();
  for (int s = 0; s < spb && b0 + s < batch; s++) {
    const float *T = sm + s * per, *G = T + F * ld;
    const int b = b0 + s;
    for (int e = threadIdx.x; e < F * dim; e += blockDim.x) {
      int i = e / dim, k = e - i * dim;
      float acc = 0.0f;
      for (int j = 0; j < F; j++) acc = fmaf(G[i * F + j], T[j * ld + k], acc);
      if (i == 0)
        dbottom[(size_t)b * dim + k] = acc + dout[(size_t)b * W + k];
      else
        demb[((size_t)b * S + (i - 1)) * dim + k] = acc;
    }
  }
}

__global__ void interact_bwd_gmem_k(int batch, int S, int dim, const float *__restrict__ bottom,
                                    const float *__restrict__ emb, const float *__restrict__ dout,
                                    float *__restrict__ dbottom, float *__restrict__ demb) {
  const int F = S + 1, P = F * (F - 1) / 2, W = dim + P;
  const size_t total = (size_t)batch * F * dim;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
       e += (size_t)gridDim.x * blockDim.x) {
    int b = (int)(e / ((size_t)F * dim));
    int r = (int)(e - (size_t)b * F * dim);
    int i = r / dim, k = r - i * dim;
    const float *dz = dout + (size_t)b * W + dim;
    float acc = 0.0f;
    for (int j = 0; j < F; j++) {
      if (j == i) continue;
      float g = i > j ? dz[i * (i - 1) / 2 + j] : dz[j * (j - 1) / 2 + i];
      acc = fmaf(g, feat_ptr(b, j, S, dim, bottom, emb)[k], acc);
    }
    if (i == 0)
      dbottom[(size_t)b * dim + k] = acc + dout[(size_t)b * W + k];
    else
      demb[((size_t)b * S + (i - 1)) * dim + k] = acc;
  }
}

/* ---- embedding-bag pooling ------------------------------------------------------------ */

/* One thread per (bag, k): neighbouring threads read neighbouring floats of a row. */
__global__ void pool_fwd_k(uint64_t mean, unsigned period, int nbags, int dim, int nrows,
                           const float *__restrict__ rows, int nnz, const int32_t *__restrict__ idx,
                           const int32_t *__restrict__ offsets, float *__restrict__ out, int *err) {
  const size_t total = (size_t)nbags * dim;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
       e += (size_t)gridDim.x * blockDim.x) {
    int bag = (int)(e / dim), k = (int)(e - (size_t)bag * dim);
    int beg = offsets[bag], end = offsets[bag + 1];
    float acc = 0.0f;
    if (beg < 0 || end < beg || end > nnz) {
      atomicOr(err, PS_CU_ERR_INDEX);
    } else {
      for (int j = beg; j < end; j++) {
        int r = idx[j];
        if (r < 0 || r >= nrows) {
          atomicOr(err, PS_CU_ERR_INDEX);
          continue;
        }
        acc += rows[(size_t)r * dim + k];
      }
      if (end - beg > 1 && ((mean >> ((unsigned)bag % period)) & 1u))
        acc *= 1.0f / (float)(end - beg); /* as the CPU twin */
    }
    out[e] = acc;
  }
}

__global__ void pool_bwd_k(uint64_t mean, unsigned period, int nbags, int dim, int nrows, int nnz,
                           const int32_t *__restrict__ idx, const int32_t *__restrict__ offsets,
                           const float *__restrict__ dout, float *drows, int *err) {
  const size_t total = (size_t)nbags * dim;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
       e += (size_t)gridDim.x * blockDim.x) {
    int bag = (int)(e / dim), k = (int)(e - (size_t)bag * dim);
    int beg = offsets[bag], end = offsets[bag + 1];
    if (beg < 0 || end < beg || end > nnz) {
      atomicOr(err, PS_CU_ERR_INDEX);
      continue;
    }
    if (end == beg) continue;
    float g = dout[e];
    if ((mean >> ((unsigned)bag % period)) & 1u) g *= 1.0f / (float)(end - beg);
    for (int j = beg; j < end; j++) {
      int r = idx[j];
      if (r < 0 || r >= nrows) {
        atomicOr(err, PS_CU_ERR_INDEX);
        continue;
      }
      atomicAdd(drows + (size_t)r * dim + k, g);
    }
  }
}

/* ---- sigmoid + BCE --------------------------------------------------------------------- */

__device__ __forceinline__ float sigmoid_f(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
  float e = expf(z);
  return e / (1.0f + e);
}

constexpr int kBceThreads = 256, kBceMaxBlocks = 1024;

inline int bce_blocks(int n) {
  int g = (n + kBceThreads - 1) / kBceThreads;
  return g < 1 ? 1 : (g > kBceMaxBlocks ? kBceMaxBlocks : g);
}

/* Block partials into ws; the last block to finish (ticket from an atomicInc that wraps the
 * counter back to zero) sums them in block order, so the loss is deterministic. */
__global__ void bce_fwd_k(int n, const float *__restrict__ logits, const float *__restrict__ labels,
                          float *__restrict__ probs, float *loss, float *ws,
                          unsigned int *counter) {
  __shared__ float red[kBceThreads];
  __shared__ bool last;
  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float z = logits[i];
    if (probs) probs[i] = sigmoid_f(z);
    if (labels) acc += fmaxf(z, 0.0f) - z * labels[i] + log1pf(expf(-fabsf(z)));
  }
  if (!labels) return; /* uniform across the grid: no block takes part in the reduction */
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    ws[blockIdx.x] = red[0];
    __threadfence();
    unsigned ticket = atomicInc(counter, gridDim.x - 1);
    last = ticket == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    double s = 0.0;
    for (unsigned b = 0; b < gridDim.x; b++) s += ((volatile float *)ws)[b];
    *loss = (float)(s / (double)n);
  }
}

__global__ void bce_bwd_k(int n, const float *__restrict__ logits, const float *__restrict__ labels,
                          float scale, float *__restrict__ dlogits) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dlogits[i] = scale * (sigmoid_f(logits[i]) - labels[i]);
}

/* ---- element-wise updates -------------------------------------------------------------- */

#define GRID_STRIDE(i, n)                                                 \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)gridDim.x * blockDim.x)

__global__ void scale_k(size_t n, float alpha, float *x) { GRID_STRIDE(i, n) x[i] *= alpha; }

__global__ void sgd_k(size_t n, float *w, const float *__restrict__ g, float lr, float wd) {
  GRID_STRIDE(i, n) {
    float gi = g[i] + wd * w[i];
    w[i] -= lr * gi;
  }
}

__global__ void adagrad_k(size_t n, float *w, const float *__restrict__ g, float *sum, float clr,
                          float eps, float wd) {
  GRID_STRIDE(i, n) {
    float gi = g[i] + wd * w[i];
    float h = sum[i] + gi * gi;
    sum[i] = h;
    w[i] -= clr * gi / (sqrtf(h) + eps);
  }
}

__global__ void adam_k(size_t n, float *w, const float *__restrict__ g, float *m, float *v,
                       float b1, float b2, float eps, float wd, float step_size, float bc2_sqrt) {
  GRID_STRIDE(i, n) {
    float gi = g[i] + wd * w[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

/* DCNv2 cross layer, element-wise part (ps_kern_cross_fwd / _bwd): one thread per element;
 * the GEMMs around it are cuBLAS's, its bias gradient bias_act_bwd's column sums. */
__global__ void cross_fwd_k(size_t total, int n, const float *__restrict__ x0, const float *z,
                            const float *__restrict__ bias, const float *xl, float *zb, float *y) {
  GRID_STRIDE(i, total) {
    float v = z[i] + bias[i % (size_t)n];
    zb[i] = v;
    y[i] = x0[i] * v + xl[i];
  }
}

__global__ void cross_bwd_k(size_t total, const float *__restrict__ x0,
                            const float *__restrict__ zb, const float *__restrict__ dy,
                            float resid, float *__restrict__ dz, float *__restrict__ dx0) {
  GRID_STRIDE(i, total) {
    float g = dy[i];
    dz[i] = g * x0[i];
    dx0[i] += g * (zb[i] + resid);
  }
}

/* FP32 -> bf16, round to nearest even (NaN stays a quiet NaN), by bits so that the emulator
 * needs no cuda_bf16.h; the same rounding as __float2bfloat16_rn and the CPU backend's. */
__device__ __forceinline__ uint16_t bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__global__ void to_bf16_k(size_t total, int cols, const float *__restrict__ src, int ld,
                          uint16_t *__restrict__ dst) {
  GRID_STRIDE(i, total) dst[i] = bf16_rne(src[(i / cols) * ld + i % cols]);
}

/* Shared-memory sizing of the interaction kernels: samples per block within 16 KiB when
 * possible (several blocks per SM), otherwise one sample up to the 48 KiB default limit. */
constexpr size_t kSmemTarget = 16384, kSmemMax = 49152;

inline int pick_spb(size_t per_sample_bytes) {
  size_t spb = kSmemTarget / per_sample_bytes;
  return (int)(spb < 1 ? 1 : (spb > 8 ? 8 : spb));
}

inline int odd_ld(int dim) { return dim % 2 == 0 ? dim + 1 : dim; }

}  // namespace

/* ---- launchers ----------------------------------------------------------------------------- */

extern "C" {

cudaError_t ps_cu_bias_act_fwd(cudaStream_t s, int act, int m, int n, const float *x,
                               const float *bias, float *y) {
  const size_t total = (size_t)m * n;
  const bool vec = n % 4 == 0 && ((uintptr_t)x | (uintptr_t)bias | (uintptr_t)y) % 16 == 0;
  if (vec)
    PS_CU_LAUNCH(bias_act_fwd4_k, (grid_for(total / 4)), (kThreads), (0), (s), act, total / 4,
                 n / 4, (const float4 *)x, (const float4 *)bias, (float4 *)y);
  else
    PS_CU_LAUNCH(bias_act_fwd_k, (grid_for(total)), (kThreads), (0), (s), act, total, n, x, bias,
                 y);
  return cudaGetLastError();
}

size_t ps_cu_colsum_ws_floats(int m, int n) { return (size_t)colsum_chunks(m) * (size_t)n; }

cudaError_t ps_cu_bias_act_bwd(cudaStream_t s, int act, int m, int n, const float *y,
                               const float *dy, float *dx, float *dbias, float *ws) {
  const int chunks = colsum_chunks(m);
  dim3 grid((unsigned)((n + kColX - 1) / kColX), (unsigned)chunks), block(kColX, kColY);
  PS_CU_LAUNCH_SYNC(bias_act_bwd_k, (grid), (block), (0), (s), act, m, n, y, dy, dx, ws);
  PS_CU_LAUNCH(colsum_finish_k, ((unsigned)((n + kThreads - 1) / kThreads)), (kThreads), (0), (s),
               chunks, n, ws, dbias);
  return cudaGetLastError();
}

cudaError_t ps_cu_interact_fwd(cudaStream_t s, int batch, int num_sparse, int dim,
                               const float *bottom, const float *emb, float *out) {
  const int F = num_sparse + 1, ld = odd_ld(dim);
  const size_t per = (size_t)F * ld * sizeof(float);
  if (per <= kSmemMax) {
    const int spb = pick_spb(per);
    const unsigned grid = (unsigned)((batch + spb - 1) / spb);
    PS_CU_LAUNCH_SYNC(interact_fwd_smem_k, (grid), (128), (per * spb), (s), batch, num_sparse, dim,
                      ld, spb, bottom, emb, out);
  } else {
    const size_t total = (size_t)batch * (size_t)(dim + F * (F - 1) / 2);
    PS_CU_LAUNCH(interact_fwd_gmem_k, (grid_for(total)), (kThreads), (0), (s), batch, num_sparse,
                 dim, bottom, emb, out);
  }
  return cudaGetLastError();
}

cudaError_t ps_cu_interact_bwd(cudaStream_t s, int batch, int num_sparse, int dim,
                               const float *bottom, const float *emb, const float *dout,
                               float *dbottom, float *demb) {
  const int F = num_sparse + 1, ld = odd_ld(dim);
  const size_t per = ((size_t)F * ld + (size_t)F * F) * sizeof(float);
  if (per <= kSmemMax) {
    const int spb = pick_spb(per);
    const unsigned grid = (unsigned)((batch + spb - 1) / spb);
    PS_CU_LAUNCH_SYNC(interact_bwd_smem_k, (grid), (128), (per * spb), (s), batch, num_sparse, dim,
                      ld, spb, bottom, emb, dout, dbottom, demb);
  } else {
    const size_t total = (size_t)batch * F * dim;
    PS_CU_LAUNCH(interact_bwd_gmem_k, (grid_for(total)), (kThreads), (0), (s), batch, num_sparse,
                 dim, bottom, emb, dout, dbottom, demb);
  }
  return cudaGetLastError();
}

cudaError_t ps_cu_pool_fwd(cudaStream_t s, uint64_t mean, unsigned period, int nbags, int dim,
                           int nrows, const float *rows, int nnz, const int32_t *idx,
                           const int32_t *offsets, float *out, int *err) {
  PS_CU_LAUNCH(pool_fwd_k, (grid_for((size_t)nbags * dim)), (kThreads), (0), (s), mean, period,
               nbags, dim, nrows, rows, nnz, idx, offsets, out, err);
  return cudaGetLastError();
}

cudaError_t ps_cu_pool_bwd(cudaStream_t s, uint64_t mean, unsigned period, int nbags, int dim,
                           int nrows, int nnz, const int32_t *idx, const int32_t *offsets,
                           const float *dout, float *drows, int *err) {
  cudaError_t e = cudaMemsetAsync(drows, 0, (size_t)nrows * dim * sizeof(float), s);
  if (e != cudaSuccess) return e;
  PS_CU_LAUNCH(pool_bwd_k, (grid_for((size_t)nbags * dim)), (kThreads), (0), (s), mean, period,
               nbags, dim, nrows, nnz, idx, offsets, dout, drows, err);
  return cudaGetLastError();
}

size_t ps_cu_bce_ws_floats(int n) { return (size_t)bce_blocks(n); }

cudaError_t ps_cu_bce_fwd(cudaStream_t s, int n, const float *logits, const float *labels,
                          float *probs, float *loss, float *ws, unsigned int *counter) {
  PS_CU_LAUNCH_SYNC(bce_fwd_k, ((unsigned)bce_blocks(n)), (kBceThreads), (0), (s), n, logits,
                    labels, probs, loss, ws, counter);
  return cudaGetLastError();
}

cudaError_t ps_cu_bce_bwd(cudaStream_t s, int n, const float *logits, const float *labels,
                          float scale, float *dlogits) {
  PS_CU_LAUNCH(bce_bwd_k, (grid_for((size_t)n)), (kThreads), (0), (s), n, logits, labels, scale,
               dlogits);
  return cudaGetLastError();
}

cudaError_t ps_cu_scale(cudaStream_t s, size_t n, float alpha, float *x) {
  PS_CU_LAUNCH(scale_k, (grid_for(n)), (kThreads), (0), (s), n, alpha, x);
  return cudaGetLastError();
}

cudaError_t ps_cu_sgd(cudaStream_t s, size_t n, float *w, const float *g, float lr, float wd) {
  PS_CU_LAUNCH(sgd_k, (grid_for(n)), (kThreads), (0), (s), n, w, g, lr, wd);
  return cudaGetLastError();
}

cudaError_t ps_cu_adagrad(cudaStream_t s, size_t n, float *w, const float *g, float *sum, float clr,
                          float eps, float wd) {
  PS_CU_LAUNCH(adagrad_k, (grid_for(n)), (kThreads), (0), (s), n, w, g, sum, clr, eps, wd);
  return cudaGetLastError();
}

cudaError_t ps_cu_adam(cudaStream_t s, size_t n, float *w, const float *g, float *m, float *v,
                       float beta1, float beta2, float eps, float wd, float step_size,
                       float bc2_sqrt) {
  PS_CU_LAUNCH(adam_k, (grid_for(n)), (kThreads), (0), (s), n, w, g, m, v, beta1, beta2, eps, wd,
               step_size, bc2_sqrt);
  return cudaGetLastError();
}

cudaError_t ps_cu_cross_fwd(cudaStream_t s, int m, int n, const float *x0, const float *z,
                            const float *bias, const float *xl, float *zb, float *y) {
  const size_t total = (size_t)m * n;
  PS_CU_LAUNCH(cross_fwd_k, (grid_for(total)), (kThreads), (0), (s), total, n, x0, z, bias, xl, zb,
               y);
  return cudaGetLastError();
}

cudaError_t ps_cu_cross_bwd(cudaStream_t s, int m, int n, const float *x0, const float *zb,
                            const float *dy, float resid, float *dz, float *dx0) {
  const size_t total = (size_t)m * n;
  PS_CU_LAUNCH(cross_bwd_k, (grid_for(total)), (kThreads), (0), (s), total, x0, zb, dy, resid, dz,
               dx0);
  return cudaGetLastError();
}

cudaError_t ps_cu_to_bf16(cudaStream_t s, int rows, int cols, const float *src, int ld,
                          uint16_t *dst) {
  const size_t total = (size_t)rows * cols;
  PS_CU_LAUNCH(to_bf16_k, (grid_for(total)), (kThreads), (0), (s), total, cols, src, ld, dst);
  return cudaGetLastError();
}

}  // extern "C"
