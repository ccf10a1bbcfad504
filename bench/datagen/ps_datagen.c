/* ps_datagen.c: the planted-model generator (model described in ps_datagen.h).
 *
 * No tables: a value's weight and interaction vectors are hashes of (seed, feature, rank),
 * Zipf ranks come from the inverse CDF of the continuous power law (one pow per value), so
 * creating a generator is instant and memory stays constant for any vocabulary size. */
#include "ps_datagen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_schema.h"

typedef struct cat_spec {
  uint32_t vocab;
  float zipf_s, miss, scale;
  uint32_t head; /* ranks with a weight */
} cat_spec;

/* Vocabularies from tiny to ~1e6, missing rates shaped like Criteo's (C19/C20/C25/C26
 * ~45%, C22 ~80%). The very large vocabularies (C3, C4, C12, C16, C21, C24) and C13, C18
 * carry no signal: they are there to exercise the embedding store (many keys, a long
 * tail), while the signal sits where 200k rows can learn it. */
static const cat_spec CAT[PS_CRITEO_NCAT] = {
    {1460, 1.10f, 0.00f, 0.30f, 30},    {583, 1.10f, 0.00f, 0.40f, 30},
    {1000000, 1.05f, 0.03f, 0.00f, 0}, {500000, 1.05f, 0.03f, 0.00f, 0},
    {300, 1.20f, 0.00f, 0.40f, 30},     {20, 1.00f, 0.12f, 0.50f, 20},
    {10000, 1.10f, 0.00f, 0.30f, 30},   {600, 1.20f, 0.00f, 0.20f, 30},
    {3, 1.00f, 0.00f, 0.30f, 3},         {70000, 1.10f, 0.00f, 0.30f, 30},
    {5000, 1.10f, 0.00f, 0.20f, 30},    {800000, 1.05f, 0.03f, 0.00f, 0},
    {3000, 1.10f, 0.00f, 0.00f, 0},      {27, 1.00f, 0.00f, 0.40f, 27},
    {10000, 1.10f, 0.00f, 0.20f, 30},   {400000, 1.05f, 0.03f, 0.00f, 0},
    {10, 1.00f, 0.00f, 0.30f, 10},       {5000, 1.10f, 0.00f, 0.00f, 0},
    {2000, 1.10f, 0.45f, 0.30f, 30},    {4, 1.00f, 0.45f, 0.30f, 4},
    {600000, 1.05f, 0.03f, 0.00f, 0},    {17, 1.00f, 0.80f, 0.30f, 17},
    {15, 1.00f, 0.00f, 0.40f, 15},       {150000, 1.10f, 0.03f, 0.00f, 0},
    {100, 1.20f, 0.45f, 0.30f, 30},     {30000, 1.10f, 0.45f, 0.20f, 30},
};

typedef struct dense_spec {
  float mu, sigma, miss, beta, beta2, gamma; /* gamma: weight of "missing" */
} dense_spec;

/* log(1+x) ~ Normal(mu, sigma) before rounding: count-like integers. */
static const dense_spec DENSE[PS_CRITEO_NDENSE] = {
    {1.0f, 1.0f, 0.45f, 0.30f, 0.00f, -0.10f}, {2.0f, 1.5f, 0.00f, -0.20f, 0.00f, 0.00f},
    {2.5f, 1.2f, 0.20f, 0.00f, 0.00f, 0.10f},  {1.8f, 0.8f, 0.20f, 0.20f, -0.10f, 0.00f},
    {7.0f, 2.0f, 0.05f, -0.30f, 0.00f, 0.20f}, {3.5f, 1.5f, 0.25f, 0.10f, 0.00f, 0.00f},
    {2.0f, 1.2f, 0.05f, 0.30f, 0.10f, 0.00f},  {2.5f, 1.0f, 0.001f, 0.00f, 0.00f, 0.00f},
    {4.0f, 1.2f, 0.05f, 0.10f, 0.00f, 0.00f},  {0.5f, 0.5f, 0.45f, 0.40f, 0.00f, -0.20f},
    {1.5f, 1.0f, 0.05f, 0.30f, 0.00f, 0.00f},  {0.5f, 0.8f, 0.77f, 0.20f, 0.00f, 0.10f},
    {2.0f, 1.0f, 0.20f, 0.10f, 0.00f, 0.00f},
};

typedef struct pair_spec {
  int a, b;
  float scale;
} pair_spec;

static const pair_spec PAIRS[] = {
    {5, 13, 0.6f}, {8, 22, 0.5f}, {16, 19, 0.5f}, {4, 24, 0.4f}, {13, 22, 0.3f},
};
#define NPAIRS (sizeof PAIRS / sizeof PAIRS[0])

/* A column of the written line: what it holds (ps_schema.h's types) and its index among the
 * dense inputs or categorical features. */
typedef struct out_col {
  ps_col_type type;
  int index;
} out_col;

struct ps_datagen {
  uint64_t seed;
  double bias;
  int nd, nc;                         /* dense inputs, categorical features */
  int bag_max[PS_DATAGEN_MAX_CAT];    /* per feature; 1: one-hot */
  double bag_scale[PS_DATAGEN_MAX_CAT]; /* 1/sqrt(mean bag size) */
  char sep[PS_DATAGEN_MAX_CAT];       /* a bag's separator */
  cat_spec cat[PS_DATAGEN_MAX_CAT];   /* CAT (cycled) with the options' vocabularies and exponents */
  pair_spec pairs[NPAIRS * (PS_DATAGEN_MAX_CAT / PS_CRITEO_NCAT + 1)];
  size_t npairs;
  char fs;      /* field separator: TAB, or ',' for csv */
  out_col cols[PS_DATAGEN_MAX_COLS];
  int ncols;
};

/* ---------- hashing-based randomness ---------- */

static inline uint64_t h3(uint64_t seed, uint64_t a, uint64_t b) {
  return ps_mix64(seed ^ ps_mix64(a * 0x9e3779b97f4a7c15ull ^ ps_mix64(b + 0x632be59bd9b4e019ull)));
}
static inline double u01(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }
/* Approximate standard normal from one hash: Irwin-Hall of 4 16-bit uniforms. */
static inline double gauss_of(uint64_t h) {
  double s = 0;
  for (int i = 0; i < 4; i++) s += (double)((h >> (16 * i)) & 0xffff) / 65536.0;
  return (s - 2.0) * 1.7320508075688772;
}

typedef struct rng {
  uint64_t s;
} rng;
static inline uint64_t rnext(rng *r) { return ps_mix64(r->s += 0x9e3779b97f4a7c15ull); }
static inline double runi(rng *r) { return u01(rnext(r)); }
static inline double rnorm(rng *r) { /* Box-Muller, one of the pair */
  double u = runi(r), v = runi(r);
  if (u < 1e-300) u = 1e-300;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Seeded bijection on 32 bits: rank -> raw token value. */
static inline uint32_t token_of(uint64_t seed, int f, uint32_t k) {
  uint32_t c = (uint32_t)h3(seed, 101, (uint64_t)f);
  uint32_t x = k + c;
  x *= 0x9E3779B1u;
  x ^= x >> 15;
  x *= 0x85EBCA77u;
  x ^= x >> 13;
  return x + (c >> 7);
}

static inline uint32_t zipf_rank(uint32_t V, double s, double u) {
  double x;
  if (fabs(1.0 - s) < 1e-9) x = pow((double)V + 1.0, u);
  else x = pow(1.0 + u * (pow((double)V + 1.0, 1.0 - s) - 1.0), 1.0 / (1.0 - s));
  double k = floor(x) - 1.0;
  if (k < 0) k = 0;
  if (k > (double)V - 1) k = (double)V - 1;
  return (uint32_t)k;
}

/* Weight of categorical f with rank k (k == UINT32_MAX: missing). */
static inline double cat_weight(const ps_datagen *g, int f, uint32_t k) {
  const cat_spec *c = &g->cat[f];
  uint64_t seed = g->seed;
  if (c->scale == 0.0f) return 0.0;
  if (k != UINT32_MAX && k >= c->head) return 0.0;
  return c->scale * gauss_of(h3(seed, 200 + (uint64_t)f, k));
}

static inline void pair_vec(uint64_t seed, int p, int side, uint32_t k, uint32_t head, double v[2]) {
  if (k != UINT32_MAX && k >= head) {
    v[0] = v[1] = 0.0;
    return;
  }
  uint64_t h = h3(seed, 300 + (uint64_t)(2 * p + side), k);
  v[0] = gauss_of(h) * 0.7071067811865476;
  v[1] = gauss_of(ps_mix64(h)) * 0.7071067811865476;
}

/* ---------- one row ---------- */

typedef struct row_vals {
  int64_t x[PS_DATAGEN_MAX_DENSE];
  int dmiss[PS_DATAGEN_MAX_DENSE];
  uint32_t rank[PS_DATAGEN_MAX_CAT]; /* one-hot; UINT32_MAX = missing */
  int nbag[PS_DATAGEN_MAX_CAT];      /* multi-hot: ids in the bag, 0 = missing */
  uint32_t bag[PS_DATAGEN_MAX_CAT][PS_DATAGEN_MAX_BAG];
  rng r;
} row_vals;

/* Interaction vector of side `side` of pair p for feature f's value(s) in rv: the one value's,
 * or the bag's sum times bag_scale. */
static void pair_side(const ps_datagen *g, const row_vals *rv, int p, int side, int f, double v[2]) {
  uint32_t head = g->cat[f].head < 12 ? g->cat[f].head : 12;
  if (g->bag_max[f] <= 1 || rv->nbag[f] == 0) {
    pair_vec(g->seed, p, side, g->bag_max[f] <= 1 ? rv->rank[f] : UINT32_MAX, head, v);
    return;
  }
  v[0] = v[1] = 0;
  for (int j = 0; j < rv->nbag[f]; j++) {
    double u[2];
    pair_vec(g->seed, p, side, rv->bag[f][j], head, u);
    v[0] += u[0] * g->bag_scale[f], v[1] += u[1] * g->bag_scale[f];
  }
}

static double draw_row(const ps_datagen *g, int stream, uint64_t i, row_vals *rv) {
  uint64_t seed = g->seed;
  rv->r.s = h3(seed, 1000 + (uint64_t)stream, i);
  double logit = 0;
  for (int k = 0; k < g->nd; k++) {
    const dense_spec *d = &DENSE[k % PS_CRITEO_NDENSE];
    double z = rnorm(&rv->r);
    double um = runi(&rv->r), uneg = runi(&rv->r);
    rv->dmiss[k] = um < d->miss;
    if (rv->dmiss[k]) {
      rv->x[k] = 0;
      logit += d->gamma;
      continue;
    }
    double t = d->mu + d->sigma * z;
    if (t < 0) t = 0;
    int64_t x = (int64_t)floor(exp(t) - 1.0 + 0.5);
    if (k % PS_CRITEO_NDENSE == 1 && uneg < 0.03) x = -(int64_t)(1 + (rnext(&rv->r) & 1)); /* I2: -1, -2 */
    rv->x[k] = x;
    double tt = log1p(x > 0 ? (double)x : 0.0), zz = (tt - d->mu) / d->sigma;
    logit += d->beta * zz + d->beta2 * (zz * zz - 1.0);
  }
  for (int f = 0; f < g->nc; f++) {
    const cat_spec *c = &g->cat[f];
    double um = runi(&rv->r), uz = runi(&rv->r);
    rv->rank[f] = um < c->miss ? UINT32_MAX : zipf_rank(c->vocab, c->zipf_s, uz);
    if (g->bag_max[f] <= 1) {
      logit += cat_weight(g, f, rv->rank[f]);
      continue;
    }
    /* multi-hot: the first id is the one-hot draw, the others from the same law */
    rv->nbag[f] = rv->rank[f] == UINT32_MAX ? 0 : 1 + (int)(rnext(&rv->r) % (uint64_t)g->bag_max[f]);
    if (rv->nbag[f] == 0) logit += cat_weight(g, f, UINT32_MAX);
    for (int j = 0; j < rv->nbag[f]; j++) {
      rv->bag[f][j] = j == 0 ? rv->rank[f] : zipf_rank(c->vocab, c->zipf_s, runi(&rv->r));
      logit += cat_weight(g, f, rv->bag[f][j]) * g->bag_scale[f];
    }
  }
  for (size_t p = 0; p < g->npairs; p++) {
    double va[2], vb[2];
    /* interactions only among the 12 most frequent values of each side: every such pair
     * of values is seen often enough in 200k rows to be learned */
    pair_side(g, rv, (int)p, 0, g->pairs[p].a, va);
    pair_side(g, rv, (int)p, 1, g->pairs[p].b, vb);
    logit += g->pairs[p].scale * 2.0 * (va[0] * vb[0] + va[1] * vb[1]);
  }
  return logit;
}

void ps_datagen_opts_default(ps_datagen_opts *o) {
  *o = (ps_datagen_opts){.seed = 1, .multi_hot = 0, .vocab_scale = 1.0, .zipf_shift = 0.0};
}

size_t ps_datagen_line_max(const ps_datagen *g) {
  /* per column a separator and: the label's digit, a dense value's 20 digits and sign, a bag's
   * ids of 9 bytes each; '\n' */
  size_t n = 1;
  for (int c = 0; c < g->ncols; c++)
    n += 1 + (g->cols[c].type == PS_COL_DENSE ? 21 : 1);
  for (int f = 0; f < g->nc; f++) n += 9 * (size_t)g->bag_max[f];
  return n;
}

/* The line's columns, the features' bag sizes and separators: from the schema, or Criteo's
 * label, 13 dense and 26 categorical TSV columns, every feature a bag of 1..multi_hot ids
 * when multi_hot > 1. */
static ps_status layout(ps_datagen *g, const ps_datagen_opts *o) {
  const ps_schema *s = o->schema;
  int mh = o->multi_hot > 1 ? o->multi_hot : 1;
  g->fs = '\t';
  if (!s) {
    g->nd = PS_CRITEO_NDENSE, g->nc = PS_CRITEO_NCAT, g->ncols = 1 + g->nd + g->nc;
    g->cols[0] = (out_col){PS_COL_LABEL, -1};
    for (int k = 0; k < g->nd; k++) g->cols[1 + k] = (out_col){PS_COL_DENSE, k};
    for (int f = 0; f < g->nc; f++) {
      g->cols[1 + g->nd + f] = (out_col){PS_COL_CAT, f};
      g->bag_max[f] = mh, g->sep[f] = PS_DATAGEN_SEPARATOR;
    }
    return PS_OK;
  }
  g->nd = ps_schema_ndense(s), g->nc = ps_schema_ncat(s), g->ncols = ps_schema_ncolumns(s);
  if (g->nd > PS_DATAGEN_MAX_DENSE || g->nc > PS_DATAGEN_MAX_CAT || g->nc < 1 ||
      g->ncols > PS_DATAGEN_MAX_COLS)
    return PS_ERR_INVALID;
  g->fs = ps_schema_fmt(s) == PS_SCHEMA_CSV ? ',' : '\t';
  for (int c = 0; c < g->ncols; c++) {
    const ps_schema_column *col = ps_schema_column_at(s, c);
    g->cols[c] = (out_col){col->type, col->index};
    if (col->type != PS_COL_CAT) continue;
    g->bag_max[col->index] = col->separator ? (o->multi_hot > 1 ? o->multi_hot : 4) : 1;
    g->sep[col->index] = col->separator;
  }
  return PS_OK;
}

ps_status ps_datagen_create_opts(const ps_datagen_opts *o, ps_datagen **out) {
  *out = NULL;
  if (o->multi_hot < 0 || o->multi_hot > PS_DATAGEN_MAX_BAG || !(o->vocab_scale > 0) ||
      o->vocab_scale > 1000)
    return PS_ERR_INVALID;
  for (int f = 0; f < PS_CRITEO_NCAT; f++)
    if (!(CAT[f].zipf_s + o->zipf_shift > 0.5) || CAT[f].zipf_s + o->zipf_shift > 5)
      return PS_ERR_INVALID;
  ps_datagen *g = calloc(1, sizeof *g);
  if (!g) return PS_ERR_NOMEM;
  g->seed = o->seed;
  if (layout(g, o) != PS_OK) {
    free(g);
    return PS_ERR_INVALID;
  }
  /* pairs of the 26-feature blocks, within the features there are */
  for (int base = 0; base < g->nc; base += PS_CRITEO_NCAT)
    for (size_t p = 0; p < NPAIRS; p++)
      if (base + PAIRS[p].a < g->nc && base + PAIRS[p].b < g->nc)
        g->pairs[g->npairs++] = (pair_spec){base + PAIRS[p].a, base + PAIRS[p].b, PAIRS[p].scale};
  for (int f = 0; f < g->nc; f++) {
    g->bag_scale[f] = 1.0 / sqrt((g->bag_max[f] + 1) / 2.0);
    cat_spec c = CAT[f % PS_CRITEO_NCAT];
    if (o->vocab_scale != 1.0) {
      double v = floor(c.vocab * o->vocab_scale + 0.5);
      c.vocab = v < 2 ? 2 : v > 4e9 ? 4000000000u : (uint32_t)v;
      if (c.head > c.vocab) c.head = c.vocab;
    }
    c.zipf_s = (float)(c.zipf_s + o->zipf_shift);
    g->cat[f] = c;
  }
  /* Calibrate the bias to a CTR of 0.25 on 20000 rows of a third stream. */
  enum { NCAL = 20000 };
  double *l = malloc(NCAL * sizeof(double));
  if (!l) {
    free(g);
    return PS_ERR_NOMEM;
  }
  row_vals rv;
  for (int i = 0; i < NCAL; i++) l[i] = draw_row(g, 2, (uint64_t)i, &rv);
  double lo = -10, hi = 10;
  for (int it = 0; it < 60; it++) {
    double mid = 0.5 * (lo + hi), m = 0;
    for (int i = 0; i < NCAL; i++) m += 1.0 / (1.0 + exp(-(l[i] + mid)));
    if (m / NCAL < 0.25) lo = mid;
    else hi = mid;
  }
  free(l);
  g->bias = 0.5 * (lo + hi);
  *out = g;
  return PS_OK;
}

void ps_datagen_destroy(ps_datagen **g) {
  if (!g || !*g) return;
  free(*g);
  *g = NULL;
}

double ps_datagen_bias(const ps_datagen *g) { return g->bias; }

static inline char *put_i64(char *o, int64_t v) {
  char tmp[24];
  int n = 0;
  uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  if (v < 0) *o++ = '-';
  do tmp[n++] = (char)('0' + u % 10); while (u /= 10);
  while (n) *o++ = tmp[--n];
  return o;
}

size_t ps_datagen_line(const ps_datagen *g, int stream, uint64_t i, char *buf, float *p,
                       int *label) {
  static const char HEX[] = "0123456789abcdef";
  row_vals rv;
  double logit = draw_row(g, stream, i, &rv) + g->bias;
  double prob = 1.0 / (1.0 + exp(-logit));
  int y = runi(&rv.r) < prob;
  char *o = buf;
  for (int c = 0; c < g->ncols; c++) {
    if (c) *o++ = g->fs;
    int k = g->cols[c].index;
    if (g->cols[c].type == PS_COL_LABEL) {
      *o++ = (char)('0' + y);
    } else if (g->cols[c].type == PS_COL_DENSE) {
      if (!rv.dmiss[k]) o = put_i64(o, rv.x[k]);
    } else if (g->cols[c].type == PS_COL_CAT) {
      int one = g->bag_max[k] <= 1, n = one ? rv.rank[k] != UINT32_MAX : rv.nbag[k];
      for (int j = 0; j < n; j++) { /* (a schema's separator is never the delimiter) */
        if (j) *o++ = g->sep[k];
        uint32_t t = token_of(g->seed, k, one ? rv.rank[k] : rv.bag[k][j]);
        for (int sh = 28; sh >= 0; sh -= 4) *o++ = HEX[(t >> sh) & 15];
      }
    } /* a skipped column stays empty */
  }
  *o++ = '\n';
  *p = (float)prob;
  *label = y;
  return (size_t)(o - buf);
}
