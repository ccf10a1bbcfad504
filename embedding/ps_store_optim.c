/* ps_store_optim: what a push does to a row (the sparse optimizers) and what a row is before
 * any push (deterministic initialization).
 *
 * - SGD, Adagrad and Adam follow torch.optim's float32 arithmetic operation by operation, so
 *   tests/embedding/opt_ref.py can compare bit for bit; row-wise Adagrad and FTRL use double
 *   intermediates and store float, the same as their numpy references.
 * - Initial values are a pure function of (table seed, key, element): the same on every shard,
 *   partition, thread and run, so an unseen key needs no stored row to be pulled. */
#include <math.h>
#include <string.h>

#include "ps_store_int.h"

size_t store_state_floats(const ps_table_spec *sp) {
  switch (sp->optimizer) {
    case PS_OPT_SGD: return 0;
    case PS_OPT_ADAGRAD: return sp->dim;
    case PS_OPT_ROWWISE_ADAGRAD: return 1;
    case PS_OPT_ADAM: return 2 * (size_t)sp->dim;
    case PS_OPT_FTRL: return 2 * (size_t)sp->dim;
  }
  return 0;
}

size_t store_val_bytes(const ps_table_spec *sp) {
  return ((size_t)sp->dim * ps_row_type_size(sp->row_type) + 3) & ~(size_t)3;
}

size_t ps_store_record_bytes(const ps_table_spec *spec) {
  return REC_HDR + ROW_META + store_val_bytes(spec) + 4 * store_state_floats(spec);
}

/* ------------------------------------------------------------ initializer */

/* Element j of a key's initial row uses the counter-based stream
 * r_j = ps_mix64(ps_hash_u64(key, seed) + j * golden): pure function of (seed, key, j), so the
 * value is the same on every shard, partition, thread and run. Normal uses Box-Muller on
 * consecutive pairs in double precision. */
static void init_row_f32(const ps_table_spec *spec, uint64_t key, float *row) {
  const uint64_t base = ps_hash_u64(key, spec->seed);
  const uint64_t gamma = 0x9e3779b97f4a7c15ull;
  const uint32_t dim = spec->dim;
  switch (spec->init) {
    case PS_INIT_UNIFORM: {
      const double a = spec->init_a, w = (double)spec->init_b - (double)spec->init_a;
      for (uint32_t j = 0; j < dim; j++) {
        double u = (double)(ps_mix64(base + j * gamma) >> 11) * 0x1.0p-53;
        float v = (float)(a + w * u);
        if (v >= spec->init_b && w > 0) v = nextafterf(spec->init_b, spec->init_a);
        row[j] = v;
      }
      break;
    }
    case PS_INIT_NORMAL: {
      const double sd = spec->init_a;
      for (uint32_t j = 0; j < dim; j += 2) {
        uint64_t r1 = ps_mix64(base + j * gamma), r2 = ps_mix64(base + (j + 1) * gamma);
        double u1 = ((double)(r1 >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        double u2 = (double)(r2 >> 11) * 0x1.0p-53;
        double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        row[j] = (float)(sd * rad * cos(th));
        if (j + 1 < dim) row[j + 1] = (float)(sd * rad * sin(th));
      }
      break;
    }
    default: memset(row, 0, sizeof(float) * dim); break;
  }
}

/* A 16-bit table's initial row is the f32 one rounded once: what it stores, and what a pull
 * of a key it never stored returns. */
void ps_store_init_row(const ps_table_spec *spec, uint64_t key, float *row) {
  init_row_f32(spec, key, row);
  if (spec->row_type == PS_ROW_F32) return;
  uint16_t h[PS_TABLE_MAX_DIM];
  ps_row_narrow(spec->row_type, row, h, spec->dim);
  ps_row_widen(spec->row_type, h, row, spec->dim);
}

void store_init_full_row(const table *t, uint64_t key, hentry *e, uint64_t step) {
  void *w = ent_row(e);
  e->step = step;
  uint32_t *at = row_adam_t(t, w);
  if (at) *at = 0;
  if (tab_narrow(t)) {
    float v[PS_TABLE_MAX_DIM];
    init_row_f32(&t->spec, key, v);
    ps_row_narrow(t->spec.row_type, v, w, t->spec.dim);
    if (t->spec.dim & 1) ((uint16_t *)w)[t->spec.dim] = 0; /* the padding: records are exact */
  } else {
    init_row_f32(&t->spec, key, w);
  }
  float *st = row_state(t, w);
  const uint32_t d = t->spec.dim;
  switch (t->spec.optimizer) {
    case PS_OPT_ADAGRAD:
      for (uint32_t j = 0; j < d; j++) st[j] = t->spec.initial_accumulator;
      break;
    case PS_OPT_ROWWISE_ADAGRAD: st[0] = t->spec.initial_accumulator; break;
    case PS_OPT_ADAM: memset(st, 0, sizeof(float) * 2 * d); break;
    case PS_OPT_FTRL: /* z = 0, n = initial accumulator */
      for (uint32_t j = 0; j < d; j++) st[j] = 0.0f;
      for (uint32_t j = 0; j < d; j++) st[d + j] = t->spec.initial_accumulator;
      break;
    default: break;
  }
}

/* -------------------------------------------------------------- optimizers */

/* Applies one (already summed) gradient to a row. SGD/Adagrad/Adam follow torch.optim's
 * float32 arithmetic operation by operation (Adam's bias corrections in double, as torch
 * computes them from Python floats); row-wise Adagrad and FTRL use double intermediates and
 * store float, the same as their numpy references in tests/embedding/. */
void store_apply_grad(const table *t, hentry *e, const float *g, uint64_t step) {
  const ps_table_spec *sp = &t->spec;
  const uint32_t d = sp->dim;
  void *row = ent_row(e);
  float *st = row_state(t, row), wide[PS_TABLE_MAX_DIM];
  /* A 16-bit row is widened (exact), updated in f32 like an f32 row, and rounded once. */
  const bool narrow = tab_narrow(t);
  float *w = narrow ? wide : row;
  if (narrow) ps_row_widen(sp->row_type, row, w, d);
  e->step = step;
  switch (sp->optimizer) {
    case PS_OPT_SGD: {
      const float nlr = -sp->lr;
      /* torch's add_(grad, alpha=-lr) is one fused multiply-add (bit-identical, checked). */
      for (uint32_t j = 0; j < d; j++) w[j] = fmaf(nlr, g[j], w[j]);
      break;
    }
    case PS_OPT_ADAGRAD: {
      const float nlr = -sp->lr, eps = sp->eps;
      for (uint32_t j = 0; j < d; j++) {
        st[j] = st[j] + g[j] * g[j];
        float den = sqrtf(st[j]) + eps;
        w[j] = w[j] + nlr * (g[j] / den);
      }
      break;
    }
    case PS_OPT_ROWWISE_ADAGRAD: {
      double s2 = 0;
      for (uint32_t j = 0; j < d; j++) s2 += (double)g[j] * g[j];
      st[0] = (float)((double)st[0] + s2 / d);
      const double den = sqrt((double)st[0]) + sp->eps;
      for (uint32_t j = 0; j < d; j++) w[j] = (float)((double)w[j] - (double)sp->lr * g[j] / den);
      break;
    }
    case PS_OPT_ADAM: {
      float *m = st, *v = st + d;
      const uint32_t ts = ++*row_adam_t(t, row);
      const double b1 = sp->beta1, b2 = sp->beta2;
      const float w1 = (float)(1.0 - b1), w2 = (float)(1.0 - b2), fb2 = sp->beta2;
      const double bc1 = 1.0 - pow(b1, ts), bc2 = 1.0 - pow(b2, ts);
      const float nstep = (float)(-((double)sp->lr / bc1));
      const float bc2s = (float)sqrt(bc2), eps = sp->eps;
      for (uint32_t j = 0; j < d; j++) {
        m[j] = m[j] + w1 * (g[j] - m[j]); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
        v[j] = v[j] * fb2 + w2 * (g[j] * g[j]);
        float den = sqrtf(v[j]) / bc2s + eps;
        w[j] = w[j] + nstep * (m[j] / den);
      }
      break;
    }
    case PS_OPT_FTRL: {
      /* McMahan et al. 2013, per coordinate, generalized to n^(-lr_power); alpha = lr,
       * beta = eps. */
      float *z = st, *n = st + d;
      const double alpha = sp->lr, beta = sp->eps, l1 = sp->l1, l2 = sp->l2;
      const double pw = -(double)sp->lr_power;
      const int use_sqrt = sp->lr_power == -0.5f;
      for (uint32_t j = 0; j < d; j++) {
        const double gj = g[j], nold = n[j], nnew = nold + gj * gj;
        const double pold = use_sqrt ? sqrt(nold) : pow(nold, pw);
        const double pnew = use_sqrt ? sqrt(nnew) : pow(nnew, pw);
        const double sigma = (pnew - pold) / alpha;
        const double zn = (double)z[j] + gj - sigma * (double)w[j];
        z[j] = (float)zn;
        n[j] = (float)nnew;
        if (fabs(zn) <= l1) {
          w[j] = 0.0f;
        } else {
          const double sgn = zn < 0 ? -1.0 : 1.0;
          w[j] = (float)(-(zn - sgn * l1) / ((beta + pnew) / alpha + l2));
        }
      }
      break;
    }
  }
  if (narrow) ps_row_narrow(sp->row_type, w, row, d);
}
