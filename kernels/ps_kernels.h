/* ps_kernels: the compute backend interface for the dense half of DLRM.
 *
 * A backend is a struct of function pointers (ps_kern_i, in the style of ggml's
 * ggml_backend_i) plus a context. The model (worker/model/) calls only the ps_kern_* inline
 * wrappers below, so the CPU backend (kernels/cpu/, OpenBLAS + OpenMP) and the CUDA backend
 * (kernels/cuda/, cuBLAS + .cu kernels) are interchangeable without touching the model.
 * Nothing here knows about the parameter server.
 *
 * Conventions shared by every operation:
 * - Memory: every float / int32 pointer passed to an operation is BACKEND memory, obtained
 *   from ps_kern_alloc (device memory for CUDA, ordinary host memory for the CPU backend).
 *   Host data moves in and out only through ps_kern_to_device / ps_kern_to_host.
 * - Layout: dense, row-major, float32; sizes are explicit arguments (no hidden state, no
 *   allocation by the caller inside a step). "[M, N]" below means M rows of N floats.
 * - Ordering: operations run in call order on one stream. They may be asynchronous (CUDA);
 *   ps_kern_to_host and ps_kern_sync return only after all earlier work has finished, and an
 *   error raised by an asynchronous operation may be reported by a later call.
 * - Outputs are overwritten (no accumulation) unless an operation says otherwise; sgemm
 *   accumulates through beta. Unless stated, outputs must not alias inputs.
 * - Errors: every wrapper returns ps_status and never aborts. Wrappers reject a NULL backend
 *   and negative sizes with PS_ERR_INVALID; an operation a backend lacks (NULL slot) returns
 *   PS_ERR_UNSUPPORTED, so a test can say so instead of failing silently.
 * - Sizes of zero are legal and do nothing (batch of 0, empty bag list).
 *
 * Build: kernels/kernels.cmake defines ember_kernels_iface (this header), ember_kernels_cpu,
 * and ember_kernels (ps_kern_create over every backend built). A CUDA backend is the target
 * ember_kernels_cuda (kernels/cuda/), linking ember_kernels_iface and defining
 * ps_kern_cuda_create; ember_kernels links it where EMBER_HAVE_CUDA.
 */
#ifndef PS_KERNELS_H
#define PS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ps_status.h"

typedef enum ps_kern_act { PS_KERN_ACT_NONE = 0, PS_KERN_ACT_RELU = 1 } ps_kern_act;
/* How each bag pools: bag i is the feature i % period of its sample (the model orders bags
 * sample-major), and pools by mean when bit (i % period) of `mean` is set, by sum otherwise.
 * A struct passed by value rather than a per-bag array: a CUDA kernel takes it as an
 * argument (no upload), and a schema's columns fit in 64 bits (ps_schema refuses mixed
 * pooling beyond 64 categorical columns; one mode for all needs only period 1). */
typedef struct ps_kern_pool {
  uint64_t mean;   /* bit f: feature f pools by mean */
  uint32_t period; /* 1..64: features per sample, or 1 when every bag pools alike */
} ps_kern_pool;
#define PS_KERN_POOL_SUM ((ps_kern_pool){0, 1})
#define PS_KERN_POOL_MEAN ((ps_kern_pool){1, 1})

/* Whether bag i pools by mean. */
static inline bool ps_kern_pool_mean_at(ps_kern_pool p, int i) {
  return (p.mean >> ((uint32_t)i % p.period)) & 1u;
}
static inline bool ps_kern_pool_valid(ps_kern_pool p) {
  return p.period >= 1 && p.period <= 64 && (p.period == 64 || (p.mean >> p.period) == 0);
}

typedef struct ps_kern ps_kern;

/* The input precision of a dense GEMM (ps_kern_gemm). PS_KERN_BF16 rounds both inputs to bf16
 * (round to nearest even) and multiplies them with FP32 accumulation into an FP32 C, as
 * torch.autocast does for matmul; everything else stays FP32. */
typedef enum ps_kern_prec { PS_KERN_FP32 = 0, PS_KERN_BF16 = 1 } ps_kern_prec;

/* The backend vtable. Implementers fill it; users call the ps_kern_* wrappers instead.
 * Each slot's contract is documented at its wrapper. */
typedef struct ps_kern_i {
  /* memory */
  ps_status (*alloc)(ps_kern *k, size_t bytes, void **out);
  void (*free)(ps_kern *k, void *ptr);
  ps_status (*memset0)(ps_kern *k, void *dst, size_t bytes);
  ps_status (*to_device)(ps_kern *k, void *dst, const void *src_host, size_t bytes);
  ps_status (*to_host)(ps_kern *k, void *dst_host, const void *src, size_t bytes);
  ps_status (*copy)(ps_kern *k, void *dst, const void *src, size_t bytes);
  ps_status (*sync)(ps_kern *k);
  void (*destroy)(ps_kern *k);
  /* host memory the backend copies to and from fastest (CUDA: page-locked); NULL slots:
   * malloc and free */
  ps_status (*host_alloc)(ps_kern *k, size_t bytes, void **out);
  void (*host_free)(ps_kern *k, void *ptr);
  /* an upload from host_alloc memory with no staging copy; NULL slot: to_device */
  ps_status (*to_device_pinned)(ps_kern *k, void *dst, const void *src_host, size_t bytes);

  /* compute */
  ps_status (*sgemm)(ps_kern *k, bool trans_a, bool trans_b, int m, int n, int kk, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, float *c,
                     int ldc);
  /* sgemm's contract with bf16 inputs (see ps_kern_gemm); NULL slot: not built */
  ps_status (*gemm_bf16)(ps_kern *k, bool trans_a, bool trans_b, int m, int n, int kk,
                         float alpha, const float *a, int lda, const float *b, int ldb,
                         float beta, float *c, int ldc);
  ps_status (*bias_act_fwd)(ps_kern *k, ps_kern_act act, int m, int n, const float *x,
                            const float *bias, float *y);
  ps_status (*bias_act_bwd)(ps_kern *k, ps_kern_act act, int m, int n, const float *y,
                            const float *dy, float *dx, float *dbias);
  ps_status (*interact_fwd)(ps_kern *k, int batch, int num_sparse, int dim, const float *bottom,
                            const float *emb, float *out);
  ps_status (*interact_bwd)(ps_kern *k, int batch, int num_sparse, int dim, const float *bottom,
                            const float *emb, const float *dout, float *dbottom, float *demb);
  ps_status (*pool_fwd)(ps_kern *k, ps_kern_pool mode, int nbags, int dim, int nrows,
                        const float *rows, int nnz, const int32_t *idx, const int32_t *offsets,
                        float *out);
  ps_status (*pool_bwd)(ps_kern *k, ps_kern_pool mode, int nbags, int dim, int nrows, int nnz,
                        const int32_t *idx, const int32_t *offsets, const float *dout,
                        float *drows);
  ps_status (*bce_fwd)(ps_kern *k, int n, const float *logits, const float *labels, float *probs,
                       float *loss);
  ps_status (*bce_bwd)(ps_kern *k, int n, const float *logits, const float *labels, float scale,
                       float *dlogits);
  ps_status (*scale)(ps_kern *k, size_t n, float alpha, float *x);
  ps_status (*sgd)(ps_kern *k, size_t n, float *w, const float *g, float lr, float weight_decay);
  ps_status (*adagrad)(ps_kern *k, size_t n, float *w, const float *g, float *state_sum,
                       float clr, float eps, float weight_decay);
  ps_status (*adam)(ps_kern *k, size_t n, float *w, const float *g, float *m, float *v, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int64_t step);
  ps_status (*copy2d)(ps_kern *k, int rows, int cols, const float *src, int lds, float *dst,
                      int ldd);
  ps_status (*cross_fwd)(ps_kern *k, int m, int n, const float *x0, const float *z,
                         const float *bias, const float *xl, float *zb, float *y);
  ps_status (*cross_bwd)(ps_kern *k, int m, int n, const float *x0, const float *zb,
                         const float *dy, float resid, float *dz, float *dx0);

  /* interoperation */
  void *(*stream)(ps_kern *k); /* NULL slot: no native stream (host backend) */
} ps_kern_i;

/* A backend instance. Public so that backends can be written outside this folder; users treat
 * it as opaque and go through the wrappers. */
struct ps_kern {
  const ps_kern_i *iface;
  void *ctx;            /* the backend's private state */
  const char *name;     /* "cpu", "cuda" */
  bool host_memory;     /* backend memory is ordinary host memory (CPU backend) */
  bool bf16;            /* gemm_bf16 runs on this hardware (CPU: AVX512_BF16; CUDA: sm_80+) */
};

/* ---- creation --------------------------------------------------------------------------- */

/* The CPU backend: OpenBLAS sgemm and OpenMP loops, using `threads` threads (0 = OpenMP's
 * default, i.e. all cores or OMP_NUM_THREADS). Note: OpenBLAS's thread count is process-wide. */
ps_status ps_kern_cpu_create(int threads, ps_kern **out);
/* The CUDA backend on `device` (kernels/cuda/). Declared here so the interface is one header;
 * defined only where CUDA is built — use ps_kern_create to select by name portably. */
ps_status ps_kern_cuda_create(int device, ps_kern **out, ps_error *err);
/* By name: "cpu" (threads used) or "cuda" / "cuda:N" (threads ignored). PS_ERR_UNSUPPORTED
 * where the backend was not built or no device is present; PS_ERR_INVALID for other names.
 * err's message is what follows "device 'NAME': " ("cuda: device 9 requested, 1 present"). */
ps_status ps_kern_create(const char *name, int threads, ps_kern **out, ps_error *err);
/* Frees the backend (memory it handed out must be freed first); sets *k = NULL. */
static inline void ps_kern_destroy(ps_kern **k) {
  if (k && *k) {
    (*k)->iface->destroy(*k);
    *k = NULL;
  }
}

/* ---- memory ----------------------------------------------------------------------------- */

/* Backend memory of `bytes` bytes, 64-byte aligned, uninitialised. bytes == 0 gives NULL. */
static inline ps_status ps_kern_alloc(ps_kern *k, size_t bytes, void **out) {
  if (!k || !out) return PS_ERR_INVALID;
  *out = NULL;
  if (bytes == 0) return PS_OK;
  return k->iface->alloc(k, bytes, out);
}
/* Frees backend memory; ptr may be NULL. Waits for pending work that uses it. */
static inline void ps_kern_free(ps_kern *k, void *ptr) {
  if (k && ptr) k->iface->free(k, ptr);
}
/* Host memory of `bytes` bytes (uninitialised) that ps_kern_to_host fills without an extra
 * copy: page-locked on CUDA, where a download into ordinary memory goes through a staging
 * buffer and a host memcpy (at batch 65536 of the Kaggle shape that memcpy was half the
 * step, bench/RESULTS-gpu.md). Page-locked memory is scarce: use it for the large buffers a
 * step downloads into. Ordinary malloc on backends without the slot. bytes == 0 gives NULL. */
static inline ps_status ps_kern_host_alloc(ps_kern *k, size_t bytes, void **out) {
  if (!k || !out) return PS_ERR_INVALID;
  *out = NULL;
  if (bytes == 0) return PS_OK;
  if (k->iface->host_alloc) return k->iface->host_alloc(k, bytes, out);
  *out = malloc(bytes);
  return *out ? PS_OK : PS_ERR_NOMEM;
}
/* Frees memory from ps_kern_host_alloc (of the same backend); ptr may be NULL. */
static inline void ps_kern_host_free(ps_kern *k, void *ptr) {
  if (!k || !ptr) return;
  if (k->iface->host_free)
    k->iface->host_free(k, ptr);
  else
    free(ptr);
}
/* Sets `bytes` bytes at backend pointer dst to zero. */
static inline ps_status ps_kern_memset0(ps_kern *k, void *dst, size_t bytes) {
  if (!k || (!dst && bytes)) return PS_ERR_INVALID;
  return bytes ? k->iface->memset0(k, dst, bytes) : PS_OK;
}
/* Host -> backend. Returns when src_host may be reused. */
static inline ps_status ps_kern_to_device(ps_kern *k, void *dst, const void *src_host,
                                          size_t bytes) {
  if (!k || ((!dst || !src_host) && bytes)) return PS_ERR_INVALID;
  return bytes ? k->iface->to_device(k, dst, src_host, bytes) : PS_OK;
}
/* Host -> backend from memory of ps_kern_host_alloc on k, with no staging copy: the upload is
 * enqueued and the call returns at once, so the host does no copy of its own in the step
 * (CUDA: a DMA from the page-locked rows, where ps_kern_to_device first copies them into its
 * staging ring). The caller keeps src_host unchanged until the next ps_kern_to_host or
 * ps_kern_sync, which wait for the upload. Other memory, or a backend without the slot: as
 * ps_kern_to_device. */
static inline ps_status ps_kern_to_device_pinned(ps_kern *k, void *dst, const void *src_host,
                                                 size_t bytes) {
  if (!k || ((!dst || !src_host) && bytes)) return PS_ERR_INVALID;
  if (!bytes) return PS_OK;
  return k->iface->to_device_pinned ? k->iface->to_device_pinned(k, dst, src_host, bytes)
                                    : k->iface->to_device(k, dst, src_host, bytes);
}
/* Backend -> host. Returns after all earlier work has finished and the data is in dst_host. */
static inline ps_status ps_kern_to_host(ps_kern *k, void *dst_host, const void *src,
                                        size_t bytes) {
  if (!k || ((!dst_host || !src) && bytes)) return PS_ERR_INVALID;
  return bytes ? k->iface->to_host(k, dst_host, src, bytes) : PS_OK;
}
/* Backend -> backend, non-overlapping. */
static inline ps_status ps_kern_copy(ps_kern *k, void *dst, const void *src, size_t bytes) {
  if (!k || ((!dst || !src) && bytes)) return PS_ERR_INVALID;
  return bytes ? k->iface->copy(k, dst, src, bytes) : PS_OK;
}
/* Waits for all enqueued work; reports any asynchronous error. */
static inline ps_status ps_kern_sync(ps_kern *k) {
  if (!k) return PS_ERR_INVALID;
  return k->iface->sync ? k->iface->sync(k) : PS_OK;
}

/* The backend's native stream (a cudaStream_t for CUDA), or NULL for a backend without one.
 * For libraries that enqueue their own work in the backend's order, e.g. NCCL's allreduce:
 * then no ps_kern_sync is needed between the model's kernels and the collective. */
static inline void *ps_kern_stream(ps_kern *k) {
  return k && k->iface->stream ? k->iface->stream(k) : NULL;
}

/* ---- compute ---------------------------------------------------------------------------- */

#define PS_KERN_CALL_(k, op, ...)                                  \
  ((!(k)) ? PS_ERR_INVALID                                         \
          : (!(k)->iface->op) ? PS_ERR_UNSUPPORTED : (k)->iface->op((k), __VA_ARGS__))

/* Row-major SGEMM: C[m, n] = alpha * op(A)[m, kk] * op(B)[kk, n] + beta * C.
 * op(A) = A ([m, kk], lda >= kk) or, with trans_a, A^T where A is [kk, m] (lda >= m); same for
 * B ([kk, n] with ldb >= n, or [n, kk] with ldb >= kk when trans_b). ldc >= n. With beta == 0,
 * C is not read (may hold NaN). */
static inline ps_status ps_kern_sgemm(ps_kern *k, bool trans_a, bool trans_b, int m, int n,
                                      int kk, float alpha, const float *a, int lda,
                                      const float *b, int ldb, float beta, float *c, int ldc) {
  if (m < 0 || n < 0 || kk < 0 || ldc < (n > 1 ? n : 1) ||
      lda < ((trans_a ? m : kk) > 1 ? (trans_a ? m : kk) : 1) ||
      ldb < ((trans_b ? kk : n) > 1 ? (trans_b ? kk : n) : 1))
    return PS_ERR_INVALID;
  if (m == 0 || n == 0) return PS_OK;
  return PS_KERN_CALL_(k, sgemm, trans_a, trans_b, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Whether ps_kern_gemm with PS_KERN_BF16 runs on k (the slot is built and the hardware has
 * the instructions); where not, the caller says so once and uses PS_KERN_FP32. */
static inline bool ps_kern_has_bf16(const ps_kern *k) {
  return k && k->bf16 && k->iface->gemm_bf16;
}
/* ps_kern_sgemm at precision prec: FP32, or bf16 inputs with FP32 accumulation (each input
 * rounded once; the error bound is in tests/kernels/test_kern_bf16.c). PS_ERR_UNSUPPORTED for
 * bf16 where !ps_kern_has_bf16(k). */
static inline ps_status ps_kern_gemm(ps_kern *k, ps_kern_prec prec, bool trans_a, bool trans_b,
                                     int m, int n, int kk, float alpha, const float *a, int lda,
                                     const float *b, int ldb, float beta, float *c, int ldc) {
  if (prec != PS_KERN_BF16)
    return ps_kern_sgemm(k, trans_a, trans_b, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
  if (m < 0 || n < 0 || kk < 0 || ldc < (n > 1 ? n : 1) ||
      lda < ((trans_a ? m : kk) > 1 ? (trans_a ? m : kk) : 1) ||
      ldb < ((trans_b ? kk : n) > 1 ? (trans_b ? kk : n) : 1))
    return PS_ERR_INVALID;
  if (!k) return PS_ERR_INVALID;
  if (m == 0 || n == 0) return PS_OK;
  if (!ps_kern_has_bf16(k)) return PS_ERR_UNSUPPORTED;
  return k->iface->gemm_bf16(k, trans_a, trans_b, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Fused bias + activation, forward: y[i, j] = act(x[i, j] + bias[j]); x, y [m, n], bias [n].
 * y may equal x (in place). */
static inline ps_status ps_kern_bias_act_fwd(ps_kern *k, ps_kern_act act, int m, int n,
                                             const float *x, const float *bias, float *y) {
  if (m < 0 || n < 0 || (act != PS_KERN_ACT_NONE && act != PS_KERN_ACT_RELU)) return PS_ERR_INVALID;
  if (m == 0 || n == 0) return PS_OK;
  return PS_KERN_CALL_(k, bias_act_fwd, act, m, n, x, bias, y);
}
/* Backward of bias_act_fwd, given its OUTPUT y [m, n] and the gradient dy [m, n]:
 * dx = dy * act'(y) (for ReLU: dy where y > 0, else 0), dbias[j] = sum_i dx[i, j].
 * dx may equal dy (in place). dbias [n] is overwritten (for m == 0 it is set to zero). */
static inline ps_status ps_kern_bias_act_bwd(ps_kern *k, ps_kern_act act, int m, int n,
                                             const float *y, const float *dy, float *dx,
                                             float *dbias) {
  if (m < 0 || n < 0 || (act != PS_KERN_ACT_NONE && act != PS_KERN_ACT_RELU)) return PS_ERR_INVALID;
  if (n == 0) return PS_OK;
  if (m == 0) return ps_kern_memset0(k, dbias, (size_t)n * sizeof(float));
  return PS_KERN_CALL_(k, bias_act_bwd, act, m, n, y, dy, dx, dbias);
}

/* Width of the dot interaction output for F = 1 + num_sparse vectors of `dim` floats:
 * dim + F * (F - 1) / 2 (the bottom output, then the strictly-lower-triangle dots). */
static inline int ps_kern_interact_width(int num_sparse, int dim) {
  int f = num_sparse + 1;
  return dim + f * (f - 1) / 2;
}
/* Dot interaction forward, as the DLRM reference's interact_features with
 * arch_interaction_op='dot', interaction_itself=False. Per sample b, the F = 1 + num_sparse
 * vectors are T[0] = bottom[b, :] and T[1 + s] = emb[b, s, :]. Output row
 *   out[b, :] = concat(bottom[b, :], { T[i] . T[j] : i = 1..F-1, j = 0..i-1 })
 * in that (i-major, then j) order. bottom [batch, dim], emb [batch, num_sparse, dim],
 * out [batch, ps_kern_interact_width(num_sparse, dim)]. */
static inline ps_status ps_kern_interact_fwd(ps_kern *k, int batch, int num_sparse, int dim,
                                             const float *bottom, const float *emb, float *out) {
  if (batch < 0 || num_sparse < 0 || dim <= 0) return PS_ERR_INVALID;
  if (batch == 0) return PS_OK;
  return PS_KERN_CALL_(k, interact_fwd, batch, num_sparse, dim, bottom, emb, out);
}
/* Dot interaction backward. dout [batch, width]; writes dbottom [batch, dim] (the pass-through
 * part plus the dot part) and demb [batch, num_sparse, dim]. */
static inline ps_status ps_kern_interact_bwd(ps_kern *k, int batch, int num_sparse, int dim,
                                             const float *bottom, const float *emb,
                                             const float *dout, float *dbottom, float *demb) {
  if (batch < 0 || num_sparse < 0 || dim <= 0) return PS_ERR_INVALID;
  if (batch == 0) return PS_OK;
  return PS_KERN_CALL_(k, interact_bwd, batch, num_sparse, dim, bottom, emb, dout, dbottom, demb);
}

/* Embedding-bag pooling forward over a gathered buffer of unique rows.
 * rows [nrows, dim] holds one row per unique key (as pulled from the servers); bag i covers
 * entries offsets[i] .. offsets[i+1]-1 of idx, each an index into rows.
 *   out[i, :] = sum_{j in bag i} rows[idx[j], :]       (bag i sums: see ps_kern_pool)
 *             = that sum / |bag i|                      (bag i takes the mean)
 * An empty bag gives a zero row. offsets [nbags + 1] with offsets[0] = 0, non-decreasing,
 * offsets[nbags] = nnz; idx [nnz] with values in [0, nrows). The DLRM model orders bags
 * sample-major: bag b * num_sparse + s is feature s of sample b, so out is [batch, num_sparse,
 * dim]. The caller validates idx and offsets (the model does, on the host, before upload);
 * a backend may additionally check and return PS_ERR_INVALID. */
static inline ps_status ps_kern_pool_fwd(ps_kern *k, ps_kern_pool mode, int nbags, int dim,
                                         int nrows, const float *rows, int nnz,
                                         const int32_t *idx, const int32_t *offsets, float *out) {
  if (nbags < 0 || dim <= 0 || nrows < 0 || nnz < 0 ||
      !ps_kern_pool_valid(mode))
    return PS_ERR_INVALID;
  if (nbags == 0) return PS_OK;
  return PS_KERN_CALL_(k, pool_fwd, mode, nbags, dim, nrows, rows, nnz, idx, offsets, out);
}
/* Embedding-bag pooling backward: drows [nrows, dim] is overwritten with, for each unique row
 * r, the sum over entries j with idx[j] == r of dout[bag(j), :] (scaled by 1/|bag| for a bag that takes the mean).
 * Rows no entry touches get zeros. dout [nbags, dim]. */
static inline ps_status ps_kern_pool_bwd(ps_kern *k, ps_kern_pool mode, int nbags, int dim,
                                         int nrows, int nnz, const int32_t *idx,
                                         const int32_t *offsets, const float *dout,
                                         float *drows) {
  if (nbags < 0 || dim <= 0 || nrows < 0 || nnz < 0 ||
      !ps_kern_pool_valid(mode))
    return PS_ERR_INVALID;
  if (nrows == 0) return PS_OK;
  if (nbags == 0) return ps_kern_memset0(k, drows, (size_t)nrows * dim * sizeof(float));
  return PS_KERN_CALL_(k, pool_bwd, mode, nbags, dim, nrows, nnz, idx, offsets, dout, drows);
}

/* Sigmoid + binary cross-entropy forward over n logits.
 * probs [n] (may be NULL) = sigmoid(logits). If labels [n] (values 0..1) is not NULL, loss
 * (backend memory, ONE float) = mean_i [ max(z,0) - z*y + log1p(exp(-|z|)) ], the stable form
 * of -[y log p + (1-y) log(1-p)]; with labels NULL, loss is not touched (eval forward). */
static inline ps_status ps_kern_bce_fwd(ps_kern *k, int n, const float *logits,
                                        const float *labels, float *probs, float *loss) {
  if (n < 0 || (labels && !loss)) return PS_ERR_INVALID;
  if (n == 0) return labels ? ps_kern_memset0(k, loss, sizeof(float)) : PS_OK;
  return PS_KERN_CALL_(k, bce_fwd, n, logits, labels, probs, loss);
}
/* Sigmoid + BCE backward: dlogits[i] = scale * (sigmoid(logits[i]) - labels[i]).
 * scale = 1/n gives the gradient of the mean loss. */
static inline ps_status ps_kern_bce_bwd(ps_kern *k, int n, const float *logits,
                                        const float *labels, float scale, float *dlogits) {
  if (n < 0) return PS_ERR_INVALID;
  if (n == 0) return PS_OK;
  return PS_KERN_CALL_(k, bce_bwd, n, logits, labels, scale, dlogits);
}

/* x[i] *= alpha over n floats (e.g. averaging gradients after an allreduce sum). */
static inline ps_status ps_kern_scale(ps_kern *k, size_t n, float alpha, float *x) {
  if (n == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, scale, n, alpha, x);
}

/* Dense optimizers over one flat buffer of n parameters w with gradients g, with exactly
 * torch.optim's update rules (no momentum / no amsgrad / maximize=False):
 * SGD:     g' = g + wd * w;  w -= lr * g'. */
static inline ps_status ps_kern_sgd(ps_kern *k, size_t n, float *w, const float *g, float lr,
                                    float weight_decay) {
  if (n == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, sgd, n, w, g, lr, weight_decay);
}
/* Adagrad: g' = g + wd * w;  state_sum += g'^2;  w -= clr * g' / (sqrt(state_sum) + eps),
 * where clr = lr / (1 + (step - 1) * lr_decay) is computed by the caller (torch's defaults:
 * eps 1e-10, initial state_sum 0). */
static inline ps_status ps_kern_adagrad(ps_kern *k, size_t n, float *w, const float *g,
                                        float *state_sum, float clr, float eps,
                                        float weight_decay) {
  if (n == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, adagrad, n, w, g, state_sum, clr, eps, weight_decay);
}
/* Adam (step = 1 for the first update; m, v start at zero):
 * g' = g + wd * w;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
 * w -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). */
static inline ps_status ps_kern_adam(ps_kern *k, size_t n, float *w, const float *g, float *m,
                                     float *v, float lr, float beta1, float beta2, float eps,
                                     float weight_decay, int64_t step) {
  if (step < 1) return PS_ERR_INVALID;
  if (n == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, adam, n, w, g, m, v, lr, beta1, beta2, eps, weight_decay, step);
}

/* Strided 2-D copy: dst[i * ldd + j] = src[i * lds + j] for i < rows, j < cols (lds, ldd >=
 * cols; the regions must not overlap). Row-wise concatenation is one call per part, writing
 * at a column offset of dst; the split of a gradient is the same with the roles swapped. */
static inline ps_status ps_kern_copy2d(ps_kern *k, int rows, int cols, const float *src, int lds,
                                       float *dst, int ldd) {
  if (rows < 0 || cols < 0 || lds < cols || ldd < cols) return PS_ERR_INVALID;
  if (rows == 0 || cols == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, copy2d, rows, cols, src, lds, dst, ldd);
}

/* The element-wise part of a DCNv2 cross layer (x_{l+1} = x0 * (W x_l + b) + x_l, TorchRec's
 * CrossNet / LowRankCrossNet), forward. Given z = x_l W^T (or x_l V^T U^T for the low-rank
 * form) from the GEMMs, over [m, n]:
 *   zb[i, j] = z[i, j] + bias[j];   y[i, j] = x0[i, j] * zb[i, j] + xl[i, j].
 * zb is kept for backward; zb may equal z, y may equal xl (in place). */
static inline ps_status ps_kern_cross_fwd(ps_kern *k, int m, int n, const float *x0,
                                          const float *z, const float *bias, const float *xl,
                                          float *zb, float *y) {
  if (m < 0 || n < 0) return PS_ERR_INVALID;
  if (m == 0 || n == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, cross_fwd, m, n, x0, z, bias, xl, zb, y);
}
/* Its backward, given dy = dL/dy [m, n] and the forward's x0 and zb:
 *   dz[i, j] = dy[i, j] * x0[i, j]                    (then db = column sums of dz, and the
 *                                                      GEMMs give dW and dL/dx_l)
 *   dx0[i, j] += dy[i, j] * (zb[i, j] + resid)        (ACCUMULATES over the layers)
 * resid is 1 for the first layer, whose x_l is x0 itself (its residual path lands in dx0),
 * else 0. dz and dx0 must not alias dy or each other. */
static inline ps_status ps_kern_cross_bwd(ps_kern *k, int m, int n, const float *x0,
                                          const float *zb, const float *dy, float resid,
                                          float *dz, float *dx0) {
  if (m < 0 || n < 0) return PS_ERR_INVALID;
  if (m == 0 || n == 0) return k ? PS_OK : PS_ERR_INVALID;
  return PS_KERN_CALL_(k, cross_bwd, m, n, x0, zb, dy, resid, dz, dx0);
}

#endif
