/* ps_cuda_kernels: C-callable launchers of the .cu kernels behind the CUDA backend.
 *
 * Each launcher enqueues its kernel(s) on `s` and returns cudaGetLastError() (launch errors;
 * faults inside a kernel surface at a later synchronising call). Shapes and semantics are
 * those of the matching ps_kern_* operation in kernels/ps_kernels.h; the backend
 * (ps_kernels_cuda.c) has already validated sizes and handles the zero-size cases, so every
 * size here is >= 1 unless noted. Nothing here allocates: scratch space is passed in, sized by
 * the *_ws_floats helpers. */
#ifndef PS_CUDA_KERNELS_H
#define PS_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-side error flags (bit set by a kernel that met bad input, read by the host after a
 * synchronising call). */
enum { PS_CU_ERR_INDEX = 1 };

/* y = act(x + bias) per row; act 0 = none, 1 = ReLU. y may equal x. */
cudaError_t ps_cu_bias_act_fwd(cudaStream_t s, int act, int m, int n, const float *x,
                               const float *bias, float *y);

/* dx = dy * act'(y); dbias[j] = sum_i dx[i, j], summed in a fixed order (deterministic).
 * ws holds ps_cu_colsum_ws_floats(m, n) floats. dx may equal dy. */
size_t ps_cu_colsum_ws_floats(int m, int n);
cudaError_t ps_cu_bias_act_bwd(cudaStream_t s, int act, int m, int n, const float *y,
                               const float *dy, float *dx, float *dbias, float *ws);

/* DLRM dot interaction (see ps_kern_interact_fwd). num_sparse >= 0. */
cudaError_t ps_cu_interact_fwd(cudaStream_t s, int batch, int num_sparse, int dim,
                               const float *bottom, const float *emb, float *out);
cudaError_t ps_cu_interact_bwd(cudaStream_t s, int batch, int num_sparse, int dim,
                               const float *bottom, const float *emb, const float *dout,
                               float *dbottom, float *demb);

/* Embedding-bag pooling; bag i takes the mean when bit (i % period) of mean is set (ps_kern_pool),
 * else the sum. Bad offsets/indices are skipped and flag
 * PS_CU_ERR_INDEX in *err (device-visible memory). pool_bwd zeroes drows itself and
 * aggregates repeated rows with atomicAdd. nnz may be 0. */
cudaError_t ps_cu_pool_fwd(cudaStream_t s, uint64_t mean, unsigned period, int nbags, int dim,
                           int nrows, const float *rows, int nnz, const int32_t *idx,
                           const int32_t *offsets, float *out, int *err);
cudaError_t ps_cu_pool_bwd(cudaStream_t s, uint64_t mean, unsigned period, int nbags, int dim,
                           int nrows, int nnz, const int32_t *idx, const int32_t *offsets,
                           const float *dout, float *drows, int *err);

/* Sigmoid + BCE. probs may be NULL; labels NULL skips the loss. The mean loss goes to *loss
 * (device). ws holds ps_cu_bce_ws_floats(n) floats; counter is one device unsigned int that
 * must be zero before the first call (the kernel leaves it at zero again). */
size_t ps_cu_bce_ws_floats(int n);
cudaError_t ps_cu_bce_fwd(cudaStream_t s, int n, const float *logits, const float *labels,
                          float *probs, float *loss, float *ws, unsigned int *counter);
cudaError_t ps_cu_bce_bwd(cudaStream_t s, int n, const float *logits, const float *labels,
                          float scale, float *dlogits);

/* Element-wise updates over n floats (torch.optim's rules, see ps_kernels.h). */
cudaError_t ps_cu_scale(cudaStream_t s, size_t n, float alpha, float *x);
cudaError_t ps_cu_sgd(cudaStream_t s, size_t n, float *w, const float *g, float lr, float wd);
cudaError_t ps_cu_adagrad(cudaStream_t s, size_t n, float *w, const float *g, float *sum, float clr,
                          float eps, float wd);
/* step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t), computed by the caller in double. */
cudaError_t ps_cu_adam(cudaStream_t s, size_t n, float *w, const float *g, float *m, float *v,
                       float beta1, float beta2, float eps, float wd, float step_size,
                       float bc2_sqrt);

/* DCNv2 cross layer, element-wise part (see ps_kern_cross_fwd / ps_kern_cross_bwd). */
cudaError_t ps_cu_cross_fwd(cudaStream_t s, int m, int n, const float *x0, const float *z,
                            const float *bias, const float *xl, float *zb, float *y);
cudaError_t ps_cu_cross_bwd(cudaStream_t s, int m, int n, const float *x0, const float *zb,
                            const float *dy, float resid, float *dz, float *dx0);

/* dst [rows, cols] (bf16 bits, row-major, compact) = src [rows, cols] (leading dimension ld)
 * rounded to nearest even: the inputs of the backend's bf16 GEMM. rows, cols >= 1. */
cudaError_t ps_cu_to_bf16(cudaStream_t s, int rows, int cols, const float *src, int ld,
                          uint16_t *dst);

#ifdef __cplusplus
}
#endif

#endif
