/* ps_dlrm_dcn_int: the DCNv2 cross network of ps_dlrm (--interaction dcn), private to
 * worker/model/. ps_dlrm.c owns the flat parameter and gradient buffers and places the cross
 * block in them (ps_dlrm_dcn_layout); this part owns its activations and workspace and runs
 * forward and backward through ps_kernels.h: the GEMMs are ps_kern_gemm (BLAS / cuBLAS, FP32 or bf16),
 * the element-wise part ps_kern_cross_fwd / _bwd, x0's concatenation and its gradient's split
 * ps_kern_copy2d, the bias gradients bias_act_bwd's column sums. */
#ifndef PS_DLRM_DCN_INT_H
#define PS_DLRM_DCN_INT_H

#include <stddef.h>

#include "ps_dlrm.h"
#include "ps_kernels.h"

typedef struct ps_dlrm_dcn {
  int layers, rank; /* rank 0: full-rank W_l */
  ps_kern_prec prec; /* of the GEMMs, set by ps_dlrm_create */
  int dim, S, D;    /* emb_dim, sparse features, D = (1 + S) * dim */
  size_t off, per;  /* first float of the block, floats per layer */
  /* workspace for max_batch rows: xs = x_0 .. x_L ([L + 1][B, D], x_0 the concatenation),
   * zb[l] = W x_l + b ([L][B, D]), t[l] = V x_l ([L][B, R], low rank), and backward's dz
   * [B, D], dt [B, R], dx0 [B, D] */
  int max_batch;
  float *xs, *zb, *t, *dz, *dt, *dx0;
} ps_dlrm_dcn;

/* Fixes the block's shape and offsets, starting at float `off`; returns the offset after it.
 * The shape must have passed ps_dlrm_check_cross. */
size_t ps_dlrm_dcn_layout(ps_dlrm_dcn *c, int num_sparse, int dim, int layers, int rank,
                          size_t off);
void ps_dlrm_dcn_layer(const ps_dlrm_dcn *c, int l, ps_dlrm_cross_layer *out);
ps_status ps_dlrm_dcn_alloc(ps_dlrm_dcn *c, ps_kern *k, int max_batch);
void ps_dlrm_dcn_free(ps_dlrm_dcn *c, ps_kern *k);
/* Forward over B rows: x0 = [bottom [B, dim] | pooled [B, S * dim]], then the L layers;
 * *out = x_L [B, D] (workspace, valid until the next forward). */
ps_status ps_dlrm_dcn_forward(ps_dlrm_dcn *c, ps_kern *k, const float *params, int B,
                              const float *bottom, const float *pooled, const float **out);
/* Backward of the last forward: g [B, D] holds dL/dx_L and is used as scratch; writes the
 * block's gradients into grads (same layout as params), dbottom [B, dim] and dpooled
 * [B, S * dim]. */
ps_status ps_dlrm_dcn_backward(ps_dlrm_dcn *c, ps_kern *k, const float *params, float *grads,
                               int B, float *g, float *dbottom, float *dpooled);
/* GEMM FLOPs of forward + backward per sample. */
double ps_dlrm_dcn_flops(const ps_dlrm_dcn *c);

#endif
