/* ps_dlrm_dcn: DLRM's DCNv2 interaction (MLPerf DLRMv2; TorchRec's LowRankCrossNet, and
 * CrossNet for full rank), the --interaction dcn alternative to the dot interaction.
 *
 *   x0 = [bottom output | pooled embedding of every sparse feature]     (D = (1 + S) * dim)
 *   x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l,  l = 0 .. L-1   (low rank R: V [R, D], U [D, R])
 *   x_{l+1} = x0 * (W_l x_l + b_l) + x_l                          (full rank: W [D, D])
 * and the top MLP takes x_L.
 *
 * Design decisions:
 * - Batched, each matrix product is one GEMM over the batch (row-major X [B, D]: X V^T, then
 *   (X V^T) U^T); only the element-wise residual product is a kernel of its own
 *   (ps_kern_cross_fwd / _bwd), and x0's concatenation a strided copy. Nothing here depends on
 *   the backend, so CPU and CUDA run this file unchanged.
 * - Backward keeps dL/dx_l in ONE buffer, updated in place (dL/dx_l = dL/dx_{l+1} + the GEMM
 *   path, an sgemm with beta = 1), and accumulates x0's gradient (x0 multiplies every layer)
 *   in dx0; layer 0, whose x_l is x0 itself, sends its residual and GEMM paths into dx0 too.
 * - Activations kept for backward: every x_l, zb_l = W x_l + b and t_l = V x_l, i.e.
 *   (L + 1) D + L (D + R) floats per sample — recomputing them would cost a GEMM per layer. */
#include "ps_dlrm_dcn_int.h"

#include <stdbool.h>
#include <string.h>

#define TRY(x)                    \
  do {                            \
    ps_status st_ = (x);          \
    if (st_ != PS_OK) return st_; \
  } while (0)

ps_status ps_dlrm_interaction_parse(const char *name, ps_dlrm_interaction *out) {
  if (!name || !out) return PS_ERR_INVALID;
  if (!strcmp(name, "dot")) *out = PS_DLRM_DOT;
  else if (!strcmp(name, "dcn")) *out = PS_DLRM_DCN;
  else return PS_ERR_INVALID;
  return PS_OK;
}

int ps_dlrm_cross_rank(int num_sparse, int emb_dim, int rank) {
  long quarter = (1L + num_sparse) * emb_dim / 4;
  return rank != PS_DLRM_RANK_AUTO ? rank : quarter > 1 ? (int)quarter : 1;
}

ps_status ps_dlrm_check_cross(int num_sparse, int emb_dim, int layers, int rank, ps_error *err) {
  long D = (1L + num_sparse) * emb_dim;
  rank = ps_dlrm_cross_rank(num_sparse, emb_dim, rank);
  if (layers < 1 || layers > PS_DLRM_MAX_CROSS)
    return ps_error_set(err, PS_ERR_INVALID, "dcn-layers %d: want 1 to %d", layers,
                        PS_DLRM_MAX_CROSS);
  if (rank < 0 || rank >= D)
    return ps_error_set(err, PS_ERR_INVALID, "dcn-rank %d: want 0 (full rank) or 1 to %ld, below "
                        "the cross width %ld = (1 + %d sparse features) x emb-dim %d", rank,
                        D - 1, D, num_sparse, emb_dim);
  return PS_OK;
}

size_t ps_dlrm_dcn_layout(ps_dlrm_dcn *c, int num_sparse, int dim, int layers, int rank,
                          size_t off) {
  c->layers = layers;
  c->rank = rank;
  c->dim = dim;
  c->S = num_sparse;
  c->D = (1 + num_sparse) * dim;
  size_t D = (size_t)c->D;
  c->per = (rank > 0 ? 2 * (size_t)rank * D : D * D) + D;
  c->off = off;
  return off + (size_t)layers * c->per;
}

void ps_dlrm_dcn_layer(const ps_dlrm_dcn *c, int l, ps_dlrm_cross_layer *out) {
  size_t D = (size_t)c->D, R = (size_t)c->rank, base = c->off + (size_t)l * c->per;
  out->dim = c->D;
  out->rank = c->rank;
  if (c->rank > 0) { /* V [R, D], U [D, R], b [D] */
    out->v_off = base;
    out->u_off = base + R * D;
    out->w_off = 0;
    out->b_off = base + 2 * R * D;
  } else { /* W [D, D], b [D] */
    out->v_off = out->u_off = 0;
    out->w_off = base;
    out->b_off = base + D * D;
  }
}

static ps_status kalloc(ps_kern *k, float **p, size_t n) {
  return ps_kern_alloc(k, n * sizeof(float), (void **)p);
}

ps_status ps_dlrm_dcn_alloc(ps_dlrm_dcn *c, ps_kern *k, int max_batch) {
  size_t BD = (size_t)max_batch * c->D, BR = (size_t)max_batch * c->rank, L = (size_t)c->layers;
  c->max_batch = max_batch;
  TRY(kalloc(k, &c->xs, (L + 1) * BD));
  TRY(kalloc(k, &c->zb, L * BD));
  TRY(kalloc(k, &c->dz, BD));
  TRY(kalloc(k, &c->dx0, BD));
  if (c->rank > 0) {
    TRY(kalloc(k, &c->t, L * BR));
    TRY(kalloc(k, &c->dt, BR));
  }
  return PS_OK;
}

void ps_dlrm_dcn_free(ps_dlrm_dcn *c, ps_kern *k) {
  float *bufs[] = {c->xs, c->zb, c->t, c->dz, c->dt, c->dx0};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ps_kern_free(k, bufs[i]);
  c->xs = c->zb = c->t = c->dz = c->dt = c->dx0 = NULL;
}

/* Activations of layer l for B rows (the batch's rows are packed at stride D). */
static float *x_of(const ps_dlrm_dcn *c, int l, int B) { return c->xs + (size_t)l * B * c->D; }
static float *zb_of(const ps_dlrm_dcn *c, int l, int B) { return c->zb + (size_t)l * B * c->D; }
static float *t_of(const ps_dlrm_dcn *c, int l, int B) { return c->t + (size_t)l * B * c->rank; }

ps_status ps_dlrm_dcn_forward(ps_dlrm_dcn *c, ps_kern *k, const float *params, int B,
                              const float *bottom, const float *pooled, const float **out) {
  const int D = c->D, R = c->rank, dim = c->dim;
  float *x0 = x_of(c, 0, B);
  TRY(ps_kern_copy2d(k, B, dim, bottom, dim, x0, D));
  TRY(ps_kern_copy2d(k, B, c->S * dim, pooled, c->S * dim, x0 + dim, D));
  for (int l = 0; l < c->layers; l++) {
    ps_dlrm_cross_layer L;
    ps_dlrm_dcn_layer(c, l, &L);
    float *xl = x_of(c, l, B), *zb = zb_of(c, l, B);
    if (R > 0) { /* t = x_l V^T [B, R]; z = t U^T [B, D] */
      float *t = t_of(c, l, B);
      TRY(ps_kern_gemm(k, c->prec, false, true, B, R, D, 1.0f, xl, D, params + L.v_off, D, 0.0f, t, R));
      TRY(ps_kern_gemm(k, c->prec, false, true, B, D, R, 1.0f, t, R, params + L.u_off, R, 0.0f, zb, D));
    } else { /* z = x_l W^T */
      TRY(ps_kern_gemm(k, c->prec, false, true, B, D, D, 1.0f, xl, D, params + L.w_off, D, 0.0f, zb, D));
    }
    TRY(ps_kern_cross_fwd(k, B, D, x0, zb, params + L.b_off, xl, zb, x_of(c, l + 1, B)));
  }
  *out = x_of(c, c->layers, B);
  return PS_OK;
}

ps_status ps_dlrm_dcn_backward(ps_dlrm_dcn *c, ps_kern *k, const float *params, float *grads,
                               int B, float *g, float *dbottom, float *dpooled) {
  const int D = c->D, R = c->rank, dim = c->dim;
  const float *x0 = x_of(c, 0, B);
  TRY(ps_kern_memset0(k, c->dx0, (size_t)B * D * sizeof(float)));
  for (int l = c->layers - 1; l >= 0; l--) {
    ps_dlrm_cross_layer L;
    ps_dlrm_dcn_layer(c, l, &L);
    const float *xl = x_of(c, l, B);
    /* dL/dx_l = g + (the GEMM path); for layer 0 both land in dx0 (x_0 is x0) */
    float *dxl = l == 0 ? c->dx0 : g;
    TRY(ps_kern_cross_bwd(k, B, D, x0, zb_of(c, l, B), g, l == 0 ? 1.0f : 0.0f, c->dz, c->dx0));
    TRY(ps_kern_bias_act_bwd(k, PS_KERN_ACT_NONE, B, D, c->dz, c->dz, c->dz, grads + L.b_off));
    if (R > 0) {
      /* dU [D, R] = dz^T t; dt [B, R] = dz U; dV [R, D] = dt^T x_l; dx_l += dt V */
      TRY(ps_kern_gemm(k, c->prec, true, false, D, R, B, 1.0f, c->dz, D, t_of(c, l, B), R, 0.0f,
                        grads + L.u_off, R));
      TRY(ps_kern_gemm(k, c->prec, false, false, B, R, D, 1.0f, c->dz, D, params + L.u_off, R, 0.0f,
                        c->dt, R));
      TRY(ps_kern_gemm(k, c->prec, true, false, R, D, B, 1.0f, c->dt, R, xl, D, 0.0f, grads + L.v_off, D));
      TRY(ps_kern_gemm(k, c->prec, false, false, B, D, R, 1.0f, c->dt, R, params + L.v_off, D, 1.0f, dxl,
                        D));
    } else {
      /* dW [D, D] = dz^T x_l; dx_l += dz W */
      TRY(ps_kern_gemm(k, c->prec, true, false, D, D, B, 1.0f, c->dz, D, xl, D, 0.0f, grads + L.w_off, D));
      TRY(ps_kern_gemm(k, c->prec, false, false, B, D, D, 1.0f, c->dz, D, params + L.w_off, D, 1.0f, dxl,
                        D));
    }
  }
  TRY(ps_kern_copy2d(k, B, dim, c->dx0, D, dbottom, dim));
  return ps_kern_copy2d(k, B, c->S * dim, c->dx0 + dim, D, dpooled, c->S * dim);
}

double ps_dlrm_dcn_flops(const ps_dlrm_dcn *c) {
  double D = c->D, R = c->rank;
  return c->layers * 6.0 * (R > 0 ? 2.0 * D * R : D * D);
}
