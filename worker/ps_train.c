/* ps_train: the ps-worker training loop (see ps_train.h for the sync-equivalence scaling).
 *
 * One step t, on every rank:
 *   batch (reader thread) → dedup keys → PULL(t) unique rows → forward/backward
 *   → dense grads × n_r, with n_r in one extra slot, allreduce (Gloo / NCCL) → ÷ N
 *   → sparse grads × n_r/N → PUSH(t) + STEP(t), pipelined
 *   → next batch: dedup + PULL(t+1) sent → dense optimizer step (overlaps the pull, which
 *     in sync mode the server answers once every worker's step t is applied)
 *   → wait for PUSH/STEP(t) replies.
 * Everything the steps need is allocated once, for the largest batch. With --prefetch N the
 * batches come from a FIFO read N ahead, and a batch entering it has its keys sent at once as a
 * prefetch (a warm PULL: the servers load its cold rows into their hot tier, no rows back), so
 * its real pull N steps later hits; caching only, so nothing trained changes.
 *
 * Replicas: every rank starts from the same seeded parameters and applies the same
 * allreduced gradients with the same optimizer, so the dense buffers stay bit-identical; a
 * hash of each rank's buffer is compared at the end (ps_train_dist.c) and a mismatch fails the
 * run. Evaluation, distribution, checkpoints and reporting live in ps_train_eval.c,
 * ps_train_dist.c, ps_train_ckpt.c and ps_train_report.c, over ps_train_int.h. */
#include "ps_train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY

/* The model's shape defaults are DLRM's own (the Kaggle shape, ps_dlrm_config_default): one
 * place says what they are. */
void ps_train_config_default(ps_train_config *c) {
  ps_dlrm_config m;
  ps_dlrm_config_default(&m);
  *c = (ps_train_config){
      .holdout = 0, .rank = -1, .world = 1, .device = "cpu", .threads = 0,
      .consistency = "sync",
      .epochs = 1, .batch = 256, .bad_lines = "skip",
      .max_bad_fraction = 0.01,
      .lr = 0.001, .dense_opt = "adam",
      .sparse_lr = 0.1, .sparse_opt = "adagrad",
      .emb_init = 0.01, .emb_dim = m.emb_dim, .mlp_bot = m.mlp_bot, .mlp_top = m.mlp_top,
      .progress_every = 5.0, .seed = 1, .timeout_ms = 120000, .schema = "criteo",
      .shuffle_buffer = 32768};
  c->interaction = "dot";
  /* The output bias at 0: DLRM's N(0, 1) draw of it is a seed's luck worth ~0.004 AUC per
   * unit (bench/RESULTS-e2e.md, "--out-bias-init"); at 0 the seed-to-seed spread fell on every
   * planted data set and the real Criteo folds did not move (-0.0007 +- 0.0010). */
  c->out_bias_init = "zero";
  c->checkpoint_full_every = 8;
  c->failover_ms = 1000;
  c->dcn_layers = m.dcn_layers;
  c->dcn_rank = m.dcn_rank;
  c->wire = "f32";
  c->row_type = "f32";
  c->prefetch = 2;
  c->lookahead = "on";
  c->row_cache_mb = 0;
  c->progressive_window = 100000;
}

ps_status ps_train_client_fail(ps_trainer *t, const char *what, ps_status st) {
  PS_ERROR("%s failed: %s (%s)", what, ps_status_str(st), t->cerr.msg);
  return st;
}

/* ------------------------------------------------------------------ set-up */

static ps_status declare_table(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  ps_table_spec tb;
  char name[PS_TABLE_NAME_MAX];
  ps_train_table_name(c, p, name, sizeof name);
  ps_table_spec_default(&tb, PS_TRAIN_TABLE_ID, name, (uint32_t)c->emb_dim);
  tb.optimizer = p->sparse_opt;
  tb.lr = (float)c->sparse_lr;
  bool adagrad = tb.optimizer == PS_OPT_ADAGRAD || tb.optimizer == PS_OPT_ROWWISE_ADAGRAD;
  tb.eps = adagrad ? 1e-10f : 1e-8f;
  tb.l1 = 0;
  tb.l2 = 0;
  tb.init = 0;
  tb.init_a = (float)-c->emb_init;
  tb.init_b = (float)c->emb_init;
  tb.seed = (uint64_t)c->seed;
  tb.admit_threshold = (uint32_t)c->admit_threshold;
  tb.ttl_steps = (uint64_t)c->ttl_steps;
  tb.consistency = p->consistency;
  tb.staleness = p->staleness;
  tb.num_workers = (uint32_t)t->world;
  tb.row_type = p->row_type;
  t->spec = tb; /* the deep lookahead applies its optimizer (ps_train_deep.c) */
  ps_status st = ps_client_declare(t->cl, &tb, &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "declaring the embedding table", st);
  return PS_OK;
}

/* Room for batches of nk keys: the slots' key and row buffers, the gradient rows and the bag
 * indices. Sized for one-hot batches at start; a multi-hot batch with more keys grows them
 * (never shrinks), so a steady state allocates nothing. A slot's rows may be a pull's target:
 * a slot only grows in ps_train_slot_start, before its own pull is sent. */
ps_status ps_train_grow_keys(ps_trainer *t, ps_train_slot *s, size_t nk) {
  size_t d = (size_t)t->dim;
  if (nk > s->cap) {
    size_t cap = s->cap ? s->cap : 64;
    while (cap < nk) cap *= 2;
    uint64_t *u = realloc(s->unique, cap * sizeof *u);
    if (u) s->unique = u;
    uint32_t *inv = realloc(s->inverse, cap * sizeof *inv);
    if (inv) s->inverse = inv;
    /* Pulled rows land in the backend's host memory (page-locked on CUDA), uploaded from
     * there with no staging copy (ps_dlrm_batch.rows_pinned). Not kept: no pull is in flight. */
    ps_kern_host_free(t->kern, s->rows);
    s->rows = NULL;
    if (!u || !inv) return PS_ERR_NOMEM;
    TRY(ps_kern_host_alloc(t->kern, cap * d * sizeof(float), (void **)&s->rows));
    s->cap = cap;
  }
  if (s->cap > (size_t)t->nkeys_max) {
    /* The row gradients are downloaded every step: the backend's host memory (page-locked on
     * CUDA) takes them without a staging copy. Overwritten each step: nothing to keep. */
    ps_kern_host_free(t->kern, t->emb_grad);
    t->emb_grad = NULL;
    TRY(ps_kern_host_alloc(t->kern, s->cap * d * sizeof(float), (void **)&t->emb_grad));
    int32_t *idx = realloc(t->idx, s->cap * sizeof *idx);
    if (idx) t->idx = idx;
    if (!idx) return PS_ERR_NOMEM;
    t->nkeys_max = (int)s->cap;
  }
  return PS_OK;
}

static ps_status alloc_slots(ps_trainer *t) {
  size_t nk = (size_t)t->nkeys_max;
  t->nkeys_max = 0;
  for (int i = 0; i < 2; i++) TRY(ps_train_grow_keys(t, &t->slots[i], nk));
  t->offsets = malloc(((size_t)t->batch * (size_t)t->nbags + 1) * sizeof *t->offsets);
  t->probs = malloc((size_t)t->batch * sizeof *t->probs);
  t->zero_dense = calloc((size_t)t->batch, sizeof *t->zero_dense);
  t->host_grads = malloc((t->nparams + 2) * sizeof *t->host_grads);
  if (!t->offsets || !t->probs || !t->zero_dense || !t->host_grads) return PS_ERR_NOMEM;
  if (!t->kern->host_memory)
    TRY(ps_kern_alloc(t->kern, (t->nparams + 2) * sizeof(float), (void **)&t->red_d));
  return PS_OK;
}

static void free_trainer(ps_trainer *t) {
  for (int i = 0; i < PS_TRAIN_NSLOTS; i++) {
    free(t->slots[i].unique);
    free(t->slots[i].inverse);
    ps_kern_host_free(t->kern, t->slots[i].rows);
  }
  ps_train_cache_free(t);
  ps_train_deep_free(t);
  ps_kern_host_free(t->kern, t->emb_grad);
  free(t->idx);
  free(t->offsets);
  free(t->probs);
  free(t->zero_dense);
  free(t->host_grads);
  if (t->red_d) ps_kern_free(t->kern, t->red_d);
  ps_train_stream_free(t);
  ps_http_destroy(&t->http);
  ps_metrics_destroy(&t->reg);
  ps_coll_destroy(&t->coll);
  ps_dlrm_destroy(&t->model);
  ps_kern_destroy(&t->kern);
  ps_dedup_destroy(&t->dedup);
  ps_client_destroy(&t->cl);
}

/* ------------------------------------------------------------------ one batch */

/* Dedups the batch's keys and sends the pull of its unique rows for `step` (look: a sync
 * lookahead -- the pull of `step`, the step this worker is on and has not sent STEP for: a sync
 * shard answers at once, with every step below it applied and this one not, so the pull
 * overlaps this step's compute; slot_refresh brings it up to date). */
static ps_status slot_begin(ps_trainer *t, ps_train_slot *s, ps_batch *b, uint64_t step,
                            bool look) {
  s->b = b;
  s->step = step;
  s->nunique = s->npulled = 0;
  s->pull = NULL;
  s->ahead = look;
  s->oldest = UINT64_MAX;
  if (!b || b->nkeys == 0) return PS_OK;
  TRY(ps_train_grow_keys(t, s, b->nkeys));
  TRY(ps_dedup_keys(t->dedup, b->keys, b->nkeys, s->unique, s->inverse, &s->nunique));
  return ps_train_pull_start(t, s, step, look);
}

ps_status ps_train_slot_start(ps_trainer *t, ps_train_slot *s, ps_batch *b, uint64_t step) {
  return slot_begin(t, s, b, step, false);
}

ps_status ps_train_slot_wait(ps_trainer *t, ps_train_slot *s) {
  if (!s->pull && !s->look) return PS_OK;
  uint64_t t0 = ps_now_ns();
  /* The lookahead's rows first (the row cache's misses landed among its hits), then the
   * refresh's over them: a client writes a reply's rows when it is waited for, so the order
   * of the waits is the order of the writes. */
  ps_status st = s->look ? ps_client_wait(t->cl, &s->look, &t->cerr) : PS_OK;
  if (st == PS_OK) ps_train_cache_landed(t, s);
  if (st == PS_OK && s->pull) st = ps_client_wait(t->cl, &s->pull, &t->cerr);
  t->t_pull += ps_train_since(t0);
  t->rows_refreshed = ps_client_refreshed(t->cl);
  if (st != PS_OK) return ps_train_client_fail(t, "pull", st);
  ps_train_cache_keep(t, s);
  return PS_OK;
}

/* After STEP(step) went out: the rows `step` changes of the lookahead's (any worker's pushes)
 * are asked for as a REFRESH of step + 1, at once -- the shard holds it until step is applied,
 * and the lookahead's own reply need not be in -- and waited for as its pull would be. The
 * rows are then exactly that pull's (docs/DESIGN.md, "Lookahead pulls"). Rows the row cache
 * gave are as of their (older) versions: the refresh reaches back to the oldest of them. */
static ps_status slot_refresh(ps_trainer *t, ps_train_slot *s) {
  if (!s->ahead || !s->nunique) return PS_OK;
  uint64_t since = s->oldest < s->step ? s->oldest : s->step;
  ps_status st = ps_client_refresh_start(t->cl, PS_TRAIN_TABLE_ID, s->step + 1, since,
                                         s->unique, s->nunique, s->rows, &s->pull, &t->cerr);
  s->step++;
  s->ahead = false;
  s->refresh = true;
  if (st != PS_OK) return ps_train_client_fail(t, "refresh", st);
  return PS_OK;
}

void ps_train_fill_batch(ps_trainer *t, const ps_train_slot *s, ps_dlrm_batch *mb) {
  const ps_batch *b = s->b;
  size_t nk = b->nkeys;
  for (size_t i = 0; i < nk; i++) t->idx[i] = (int32_t)s->inverse[i];
  for (size_t i = 0; i <= b->n * (size_t)t->nbags; i++) t->offsets[i] = (int32_t)b->key_offsets[i];
  memset(mb, 0, sizeof *mb);
  mb->batch = (int)b->n;
  mb->dense = t->ndense ? b->dense : t->zero_dense; /* no dense column: one constant 0 input */
  mb->labels = b->labels;
  mb->nrows = (int)s->nunique;
  mb->rows = s->rows;
  mb->nnz = (int)nk;
  mb->idx = t->idx;
  mb->offsets = t->offsets;
  mb->rows_pinned = true; /* grow_keys; refilled only by the pull of a later step */
}

/* forward/backward of the slot's batch, allreduce, push + step. On return the push/step
 * requests are in flight in *push / *stepreq. */
ps_status ps_train_step(ps_trainer *t, ps_train_slot *s, ps_client_req **push,
                        ps_client_req **stepreq) {
  ps_batch *b = s->b;
  size_t n = b ? b->n : 0;
  float *g = ps_dlrm_grads(t->model);
  size_t np = t->nparams;
  uint64_t t0 = ps_now_ns();
  if (n > 0) {
    ps_dlrm_batch mb;
    ps_train_fill_batch(t, s, &mb);
    float loss = 0;
    TRY(ps_dlrm_forward(t->model, &mb, &loss));
    TRY(ps_train_stream_score(t, b)); /* progressive validation: scored before its update */
    TRY(ps_dlrm_backward(t->model, t->emb_grad));
    t->loss_sum += (double)loss * (double)n;
    t->last_loss = loss;
    t->loss_n += n;
  }
  /* Dense grads × n_r (the sum-of-losses gradient) with n_r in one extra slot (and in a
   * second the ranks' checkpoint and stop votes, ps_train_stream.c), summed over
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
    red[np + 1] = ps_train_stream_vote(t);
    t->t_compute += ps_train_since(t0);
    t0 = ps_now_ns();
    ps_status ar = ps_train_allreduce(t, red, np + 2);
    if (ar != PS_OK) return ps_train_coll_fail(t, "allreduce of the dense gradients", ar);
    t->t_allreduce += ps_train_since(t0);
    t0 = ps_now_ns();
    total = red[np];
    ps_train_stream_agree(t, red[np + 1]);
    float inv = total > 0 ? (float)(1.0 / total) : 0.0f;
    for (size_t i = 0; i < np; i++) g[i] = red[i] * inv;
  } else {
    float nf[2] = {(float)n, ps_train_stream_vote(t)};
    if (n > 0) TRY(ps_kern_copy(t->kern, t->red_d, g, np * sizeof(float)));
    else TRY(ps_kern_memset0(t->kern, t->red_d, np * sizeof(float)));
    TRY(ps_kern_scale(t->kern, np, nf[0], t->red_d));
    TRY(ps_kern_to_device(t->kern, t->red_d + np, nf, sizeof nf));
    t->t_compute += ps_train_since(t0);
    t0 = ps_now_ns();
    ps_status ar = ps_train_allreduce(t, t->red_d, np + 2);
    if (ar != PS_OK) return ps_train_coll_fail(t, "allreduce of the dense gradients", ar);
    float tot[2] = {0, 0}; /* reading N waits for the allreduce (and the backward before it) */
    TRY(ps_kern_to_host(t->kern, tot, t->red_d + np, sizeof tot));
    ps_train_stream_agree(t, tot[1]);
    t->t_allreduce += ps_train_since(t0);
    t0 = ps_now_ns();
    total = tot[0];
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
    st = ps_client_push_start(t->cl, PS_TRAIN_TABLE_ID, s->step, s->unique, s->nunique, true,
                              t->emb_grad, push, &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "push", st);
  }
  st = ps_client_step_start(t->cl, 0, s->step, stepreq, &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "step", st);
  t->t_push += ps_train_since(t0);
  t->samples += n;
  t->rows_pulled += s->npulled;
  return PS_OK;
}

/* ------------------------------------------------------------------ the loop */

static ps_status next_batch(ps_trainer *t, ps_reader *r, ps_batch **b) {
  uint64_t t0 = ps_now_ns();
  ps_error err;
  ps_status st = ps_reader_next(r, b, &err);
  t->t_data += ps_train_since(t0);
  if (st != PS_OK) ps_train_reader_fail(&err);
  return st;
}

/* --prefetch N: the next batch to pull, from a FIFO kept N batches ahead of it. A batch that
 * enters the FIFO behind another has its keys sent as a prefetch at once, so the servers load
 * its cold rows into their hot tier during the N steps before its pull. Values do not change
 * (the servers only cache), so what is trained is the same with or without it. */
ps_status ps_train_next_ahead(ps_trainer *t, ps_reader *r, ps_batch **b) {
  ps_train_ahead *a = &t->ahead;
  const int cap = PS_TRAIN_MAX_PREFETCH + 1;
  while (!a->end && a->n <= t->plan->prefetch) {
    ps_batch *x = NULL;
    TRY(next_batch(t, r, &x));
    if (!x) {
      a->end = true;
      break;
    }
    a->q[(a->head + a->n++) % cap] = x;
    if (a->n == 1 || x->nkeys == 0) continue;
    ps_client_req **q = &a->req[a->next];
    a->next = (a->next + 1) % cap;
    ps_status st = *q ? ps_client_wait(t->cl, q, &t->cerr) : PS_OK;
    if (st == PS_OK)
      st = ps_client_prefetch_start(t->cl, PS_TRAIN_TABLE_ID, t->step, x->keys, x->nkeys, false,
                                    q, &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "prefetch", st);
  }
  *b = NULL;
  if (!a->n) return PS_OK;
  *b = a->q[a->head];
  a->head = (a->head + 1) % cap;
  a->n--;
  return PS_OK;
}

/* The batches read ahead and not trained on (a run stopped by --max-steps or a failure) go
 * back to the reader; the prefetch acks are collected unless the run failed (a server that is
 * gone would hold each for the timeout; ps_client_destroy frees them). */
static void ahead_drop(ps_trainer *t, ps_reader *r, bool wait) {
  ps_train_ahead *a = &t->ahead;
  const int cap = PS_TRAIN_MAX_PREFETCH + 1;
  for (; a->n > 0; a->n--, a->head = (a->head + 1) % cap) ps_reader_release(r, a->q[a->head]);
  for (int i = 0; i < cap; i++)
    if (a->req[i] && wait) (void)ps_client_wait(t->cl, &a->req[i], &t->cerr);
}

/* Adds a step's push and STEP requests (either may be NULL) to the flight and collects the
 * oldest steps' replies until at most `keep` steps are left in it. In sync mode (window 0)
 * every step's are collected at its end, as they always were; in ssp and async a failed push
 * is then reported up to `window` steps late. Exactly-once holds either way: the client keeps
 * each push's sequence number until its reply is collected. */
ps_status ps_train_flight_add(ps_trainer *t, ps_client_req *push, ps_client_req *stepreq,
                             int keep) {
  ps_train_flight *f = &t->flight;
  const int cap = PS_TRAIN_ASYNC_WINDOW + 1;
  if (push || stepreq) {
    int i = (f->head + f->n++) % cap;
    f->push[i] = push;
    f->step[i] = stepreq;
  }
  while (f->n > keep) {
    ps_client_req **p = &f->push[f->head], **q = &f->step[f->head];
    f->head = (f->head + 1) % cap;
    f->n--;
    ps_status st = *p ? ps_client_wait(t->cl, p, &t->cerr) : PS_OK;
    if (st != PS_OK) {
      if (*q) (void)ps_client_wait(t->cl, q, NULL);
      return ps_train_client_fail(t, "push", st);
    }
    st = *q ? ps_client_wait(t->cl, q, &t->cerr) : PS_OK;
    if (st != PS_OK) return ps_train_client_fail(t, "step", st);
  }
  return PS_OK;
}

/* The end of a trained step, in both loops (this file's and ps_train_deep.c's): the slot's
 * batch released, the step counted, then the checkpoint and the evaluation due after it. */
ps_status ps_train_step_done(ps_trainer *t, ps_reader *r, ps_train_slot *s, bool ckpt, bool eval,
                             const ps_train_split *sp) {
  size_t done_n = s->b ? s->b->n : 0;
  ps_train_stream_step_done(t, s->b);
  ps_reader_release(r, s->b);
  s->b = NULL;
  t->step++;
  t->step_this_run++;
  ps_train_metrics_update(t, done_n, t->last_loss);
  if (ckpt) TRY(ps_train_checkpoint(t));
  if (eval) {
    ps_eval_result er;
    TRY(ps_train_evaluate(t, sp, &er));
    if (t->rank == 0)
      PS_INFO("eval at step %" PRIu64 ": auc %.5f logloss %.5f accuracy %.4f (%" PRIu64
              " samples)", t->step, er.auc, er.logloss, er.accuracy, er.n);
  }
  return PS_OK;
}

/* Steps through the reader (after dropping `skip` batches) until it ends or --max-steps;
 * checkpoints and evaluates every N steps on the way; rank 0 prints progress. */
static ps_status train_loop(ps_trainer *t, ps_reader *r, uint64_t skip, uint64_t total_steps,
                            const ps_train_split *sp) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
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
  if (t->deep) return ps_train_deep_loop(t, r, total_steps, sp);
  uint64_t t_start = ps_now_ns(), t_last = t_start;
  ps_batch *b = NULL;
  TRY(ps_train_next_ahead(t, r, &b));
  int cur = 0;
  if (b) TRY(ps_train_slot_start(t, &t->slots[cur], b, t->step));
  int epoch = 0;
  while (b) {
    if (c->max_steps && t->step_this_run >= (uint64_t)c->max_steps) break;
    ps_train_slot *s = &t->slots[cur], *nx = &t->slots[cur ^ 1];
    epoch = b->epoch;
    TRY(ps_train_slot_wait(t, s));
    bool last = c->max_steps && t->step_this_run + 1 >= (uint64_t)c->max_steps;
    bool ckpt = c->checkpoint_dir && c->checkpoint_every &&
                (t->step + 1) % (uint64_t)c->checkpoint_every == 0;
    bool eval = sp->eval_path && c->eval_every && (t->step + 1) % (uint64_t)c->eval_every == 0;
    /* The next batch's pull: with --lookahead on, out now in sync, as of this step, and
     * refreshed once this step's STEP is sent; with stale, in ssp:K (K >= 1) and async, out
     * now as the next step's pull, whose rows then lack only this worker's own last step
     * (within the bound); else sent after this step's STEP, overlapping the dense optimizer. */
    /* Not for a stream or a followed file: reading batch t+1 before step t's compute would
     * hold the step until more input arrives. */
    const bool live = p->train_stream || c->follow_input;
    const bool look = p->lookahead_on && p->consistency == PS_CONS_SYNC && !live;
    const bool early = p->lookahead_stale && t->flight.window > 0 && !live;
    ps_batch *nb = NULL;
    if (look || early) {
      TRY(ps_train_next_ahead(t, r, &nb));
      const bool go = nb && !last && !ckpt && !eval;
      if (go && look) TRY(slot_begin(t, nx, nb, t->step, true));
      else if (go) TRY(ps_train_slot_start(t, nx, nb, t->step + 1));
      else nx->b = nb, nx->pull = NULL, nx->nunique = 0;
    }
    ps_client_req *push = NULL, *stepreq = NULL;
    TRY(ps_train_step(t, s, &push, &stepreq));
    /* A checkpoint by time is agreed in train_step's allreduce (ps_train_stream.c). A lookahead
     * already sent stays valid: its refresh is answered once this step is applied, before the
     * checkpoint starts, and a checkpoint changes no row. */
    ckpt = ckpt || (c->checkpoint_dir && t->strm.ckpt_due);
    /* A stop agreed in the same allreduce (a signal): the batch read ahead is not trained; its
     * slot is released (and any pull of it collected) after the loop. */
    if ((look || early) && t->strm.stop_due) nb = NULL;
    if (look) {
      TRY(slot_refresh(t, nx));
    } else if (!early) {
      /* none after a stop the ranks agreed on (ps_train_stream.c) */
      if (!t->strm.stop_due) TRY(ps_train_next_ahead(t, r, &nb));
      if (nb && !last && !ckpt && !eval) TRY(ps_train_slot_start(t, nx, nb, t->step + 1));
      else nx->b = nb, nx->pull = NULL, nx->nunique = 0;
    }

    uint64_t t0 = ps_now_ns();
    TRY(ps_dlrm_step(t->model, &t->dopt));
    TRY(ps_kern_sync(t->kern));
    t->t_opt += ps_train_since(t0);
    t0 = ps_now_ns();
    /* A checkpoint, an evaluation and the end need every push applied: no step left in flight. */
    TRY(ps_train_flight_add(t, push, stepreq, ckpt || eval || last ? 0 : t->flight.window));
    t->t_push_wait += ps_train_since(t0);
    TRY(ps_train_step_done(t, r, s, ckpt, eval, sp));
    /* (a batch begun whose rows the row cache all gave has no request in flight) */
    if (nb && !nx->pull && !nx->look && !(nx->b == nb && nx->nunique) &&
        !(c->max_steps && t->step_this_run >= (uint64_t)c->max_steps))
      TRY(ps_train_slot_start(t, nx, nb, t->step));
    if (t->rank == 0 && ps_train_since(t_last) >= c->progress_every) {
      ps_train_progress(t, t_start, total_steps, epoch);
      t_last = ps_now_ns();
    }
    b = nb;
    cur ^= 1;
  }
  TRY(ps_train_flight_add(t, NULL, NULL, 0));
  /* stopped by --max-steps: a pull may be in flight for a batch we will not train on */
  for (int i = 0; i < 2; i++) {
    ps_train_slot *s = &t->slots[i];
    if (s->look) (void)ps_client_wait(t->cl, &s->look, &t->cerr);
    if (s->pull) (void)ps_client_wait(t->cl, &s->pull, &t->cerr);
    if (s->b) ps_reader_release(r, s->b);
    s->b = NULL;
  }
  return PS_OK;
}

/* Everything the run needs: backend and model (first: a worker without its GPU fails before
 * it joins and takes a rank), client, rank, buffers, table, collectives, metrics. */
static ps_status setup(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  ps_error err;
  ps_status st = ps_kern_create(c->device, c->threads, &t->kern, &err);
  if (st != PS_OK) {
    PS_ERROR("device '%s': %s", c->device, err.msg);
    return st;
  }
  ps_dlrm_config mc;
  ps_dlrm_config_default(&mc);
  mc.mlp_bot = p->mlp_bot_text; /* the model's config takes the widths as text */
  mc.mlp_top = c->mlp_top;
  mc.emb_dim = c->emb_dim;
  mc.max_batch = c->batch;
  mc.num_sparse = ps_schema_ncat(p->schema);
  ps_schema_pool_mask(p->schema, &mc.pool.mean, &mc.pool.period);
  mc.seed = (uint64_t)c->seed;
  mc.interaction = p->interaction;
  mc.dcn_layers = c->dcn_layers;
  mc.dcn_rank = p->dcn_rank;
  mc.out_bias_zero = p->out_bias_zero;
  mc.precision = p->precision;
  st = ps_dlrm_create(t->kern, &mc, &t->model, &err);
  if (st != PS_OK) {
    PS_ERROR("model --mlp-bot %s --mlp-top %s --emb-dim %d: %s", p->mlp_bot_text, c->mlp_top,
             c->emb_dim, err.msg);
    return st;
  }
  ps_client_options co;
  ps_client_options_default(&co);
  co.timeout_ms = c->timeout_ms;
  co.wire_f16 = p->wire_f16;
  co.failover_ms = (uint32_t)c->failover_ms;
  memcpy(co.curve_secret, c->curve_secret, sizeof co.curve_secret);
  memcpy(co.curve_server, c->curve_server, sizeof co.curve_server);
  if ((st = ps_client_create_list(c->servers, &co, &t->cl, &t->cerr)) != PS_OK) {
    PS_ERROR("%s", t->cerr.msg);
    return st;
  }
  TRY(ps_dedup_create(&t->dedup));
  TRY(ps_train_join(t));
  t->nparams = ps_dlrm_num_params(t->model);
  t->dim = c->emb_dim;
  t->batch = c->batch;
  t->nbags = ps_schema_ncat(p->schema);
  t->ndense = ps_schema_ndense(p->schema);
  t->nkeys_max = c->batch * t->nbags;
  t->dopt = ps_dlrm_opt_default(p->dense_opt, (float)c->lr);
  TRY(alloc_slots(t));
  /* --lookahead in ssp:K (K >= 1) and async: pushes and STEPs stay in flight K (async:
   * PS_TRAIN_ASYNC_WINDOW) steps; sync and --lookahead off collect them every step. */
  if (p->lookahead_on && p->consistency != PS_CONS_SYNC)
    t->flight.window = p->consistency == PS_CONS_ASYNC ? PS_TRAIN_ASYNC_WINDOW
                       : p->staleness < PS_TRAIN_ASYNC_WINDOW ? (int)p->staleness
                                                              : PS_TRAIN_ASYNC_WINDOW;
  TRY(declare_table(t));
  TRY(ps_train_deep_setup(t));
  TRY(ps_train_setup_collectives(t));
  TRY(ps_train_stream_start(t));
  return ps_train_metrics_start(t);
}

/* Rank 0's estimate of the run's last step, for the ETA; 0 when unknown. */
static uint64_t total_steps(ps_trainer *t, ps_reader *r, const ps_train_split *sp,
                            uint64_t skip) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  uint64_t total = 0;
  int64_t lpe = ps_reader_lines_per_epoch(r);
  uint64_t lines = 0;
  bool once = p->train_stream || c->follow_input; /* read once, or not yet whole: no count */
  /* --holdout's split already counted --train (ps_train_plan_resolve): train_end is its lines
   * less the held-out tail, so --train is not read end to end a second time for the ETA. */
  if (lpe < 0 && sp->train_end) lpe = (int64_t)sp->train_end;
  else if (lpe < 0 && !once && ps_train_count_rows(c, p, &lines) == PS_OK) lpe = (int64_t)lines;
  uint64_t round = (uint64_t)c->batch * (uint64_t)t->world;
  if (lpe > 0) total = ((uint64_t)lpe + round - 1) / round * (uint64_t)c->epochs;
  if (c->max_steps && (total == 0 || (uint64_t)c->max_steps + skip < total))
    total = (uint64_t)c->max_steps + skip;
  return total;
}

/* A run fails when it trained on nothing (but for a resumed run with no steps left, which
 * only evaluates), or when more than --max-bad-fraction of the --train lines it read were bad:
 * a wrong format or a damaged file, not data. All ranks count together; the lines read are
 * the reader's (good rows, skipped by a resume or read ahead included, and bad ones). */
static ps_status check_trained(ps_trainer *t, uint64_t rows, uint64_t train_bad) {
  const ps_train_config *c = t->cfg;
  uint64_t v[3] = {t->samples, rows, train_bad};
  TRY(ps_train_allreduce_u64(t, v, 3));
  uint64_t lines = v[1] + v[2];
  if (v[0] == 0 && !(c->resume && t->step > 0)) {
    if (lines == 0) PS_ERROR("--train %s: no lines to train on (an empty file?)", c->train);
    else PS_ERROR("--train %s: trained on 0 samples: %" PRIu64 " of %" PRIu64 " lines were bad",
                  c->train, v[2], lines);
    return PS_ERR_INVALID;
  }
  if ((double)v[2] > c->max_bad_fraction * (double)lines) {
    PS_ERROR("--train %s: %" PRIu64 " of %" PRIu64 " lines were bad (%.2f%%), more than "
             "--max-bad-fraction %g", c->train, v[2], lines, 100.0 * (double)v[2] / (double)lines,
             c->max_bad_fraction);
    return PS_ERR_INVALID;
  }
  return PS_OK;
}

static ps_status run(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  TRY(setup(t));
  ps_train_split sp;
  TRY(ps_train_split_data(c, t->plan, &sp));
  uint64_t skip = 0;
  if (c->resume) {
    TRY(ps_train_resume(t, &skip));
    t->step = skip;
    t->ckpt_step = skip;
    t->have_ckpt = true;
    ps_train_stream_resume_plan(t, &skip); /* a recorded input position: no batch to drop */
  }

  ps_reader *r = NULL;
  TRY(ps_train_stream_open_train(t, &sp, &r));
  uint64_t total = 0;
  if (t->rank == 0) {
    total = total_steps(t, r, &sp, skip);
    char inter[96] = "dot interaction";
    if (p->interaction == PS_DLRM_DCN)
      snprintf(inter, sizeof inter, "dcn interaction (%d layers, rank %d)", c->dcn_layers,
               p->dcn_rank);
    PS_INFO("training on %s (%s, schema %s), %d worker(s) x batch %d, %s, device %s, %s, %zu "
            "dense params%s", c->train, ps_reader_format(r) == PS_INPUT_BIN ? "binary" : "text",
            ps_schema_name(p->schema), t->world, c->batch, c->consistency, c->device, inter,
            t->nparams, p->out_bias_zero ? " (output bias 0 at step 0)" : "");
  }
  uint64_t t0 = ps_now_ns();
  ps_status st = train_loop(t, r, skip, total, &sp);
  ahead_drop(t, r, st == PS_OK);
  double secs = ps_train_since(t0);
  uint64_t train_bad = ps_reader_bad_lines(r), rows = ps_reader_rows(r);
  t->bad_lines += train_bad;
  ps_reader_destroy(&r);
  if (st != PS_OK) return st;
  TRY(check_trained(t, rows, train_bad));
  /* The final checkpoint, unless the last step has one (from the loop, or resumed from). */
  if (c->checkpoint_dir && !(t->have_ckpt && t->ckpt_step == t->step))
    TRY(ps_train_checkpoint(t));

  ps_eval_result er;
  memset(&er, 0, sizeof er);
  bool have_eval = sp.eval_path != NULL;
  if (have_eval) TRY(ps_train_evaluate(t, &sp, &er));
  uint64_t hash = 0;
  TRY(ps_train_check_replicas(t, &hash));
  TRY(ps_train_stream_finish(t));
  uint64_t counts[3] = {t->samples, t->bad_lines, t->rows_refreshed};
  TRY(ps_train_allreduce_u64(t, counts, 3));
  if (t->rank == 0) TRY(ps_train_report_done(t, &er, have_eval, counts, secs, hash));
  return PS_OK;
}

ps_status ps_train_run(const ps_train_config *c, const ps_train_plan *p) {
  ps_trainer t;
  memset(&t, 0, sizeof t);
  t.cfg = c;
  t.plan = p;
  ps_status st = run(&t);
  free_trainer(&t);
  return st;
}
