/* test_kernels_cpu: every CPU kernel of ps_kernels.h against an independent reference.
 *
 * Forward results are compared with naive double-precision loops written here; backward
 * kernels are checked by central finite differences of a scalar loss L = sum(R * out) with a
 * fixed random R (the ops are linear, bilinear or piecewise linear in each input, so central
 * differences are exact up to rounding; inputs are kept away from ReLU's kink). Pooling and
 * interaction are also run on multi-hot bags, empty bags, batch 1, both dims (16 takes the
 * AVX-512 path, others the generic loops), and for bitwise equality across thread counts.
 * The DCNv2 cross layer's element-wise forward against its definition, its backward by finite
 * differences (also for layer 0, whose x_l is x0), and the strided copy. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_kernels.h"

static uint64_t rs = 88172645463325252ull;
static float frand(float lo, float hi) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return lo + (hi - lo) * (float)((rs >> 11) * (1.0 / 9007199254740992.0));
}
static int irand(int n) { return (int)(frand(0.0f, 1.0f) * (float)n) % n; }
static float *fvec(size_t n, float lo, float hi) {
  float *v = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) v[i] = frand(lo, hi);
  return v;
}

static ps_kern *K1, *K2; /* 1 and 2 threads */

static int setup(void **st) {
  (void)st;
  if (ps_kern_cpu_create(1, &K1) != PS_OK || ps_kern_cpu_create(2, &K2) != PS_OK) return -1;
  return 0;
}
static int teardown(void **st) {
  (void)st;
  ps_kern_destroy(&K1);
  ps_kern_destroy(&K2);
  assert_null(K1);
  return 0;
}

static double dotR(const float *r, const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)r[i] * x[i];
  return s;
}

/* Finite-difference check: loss(ctx) is recomputed after nudging x[i]. */
typedef double (*loss_fn)(void *ctx);
static void fd_check(const char *what, float *x, size_t n, const float *analytic, loss_fn f,
                     void *ctx, float eps) {
  size_t step = n > 40 ? n / 40 : 1; /* about 40 probes per tensor */
  for (size_t i = 0; i < n; i += step) {
    float x0 = x[i];
    x[i] = x0 + eps;
    double lp = f(ctx);
    x[i] = x0 - eps;
    double lm = f(ctx);
    x[i] = x0;
    double num = (lp - lm) / (2.0 * eps);
    double tol = 2e-3 * fmax(1.0, fabs(num));
    if (fabs(num - analytic[i]) > tol)
      fail_msg("%s[%zu]: analytic %.6g, finite difference %.6g", what, i, analytic[i], num);
  }
}

/* ---- sgemm ---- */

static void naive_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, const float *c0, int ldc, double *out) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        s += av * bv;
      }
      out[(size_t)i * n + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * c0[(size_t)i * ldc + j]);
    }
}

static void test_sgemm(void **st) {
  (void)st;
  /* {128, 64, 13} and {70, 13, 100} take the thin-GEMM paths (small K for NT, small N for TN) */
  const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {128, 64, 13}, {300, 512, 13}, {70, 13, 100}, {130, 13, 700}, {5, 1, 256}, {3, 4, 0}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bz = 0; bz < 2; bz++) {
          int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
          int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
          float *a = fvec((size_t)(ta ? k : m) * lda, -1, 1);
          float *b = fvec((size_t)(tb ? n : k) * ldb, -1, 1);
          float *c = fvec((size_t)m * ldc, -1, 1);
          float beta = bz ? 0.0f : 0.3f;
          if (bz)
            for (int i = 0; i < m * ldc; i++) c[i] = NAN; /* beta 0: C must not be read */
          double *ref = malloc(sizeof(double) * (size_t)m * n + 8);
          naive_gemm(ta, tb, m, n, k, 0.7f, a, lda, b, ldb, beta, c, ldc, ref);
          assert_int_equal(ps_kern_sgemm(K2, ta, tb, m, n, k, 0.7f, a, lda, b, ldb, beta, c, ldc), PS_OK);
          for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
              double d = fabs(c[(size_t)i * ldc + j] - ref[(size_t)i * n + j]);
              if (!(d <= 1e-5 * (1 + k))) fail_msg("sgemm %dx%dx%d ta%d tb%d (%d,%d): %g", m, n, k, ta, tb, i, j, d);
            }
          free(a), free(b), free(c), free(ref);
        }
  float x = 0;
  assert_int_equal(ps_kern_sgemm(K1, false, false, 2, 2, 2, 1, &x, 1, &x, 2, 0, &x, 2), PS_ERR_INVALID); /* lda < k */
  assert_int_equal(ps_kern_sgemm(K1, false, false, -1, 2, 2, 1, &x, 2, &x, 2, 0, &x, 2), PS_ERR_INVALID);
  assert_int_equal(ps_kern_sgemm(NULL, false, false, 1, 1, 1, 1, &x, 1, &x, 1, 0, &x, 1), PS_ERR_INVALID);
}

/* A linear layer built from sgemm: Y = X W^T, dW = dY^T X, dX = dY W. FD of L = sum(R * Y). */
typedef struct lin_ctx {
  int B, in, out;
  float *x, *w, *y, *r;
} lin_ctx;
static double lin_loss(void *p) {
  lin_ctx *c = p;
  ps_kern_sgemm(K2, false, true, c->B, c->out, c->in, 1, c->x, c->in, c->w, c->in, 0, c->y, c->out);
  return dotR(c->r, c->y, (size_t)c->B * c->out);
}
static void test_linear_fd(void **st) {
  (void)st;
  lin_ctx c = {.B = 9, .in = 13, .out = 6};
  c.x = fvec((size_t)c.B * c.in, -1, 1), c.w = fvec((size_t)c.out * c.in, -1, 1);
  c.y = fvec((size_t)c.B * c.out, 0, 0), c.r = fvec((size_t)c.B * c.out, -1, 1);
  float *dw = fvec((size_t)c.out * c.in, 0, 0), *dx = fvec((size_t)c.B * c.in, 0, 0);
  assert_int_equal(ps_kern_sgemm(K2, true, false, c.out, c.in, c.B, 1, c.r, c.out, c.x, c.in, 0, dw, c.in), PS_OK);
  assert_int_equal(ps_kern_sgemm(K2, false, false, c.B, c.in, c.out, 1, c.r, c.out, c.w, c.in, 0, dx, c.in), PS_OK);
  fd_check("linear dW", c.w, (size_t)c.out * c.in, dw, lin_loss, &c, 1e-2f);
  fd_check("linear dX", c.x, (size_t)c.B * c.in, dx, lin_loss, &c, 1e-2f);
  free(c.x), free(c.w), free(c.y), free(c.r), free(dw), free(dx);
}

/* ---- bias + activation ---- */

typedef struct ba_ctx {
  ps_kern_act act;
  int m, n;
  float *x, *b, *y, *r;
} ba_ctx;
static double ba_loss(void *p) {
  ba_ctx *c = p;
  ps_kern_bias_act_fwd(K2, c->act, c->m, c->n, c->x, c->b, c->y);
  return dotR(c->r, c->y, (size_t)c->m * c->n);
}
static void test_bias_act(void **st) {
  (void)st;
  for (int a = 0; a < 2; a++) {
    ba_ctx c = {.act = a ? PS_KERN_ACT_RELU : PS_KERN_ACT_NONE, .m = 300, .n = 77};
    size_t mn = (size_t)c.m * c.n;
    c.x = fvec(mn, -1, 1), c.b = fvec((size_t)c.n, -0.5f, 0.5f), c.y = fvec(mn, 0, 0), c.r = fvec(mn, -1, 1);
    for (size_t i = 0; i < mn; i++) { /* keep x + b away from the kink at 0 */
      float v = c.x[i] + c.b[i % c.n];
      if (fabsf(v) < 0.05f) c.x[i] += v >= 0 ? 0.1f : -0.1f;
    }
    ba_loss(&c);
    for (size_t i = 0; i < mn; i++) {
      double v = (double)c.x[i] + c.b[i % c.n];
      double want = a && v < 0 ? 0 : v;
      assert_true(fabs(c.y[i] - want) < 1e-6);
    }
    float *dx = fvec(mn, 0, 0), *db = fvec((size_t)c.n, 0, 0);
    for (int T = 1; T <= 2; T++) {
      assert_int_equal(ps_kern_bias_act_bwd(T == 1 ? K1 : K2, c.act, c.m, c.n, c.y, c.r, dx, db), PS_OK);
      fd_check("bias_act dx", c.x, mn, dx, ba_loss, &c, 1e-2f);
      fd_check("bias_act dbias", c.b, (size_t)c.n, db, ba_loss, &c, 1e-2f);
    }
    /* in place: dx == dy */
    float *g = malloc(mn * sizeof(float));
    memcpy(g, c.r, mn * sizeof(float));
    assert_int_equal(ps_kern_bias_act_bwd(K2, c.act, c.m, c.n, c.y, g, g, db), PS_OK);
    assert_memory_equal(g, dx, mn * sizeof(float));
    free(g), free(dx), free(db), free(c.x), free(c.b), free(c.y), free(c.r);
  }
  float db[3] = {1, 2, 3};
  assert_int_equal(ps_kern_bias_act_bwd(K1, PS_KERN_ACT_RELU, 0, 3, NULL, NULL, NULL, db), PS_OK);
  assert_true(db[0] == 0 && db[1] == 0 && db[2] == 0); /* batch 0: zero bias grad */
  assert_int_equal(ps_kern_bias_act_fwd(K1, (ps_kern_act)7, 1, 1, db, db, db), PS_ERR_INVALID);
}

/* ---- dot interaction ---- */

typedef struct it_ctx {
  ps_kern *k;
  int B, S, D;
  float *bot, *emb, *out, *r;
} it_ctx;
static double it_loss(void *p) {
  it_ctx *c = p;
  ps_kern_interact_fwd(c->k, c->B, c->S, c->D, c->bot, c->emb, c->out);
  return dotR(c->r, c->out, (size_t)c->B * ps_kern_interact_width(c->S, c->D));
}
static void test_interact(void **st) {
  (void)st;
  const int cases[][3] = {{1, 26, 16}, {70, 26, 16}, {3, 5, 7}, {65, 4, 3}, {2, 0, 16}, {1, 1, 1}, {5, 17, 16}};
  for (size_t q = 0; q < sizeof(cases) / sizeof(cases[0]); q++) {
    it_ctx c = {.k = K2, .B = cases[q][0], .S = cases[q][1], .D = cases[q][2]};
    int F = c.S + 1, W = ps_kern_interact_width(c.S, c.D);
    assert_int_equal(W, c.D + F * (F - 1) / 2);
    size_t nb = (size_t)c.B * c.D, ne = (size_t)c.B * c.S * c.D, no = (size_t)c.B * W;
    c.bot = fvec(nb, -1, 1), c.emb = fvec(ne, -1, 1), c.out = fvec(no, 0, 0), c.r = fvec(no, -1, 1);
    it_loss(&c);
    /* the DLRM reference's order: bottom, then for i = 1..F-1, j = 0..i-1: T[i] . T[j] */
    for (int b = 0; b < c.B; b++) {
      const float *o = c.out + (size_t)b * W;
      for (int d = 0; d < c.D; d++) assert_true(o[d] == c.bot[(size_t)b * c.D + d]);
      int z = c.D;
      for (int i = 1; i < F; i++)
        for (int j = 0; j < i; j++) {
          const float *ti = c.emb + ((size_t)b * c.S + i - 1) * c.D;
          const float *tj = j == 0 ? c.bot + (size_t)b * c.D : c.emb + ((size_t)b * c.S + j - 1) * c.D;
          double s = 0;
          for (int d = 0; d < c.D; d++) s += (double)ti[d] * tj[d];
          if (fabs(o[z] - s) > 1e-5) fail_msg("interact B%d S%d D%d b%d (%d,%d): %g vs %g", c.B, c.S, c.D, b, i, j, o[z], s);
          z++;
        }
    }
    float *db = fvec(nb, 0, 0), *de = fvec(ne, 0, 0), *db1 = fvec(nb, 0, 0), *de1 = fvec(ne, 0, 0);
    assert_int_equal(ps_kern_interact_bwd(K2, c.B, c.S, c.D, c.bot, c.emb, c.r, db, de), PS_OK);
    fd_check("interact dbottom", c.bot, nb, db, it_loss, &c, 1e-2f);
    fd_check("interact demb", c.emb, ne, de, it_loss, &c, 1e-2f);
    /* same bits on 1 thread */
    float *o1 = fvec(no, 0, 0);
    assert_int_equal(ps_kern_interact_fwd(K1, c.B, c.S, c.D, c.bot, c.emb, o1), PS_OK);
    it_loss(&c);
    assert_memory_equal(o1, c.out, no * sizeof(float));
    assert_int_equal(ps_kern_interact_bwd(K1, c.B, c.S, c.D, c.bot, c.emb, c.r, db1, de1), PS_OK);
    assert_memory_equal(db1, db, nb * sizeof(float));
    if (ne) assert_memory_equal(de1, de, ne * sizeof(float));
    free(c.bot), free(c.emb), free(c.out), free(c.r), free(db), free(de), free(db1), free(de1), free(o1);
  }
  assert_int_equal(ps_kern_interact_fwd(K1, 0, 26, 16, NULL, NULL, NULL), PS_OK);
  assert_int_equal(ps_kern_interact_fwd(K1, 1, 26, 0, NULL, NULL, NULL), PS_ERR_INVALID);
}

/* ---- embedding-bag pooling ---- */

typedef struct pl_ctx {
  ps_kern_pool mode;
  int nbags, D, nrows, nnz;
  float *rows, *out, *r;
  int32_t *idx, *off;
} pl_ctx;
static double pl_loss(void *p) {
  pl_ctx *c = p;
  ps_kern_pool_fwd(K2, c->mode, c->nbags, c->D, c->nrows, c->rows, c->nnz, c->idx, c->off, c->out);
  return dotR(c->r, c->out, (size_t)c->nbags * c->D);
}
static void make_bags(pl_ctx *c, int maxlen) {
  c->off = malloc(sizeof(int32_t) * ((size_t)c->nbags + 1));
  c->idx = malloc(sizeof(int32_t) * ((size_t)c->nbags * maxlen + 1));
  int n = 0;
  c->off[0] = 0;
  for (int b = 0; b < c->nbags; b++) {
    int len = irand(maxlen + 1); /* includes empty bags */
    if (b == 0) len = 0;         /* at least one empty bag */
    if (b == 1 && maxlen >= 2) len = 2;
    for (int j = 0; j < len; j++) c->idx[n++] = (int32_t)irand(c->nrows - 2); /* last 2 rows untouched */
    if (b == 1 && maxlen >= 2) c->idx[n - 1] = c->idx[n - 2]; /* a duplicate inside a bag */
    c->off[b + 1] = n;
  }
  c->nnz = n;
}
static void test_pool(void **st) {
  (void)st;
  const int cases[][4] = {/* nbags, D, nrows, maxlen */ {1 * 26, 16, 30, 1}, {64 * 26, 16, 500, 3},
                          {7, 5, 20, 4}, {1, 3, 4, 2}, {2000, 16, 900, 2}, {40, 16, 10, 5}};
  for (size_t q = 0; q < sizeof(cases) / sizeof(cases[0]); q++)
    for (int md = 0; md < 3; md++) {
      /* sum, mean, and per feature: 3 features a sample, the first and last by mean */
      ps_kern_pool mode = md == 0 ? PS_KERN_POOL_SUM : md == 1 ? PS_KERN_POOL_MEAN : (ps_kern_pool){5, 3};
      pl_ctx c = {.mode = mode, .nbags = cases[q][0], .D = cases[q][1], .nrows = cases[q][2]};
      make_bags(&c, cases[q][3]);
      size_t no = (size_t)c.nbags * c.D, nr = (size_t)c.nrows * c.D;
      c.rows = fvec(nr, -1, 1), c.out = fvec(no, 5, 5), c.r = fvec(no, -1, 1);
      pl_loss(&c);
      for (int b = 0; b < c.nbags; b++) {
        int len = c.off[b + 1] - c.off[b];
        for (int d = 0; d < c.D; d++) {
          double s = 0;
          for (int j = c.off[b]; j < c.off[b + 1]; j++) s += c.rows[(size_t)c.idx[j] * c.D + d];
          bool mean = md == 1 || (md == 2 && b % 3 != 1);
          if (mean && len > 0) s /= len;
          assert_true(fabs(c.out[(size_t)b * c.D + d] - s) < 1e-5); /* empty bag: exactly 0 */
        }
      }
      float *dr = fvec(nr, 9, 9), *dr1 = fvec(nr, 9, 9);
      assert_int_equal(ps_kern_pool_bwd(K2, c.mode, c.nbags, c.D, c.nrows, c.nnz, c.idx, c.off, c.r, dr), PS_OK);
      fd_check("pool drows", c.rows, nr, dr, pl_loss, &c, 1e-2f);
      for (int r = c.nrows - 2; r < c.nrows; r++)
        for (int d = 0; d < c.D; d++) assert_true(dr[(size_t)r * c.D + d] == 0.0f); /* untouched rows */
      assert_int_equal(ps_kern_pool_bwd(K1, c.mode, c.nbags, c.D, c.nrows, c.nnz, c.idx, c.off, c.r, dr1), PS_OK);
      assert_memory_equal(dr, dr1, nr * sizeof(float)); /* same bits whatever the threads */
      free(dr), free(dr1), free(c.rows), free(c.out), free(c.r), free(c.idx), free(c.off);
    }
  /* bad input is refused, not read out of bounds */
  float rows[8] = {0}, out[8];
  int32_t idx[2] = {0, 4}, off[3] = {0, 1, 2}, badoff[3] = {0, 2, 1};
  assert_int_equal(ps_kern_pool_fwd(K1, PS_KERN_POOL_SUM, 2, 2, 4, rows, 2, idx, off, out), PS_ERR_INVALID);
  idx[1] = 3;
  assert_int_equal(ps_kern_pool_fwd(K1, PS_KERN_POOL_SUM, 2, 2, 4, rows, 2, idx, off, out), PS_OK);
  assert_int_equal(ps_kern_pool_fwd(K1, PS_KERN_POOL_SUM, 2, 2, 4, rows, 2, idx, badoff, out), PS_ERR_INVALID);
  assert_int_equal(ps_kern_pool_bwd(K1, PS_KERN_POOL_SUM, 2, 2, 4, 3, idx, off, out, rows), PS_ERR_INVALID);
  /* a pooling mask with bits beyond its period, or no period, is refused */
  assert_int_equal(ps_kern_pool_fwd(K1, ((ps_kern_pool){8, 3}), 2, 2, 4, rows, 2, idx, off, out), PS_ERR_INVALID);
  assert_int_equal(ps_kern_pool_bwd(K1, ((ps_kern_pool){0, 0}), 2, 2, 4, 2, idx, off, out, rows), PS_ERR_INVALID);
  /* no bags at all: every row gradient is zero */
  for (int i = 0; i < 8; i++) rows[i] = 1;
  int32_t off0[1] = {0};
  assert_int_equal(ps_kern_pool_bwd(K1, PS_KERN_POOL_SUM, 0, 2, 4, 0, idx, off0, out, rows), PS_OK);
  for (int i = 0; i < 8; i++) assert_true(rows[i] == 0.0f);
}

/* ---- sigmoid + BCE ---- */

typedef struct bce_ctx {
  int n;
  float *z, *y, *loss;
} bce_ctx;
static double bce_loss(void *p) {
  bce_ctx *c = p;
  ps_kern_bce_fwd(K1, c->n, c->z, c->y, NULL, c->loss);
  return *c->loss;
}
static void test_bce(void **st) {
  (void)st;
  float z[8] = {-100, -30, -2.5f, -0.1f, 0, 0.7f, 30, 100}, y[8] = {0, 1, 1, 0, 1, 0, 0, 1}, p[8], loss;
  assert_int_equal(ps_kern_bce_fwd(K1, 8, z, y, p, &loss), PS_OK);
  double want = 0;
  for (int i = 0; i < 8; i++) {
    double zz = z[i], pp = 1.0 / (1.0 + exp(-zz));
    /* -[y log p + (1-y) log(1-p)] with log(1-p) = log(sigmoid(-z)), stable in double */
    double lp = -log1p(exp(-zz)), l1p = -zz - log1p(exp(-zz));
    if (zz < 0) lp = zz - log1p(exp(zz)), l1p = -log1p(exp(zz));
    want += -(y[i] * lp + (1 - y[i]) * l1p);
    assert_true(fabs(p[i] - pp) < 1e-7);
    assert_true(isfinite(p[i]));
  }
  want /= 8;
  assert_true(isfinite(loss));
  assert_true(fabs(loss - want) < 1e-5 * want);
  /* gradient: finite differences on moderate logits */
  bce_ctx c = {.n = 50};
  c.z = fvec(50, -4, 4), c.y = fvec(50, 0, 1), c.loss = &loss;
  for (int i = 0; i < 50; i++) c.y[i] = c.y[i] < 0.5f ? 0.0f : 1.0f;
  float *g = fvec(50, 0, 0);
  assert_int_equal(ps_kern_bce_bwd(K1, 50, c.z, c.y, 1.0f / 50, g), PS_OK);
  size_t n = 50;
  for (size_t i = 0; i < n; i++) { /* FD of the mean loss, with a larger eps for float loss */
    float z0 = c.z[i];
    c.z[i] = z0 + 1e-2f;
    double lp = bce_loss(&c);
    c.z[i] = z0 - 1e-2f;
    double lm = bce_loss(&c);
    c.z[i] = z0;
    double num = (lp - lm) / 2e-2;
    if (fabs(num - g[i]) > 2e-4) fail_msg("bce dlogit[%zu]: %g vs %g", i, g[i], num);
  }
  /* eval forward: no labels, loss untouched */
  loss = 42;
  assert_int_equal(ps_kern_bce_fwd(K1, 8, z, NULL, p, &loss), PS_OK);
  assert_true(loss == 42);
  assert_int_equal(ps_kern_bce_fwd(K1, 8, z, y, p, NULL), PS_ERR_INVALID);
  free(c.z), free(c.y), free(g);
}

/* ---- optimizers: torch.optim's formulas in double ---- */

static void test_optimizers(void **st) {
  (void)st;
  enum { N = 1000 };
  float *w = fvec(N, -1, 1), *g = fvec(N, -1, 1), *s1 = fvec(N, 0, 0), *s2 = fvec(N, 0, 0);
  double rw[N], rs1[N], rs2[N];
  float lr = 0.05f, wd = 0.01f;
  for (int opt = 0; opt < 3; opt++) {
    for (int i = 0; i < N; i++) rw[i] = w[i], rs1[i] = 0, rs2[i] = 0, s1[i] = 0, s2[i] = 0;
    for (int64_t t = 1; t <= 3; t++) {
      if (opt == 0) assert_int_equal(ps_kern_sgd(K2, N, w, g, lr, wd), PS_OK);
      if (opt == 1) assert_int_equal(ps_kern_adagrad(K2, N, w, g, s1, lr, 1e-10f, wd), PS_OK);
      if (opt == 2) assert_int_equal(ps_kern_adam(K2, N, w, g, s1, s2, lr, 0.9f, 0.999f, 1e-8f, wd, t), PS_OK);
      for (int i = 0; i < N; i++) {
        double gi = g[i] + (double)wd * rw[i];
        if (opt == 0) rw[i] -= lr * gi;
        if (opt == 1) rs1[i] += gi * gi, rw[i] -= lr * gi / (sqrt(rs1[i]) + 1e-10);
        if (opt == 2) {
          rs1[i] = 0.9 * rs1[i] + 0.1 * gi;
          rs2[i] = 0.999 * rs2[i] + 0.001 * gi * gi;
          double bc1 = 1 - pow(0.9, (double)t), bc2 = 1 - pow(0.999, (double)t);
          rw[i] -= (lr / bc1) * rs1[i] / (sqrt(rs2[i]) / sqrt(bc2) + 1e-8);
        }
      }
    }
    for (int i = 0; i < N; i++)
      if (fabs(w[i] - rw[i]) > 1e-5) fail_msg("optimizer %d w[%d]: %g vs %g", opt, i, w[i], rw[i]);
  }
  assert_int_equal(ps_kern_adam(K2, N, w, g, s1, s2, lr, 0.9f, 0.999f, 1e-8f, 0, 0), PS_ERR_INVALID);
  float x[3] = {1, 2, 3};
  assert_int_equal(ps_kern_scale(K1, 3, 0.5f, x), PS_OK);
  assert_true(x[0] == 0.5f && x[2] == 1.5f);
  free(w), free(g), free(s1), free(s2);
}

/* ---- DCNv2 cross layer (element-wise part) and the strided copy ---- */

typedef struct cross_ctx {
  int m, n;
  float *x0, *z, *bias, *xl, *r;
  float *zb, *y;
} cross_ctx;

/* L = sum(R * y) with y = cross_fwd(x0, z, bias, xl). */
static double cross_loss(void *p) {
  cross_ctx *c = p;
  assert_int_equal(ps_kern_cross_fwd(K1, c->m, c->n, c->x0, c->z, c->bias, c->xl, c->zb, c->y),
                   PS_OK);
  return dotR(c->r, c->y, (size_t)c->m * c->n);
}

static void test_cross(void **st) {
  (void)st;
  const int shapes[][2] = {{1, 1}, {3, 5}, {67, 48}, {300, 200}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    int m = shapes[t][0], n = shapes[t][1];
    size_t mn = (size_t)m * n;
    for (int alias = 0; alias < 2; alias++) { /* alias: layer 0, x_l is x0 itself */
      cross_ctx c = {m, n, fvec(mn, -1, 1), fvec(mn, -1, 1), fvec((size_t)n, -1, 1), NULL,
                     fvec(mn, -1, 1), fvec(mn, 0, 0), fvec(mn, 0, 0)};
      c.xl = alias ? c.x0 : fvec(mn, -1, 1);
      /* forward against the definition */
      cross_loss(&c);
      for (size_t i = 0; i < mn; i++) {
        double zb = (double)c.z[i] + c.bias[i % (size_t)n];
        double y = (double)c.x0[i] * zb + c.xl[i];
        if (fabs(c.zb[i] - zb) > 1e-6 || fabs(c.y[i] - y) > 1e-5 * fmax(1, fabs(y)))
          fail_msg("cross_fwd m=%d n=%d [%zu]: y %g vs %g", m, n, i, c.y[i], y);
      }
      /* backward: dz and the accumulated dx0 (from a nonzero start) against finite differences */
      float *dz = fvec(mn, 0, 0), *acc0 = fvec(mn, -1, 1), *dx0 = malloc(mn * sizeof(float));
      float *dz2 = fvec(mn, 0, 0), *dx02 = malloc(mn * sizeof(float));
      memcpy(dx0, acc0, mn * sizeof(float));
      memcpy(dx02, acc0, mn * sizeof(float));
      assert_int_equal(ps_kern_cross_bwd(K1, m, n, c.x0, c.zb, c.r, alias ? 1.0f : 0.0f, dz, dx0),
                       PS_OK);
      assert_int_equal(ps_kern_cross_bwd(K2, m, n, c.x0, c.zb, c.r, alias ? 1.0f : 0.0f, dz2, dx02),
                       PS_OK);
      assert_memory_equal(dz, dz2, mn * sizeof(float)); /* same bits on 1 and 2 threads */
      assert_memory_equal(dx0, dx02, mn * sizeof(float));
      for (size_t i = 0; i < mn; i++) dx0[i] -= acc0[i];
      fd_check("cross dz", c.z, mn, dz, cross_loss, &c, 1e-2f);
      fd_check("cross dx0", c.x0, mn, dx0, cross_loss, &c, 1e-2f);
      free(c.x0), free(c.z), free(c.bias), free(c.r), free(c.zb), free(c.y);
      if (!alias) free(c.xl);
      free(dz), free(acc0), free(dx0), free(dz2), free(dx02);
    }
    /* copy2d: a block of columns into another matrix's columns, and back */
    int wide = n + 3;
    float *src = fvec(mn, -1, 1), *dst = fvec((size_t)m * wide, 5, 6), *back = fvec(mn, 0, 0);
    float *before = malloc((size_t)m * wide * sizeof(float));
    memcpy(before, dst, (size_t)m * wide * sizeof(float));
    assert_int_equal(ps_kern_copy2d(K2, m, n, src, n, dst + 2, wide), PS_OK);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < wide; j++) {
        float want = j >= 2 && j < n + 2 ? src[(size_t)i * n + j - 2] : before[(size_t)i * wide + j];
        if (dst[(size_t)i * wide + j] != want) fail_msg("copy2d m=%d n=%d [%d, %d]", m, n, i, j);
      }
    assert_int_equal(ps_kern_copy2d(K1, m, n, dst + 2, wide, back, n), PS_OK);
    assert_memory_equal(back, src, mn * sizeof(float));
    free(src), free(dst), free(back), free(before);
  }
  float f = 0;
  assert_int_equal(ps_kern_copy2d(K1, 2, 3, &f, 2, &f, 3), PS_ERR_INVALID); /* lds < cols */
  assert_int_equal(ps_kern_copy2d(K1, 0, 3, NULL, 3, NULL, 3), PS_OK);
  assert_int_equal(ps_kern_cross_fwd(K1, -1, 3, &f, &f, &f, &f, &f, &f), PS_ERR_INVALID);
  assert_int_equal(ps_kern_cross_bwd(NULL, 1, 1, &f, &f, &f, 0, &f, &f), PS_ERR_INVALID);
}

/* ---- the interface itself ---- */

static void test_interface(void **st) {
  (void)st;
  ps_kern *k = NULL;
  assert_int_equal(ps_kern_create("bogus", 1, &k, NULL), PS_ERR_INVALID);
  assert_null(k);
  ps_error err;
  assert_int_equal(ps_kern_create("cuda:x", 1, &k, &err), PS_ERR_INVALID);
  assert_int_equal(err.code, PS_ERR_INVALID);
  assert_string_equal(err.msg, "invalid argument");
  assert_int_equal(ps_kern_create("cpu", 1, &k, NULL), PS_OK);
  assert_string_equal(k->name, "cpu");
  assert_true(k->host_memory);
  void *p = NULL;
  assert_int_equal(ps_kern_alloc(k, 100, &p), PS_OK);
  assert_true(((uintptr_t)p & 63) == 0);
  assert_int_equal(ps_kern_memset0(k, p, 100), PS_OK);
  char h[100];
  memset(h, 7, sizeof(h));
  assert_int_equal(ps_kern_to_device(k, p, h, 100), PS_OK);
  memset(h, 0, sizeof(h));
  assert_int_equal(ps_kern_to_host(k, h, p, 100), PS_OK);
  assert_true(h[0] == 7 && h[99] == 7);
  assert_int_equal(ps_kern_sync(k), PS_OK);
  ps_kern_free(k, p);
  assert_int_equal(ps_kern_alloc(k, 0, &p), PS_OK);
  assert_null(p);
  /* a backend lacking an operation says so */
  ps_kern_i partial = *k->iface;
  partial.interact_fwd = NULL;
  ps_kern fake = *k;
  fake.iface = &partial;
  float f = 0;
  assert_int_equal(ps_kern_interact_fwd(&fake, 1, 1, 1, &f, &f, &f), PS_ERR_UNSUPPORTED);
  ps_kern_destroy(&k);
  assert_null(k);
  assert_int_equal(ps_kern_interact_fwd(NULL, 1, 1, 1, &f, &f, &f), PS_ERR_INVALID);
  assert_int_equal(ps_kern_cpu_create(-1, &k), PS_ERR_INVALID);
}

PS_TEST_MAIN("kernels_cpu", setup, teardown,
    cmocka_unit_test(test_sgemm), cmocka_unit_test(test_linear_fd),
    cmocka_unit_test(test_bias_act), cmocka_unit_test(test_interact), cmocka_unit_test(test_pool),
    cmocka_unit_test(test_bce), cmocka_unit_test(test_optimizers),
    cmocka_unit_test(test_cross), cmocka_unit_test(test_interface))
