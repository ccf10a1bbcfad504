/* ps_bench_load: ps-bench's load generation — sender threads that follow an open-loop
 * schedule of intended send times (constant spacing or Poisson gaps, fixed before the run) or
 * keep Q requests outstanding (closed loop), each with its own ps_client and histograms, merged
 * into one point's result; plus the set-up the load needs (the key pool, the tables, the
 * optional prepopulation).
 *
 * Latency is charged from a request's intended time (open loop), so a sender that falls behind
 * still charges the delay to the requests it should have sent: no coordinated omission. The
 * thread sleeps to ~60 us before a send and spins the rest, and reaps replies by polling
 * (ps_client_ready), so a reply is seen within tens of microseconds.
 *
 * --bag-size makes a request the embedding lookups of a multi-hot batch: --keys bags of
 * LO..HI ids, drawn like any keys, then de-duplicated with ps_dedup and sent as unique rows,
 * which is what ps-worker does with a batch (its pull and push carry the unique keys). The
 * de-duplication is the sender's work before the send, so it sits in the client queue time
 * like ps-worker's own. keys/s counts the ids (the lookups), rows/s the unique rows sent. */

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_int.h"
#include "ps_dedup.h"
#include "ps_hash.h"
#include "ps_keydist.h"
#include "ps_log.h"
#include "ps_time.h"

#define SPIN_NS 60000ull /* busy-wait this long before an intended send */

/* One request in flight. */
typedef struct slot {
  ps_client_req *r;
  uint32_t tag; /* --op score: the request's tag, and its state (0 out, 1 ok, 2 failed) */
  int state;
  uint64_t intended, sent;
  uint64_t ids, rows;  /* keys drawn, rows sent (de-duplicated with --bag-size) */
  bool measured, push; /* push: its figures go to the push side of --op mixed */
} slot;

typedef struct worker {
  const ps_bench_cfg *c;
  int idx;
  ps_client *cl;
  ps_bench_scorer *sc; /* --op score: ps-serve, instead of cl */
  uint32_t next_tag;
  ps_keydist kd;
  ps_rng rng;
  double rate;    /* this thread's share (open loop) */
  int cap;        /* in-flight window */
  int64_t quota;  /* measured requests to send (--requests), or -1 */
  uint64_t t_start, t_measure, t_end; /* schedule: start, end of warm-up, end (0 = by quota) */
  slot *slots;
  int nin;
  uint64_t *keybuf;
  uint64_t *uniq;   /* --bag-size: a request's unique ids, and the inverse index ps_dedup */
  uint32_t *inv;    /* gives (unused here: the bench has no per-id rows to gather) */
  ps_dedup *dd;
  float *out, *grads;
  /* results */
  ps_hist *lat, *cq, *rtt;
  uint64_t requests, errors, timeouts, keys, rows, last_done, late;
  ps_bench_op_figs op[PS_BENCH_OPS]; /* the same, per op (pull, push) */
  char first_error[256];
  ps_error err;  /* the last failed request's message */
  int *finished; /* threads done (atomic) */
} worker;

/* A request's keys: a window at a random offset of the pre-drawn pool (each window is a run of
 * independent draws, so every request has exactly the chosen distribution; requests share
 * draws, which only matters for pools not much larger than a request), or fresh draws. The
 * pool exists because a Zipf draw costs ~50-100 ns, i.e. ~0.3 ms of client time for a
 * 4096-key request, which would sit in every request's latency (as client queue time). */
static void fill_keys(worker *w, size_t n) {
  const ps_bench_cfg *c = w->c;
  if (c->pool) {
    uint64_t off = ps_rng_next(&w->rng) % ((uint64_t)c->pool_n - n + 1);
    memcpy(w->keybuf, c->pool + off, n * sizeof *w->keybuf);
    return;
  }
  for (size_t i = 0; i < n; i++) w->keybuf[i] = ps_keydist_key(ps_keydist_rank(&w->kd, &w->rng));
}

static void note_error(worker *w, ps_status st) {
  if (!w->first_error[0])
    snprintf(w->first_error, sizeof w->first_error, "%s: %s", ps_status_str(st),
             ps_error_str(&w->err));
}

static void count_send_failure(worker *w, const slot *s, ps_status st) {
  if (!s->measured) return;
  w->requests++;
  w->errors++;
  w->op[s->push].requests++;
  w->op[s->push].errors++;
  note_error(w, st);
}

/* --op score: a request of --candidates lines from a random line on, to ps-serve. */
static void issue_score(worker *w, uint64_t intended) {
  slot *s = &w->slots[w->nin];
  *s = (slot){.intended = intended, .measured = intended >= w->t_measure, .tag = ++w->next_tag,
              .ids = (uint64_t)w->c->candidates, .rows = (uint64_t)w->c->candidates};
  s->sent = ps_now_ns();
  char msg[256];
  if (ps_bench_scorer_send(w->sc, ps_rng_next(&w->rng), s->tag, msg, sizeof msg) != 0) {
    ps_error_set(&w->err, PS_ERR_IO, "%s", msg);
    count_send_failure(w, s, PS_ERR_IO);
    return;
  }
  w->nin++;
}

/* A reply of ps-serve (ps_bench_scorer_poll's callback): its slot's state. */
static void score_done(void *arg, uint32_t tag, bool ok, const char *msg) {
  worker *w = arg;
  for (int i = 0; i < w->nin; i++)
    if (w->slots[i].tag == tag && !w->slots[i].state) {
      w->slots[i].state = ok ? 1 : 2;
      if (!ok) ps_error_set(&w->err, PS_ERR_PROTO, "%s", msg);
      return;
    }
}

/* Sends one request with the given intended time into a free slot. */
static void issue(worker *w, uint64_t intended) {
  const ps_bench_cfg *c = w->c;
  if (c->op == PS_BENCH_OP_SCORE) {
    issue_score(w, intended);
    return;
  }
  bool pull = c->op == PS_BENCH_OP_PULL ||
              (c->op == PS_BENCH_OP_MIXED && ps_rng_unit(&w->rng) < c->mix);
  uint32_t table = (uint32_t)c->table_id +
                   (c->tables > 1 ? (uint32_t)(ps_rng_next(&w->rng) % (uint64_t)c->tables) : 0);
  size_t n = (size_t)c->keys;
  if (c->bag_hi) {
    uint64_t span = (uint64_t)(c->bag_hi - c->bag_lo + 1);
    n = 0;
    for (int64_t b = 0; b < c->keys; b++)
      n += (size_t)c->bag_lo + (size_t)(ps_rng_next(&w->rng) % span);
  }
  fill_keys(w, n);
  slot *s = &w->slots[w->nin];
  s->intended = intended;
  s->measured = intended >= w->t_measure;
  s->push = !pull;
  s->ids = s->rows = n;
  const uint64_t *send = w->keybuf;
  bool unique = c->unique;
  ps_status st = PS_OK;
  if (c->bag_hi) {
    size_t nu = 0;
    st = ps_dedup_keys(w->dd, w->keybuf, n, w->uniq, w->inv, &nu);
    send = w->uniq, unique = true, s->rows = nu;
  }
  s->sent = ps_now_ns();
  if (st == PS_OK)
    st = pull ? ps_client_pull_start(w->cl, table, 0, send, (size_t)s->rows, unique, w->out,
                                      &s->r, &w->err)
              : ps_client_push_start(w->cl, table, 0, send, (size_t)s->rows, unique, w->grads,
                                     &s->r, &w->err);
  if (st != PS_OK) {
    s->r = NULL;
    count_send_failure(w, s, st);
    return;
  }
  w->nin++;
}

/* Completes the requests whose replies are in; returns how many. */
static int reap(worker *w) {
  int got = 0;
  bool score = w->sc != NULL;
  uint64_t limit = (uint64_t)w->c->timeout_ms * 1000000ull;
  if (score) ps_bench_scorer_poll(w->sc, 0, score_done, w);
  for (int i = 0; i < w->nin;) {
    slot *s = &w->slots[i];
    bool done = false;
    ps_status st = PS_OK;
    if (score) {
      /* ps-serve has no deadline of the client's: a request past --timeout-ms is given up */
      if (!s->state && ps_now_ns() - s->sent > limit) {
        s->state = 3;
        ps_bench_scorer_forget(w->sc, s->tag);
        ps_error_set(&w->err, PS_ERR_TIMEOUT, "no reply within --timeout-ms %d", w->c->timeout_ms);
      }
      done = s->state != 0;
      st = s->state == 1 ? PS_OK : s->state == 3 ? PS_ERR_TIMEOUT : PS_ERR_PROTO;
    } else {
      ps_client_ready(w->cl, s->r, 0, &done, NULL);
    }
    if (!done) {
      i++;
      continue;
    }
    if (!score) st = ps_client_wait(w->cl, &s->r, &w->err);
    uint64_t now = ps_now_ns();
    if (s->measured) {
      ps_bench_op_figs *o = &w->op[s->push];
      w->requests++;
      w->keys += s->ids;
      w->rows += s->rows;
      o->requests++;
      o->keys += s->ids;
      o->rows += s->rows;
      if (st == PS_ERR_TIMEOUT) w->timeouts++, o->timeouts++;
      else if (st != PS_OK) w->errors++, o->errors++;
      if (st != PS_OK) note_error(w, st);
      /* Timed-out requests stay in the histogram at what they cost (>= the timeout): a tail
       * that hides them would flatter the server. Other errors are counted, not timed. */
      if (st == PS_OK || st == PS_ERR_TIMEOUT) {
        ps_hist_record(w->lat, now - s->intended);
        ps_hist_record(o->lat, now - s->intended);
        ps_hist_record(w->cq, s->sent - s->intended);
        ps_hist_record(w->rtt, now - s->sent);
      }
      if (s->sent - s->intended > 1000000) w->late++;
      if (now > w->last_done) w->last_done = now;
    }
    /* Keep send order: slot 0 is the oldest, the one pump() waits on (replies mostly come
     * back in order, so waiting on it rarely delays seeing another's reply). */
    memmove(&w->slots[i], &w->slots[i + 1], (size_t)(w->nin - i - 1) * sizeof *w->slots);
    w->nin--;
    got++;
  }
  return got;
}

/* Handles replies: when `block`, waits up to 2 ms for the oldest request (replies to others
 * that arrive meanwhile are taken in too), else just takes what is there. ps_client_ready
 * pumps every socket for every request; its waits have millisecond granularity, so the open
 * loop blocks only when the next send is more than 2.5 ms away and otherwise polls with
 * sleeps of at most 50 us. */
static void pump(worker *w, bool block) {
  if (!w->nin) return;
  if (w->sc) {
    ps_bench_scorer_poll(w->sc, block ? 2 : 0, score_done, w);
    return;
  }
  bool done;
  ps_client_ready(w->cl, w->slots[0].r, block ? 2 : 1, &done, NULL);
}

static uint64_t next_gap(worker *w) {
  double mean_ns = 1e9 / w->rate;
  if (!w->c->poisson) return (uint64_t)mean_ns;
  double u = ps_rng_unit(&w->rng);
  return (uint64_t)(-log1p(-u) * mean_ns);
}

static void run_open(worker *w) {
  /* Threads interleave their constant schedules instead of sending in lock-step. */
  double phase = w->c->threads > 1 ? (double)w->idx / w->c->threads : 0.0;
  uint64_t base = w->t_start;
  uint64_t k = 0;
  uint64_t next = w->c->poisson ? base + next_gap(w) : base + (uint64_t)(phase * 1e9 / w->rate);
  int64_t sent_measured = 0;
  bool sched_done = false;
  for (;;) {
    uint64_t now = ps_now_ns();
    while (!sched_done && next <= now && w->nin < w->cap) {
      if (next >= w->t_measure) sent_measured++;
      issue(w, next);
      k++;
      next = w->c->poisson ? next + next_gap(w)
                           : base + (uint64_t)(((double)k + phase) * 1e9 / w->rate);
      if ((w->t_end && next >= w->t_end) || (w->quota >= 0 && sent_measured >= w->quota))
        sched_done = true;
      now = ps_now_ns();
    }
    reap(w);
    if (sched_done && w->nin == 0) break;
    now = ps_now_ns();
    if (w->nin == 0) {
      /* Sleep to just before the send, then spin the last stretch: on a busy machine a wake-up
       * comes tens of microseconds late, and that lateness would be charged to the request. */
      if (next > now + SPIN_NS) ps_sleep_until_ns(next - SPIN_NS);
    } else if (sched_done || w->nin >= w->cap || next > now + 2500000) {
      pump(w, true);
    } else {
      pump(w, false);
      reap(w);
      if (next > now + SPIN_NS) {
        uint64_t d = next - now - SPIN_NS;
        ps_sleep_ns(d < 50000 ? d : 50000);
      }
    }
  }
}

static void run_closed(worker *w) {
  int64_t sent_measured = 0;
  bool stop = false;
  for (;;) {
    uint64_t now = ps_now_ns();
    while (!stop && w->nin < w->cap) {
      if (now >= w->t_measure) sent_measured++;
      issue(w, now);
      if ((w->t_end && now >= w->t_end) || (w->quota >= 0 && sent_measured >= w->quota)) stop = true;
      now = ps_now_ns();
    }
    reap(w);
    if (stop && w->nin == 0) break;
    if (w->nin >= w->cap || stop) pump(w, true);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  if (w->c->closed) run_closed(w);
  else run_open(w);
  __atomic_fetch_add(w->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* ------------------------------------------------------------------ one point */

void ps_bench_result_init(ps_bench_result *r, size_t nsrv) {
  memset(r, 0, sizeof *r);
  r->lat = ps_hist_create();
  r->cq = ps_hist_create();
  r->rtt = ps_hist_create();
  for (int o = 0; o < PS_BENCH_OPS; o++) r->op[o].lat = ps_hist_create();
  r->q_inflight_max = calloc(nsrv, sizeof *r->q_inflight_max);
  r->q_deferred_max = calloc(nsrv, sizeof *r->q_deferred_max);
  r->srv_mean_us = -1;
  r->win_shard = -1;
}

void ps_bench_result_free(ps_bench_result *r) {
  ps_hist_destroy(&r->lat);
  ps_hist_destroy(&r->cq);
  ps_hist_destroy(&r->rtt);
  for (int o = 0; o < PS_BENCH_OPS; o++) ps_hist_destroy(&r->op[o].lat);
  for (int p = 0; p < PS_BENCH_SP_N; p++) ps_hist_destroy(&r->win[p]);
  free(r->q_inflight_max);
  free(r->q_deferred_max);
  json_decref(r->srv);
}

ps_status ps_bench_run_point(const ps_bench_cfg *c, ps_client **clients, ps_client *statcl,
                             ps_bench_scorer **scorers, double rate, ps_bench_result *res) {
  int T = c->threads;
  worker *ws = calloc((size_t)T, sizeof *ws);
  pthread_t *th = calloc((size_t)T, sizeof *th);
  if (!ws || !th) {
    free(ws);
    free(th);
    return PS_ERR_NOMEM;
  }
  uint64_t start = ps_now_ns() + 20000000; /* 20 ms for the threads to get going */
  uint64_t meas = start + (uint64_t)(c->warmup * 1e9);
  uint64_t end = c->requests > 0 ? 0 : meas + (uint64_t)(c->duration * 1e9);
  int total_cap = c->inflight;
  ps_status st = PS_OK;
  int started = 0, finished = 0;
  for (int i = 0; i < T; i++) {
    worker *w = &ws[i];
    w->c = c;
    w->idx = i;
    w->cl = clients ? clients[i] : NULL;
    w->sc = scorers ? scorers[i] : NULL;
    ps_keydist_init(&w->kd, (uint64_t)c->key_space, c->zipf_a);
    w->rng.s = ps_mix64((uint64_t)c->seed * 1000003u + (uint64_t)i * 7919u + (uint64_t)rate);
    w->rate = rate / T;
    w->cap = total_cap / T + (i < total_cap % T ? 1 : 0);
    if (w->cap < 1) w->cap = 1;
    w->quota = c->requests > 0 ? c->requests / T + (i < c->requests % T ? 1 : 0) : -1;
    w->t_start = start;
    w->t_measure = meas;
    w->t_end = end;
    w->finished = &finished;
    /* With bags a request sends at most its ids and at most the key space as rows. */
    size_t ids = (size_t)ps_bench_max_ids(c), rows = ids;
    if (c->bag_hi && rows > (size_t)c->key_space) rows = (size_t)c->key_space;
    w->slots = calloc((size_t)w->cap, sizeof *w->slots);
    w->keybuf = malloc(ids * sizeof *w->keybuf);
    w->out = malloc(rows * (size_t)c->dim * sizeof(float));
    w->grads = malloc(rows * (size_t)c->dim * sizeof(float));
    if (c->bag_hi) {
      w->uniq = malloc(ids * sizeof *w->uniq);
      w->inv = malloc(ids * sizeof *w->inv);
      if (!w->uniq || !w->inv || ps_dedup_create(&w->dd) != PS_OK) {
        st = PS_ERR_NOMEM;
        break;
      }
    }
    w->lat = ps_hist_create();
    w->cq = ps_hist_create();
    w->rtt = ps_hist_create();
    for (int o = 0; o < PS_BENCH_OPS; o++) w->op[o].lat = ps_hist_create();
    if (!w->slots || !w->keybuf || !w->out || !w->grads || !w->lat || !w->cq || !w->rtt ||
        !w->op[0].lat || !w->op[1].lat || !res->op[0].lat || !res->op[1].lat) {
      st = PS_ERR_NOMEM;
      break;
    }
    for (size_t j = 0; j < rows * (size_t)c->dim; j++) w->grads[j] = 1e-4f;
  }
  if (st == PS_OK) {
    for (; started < T; started++)
      if (pthread_create(&th[started], NULL, worker_main, &ws[started]) != 0) {
        st = PS_ERR_INTERNAL;
        break;
      }
  }
  /* Meanwhile, with --queue-sample-ms, sample the servers' queue depths. Off by default: each
   * STATS holds the server's socket thread while it renders (about 1 ms on a 2-core VM), and
   * the requests that arrive meanwhile wait: the bench would perturb the tail it measures. */
  size_t nsrv = statcl ? ps_client_servers(statcl) : 0;
  if (!res->q_inflight_max || !res->q_deferred_max) nsrv = 0;
  while (c->queue_sample_ms > 0 && statcl && started == T &&
         __atomic_load_n(&finished, __ATOMIC_ACQUIRE) < T) {
    ps_sleep_ns((uint64_t)c->queue_sample_ms * 1000000ull);
    if (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) >= T) break;
    ps_bench_sample_queues(c, statcl, res, nsrv);
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  uint64_t last = 0;
  for (int i = 0; i < T; i++) {
    worker *w = &ws[i];
    if (st == PS_OK) {
      ps_hist_merge(res->lat, w->lat);
      ps_hist_merge(res->cq, w->cq);
      ps_hist_merge(res->rtt, w->rtt);
      for (int o = 0; o < PS_BENCH_OPS; o++) {
        ps_hist_merge(res->op[o].lat, w->op[o].lat);
        res->op[o].requests += w->op[o].requests;
        res->op[o].errors += w->op[o].errors;
        res->op[o].timeouts += w->op[o].timeouts;
        res->op[o].keys += w->op[o].keys;
        res->op[o].rows += w->op[o].rows;
      }
      res->requests += w->requests;
      res->errors += w->errors;
      res->timeouts += w->timeouts;
      res->keys += w->keys;
      res->rows += w->rows;
      res->late += w->late;
      if (w->last_done > last) last = w->last_done;
      if (!res->first_error[0] && w->first_error[0])
        snprintf(res->first_error, sizeof res->first_error, "%s", w->first_error);
    }
    free(w->slots);
    free(w->keybuf);
    free(w->uniq);
    free(w->inv);
    ps_dedup_destroy(&w->dd);
    free(w->out);
    free(w->grads);
    ps_hist_destroy(&w->lat);
    ps_hist_destroy(&w->cq);
    ps_hist_destroy(&w->rtt);
    for (int o = 0; o < PS_BENCH_OPS; o++) ps_hist_destroy(&w->op[o].lat);
  }
  free(ws);
  free(th);
  if (st != PS_OK) return st;
  /* The window runs from the end of warm-up to the last measured reply: a server that cannot
   * keep up stretches it (the backlog drains after the schedule ends), so achieved < target. */
  res->target_rate = c->closed ? -1.0 : rate;
  res->elapsed_s = last > meas ? ps_ns_to_s(last - meas) : 0.0;
  if (end && !c->closed && res->elapsed_s < c->duration) res->elapsed_s = c->duration;
  res->achieved_rate = res->elapsed_s > 0 ? (double)res->requests / res->elapsed_s : 0.0;
  res->keys_per_s = res->elapsed_s > 0 ? (double)res->keys / res->elapsed_s : 0.0;
  res->rows_per_s = res->elapsed_s > 0 ? (double)res->rows / res->elapsed_s : 0.0;
  return PS_OK;
}

/* ------------------------------------------------------------------ set-up */

/* --key-pool: N keys drawn once from the distribution (see fill_keys); -1 without memory. */
int ps_bench_key_pool(ps_bench_cfg *c) {
  if (!c->pool_n) return 0;
  if (c->pool_n < 4 * ps_bench_max_ids(c)) c->pool_n = 4 * ps_bench_max_ids(c);
  c->pool = malloc((size_t)c->pool_n * sizeof *c->pool);
  ps_keydist kd;
  ps_rng rng = {ps_mix64((uint64_t)c->seed ^ 0x706f6f6cull)};
  if (!c->pool || ps_keydist_init(&kd, (uint64_t)c->key_space, c->zipf_a) != 0) return -1;
  for (int64_t i = 0; i < c->pool_n; i++) c->pool[i] = ps_keydist_key(ps_keydist_rank(&kd, &rng));
  return 0;
}

int ps_bench_declare_tables(const ps_bench_cfg *c, ps_client *cl) {
  for (int i = 0; i < c->tables; i++) {
    ps_table_spec t;
    char name[64];
    uint32_t id = (uint32_t)(c->table_id + i);
    snprintf(name, sizeof name, "pslat_%u", id);
    ps_table_spec_default(&t, id, name, (uint32_t)c->dim);
    t.consistency = PS_CONS_ASYNC; /* no step barrier: the bench has no workers */
    t.num_workers = 1;
    ps_error err;
    ps_status st = ps_client_declare(cl, &t, &err);
    if (st != PS_OK) {
      fprintf(stderr, "ps-bench: declaring table %u (dim %" PRId64 ") failed: %s: %s\n", id,
              c->dim, ps_status_str(st), err.msg);
      return -1;
    }
  }
  return 0;
}

int ps_bench_attach_table(ps_bench_cfg *c, ps_client *cl, bool first) {
  ps_table_spec t;
  ps_error err;
  ps_status st = ps_client_attach(cl, c->table_name, &t, &err);
  if (st != PS_OK) {
    fprintf(stderr, "ps-bench: --table %s: %s: %s\n", c->table_name, ps_status_str(st), err.msg);
    return -1;
  }
  if (first) {
    c->table_id = (int)t.id;
    c->dim = t.dim;
  } else if ((uint32_t)c->table_id != t.id || (uint32_t)c->dim != t.dim) {
    /* the servers' table changed between two connections' attaches (e.g. --follow) */
    fprintf(stderr, "ps-bench: --table %s: the servers answered table %u dim %u, then %u dim %u\n",
            c->table_name, (unsigned)c->table_id, (unsigned)c->dim, t.id, t.dim);
    return -1;
  }
  return 0;
}

/* Creates the row of every key of the key space before the measurement, so pulls measure the
 * rows-exist path and not the cold one (a pull of a key that has no row returns its initial
 * values without creating it: every pulled key would be a miss, served by the initializer).
 * How: one push of zero gradients per key, which inserts the row with its initial values and
 * leaves them unchanged (Adagrad and Adam both step by 0 for a zero gradient and SGD does), so
 * the values pulled afterwards are those a cold pull returns. Eight requests in flight. */
int ps_bench_prepopulate(const ps_bench_cfg *c, ps_client *cl) {
  uint64_t K = (uint64_t)c->key_space, B = (uint64_t)c->keys;
  if (K > 50000000ull)
    PS_WARN("--prepopulate of %" PRIu64 " keys per table will take a while", K);
  enum { DEPTH = 8 };
  uint64_t *keys = malloc(B * sizeof *keys);
  float *zero = calloc(B * (size_t)c->dim, sizeof(float));
  ps_client_req *rq[DEPTH] = {0};
  if (!keys || !zero) {
    free(keys);
    free(zero);
    return -1;
  }
  uint64_t t0 = ps_now_ns();
  int rc = 0;
  ps_error err;
  for (int t = 0; t < c->tables && rc == 0; t++) {
    uint32_t table = (uint32_t)(c->table_id + t);
    uint64_t pos = 0;
    for (size_t it = 0; rc == 0; it++) {
      ps_client_req **slot = &rq[it % DEPTH];
      if (*slot && ps_client_wait(cl, slot, &err) != PS_OK) {
        fprintf(stderr, "ps-bench: --prepopulate: %s\n", err.msg);
        rc = -1;
        break;
      }
      if (pos >= K) break;
      uint64_t n = K - pos < B ? K - pos : B;
      for (uint64_t i = 0; i < n; i++) keys[i] = ps_keydist_key(pos + i);
      pos += n;
      if (ps_client_push_start(cl, table, 0, keys, n, true, zero, slot, &err) != PS_OK) {
        fprintf(stderr, "ps-bench: --prepopulate: %s\n", err.msg);
        rc = -1;
      }
    }
    for (int i = 0; i < DEPTH; i++)
      if (rq[i]) ps_client_wait(cl, &rq[i], NULL);
  }
  if (rc == 0)
    PS_INFO("prepopulated %" PRIu64 " keys x %d tables in %.1f s", K, c->tables,
            ps_ns_to_s(ps_now_ns() - t0));
  free(keys);
  free(zero);
  return rc;
}
