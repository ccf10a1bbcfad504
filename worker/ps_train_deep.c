/* ps_train_deep.c: ps-worker's deep lookahead (docs/DESIGN.md, "The deep lookahead").
 *
 * One worker in sync: step t trains on the servers' rows with every step below t applied, and
 * only this worker's pushes change them. So at step t, before its compute, the worker sends the
 * pull of batch t + K (a PULL with_state of step t: each row with its optimizer state), K steps
 * before it is needed, and it keeps an overlay of every row its own recent steps updated, as it
 * updated it itself with the servers' arithmetic (common/ps_optim.c: the function the store
 * calls, so the bits are the same by construction). When a batch's rows are used, a row the
 * overlay holds replaces the pulled one; any other was last changed before its pull was
 * answered, so the pulled row is current. No server reply is waited for inside a step: pushes
 * and STEPs stay in flight K steps, the servers still apply every push (their rows stay the
 * truth: checkpoints, evaluation and exports read them), and the model is --lookahead off's,
 * bit for bit.
 *
 * The overlay: open addressing (linear probing) of key -> (step of its last update, row with
 * state). A row whose last update is below every unconsumed pull's step (min_live) is in all of
 * their replies: it is no longer needed. A lookup may still use it (it is the key's latest
 * value all the same), an insert may take its slot, and a rebuild drops it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_optim.h"
#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY
#define EMPTY UINT64_MAX

typedef struct ps_train_deep {
  int k;            /* batches pulled ahead */
  size_t w, dim;    /* floats a row with state; its values */
  bool adam;
  size_t cap, used; /* overlay slots (a power of 2), slots not empty */
  uint64_t *keys, *vers;
  float *recs;
  uint64_t replaced; /* pulled rows the overlay replaced */
} ps_train_deep;

ps_status ps_train_deep_setup(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  if (!p->lookahead_on || p->lookahead_refresh || p->consistency != PS_CONS_SYNC)
    return PS_OK;
  const char *why = t->world > 1                              ? "more than one worker"
                    : p->train_stream || c->follow_input      ? "streamed input"
                    : p->row_type != PS_ROW_F32          ? "16-bit rows"
                    : p->wire_f16                             ? "--wire f16"
                    : c->admit_threshold > 0                  ? "admission"
                    : c->ttl_steps > 0                        ? "TTL"
                    : c->row_cache_mb > 0                     ? "--row-cache-mb"
                                                              : NULL;
  if (why) {
    if (t->rank == 0)
      PS_INFO("lookahead: one step, refreshed (the deep lookahead needs one worker in sync with "
              "f32 rows and no admission, TTL or row cache: %s)", why);
    return PS_OK;
  }
  ps_train_deep *d = calloc(1, sizeof *d);
  if (!d) return PS_ERR_NOMEM;
  t->deep = d;
  d->k = c->lookahead_depth > 0 ? (int)c->lookahead_depth : PS_TRAIN_DEEP_MAX;
  d->w = ps_optim_row_floats(&t->spec);
  d->dim = (size_t)t->dim;
  d->adam = t->spec.optimizer == PS_OPT_ADAM;
  PS_INFO("lookahead: deep, %d batches ahead (this worker applies its own updates)", d->k);
  return PS_OK;
}

int ps_train_deep_held(const ps_trainer *t) { return t->deep ? t->deep->k + 1 : 0; }

void ps_train_deep_free(ps_trainer *t) {
  for (int i = 0; i < PS_TRAIN_NSLOTS; i++) free(t->slots[i].srows);
  ps_train_deep *d = t->deep;
  if (!d) return;
  free(d->keys);
  free(d->vers);
  free(d->recs);
  free(d);
  t->deep = NULL;
}

/* ------------------------------------------------------------------ the overlay */

static size_t home(const ps_train_deep *d, uint64_t key) {
  return (size_t)ps_mix64(key) & (d->cap - 1);
}

static const float *ov_find(const ps_train_deep *d, uint64_t key) {
  if (!d->cap) return NULL;
  for (size_t i = home(d, key);; i = (i + 1) & (d->cap - 1)) {
    if (d->vers[i] == EMPTY) return NULL;
    if (d->keys[i] == key) return d->recs + i * d->w;
  }
}

/* The live rows (last updated at min_live or later) into arrays with room for 4 times them
 * (never fewer slots than before): a rebuild then comes at most every cap / 2 inserts. */
static ps_status ov_rebuild(ps_train_deep *d, uint64_t min_live, size_t want) {
  size_t live = 0;
  for (size_t i = 0; i < d->cap; i++) live += d->vers[i] != EMPTY && d->vers[i] >= min_live;
  size_t cap = d->cap ? d->cap : 1024;
  while (cap < 4 * (live + want)) cap *= 2;
  uint64_t *keys = malloc(cap * sizeof *keys), *vers = malloc(cap * sizeof *vers);
  float *recs = malloc(cap * d->w * sizeof *recs);
  if (!keys || !vers || !recs) {
    free(keys);
    free(vers);
    free(recs);
    return PS_ERR_NOMEM;
  }
  for (size_t i = 0; i < cap; i++) vers[i] = EMPTY;
  ps_train_deep old = *d;
  d->cap = cap;
  d->keys = keys;
  d->vers = vers;
  d->recs = recs;
  d->used = 0;
  for (size_t j = 0; j < old.cap; j++) {
    if (old.vers[j] == EMPTY || old.vers[j] < min_live) continue;
    size_t i = home(d, old.keys[j]);
    while (vers[i] != EMPTY) i = (i + 1) & (cap - 1);
    keys[i] = old.keys[j];
    vers[i] = old.vers[j];
    memcpy(recs + i * d->w, old.recs + j * d->w, d->w * sizeof *recs);
    d->used++;
  }
  free(old.keys);
  free(old.vers);
  free(old.recs);
  return PS_OK;
}

/* key's row after the update of step `ver`: in its slot if it has one, else in the first slot
 * on its probe path whose row is no longer needed, else in the empty slot ending the path. */
static void ov_put(ps_train_deep *d, uint64_t key, const float *rec, uint64_t ver,
                   uint64_t min_live) {
  const size_t mask = d->cap - 1;
  size_t i = home(d, key), dead = SIZE_MAX;
  for (; d->vers[i] != EMPTY; i = (i + 1) & mask) {
    if (d->keys[i] == key) break;
    if (dead == SIZE_MAX && d->vers[i] < min_live) dead = i;
  }
  if (d->vers[i] == EMPTY) {
    if (dead != SIZE_MAX) i = dead;
    else d->used++;
  }
  d->keys[i] = key;
  d->vers[i] = ver;
  memcpy(d->recs + i * d->w, rec, d->w * sizeof *rec);
}

/* ------------------------------------------------------------------ a batch's rows */

/* Dedups the batch's keys and sends the pull of their rows with state, of step `step` (the
 * step this worker is on: it has not sent STEP(step)). */
static ps_status deep_begin(ps_trainer *t, ps_train_slot *s, ps_batch *b, uint64_t step) {
  ps_train_deep *d = t->deep;
  s->b = b;
  s->step = step;
  s->nunique = s->npulled = 0;
  s->pull = s->look = NULL;
  if (b->nkeys == 0) return PS_OK;
  TRY(ps_train_grow_keys(t, s, b->nkeys));
  TRY(ps_dedup_keys(t->dedup, b->keys, b->nkeys, s->unique, s->inverse, &s->nunique));
  if (s->scap < s->nunique) {
    free(s->srows);
    s->srows = malloc(s->cap * d->w * sizeof(float));
    s->scap = s->srows ? s->cap : 0;
    if (!s->srows) return PS_ERR_NOMEM;
  }
  s->npulled = s->nunique;
  ps_status st = ps_client_pull_state_start(t->cl, PS_TRAIN_TABLE_ID, step, s->unique,
                                            s->nunique, (uint32_t)d->w, s->srows, &s->pull,
                                            &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "pull with state", st);
  return PS_OK;
}

/* The pull waited for (counted as the wait on servers), the overlay's rows over it, and the
 * values into the rows the model reads. */
static ps_status deep_rows(ps_trainer *t, ps_train_slot *s) {
  ps_train_deep *d = t->deep;
  uint64_t t0 = ps_now_ns();
  ps_status st = s->pull ? ps_client_wait(t->cl, &s->pull, &t->cerr) : PS_OK;
  t->t_pull += ps_train_since(t0);
  if (st != PS_OK) return ps_train_client_fail(t, "pull with state", st);
  for (size_t i = 0; i < s->nunique; i++) {
    float *rec = s->srows + i * d->w;
    const float *o = ov_find(d, s->unique[i]);
    if (o) {
      memcpy(rec, o, d->w * sizeof *rec);
      d->replaced++;
    }
    memcpy(s->rows + i * d->dim, rec, d->dim * sizeof *rec);
  }
  return PS_OK;
}

/* After step `step`'s push went out with t->emb_grad: the update the servers will apply,
 * applied here to the batch's rows and kept in the overlay. */
static ps_status deep_apply(ps_trainer *t, ps_train_slot *s, uint64_t step) {
  ps_train_deep *d = t->deep;
  if (!s->b || !s->b->n || !s->nunique) return PS_OK;
  /* The pulls not yet used are of steps >= step + 1 - K: a row updated before that is in them. */
  uint64_t min_live = step + 1 >= (uint64_t)d->k ? step + 1 - (uint64_t)d->k : 0;
  if (4 * (d->used + s->nunique) > 3 * d->cap) TRY(ov_rebuild(d, min_live, s->nunique));
  for (size_t i = 0; i < s->nunique; i++) {
    float *rec = s->srows + i * d->w;
    uint32_t at = 0;
    if (d->adam) memcpy(&at, rec + d->w - 1, sizeof at);
    ps_optim_apply(&t->spec, rec, rec + d->dim, d->adam ? &at : NULL, t->emb_grad + i * d->dim);
    if (d->adam) memcpy(rec + d->w - 1, &at, sizeof at);
    ov_put(d, s->unique[i], rec, step, min_live);
  }
  return PS_OK;
}

/* ------------------------------------------------------------------ the loop */

/* train_loop with the deep lookahead (after a resume's skipped batches): a ring of K + 1
 * slots (t->slots[1..K+1]) holds the batch of this step and the K after it, each with its pull
 * sent. */
ps_status ps_train_deep_loop(ps_trainer *t, ps_reader *r, uint64_t total_steps,
                             const struct ps_train_split *sp) {
  const ps_train_config *c = t->cfg;
  ps_train_deep *d = t->deep;
  ps_train_slot *ring = &t->slots[1];
  const int n_ring = d->k + 1;
  int head = 0, n = 0, epoch = 0;
  bool end = false;
  ps_status st = PS_OK;
  uint64_t t_start = ps_now_ns(), t_last = t_start;
  for (;;) {
    /* The ring filled, before this step's compute: the pulls of the next K batches. */
    while (!end && n < n_ring) {
      if (c->max_steps && t->step_this_run + (uint64_t)n >= (uint64_t)c->max_steps) break;
      ps_batch *b = NULL;
      if ((st = ps_train_next_ahead(t, r, &b)) != PS_OK) goto out;
      if (!b) {
        end = true;
        break;
      }
      ps_train_slot *s = &ring[(head + n++) % n_ring];
      if ((st = deep_begin(t, s, b, t->step)) != PS_OK) goto out;
    }
    if (n == 0) break;
    ps_train_slot *s = &ring[head];
    epoch = s->b->epoch;
    s->step = t->step;
    if ((st = deep_rows(t, s)) != PS_OK) goto out;
    bool last = c->max_steps && t->step_this_run + 1 >= (uint64_t)c->max_steps;
    bool ckpt = c->checkpoint_dir && c->checkpoint_every &&
                (t->step + 1) % (uint64_t)c->checkpoint_every == 0;
    bool eval = sp->eval_path && c->eval_every && (t->step + 1) % (uint64_t)c->eval_every == 0;
    ps_client_req *push = NULL, *stepreq = NULL;
    if ((st = ps_train_step(t, s, &push, &stepreq)) != PS_OK) goto out;
    ckpt = ckpt || (c->checkpoint_dir && t->strm.ckpt_due);
    /* the sparse update here counts with the dense one (phase optimizer) */
    uint64_t t0 = ps_now_ns();
    if ((st = deep_apply(t, s, t->step)) != PS_OK) goto out;
    if ((st = ps_dlrm_step(t->model, &t->dopt)) == PS_OK) st = ps_kern_sync(t->kern);
    t->t_opt += ps_train_since(t0);
    if (st != PS_OK) goto out;
    t0 = ps_now_ns();
    /* A checkpoint, an evaluation and the end need every push applied: none left in flight. */
    st = ps_train_flight_add(t, push, stepreq, ckpt || eval || last ? 0 : d->k);
    t->t_push_wait += ps_train_since(t0);
    if (st != PS_OK) goto out;
    head = (head + 1) % n_ring;
    n--;
    if ((st = ps_train_step_done(t, r, s, ckpt, eval, sp)) != PS_OK) goto out;
    if (t->rank == 0 && ps_train_since(t_last) >= c->progress_every) {
      ps_train_progress(t, t_start, total_steps, epoch);
      t_last = ps_now_ns();
    }
    if (t->strm.stop_due || last) break;
  }
  st = ps_train_flight_add(t, NULL, NULL, 0);
out:
  /* Batches read ahead and not trained (--max-steps, a stop, a failure): their pulls collected
   * (unless the run failed: ps_client_destroy frees them) and their batches released. */
  for (; n > 0; n--, head = (head + 1) % n_ring) {
    ps_train_slot *s = &ring[head];
    if (s->pull && st == PS_OK) (void)ps_client_wait(t->cl, &s->pull, &t->cerr);
    if (s->b) ps_reader_release(r, s->b);
    s->b = NULL;
  }
  if (t->rank == 0 && st == PS_OK)
    PS_INFO("lookahead: %" PRIu64 " pulled rows replaced by this worker's own updates",
            d->replaced);
  return st;
}
