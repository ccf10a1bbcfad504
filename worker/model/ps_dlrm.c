/* ps_dlrm: DLRM's dense tower over the ps_kern backend interface (see ps_dlrm.h).
 *
 * A training step is: pool the gathered embedding rows into bags, bottom MLP, dot
 * interaction (or the DCNv2 cross network, ps_dlrm_dcn.c), top MLP, sigmoid-BCE; backward
 * walks the same graph in reverse with two ping-pong gradient buffers, and the pooling
 * backward turns the bag gradients into one gradient row per unique embedding row. Every
 * tensor operation is a ps_kern_* call, so the CUDA backend runs this file unchanged; with a
 * host-memory backend the batch's host arrays are used in place instead of being copied. */
#include "ps_dlrm.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ps_dlrm_dcn_int.h"
#include "ps_log.h"

#define TRY(x)                    \
  do {                            \
    ps_status st_ = (x);          \
    if (st_ != PS_OK) return st_; \
  } while (0)

struct ps_dlrm {
  ps_kern *k;
  ps_kern_pool pool;
  int max_batch, num_dense, dim, S, W, maxw;
  int nbot, ntop, nl;
  ps_dlrm_layer L[PS_DLRM_MAX_LAYERS];
  bool dcn_on; /* --interaction dcn: dcn is the interaction */
  ps_kern_prec prec; /* of every GEMM (bf16 falls back to FP32 where the backend lacks it) */
  ps_dlrm_dcn dcn;
  size_t nparams;
  float *params, *grads;

  /* optimizer state: Adagrad's sum, or Adam's m then v */
  float *opt_state;
  int opt_kind; /* -1 none yet */
  int64_t step;

  /* workspace, [max_batch, ...] */
  float *act[PS_DLRM_MAX_LAYERS]; /* each layer's output (post-activation; logits last) */
  float *inter, *pooled, *dpooled, *dbottom, *probs, *loss_d, *dbuf[2];
  float *dense_d, *labels_d;
  float *rows_d, *drows_d;
  int32_t *idx_d, *off_d;
  int rows_cap, nnz_cap;

  /* what the last forward used (backend pointers) */
  bool have_fwd, fwd_train;
  int B, nrows, nnz;
  const float *x0, *lab, *top_in;
  const int32_t *idx, *off;
};

void ps_dlrm_config_default(ps_dlrm_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->mlp_bot = "13-512-256-64-16";
  cfg->mlp_top = "512-256-1";
  cfg->emb_dim = 16;
  cfg->num_sparse = 26;
  cfg->max_batch = 2048;
  cfg->pool = PS_KERN_POOL_SUM;
  cfg->seed = 1;
  cfg->interaction = PS_DLRM_DOT;
  cfg->dcn_layers = 3;
  cfg->dcn_rank = PS_DLRM_RANK_AUTO;
}

void ps_dlrm_config_shape(ps_dlrm_config *cfg, const char *mlp_bot, const char *mlp_top,
                          int emb_dim, int num_sparse, int max_batch) {
  ps_dlrm_config_default(cfg);
  cfg->mlp_bot = mlp_bot;
  cfg->mlp_top = mlp_top;
  cfg->emb_dim = emb_dim;
  cfg->num_sparse = num_sparse;
  cfg->max_batch = max_batch;
}

ps_dlrm_opt ps_dlrm_opt_default(ps_dlrm_opt_kind kind, float lr) {
  ps_dlrm_opt o = {.kind = kind, .lr = lr, .beta1 = 0.9f, .beta2 = 0.999f};
  o.eps = kind == PS_DLRM_OPT_ADAGRAD ? 1e-10f : 1e-8f;
  return o;
}

ps_status ps_dlrm_opt_parse(const char *name, ps_dlrm_opt_kind *kind) {
  if (!name || !kind) return PS_ERR_INVALID;
  if (!strcmp(name, "sgd")) *kind = PS_DLRM_OPT_SGD;
  else if (!strcmp(name, "adagrad")) *kind = PS_DLRM_OPT_ADAGRAD;
  else if (!strcmp(name, "adam")) *kind = PS_DLRM_OPT_ADAM;
  else return PS_ERR_INVALID;
  return PS_OK;
}

ps_status ps_dlrm_precision_parse(const char *name, ps_kern_prec *out) {
  if (!name || !out) return PS_ERR_INVALID;
  if (!strcmp(name, "fp32")) *out = PS_KERN_FP32;
  else if (!strcmp(name, "bf16")) *out = PS_KERN_BF16;
  else return PS_ERR_INVALID;
  return PS_OK;
}

int ps_dlrm_parse_mlp(const char *s, int *dims, int max) {
  if (!s || !*s) return -1;
  int n = 0;
  const char *p = s;
  for (;;) {
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
      v = v * 10 + (*p - '0');
      if (v > 1 << 20) return -1;
      p++;
    }
    if (v <= 0 || n >= max) return -1;
    dims[n++] = (int)v;
    if (*p == 0) break;
    if (*p != '-') return -1;
    p++;
  }
  return n;
}

/* ---- init: the DLRM reference's normal init, from a seeded splitmix64 + Box-Muller ---- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double unif01(uint64_t *s) { return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double normal(uint64_t *s) {
  double u = unif01(s), v = unif01(s);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void fill_normal(float *h, size_t n, double sd, uint64_t *s) {
  for (size_t i = 0; i < n; i++) h[i] = (float)(sd * normal(s));
}

/* MLP layers as the DLRM reference; then (DCN) the cross layers as TorchRec: xavier-normal
 * matrices, zero biases. A dot model draws exactly what it drew before DCN existed. */
static void init_params(ps_dlrm *m, float *h, const ps_dlrm_config *cfg) {
  uint64_t s = cfg->seed ^ 0xD1B54A32D192ED03ull;
  for (int l = 0; l < m->nl; l++) {
    const ps_dlrm_layer *L = &m->L[l];
    fill_normal(h + L->w_off, (size_t)L->in * L->out, sqrt(2.0 / (L->in + L->out)), &s);
    fill_normal(h + L->b_off, (size_t)L->out, sqrt(1.0 / L->out), &s);
  }
  /* DLRM's reference draws the output layer's single bias from N(0, sqrt(1/1)): one
   * standard-normal offset of every sample's initial logit, worth about -0.004 test AUC per
   * unit after training (bench/RESULTS-e2e.md, issue 19) */
  if (cfg->out_bias_zero) h[m->L[m->nl - 1].b_off] = 0.0f;
  for (int l = 0; m->dcn_on && l < m->dcn.layers; l++) {
    ps_dlrm_cross_layer C;
    ps_dlrm_dcn_layer(&m->dcn, l, &C);
    size_t D = (size_t)C.dim, R = (size_t)C.rank;
    if (R > 0) {
      fill_normal(h + C.v_off, R * D, sqrt(2.0 / (double)(R + D)), &s);
      fill_normal(h + C.u_off, D * R, sqrt(2.0 / (double)(R + D)), &s);
    } else {
      fill_normal(h + C.w_off, D * D, sqrt(1.0 / (double)D), &s);
    }
    memset(h + C.b_off, 0, D * sizeof(float));
  }
}

/* ---- create / destroy ---- */

static ps_status kalloc(ps_kern *k, float **p, size_t n) { return ps_kern_alloc(k, n * sizeof(float), (void **)p); }

static ps_status grow_sparse(ps_dlrm *m, int nrows, int nnz) {
  ps_kern *k = m->k;
  if (nrows > m->rows_cap) {
    int cap = nrows > m->rows_cap * 2 ? nrows : m->rows_cap * 2;
    ps_kern_free(k, m->rows_d);
    ps_kern_free(k, m->drows_d);
    m->rows_d = m->drows_d = NULL;
    m->rows_cap = 0;
    TRY(kalloc(k, &m->rows_d, (size_t)cap * m->dim));
    TRY(kalloc(k, &m->drows_d, (size_t)cap * m->dim));
    m->rows_cap = cap;
  }
  if (nnz > m->nnz_cap) {
    int cap = nnz > m->nnz_cap * 2 ? nnz : m->nnz_cap * 2;
    ps_kern_free(k, m->idx_d);
    m->idx_d = NULL;
    m->nnz_cap = 0;
    TRY(ps_kern_alloc(k, (size_t)cap * sizeof(int32_t), (void **)&m->idx_d));
    m->nnz_cap = cap;
  }
  return PS_OK;
}

static ps_status alloc_workspace(ps_dlrm *m) {
  ps_kern *k = m->k;
  size_t B = (size_t)m->max_batch;
  TRY(kalloc(k, &m->params, m->nparams));
  TRY(kalloc(k, &m->grads, m->nparams));
  TRY(ps_kern_memset0(k, m->grads, m->nparams * sizeof(float)));
  for (int l = 0; l < m->nl; l++) TRY(kalloc(k, &m->act[l], B * m->L[l].out));
  if (m->dcn_on) TRY(ps_dlrm_dcn_alloc(&m->dcn, k, m->max_batch));
  else TRY(kalloc(k, &m->inter, B * m->W));
  TRY(kalloc(k, &m->pooled, B * m->S * m->dim + 1));
  TRY(kalloc(k, &m->dpooled, B * m->S * m->dim + 1));
  TRY(kalloc(k, &m->dbottom, B * m->dim));
  TRY(kalloc(k, &m->probs, B));
  TRY(kalloc(k, &m->loss_d, 1));
  TRY(kalloc(k, &m->dbuf[0], B * m->maxw));
  TRY(kalloc(k, &m->dbuf[1], B * m->maxw));
  if (!k->host_memory) {
    TRY(kalloc(k, &m->dense_d, B * m->num_dense));
    TRY(kalloc(k, &m->labels_d, B));
    TRY(ps_kern_alloc(k, (B * m->S + 1) * sizeof(int32_t), (void **)&m->off_d));
    int one_hot = (int)(B * m->S);
    TRY(grow_sparse(m, one_hot > 0 ? one_hot : 1, one_hot > 0 ? one_hot : 1));
  }
  return PS_OK;
}

static ps_status build_layers(ps_dlrm *m, const ps_dlrm_config *cfg, ps_error *err) {
  int bot[PS_DLRM_MAX_LAYERS + 1], top[PS_DLRM_MAX_LAYERS + 1];
  int nb = ps_dlrm_parse_mlp(cfg->mlp_bot, bot, PS_DLRM_MAX_LAYERS + 1);
  int nt = ps_dlrm_parse_mlp(cfg->mlp_top, top + 1, PS_DLRM_MAX_LAYERS);
  if (nb < 2) {
    return ps_error_set(err, PS_ERR_INVALID, "mlp-bot '%s': need at least two widths like 13-512-256-64-16",
                        cfg->mlp_bot ? cfg->mlp_bot : "");
  }
  if (nt < 1 || nb - 1 + nt > PS_DLRM_MAX_LAYERS) {
    return ps_error_set(err, PS_ERR_INVALID, "mlp-top '%s': need widths like 512-256-1 (at most %d layers in all)",
                        cfg->mlp_top ? cfg->mlp_top : "", PS_DLRM_MAX_LAYERS);
  }
  if (bot[nb - 1] != cfg->emb_dim) {
    return ps_error_set(err, PS_ERR_INVALID, "mlp-bot '%s' ends in %d but emb-dim is %d: they must be equal",
                        cfg->mlp_bot, bot[nb - 1], cfg->emb_dim);
  }
  if (top[nt] != 1) {
    return ps_error_set(err, PS_ERR_INVALID, "mlp-top '%s' must end in 1 (the logit)", cfg->mlp_top);
  }
  if (m->dcn_on) {
    TRY(ps_dlrm_check_cross(m->S, m->dim, cfg->dcn_layers, cfg->dcn_rank, err));
    m->W = (1 + m->S) * m->dim;
  } else {
    m->W = ps_kern_interact_width(m->S, m->dim);
  }
  top[0] = m->W; /* the reference prepends the interaction width */
  m->nbot = nb - 1;
  m->ntop = nt;
  m->nl = m->nbot + m->ntop;
  m->num_dense = bot[0];
  size_t off = 0;
  int maxw = m->W > m->dim ? m->W : m->dim;
  for (int l = 0; l < m->nl; l++) {
    ps_dlrm_layer *L = &m->L[l];
    if (l == m->nbot && m->dcn_on) /* the cross block sits between the towers */
      off = ps_dlrm_dcn_layout(&m->dcn, m->S, m->dim, cfg->dcn_layers,
                               ps_dlrm_cross_rank(m->S, m->dim, cfg->dcn_rank), off);
    L->in = l < m->nbot ? bot[l] : top[l - m->nbot];
    L->out = l < m->nbot ? bot[l + 1] : top[l - m->nbot + 1];
    L->w_off = off;
    off += (size_t)L->in * L->out;
    L->b_off = off;
    off += (size_t)L->out;
    L->relu = l != m->nl - 1;
    if (L->in > maxw) maxw = L->in;
    if (L->out > maxw) maxw = L->out;
  }
  m->nparams = off;
  m->maxw = maxw;
  return PS_OK;
}

void ps_dlrm_destroy(ps_dlrm **mp) {
  if (!mp || !*mp) return;
  ps_dlrm *m = *mp;
  ps_kern *k = m->k;
  float *bufs[] = {m->params, m->grads, m->opt_state, m->inter, m->pooled, m->dpooled,
                   m->dbottom, m->probs, m->loss_d, m->dbuf[0], m->dbuf[1], m->dense_d,
                   m->labels_d, m->rows_d, m->drows_d};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ps_kern_free(k, bufs[i]);
  for (int l = 0; l < m->nl; l++) ps_kern_free(k, m->act[l]);
  ps_dlrm_dcn_free(&m->dcn, k);
  ps_kern_free(k, m->idx_d);
  ps_kern_free(k, m->off_d);
  free(m);
  *mp = NULL;
}

ps_status ps_dlrm_create(ps_kern *k, const ps_dlrm_config *cfg, ps_dlrm **out, ps_error *err) {
  if (!k || !cfg || !out) return ps_error_set(err, PS_ERR_INVALID, "dlrm: no backend, config or output");
  *out = NULL;
  if (cfg->emb_dim <= 0 || cfg->emb_dim > 4096 || cfg->num_sparse < 0 || cfg->num_sparse > 1024 ||
      cfg->max_batch <= 0 || cfg->max_batch > (1 << 22) ||
      !ps_kern_pool_valid(cfg->pool) || (cfg->pool.period != 1 && (int)cfg->pool.period != cfg->num_sparse) ||
      (cfg->interaction != PS_DLRM_DOT && cfg->interaction != PS_DLRM_DCN)) {
    return ps_error_set(err, PS_ERR_INVALID, "dlrm: bad config (emb-dim %d, sparse features %d, max batch %d)",
                        cfg->emb_dim, cfg->num_sparse, cfg->max_batch);
  }
  ps_dlrm *m = calloc(1, sizeof(*m));
  if (!m) return ps_error_set(err, PS_ERR_NOMEM, "dlrm: out of memory");
  m->k = k;
  m->pool = cfg->pool;
  m->max_batch = cfg->max_batch;
  m->dim = cfg->emb_dim;
  m->S = cfg->num_sparse;
  m->dcn_on = cfg->interaction == PS_DLRM_DCN;
  m->opt_kind = -1;
  m->prec = cfg->precision == PS_KERN_BF16 ? PS_KERN_BF16 : PS_KERN_FP32;
  if (m->prec == PS_KERN_BF16 && !ps_kern_has_bf16(k)) {
    PS_WARN("precision bf16: the %s backend has no bf16 GEMM on this machine (%s); running FP32",
            k->name, k->host_memory ? "no AVX512_BF16" : "needs compute capability 8.0");
    m->prec = PS_KERN_FP32;
  }
  m->dcn.prec = m->prec;
  ps_status st = build_layers(m, cfg, err);
  if (st != PS_OK) {
    ps_dlrm_destroy(&m);
    return st;
  }
  st = alloc_workspace(m);
  float *h = NULL;
  if (st == PS_OK) {
    h = malloc(m->nparams * sizeof(float));
    if (!h) st = PS_ERR_NOMEM;
  }
  if (st == PS_OK) {
    init_params(m, h, cfg);
    st = ps_kern_to_device(k, m->params, h, m->nparams * sizeof(float));
  }
  free(h);
  if (st != PS_OK) {
    size_t np = m->nparams;
    ps_dlrm_destroy(&m);
    return ps_error_set(err, st, "dlrm: %zu parameters on the %s backend: %s", np, k->name,
                        ps_status_str(st));
  }
  *out = m;
  return PS_OK;
}

/* ---- forward ---- */

static ps_status check_batch(const ps_dlrm *m, const ps_dlrm_batch *b, bool train) {
  if (!b || b->batch <= 0 || b->batch > m->max_batch) {
    PS_ERROR("dlrm: batch of %d samples (max %d)", b ? b->batch : -1, m->max_batch);
    return PS_ERR_INVALID;
  }
  if (!b->dense || !b->offsets || b->nrows < 0 || b->nnz < 0 || (b->nrows && !b->rows) ||
      (b->nnz && !b->idx) || (train && !b->labels))
    return PS_ERR_INVALID;
  int nb = b->batch * m->S;
  if (b->offsets[0] != 0 || b->offsets[nb] != b->nnz) return PS_ERR_INVALID;
  for (int i = 0; i < nb; i++)
    if (b->offsets[i + 1] < b->offsets[i]) return PS_ERR_INVALID;
  for (int j = 0; j < b->nnz; j++)
    if (b->idx[j] < 0 || b->idx[j] >= b->nrows) return PS_ERR_INVALID;
  if (train)
    for (int i = 0; i < b->batch; i++)
      if (!(b->labels[i] >= 0.0f && b->labels[i] <= 1.0f)) return PS_ERR_INVALID;
  return PS_OK;
}

/* Makes the batch's arrays available as backend pointers (in place on host backends). */
static ps_status stage(ps_dlrm *m, const ps_dlrm_batch *b, bool train, const float **rows) {
  ps_kern *k = m->k;
  int B = b->batch, nb = B * m->S;
  if (k->host_memory) {
    m->x0 = b->dense;
    m->lab = train ? b->labels : NULL;
    *rows = b->rows;
    m->idx = b->idx;
    m->off = b->offsets;
  } else {
    TRY(grow_sparse(m, b->nrows, b->nnz));
    TRY(ps_kern_to_device(k, m->dense_d, b->dense, (size_t)B * m->num_dense * sizeof(float)));
    if (train) TRY(ps_kern_to_device(k, m->labels_d, b->labels, (size_t)B * sizeof(float)));
    size_t rb = (size_t)b->nrows * m->dim * sizeof(float);
    TRY(b->rows_pinned ? ps_kern_to_device_pinned(k, m->rows_d, b->rows, rb)
                       : ps_kern_to_device(k, m->rows_d, b->rows, rb));
    TRY(ps_kern_to_device(k, m->idx_d, b->idx, (size_t)b->nnz * sizeof(int32_t)));
    TRY(ps_kern_to_device(k, m->off_d, b->offsets, ((size_t)nb + 1) * sizeof(int32_t)));
    m->x0 = m->dense_d;
    m->lab = train ? m->labels_d : NULL;
    *rows = m->rows_d;
    m->idx = m->idx_d;
    m->off = m->off_d;
  }
  m->B = B;
  m->nrows = b->nrows;
  m->nnz = b->nnz;
  return PS_OK;
}

/* y = act(x W^T + b) for layer l over B rows. */
static ps_status linear_fwd(ps_dlrm *m, int l, int B, const float *x) {
  const ps_dlrm_layer *L = &m->L[l];
  const float *w = m->params + L->w_off, *bias = m->params + L->b_off;
  TRY(ps_kern_gemm(m->k, m->prec, false, true, B, L->out, L->in, 1.0f, x, L->in, w, L->in,
                   0.0f, m->act[l], L->out));
  return ps_kern_bias_act_fwd(m->k, L->relu ? PS_KERN_ACT_RELU : PS_KERN_ACT_NONE, B, L->out,
                              m->act[l], bias, m->act[l]);
}

static ps_status run_forward(ps_dlrm *m, const ps_dlrm_batch *b, bool train) {
  m->have_fwd = false;
  TRY(check_batch(m, b, train));
  const float *rows = NULL;
  TRY(stage(m, b, train, &rows));
  int B = b->batch;
  TRY(ps_kern_pool_fwd(m->k, m->pool, B * m->S, m->dim, b->nrows, rows, b->nnz, m->idx, m->off,
                       m->pooled));
  const float *x = m->x0;
  for (int l = 0; l < m->nbot; l++) {
    TRY(linear_fwd(m, l, B, x));
    x = m->act[l];
  }
  if (m->dcn_on) {
    TRY(ps_dlrm_dcn_forward(&m->dcn, m->k, m->params, B, x, m->pooled, &x));
  } else {
    TRY(ps_kern_interact_fwd(m->k, B, m->S, m->dim, x, m->pooled, m->inter));
    x = m->inter;
  }
  m->top_in = x;
  for (int l = m->nbot; l < m->nl; l++) {
    TRY(linear_fwd(m, l, B, x));
    x = m->act[l];
  }
  TRY(ps_kern_bce_fwd(m->k, B, x, m->lab, m->probs, m->loss_d));
  m->have_fwd = true;
  m->fwd_train = train;
  return PS_OK;
}

ps_status ps_dlrm_forward(ps_dlrm *m, const ps_dlrm_batch *b, float *loss) {
  if (!m) return PS_ERR_INVALID;
  TRY(run_forward(m, b, true));
  if (loss) TRY(ps_kern_to_host(m->k, loss, m->loss_d, sizeof(float)));
  return PS_OK;
}

ps_status ps_dlrm_predict(ps_dlrm *m, const ps_dlrm_batch *b, float *probs) {
  if (!m || !probs) return PS_ERR_INVALID;
  TRY(run_forward(m, b, false));
  return ps_kern_to_host(m->k, probs, m->probs, (size_t)b->batch * sizeof(float));
}

ps_status ps_dlrm_last_probs(ps_dlrm *m, float *probs) {
  if (!m || !probs || !m->have_fwd) return PS_ERR_INVALID;
  return ps_kern_to_host(m->k, probs, m->probs, (size_t)m->B * sizeof(float));
}

/* ---- backward ---- */

/* Given dY (grad of layer l's output, in *dcur), writes dW, db and, if want_dx, dX into dnext.
 * dcur is turned into the pre-activation gradient in place. */
static ps_status linear_bwd(ps_dlrm *m, int l, int B, const float *x, float *dcur, float *dnext,
                            bool want_dx) {
  const ps_dlrm_layer *L = &m->L[l];
  ps_kern *k = m->k;
  TRY(ps_kern_bias_act_bwd(k, L->relu ? PS_KERN_ACT_RELU : PS_KERN_ACT_NONE, B, L->out,
                           m->act[l], dcur, dcur, m->grads + L->b_off));
  /* dW [out, in] = dZ^T [out, B] x X [B, in] */
  TRY(ps_kern_gemm(k, m->prec, true, false, L->out, L->in, B, 1.0f, dcur, L->out, x, L->in,
                   0.0f, m->grads + L->w_off, L->in));
  if (want_dx) /* dX [B, in] = dZ [B, out] x W [out, in] */
    TRY(ps_kern_gemm(k, m->prec, false, false, B, L->in, L->out, 1.0f, dcur, L->out,
                     m->params + L->w_off, L->in, 0.0f, dnext, L->in));
  return PS_OK;
}

ps_status ps_dlrm_backward(ps_dlrm *m, float *emb_grad) {
  if (!m || !m->have_fwd || !m->fwd_train) return PS_ERR_INVALID;
  ps_kern *k = m->k;
  int B = m->B;
  float *dcur = m->dbuf[0], *dnext = m->dbuf[1], *t;
  TRY(ps_kern_bce_bwd(k, B, m->act[m->nl - 1], m->lab, 1.0f / (float)B, dcur));
  for (int l = m->nl - 1; l >= m->nbot; l--) {
    const float *x = l == m->nbot ? m->top_in : m->act[l - 1];
    TRY(linear_bwd(m, l, B, x, dcur, dnext, true));
    t = dcur, dcur = dnext, dnext = t;
  }
  /* dcur: grad of the interaction output [B, W] */
  const float *bot_out = m->nbot > 0 ? m->act[m->nbot - 1] : m->x0;
  if (m->dcn_on)
    TRY(ps_dlrm_dcn_backward(&m->dcn, k, m->params, m->grads, B, dcur, m->dbottom, m->dpooled));
  else
    TRY(ps_kern_interact_bwd(k, B, m->S, m->dim, bot_out, m->pooled, dcur, m->dbottom,
                             m->dpooled));
  if (emb_grad && m->nrows > 0) {
    float *dst = k->host_memory ? emb_grad : m->drows_d;
    TRY(ps_kern_pool_bwd(k, m->pool, B * m->S, m->dim, m->nrows, m->nnz, m->idx, m->off,
                         m->dpooled, dst));
  }
  /* bottom MLP, from dbottom; the first layer's input gradient is not needed */
  TRY(ps_kern_copy(k, dcur, m->dbottom, (size_t)B * m->dim * sizeof(float)));
  for (int l = m->nbot - 1; l >= 0; l--) {
    const float *x = l == 0 ? m->x0 : m->act[l - 1];
    TRY(linear_bwd(m, l, B, x, dcur, dnext, l > 0));
    t = dcur, dcur = dnext, dnext = t;
  }
  if (emb_grad && m->nrows > 0 && !k->host_memory)
    TRY(ps_kern_to_host(k, emb_grad, m->drows_d, (size_t)m->nrows * m->dim * sizeof(float)));
  return PS_OK;
}

/* ---- optimizer ---- */

ps_status ps_dlrm_step(ps_dlrm *m, const ps_dlrm_opt *o) {
  if (!m || !o || !(o->lr >= 0.0f)) return PS_ERR_INVALID;
  ps_kern *k = m->k;
  size_t n = m->nparams;
  if ((int)o->kind != m->opt_kind) {
    /* a new optimizer starts with fresh state, as a new torch.optim object would */
    ps_kern_free(k, m->opt_state);
    m->opt_state = NULL;
    size_t ns = o->kind == PS_DLRM_OPT_ADAM ? 2 * n : o->kind == PS_DLRM_OPT_ADAGRAD ? n : 0;
    if (o->kind != PS_DLRM_OPT_SGD && o->kind != PS_DLRM_OPT_ADAGRAD && o->kind != PS_DLRM_OPT_ADAM)
      return PS_ERR_INVALID;
    if (ns) {
      TRY(kalloc(k, &m->opt_state, ns));
      TRY(ps_kern_memset0(k, m->opt_state, ns * sizeof(float)));
    }
    m->opt_kind = (int)o->kind;
    m->step = 0;
  }
  m->step++;
  switch (o->kind) {
    case PS_DLRM_OPT_SGD:
      return ps_kern_sgd(k, n, m->params, m->grads, o->lr, o->weight_decay);
    case PS_DLRM_OPT_ADAGRAD: {
      float clr = o->lr / (1.0f + (float)(m->step - 1) * o->lr_decay);
      return ps_kern_adagrad(k, n, m->params, m->grads, m->opt_state, clr, o->eps, o->weight_decay);
    }
    case PS_DLRM_OPT_ADAM:
      return ps_kern_adam(k, n, m->params, m->grads, m->opt_state, m->opt_state + n, o->lr,
                          o->beta1, o->beta2, o->eps, o->weight_decay, m->step);
  }
  return PS_ERR_INVALID;
}

/* ---- accessors ---- */

size_t ps_dlrm_num_params(const ps_dlrm *m) { return m ? m->nparams : 0; }
float *ps_dlrm_grads(ps_dlrm *m) { return m ? m->grads : NULL; }

ps_status ps_dlrm_get_params(ps_dlrm *m, float *host, size_t n) {
  if (!m || !host || n != m->nparams) return PS_ERR_INVALID;
  return ps_kern_to_host(m->k, host, m->params, n * sizeof(float));
}
ps_status ps_dlrm_set_params(ps_dlrm *m, const float *host, size_t n) {
  if (!m || !host || n != m->nparams) return PS_ERR_INVALID;
  return ps_kern_to_device(m->k, m->params, host, n * sizeof(float));
}
ps_status ps_dlrm_get_grads(ps_dlrm *m, float *host, size_t n) {
  if (!m || !host || n != m->nparams) return PS_ERR_INVALID;
  return ps_kern_to_host(m->k, host, m->grads, n * sizeof(float));
}

int ps_dlrm_num_layers(const ps_dlrm *m, int *num_bot, int *num_top) {
  if (!m) return 0;
  if (num_bot) *num_bot = m->nbot;
  if (num_top) *num_top = m->ntop;
  return m->nl;
}
ps_status ps_dlrm_layer_info(const ps_dlrm *m, int i, ps_dlrm_layer *out) {
  if (!m || !out || i < 0 || i >= m->nl) return PS_ERR_INVALID;
  *out = m->L[i];
  return PS_OK;
}
ps_kern_prec ps_dlrm_precision(const ps_dlrm *m) { return m ? m->prec : PS_KERN_FP32; }

int ps_dlrm_num_dense(const ps_dlrm *m) { return m ? m->num_dense : 0; }
int ps_dlrm_interact_width(const ps_dlrm *m) { return m ? m->W : 0; }
int ps_dlrm_num_cross(const ps_dlrm *m) { return m && m->dcn_on ? m->dcn.layers : 0; }
ps_status ps_dlrm_cross_info(const ps_dlrm *m, int l, ps_dlrm_cross_layer *out) {
  if (!m || !out || l < 0 || l >= ps_dlrm_num_cross(m)) return PS_ERR_INVALID;
  ps_dlrm_dcn_layer(&m->dcn, l, out);
  return PS_OK;
}
double ps_dlrm_flops_per_sample(const ps_dlrm *m) {
  double f = m && m->dcn_on ? ps_dlrm_dcn_flops(&m->dcn) : 0;
  for (int l = 0; m && l < m->nl; l++) f += 6.0 * m->L[l].in * m->L[l].out;
  return f;
}

/* ---- optimizer state (checkpoints) ---- */

size_t ps_dlrm_opt_state_len(const ps_dlrm *m) {
  if (!m) return 0;
  return m->opt_kind == PS_DLRM_OPT_ADAM ? 2 * m->nparams
         : m->opt_kind == PS_DLRM_OPT_ADAGRAD ? m->nparams : 0;
}

ps_status ps_dlrm_get_opt_state(ps_dlrm *m, int *kind, int64_t *step, float *host, size_t n) {
  if (!m || !kind || !step || n != ps_dlrm_opt_state_len(m) || (n && !host)) return PS_ERR_INVALID;
  *kind = m->opt_kind;
  *step = m->step;
  return n ? ps_kern_to_host(m->k, host, m->opt_state, n * sizeof(float)) : PS_OK;
}

ps_status ps_dlrm_set_opt_state(ps_dlrm *m, int kind, int64_t step, const float *host, size_t n) {
  if (!m || step < 0) return PS_ERR_INVALID;
  if (kind < 0) { /* no optimizer step taken yet */
    ps_kern_free(m->k, m->opt_state);
    m->opt_state = NULL;
    m->opt_kind = -1;
    m->step = 0;
    return n == 0 ? PS_OK : PS_ERR_INVALID;
  }
  size_t want = kind == PS_DLRM_OPT_ADAM ? 2 * m->nparams : kind == PS_DLRM_OPT_ADAGRAD ? m->nparams : 0;
  if (kind > PS_DLRM_OPT_ADAM || n != want || (n && !host)) return PS_ERR_INVALID;
  ps_kern_free(m->k, m->opt_state);
  m->opt_state = NULL;
  if (n) {
    TRY(kalloc(m->k, &m->opt_state, n));
    TRY(ps_kern_to_device(m->k, m->opt_state, host, n * sizeof(float)));
  }
  m->opt_kind = kind;
  m->step = step;
  return PS_OK;
}
