/* ps_optim: the sparse optimizers (see ps_optim.h). Moved here unchanged from the store's
 * ps_store_optim.c so that ps-worker can apply exactly a shard's update. */
#include "ps_optim.h"

#include <math.h>
#include <string.h>

size_t ps_optim_state_floats(const ps_table_spec *sp) {
  switch (sp->optimizer) {
    case PS_OPT_SGD: return 0;
    case PS_OPT_ADAGRAD: return sp->dim;
    case PS_OPT_ROWWISE_ADAGRAD: return 1;
    case PS_OPT_ADAM: return 2 * (size_t)sp->dim;
    case PS_OPT_FTRL: return 2 * (size_t)sp->dim;
  }
  return 0;
}

size_t ps_optim_row_floats(const ps_table_spec *sp) {
  return sp->dim + ps_optim_state_floats(sp) + (sp->optimizer == PS_OPT_ADAM ? 1u : 0u);
}

void ps_optim_init_state(const ps_table_spec *sp, float *st, uint32_t *adam_t) {
  const uint32_t d = sp->dim;
  if (adam_t) *adam_t = 0;
  switch (sp->optimizer) {
    case PS_OPT_ADAGRAD:
      for (uint32_t j = 0; j < d; j++) st[j] = sp->initial_accumulator;
      break;
    case PS_OPT_ROWWISE_ADAGRAD: st[0] = sp->initial_accumulator; break;
    case PS_OPT_ADAM: memset(st, 0, sizeof(float) * 2 * d); break;
    case PS_OPT_FTRL: /* z = 0, n = initial accumulator */
      for (uint32_t j = 0; j < d; j++) st[j] = 0.0f;
      for (uint32_t j = 0; j < d; j++) st[d + j] = sp->initial_accumulator;
      break;
    default: break;
  }
}

/* SGD/Adagrad/Adam follow torch.optim's float32 arithmetic operation by operation (Adam's bias
 * corrections in double, as torch computes them from Python floats); row-wise Adagrad and FTRL
 * use double intermediates and store float, the same as their numpy references. */
void ps_optim_apply(const ps_table_spec *sp, float *w, float *st, uint32_t *adam_t,
                    const float *g) {
  const uint32_t d = sp->dim;
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
      const uint32_t ts = ++*adam_t;
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
}
