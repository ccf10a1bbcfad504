/* A whole DLRM training step (worker/model, ps_dlrm.h) on the CUDA backend against the same
 * step on the CPU backend: same parameters, same batch; the loss, the probabilities, every
 * dense gradient (each layer's W and b separately) and every embedding-row gradient must
 * agree to 1e-4 relative, and so must the parameters after each optimizer step (taken by
 * both from the same gradients), over three steps.
 *
 * Batches are multi-hot with empty bags and rows shared between bags and samples, so the
 * pooling backward's per-unique-row aggregation is exercised; sizes include batch 1 and an
 * odd batch. The CPU model was itself checked against PyTorch (tests/model), so agreement
 * here ties the CUDA backend to the reference too. Exits 77 (SKIPPED) without a GPU.
 * Also built as test_cuda_dlrm_emu over tests/cuda/emu (runs everywhere, smaller batch).
 * The same with the DCNv2 interaction, low rank and full rank (test_dcn_shapes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define CT_BACKENDS 1 /* CPU and GPU, ct_setup and ct_teardown */
#include "cuda_test_util.h"
#include "ps_dlrm.h"
#include "ps_kernels.h"

#define TOL 1e-4

typedef struct host_batch {
  ps_dlrm_batch b;
  float *dense, *labels, *rows;
  int32_t *idx, *off;
} host_batch;

/* B samples, S features, rows of dim D; bags of 0..maxlen entries over a pool of nrows
 * unique rows (so repeats are common); label correlated with nothing (it is a gradient test). */
static host_batch make_batch(ct_rng *r, int B, int nd, int S, int D, int nrows, int maxlen) {
  host_batch h;
  memset(&h, 0, sizeof h);
  int nb = B * S;
  h.dense = malloc((size_t)B * nd * sizeof(float));
  h.labels = malloc((size_t)B * sizeof(float));
  h.rows = malloc((size_t)nrows * D * sizeof(float));
  h.off = malloc(((size_t)nb + 1) * sizeof(int32_t));
  h.idx = malloc(((size_t)nb * maxlen + 1) * sizeof(int32_t));
  for (size_t i = 0; i < (size_t)B * nd; i++) h.dense[i] = logf(1.0f + ct_uniform(r, 0, 100));
  for (int i = 0; i < B; i++) h.labels[i] = (float)ct_int(r, 2);
  ct_fill(r, h.rows, (size_t)nrows * D, -0.05f, 0.05f);
  int nnz = 0;
  h.off[0] = 0;
  for (int i = 0; i < nb; i++) {
    int len = ct_int(r, 6) == 0 ? 0 : 1 + ct_int(r, maxlen);
    for (int j = 0; j < len; j++) h.idx[nnz++] = ct_int(r, nrows);
    h.off[i + 1] = nnz;
  }
  h.b = (ps_dlrm_batch){.batch = B,
                        .dense = h.dense,
                        .labels = h.labels,
                        .nrows = nrows,
                        .rows = h.rows,
                        .nnz = nnz,
                        .idx = h.idx,
                        .offsets = h.off};
  return h;
}

static void free_batch(host_batch *h) {
  free(h->dense);
  free(h->labels);
  free(h->rows);
  free(h->idx);
  free(h->off);
}

typedef struct shape {
  const char *bot, *top;
  int S, D, B, nrows, maxlen;
  ps_kern_pool pool;
  ps_dlrm_opt_kind opt;
  int dcn_layers, dcn_rank; /* dcn_layers 0: the dot interaction */
} shape;

static void run_shape(const shape *sh) {
  ps_dlrm_config cfg;
  ps_dlrm_config_shape(&cfg, sh->bot, sh->top, sh->D, sh->S, sh->B);
  cfg.pool = sh->pool;
  cfg.seed = 7;
  if (sh->dcn_layers > 0) {
    cfg.interaction = PS_DLRM_DCN;
    cfg.dcn_layers = sh->dcn_layers;
    cfg.dcn_rank = sh->dcn_rank;
  }
  ps_dlrm *mc = NULL, *mg = NULL;
  assert_int_equal(ps_dlrm_create(CPU, &cfg, &mc, NULL), PS_OK);
  assert_int_equal(ps_dlrm_create(GPU, &cfg, &mg, NULL), PS_OK);
  size_t np = ps_dlrm_num_params(mc);
  assert_int_equal(np, ps_dlrm_num_params(mg));
  float *pc = malloc(np * sizeof(float)), *pg = malloc(np * sizeof(float));
  /* Same replica on both: the CPU's initial parameters go to the GPU model. */
  assert_int_equal(ps_dlrm_get_params(mc, pc, np), PS_OK);
  assert_int_equal(ps_dlrm_set_params(mg, pc, np), PS_OK);
  int nd = ps_dlrm_num_dense(mc);
  int nl = ps_dlrm_num_layers(mc, NULL, NULL);
  ps_dlrm_opt opt = ps_dlrm_opt_default(sh->opt, sh->opt == PS_DLRM_OPT_ADAM ? 1e-3f : 0.05f);
  ct_rng r = {(uint64_t)sh->B * 131 + (uint64_t)sh->S};
  for (int step = 0; step < 3; step++) {
    host_batch h = make_batch(&r, sh->B, nd, sh->S, sh->D, sh->nrows, sh->maxlen);
    float lc = 0, lg = 0;
    assert_int_equal(ps_dlrm_forward(mc, &h.b, &lc), PS_OK);
    assert_int_equal(ps_dlrm_forward(mg, &h.b, &lg), PS_OK);
    if (!(fabsf(lg - lc) <= TOL * fabsf(lc)))
      fail_msg("%s/%s B=%d step %d: loss cpu %.8g cuda %.8g", sh->bot, sh->top, sh->B, step, lc,
               lg);
    float *prc = malloc((size_t)sh->B * sizeof(float)),
          *prg = malloc((size_t)sh->B * sizeof(float));
    assert_int_equal(ps_dlrm_last_probs(mc, prc), PS_OK);
    assert_int_equal(ps_dlrm_last_probs(mg, prg), PS_OK);
    double pe = ct_norm_err(prg, prc, (size_t)sh->B);
    if (!(pe <= TOL)) fail_msg("B=%d step %d: probabilities differ by %.3g", sh->B, step, pe);
    size_t ne = (size_t)sh->nrows * sh->D;
    float *ec = malloc(ne * sizeof(float)), *eg = malloc(ne * sizeof(float));
    assert_int_equal(ps_dlrm_backward(mc, ec), PS_OK);
    assert_int_equal(ps_dlrm_backward(mg, eg), PS_OK);
    double ee = ct_norm_err(eg, ec, ne);
    if (!(ee <= TOL))
      fail_msg("B=%d step %d: embedding-row gradients differ by %.3g", sh->B, step, ee);
    assert_int_equal(ps_dlrm_get_grads(mc, pc, np), PS_OK);
    assert_int_equal(ps_dlrm_get_grads(mg, pg, np), PS_OK);
    for (int l = 0; l < nl; l++) {
      ps_dlrm_layer L;
      assert_int_equal(ps_dlrm_layer_info(mc, l, &L), PS_OK);
      double we = ct_norm_err(pg + L.w_off, pc + L.w_off, (size_t)L.in * L.out);
      double be = ct_norm_err(pg + L.b_off, pc + L.b_off, (size_t)L.out);
      if (!(we <= TOL && be <= TOL))
        fail_msg("B=%d step %d layer %d (%dx%d): dW err %.3g, db err %.3g", sh->B, step, l, L.out,
                 L.in, we, be);
    }
    for (int l = 0; l < ps_dlrm_num_cross(mc); l++) {
      ps_dlrm_cross_layer C;
      assert_int_equal(ps_dlrm_cross_info(mc, l, &C), PS_OK);
      size_t D = (size_t)C.dim, R = (size_t)C.rank;
      double ve = R ? ct_norm_err(pg + C.v_off, pc + C.v_off, R * D) : 0;
      double ue = R ? ct_norm_err(pg + C.u_off, pc + C.u_off, D * R) : 0;
      double we = R ? 0 : ct_norm_err(pg + C.w_off, pc + C.w_off, D * D);
      double be = ct_norm_err(pg + C.b_off, pc + C.b_off, D);
      if (!(ve <= TOL && ue <= TOL && we <= TOL && be <= TOL))
        fail_msg("B=%d step %d cross layer %d (D %zu, rank %zu): dV %.3g dU %.3g dW %.3g db %.3g",
                 sh->B, step, l, D, R, ve, ue, we, be);
    }
    /* Both replicas step from the CPU's gradients. Adagrad's and Adam's first steps move w by
     * about lr * g / (|g| + eps) — by a sizeable fraction of lr even for a gradient that is a
     * rounding residual (~1e-11 on one backend, 0 on the other, e.g. dW of a column this batch
     * never activates) — so stepping from each backend's own gradients would compare that
     * amplification, not the backends. The gradients were compared above. */
    float *gc = malloc(np * sizeof(float));
    memcpy(gc, pc, np * sizeof(float));
    assert_int_equal(ps_kern_to_device(GPU, ps_dlrm_grads(mg), gc, np * sizeof(float)), PS_OK);
    assert_int_equal(ps_dlrm_step(mc, &opt), PS_OK);
    assert_int_equal(ps_dlrm_step(mg, &opt), PS_OK);
    assert_int_equal(ps_dlrm_get_params(mc, pc, np), PS_OK);
    assert_int_equal(ps_dlrm_get_params(mg, pg, np), PS_OK);
    double we = ct_norm_err(pg, pc, np);
    if (!(we <= TOL)) {
      size_t worst = 0;
      for (size_t i = 0; i < np; i++)
        if (fabsf(pg[i] - pc[i]) > fabsf(pg[worst] - pc[worst])) worst = i;
      fail_msg(
          "B=%d step %d: parameters after the update differ by %.3g (param %zu: cpu %g cuda "
          "%g, cpu grad %g)",
          sh->B, step, we, worst, pc[worst], pg[worst], gc[worst]);
    }
    free(gc);
    printf("  %s | %s S=%d D=%d B=%d pool=%d opt=%d dcn=%d/%d step %d: loss %.6f/%.6f, grads ok\n",
           sh->bot, sh->top, sh->S, sh->D, sh->B, (int)sh->pool.mean, (int)sh->opt, sh->dcn_layers,
           sh->dcn_rank, step, lc, lg);
    free(prc);
    free(prg);
    free(ec);
    free(eg);
    free_batch(&h);
  }
  free(pc);
  free(pg);
  ps_dlrm_destroy(&mc);
  ps_dlrm_destroy(&mg);
}

static void test_kaggle_shape(void **st) {
  (void)st;
  const shape s[] = {
      {"13-512-256-64-16", "512-256-1", 26, 16, 1, 20, 2, PS_KERN_POOL_SUM, PS_DLRM_OPT_SGD, 0, 0},
      {"13-512-256-64-16", "512-256-1", 26, 16, 67, 500, 3, PS_KERN_POOL_SUM, PS_DLRM_OPT_ADAGRAD, 0, 0},
#ifdef PS_CU_EMULATE /* tests/cuda/emu: kernels on CPU threads, a smaller batch */
      {"13-512-256-64-16", "512-256-1", 26, 16, 200, 3000, 2, PS_KERN_POOL_SUM, PS_DLRM_OPT_ADAM, 0, 0},
#else
      {"13-512-256-64-16", "512-256-1", 26, 16, 1024, 20000, 2, PS_KERN_POOL_SUM, PS_DLRM_OPT_ADAM, 0, 0},
#endif
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) run_shape(&s[i]);
}

static void test_odd_shapes(void **st) {
  (void)st;
  const shape s[] = {
      {"7-33-5", "17-1", 3, 5, 9, 4, 4, PS_KERN_POOL_MEAN, PS_DLRM_OPT_ADAM, 0, 0},
      {"13-64-32", "31-7-1", 1, 32, 33, 40, 1, PS_KERN_POOL_MEAN, PS_DLRM_OPT_SGD, 0, 0},
      /* per-feature pooling: features 0 and 2 of 3 by mean, 1 by sum */
      {"7-33-5", "17-1", 3, 5, 9, 4, 4, {5, 3}, PS_DLRM_OPT_ADAM, 0, 0},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) run_shape(&s[i]);
}

static void test_dcn_shapes(void **st) {
  (void)st;
  const shape s[] = {
      {"13-64-16", "64-1", 26, 16, 1, 20, 2, PS_KERN_POOL_SUM, PS_DLRM_OPT_SGD, 3, 64},
#ifdef PS_CU_EMULATE
      {"13-64-16", "64-1", 26, 16, 67, 500, 3, PS_KERN_POOL_SUM, PS_DLRM_OPT_ADAGRAD, 3, 64},
#else
      {"13-512-256-64-16", "512-256-1", 26, 16, 1024, 20000, 3, PS_KERN_POOL_SUM,
       PS_DLRM_OPT_ADAGRAD, 3, 64},
#endif
      {"7-33-5", "17-1", 3, 5, 9, 4, 4, PS_KERN_POOL_MEAN, PS_DLRM_OPT_ADAM, 2, 0},
      {"13-64-32", "31-7-1", 1, 32, 33, 40, 1, PS_KERN_POOL_MEAN, PS_DLRM_OPT_SGD, 1, 7},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) run_shape(&s[i]);
}

int main(void) {
  ct_require_gpu("test_cuda_dlrm");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kaggle_shape),
      cmocka_unit_test(test_odd_shapes),
      cmocka_unit_test(test_dcn_shapes),
  };
  return cmocka_run_group_tests_name("cuda_dlrm", tests, ct_setup, ct_teardown);
}
