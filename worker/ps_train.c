/* ps_train: the ps-worker training loop (see ps_train.h for the sync-equivalence scaling).
 *
 * One step t, on every rank:
 *   batch (reader thread) → dedup keys → PULL(t) unique rows → forward/backward
 *   → dense grads × n_r, with n_r in one extra slot, allreduce (Gloo / NCCL) → ÷ N
 *   → sparse grads × n_r/N → PUSH(t) + STEP(t), pipelined
 *   → next batch: dedup + PULL(t+1) sent → dense optimizer step (overlaps the pull, which
 *     in sync mode the server answers once every worker's step t is applied)
 *   → wait for PUSH/STEP(t) replies.
 * Everything the steps need is allocated once, for the largest batch.
 *
 * Replicas: every rank starts from the same seeded parameters and applies the same
 * allreduced gradients with the same optimizer, so the dense buffers stay bit-identical; a
 * hash of each rank's buffer is compared at the end (an allgather of the hashes) and a
 * mismatch fails the run. */
#include "ps_train.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_client.h"
#include "ps_collectives.h"
#include "ps_dedup.h"
#include "ps_dlrm.h"
#include "ps_fs.h"
#include "ps_http.h"
#include "ps_metrics.h"
#include "ps_hash.h"
#include "ps_kernels.h"
#include "ps_log.h"
#include "ps_metrics_eval.h"
#include "ps_reader.h"
#include "ps_time.h"

#define TABLE_ID 1u
#define TABLE_NAME "criteo_emb"
#define CKPT_MAGIC 0x454d424552434b31ull /* "EMBERCK1" */

void ps_train_config_default(ps_train_config *c) {
  memset(c, 0, sizeof *c);
  c->holdout = 0;
  c->rank = -1;
  c->world = 1;
  c->device = "cpu";
  c->consistency = "sync";
  c->epochs = 1;
  c->batch = 2048;
  c->lr = 0.001;
  c->dense_opt = "adam";
  c->sparse_lr = 0.1;
  c->sparse_opt = "adagrad";
  c->emb_init = 0.01;
  c->emb_dim = 16;
  c->mlp_bot = "13-512-256-64-16";
  c->mlp_top = "512-256-1";
  c->threads = 0;
  c->bad_lines = "skip";
  c->progress_every = 5.0;
  c->seed = 1;
  c->timeout_ms = 120000;
}

/* ------------------------------------------------------------------ state */

typedef struct slot { /* one batch in flight: its keys, pull and row buffers */
  ps_batch *b;
  size_t nunique;
  uint64_t *unique;
  uint32_t *inverse;
  float *rows;
  ps_client_req *pull;
  uint64_t step;
} slot;

typedef struct trainer {
  const ps_train_config *cfg;
  int rank, world;
  ps_client *cl;
  ps_kern *kern;
  ps_dlrm *model;
  ps_coll *coll;
  ps_dedup *dedup;
  ps_dlrm_opt dopt;
  char run_id[64];
  size_t nparams;
  float *host_grads;  /* [nparams + 1] host backends: the allreduce buffer; also checkpoints */
  float *red_d;       /* [nparams + 1] device backends: the allreduce buffer */
  float *emb_grad;    /* [max keys, dim] */
  int32_t *idx, *offsets;
  float *probs;
  slot slots[2];
  int dim, batch, nkeys_max;
  uint64_t step;      /* steps done (global step, resumed runs included) */
  uint64_t step_this_run;
  uint64_t samples;   /* this rank's training samples */
  double loss_sum;
  uint64_t loss_n;
  float last_loss;
  double t_data, t_pull, t_compute, t_allreduce, t_push, t_opt, t_eval;
  uint64_t bad_lines;
  /* --metrics-port: Prometheus series updated once per step */
  ps_metrics *reg;
  ps_http *http;
  ps_series *m_samples, *m_loss, *m_step, *m_phase[6];
  double phase_last[6];
} trainer;

static double since(uint64_t t0) { return ps_ns_to_s(ps_now_ns() - t0); }

#define TRY(x)                       \
  do {                               \
    ps_status st_ = (x);             \
    if (st_ != PS_OK) return st_;    \
  } while (0)

static ps_status client_fail(trainer *t, const char *what, ps_status st) {
  PS_ERROR("%s failed: %s (%s)", what, ps_status_str(st), ps_client_error(t->cl));
  return st;
}

/* ------------------------------------------------------------------ collectives */

/* Allreduce over the world; a no-op for one worker. buf is backend memory for NCCL, host
 * memory for Gloo. */
static ps_status allreduce(trainer *t, float *buf, size_t n) {
  if (t->world == 1 || n == 0) return PS_OK;
  return ps_coll_allreduce_sum(t->coll, buf, n);
}

static ps_status allreduce_host(void *ctx, float *buf, size_t n) {
  trainer *t = ctx;
  if (t->world == 1) return PS_OK;
  if (t->coll->kind == PS_COLL_GLOO) return ps_coll_allreduce_sum(t->coll, buf, n);
  /* NCCL reduces device memory: stage through the backend. */
  float *d = NULL;
  TRY(ps_kern_alloc(t->kern, n * sizeof(float), (void **)&d));
  ps_status st = ps_kern_to_device(t->kern, d, buf, n * sizeof(float));
  if (st == PS_OK) st = ps_kern_sync(t->kern);
  if (st == PS_OK) st = ps_coll_allreduce_sum(t->coll, d, n);
  if (st == PS_OK) st = ps_kern_to_host(t->kern, buf, d, n * sizeof(float));
  ps_kern_free(t->kern, d);
  return st;
}

/* Sums u64 counters over ranks exactly: each value travels as four 16-bit parts, so float
 * sums stay exact for up to 256 ranks. */
static ps_status allreduce_u64(trainer *t, uint64_t *v, size_t n) {
  if (t->world == 1) return PS_OK;
  float *f = calloc(n * 4, sizeof *f);
  if (!f) return PS_ERR_NOMEM;
  for (size_t i = 0; i < n; i++)
    for (int p = 0; p < 4; p++) f[i * 4 + p] = (float)((v[i] >> (16 * p)) & 0xffff);
  ps_status st = allreduce_host(t, f, n * 4);
  if (st == PS_OK)
    for (size_t i = 0; i < n; i++) {
      v[i] = 0;
      for (int p = 0; p < 4; p++) v[i] += (uint64_t)f[i * 4 + p] << (16 * p);
    }
  free(f);
  return st;
}

/* The run's rendezvous namespace: given, or made by rank 0 and published through the
 * coordinator between two barriers (so no rank can read a previous run's value). */
static ps_status agree_run_id(trainer *t) {
  if (t->cfg->run_id) {
    snprintf(t->run_id, sizeof t->run_id, "%s", t->cfg->run_id);
    return PS_OK;
  }
  uint32_t to = t->cfg->timeout_ms;
  ps_status st = ps_client_barrier(t->cl, "ember/train/start", (uint32_t)t->world, to);
  if (st != PS_OK) return client_fail(t, "start barrier", st);
  if (t->rank == 0) {
    uint64_t nonce = ps_hash_u64(ps_now_ns() ^ ((uint64_t)getpid() << 32), 0x52554e);
    snprintf(t->run_id, sizeof t->run_id, "%016" PRIx64, nonce);
    st = ps_client_kv_set(t->cl, "ember/train/run-id", t->run_id, strlen(t->run_id));
    if (st != PS_OK) return client_fail(t, "publishing the run id", st);
  }
  st = ps_client_barrier(t->cl, "ember/train/run-id", (uint32_t)t->world, to);
  if (st != PS_OK) return client_fail(t, "run-id barrier", st);
  if (t->rank != 0) {
    void *v = NULL;
    size_t len = 0;
    st = ps_client_kv_get(t->cl, "ember/train/run-id", &v, &len, to);
    if (st != PS_OK) return client_fail(t, "reading the run id", st);
    snprintf(t->run_id, sizeof t->run_id, "%.*s", (int)(len < 63 ? len : 63), (char *)v);
    free(v);
  }
  return PS_OK;
}

static ps_status setup_collectives(trainer *t) {
  if (t->world == 1) return PS_OK;
  TRY(agree_run_id(t));
  ps_rendezvous rdv = {t->cl, ps_client_rdv_set, ps_client_rdv_get};
  ps_status st;
  if (t->kern->host_memory) {
    /* Gloo needs this host's address as its peers see it: loopback serves one machine;
     * EMBER_GLOO_HOST (an address of this host the other workers reach) serves several. */
    const char *host = getenv("EMBER_GLOO_HOST");
    if (!host || !*host) host = "127.0.0.1";
    st = ps_coll_create_gloo(&rdv, t->run_id, t->rank, t->world, host, &t->coll);
  } else {
    int dev = 0;
    if (!strncmp(t->cfg->device, "cuda:", 5)) dev = atoi(t->cfg->device + 5);
    /* On the kernels' stream: the allreduce runs in order with the backward and the
     * optimizer, with no host wait between them (ps_kern_to_host of N waits for it). */
    st = ps_coll_create_nccl(&rdv, t->run_id, t->rank, t->world, dev, ps_kern_stream(t->kern),
                             &t->coll);
  }
  if (st != PS_OK) PS_ERROR("collectives for %d workers: %s", t->world, ps_status_str(st));
  return st;
}

/* ------------------------------------------------------------------ set-up */

static int parse_sparse_opt(const char *s) {
  static const char *const names[] = {"sgd", "adagrad", "rowwise-adagrad", "adam", "ftrl"};
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

static ps_status parse_consistency(const char *s, ps_consistency *c, uint32_t *k) {
  *k = 0;
  if (!strcmp(s, "sync")) *c = PS_CONS_SYNC;
  else if (!strcmp(s, "async")) *c = PS_CONS_ASYNC;
  else if (!strncmp(s, "ssp:", 4)) {
    char *end = NULL;
    long v = strtol(s + 4, &end, 10);
    if (!*(s + 4) || *end || v < 0 || v > 1000000) return PS_ERR_INVALID;
    *c = PS_CONS_SSP;
    *k = (uint32_t)v;
  } else
    return PS_ERR_INVALID;
  return PS_OK;
}

static ps_status declare_table(trainer *t) {
  const ps_train_config *c = t->cfg;
  ps_table_spec tb;
  ps_table_spec_default(&tb, TABLE_ID, TABLE_NAME, (uint32_t)c->emb_dim);
  tb.optimizer = parse_sparse_opt(c->sparse_opt);
  tb.lr = (float)c->sparse_lr;
  tb.eps = tb.optimizer == 1 || tb.optimizer == 2 ? 1e-10f : 1e-8f;
  tb.l1 = 0;
  tb.l2 = 0;
  tb.init = 0;
  tb.init_a = (float)-c->emb_init;
  tb.init_b = (float)c->emb_init;
  tb.seed = (uint64_t)c->seed;
  tb.admit_threshold = (uint32_t)c->admit_threshold;
  tb.ttl_steps = (uint64_t)c->ttl_steps;
  TRY(parse_consistency(c->consistency, &tb.consistency, &tb.staleness));
  tb.num_workers = (uint32_t)t->world;
  ps_status st = ps_client_declare(t->cl, &tb);
  if (st != PS_OK) return client_fail(t, "declaring the embedding table", st);
  return PS_OK;
}

static ps_status alloc_slots(trainer *t) {
  size_t nk = (size_t)t->nkeys_max;
  for (int i = 0; i < 2; i++) {
    slot *s = &t->slots[i];
    s->unique = malloc(nk * sizeof *s->unique);
    s->inverse = malloc(nk * sizeof *s->inverse);
    s->rows = malloc(nk * (size_t)t->dim * sizeof *s->rows);
    if (!s->unique || !s->inverse || !s->rows) return PS_ERR_NOMEM;
  }
  t->emb_grad = malloc(nk * (size_t)t->dim * sizeof *t->emb_grad);
  t->idx = malloc(nk * sizeof *t->idx);
  t->offsets = malloc((nk + 1) * sizeof *t->offsets);
  t->probs = malloc((size_t)t->batch * sizeof *t->probs);
  t->host_grads = malloc((t->nparams + 1) * sizeof *t->host_grads);
  if (!t->emb_grad || !t->idx || !t->offsets || !t->probs || !t->host_grads) return PS_ERR_NOMEM;
  if (!t->kern->host_memory)
    TRY(ps_kern_alloc(t->kern, (t->nparams + 1) * sizeof(float), (void **)&t->red_d));
  return PS_OK;
}

static void free_trainer(trainer *t) {
  for (int i = 0; i < 2; i++) {
    free(t->slots[i].unique);
    free(t->slots[i].inverse);
    free(t->slots[i].rows);
  }
  free(t->emb_grad);
  free(t->idx);
  free(t->offsets);
  free(t->probs);
  free(t->host_grads);
  if (t->red_d) ps_kern_free(t->kern, t->red_d);
  ps_http_destroy(&t->http);
  ps_metrics_destroy(&t->reg);
  ps_coll_destroy(&t->coll);
  ps_dlrm_destroy(&t->model);
  ps_kern_destroy(&t->kern);
  ps_dedup_destroy(&t->dedup);
  ps_client_destroy(&t->cl);
}

/* ------------------------------------------------------------------ one batch */

/* Dedups the batch's keys and sends the pull of its unique rows for `step`. */
static ps_status slot_start(trainer *t, slot *s, ps_batch *b, uint64_t step) {
  s->b = b;
  s->step = step;
  s->nunique = 0;
  s->pull = NULL;
  if (!b || b->nkeys == 0) return PS_OK;
  TRY(ps_dedup_keys(t->dedup, b->keys, b->nkeys, s->unique, s->inverse, &s->nunique));
  ps_status st = ps_client_pull_start(t->cl, TABLE_ID, step, s->unique, s->nunique, true,
                                      s->rows, &s->pull);
  if (st != PS_OK) return client_fail(t, "pull", st);
  return PS_OK;
}

static ps_status slot_wait(trainer *t, slot *s) {
  if (!s->pull) return PS_OK;
  uint64_t t0 = ps_now_ns();
  ps_status st = ps_client_wait(t->cl, &s->pull);
  t->t_pull += since(t0);
  if (st != PS_OK) return client_fail(t, "pull", st);
  return PS_OK;
}

static void fill_batch(trainer *t, const slot *s, ps_dlrm_batch *mb) {
  const ps_batch *b = s->b;
  size_t nk = b->nkeys;
  for (size_t i = 0; i < nk; i++) t->idx[i] = (int32_t)s->inverse[i];
  if (b->key_offsets)
    for (size_t i = 0; i <= b->n * PS_CRITEO_NCAT; i++) t->offsets[i] = (int32_t)b->key_offsets[i];
  else
    for (size_t i = 0; i <= nk; i++) t->offsets[i] = (int32_t)i;
  memset(mb, 0, sizeof *mb);
  mb->batch = (int)b->n;
  mb->dense = b->dense;
  mb->labels = b->labels;
  mb->nrows = (int)s->nunique;
  mb->rows = s->rows;
  mb->nnz = (int)nk;
  mb->idx = t->idx;
  mb->offsets = t->offsets;
}

/* forward/backward of the slot's batch, allreduce, push + step. On return the push/step
 * requests are in flight in *push / *stepreq. */
static ps_status train_step(trainer *t, slot *s, ps_client_req **push, ps_client_req **stepreq) {
  ps_batch *b = s->b;
  size_t n = b ? b->n : 0;
  float *g = ps_dlrm_grads(t->model);
  size_t np = t->nparams;
  uint64_t t0 = ps_now_ns();
  if (n > 0) {
    ps_dlrm_batch mb;
    fill_batch(t, s, &mb);
    float loss = 0;
    TRY(ps_dlrm_forward(t->model, &mb, &loss));
    TRY(ps_dlrm_backward(t->model, t->emb_grad));
    t->loss_sum += (double)loss * (double)n;
    t->last_loss = loss;
    t->loss_n += n;
  }
  /* Dense grads × n_r (the sum-of-losses gradient) with n_r in one extra slot, summed over
   * ranks in one allreduce, then ÷ N. Host backends reduce in host memory through Gloo;
   * device backends reduce in device memory through NCCL (red_d), never touching the host
   * but for the one float N. */
  double total;
  if (t->kern->host_memory) {
    float *red = t->host_grads;
    if (n > 0) memcpy(red, g, np * sizeof(float));
    else memset(red, 0, np * sizeof(float));
    for (size_t i = 0; i < np; i++) red[i] *= (float)n;
    red[np] = (float)n;
    t->t_compute += since(t0);
    t0 = ps_now_ns();
    TRY(allreduce(t, red, np + 1));
    t->t_allreduce += since(t0);
    t0 = ps_now_ns();
    total = red[np];
    float inv = total > 0 ? (float)(1.0 / total) : 0.0f;
    for (size_t i = 0; i < np; i++) g[i] = red[i] * inv;
  } else {
    float nf = (float)n;
    if (n > 0) TRY(ps_kern_copy(t->kern, t->red_d, g, np * sizeof(float)));
    else TRY(ps_kern_memset0(t->kern, t->red_d, np * sizeof(float)));
    TRY(ps_kern_scale(t->kern, np, nf, t->red_d));
    TRY(ps_kern_to_device(t->kern, t->red_d + np, &nf, sizeof nf));
    t->t_compute += since(t0);
    t0 = ps_now_ns();
    TRY(allreduce(t, t->red_d, np + 1));
    float tot = 0; /* reading N waits for the allreduce (and the backward before it) */
    TRY(ps_kern_to_host(t->kern, &tot, t->red_d + np, sizeof tot));
    t->t_allreduce += since(t0);
    t0 = ps_now_ns();
    total = tot;
    TRY(ps_kern_copy(t->kern, g, t->red_d, np * sizeof(float)));
    TRY(ps_kern_scale(t->kern, np, total > 0 ? (float)(1.0 / total) : 0.0f, g));
  }
  /* sparse: the gradient of the mean over all N samples of the step */
  ps_status st;
  *push = NULL;
  if (n > 0 && s->nunique > 0) {
    float scale = (float)((double)n / total);
    size_t ne = s->nunique * (size_t)t->dim;
    for (size_t i = 0; i < ne; i++) t->emb_grad[i] *= scale;
    st = ps_client_push_start(t->cl, TABLE_ID, s->step, s->unique, s->nunique, true,
                              t->emb_grad, push);
    if (st != PS_OK) return client_fail(t, "push", st);
  }
  st = ps_client_step_start(t->cl, 0, s->step, stepreq);
  if (st != PS_OK) return client_fail(t, "step", st);
  t->t_push += since(t0);
  t->samples += n;
  return PS_OK;
}

/* ------------------------------------------------------------------ readers */

static ps_status open_reader(trainer *t, const char *path, int epochs, uint64_t row_begin,
                             uint64_t row_end, ps_reader **out) {
  const ps_train_config *c = t->cfg;
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = c->batch;
  o.rank = t->rank;
  o.world = t->world;
  o.epochs = epochs;
  o.bad_lines = !strcmp(c->bad_lines, "fail") ? PS_BAD_LINES_FAIL : PS_BAD_LINES_SKIP;
  o.hash_buckets = (uint64_t)c->hash_buckets;
  o.row_begin = row_begin;
  o.row_end = row_end;
  char err[512] = "";
  ps_status st = ps_reader_create(path, &o, out, err, sizeof err);
  if (st != PS_OK) PS_ERROR("cannot read %s: %s", path, err[0] ? err : ps_status_str(st));
  return st;
}

/* ------------------------------------------------------------------ evaluation */

/* AUC, logloss and accuracy over the whole evaluation set: every rank scores its shard
 * (pulls tagged with the current step, so sync mode sees every applied step), then the
 * (score, label) pairs are gathered exactly. */
static ps_status evaluate(trainer *t, const char *path, uint64_t row_begin, uint64_t row_end,
                          ps_eval_result *res) {
  uint64_t t0 = ps_now_ns();
  ps_reader *r = NULL;
  TRY(open_reader(t, path, 1, row_begin, row_end, &r));
  ps_eval *ev = NULL;
  ps_status st = ps_eval_create(&ev);
  slot *s = &t->slots[0];
  for (;;) {
    ps_batch *b = NULL;
    if (st == PS_OK) st = ps_reader_next(r, &b);
    if (st != PS_OK) {
      if (st == PS_ERR_PARSE) PS_ERROR("%s", ps_reader_error(r));
      break;
    }
    if (!b) break;
    if (b->n > 0) {
      st = slot_start(t, s, b, t->step);
      if (st == PS_OK) st = slot_wait(t, s);
      ps_dlrm_batch mb;
      if (st == PS_OK) {
        fill_batch(t, s, &mb);
        st = ps_dlrm_predict(t->model, &mb, t->probs);
      }
      if (st == PS_OK) st = ps_eval_add(ev, t->probs, b->labels, b->n);
    }
    ps_reader_release(r, b);
  }
  t->bad_lines += ps_reader_bad_lines(r);
  ps_reader_destroy(&r);
  if (st == PS_OK && t->world > 1) st = ps_eval_allgather(ev, allreduce_host, t, t->rank, t->world);
  if (st == PS_OK) st = ps_eval_compute(ev, res);
  ps_eval_destroy(&ev);
  t->t_eval += since(t0);
  return st;
}

/* ------------------------------------------------------------------ checkpoints */

/* snprintf into a path buffer; PS_ERR_INVALID when the path does not fit. */
static ps_status pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ps_status pathf(char *out, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(out, n, fmt, ap);
  va_end(ap);
  return r < 0 || (size_t)r >= n ? PS_ERR_INVALID : PS_OK;
}


/* Dense state of a checkpoint, written by rank 0 beside the shards' snapshots:
 *   u64 magic, u64 step, u64 nparams, f32 params[nparams],
 *   i64 opt kind, i64 opt step, u64 nstate, f32 state[nstate]. */
static ps_status save_dense(trainer *t, const char *dir) {
  char path[4096];
  TRY(pathf(path, sizeof path, "%s/dense.bin", dir));
  size_t np = t->nparams, ns = ps_dlrm_opt_state_len(t->model);
  float *state = ns ? malloc(ns * sizeof(float)) : NULL;
  if (ns && !state) return PS_ERR_NOMEM;
  int kind = -1;
  int64_t ostep = 0;
  ps_status st = ps_dlrm_get_params(t->model, t->host_grads, np);
  if (st == PS_OK) st = ps_dlrm_get_opt_state(t->model, &kind, &ostep, state, ns);
  FILE *f = st == PS_OK ? fopen(path, "wb") : NULL;
  if (st == PS_OK && !f) st = PS_ERR_IO;
  if (f) {
    uint64_t h[3] = {CKPT_MAGIC, t->step, np};
    int64_t o[2] = {kind, ostep};
    uint64_t nsu = ns;
    int ok = fwrite(h, sizeof h, 1, f) == 1 && fwrite(t->host_grads, sizeof(float), np, f) == np &&
             fwrite(o, sizeof o, 1, f) == 1 && fwrite(&nsu, sizeof nsu, 1, f) == 1 &&
             (ns == 0 || fwrite(state, sizeof(float), ns, f) == ns);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0 || !ok) st = PS_ERR_IO;
  }
  free(state);
  if (st != PS_OK) PS_ERROR("writing %s: %s", path, ps_status_str(st));
  return st;
}

static ps_status load_dense(trainer *t, const char *dir, uint64_t *step) {
  char path[4096];
  TRY(pathf(path, sizeof path, "%s/dense.bin", dir));
  FILE *f = fopen(path, "rb");
  if (!f) {
    PS_ERROR("cannot open %s: %s", path, strerror(errno));
    return PS_ERR_NOT_FOUND;
  }
  ps_status st = PS_ERR_CORRUPT;
  uint64_t h[3];
  int64_t o[2];
  uint64_t ns = 0;
  float *state = NULL;
  size_t np = t->nparams;
  if (fread(h, sizeof h, 1, f) != 1 || h[0] != CKPT_MAGIC || h[2] != np) goto out;
  if (fread(t->host_grads, sizeof(float), np, f) != np) goto out;
  if (fread(o, sizeof o, 1, f) != 1 || fread(&ns, sizeof ns, 1, f) != 1 || ns > 2 * np) goto out;
  state = ns ? malloc(ns * sizeof(float)) : NULL;
  if (ns && (!state || fread(state, sizeof(float), ns, f) != ns)) goto out;
  st = ps_dlrm_set_params(t->model, t->host_grads, np);
  if (st == PS_OK) st = ps_dlrm_set_opt_state(t->model, (int)o[0], o[1], state, ns);
  *step = h[1];
out:
  free(state);
  fclose(f);
  if (st != PS_OK) PS_ERROR("%s: not a checkpoint of this model (%s)", path, ps_status_str(st));
  return st;
}

/* At the boundary before step S (every rank's STEP(S-1) sent, rank 0's STEP(S) not yet):
 * every shard snapshots at S (prepared on all, then committed on all), rank 0 writes the
 * dense state, then `latest` is replaced atomically (rename), so a crash leaves the previous
 * checkpoint intact. */
static ps_status checkpoint(trainer *t) {
  if (t->rank != 0) return PS_OK;
  char dir[4096], tmp[4200], latest[4200];
  char abs_base[4096];
  if (!realpath(t->cfg->checkpoint_dir, abs_base)) return PS_ERR_IO;
  TRY(pathf(dir, sizeof dir, "%s/step-%" PRIu64, abs_base, t->step));
  TRY(ps_mkdir_p(dir));
  char shards[4200];
  TRY(pathf(shards, sizeof shards, "%s/shards", dir));
  uint64_t t0 = ps_now_ns();
  ps_status st = ps_client_checkpoint(t->cl, t->step, shards);
  if (st != PS_OK) return client_fail(t, "checkpoint", st);
  TRY(save_dense(t, dir));
  TRY(pathf(tmp, sizeof tmp, "%s/latest.tmp", abs_base));
  TRY(pathf(latest, sizeof latest, "%s/latest", abs_base));
  FILE *f = fopen(tmp, "w");
  if (!f) return PS_ERR_IO;
  fprintf(f, "step-%" PRIu64 "\n", t->step);
  if (fclose(f) != 0 || rename(tmp, latest) != 0) return PS_ERR_IO;
  PS_INFO("checkpoint at step %" PRIu64 " in %s (%.2f s)", t->step, dir, since(t0));
  return PS_OK;
}

/* --resume: every rank loads the dense state of `latest`; rank 0 rolls every shard back to
 * the same checkpoint first, and the others wait for that at a barrier. */
static ps_status resume(trainer *t, uint64_t *step) {
  char abs_base[4096], latest[4200], name[256] = "", dir[4600], shards[4700];
  if (!realpath(t->cfg->checkpoint_dir, abs_base)) {
    PS_ERROR("--resume: no checkpoint directory %s", t->cfg->checkpoint_dir);
    return PS_ERR_NOT_FOUND;
  }
  TRY(pathf(latest, sizeof latest, "%s/latest", abs_base));
  FILE *f = fopen(latest, "r");
  if (!f || !fgets(name, sizeof name, f)) {
    if (f) fclose(f);
    PS_ERROR("--resume: %s has no checkpoint (no %s)", abs_base, latest);
    return PS_ERR_NOT_FOUND;
  }
  fclose(f);
  name[strcspn(name, "\r\n")] = '\0';
  TRY(pathf(dir, sizeof dir, "%s/%s", abs_base, name));
  TRY(pathf(shards, sizeof shards, "%s/shards", dir));
  TRY(load_dense(t, dir, step));
  if (t->rank == 0) {
    uint64_t sstep = 0;
    ps_status st = ps_client_restore(t->cl, shards, &sstep);
    if (st != PS_OK) return client_fail(t, "restoring the shards", st);
    if (sstep != *step) {
      PS_ERROR("checkpoint %s: shards are at step %" PRIu64 ", dense state at %" PRIu64, dir,
               sstep, *step);
      return PS_ERR_CORRUPT;
    }
  }
  if (t->world > 1) {
    ps_status st = ps_client_barrier(t->cl, "ember/train/restored", (uint32_t)t->world,
                                     600000u);
    if (st != PS_OK) return client_fail(t, "restore barrier", st);
  }
  PS_INFO("resumed from %s at step %" PRIu64, dir, *step);
  return PS_OK;
}

/* ------------------------------------------------------------------ replicas */

/* Gathers every rank's hash of its dense parameters (each in its own slot, zeros elsewhere,
 * so the sum is an exact concatenation) and checks they are all equal. */
static ps_status check_replicas(trainer *t, uint64_t *hash_out) {
  TRY(ps_dlrm_get_params(t->model, t->host_grads, t->nparams));
  uint64_t h = ps_hash64(t->host_grads, t->nparams * sizeof(float), 0);
  *hash_out = h;
  if (t->world == 1) return PS_OK;
  size_t w = (size_t)t->world;
  uint64_t *all = calloc(w, sizeof *all);
  if (!all) return PS_ERR_NOMEM;
  all[t->rank] = h;
  ps_status st = allreduce_u64(t, all, w);
  for (size_t r = 0; st == PS_OK && r < w; r++)
    if (all[r] != h) {
      PS_ERROR("dense replicas differ: rank %zu has hash %016" PRIx64 ", rank %d %016" PRIx64, r,
               all[r], t->rank, h);
      st = PS_ERR_INTERNAL;
    }
  free(all);
  return st;
}

/* ------------------------------------------------------------------ metrics */

static const char *const k_phases[6] = {"data", "pull", "compute", "allreduce", "push", "optimizer"};

static ps_status metrics_start(trainer *t) {
  if (!t->cfg->metrics_port) return PS_OK;
  TRY(ps_metrics_create(&t->reg));
  const char *rank_l[] = {"rank"}, *phase_l[] = {"rank", "phase"};
  char rank[16];
  snprintf(rank, sizeof rank, "%d", t->rank);
  const char *rv[] = {rank};
  ps_metric *f;
  TRY(ps_metrics_counter(t->reg, "ember_worker_samples_total", "training samples processed",
                         rank_l, 1, &f));
  TRY(ps_metric_series(f, rv, &t->m_samples));
  TRY(ps_metrics_gauge(t->reg, "ember_worker_loss", "mean training loss of the last step",
                       rank_l, 1, &f));
  TRY(ps_metric_series(f, rv, &t->m_loss));
  TRY(ps_metrics_gauge(t->reg, "ember_worker_step", "training steps done", rank_l, 1, &f));
  TRY(ps_metric_series(f, rv, &t->m_step));
  TRY(ps_metrics_counter(t->reg, "ember_worker_phase_seconds_total",
                         "wall time per phase of the training step", phase_l, 2, &f));
  for (int i = 0; i < 6; i++) {
    const char *pv[] = {rank, k_phases[i]};
    TRY(ps_metric_series(f, pv, &t->m_phase[i]));
  }
  TRY(ps_metrics_add_process(t->reg));
  ps_status st = ps_http_create(NULL, t->cfg->metrics_port, t->reg, NULL, NULL, &t->http);
  if (st != PS_OK) {
    PS_ERROR("--metrics-port %d: cannot serve /metrics (%s)", t->cfg->metrics_port, ps_status_str(st));
    return st;
  }
  PS_INFO("metrics on http://0.0.0.0:%d/metrics", ps_http_port(t->http));
  return PS_OK;
}

static void metrics_update(trainer *t, size_t n, double loss) {
  if (!t->reg) return;
  ps_counter_add(t->m_samples, n);
  if (n) ps_gauge_set(t->m_loss, loss);
  ps_gauge_set(t->m_step, (double)t->step);
  const double now[6] = {t->t_data, t->t_pull, t->t_compute, t->t_allreduce, t->t_push, t->t_opt};
  for (int i = 0; i < 6; i++) {
    ps_counter_add_f(t->m_phase[i], now[i] - t->phase_last[i]);
    t->phase_last[i] = now[i];
  }
}

/* ------------------------------------------------------------------ the loop */

static ps_status next_batch(trainer *t, ps_reader *r, ps_batch **b) {
  uint64_t t0 = ps_now_ns();
  ps_status st = ps_reader_next(r, b);
  t->t_data += since(t0);
  if (st == PS_ERR_PARSE) PS_ERROR("%s", ps_reader_error(r));
  return st;
}

static void progress(trainer *t, uint64_t t_start, uint64_t total_steps, int epoch) {
  double el = since(t_start);
  double sps = el > 0 ? (double)t->samples * t->world / el : 0;
  double loss = t->loss_n ? t->loss_sum / (double)t->loss_n : NAN;
  char eta[32] = "?";
  if (total_steps && t->step > 0 && t->step <= total_steps) {
    double per = el / (double)t->step_this_run;
    snprintf(eta, sizeof eta, "%.0fs", per * (double)(total_steps - t->step));
  }
  PS_INFO("step %" PRIu64 "%s%" PRIu64 " epoch %d  %.0f samples/s  loss %.5f  ETA %s", t->step,
          total_steps ? "/" : "", total_steps, epoch + 1, sps, loss, eta);
  t->loss_sum = 0;
  t->loss_n = 0;
}

static ps_status train_loop(trainer *t, ps_reader *r, uint64_t skip, uint64_t total_steps,
                            const char *eval_path, uint64_t eval_begin, uint64_t eval_end,
                            int *epoch_out) {
  const ps_train_config *c = t->cfg;
  ps_status st = PS_OK;
  /* A resumed run re-reads and drops the batches its checkpoint already trained on. */
  for (uint64_t i = 0; i < skip; i++) {
    ps_batch *b = NULL;
    TRY(next_batch(t, r, &b));
    if (!b) {
      PS_ERROR("--resume: the data has fewer than %" PRIu64 " batches", skip);
      return PS_ERR_INVALID;
    }
    ps_reader_release(r, b);
  }
  uint64_t t_start = ps_now_ns(), t_last = t_start;
  ps_batch *b = NULL;
  TRY(next_batch(t, r, &b));
  int cur = 0;
  if (b) TRY(slot_start(t, &t->slots[cur], b, t->step));
  int epoch = 0;
  while (b) {
    if (c->max_steps && t->step_this_run >= (uint64_t)c->max_steps) break;
    slot *s = &t->slots[cur], *nx = &t->slots[cur ^ 1];
    epoch = b->epoch;
    TRY(slot_wait(t, s));
    ps_client_req *push = NULL, *stepreq = NULL;
    TRY(train_step(t, s, &push, &stepreq));

    /* next batch's pull goes out now and overlaps the dense optimizer step */
    ps_batch *nb = NULL;
    st = next_batch(t, r, &nb);
    if (st != PS_OK) return st;
    bool last = c->max_steps && t->step_this_run + 1 >= (uint64_t)c->max_steps;
    bool ckpt = c->checkpoint_dir && c->checkpoint_every &&
                (t->step + 1) % (uint64_t)c->checkpoint_every == 0;
    bool eval = eval_path && c->eval_every && (t->step + 1) % (uint64_t)c->eval_every == 0;
    if (nb && !last && !ckpt && !eval) TRY(slot_start(t, nx, nb, t->step + 1));
    else nx->b = nb, nx->pull = NULL, nx->nunique = 0;

    uint64_t t0 = ps_now_ns();
    TRY(ps_dlrm_step(t->model, &t->dopt));
    TRY(ps_kern_sync(t->kern));
    t->t_opt += since(t0);
    t0 = ps_now_ns();
    if (push) {
      st = ps_client_wait(t->cl, &push);
      if (st != PS_OK) return client_fail(t, "push", st);
    }
    st = ps_client_wait(t->cl, &stepreq);
    if (st != PS_OK) return client_fail(t, "step", st);
    t->t_push += since(t0);
    size_t done_n = s->b ? s->b->n : 0;
    ps_reader_release(r, s->b);
    s->b = NULL;
    t->step++;
    t->step_this_run++;
    metrics_update(t, done_n, t->last_loss);

    if (ckpt) TRY(checkpoint(t));
    if (eval) {
      ps_eval_result er;
      TRY(evaluate(t, eval_path, eval_begin, eval_end, &er));
      if (t->rank == 0)
        PS_INFO("eval at step %" PRIu64 ": auc %.5f logloss %.5f accuracy %.4f (%" PRIu64
                " samples)", t->step, er.auc, er.logloss, er.accuracy, er.n);
    }
    if (nb && !nx->pull && !(c->max_steps && t->step_this_run >= (uint64_t)c->max_steps))
      TRY(slot_start(t, nx, nb, t->step));
    if (t->rank == 0 && since(t_last) >= c->progress_every) {
      progress(t, t_start, total_steps, epoch);
      t_last = ps_now_ns();
    }
    b = nb;
    cur ^= 1;
  }
  /* stopped by --max-steps: a pull may be in flight for a batch we will not train on */
  for (int i = 0; i < 2; i++) {
    slot *s = &t->slots[i];
    if (s->pull) (void)ps_client_wait(t->cl, &s->pull);
    if (s->b) ps_reader_release(r, s->b);
    s->b = NULL;
  }
  *epoch_out = epoch;
  return PS_OK;
}

static ps_status write_summary(trainer *t, const ps_eval_result *er, bool have_eval,
                               uint64_t samples, uint64_t bad, double secs, uint64_t hash) {
  const ps_train_config *c = t->cfg;
  json_t *j = json_object();
  json_object_set_new(j, "auc", have_eval && !isnan(er->auc) ? json_real(er->auc) : json_null());
  json_object_set_new(j, "logloss", have_eval ? json_real(er->logloss) : json_null());
  json_object_set_new(j, "accuracy", have_eval ? json_real(er->accuracy) : json_null());
  json_object_set_new(j, "eval_samples", json_integer(have_eval ? (json_int_t)er->n : 0));
  json_object_set_new(j, "samples", json_integer((json_int_t)samples));
  json_object_set_new(j, "samples_per_s", json_real(secs > 0 ? (double)samples / secs : 0));
  json_object_set_new(j, "bad_lines", json_integer((json_int_t)bad));
  json_object_set_new(j, "steps", json_integer((json_int_t)t->step));
  json_object_set_new(j, "train_seconds", json_real(secs));
  json_object_set_new(j, "world", json_integer(t->world));
  json_object_set_new(j, "servers", json_integer((json_int_t)ps_client_servers(t->cl)));
  json_object_set_new(j, "consistency", json_string(c->consistency));
  json_object_set_new(j, "device", json_string(c->device));
  json_object_set_new(j, "batch", json_integer(c->batch));
  char hx[17];
  snprintf(hx, sizeof hx, "%016" PRIx64, hash);
  json_object_set_new(j, "dense_hash", json_string(hx));
  json_t *tm = json_object();
  json_object_set_new(tm, "data", json_real(t->t_data));
  json_object_set_new(tm, "pull", json_real(t->t_pull));
  json_object_set_new(tm, "compute", json_real(t->t_compute));
  json_object_set_new(tm, "allreduce", json_real(t->t_allreduce));
  json_object_set_new(tm, "push", json_real(t->t_push));
  json_object_set_new(tm, "optimizer", json_real(t->t_opt));
  json_object_set_new(tm, "eval", json_real(t->t_eval));
  json_object_set_new(j, "seconds_rank0", tm);
  int rc = json_dump_file(j, c->summary, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  json_decref(j);
  if (rc != 0) {
    PS_ERROR("cannot write the summary %s", c->summary);
    return PS_ERR_IO;
  }
  return PS_OK;
}

static ps_status run(trainer *t) {
  const ps_train_config *c = t->cfg;
  ps_status st;
  ps_client_options co;
  ps_client_options_default(&co);
  co.timeout_ms = c->timeout_ms;
  TRY(ps_client_create_list(c->servers, &co, &t->cl));
  TRY(ps_dedup_create(&t->dedup));

  /* rank: given, or assigned by the coordinator */
  int rank = c->rank;
  char host[256] = "", name[300];
  gethostname(host, sizeof host - 1);
  snprintf(name, sizeof name, "%s/%d", host, (int)getpid());
  if (c->world > 1 || rank < 0) {
    st = ps_client_join(t->cl, (uint32_t)c->world, rank, rank < 0 ? name : NULL, &rank);
    if (st != PS_OK) return client_fail(t, "joining the cluster", st);
  }
  t->rank = rank < 0 ? 0 : rank;
  t->world = c->world;
  ps_client_set_rank(t->cl, (uint32_t)t->rank);
  char tag[32];
  snprintf(tag, sizeof tag, "worker/%d", t->rank);
  ps_log_set_tag(tag);

  st = ps_kern_create(c->device, c->threads, &t->kern);
  if (st != PS_OK) {
    PS_ERROR("device '%s': %s", c->device, st == PS_ERR_UNSUPPORTED
             ? "not available (CUDA not built, or no GPU)" : ps_status_str(st));
    return st;
  }
  ps_dlrm_config mc;
  ps_dlrm_config_default(&mc);
  mc.mlp_bot = c->mlp_bot;
  mc.mlp_top = c->mlp_top;
  mc.emb_dim = c->emb_dim;
  mc.max_batch = c->batch;
  mc.seed = (uint64_t)c->seed;
  st = ps_dlrm_create(t->kern, &mc, &t->model);
  if (st != PS_OK) {
    PS_ERROR("model --mlp-bot %s --mlp-top %s --emb-dim %d: %s", c->mlp_bot, c->mlp_top,
             c->emb_dim, ps_status_str(st));
    return st;
  }
  t->nparams = ps_dlrm_num_params(t->model);
  t->dim = c->emb_dim;
  t->batch = c->batch;
  t->nkeys_max = c->batch * PS_CRITEO_NCAT;
  ps_dlrm_opt_kind dk;
  TRY(ps_dlrm_opt_parse(c->dense_opt, &dk));
  t->dopt = ps_dlrm_opt_default(dk, (float)c->lr);
  TRY(alloc_slots(t));
  TRY(declare_table(t));
  TRY(setup_collectives(t));
  TRY(metrics_start(t));

  /* train / eval split */
  uint64_t train_end = 0, eval_begin = 0, eval_end = 0;
  const char *eval_path = c->test;
  if (!c->test && c->holdout > 0) {
    uint64_t lines = 0;
    st = ps_data_count_lines(c->train, &lines);
    if (st != PS_OK) {
      PS_ERROR("cannot count the lines of %s", c->train);
      return st;
    }
    if ((uint64_t)c->holdout >= lines) {
      PS_ERROR("--holdout %" PRId64 " leaves no training lines (%s has %" PRIu64 ")",
               c->holdout, c->train, lines);
      return PS_ERR_INVALID;
    }
    train_end = lines - (uint64_t)c->holdout;
    eval_path = c->train;
    eval_begin = train_end;
    eval_end = lines;
  }
  uint64_t skip = 0;
  if (c->resume) {
    TRY(resume(t, &skip));
    t->step = skip;
  }

  ps_reader *r = NULL;
  TRY(open_reader(t, c->train, c->epochs, 0, train_end, &r));
  uint64_t total_steps = 0;
  if (t->rank == 0) {
    int64_t lpe = ps_reader_lines_per_epoch(r);
    uint64_t lines = 0;
    if (lpe < 0 && ps_data_count_lines(c->train, &lines) == PS_OK)
      lpe = (int64_t)(train_end ? train_end : lines);
    uint64_t round = (uint64_t)c->batch * (uint64_t)t->world;
    if (lpe > 0) total_steps = ((uint64_t)lpe + round - 1) / round * (uint64_t)c->epochs;
    if (c->max_steps && (total_steps == 0 || (uint64_t)c->max_steps + skip < total_steps))
      total_steps = (uint64_t)c->max_steps + skip;
    PS_INFO("training on %s (%s), %d worker(s) x batch %d, %s, device %s, %zu dense params",
            c->train, ps_reader_format(r) == PS_INPUT_BIN ? "binary" : "TSV", t->world,
            c->batch, c->consistency, c->device, t->nparams);
  }
  uint64_t t0 = ps_now_ns();
  int epoch = 0;
  st = train_loop(t, r, skip, total_steps, eval_path, eval_begin, eval_end, &epoch);
  double secs = since(t0);
  t->bad_lines += ps_reader_bad_lines(r);
  ps_reader_destroy(&r);
  if (st != PS_OK) return st;
  if (c->checkpoint_dir && !c->checkpoint_every) TRY(checkpoint(t));

  ps_eval_result er;
  memset(&er, 0, sizeof er);
  bool have_eval = eval_path != NULL;
  if (have_eval) TRY(evaluate(t, eval_path, eval_begin, eval_end, &er));
  uint64_t hash = 0;
  TRY(check_replicas(t, &hash));
  uint64_t counts[2] = {t->samples, t->bad_lines};
  TRY(allreduce_u64(t, counts, 2));
  if (t->rank == 0) {
    double sps = secs > 0 ? (double)counts[0] / secs : 0;
    if (have_eval)
      PS_INFO("done: %" PRIu64 " steps, %" PRIu64 " samples in %.1f s (%.0f samples/s); test auc "
              "%.5f logloss %.5f accuracy %.4f on %" PRIu64 " samples; %" PRIu64 " bad lines",
              t->step, counts[0], secs, sps, er.auc, er.logloss, er.accuracy, er.n, counts[1]);
    else
      PS_INFO("done: %" PRIu64 " steps, %" PRIu64 " samples in %.1f s (%.0f samples/s); %" PRIu64
              " bad lines (no --test or --holdout: no evaluation)", t->step, counts[0], secs, sps,
              counts[1]);
    PS_INFO("time (rank 0): data %.1fs pull %.1fs compute %.1fs allreduce %.1fs push %.1fs "
            "optimizer %.1fs eval %.1fs", t->t_data, t->t_pull, t->t_compute, t->t_allreduce,
            t->t_push, t->t_opt, t->t_eval);
    if (c->summary) TRY(write_summary(t, &er, have_eval, counts[0], counts[1], secs, hash));
  }
  (void)epoch;
  return PS_OK;
}

ps_status ps_train_run(const ps_train_config *c) {
  trainer t;
  memset(&t, 0, sizeof t);
  t.cfg = c;
  ps_status st = run(&t);
  free_trainer(&t);
  return st;
}
