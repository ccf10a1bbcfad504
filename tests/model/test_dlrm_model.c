/* test_dlrm_model: ps_dlrm's own checks in C (the PyTorch comparison is dlrm_ref.py).
 * Config parsing and validation, the flat-buffer layout of the Kaggle shape, the reference
 * init's statistics, a finite-difference check of the whole model (dense params and
 * embedding rows), refusal of bad batches, eval vs training probabilities, and that SGD steps
 * lower the loss. The same for the DCNv2 interaction: its shape rules and messages, its
 * layout and TorchRec init on the Kaggle shape, finite differences low rank and full rank,
 * and the device (staging) path. bf16 precision: gradients by finite differences, and the
 * FP32 fallback. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ps_test_kern.h"
#include "ps_test_main.h"

#include "ps_dlrm.h"
#include "ps_kernels.h"

static ps_kern *K;

PS_TEST_KERN_FIXTURE(K, 2)

static ps_status make(const char *bot, const char *top, int dim, int S, int maxb, ps_dlrm **m) {
  ps_dlrm_config c;
  ps_dlrm_config_shape(&c, bot, top, dim, S, maxb);
  return ps_dlrm_create(K, &c, m, NULL);
}

static void test_config(void **st) {
  (void)st;
  ps_dlrm *m = NULL;
  int dims[8];
  assert_int_equal(ps_dlrm_parse_mlp("13-512-256", dims, 8), 3);
  assert_int_equal(dims[2], 256);
  assert_int_equal(ps_dlrm_parse_mlp("13--5", dims, 8), -1);
  assert_int_equal(ps_dlrm_parse_mlp("13-x", dims, 8), -1);
  assert_int_equal(ps_dlrm_parse_mlp("", dims, 8), -1);
  assert_int_equal(ps_dlrm_parse_mlp("13-0-1", dims, 8), -1);
  assert_int_equal(ps_dlrm_parse_mlp("1-2-3", dims, 2), -1);
  assert_int_equal(ps_dlrm_parse_mlp("13-", dims, 8), -1);
  assert_int_equal(make("13-512-256-64-8", "512-256-1", 16, 26, 8, &m), PS_ERR_INVALID); /* bottom != dim */
  assert_null(m);
  assert_int_equal(make("13-512-256-64-16", "512-256-2", 16, 26, 8, &m), PS_ERR_INVALID); /* not a logit */
  assert_int_equal(make("13", "1", 16, 26, 8, &m), PS_ERR_INVALID);
  /* the reason comes back in err, naming the flag's value */
  ps_dlrm_config bad;
  ps_error err;
  ps_dlrm_config_shape(&bad, "13-512-256-64-16", "512-256-2", 16, 26, 8);
  assert_int_equal(ps_dlrm_create(K, &bad, &m, &err), PS_ERR_INVALID);
  assert_int_equal(err.code, PS_ERR_INVALID);
  assert_string_equal(err.msg, "mlp-top '512-256-2' must end in 1 (the logit)");
  assert_int_equal(make("13-16", "1", 16, 26, 0, &m), PS_ERR_INVALID);
  assert_int_equal(make("13-16", "1", 16, 26, 4, &m), PS_OK); /* top = one linear layer 367 -> 1 */
  ps_dlrm_layer L;
  assert_int_equal(ps_dlrm_layer_info(m, 1, &L), PS_OK);
  assert_int_equal(L.in, 367);
  assert_int_equal(L.relu, 0);
  ps_dlrm_destroy(&m);
  assert_null(m);
  ps_dlrm_opt_kind k;
  assert_int_equal(ps_dlrm_opt_parse("adam", &k), PS_OK);
  assert_int_equal(k, PS_DLRM_OPT_ADAM);
  assert_int_equal(ps_dlrm_opt_parse("rmsprop", &k), PS_ERR_INVALID);
  /* a shape over garbage: the five given fields, the documented defaults for the rest */
  ps_dlrm_config c;
  memset(&c, 0x5a, sizeof c);
  ps_dlrm_config_shape(&c, "7-3", "5-1", 3, 2, 9);
  assert_string_equal(c.mlp_bot, "7-3");
  assert_string_equal(c.mlp_top, "5-1");
  assert_int_equal(c.emb_dim, 3);
  assert_int_equal(c.num_sparse, 2);
  assert_int_equal(c.max_batch, 9);
  assert_true(c.pool.mean == 0 && c.pool.period == 1);
  assert_true(c.seed == 1);
}

static void test_kaggle_layout_and_init(void **st) {
  (void)st;
  ps_dlrm *m = NULL;
  ps_dlrm_config c;
  ps_dlrm_config_default(&c);
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  int nb, nt;
  assert_int_equal(ps_dlrm_num_layers(m, &nb, &nt), 7);
  assert_int_equal(nb, 4);
  assert_int_equal(nt, 3);
  assert_int_equal(ps_dlrm_interact_width(m), 16 + 27 * 26 / 2);
  assert_int_equal(ps_dlrm_num_dense(m), 13);
  const int ins[7] = {13, 512, 256, 64, 367, 512, 256}, outs[7] = {512, 256, 64, 16, 512, 256, 1};
  size_t off = 0, macs = 0;
  for (int l = 0; l < 7; l++) {
    ps_dlrm_layer L;
    assert_int_equal(ps_dlrm_layer_info(m, l, &L), PS_OK);
    assert_int_equal(L.in, ins[l]);
    assert_int_equal(L.out, outs[l]);
    assert_int_equal(L.w_off, off); /* W then b, contiguous, bottom then top */
    assert_int_equal(L.b_off, off + (size_t)ins[l] * outs[l]);
    assert_int_equal(L.relu, l != 6);
    off += (size_t)ins[l] * outs[l] + outs[l];
    macs += (size_t)ins[l] * outs[l];
  }
  assert_int_equal(ps_dlrm_num_params(m), off);
  assert_true(fabs(ps_dlrm_flops_per_sample(m) - 6.0 * macs) < 1);
  /* init statistics: W ~ N(0, sqrt(2/(in+out))), b ~ N(0, sqrt(1/out)) */
  size_t n = ps_dlrm_num_params(m);
  float *p = malloc(n * sizeof(float)), *p2 = malloc(n * sizeof(float));
  assert_int_equal(ps_dlrm_get_params(m, p, n), PS_OK);
  for (int l = 0; l < 7; l++) {
    ps_dlrm_layer L;
    ps_dlrm_layer_info(m, l, &L);
    size_t cnt = (size_t)L.in * L.out;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < cnt; i++) s += p[L.w_off + i], s2 += (double)p[L.w_off + i] * p[L.w_off + i];
    double sd = sqrt(s2 / cnt - (s / cnt) * (s / cnt)), want = sqrt(2.0 / (L.in + L.out));
    if (cnt > 5000) {
      assert_true(fabs(sd / want - 1) < 0.05);
      assert_true(fabs(s / cnt) < 0.05 * want);
    }
    if (L.out >= 256) {
      double bs2 = 0;
      for (int i = 0; i < L.out; i++) bs2 += (double)p[L.b_off + i] * p[L.b_off + i];
      assert_true(fabs(sqrt(bs2 / L.out) / sqrt(1.0 / L.out) - 1) < 0.15);
    }
  }
  /* same seed, same replica; another seed, another model */
  ps_dlrm *m2 = NULL;
  assert_int_equal(ps_dlrm_create(K, &c, &m2, NULL), PS_OK);
  ps_dlrm_get_params(m2, p2, n);
  assert_memory_equal(p, p2, n * sizeof(float));
  ps_dlrm_destroy(&m2);
  c.seed = 2;
  assert_int_equal(ps_dlrm_create(K, &c, &m2, NULL), PS_OK);
  ps_dlrm_get_params(m2, p2, n);
  assert_true(memcmp(p, p2, n * sizeof(float)) != 0);
  assert_int_equal(ps_dlrm_set_params(m2, p, n), PS_OK);
  assert_int_equal(ps_dlrm_set_params(m2, p, n - 1), PS_ERR_INVALID);
  ps_dlrm_destroy(&m2);
  /* out_bias_zero: the output layer's one bias is 0, everything else as drawn (seed 1) */
  c.seed = 1;
  c.out_bias_zero = true;
  assert_int_equal(ps_dlrm_create(K, &c, &m2, NULL), PS_OK);
  ps_dlrm_get_params(m2, p2, n);
  ps_dlrm_layer Lo;
  assert_int_equal(ps_dlrm_layer_info(m2, 6, &Lo), PS_OK);
  assert_int_equal(Lo.out, 1);
  assert_true(p[Lo.b_off] != 0.0f);
  assert_true(p2[Lo.b_off] == 0.0f);
  p2[Lo.b_off] = p[Lo.b_off];
  assert_memory_equal(p, p2, n * sizeof(float));
  ps_dlrm_destroy(&m2);
  ps_dlrm_destroy(&m);
  free(p), free(p2);
}

/* A small model with a multi-hot batch for the remaining tests. */
enum { B = 6, S = 3, D = 4, U = 9 };
typedef struct fixture {
  float dense[B * 5], labels[B], rows[U * D];
  int32_t idx[B * S * 2], off[B * S + 1];
  ps_dlrm_batch b;
} fixture;

static void fixture_init(fixture *f) {
  uint64_t x = 99;
#define R() (x = x * 6364136223846793005ull + 1442695040888963407ull, (float)((x >> 40) / 16777216.0))
  for (int i = 0; i < B * 5; i++) f->dense[i] = R() * 2;
  for (int i = 0; i < B; i++) f->labels[i] = (float)(i % 2);
  for (int i = 0; i < U * D; i++) f->rows[i] = R() - 0.5f;
  int n = 0;
  f->off[0] = 0;
  for (int g = 0; g < B * S; g++) {
    int len = g % 3; /* 0, 1, 2: empty, one-hot, multi-hot */
    for (int j = 0; j < len; j++) f->idx[n++] = (int32_t)((g * 7 + j * 3) % (U - 1)); /* row U-1 unused */
    f->off[g + 1] = n;
  }
#undef R
  f->b = (ps_dlrm_batch){.batch = B, .dense = f->dense, .labels = f->labels, .nrows = U, .rows = f->rows,
                         .nnz = n, .idx = f->idx, .offsets = f->off};
}

/* The small model (bottom 5-8-4, top 6-1) that the fixture's batch fits, and that batch. */
static ps_dlrm *small_model(fixture *f) {
  ps_dlrm *m = NULL;
  assert_int_equal(make("5-8-4", "6-1", D, S, B, &m), PS_OK);
  fixture_init(f);
  return m;
}

/* The central difference of the loss on batch b in *x, one dense parameter or one embedding-row
 * value, with step eps; *x ends as it was. params (n floats, x among them) go to the model
 * after each change when not NULL; rows are read at each forward. */
static double central_diff(ps_dlrm *m, const ps_dlrm_batch *b, float *x, float eps,
                           const float *params, size_t n) {
  float x0 = *x, l1, l2;
  *x = x0 + eps;
  if (params) ps_dlrm_set_params(m, params, n);
  ps_dlrm_forward(m, b, &l1);
  *x = x0 - eps;
  if (params) ps_dlrm_set_params(m, params, n);
  ps_dlrm_forward(m, b, &l2);
  *x = x0;
  return ((double)l1 - l2) / (2 * eps);
}

/* central_diff, with a second look at a 10x smaller step where it disagrees with the
 * analytic gradient: a step across a ReLU's kink (a unit just off for one sample) is not a
 * derivative. */
static double fd_near(ps_dlrm *m, const ps_dlrm_batch *b, float *x, float eps,
                      const float *params, size_t n, double analytic) {
  double num = central_diff(m, b, x, eps, params, n);
  if (fabs(num - analytic) > 2e-3 * fmax(1, fabs(num)) + 2e-4)
    num = central_diff(m, b, x, eps / 10, params, n);
  return num;
}

/* Every third dense gradient and every embedding-row gradient of m on the fixture's batch
 * against central differences. */
static void check_fd(ps_dlrm *m, fixture *fx) {
  fixture f = *fx;
  f.b.dense = f.dense, f.b.labels = f.labels, f.b.rows = f.rows, f.b.idx = f.idx, f.b.offsets = f.off;
  size_t n = ps_dlrm_num_params(m);
  float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), drow[U * D], loss;
  ps_dlrm_get_params(m, p, n);
  assert_int_equal(ps_dlrm_forward(m, &f.b, &loss), PS_OK);
  assert_int_equal(ps_dlrm_backward(m, drow), PS_OK);
  assert_int_equal(ps_dlrm_get_grads(m, g, n), PS_OK);
  const float eps = 1e-2f;
  int checked = 0;
  for (size_t i = 0; i < n; i += 3) {
    double num = fd_near(m, &f.b, &p[i], eps, p, n, g[i]);
    if (fabs(num - g[i]) > 2e-3 * fmax(1, fabs(num)) + 2e-4) fail_msg("dparam[%zu]: %g vs fd %g", i, g[i], num);
    checked++;
  }
  ps_dlrm_set_params(m, p, n);
  for (int i = 0; i < U * D; i++) {
    double num = fd_near(m, &f.b, &f.rows[i], eps, NULL, 0, drow[i]);
    if (fabs(num - drow[i]) > 2e-3 * fmax(1, fabs(num)) + 2e-4) fail_msg("drow[%d]: %g vs fd %g", i, drow[i], num);
  }
  for (int d = 0; d < D; d++) assert_true(drow[(U - 1) * D + d] == 0.0f); /* unused row */
  assert_true(checked > 20);
  free(p), free(g);
}

static void test_model_fd(void **st) {
  (void)st;
  fixture f;
  ps_dlrm *m = small_model(&f);
  check_fd(m, &f);
  ps_dlrm_destroy(&m);
}

/* ||x - y||_2 / ||y||_2 over n doubles/floats */
static double norm_rel(const float *x, const double *y, size_t n) {
  double d = 0, t = 0;
  for (size_t i = 0; i < n; i++) d += (x[i] - y[i]) * (x[i] - y[i]), t += y[i] * y[i];
  return sqrt(d / fmax(t, 1e-300));
}

/* Precision bf16 (every GEMM's inputs rounded to bf16, FP32 accumulation): its gradients, dense
 * and embedding rows, against central differences of the FP32 model's loss. Norm-wise bound:
 * each GEMM rounds its two inputs (<= 2u relative, u = 2^-8) and the error of an output of L
 * chained GEMMs is, to first order, the sum of theirs; a gradient runs the forward path and
 * the backward path, 2L GEMMs (L = 4 here: 2 bottom, the interaction, 1 top), with <= 4u each
 * once the re-rounding of an already perturbed input is counted: 8 u L = 0.125. Entries sum
 * with cancellation, so element-wise there is no bf16 bound; the norm has one. Also: the bf16
 * gradients differ from FP32's (the rounding is done), and without the instructions
 * (EMBER_CPU_NO_BF16=1, test_dlrm_model_nobf16) the model runs FP32, bit for bit. */
static void test_bf16_fd(void **st) {
  (void)st;
  fixture f;
  ps_dlrm *m32 = small_model(&f), *m16 = NULL;
  ps_dlrm_config c;
  ps_dlrm_config_shape(&c, "5-8-4", "6-1", D, S, B);
  c.precision = PS_KERN_BF16;
  assert_int_equal(ps_dlrm_create(K, &c, &m16, NULL), PS_OK);
  size_t n = ps_dlrm_num_params(m32);
  float *p = malloc(n * sizeof(float)), *g16 = malloc(n * sizeof(float)),
        *g32 = malloc(n * sizeof(float)), r16[U * D], r32[U * D], loss;
  double *gfd = malloc((n + U * D) * sizeof(double));
  ps_dlrm_get_params(m32, p, n);
  assert_int_equal(ps_dlrm_set_params(m16, p, n), PS_OK);
  assert_int_equal(ps_dlrm_forward(m16, &f.b, &loss), PS_OK);
  assert_int_equal(ps_dlrm_backward(m16, r16), PS_OK);
  assert_int_equal(ps_dlrm_get_grads(m16, g16, n), PS_OK);
  assert_int_equal(ps_dlrm_forward(m32, &f.b, &loss), PS_OK);
  assert_int_equal(ps_dlrm_backward(m32, r32), PS_OK);
  assert_int_equal(ps_dlrm_get_grads(m32, g32, n), PS_OK);
  if (!ps_kern_has_bf16(K)) { /* the fallback: FP32, the same numbers */
    assert_int_equal(ps_dlrm_precision(m16), PS_KERN_FP32);
    assert_memory_equal(g16, g32, n * sizeof(float));
    assert_memory_equal(r16, r32, sizeof(r16));
  } else {
    assert_int_equal(ps_dlrm_precision(m16), PS_KERN_BF16);
    for (size_t i = 0; i < n; i++) gfd[i] = fd_near(m32, &f.b, &p[i], 1e-2f, p, n, g32[i]);
    ps_dlrm_set_params(m32, p, n);
    for (int i = 0; i < U * D; i++) gfd[n + i] = fd_near(m32, &f.b, &f.rows[i], 1e-2f, NULL, 0, r32[i]);
    double ed = norm_rel(g16, gfd, n), er = norm_rel(r16, gfd + n, U * D);
    double e32 = norm_rel(g32, gfd, n), bound = 8 * 4 / 256.0;
    print_message("bf16 vs finite differences: dense %.2e, rows %.2e (FP32: %.2e); bound %.3f\n",
                  ed, er, e32, bound);
    assert_true(ed <= bound && er <= bound);
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(g16[i] - g32[i]));
    assert_true(d > 0); /* the GEMMs did round */
  }
  ps_dlrm_destroy(&m16);
  ps_dlrm_destroy(&m32);
  free(p), free(g16), free(g32), free(gfd);
}

/* The small model with the DCNv2 interaction: cross width (1 + S) * D = 16. */
static ps_dlrm *small_dcn(fixture *f, int layers, int rank) {
  ps_dlrm_config c;
  ps_dlrm_config_shape(&c, "5-8-4", "6-1", D, S, B);
  c.interaction = PS_DLRM_DCN;
  c.dcn_layers = layers;
  c.dcn_rank = rank;
  ps_dlrm *m = NULL;
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  fixture_init(f);
  /* TorchRec starts the cross biases at zero; give them values so they take part */
  size_t n = ps_dlrm_num_params(m);
  float *p = malloc(n * sizeof(float));
  ps_dlrm_get_params(m, p, n);
  for (int l = 0; l < layers; l++) {
    ps_dlrm_cross_layer cl;
    assert_int_equal(ps_dlrm_cross_info(m, l, &cl), PS_OK);
    for (int i = 0; i < cl.dim; i++) p[cl.b_off + i] = 0.1f * (float)((i * 7 + l) % 5 - 2);
  }
  ps_dlrm_set_params(m, p, n);
  free(p);
  return m;
}

static void test_dcn_fd(void **st) {
  (void)st;
  const int shapes[][2] = {{3, 3}, {1, 1}, {2, 0}}; /* layers, rank (0: full) */
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    fixture f;
    ps_dlrm *m = small_dcn(&f, shapes[i][0], shapes[i][1]);
    assert_int_equal(ps_dlrm_interact_width(m), (1 + S) * D);
    print_message("  dcn %d layers, rank %d\n", shapes[i][0], shapes[i][1]);
    check_fd(m, &f);
    ps_dlrm_destroy(&m);
  }
}

static void test_dcn_config_layout_init(void **st) {
  (void)st;
  ps_dlrm_interaction it;
  assert_int_equal(ps_dlrm_interaction_parse("dcn", &it), PS_OK);
  assert_int_equal(it, PS_DLRM_DCN);
  assert_int_equal(ps_dlrm_interaction_parse("dot", &it), PS_OK);
  assert_int_equal(it, PS_DLRM_DOT);
  assert_int_equal(ps_dlrm_interaction_parse("cat", &it), PS_ERR_INVALID);
  ps_error err;
  assert_int_equal(ps_dlrm_check_cross(26, 16, 3, 64, &err), PS_OK);
  assert_int_equal(ps_dlrm_check_cross(26, 16, 3, 0, &err), PS_OK);
  assert_int_equal(ps_dlrm_check_cross(26, 16, 3, 431, &err), PS_OK);
  assert_int_equal(ps_dlrm_check_cross(26, 16, 3, 432, &err), PS_ERR_INVALID);
  assert_string_equal(err.msg, "dcn-rank 432: want 0 (full rank) or 1 to 431, below the cross "
                               "width 432 = (1 + 26 sparse features) x emb-dim 16");
  assert_int_equal(ps_dlrm_check_cross(26, 16, 3, -2, &err), PS_ERR_INVALID);
  assert_int_equal(ps_dlrm_check_cross(26, 16, 3, PS_DLRM_RANK_AUTO, &err), PS_OK);
  assert_int_equal(ps_dlrm_cross_rank(26, 16, PS_DLRM_RANK_AUTO), 108); /* D / 4 */
  assert_int_equal(ps_dlrm_cross_rank(26, 16, 7), 7);
  assert_int_equal(ps_dlrm_cross_rank(0, 2, PS_DLRM_RANK_AUTO), 1);
  assert_int_equal(ps_dlrm_check_cross(0, 1, 1, PS_DLRM_RANK_AUTO, &err), PS_ERR_INVALID); /* D 1 */
  assert_int_equal(ps_dlrm_check_cross(26, 16, 0, 64, &err), PS_ERR_INVALID);
  assert_string_equal(err.msg, "dcn-layers 0: want 1 to 64");
  assert_int_equal(ps_dlrm_check_cross(26, 16, 65, 64, &err), PS_ERR_INVALID);
  /* the model refuses the same, with the same words */
  ps_dlrm_config c;
  ps_dlrm_config_default(&c);
  assert_int_equal(c.interaction, PS_DLRM_DOT);
  assert_int_equal(c.dcn_layers, 3);
  assert_int_equal(c.dcn_rank, PS_DLRM_RANK_AUTO);
  c.interaction = PS_DLRM_DCN;
  c.max_batch = 16;
  c.dcn_rank = 500;
  ps_dlrm *m = NULL;
  assert_int_equal(ps_dlrm_create(K, &c, &m, &err), PS_ERR_INVALID);
  assert_null(m);
  assert_true(strstr(err.msg, "dcn-rank 500: want 0 (full rank) or 1 to 431") == err.msg);
  /* Kaggle shape, DCN 3 x 64: bottom, then the cross block, then the top on D = 432 */
  c.dcn_rank = 64;
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  assert_int_equal(ps_dlrm_interact_width(m), 432);
  assert_int_equal(ps_dlrm_num_cross(m), 3);
  ps_dlrm_layer L3, L4;
  ps_dlrm_layer_info(m, 3, &L3);
  ps_dlrm_layer_info(m, 4, &L4);
  assert_int_equal(L4.in, 432);
  size_t off = L3.b_off + 16, per = 2 * 64 * 432 + 432;
  size_t n = ps_dlrm_num_params(m);
  float *p = malloc(n * sizeof(float));
  assert_int_equal(ps_dlrm_get_params(m, p, n), PS_OK);
  for (int l = 0; l < 3; l++) {
    ps_dlrm_cross_layer cl;
    assert_int_equal(ps_dlrm_cross_info(m, l, &cl), PS_OK);
    assert_int_equal(cl.dim, 432);
    assert_int_equal(cl.rank, 64);
    assert_int_equal(cl.v_off, off + l * per);
    assert_int_equal(cl.u_off, off + l * per + 64 * 432);
    assert_int_equal(cl.b_off, off + l * per + 2 * 64 * 432);
    /* xavier-normal: sd sqrt(2 / (432 + 64)); biases zero */
    for (int w = 0; w < 2; w++) {
      const float *x = p + (w ? cl.u_off : cl.v_off);
      double s2 = 0;
      for (size_t i = 0; i < 64 * 432; i++) s2 += (double)x[i] * x[i];
      assert_true(fabs(sqrt(s2 / (64 * 432)) / sqrt(2.0 / 496) - 1) < 0.03);
    }
    for (int i = 0; i < 432; i++) assert_true(p[cl.b_off + i] == 0.0f);
  }
  assert_int_equal(L4.w_off, off + 3 * per);
  assert_int_equal(ps_dlrm_cross_info(m, 3, &(ps_dlrm_cross_layer){0}), PS_ERR_INVALID);
  ps_dlrm_destroy(&m);
  c.dcn_rank = PS_DLRM_RANK_AUTO; /* the default: D / 4 */
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  ps_dlrm_cross_layer auto_l;
  assert_int_equal(ps_dlrm_cross_info(m, 2, &auto_l), PS_OK);
  assert_int_equal(auto_l.rank, 108);
  ps_dlrm_destroy(&m);
  c.dcn_rank = 64;
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  double top = 0;
  for (int l = 0; l < 7; l++) {
    ps_dlrm_layer L;
    ps_dlrm_layer_info(m, l, &L);
    top += 6.0 * L.in * L.out;
  }
  assert_true(fabs(ps_dlrm_flops_per_sample(m) - top - 3 * 6.0 * 2 * 432 * 64) < 1);
  ps_dlrm_destroy(&m);
  /* full rank: W [432, 432] with sd sqrt(1 / 432) */
  c.dcn_rank = 0;
  c.dcn_layers = 1;
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  ps_dlrm_cross_layer cl;
  assert_int_equal(ps_dlrm_cross_info(m, 0, &cl), PS_OK);
  assert_int_equal(cl.w_off, off);
  assert_int_equal(cl.b_off, off + 432 * 432);
  assert_int_equal(ps_dlrm_num_params(m), n - 3 * per + 432 * 432 + 432);
  ps_dlrm_destroy(&m);
  /* a dot model has no cross layers and its init did not change */
  ps_dlrm_config_default(&c);
  assert_int_equal(ps_dlrm_create(K, &c, &m, NULL), PS_OK);
  assert_int_equal(ps_dlrm_num_cross(m), 0);
  ps_dlrm_destroy(&m);
  free(p);
}

static void test_bad_batches_and_eval(void **st) {
  (void)st;
  fixture f;
  ps_dlrm *m = small_model(&f);
  float loss, probs[B], probs2[B], drow[U * D];
  assert_int_equal(ps_dlrm_backward(m, drow), PS_ERR_INVALID); /* no forward yet */
  ps_dlrm_batch b = f.b;
  b.batch = B + 1;
  assert_int_equal(ps_dlrm_forward(m, &b, &loss), PS_ERR_INVALID);
  b = f.b;
  f.idx[0] = U;
  assert_int_equal(ps_dlrm_forward(m, &b, &loss), PS_ERR_INVALID);
  f.idx[0] = 0;
  f.labels[1] = 2.0f;
  assert_int_equal(ps_dlrm_forward(m, &b, &loss), PS_ERR_INVALID);
  f.labels[1] = 1.0f;
  b.labels = NULL;
  assert_int_equal(ps_dlrm_forward(m, &b, &loss), PS_ERR_INVALID);
  assert_int_equal(ps_dlrm_predict(m, &b, probs), PS_OK); /* eval needs no labels */
  assert_int_equal(ps_dlrm_backward(m, drow), PS_ERR_INVALID); /* not after an eval forward */
  assert_int_equal(ps_dlrm_forward(m, &f.b, &loss), PS_OK);
  assert_int_equal(ps_dlrm_last_probs(m, probs2), PS_OK);
  assert_memory_equal(probs, probs2, sizeof(probs));
  for (int i = 0; i < B; i++) assert_true(probs[i] > 0 && probs[i] < 1);
  /* batch 1: one sample's bags */
  b = f.b;
  b.batch = 1;
  b.nnz = f.off[S];
  assert_int_equal(ps_dlrm_forward(m, &b, &loss), PS_OK);
  assert_int_equal(ps_dlrm_backward(m, drow), PS_OK);
  ps_dlrm_destroy(&m);
}

static void test_sgd_learns(void **st) {
  (void)st;
  fixture f;
  ps_dlrm *m = small_model(&f);
  float first = 0, loss = 0, drow[U * D];
  ps_dlrm_opt o = ps_dlrm_opt_default(PS_DLRM_OPT_SGD, 0.5f);
  for (int s = 0; s < 100; s++) {
    assert_int_equal(ps_dlrm_forward(m, &f.b, &loss), PS_OK);
    if (s == 0) first = loss;
    assert_int_equal(ps_dlrm_backward(m, drow), PS_OK);
    assert_int_equal(ps_dlrm_step(m, &o), PS_OK);
    for (int i = 0; i < U * D; i++) f.rows[i] -= 0.5f * drow[i];
  }
  assert_true(loss < 0.5f * first);
  o = ps_dlrm_opt_default(PS_DLRM_OPT_ADAM, 0.01f); /* switching optimizers starts fresh state */
  assert_int_equal(ps_dlrm_step(m, &o), PS_OK);
  o.lr = -1;
  assert_int_equal(ps_dlrm_step(m, &o), PS_ERR_INVALID);
  ps_dlrm_destroy(&m);
}

/* The staging path a device backend takes (copies in and out, buffers that grow for multi-hot
 * batches) must give the same bits as the in-place host path: run it on the CPU backend with
 * host_memory turned off. */
static void device_path(ps_dlrm_interaction inter) {
  ps_kern dev = *K;
  dev.host_memory = false;
  ps_dlrm_config c;
  ps_dlrm_config_shape(&c, "5-8-4", "6-1", D, S, B);
  c.interaction = inter;
  c.dcn_rank = 5;
  ps_dlrm *mh = NULL, *md = NULL;
  assert_int_equal(ps_dlrm_create(K, &c, &mh, NULL), PS_OK);
  assert_int_equal(ps_dlrm_create(&dev, &c, &md, NULL), PS_OK);
  fixture f;
  fixture_init(&f);
  assert_true(f.b.nnz > 0);
  /* more entries than one-hot (B * S = 18): the device buffers must grow */
  static int32_t idx[64], off[B * S + 1];
  int n = 0;
  off[0] = 0;
  for (int g = 0; g < B * S; g++) {
    for (int j = 0; j < 3; j++) idx[n++] = (int32_t)((g + j * 5) % U);
    off[g + 1] = n;
  }
  ps_dlrm_batch big = f.b;
  big.idx = idx, big.offsets = off, big.nnz = n;
  const ps_dlrm_batch *bs[2] = {&f.b, &big};
  size_t np = ps_dlrm_num_params(mh);
  float *gh = malloc(np * sizeof(float)), *gd = malloc(np * sizeof(float));
  ps_dlrm_opt o = ps_dlrm_opt_default(PS_DLRM_OPT_ADAM, 0.01f);
  for (int q = 0; q < 2; q++) {
    float lh, ld, rh[U * D], rd[U * D], ph[B], pd[B];
    assert_int_equal(ps_dlrm_forward(mh, bs[q], &lh), PS_OK);
    assert_int_equal(ps_dlrm_forward(md, bs[q], &ld), PS_OK);
    assert_true(lh == ld);
    assert_int_equal(ps_dlrm_backward(mh, rh), PS_OK);
    assert_int_equal(ps_dlrm_backward(md, rd), PS_OK);
    assert_memory_equal(rh, rd, sizeof(rh));
    ps_dlrm_get_grads(mh, gh, np), ps_dlrm_get_grads(md, gd, np);
    assert_memory_equal(gh, gd, np * sizeof(float));
    assert_int_equal(ps_dlrm_step(mh, &o), PS_OK);
    assert_int_equal(ps_dlrm_step(md, &o), PS_OK);
    assert_int_equal(ps_dlrm_predict(mh, bs[q], ph), PS_OK);
    assert_int_equal(ps_dlrm_predict(md, bs[q], pd), PS_OK);
    assert_memory_equal(ph, pd, sizeof(ph));
  }
  free(gh), free(gd);
  ps_dlrm_destroy(&mh);
  ps_dlrm_destroy(&md);
}

static void test_device_path(void **st) {
  (void)st;
  device_path(PS_DLRM_DOT);
  device_path(PS_DLRM_DCN);
}

PS_TEST_MAIN("dlrm_model", setup, teardown,
    cmocka_unit_test(test_config), cmocka_unit_test(test_kaggle_layout_and_init),
    cmocka_unit_test(test_model_fd), cmocka_unit_test(test_bad_batches_and_eval),
    cmocka_unit_test(test_sgd_learns), cmocka_unit_test(test_device_path),
    cmocka_unit_test(test_dcn_fd), cmocka_unit_test(test_dcn_config_layout_init),
    cmocka_unit_test(test_bf16_fd))
