/* ps_store_optim: what a push does to a row (the sparse optimizers, whose arithmetic is
 * common/ps_optim.c, shared with ps-worker) and what a row is before any push (deterministic
 * initialization).
 *
 * - SGD, Adagrad and Adam follow torch.optim's float32 arithmetic operation by operation, so
 *   tests/embedding/opt_ref.py can compare bit for bit; row-wise Adagrad and FTRL use double
 *   intermediates and store float, the same as their numpy references.
 * - Initial values are a pure function of (table seed, key, element): the same on every shard,
 *   partition, thread and run, so an unseen key needs no stored row to be pulled. */
#include <math.h>
#include <string.h>

#include "ps_optim.h"
#include "ps_store_int.h"

size_t store_state_floats(const ps_table_spec *sp) { return ps_optim_state_floats(sp); }

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
  ps_optim_init_state(&t->spec, row_state(t, w), NULL); /* Adam's count: set above */
}

/* -------------------------------------------------------------- optimizers */

/* Applies one (already summed) gradient to a row: the arithmetic is ps_optim's (common/), the
 * one ps-worker's deep lookahead applies too. */
void store_apply_grad(const table *t, hentry *e, const float *g, uint64_t step) {
  const ps_table_spec *sp = &t->spec;
  const uint32_t d = sp->dim;
  void *row = ent_row(e);
  float wide[PS_TABLE_MAX_DIM];
  /* A 16-bit row is widened (exact), updated in f32 like an f32 row, and rounded once. */
  const bool narrow = tab_narrow(t);
  float *w = narrow ? wide : row;
  if (narrow) ps_row_widen(sp->row_type, row, w, d);
  e->step = step;
  ps_optim_apply(sp, w, row_state(t, row), row_adam_t(t, row), g);
  if (narrow) ps_row_narrow(sp->row_type, w, row, d);
}
