/* Every ps_kernels.h operation on the CUDA backend against its CPU twin (kernels/cpu/), in the
 * manner of ggml's test-backend-ops: the same random inputs go to both backends and the
 * outputs are compared by normalised max error, over awkward shapes — batch 1, odd and prime
 * widths, padded leading dimensions, unaligned pointers (the vector path's fallback), empty
 * bags, repeated rows in a batch (atomic aggregation), inputs large enough for grid-stride
 * loops and for the interaction's global-memory fallback, in-place variants.
 *
 * The bf16 GEMM (cublasGemmEx) against the CPU's FP32 GEMM of the same inputs rounded to bf16.
 * Also: memory semantics (to_device returns when the source may be reused, through the
 * staging ring; to_host into pageable and pinned memory), deferred error reporting for bad
 * pooling indices, and the GEMM timer. Without a GPU it checks that the CUDA backend reports
 * PS_ERR_UNSUPPORTED, then exits 77 (SKIPPED).
 *
 * Built a second time as test_cuda_ops_emu against tests/cuda/emu (the kernels on CPU threads,
 * a fake CUDA runtime and cuBLAS over tracked host memory), where it runs on every machine
 * and checks the backend's host code; EMU_SMALL then trims the sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cuda_runtime_api.h>

#define CT_BACKENDS 1 /* CPU and GPU, ct_setup and ct_teardown */
#include "cuda_test_util.h"
#include "ps_kernels.h"
#include "ps_kernels_cuda.h"

#define TOL 1e-4
#ifdef PS_CU_EMULATE
#define EMU_SMALL 1 /* each emulated block with barriers costs a few hundred thread switches */
#else
#define EMU_SMALL 0
#endif

/* ---- helpers ------------------------------------------------------------------------------ */

/* A host array mirrored on both backends. */
typedef struct buf {
  size_t n;
  float *host, *c, *g; /* host copy, CPU backend, CUDA backend */
} buf;

static buf buf_new(size_t n) {
  buf b = {.n = n};
  b.host = calloc(n ? n : 1, sizeof(float));
  assert_non_null(b.host);
  assert_int_equal(ps_kern_alloc(CPU, n * sizeof(float), (void **)&b.c), PS_OK);
  assert_int_equal(ps_kern_alloc(GPU, n * sizeof(float), (void **)&b.g), PS_OK);
  return b;
}
static void buf_upload(buf *b) {
  assert_int_equal(ps_kern_to_device(CPU, b->c, b->host, b->n * sizeof(float)), PS_OK);
  assert_int_equal(ps_kern_to_device(GPU, b->g, b->host, b->n * sizeof(float)), PS_OK);
}
static buf buf_rand(ct_rng *r, size_t n, float lo, float hi) {
  buf b = buf_new(n);
  ct_fill(r, b.host, n, lo, hi);
  buf_upload(&b);
  return b;
}
static void buf_free(buf *b) {
  ps_kern_free(CPU, b->c);
  ps_kern_free(GPU, b->g);
  free(b->host);
  memset(b, 0, sizeof *b);
}
/* Downloads both and returns the normalised error of the CUDA result against the CPU one. */
static double buf_err_at(const buf *b, size_t off, size_t n) {
  float *hc = malloc((n ? n : 1) * sizeof(float)), *hg = malloc((n ? n : 1) * sizeof(float));
  assert_non_null(hc);
  assert_non_null(hg);
  assert_int_equal(ps_kern_to_host(CPU, hc, b->c + off, n * sizeof(float)), PS_OK);
  assert_int_equal(ps_kern_to_host(GPU, hg, b->g + off, n * sizeof(float)), PS_OK);
  double e = ct_norm_err(hg, hc, n);
  free(hc);
  free(hg);
  return e;
}
static double buf_err(const buf *b) { return buf_err_at(b, 0, b->n); }

#define EXPECT_CLOSE(err, tol, ...)                                       \
  do {                                                                    \
    double e_ = (err);                                                    \
    if (!(e_ <= (tol))) {                                                 \
      print_error(__VA_ARGS__);                                           \
      print_error(": normalised error %.3g > %.1g\n", e_, (double)(tol)); \
      fail();                                                             \
    }                                                                     \
  } while (0)

/* ---- GEMM --------------------------------------------------------------------------------- */

static void test_sgemm(void **st) {
  (void)st;
  ct_rng r = {1};
  const int shapes[][3] = {{1, 1, 1},    {1, 7, 3},       {5, 1, 9}, {33, 17, 65},
                           {64, 16, 13}, {257, 129, 367}, {4, 3, 0}, {2048, 1, 256}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int m = shapes[s][0], n = shapes[s][1], kk = shapes[s][2];
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bi = 0; bi < 2; bi++) {
          float beta = bi ? 0.5f : 0.0f;
          int pad = (int)(s % 3);
          int arows = ta ? kk : m, acols = ta ? m : kk;
          int brows = tb ? n : kk, bcols = tb ? kk : n;
          int lda = (acols > 1 ? acols : 1) + pad, ldb = (bcols > 1 ? bcols : 1) + pad,
              ldc = n + pad;
          buf A = buf_rand(&r, (size_t)(arows ? arows : 1) * lda, -1, 1);
          buf B = buf_rand(&r, (size_t)(brows ? brows : 1) * ldb, -1, 1);
          buf C = buf_new((size_t)m * ldc);
          ct_fill(&r, C.host, C.n, -1, 1);
          if (beta == 0.0f) /* C must not be read: NaN in the output area must vanish */
            for (int i = 0; i < m; i++)
              for (int j = 0; j < n; j++) C.host[(size_t)i * ldc + j] = NAN;
          buf_upload(&C);
          assert_int_equal(
              ps_kern_sgemm(CPU, ta, tb, m, n, kk, 1.25f, A.c, lda, B.c, ldb, beta, C.c, ldc),
              PS_OK);
          assert_int_equal(
              ps_kern_sgemm(GPU, ta, tb, m, n, kk, 1.25f, A.g, lda, B.g, ldb, beta, C.g, ldc),
              PS_OK);
          /* The padding columns are compared too: they must be left alone. */
          EXPECT_CLOSE(buf_err(&C), TOL, "sgemm m=%d n=%d k=%d ta=%d tb=%d beta=%g", m, n, kk, ta,
                       tb, beta);
          buf_free(&A);
          buf_free(&B);
          buf_free(&C);
        }
  }
}

/* ---- bias + activation ------------------------------------------------------------------ */

/* bf16 round to nearest even by scaling (independent of both backends): x = m 2^e with
 * 0.5 <= |m| < 1 keeps rint(m 2^8) 2^(e-8). */
static float bf16_round(float x) {
  if (x == 0.0f || !isfinite(x)) return x;
  int e;
  double m = frexp((double)x, &e);
  return (float)ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

/* ps_kern_gemm(PS_KERN_BF16) on CUDA (cublasGemmEx, bf16 inputs, FP32 accumulation) against the
 * CPU backend's FP32 GEMM of the same inputs rounded to bf16 here: the same products, summed
 * in FP32 in another order (normalised error ~k 2^-24, TOL is 1e-4). Against FP32 on the
 * unrounded inputs it must differ by more than that (the rounding happened) and by less than
 * bf16's 2u = 2^-7 of the magnitudes (a normalised bound for these well-scaled inputs). */
static void test_gemm_bf16(void **st) {
  (void)st;
  ct_rng r = {3};
  if (!ps_kern_has_bf16(GPU)) {
    float x = 1, y = 0;
    assert_int_equal(ps_kern_gemm(GPU, PS_KERN_BF16, false, false, 1, 1, 1, 1.0f, &x, 1, &x, 1,
                                  0.0f, &y, 1),
                     PS_ERR_UNSUPPORTED);
    skip(); /* before sm_80 */
  }
  const int shapes[][3] = {{1, 1, 1}, {5, 1, 9}, {33, 17, 65}, {64, 16, 13}, {257, 129, 367},
                           {4, 3, 0}, {EMU_SMALL ? 256 : 2048, 1, 256}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int m = shapes[s][0], n = shapes[s][1], kk = shapes[s][2];
    for (int t = 0; t < 4; t++) {
      bool ta = t & 1, tb = t & 2;
      float beta = s % 2 ? 0.5f : 0.0f;
      int pad = (int)(s % 3), ar = ta ? kk : m, ac = ta ? m : kk, br = tb ? n : kk,
          bc = tb ? kk : n;
      int lda = (ac > 1 ? ac : 1) + pad, ldb = (bc > 1 ? bc : 1) + pad, ldc = n + pad;
      buf A = buf_rand(&r, (size_t)(ar ? ar : 1) * lda, -1, 1);
      buf B = buf_rand(&r, (size_t)(br ? br : 1) * ldb, -1, 1);
      buf C = buf_rand(&r, (size_t)m * ldc, -1, 1), C32 = buf_new(C.n);
      memcpy(C32.host, C.host, C.n * sizeof(float));
      buf_upload(&C32);
      assert_int_equal(ps_kern_gemm(GPU, PS_KERN_BF16, ta, tb, m, n, kk, 1.25f, A.g, lda, B.g,
                                    ldb, beta, C.g, ldc),
                       PS_OK);
      assert_int_equal(ps_kern_sgemm(CPU, ta, tb, m, n, kk, 1.25f, A.c, lda, B.c, ldb, beta,
                                     C32.c, ldc),
                       PS_OK);
      for (size_t i = 0; i < A.n; i++) A.host[i] = bf16_round(A.host[i]);
      for (size_t i = 0; i < B.n; i++) B.host[i] = bf16_round(B.host[i]);
      buf_upload(&A);
      buf_upload(&B);
      assert_int_equal(ps_kern_sgemm(CPU, ta, tb, m, n, kk, 1.25f, A.c, lda, B.c, ldb, beta,
                                     C.c, ldc),
                       PS_OK);
      EXPECT_CLOSE(buf_err(&C), TOL, "bf16 gemm m=%d n=%d k=%d ta=%d tb=%d", m, n, kk, ta, tb);
      float *hg = malloc(C.n * sizeof(float)), *h32 = malloc(C.n * sizeof(float));
      assert_int_equal(ps_kern_to_host(GPU, hg, C.g, C.n * sizeof(float)), PS_OK);
      assert_int_equal(ps_kern_to_host(CPU, h32, C32.c, C.n * sizeof(float)), PS_OK);
      double e = ct_norm_err(hg, h32, C.n);
      if (kk >= 9 && !(e > TOL && e < 1.0 / 128))
        fail_msg("bf16 gemm m=%d n=%d k=%d: %.3g from FP32, want (1e-4, 2^-7)", m, n, kk, e);
      free(hg), free(h32);
      buf_free(&A), buf_free(&B), buf_free(&C), buf_free(&C32);
    }
  }
}

static void test_bias_act(void **st) {
  (void)st;
  ct_rng r = {2};
  const int ms[] = {1, 3, EMU_SMALL ? 130 : 1000, EMU_SMALL ? 301 : 4099},
            ns[] = {1, 5, 16, 64, 513};
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 5; b++)
      for (int act = 0; act < 2; act++)
        for (int variant = 0; variant < 3; variant++) { /* 0 plain, 1 in place, 2 unaligned */
          int m = ms[a], n = ns[b];
          size_t mn = (size_t)m * n, off = variant == 2 ? 1 : 0;
          buf X = buf_rand(&r, mn + off, -1, 1), bias = buf_rand(&r, (size_t)n, -0.5f, 0.5f);
          buf Y = variant == 1 ? X : buf_new(mn + off);
          float *yc = Y.c + off, *yg = Y.g + off;
          assert_int_equal(ps_kern_bias_act_fwd(CPU, act, m, n, X.c + off, bias.c, yc), PS_OK);
          assert_int_equal(ps_kern_bias_act_fwd(GPU, act, m, n, X.g + off, bias.g, yg), PS_OK);
          EXPECT_CLOSE(buf_err_at(&Y, off, mn), 1e-6, "bias_act_fwd m=%d n=%d act=%d v=%d", m, n,
                       act, variant);
          /* backward from the CPU's y (identical inputs on both sides) */
          float *yh = malloc(mn * sizeof(float));
          assert_int_equal(ps_kern_to_host(CPU, yh, yc, mn * sizeof(float)), PS_OK);
          assert_int_equal(ps_kern_to_device(GPU, yg, yh, mn * sizeof(float)), PS_OK);
          free(yh);
          buf dY = buf_rand(&r, mn + off, -1, 1), db = buf_new((size_t)n);
          buf dX = variant == 1 ? dY : buf_new(mn + off);
          assert_int_equal(ps_kern_bias_act_bwd(CPU, act, m, n, yc, dY.c + off, dX.c + off, db.c),
                           PS_OK);
          assert_int_equal(ps_kern_bias_act_bwd(GPU, act, m, n, yg, dY.g + off, dX.g + off, db.g),
                           PS_OK);
          EXPECT_CLOSE(buf_err_at(&dX, off, mn), 1e-6, "bias_act_bwd dx m=%d n=%d act=%d v=%d", m,
                       n, act, variant);
          EXPECT_CLOSE(buf_err(&db), TOL, "bias_act_bwd dbias m=%d n=%d act=%d v=%d", m, n, act,
                       variant);
          if (variant != 1) {
            buf_free(&Y);
            buf_free(&dX);
          }
          buf_free(&X);
          buf_free(&bias);
          buf_free(&dY);
          buf_free(&db);
        }
}

/* ---- DCNv2 cross layer: element-wise kernels, the strided copy ------------------------------ */

static void test_cross(void **st) {
  (void)st;
  ct_rng r = {21};
  const int ms[] = {1, 7, EMU_SMALL ? 130 : 2048}, ns[] = {1, 48, 432};
  for (size_t a = 0; a < 3; a++)
    for (size_t b = 0; b < 3; b++)
      for (int first = 0; first < 2; first++) {
        int m = ms[a], n = ns[b];
        size_t mn = (size_t)m * n;
        buf X0 = buf_rand(&r, mn, -1, 1), Z = buf_rand(&r, mn, -1, 1);
        buf bias = buf_rand(&r, (size_t)n, -1, 1), Y = buf_new(mn);
        buf XL = first ? X0 : buf_rand(&r, mn, -1, 1);
        /* zb in place over z, as the model runs it */
        assert_int_equal(ps_kern_cross_fwd(CPU, m, n, X0.c, Z.c, bias.c, XL.c, Z.c, Y.c), PS_OK);
        assert_int_equal(ps_kern_cross_fwd(GPU, m, n, X0.g, Z.g, bias.g, XL.g, Z.g, Y.g), PS_OK);
        EXPECT_CLOSE(buf_err(&Z), 1e-6, "cross_fwd zb m=%d n=%d", m, n);
        EXPECT_CLOSE(buf_err(&Y), 1e-6, "cross_fwd y m=%d n=%d", m, n);
        buf dY = buf_rand(&r, mn, -1, 1), dZ = buf_new(mn), dX0 = buf_rand(&r, mn, -1, 1);
        float resid = first ? 1.0f : 0.0f;
        /* both from the CPU's zb (identical inputs) */
        assert_int_equal(ps_kern_to_host(CPU, Z.host, Z.c, mn * sizeof(float)), PS_OK);
        buf_upload(&Z);
        assert_int_equal(ps_kern_cross_bwd(CPU, m, n, X0.c, Z.c, dY.c, resid, dZ.c, dX0.c), PS_OK);
        assert_int_equal(ps_kern_cross_bwd(GPU, m, n, X0.g, Z.g, dY.g, resid, dZ.g, dX0.g), PS_OK);
        EXPECT_CLOSE(buf_err(&dZ), 1e-6, "cross_bwd dz m=%d n=%d", m, n);
        EXPECT_CLOSE(buf_err(&dX0), 1e-6, "cross_bwd dx0 m=%d n=%d first=%d", m, n, first);
        /* copy2d: x0 = [y | z] row by row, then the second part split back out */
        buf Cat = buf_new(2 * mn), Back = buf_new(mn);
        for (int kb = 0; kb < 2; kb++) {
          ps_kern *k = kb ? GPU : CPU;
          float *y = kb ? Y.g : Y.c, *z = kb ? Z.g : Z.c, *cat = kb ? Cat.g : Cat.c;
          assert_int_equal(ps_kern_copy2d(k, m, n, y, n, cat, 2 * n), PS_OK);
          assert_int_equal(ps_kern_copy2d(k, m, n, z, n, cat + n, 2 * n), PS_OK);
          assert_int_equal(ps_kern_copy2d(k, m, n, cat + n, 2 * n, kb ? Back.g : Back.c, n), PS_OK);
        }
        EXPECT_CLOSE(buf_err(&Cat), 1e-6, "copy2d concat m=%d n=%d", m, n);
        EXPECT_CLOSE(buf_err(&Back), 1e-6, "copy2d split m=%d n=%d", m, n);
        buf *all[] = {&X0, &Z, &bias, &Y, &dY, &dZ, &dX0, &Cat, &Back};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) buf_free(all[i]);
        if (!first) buf_free(&XL);
      }
}

/* ---- dot interaction ---------------------------------------------------------------------- */

static void test_interact(void **st) {
  (void)st;
  ct_rng r = {3};
  /* (batch, num_sparse, dim): tiny, Kaggle (shared-memory path), odd, dim 128 (one sample per
   * block), dim 512 (global-memory fallback). */
  const int cases[][3] = {{1, 0, 1},  {1, 1, 3},    {7, 26, 16},  {300, 26, 16},
                          {5, 3, 33}, {3, 26, 128}, {2, 26, 512}, {64, 8, 7}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int B = cases[c][0], S = cases[c][1], D = cases[c][2];
    int W = ps_kern_interact_width(S, D);
    buf bot = buf_rand(&r, (size_t)B * D, -1, 1), emb = buf_rand(&r, (size_t)B * S * D + 1, -1, 1);
    buf out = buf_new((size_t)B * W);
    assert_int_equal(ps_kern_interact_fwd(CPU, B, S, D, bot.c, emb.c, out.c), PS_OK);
    assert_int_equal(ps_kern_interact_fwd(GPU, B, S, D, bot.g, emb.g, out.g), PS_OK);
    EXPECT_CLOSE(buf_err(&out), TOL, "interact_fwd B=%d S=%d D=%d", B, S, D);
    buf dout = buf_rand(&r, (size_t)B * W, -1, 1);
    buf dbot = buf_new((size_t)B * D), demb = buf_new((size_t)B * S * D + 1);
    assert_int_equal(ps_kern_interact_bwd(CPU, B, S, D, bot.c, emb.c, dout.c, dbot.c, demb.c),
                     PS_OK);
    assert_int_equal(ps_kern_interact_bwd(GPU, B, S, D, bot.g, emb.g, dout.g, dbot.g, demb.g),
                     PS_OK);
    EXPECT_CLOSE(buf_err(&dbot), TOL, "interact_bwd dbottom B=%d S=%d D=%d", B, S, D);
    EXPECT_CLOSE(buf_err_at(&demb, 0, (size_t)B * S * D), TOL, "interact_bwd demb B=%d S=%d D=%d",
                 B, S, D);
    buf_free(&bot);
    buf_free(&emb);
    buf_free(&out);
    buf_free(&dout);
    buf_free(&dbot);
    buf_free(&demb);
  }
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* An int32 host array (bytes long) copied to both backends: *c on the CPU's, *g on CUDA's. */
static void ints_upload(const int32_t *host, size_t bytes, int32_t **c, int32_t **g) {
  assert_int_equal(ps_kern_alloc(CPU, bytes, (void **)c), PS_OK);
  assert_int_equal(ps_kern_alloc(GPU, bytes, (void **)g), PS_OK);
  assert_int_equal(ps_kern_to_device(CPU, *c, host, bytes), PS_OK);
  assert_int_equal(ps_kern_to_device(GPU, *g, host, bytes), PS_OK);
}
static void ints_free(int32_t *c, int32_t *g) {
  ps_kern_free(CPU, c);
  ps_kern_free(GPU, g);
}

typedef struct bags {
  int nbags, nnz;
  int32_t *idx, *off; /* host */
  int32_t *idx_c, *off_c, *idx_g, *off_g;
} bags;

/* Bags of 0..maxlen entries (about a fifth empty) over nrows rows, repeats likely. */
static bags bags_make(ct_rng *r, int nbags, int nrows, int maxlen) {
  bags b = {.nbags = nbags};
  b.off = malloc(((size_t)nbags + 1) * sizeof(int32_t));
  b.idx = calloc((size_t)nbags * maxlen + 1, sizeof(int32_t));
  b.off[0] = 0;
  for (int i = 0; i < nbags; i++) {
    int len = (maxlen == 0 || ct_int(r, 5) == 0) ? 0 : 1 + ct_int(r, maxlen);
    for (int j = 0; j < len; j++) b.idx[b.nnz++] = ct_int(r, nrows);
    b.off[i + 1] = b.nnz;
  }
  ints_upload(b.idx, ((size_t)b.nnz + 1) * sizeof(int32_t), &b.idx_c, &b.idx_g);
  ints_upload(b.off, ((size_t)nbags + 1) * sizeof(int32_t), &b.off_c, &b.off_g);
  return b;
}
static void bags_free(bags *b) {
  ints_free(b->idx_c, b->idx_g);
  ints_free(b->off_c, b->off_g);
  free(b->idx);
  free(b->off);
}

static void test_pool(void **st) {
  (void)st;
  ct_rng r = {4};
  /* (nbags, dim, nrows, maxlen): one bag, DLRM-like one-hot-ish, many repeats, wide odd dim,
   * every bag empty (nnz = 0), a large batch (grid-stride loop). */
  const int cases[][4] = {{1, 1, 1, 1},       {13, 16, 5, 3},  {2000, 16, 300, 4},
                          {100, 33, 1000, 2}, {50, 16, 10, 0}, {26 * 4096, 16, 50000, 1},
                          {7, 5, 2, 6}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int nb = cases[c][0], D = cases[c][1], nr = cases[c][2], ml = cases[c][3];
    bags b = bags_make(&r, nb, nr, ml);
    buf rows = buf_rand(&r, (size_t)nr * D, -1, 1);
    for (int md = 0; md < 3; md++) { /* sum, mean, per feature (3 a sample: 1st and 3rd mean) */
      ps_kern_pool mode = md == 0 ? PS_KERN_POOL_SUM : md == 1 ? PS_KERN_POOL_MEAN : (ps_kern_pool){5, 3};
      buf out = buf_new((size_t)nb * D);
      assert_int_equal(
          ps_kern_pool_fwd(CPU, mode, nb, D, nr, rows.c, b.nnz, b.idx_c, b.off_c, out.c), PS_OK);
      assert_int_equal(
          ps_kern_pool_fwd(GPU, mode, nb, D, nr, rows.g, b.nnz, b.idx_g, b.off_g, out.g), PS_OK);
      EXPECT_CLOSE(buf_err(&out), TOL, "pool_fwd nbags=%d dim=%d nrows=%d nnz=%d mode=%d", nb, D,
                   nr, b.nnz, md);
      buf dout = buf_rand(&r, (size_t)nb * D, -1, 1), drows = buf_new((size_t)nr * D);
      /* drows starts as garbage: pool_bwd must overwrite every row, used or not */
      ct_fill(&r, drows.host, drows.n, 5, 6);
      buf_upload(&drows);
      assert_int_equal(
          ps_kern_pool_bwd(CPU, mode, nb, D, nr, b.nnz, b.idx_c, b.off_c, dout.c, drows.c), PS_OK);
      assert_int_equal(
          ps_kern_pool_bwd(GPU, mode, nb, D, nr, b.nnz, b.idx_g, b.off_g, dout.g, drows.g), PS_OK);
      EXPECT_CLOSE(buf_err(&drows), TOL, "pool_bwd nbags=%d dim=%d nrows=%d nnz=%d mode=%d", nb, D,
                   nr, b.nnz, md);
      buf_free(&out);
      buf_free(&dout);
      buf_free(&drows);
    }
    buf_free(&rows);
    bags_free(&b);
  }
}

/* A bad row index is refused by the CPU at once and by CUDA at the next synchronising call
 * (never read out of bounds); the flag is cleared after it was reported. */
static void test_pool_bad_index(void **st) {
  (void)st;
  ct_rng r = {5};
  const int32_t idx[2] = {0, 3}; /* 3 == nrows */
  const int32_t off[5] = {0, 1, 2, 2, 2};
  int32_t *ic, *ig, *oc, *og;
  ints_upload(idx, sizeof idx, &ic, &ig);
  ints_upload(off, sizeof off, &oc, &og);
  buf rows = buf_rand(&r, 3 * 4, -1, 1), out = buf_new(4 * 4);
  assert_int_equal(ps_kern_pool_fwd(CPU, PS_KERN_POOL_SUM, 4, 4, 3, rows.c, 2, ic, oc, out.c),
                   PS_ERR_INVALID);
  ps_status st_g = ps_kern_pool_fwd(GPU, PS_KERN_POOL_SUM, 4, 4, 3, rows.g, 2, ig, og, out.g);
  if (st_g == PS_OK) st_g = ps_kern_sync(GPU);
  assert_int_equal(st_g, PS_ERR_INVALID);
  assert_int_equal(ps_kern_sync(GPU), PS_OK); /* reported once, then cleared */
  buf_free(&rows);
  buf_free(&out);
  ints_free(ic, ig);
  ints_free(oc, og);
}

/* ---- BCE ---------------------------------------------------------------------------------- */

static void test_bce(void **st) {
  (void)st;
  ct_rng r = {6};
  const int ns[] = {1, 255, 256, 257, EMU_SMALL ? 3000 : 100000, EMU_SMALL ? 20001 : 300001};
  for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
    int n = ns[c];
    buf z = buf_rand(&r, (size_t)n, -8, 8), y = buf_new((size_t)n), p = buf_new((size_t)n);
    for (int i = 0; i < n; i++) y.host[i] = (float)ct_int(&r, 2);
    if (n > 10) z.host[0] = 40.0f, z.host[1] = -40.0f, z.host[2] = 0.0f;
    buf_upload(&z);
    buf_upload(&y);
    buf loss = buf_new(1);
    for (int with_probs = 0; with_probs < 2; with_probs++) {
      assert_int_equal(ps_kern_bce_fwd(CPU, n, z.c, y.c, with_probs ? p.c : NULL, loss.c), PS_OK);
      assert_int_equal(ps_kern_bce_fwd(GPU, n, z.g, y.g, with_probs ? p.g : NULL, loss.g), PS_OK);
      EXPECT_CLOSE(buf_err(&loss), 1e-5, "bce_fwd loss n=%d", n);
      if (with_probs) EXPECT_CLOSE(buf_err(&p), 1e-6, "bce_fwd probs n=%d", n);
    }
    /* labels NULL: probabilities only, the loss is left alone */
    float sentinel = 123.0f, got = 0.0f;
    assert_int_equal(ps_kern_to_device(GPU, loss.g, &sentinel, sizeof sentinel), PS_OK);
    assert_int_equal(ps_kern_bce_fwd(GPU, n, z.g, NULL, p.g, loss.g), PS_OK);
    assert_int_equal(ps_kern_to_host(GPU, &got, loss.g, sizeof got), PS_OK);
    assert_true(got == sentinel);
    EXPECT_CLOSE(buf_err(&p), 1e-6, "bce_fwd probs only n=%d", n);
    buf dz = buf_new((size_t)n);
    assert_int_equal(ps_kern_bce_bwd(CPU, n, z.c, y.c, 1.0f / n, dz.c), PS_OK);
    assert_int_equal(ps_kern_bce_bwd(GPU, n, z.g, y.g, 1.0f / n, dz.g), PS_OK);
    EXPECT_CLOSE(buf_err(&dz), 1e-6, "bce_bwd n=%d", n);
    buf_free(&z);
    buf_free(&y);
    buf_free(&p);
    buf_free(&loss);
    buf_free(&dz);
  }
}

/* ---- element-wise and optimizers -------------------------------------------------------- */

static void test_optimizers(void **st) {
  (void)st;
  ct_rng r = {7};
  const size_t ns[] = {1, 1001, ((size_t)1 << 20) + 3};
  for (size_t c = 0; c < 3; c++) {
    size_t n = ns[c];
    buf w = buf_rand(&r, n, -1, 1), g = buf_new(n), h = buf_rand(&r, n, 0, 0.1f);
    buf m = buf_new(n), v = buf_new(n);
    buf_upload(&m); /* zeros */
    buf_upload(&v);
    assert_int_equal(ps_kern_scale(CPU, n, 0.75f, w.c), PS_OK);
    assert_int_equal(ps_kern_scale(GPU, n, 0.75f, w.g), PS_OK);
    EXPECT_CLOSE(buf_err(&w), 1e-7, "scale n=%zu", n);
    for (int step = 1; step <= 3; step++) {
      ct_fill(&r, g.host, n, -1, 1);
      buf_upload(&g);
      assert_int_equal(ps_kern_sgd(CPU, n, w.c, g.c, 0.1f, 0.01f), PS_OK);
      assert_int_equal(ps_kern_sgd(GPU, n, w.g, g.g, 0.1f, 0.01f), PS_OK);
      assert_int_equal(ps_kern_adagrad(CPU, n, w.c, g.c, h.c, 0.05f, 1e-10f, 0.001f), PS_OK);
      assert_int_equal(ps_kern_adagrad(GPU, n, w.g, g.g, h.g, 0.05f, 1e-10f, 0.001f), PS_OK);
      assert_int_equal(
          ps_kern_adam(CPU, n, w.c, g.c, m.c, v.c, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, step), PS_OK);
      assert_int_equal(
          ps_kern_adam(GPU, n, w.g, g.g, m.g, v.g, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, step), PS_OK);
    }
    EXPECT_CLOSE(buf_err(&w), 1e-5, "optimizers w n=%zu", n);
    EXPECT_CLOSE(buf_err(&h), 1e-5, "adagrad state n=%zu", n);
    EXPECT_CLOSE(buf_err(&m), 1e-5, "adam m n=%zu", n);
    EXPECT_CLOSE(buf_err(&v), 1e-5, "adam v n=%zu", n);
    buf_free(&w);
    buf_free(&g);
    buf_free(&h);
    buf_free(&m);
    buf_free(&v);
  }
}

/* ---- memory ------------------------------------------------------------------------------- */

static void test_memory(void **st) {
  (void)st;
  /* to_device returns when the source may be reused: overwrite it right after each call, more
   * times than the staging ring has slots, with sizes that make the slots grow. */
  enum { N = 11 };
  size_t sizes[N];
  float *dev[N], *src = malloc(((size_t)3 << 20) * sizeof(float) + 64);
  for (int i = 0; i < N; i++) {
    sizes[i] = i % 3 == 0 ? 1 : (i % 3 == 1 ? 4099 : ((size_t)3 << 20) - (size_t)i);
    assert_int_equal(ps_kern_alloc(GPU, sizes[i] * sizeof(float), (void **)&dev[i]), PS_OK);
    for (size_t j = 0; j < sizes[i]; j++) src[j] = (float)(i * 1000003 + (int)(j % 977));
    assert_int_equal(ps_kern_to_device(GPU, dev[i], src, sizes[i] * sizeof(float)), PS_OK);
    memset(src, 0xff, sizes[i] * sizeof(float)); /* would corrupt an unfinished copy */
  }
  float *back = malloc(((size_t)3 << 20) * sizeof(float));
  for (int i = 0; i < N; i++) {
    assert_int_equal(ps_kern_to_host(GPU, back, dev[i], sizes[i] * sizeof(float)), PS_OK);
    for (size_t j = 0; j < sizes[i]; j++)
      if (back[j] != (float)(i * 1000003 + (int)(j % 977))) fail_msg("copy %d word %zu", i, j);
  }
  /* copy, memset0, and to_host into pinned memory */
  assert_int_equal(ps_kern_copy(GPU, dev[2], dev[1], 4099 * sizeof(float)), PS_OK);
  assert_int_equal(ps_kern_memset0(GPU, dev[1], 10 * sizeof(float)), PS_OK);
  /* ps_kern_host_alloc: page-locked on CUDA (to_host copies straight into it), malloc on CPU */
  float *pinned = NULL, *plain = NULL;
  assert_int_equal(ps_kern_host_alloc(GPU, 4099 * sizeof(float), (void **)&pinned), PS_OK);
  struct cudaPointerAttributes pa;
  assert_int_equal(cudaPointerGetAttributes(&pa, pinned), cudaSuccess);
  assert_int_equal(pa.type, cudaMemoryTypeHost);
  assert_int_equal(ps_kern_host_alloc(CPU, 4099 * sizeof(float), (void **)&plain), PS_OK);
  assert_int_equal(cudaPointerGetAttributes(&pa, plain), cudaSuccess);
  assert_int_not_equal(pa.type, cudaMemoryTypeHost);
  ps_kern_host_free(CPU, plain);
  assert_int_equal(ps_kern_to_host(GPU, pinned, dev[2], 4099 * sizeof(float)), PS_OK);
  for (size_t j = 0; j < 4099; j++) assert_true(pinned[j] == (float)(1 * 1000003 + (int)(j % 977)));
  assert_int_equal(ps_kern_to_host(GPU, pinned, dev[1], 4099 * sizeof(float)), PS_OK);
  for (size_t j = 0; j < 4099; j++)
    assert_true(pinned[j] == (j < 10 ? 0.0f : (float)(1 * 1000003 + (int)(j % 977))));
  ps_kern_host_free(GPU, pinned);
  for (int i = 0; i < N; i++) ps_kern_free(GPU, dev[i]);
  free(src);
  free(back);
  assert_int_equal(ps_kern_sync(GPU), PS_OK);
}

/* ps_kern_to_device_pinned (issue 32): from ps_kern_host_alloc memory the upload is enqueued
 * straight from the caller's page-locked buffer (the emulator sees that buffer as the copy's
 * source, where ps_kern_to_device's source is its staging ring); from ordinary memory it goes
 * through the ring as ps_kern_to_device. The data arrives either way, on the CPU backend too. */
static void test_upload_pinned(void **st) {
  (void)st;
  enum { N = 4099 };
  float *pinned = NULL, *dev = NULL, *back = malloc(N * sizeof(float));
  float *plain = malloc(N * sizeof(float));
  assert_int_equal(ps_kern_host_alloc(GPU, N * sizeof(float), (void **)&pinned), PS_OK);
  assert_int_equal(ps_kern_alloc(GPU, N * sizeof(float), (void **)&dev), PS_OK);
  for (int j = 0; j < N; j++) pinned[j] = (float)j * 0.5f, plain[j] = (float)-j;
  assert_int_equal(ps_kern_to_device_pinned(GPU, dev, pinned, N * sizeof(float)), PS_OK);
#ifdef PS_CU_EMULATE
  assert_ptr_equal(ps_emu_last_h2d_src, pinned); /* no staging copy */
#endif
  assert_int_equal(ps_kern_to_host(GPU, back, dev, N * sizeof(float)), PS_OK);
  for (int j = 0; j < N; j++) assert_true(back[j] == (float)j * 0.5f);
  assert_int_equal(ps_kern_to_device(GPU, dev, pinned, N * sizeof(float)), PS_OK);
#ifdef PS_CU_EMULATE
  assert_ptr_not_equal(ps_emu_last_h2d_src, pinned); /* the staging ring */
#endif
  assert_int_equal(ps_kern_to_device_pinned(GPU, dev, plain, N * sizeof(float)), PS_OK);
  memset(plain, 0xff, N * sizeof(float)); /* ordinary memory: staged, so reusable at once */
#ifdef PS_CU_EMULATE
  assert_ptr_not_equal(ps_emu_last_h2d_src, plain);
#endif
  assert_int_equal(ps_kern_to_host(GPU, back, dev, N * sizeof(float)), PS_OK);
  for (int j = 0; j < N; j++) assert_true(back[j] == (float)-j);
  /* the CPU backend: host memory, a plain copy */
  float *cdst = malloc(N * sizeof(float));
  assert_int_equal(ps_kern_to_device_pinned(CPU, cdst, pinned, N * sizeof(float)), PS_OK);
  assert_memory_equal(cdst, pinned, N * sizeof(float));
  free(cdst);
  ps_kern_free(GPU, dev);
  ps_kern_host_free(GPU, pinned);
  free(plain);
  free(back);
  assert_int_equal(ps_kern_sync(GPU), PS_OK);
}

static void test_gemm_timer(void **st) {
  (void)st;
  ct_rng r = {8};
  buf A = buf_rand(&r, 256 * 256, -1, 1), C = buf_new(256 * 256);
  assert_int_equal(ps_kern_cuda_gemm_timing(GPU, true), PS_OK);
  for (int i = 0; i < 3; i++)
    assert_int_equal(
        ps_kern_sgemm(GPU, false, true, 256, 256, 256, 1.0f, A.g, 256, A.g, 256, 0.0f, C.g, 256),
        PS_OK);
  double ms = -1;
  long calls = -1;
  assert_int_equal(ps_kern_cuda_gemm_time(GPU, &ms, &calls), PS_OK);
  assert_int_equal(calls, 3);
  assert_true(ms > 0.0);
  assert_int_equal(ps_kern_cuda_gemm_timing(GPU, false), PS_OK);
  assert_non_null(ps_kern_cuda_stream(GPU));
  assert_null(ps_kern_cuda_stream(CPU));
  /* The portable accessor NCCL is handed in ps-worker gives the same stream. */
  assert_ptr_equal(ps_kern_stream(GPU), ps_kern_cuda_stream(GPU));
  assert_null(ps_kern_stream(CPU));
  assert_int_equal(ps_kern_cuda_device(GPU), 0);
  buf_free(&A);
  buf_free(&C);
}

/* ---- setup -------------------------------------------------------------------------------- */

/* What must hold on a machine without a GPU (checked before exiting 77). */
#ifdef PS_CU_EMULATE
static int check_no_gpu(void) { return 1; } /* the emulated device is always there */
#else
static int check_no_gpu(void) {
  ps_kern *k = (ps_kern *)1;
  if (ps_kern_cuda_create(0, &k, NULL) != PS_ERR_UNSUPPORTED || k != NULL) return 1;
  if (ps_kern_create("cuda", 0, &k, NULL) != PS_ERR_UNSUPPORTED || k != NULL) return 1;
  if (ps_kern_create("cuda:1", 0, &k, NULL) != PS_ERR_UNSUPPORTED) return 1;
  if (ps_kern_create("cuda:x", 0, &k, NULL) != PS_ERR_INVALID) return 1;
  if (ps_cuda_device_count() != 0) return 1;
  return 0;
}
#endif

int main(void) {
  if (!ps_cuda_available()) {
    if (check_no_gpu()) {
      fprintf(stderr, "test_cuda_ops: the CUDA backend misreports a machine without a GPU\n");
      return 1;
    }
  }
  ct_require_gpu("test_cuda_ops");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgemm),          cmocka_unit_test(test_gemm_bf16),
      cmocka_unit_test(test_bias_act),
      cmocka_unit_test(test_interact),       cmocka_unit_test(test_pool),
      cmocka_unit_test(test_pool_bad_index), cmocka_unit_test(test_bce),
      cmocka_unit_test(test_optimizers),     cmocka_unit_test(test_memory),
      cmocka_unit_test(test_gemm_timer),     cmocka_unit_test(test_upload_pinned),
      cmocka_unit_test(test_cross),
  };
  return cmocka_run_group_tests_name("cuda_ops", tests, ct_setup, ct_teardown);
}
