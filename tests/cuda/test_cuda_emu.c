/* The CUDA kernels (kernels/cuda/ps_cuda_kernels.cu), EXECUTED on CPU threads through
 * tests/cuda/emu/ps_cuda_emu.h, against their CPU twins (kernels/cpu/).
 *
 * The real kernels need a GPU, which most build machines lack; this test runs the same
 * kernel source — same launch geometry, shared-memory staging, barriers, atomics, the
 * deterministic reductions and the device error flag — with every block's threads as real
 * threads, in every build (CUDA on or off, and under ASan/UBSan, which then also checks the
 * kernels' memory accesses). cuBLAS is not involved (GEMMs are cuBLAS's); test_cuda_ops
 * covers everything on a real GPU. Shapes are kept small: each launch starts a thread per
 * GPU thread of a block. This is also issue 3's "one small CUDA kernel with a CPU twin". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_kern.h"
#include "ps_test_main.h"

#define CT_NO_GPU 1
#include "cuda_test_util.h"
#include "ps_cuda_kernels.h"
#include "ps_kernels.h"

static ps_kern *CPU;

static float *fdup(const float *x, size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  assert_non_null(p);
  if (n) memcpy(p, x, n * sizeof(float));
  return p;
}
/* "Device" memory of the fake runtime (emu/fake_cudart.c): the one kind that the kernels'
 * own cudaMemsetAsync accepts. */
static float *drand_(ct_rng *r, size_t n, float lo, float hi) {
  float *p = NULL;
  assert_int_equal(cudaMalloc((void **)&p, (n ? n : 1) * sizeof(float)), cudaSuccess);
  ct_fill(r, p, n, lo, hi);
  return p;
}
static float *frand(ct_rng *r, size_t n, float lo, float hi) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  assert_non_null(p);
  ct_fill(r, p, n, lo, hi);
  return p;
}

#define CLOSE(a, b, n, tol, ...)                                     \
  do {                                                               \
    double e_ = ct_norm_err((a), (b), (n));                          \
    if (!(e_ <= (tol))) {                                            \
      print_error(__VA_ARGS__);                                      \
      fail_msg(": normalised error %.3g > %.1g", e_, (double)(tol)); \
    }                                                                \
  } while (0)

static void test_bias_act(void **st) {
  (void)st;
  ct_rng r = {11};
  const int shapes[][2] = {{1, 1}, {3, 5}, {67, 16}, {130, 513}, {9000, 3}, {33, 64}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int act = 0; act < 2; act++) {
      int m = shapes[c][0], n = shapes[c][1];
      size_t mn = (size_t)m * n;
      float *x = frand(&r, mn, -1, 1), *b = frand(&r, (size_t)n, -0.5f, 0.5f);
      float *yc = malloc(mn * sizeof(float)), *yg = malloc(mn * sizeof(float));
      assert_int_equal(ps_kern_bias_act_fwd(CPU, act, m, n, x, b, yc), PS_OK);
      assert_int_equal(ps_cu_bias_act_fwd(NULL, act, m, n, x, b, yg), cudaSuccess);
      CLOSE(yg, yc, mn, 0.0, "bias_act_fwd m=%d n=%d act=%d", m, n, act);
      float *dy = frand(&r, mn, -1, 1), *dyg = fdup(dy, mn);
      float *dbc = malloc((size_t)n * sizeof(float)), *dbg = malloc((size_t)n * sizeof(float));
      float *ws = malloc(ps_cu_colsum_ws_floats(m, n) * sizeof(float));
      assert_int_equal(ps_kern_bias_act_bwd(CPU, act, m, n, yc, dy, dy, dbc), PS_OK); /* in place */
      assert_int_equal(ps_cu_bias_act_bwd(NULL, act, m, n, yc, dyg, dyg, dbg, ws), cudaSuccess);
      CLOSE(dyg, dy, mn, 0.0, "bias_act_bwd dx m=%d n=%d act=%d", m, n, act);
      CLOSE(dbg, dbc, (size_t)n, 1e-5, "bias_act_bwd dbias m=%d n=%d act=%d", m, n, act);
      free(x), free(b), free(yc), free(yg), free(dy), free(dyg), free(dbc), free(dbg), free(ws);
    }
}

static void test_interact(void **st) {
  (void)st;
  ct_rng r = {12};
  /* smem path with several samples per block, one sample per block (dim 128), the global
   * fallback (dim 512), no sparse features, odd dims */
  const int cases[][3] = {{1, 0, 1},    {3, 26, 16},  {10, 26, 16}, {2, 3, 33},
                          {1, 26, 128}, {2, 26, 512}, {9, 2, 7}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int B = cases[c][0], S = cases[c][1], D = cases[c][2], W = ps_kern_interact_width(S, D);
    float *bot = frand(&r, (size_t)B * D, -1, 1), *emb = frand(&r, (size_t)B * S * D, -1, 1);
    float *oc = malloc((size_t)B * W * sizeof(float)), *og = malloc((size_t)B * W * sizeof(float));
    assert_int_equal(ps_kern_interact_fwd(CPU, B, S, D, bot, emb, oc), PS_OK);
    assert_int_equal(ps_cu_interact_fwd(NULL, B, S, D, bot, emb, og), cudaSuccess);
    CLOSE(og, oc, (size_t)B * W, 1e-5, "interact_fwd B=%d S=%d D=%d", B, S, D);
    float *dout = frand(&r, (size_t)B * W, -1, 1);
    size_t ne = (size_t)B * S * D;
    float *dbc = malloc((size_t)B * D * sizeof(float)),
          *dbg = malloc((size_t)B * D * sizeof(float));
    float *dec = malloc((ne ? ne : 1) * sizeof(float)),
          *deg = malloc((ne ? ne : 1) * sizeof(float));
    assert_int_equal(ps_kern_interact_bwd(CPU, B, S, D, bot, emb, dout, dbc, dec), PS_OK);
    assert_int_equal(ps_cu_interact_bwd(NULL, B, S, D, bot, emb, dout, dbg, deg), cudaSuccess);
    CLOSE(dbg, dbc, (size_t)B * D, 1e-5, "interact_bwd dbottom B=%d S=%d D=%d", B, S, D);
    CLOSE(deg, dec, ne, 1e-5, "interact_bwd demb B=%d S=%d D=%d", B, S, D);
    free(bot), free(emb), free(oc), free(og), free(dout), free(dbc), free(dbg), free(dec),
        free(deg);
  }
}

static void test_pool(void **st) {
  (void)st;
  ct_rng r = {13};
  const int cases[][4] = {
      {1, 1, 1, 1}, {13, 16, 5, 3}, {300, 16, 40, 4}, {50, 16, 10, 0}, {7, 33, 2, 6}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int nb = cases[c][0], D = cases[c][1], nr = cases[c][2], ml = cases[c][3];
    int32_t *off = malloc(((size_t)nb + 1) * sizeof(int32_t));
    int32_t *idx = calloc((size_t)nb * ml + 1, sizeof(int32_t));
    int nnz = 0;
    off[0] = 0;
    for (int i = 0; i < nb; i++) {
      int len = (ml == 0 || ct_int(&r, 5) == 0) ? 0 : 1 + ct_int(&r, ml);
      for (int j = 0; j < len; j++) idx[nnz++] = ct_int(&r, nr);
      off[i + 1] = nnz;
    }
    float *rows = frand(&r, (size_t)nr * D, -1, 1);
    for (int md = 0; md < 3; md++) { /* sum, mean, per feature (3 a sample: 1st and 3rd mean) */
      ps_kern_pool mode = md == 0 ? PS_KERN_POOL_SUM : md == 1 ? PS_KERN_POOL_MEAN : (ps_kern_pool){5, 3};
      int err = 0;
      float *oc = malloc((size_t)nb * D * sizeof(float)), *og = frand(&r, (size_t)nb * D, 7, 8);
      assert_int_equal(ps_kern_pool_fwd(CPU, mode, nb, D, nr, rows, nnz, idx, off, oc), PS_OK);
      assert_int_equal(ps_cu_pool_fwd(NULL, mode.mean, mode.period, nb, D, nr, rows, nnz, idx, off,
                                      og, &err),
                       cudaSuccess);
      assert_int_equal(err, 0);
      CLOSE(og, oc, (size_t)nb * D, 1e-6, "pool_fwd nb=%d D=%d nr=%d mode=%d", nb, D, nr, md);
      float *dout = frand(&r, (size_t)nb * D, -1, 1);
      float *drc = malloc((size_t)nr * D * sizeof(float)), *drg = drand_(&r, (size_t)nr * D, 7, 8);
      assert_int_equal(ps_kern_pool_bwd(CPU, mode, nb, D, nr, nnz, idx, off, dout, drc), PS_OK);
      assert_int_equal(ps_cu_pool_bwd(NULL, mode.mean, mode.period, nb, D, nr, nnz, idx, off, dout,
                                      drg, &err),
                       cudaSuccess);
      assert_int_equal(err, 0);
      CLOSE(drg, drc, (size_t)nr * D, 1e-5, "pool_bwd nb=%d D=%d nr=%d mode=%d", nb, D, nr, md);
      free(oc), free(og), free(dout), free(drc), cudaFree(drg);
    }
    /* an out-of-range row raises the flag and is skipped, never read */
    if (nnz > 0) {
      int err = 0, keep = idx[0];
      idx[0] = nr;
      float *og = malloc((size_t)nb * D * sizeof(float));
      assert_int_equal(ps_cu_pool_fwd(NULL, 0, 1, nb, D, nr, rows, nnz, idx, off, og, &err),
                       cudaSuccess);
      assert_int_equal(err, PS_CU_ERR_INDEX);
      err = 0;
      off[nb] = nnz + 1; /* past nnz */
      float *drows = drand_(&r, (size_t)nr * D, 0, 1);
      assert_int_equal(ps_cu_pool_bwd(NULL, 0, 1, nb, D, nr, nnz, idx, off, og, drows, &err),
                       cudaSuccess);
      cudaFree(drows);
      assert_int_equal(err, PS_CU_ERR_INDEX);
      idx[0] = keep;
      free(og);
    }
    free(off), free(idx), free(rows);
  }
}

static void test_bce(void **st) {
  (void)st;
  ct_rng r = {14};
  const int ns[] = {1, 257, 5000};
  for (size_t c = 0; c < 3; c++) {
    int n = ns[c];
    float *z = frand(&r, (size_t)n, -8, 8), *y = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) y[i] = (float)ct_int(&r, 2);
    if (n > 3) z[0] = 40.0f, z[1] = -40.0f, z[2] = 0.0f;
    float *pc = malloc((size_t)n * sizeof(float)), *pg = malloc((size_t)n * sizeof(float));
    float lc = 0, lg = -1, *ws = malloc(ps_cu_bce_ws_floats(n) * sizeof(float));
    unsigned counter = 0;
    assert_int_equal(ps_kern_bce_fwd(CPU, n, z, y, pc, &lc), PS_OK);
    for (int rep = 0; rep < 2; rep++) { /* the ticket counter must be back at zero */
      assert_int_equal(ps_cu_bce_fwd(NULL, n, z, y, pg, &lg, ws, &counter), cudaSuccess);
      assert_int_equal(counter, 0);
      if (!(fabs((double)lg - lc) <= 1e-5 * fabs((double)lc)))
        fail_msg("bce loss n=%d: %g vs %g", n, lg, lc);
    }
    CLOSE(pg, pc, (size_t)n, 1e-6, "bce probs n=%d", n);
    float sentinel = 5.0f;
    assert_int_equal(ps_cu_bce_fwd(NULL, n, z, NULL, pg, &sentinel, ws, &counter), cudaSuccess);
    assert_true(sentinel == 5.0f);
    float *dc = malloc((size_t)n * sizeof(float)), *dg = malloc((size_t)n * sizeof(float));
    assert_int_equal(ps_kern_bce_bwd(CPU, n, z, y, 1.0f / n, dc), PS_OK);
    assert_int_equal(ps_cu_bce_bwd(NULL, n, z, y, 1.0f / n, dg), cudaSuccess);
    CLOSE(dg, dc, (size_t)n, 1e-6, "bce_bwd n=%d", n);
    free(z), free(y), free(pc), free(pg), free(ws), free(dc), free(dg);
  }
}

static void test_optimizers(void **st) {
  (void)st;
  ct_rng r = {15};
  const size_t ns[] = {1, 1001};
  for (size_t c = 0; c < 2; c++) {
    size_t n = ns[c];
    float *wc = frand(&r, n, -1, 1), *wg = fdup(wc, n);
    float *hc = frand(&r, n, 0, 0.1f), *hg = fdup(hc, n);
    float *mc = calloc(n, sizeof(float)), *mg = calloc(n, sizeof(float));
    float *vc = calloc(n, sizeof(float)), *vg = calloc(n, sizeof(float));
    assert_int_equal(ps_kern_scale(CPU, n, 0.75f, wc), PS_OK);
    assert_int_equal(ps_cu_scale(NULL, n, 0.75f, wg), cudaSuccess);
    for (int step = 1; step <= 3; step++) {
      float *g = frand(&r, n, -1, 1);
      assert_int_equal(ps_kern_sgd(CPU, n, wc, g, 0.1f, 0.01f), PS_OK);
      assert_int_equal(ps_cu_sgd(NULL, n, wg, g, 0.1f, 0.01f), cudaSuccess);
      assert_int_equal(ps_kern_adagrad(CPU, n, wc, g, hc, 0.05f, 1e-10f, 0.001f), PS_OK);
      assert_int_equal(ps_cu_adagrad(NULL, n, wg, g, hg, 0.05f, 1e-10f, 0.001f), cudaSuccess);
      assert_int_equal(ps_kern_adam(CPU, n, wc, g, mc, vc, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, step),
                       PS_OK);
      float ss = (float)(1e-3 / (1.0 - pow(0.9, step))), bc2 = (float)sqrt(1.0 - pow(0.999, step));
      assert_int_equal(ps_cu_adam(NULL, n, wg, g, mg, vg, 0.9f, 0.999f, 1e-8f, 0.0f, ss, bc2),
                       cudaSuccess);
      free(g);
    }
    CLOSE(wg, wc, n, 1e-6, "optimizers w n=%zu", n);
    CLOSE(hg, hc, n, 1e-6, "adagrad state n=%zu", n);
    CLOSE(mg, mc, n, 1e-6, "adam m n=%zu", n);
    CLOSE(vg, vc, n, 1e-6, "adam v n=%zu", n);
    free(wc), free(wg), free(hc), free(hg), free(mc), free(mg), free(vc), free(vg);
  }
}

/* The DCNv2 cross layer's element-wise kernels (the GEMMs around them are cuBLAS's). */
static void test_cross(void **st) {
  (void)st;
  ct_rng r = {16};
  const int shapes[][2] = {{1, 1}, {3, 5}, {67, 48}, {130, 432}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int first = 0; first < 2; first++) {
      int m = shapes[c][0], n = shapes[c][1];
      size_t mn = (size_t)m * n;
      float *x0 = frand(&r, mn, -1, 1), *z = frand(&r, mn, -1, 1), *b = frand(&r, (size_t)n, -1, 1);
      float *xl = first ? x0 : frand(&r, mn, -1, 1);
      float *zc = malloc(mn * sizeof(float)), *yc = malloc(mn * sizeof(float));
      float *zg = fdup(z, mn), *yg = malloc(mn * sizeof(float));
      assert_int_equal(ps_kern_cross_fwd(CPU, m, n, x0, z, b, xl, zc, yc), PS_OK);
      assert_int_equal(ps_cu_cross_fwd(NULL, m, n, x0, zg, b, xl, zg, yg), cudaSuccess); /* zb in place */
      CLOSE(zg, zc, mn, 1e-6, "cross_fwd zb m=%d n=%d", m, n);
      CLOSE(yg, yc, mn, 1e-6, "cross_fwd y m=%d n=%d", m, n);
      float *dy = frand(&r, mn, -1, 1), *dzc = malloc(mn * sizeof(float));
      float *dzg = malloc(mn * sizeof(float)), *dxc = frand(&r, mn, -1, 1), *dxg = fdup(dxc, mn);
      float resid = first ? 1.0f : 0.0f;
      assert_int_equal(ps_kern_cross_bwd(CPU, m, n, x0, zc, dy, resid, dzc, dxc), PS_OK);
      assert_int_equal(ps_cu_cross_bwd(NULL, m, n, x0, zc, dy, resid, dzg, dxg), cudaSuccess);
      CLOSE(dzg, dzc, mn, 1e-6, "cross_bwd dz m=%d n=%d", m, n);
      CLOSE(dxg, dxc, mn, 1e-6, "cross_bwd dx0 (accumulated) m=%d n=%d first=%d", m, n, first);
      free(x0), free(z), free(b), free(zc), free(yc), free(zg), free(yg);
      free(dy), free(dzc), free(dzg), free(dxc), free(dxg);
      if (!first) free(xl);
    }
}

/* The bf16 GEMM's rounding kernel on exact ties, carries, a NaN and a strided source. */
static void test_to_bf16(void **st) {
  (void)st;
  const float x[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 256 + 1e-6f, 255.5f,
                     -1.0f - 1.0f / 256, 3.0e38f, 0.0f, NAN};
  const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x4380, 0xbf80, 0x7f62, 0x0000, 0x7fc0};
  float src[2 * 8]; /* two rows of 4 with leading dimension 8: the last 4 of each row unread */
  for (int i = 0; i < 16; i++) src[i] = -7.0f;
  for (int i = 0; i < 8; i++) src[(i / 4) * 8 + i % 4] = x[i];
  uint16_t got[8];
  assert_int_equal(ps_cu_to_bf16(NULL, 2, 4, src, 8, got), cudaSuccess);
  for (int i = 0; i < 8; i++)
    if (got[i] != want[i]) fail_msg("bf16(%g) = 0x%04x, want 0x%04x", x[i], got[i], want[i]);
}

PS_TEST_KERN_FIXTURE(CPU, 1)

PS_TEST_MAIN("cuda_emu", setup, teardown,
    cmocka_unit_test(test_bias_act), cmocka_unit_test(test_interact), cmocka_unit_test(test_pool),
    cmocka_unit_test(test_bce), cmocka_unit_test(test_optimizers), cmocka_unit_test(test_cross),
    cmocka_unit_test(test_to_bf16))
