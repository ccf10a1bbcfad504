/* ps-bench: a tail-latency load generator for ps-server (open-loop, no coordinated omission).
 *
 * Open loop: each thread owns a schedule of INTENDED send times (constant spacing or Poisson
 * gaps) fixed before the run, and a request's latency is measured from its intended time, not
 * from when it actually left. A sender that falls behind (a stalled server, a full in-flight
 * window, a slow client) therefore still charges the whole delay to the requests it should have
 * sent, so a 200 ms stall at 500 req/s shows up as ~100 requests with 0..200 ms latency instead
 * of one slow request (the "coordinated omission" of closed-loop tools). Closed loop
 * (--closed-loop --inflight Q) keeps Q requests outstanding for maximum throughput and measures
 * from the actual send, which is the right number for throughput and the wrong one for tails.
 *
 * One ps_client per thread (the client is single-threaded); replies are reaped by polling the
 * client (ps_client_ready) and sleeping at most ~50 us when a send is due soon, so the
 * completion time is seen within tens of microseconds. Per-thread HDR histograms (ps_hist) are
 * merged at the end. Besides the total latency, each request records its client queue time
 * (intended -> sent) and its round trip (sent -> reply seen); with the servers' STATS (per-op
 * receipt-to-reply latency split into server queue and service, queue depths) that says where
 * the time went: client queue, network (round trip minus the server's time), server queue,
 * service. */

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "ps_cli.h"
#include "ps_client.h"
#include "ps_hash.h"
#include "ps_hist.h"
#include "ps_keydist.h"
#include "ps_log.h"
#include "ps_time.h"

enum { OP_PULL, OP_PUSH, OP_MIXED };
#define MAX_SWEEP 64
#define SPIN_NS 60000ull /* busy-wait this long before an intended send */

typedef struct cfg {
  const char *servers, *op_s, *dist_s, *arrivals_s, *sweep_s, *json, *plot, *level;
  double mix, rate, duration, warmup;
  int64_t keys, dim, key_space, requests, seed;
  int tables, table_id, threads, connections, inflight, timeout_ms;
  bool closed, prepopulate, poisson, unique;
  int op;
  double zipf_a;
  int64_t pool_n;          /* --key-pool: pre-drawn keys (0 = draw per request) */
  uint64_t *pool;
} cfg;

/* One request in flight. */
typedef struct slot {
  ps_client_req *r;
  uint64_t intended, sent;
  bool measured;
} slot;

/* The parts of a server's time, as STATS names them (ops.<op>.<part>_us and _buckets): the
 * total (receipt -> reply) and its split at the start of the store work. */
enum { SP_TOTAL, SP_QUEUE, SP_SERVICE, SP_N };
static const char *const sp_field[SP_N] = {"latency", "queue", "service"};

typedef struct result {
  double target_rate; /* < 0: closed loop */
  double achieved_rate, keys_per_s, elapsed_s;
  uint64_t requests, errors, timeouts, keys, late;
  ps_hist *lat, *cq, *rtt;
  char first_error[256];
  double srv_mean_us;                       /* < 0: unknown */
  /* The slowest shard's receipt-to-reply time over this point and its split (see sp_field):
   * histograms of the point's requests (NULL: unknown) and exact means. */
  ps_hist *win[SP_N];
  double win_mean_us[SP_N];
  int win_shard;
  json_t *srv;                              /* per-shard server view */
  int64_t *q_inflight_max, *q_deferred_max; /* per shard, sampled during the run */
} result;

typedef struct worker {
  const cfg *c;
  int idx;
  ps_client *cl;
  ps_keydist kd;
  ps_rng rng;
  double rate;    /* this thread's share (open loop) */
  int cap;        /* in-flight window */
  int64_t quota;  /* measured requests to send (--requests), or -1 */
  uint64_t t_start, t_measure, t_end; /* schedule: start, end of warm-up, end (0 = by quota) */
  slot *slots;
  int nin;
  uint64_t *keybuf;
  float *out, *grads;
  /* results */
  ps_hist *lat, *cq, *rtt;
  uint64_t requests, errors, timeouts, keys, last_done, late;
  char first_error[256];
  int *finished; /* threads done (atomic) */
} worker;

/* ------------------------------------------------------------------ requests */

/* A request's keys: a window at a random offset of the pre-drawn pool (each window is a run of
 * independent draws, so every request has exactly the chosen distribution; requests share
 * draws, which only matters for pools not much larger than a request), or fresh draws. The
 * pool exists because a Zipf draw costs ~50-100 ns, i.e. ~0.3 ms of client time for a
 * 4096-key request, which would sit in every request's latency (as client queue time). */
static void fill_keys(worker *w, size_t n) {
  const cfg *c = w->c;
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
             ps_client_error(w->cl));
}

/* Sends one request with the given intended time into a free slot. */
static void issue(worker *w, uint64_t intended) {
  const cfg *c = w->c;
  bool pull = c->op == OP_PULL || (c->op == OP_MIXED && ps_rng_unit(&w->rng) < c->mix);
  uint32_t table = (uint32_t)c->table_id +
                   (c->tables > 1 ? (uint32_t)(ps_rng_next(&w->rng) % (uint64_t)c->tables) : 0);
  size_t n = (size_t)c->keys;
  fill_keys(w, n);
  slot *s = &w->slots[w->nin];
  s->intended = intended;
  s->measured = intended >= w->t_measure;
  s->sent = ps_now_ns();
  ps_status st = pull ? ps_client_pull_start(w->cl, table, 0, w->keybuf, n, c->unique, w->out,
                                             &s->r)
                      : ps_client_push_start(w->cl, table, 0, w->keybuf, n, c->unique,
                                             w->grads, &s->r);
  if (st != PS_OK) {
    s->r = NULL;
    if (s->measured) {
      w->requests++;
      w->errors++;
      note_error(w, st);
    }
    return;
  }
  w->nin++;
}

/* Completes the requests whose replies are in; returns how many. */
static int reap(worker *w) {
  int got = 0;
  for (int i = 0; i < w->nin;) {
    slot *s = &w->slots[i];
    bool done = false;
    ps_client_ready(w->cl, s->r, 0, &done);
    if (!done) {
      i++;
      continue;
    }
    ps_status st = ps_client_wait(w->cl, &s->r);
    uint64_t now = ps_now_ns();
    if (s->measured) {
      w->requests++;
      w->keys += (uint64_t)w->c->keys;
      if (st == PS_ERR_TIMEOUT) w->timeouts++;
      else if (st != PS_OK) w->errors++;
      if (st != PS_OK) note_error(w, st);
      /* Timed-out requests stay in the histogram at what they cost (>= the timeout): a tail
       * that hides them would flatter the server. Other errors are counted, not timed. */
      if (st == PS_OK || st == PS_ERR_TIMEOUT) {
        ps_hist_record(w->lat, now - s->intended);
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
  bool done;
  ps_client_ready(w->cl, w->slots[0].r, block ? 2 : 1, &done);
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

/* The servers' STATS, per shard (see stats_snap). */
typedef struct srv_snap {
  bool ok;
  int64_t inflight, deferred;
  json_t *lat; /* cumulative latency_us of the main op (borrowed into the result's JSON) */
  /* Pulls and pushes together, cumulative since the server started: per part, the raw
   * ps_hist bucket counts (only when asked for) and count x mean. */
  uint64_t *b[SP_N];
  double n[SP_N], sum_us[SP_N];
} srv_snap;
static void stats_snap(const cfg *c, ps_client *cl, srv_snap *v, size_t n, bool buckets);
static void snaps_free(srv_snap *v, size_t n);

static void result_init(result *r, size_t nsrv) {
  memset(r, 0, sizeof *r);
  r->lat = ps_hist_create();
  r->cq = ps_hist_create();
  r->rtt = ps_hist_create();
  r->q_inflight_max = calloc(nsrv, sizeof *r->q_inflight_max);
  r->q_deferred_max = calloc(nsrv, sizeof *r->q_deferred_max);
  r->srv_mean_us = -1;
  r->win_shard = -1;
}

static void result_free(result *r) {
  ps_hist_destroy(&r->lat);
  ps_hist_destroy(&r->cq);
  ps_hist_destroy(&r->rtt);
  for (int p = 0; p < SP_N; p++) ps_hist_destroy(&r->win[p]);
  free(r->q_inflight_max);
  free(r->q_deferred_max);
  json_decref(r->srv);
}

static ps_status run_point(const cfg *c, ps_client **clients, ps_client *statcl, double rate,
                           result *res) {
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
    w->cl = clients[i];
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
    w->slots = calloc((size_t)w->cap, sizeof *w->slots);
    w->keybuf = malloc((size_t)c->keys * sizeof *w->keybuf);
    w->out = malloc((size_t)c->keys * (size_t)c->dim * sizeof(float));
    w->grads = malloc((size_t)c->keys * (size_t)c->dim * sizeof(float));
    w->lat = ps_hist_create();
    w->cq = ps_hist_create();
    w->rtt = ps_hist_create();
    if (!w->slots || !w->keybuf || !w->out || !w->grads || !w->lat || !w->cq || !w->rtt) {
      st = PS_ERR_NOMEM;
      break;
    }
    for (size_t j = 0; j < (size_t)c->keys * (size_t)c->dim; j++) w->grads[j] = 1e-4f;
  }
  if (st == PS_OK) {
    for (; started < T; started++)
      if (pthread_create(&th[started], NULL, worker_main, &ws[started]) != 0) {
        st = PS_ERR_INTERNAL;
        break;
      }
  }
  /* Meanwhile, sample the servers' queue depths (STATS is answered by the server's socket
   * thread, so a backlog there delays the sample too; it is a coarse view). */
  size_t nsrv = ps_client_servers(statcl);
  if (!res->q_inflight_max || !res->q_deferred_max) nsrv = 0;
  while (started == T && __atomic_load_n(&finished, __ATOMIC_ACQUIRE) < T) {
    ps_sleep_ns(100000000);
    if (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) >= T) break;
    srv_snap *sn = calloc(nsrv ? nsrv : 1, sizeof *sn);
    if (!sn) break;
    stats_snap(c, statcl, sn, nsrv, false);
    for (size_t i = 0; i < nsrv; i++) {
      if (sn[i].inflight > res->q_inflight_max[i]) res->q_inflight_max[i] = sn[i].inflight;
      if (sn[i].deferred > res->q_deferred_max[i]) res->q_deferred_max[i] = sn[i].deferred;
    }
    snaps_free(sn, nsrv);
    free(sn);
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  uint64_t last = 0;
  for (int i = 0; i < T; i++) {
    worker *w = &ws[i];
    if (st == PS_OK) {
      ps_hist_merge(res->lat, w->lat);
      ps_hist_merge(res->cq, w->cq);
      ps_hist_merge(res->rtt, w->rtt);
      res->requests += w->requests;
      res->errors += w->errors;
      res->timeouts += w->timeouts;
      res->keys += w->keys;
      res->late += w->late;
      if (w->last_done > last) last = w->last_done;
      if (!res->first_error[0] && w->first_error[0])
        snprintf(res->first_error, sizeof res->first_error, "%s", w->first_error);
    }
    free(w->slots);
    free(w->keybuf);
    free(w->out);
    free(w->grads);
    ps_hist_destroy(&w->lat);
    ps_hist_destroy(&w->cq);
    ps_hist_destroy(&w->rtt);
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
  return PS_OK;
}

/* ------------------------------------------------------------------ reporting */

static double us(uint64_t ns) { return (double)ns / 1e3; }

static json_t *lat_json(const ps_hist *h) {
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "p50", us(ps_hist_percentile(h, 50)),
                   "p90", us(ps_hist_percentile(h, 90)), "p99", us(ps_hist_percentile(h, 99)),
                   "p999", us(ps_hist_percentile(h, 99.9)), "p9999",
                   us(ps_hist_percentile(h, 99.99)), "max", us(ps_hist_max(h)), "mean",
                   ps_hist_mean(h) / 1e3);
}

/* A server-side window (see server_window): percentiles from the bucket difference, the exact
 * mean, and how many requests it holds. No max: a difference of histograms does not keep it. */
static json_t *win_json(const ps_hist *h, double mean_us) {
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:I}", "p50", us(ps_hist_percentile(h, 50)), "p90",
                   us(ps_hist_percentile(h, 90)), "p99", us(ps_hist_percentile(h, 99)), "p999",
                   us(ps_hist_percentile(h, 99.9)), "mean", mean_us, "count",
                   (json_int_t)ps_hist_count(h));
}

/* The servers' own view, from STATS: per-op histograms of receipt-to-reply time and of its
 * queue and service parts, cumulative since each server started. A point's share is the
 * difference of two snapshots (before and after it): bucket counts only grow, so subtracting
 * them gives exactly the histogram of the requests in between (percentiles within ps_hist's
 * 1%), and count x mean gives their exact mean. The window holds every pull and push the
 * server answered meanwhile, the warm-up's included. Queue depths are sampled during the run. */

/* Adds ops.<op>.<part>_buckets ([index, count] pairs) into dense counts; returns their sum. */
static double add_buckets(json_t *pairs, uint64_t *dense) {
  size_t nb = ps_hist_nbuckets(), i;
  double total = 0;
  json_t *pair;
  json_array_foreach(pairs, i, pair) {
    json_int_t idx = json_integer_value(json_array_get(pair, 0));
    json_int_t cnt = json_integer_value(json_array_get(pair, 1));
    if (idx < 0 || (size_t)idx >= nb || cnt <= 0) continue;
    dense[idx] += (uint64_t)cnt;
    total += (double)cnt;
  }
  return total;
}

static void stats_snap(const cfg *c, ps_client *cl, srv_snap *v, size_t n, bool buckets) {
  for (size_t i = 0; i < n; i++) {
    memset(&v[i], 0, sizeof v[i]);
    char *js = NULL;
    if (ps_client_stats(cl, i, &js) != PS_OK) continue;
    json_error_t jerr;
    json_t *doc = json_loads(js, 0, &jerr);
    free(js);
    if (!doc) continue;
    v[i].ok = true; /* an op absent from STATS has not been seen yet: zero counts */
    for (int p = 0; buckets && p < SP_N; p++)
      v[i].b[p] = calloc(ps_hist_nbuckets(), sizeof(uint64_t));
    json_t *ops = json_object_get(doc, "ops");
    const char *names[] = {"pull", "push"};
    for (int k = 0; k < 2; k++) {
      json_t *o = json_object_get(ops, names[k]);
      if (!o) continue;
      for (int p = 0; p < SP_N; p++) {
        char f[32];
        snprintf(f, sizeof f, "%s_buckets", sp_field[p]);
        json_t *pairs = json_object_get(o, f);
        snprintf(f, sizeof f, "%s_us", sp_field[p]);
        double mean = json_number_value(json_object_get(json_object_get(o, f), "mean"));
        double cnt = p == SP_TOTAL ? (double)json_integer_value(json_object_get(o, "count")) : 0;
        if (v[i].b[p]) cnt = add_buckets(pairs, v[i].b[p]);
        v[i].n[p] += cnt;
        v[i].sum_us[p] += cnt * mean;
      }
      if ((c->op == OP_PUSH) == (k == 1)) v[i].lat = json_incref(json_object_get(o, "latency_us"));
    }
    json_t *q = json_object_get(doc, "queue");
    v[i].inflight = json_integer_value(json_object_get(q, "inflight"));
    v[i].deferred = json_integer_value(json_object_get(q, "deferred"));
    json_decref(doc);
  }
}

static void snaps_free(srv_snap *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    json_decref(v[i].lat);
    for (int p = 0; p < SP_N; p++) free(v[i].b[p]);
  }
}

/* The histogram of the requests between two snapshots' bucket counts (NULL if none or no
 * memory). A server that restarted in between has fewer counts after: those clamp to 0. */
static ps_hist *hist_between(const uint64_t *b, const uint64_t *a, uint64_t *diff) {
  size_t nb = ps_hist_nbuckets(), first = nb, last = 0;
  for (size_t i = 0; i < nb; i++) {
    diff[i] = a[i] > b[i] ? a[i] - b[i] : 0;
    if (!diff[i]) continue;
    if (first == nb) first = i;
    last = i;
  }
  if (first == nb) return NULL;
  ps_hist *h = ps_hist_create();
  if (!h) return NULL;
  /* The true min and max are lost; the edge buckets bound them, and percentiles clamp there. */
  uint64_t lo, hi, unused;
  ps_hist_bucket_range(first, &lo, &unused);
  ps_hist_bucket_range(last, &unused, &hi);
  ps_hist_add_buckets(h, diff, nb, lo, hi);
  return h;
}

/* Fills r's server fields from snapshots before and after the point. */
static void server_window(result *r, const srv_snap *b, const srv_snap *a, size_t n) {
  r->srv_mean_us = -1;
  r->srv = json_array();
  uint64_t *diff = calloc(ps_hist_nbuckets(), sizeof *diff);
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_pack("{s:I}", "shard", (json_int_t)i);
    if (a[i].ok && b[i].ok) {
      double cnt = a[i].n[SP_TOTAL] - b[i].n[SP_TOTAL];
      double mean = cnt > 0 ? (a[i].sum_us[SP_TOTAL] - b[i].sum_us[SP_TOTAL]) / cnt : 0.0;
      json_object_set_new(e, "requests", json_integer((json_int_t)cnt));
      json_object_set_new(e, "mean_us", json_real(mean));
      if (a[i].lat) json_object_set(e, "latency_us_since_start", a[i].lat);
      ps_hist *h[SP_N] = {0};
      double m[SP_N] = {0};
      for (int p = 0; p < SP_N && diff; p++) {
        if (!a[i].b[p] || !b[i].b[p] || !(h[p] = hist_between(b[i].b[p], a[i].b[p], diff)))
          continue;
        double k = a[i].n[p] - b[i].n[p];
        m[p] = k > 0 ? (a[i].sum_us[p] - b[i].sum_us[p]) / k : 0.0;
        char f[32];
        snprintf(f, sizeof f, "%s_us", sp_field[p]);
        json_object_set_new(e, f, win_json(h[p], m[p]));
      }
      /* A sharded request waits for every shard: the slowest one is the breakdown's. */
      bool slowest = cnt > 0 && mean > r->srv_mean_us;
      if (slowest) {
        r->srv_mean_us = mean;
        r->win_shard = (int)i;
      }
      for (int p = 0; p < SP_N; p++) {
        if (slowest) {
          ps_hist_destroy(&r->win[p]);
          r->win[p] = h[p];
          r->win_mean_us[p] = m[p];
        } else {
          ps_hist_destroy(&h[p]);
        }
      }
    }
    json_object_set_new(e, "max_inflight_sampled", json_integer(r->q_inflight_max[i]));
    json_object_set_new(e, "max_deferred_sampled", json_integer(r->q_deferred_max[i]));
    json_array_append_new(r->srv, e);
  }
  free(diff);
}

/* The mean round trip less the server's mean receipt-to-reply time: network, socket queues on
 * both sides and the client's handling. The two means are over slightly different requests
 * (the server's window includes the warm-up), so a tiny or negative value means "nothing". */
static double network_mean_us(const result *r) {
  return ps_hist_mean(r->rtt) / 1e3 - r->srv_mean_us;
}

static json_t *result_json(const cfg *c, const result *r) {
  json_t *j = json_pack("{s:f, s:I, s:I, s:I, s:f, s:o}", "achieved_rate", r->achieved_rate,
                        "requests", (json_int_t)r->requests, "errors", (json_int_t)r->errors,
                        "timeouts", (json_int_t)r->timeouts, "keys_per_s", r->keys_per_s,
                        "latency_us", lat_json(r->lat));
  if (r->target_rate >= 0) json_object_set_new(j, "target_rate", json_real(r->target_rate));
  else json_object_set_new(j, "inflight", json_integer(c->inflight));
  json_object_set_new(j, "mode", json_string(c->closed ? "closed-loop" : "open-loop"));
  json_object_set_new(j, "elapsed_s", json_real(r->elapsed_s));
  json_object_set_new(j, "late_sends", json_integer((json_int_t)r->late));
  json_t *bd = json_object();
  json_object_set_new(bd, "client_queue", lat_json(r->cq));
  json_object_set_new(bd, "round_trip", lat_json(r->rtt));
  json_object_set_new(bd, "round_trip_mean", json_real(us((uint64_t)ps_hist_mean(r->rtt))));
  json_object_set_new(bd, "server_mean", json_real(r->srv_mean_us));
  /* Client queue + network + server queue + service: the network part is the mean round trip
   * less the server's mean time (a difference of percentiles is no percentile, so only a
   * mean); the server parts are the slowest shard's, over this point. */
  static const char *const bd_name[SP_N] = {"server_total", "server_queue", "server_service"};
  for (int p = 0; p < SP_N; p++)
    if (r->win[p]) json_object_set_new(bd, bd_name[p], win_json(r->win[p], r->win_mean_us[p]));
  if (r->win[SP_TOTAL]) {
    json_object_set_new(bd, "server_shard", json_integer(r->win_shard));
    json_object_set_new(bd, "network", json_pack("{s:f}", "mean", network_mean_us(r)));
  }
  if (r->srv) json_object_set(bd, "servers", r->srv);
  json_object_set_new(j, "breakdown_us", bd);
  return j;
}

static void print_header(FILE *f) {
  fprintf(f, "%10s %11s %9s %6s %8s %12s %9s %9s %9s %9s %9s %9s\n", "target/s", "achieved/s",
          "requests", "errors", "timeouts", "keys/s", "p50 us", "p90 us", "p99 us", "p99.9 us",
          "p99.99 us", "max us");
}

static void print_row(FILE *f, const result *r) {
  char tgt[32];
  if (r->target_rate >= 0) snprintf(tgt, sizeof tgt, "%.0f", r->target_rate);
  else snprintf(tgt, sizeof tgt, "closed");
  const ps_hist *h = r->lat;
  fprintf(f, "%10s %11.1f %9" PRIu64 " %6" PRIu64 " %8" PRIu64 " %12.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n",
          tgt, r->achieved_rate, r->requests, r->errors, r->timeouts, r->keys_per_s,
          us(ps_hist_percentile(h, 50)), us(ps_hist_percentile(h, 90)),
          us(ps_hist_percentile(h, 99)), us(ps_hist_percentile(h, 99.9)),
          us(ps_hist_percentile(h, 99.99)), us(ps_hist_max(h)));
}

static void print_part(const char *name, const ps_hist *h, double mean_us) {
  printf("%s p50 %.1f p99 %.1f mean %.1f us", name, us(ps_hist_percentile(h, 50)),
         us(ps_hist_percentile(h, 99)), mean_us);
}

static void print_breakdown(const result *r, size_t nsrv) {
  printf("  where time went: ");
  print_part("client queue (intended -> sent)", r->cq, ps_hist_mean(r->cq) / 1e3);
  printf("; ");
  print_part("round trip (sent -> reply)", r->rtt, ps_hist_mean(r->rtt) / 1e3);
  printf("\n");
  if (r->srv_mean_us >= 0) {
    int64_t qi = 0, qd = 0;
    for (size_t i = 0; i < nsrv; i++) {
      if (r->q_inflight_max[i] > qi) qi = r->q_inflight_max[i];
      if (r->q_deferred_max[i] > qd) qd = r->q_deferred_max[i];
    }
    printf("    network, socket queues and client handling ~%.1f us of the mean round trip "
           "(round trip - server receipt -> reply mean %.1f us, shard %d, this point)\n",
           network_mean_us(r), r->srv_mean_us, r->win_shard);
    if (r->win[SP_QUEUE] && r->win[SP_SERVICE]) {
      printf("    ");
      print_part("server queue (receipt -> store work)", r->win[SP_QUEUE],
                 r->win_mean_us[SP_QUEUE]);
      printf("; ");
      print_part("service (store work -> reply)", r->win[SP_SERVICE],
                 r->win_mean_us[SP_SERVICE]);
      printf("\n");
    }
    printf("    server queue depth (sampled every 100 ms): max inflight %" PRId64
           ", deferred %" PRId64 "\n",
           qi, qd);
  }
  if (r->late)
    printf("  %" PRIu64 " requests left more than 1 ms after their intended time (charged)\n",
           r->late);
  if (r->first_error[0]) printf("  first error: %s\n", r->first_error);
}

/* The knee: going up in rate, the last point before the first one that is not sustained
 * (achieved < 95% of target, errors or timeouts) or whose p99 exceeds 5x the lightest point's
 * p99. Stopping at the first failure keeps a lucky point above a failed one from counting. */
static int find_knee(result *rs, int n) {
  int ord[MAX_SWEEP];
  for (int i = 0; i < n; i++) ord[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort by target rate */
    for (int j = i; j > 0 && rs[ord[j]].target_rate < rs[ord[j - 1]].target_rate; j--) {
      int t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
  double base = -1;
  int knee = -1;
  for (int k = 0; k < n; k++) {
    result *r = &rs[ord[k]];
    bool ok = r->achieved_rate >= 0.95 * r->target_rate && r->errors == 0 && r->timeouts == 0;
    double p99 = (double)ps_hist_percentile(r->lat, 99);
    if (base < 0) base = p99;
    if (!ok || p99 > 5.0 * base) break;
    knee = ord[k];
  }
  return knee;
}

static int write_plot(const cfg *c, result *rs, int n) {
  char dat[] = "/tmp/ps-bench-plot-XXXXXX";
  int fd = mkstemp(dat);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(dat);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    const ps_hist *h = rs[i].lat;
    fprintf(f, "%.3f %.3f %.3f %.3f %.3f %.3f %.3f\n", rs[i].achieved_rate,
            us(ps_hist_percentile(h, 50)), us(ps_hist_percentile(h, 90)),
            us(ps_hist_percentile(h, 99)), us(ps_hist_percentile(h, 99.9)),
            us(ps_hist_percentile(h, 99.99)), us(ps_hist_max(h)) > 0 ? us(ps_hist_max(h)) : 1.0);
  }
  fclose(f);
  size_t L = strlen(c->plot);
  bool svg = L >= 4 && strcasecmp(c->plot + L - 4, ".svg") == 0;
  char title[256];
  snprintf(title, sizeof title, "ps-bench %s, %" PRId64 " keys x dim %" PRId64 ", %s, %s",
           c->op_s, c->keys, c->dim, c->dist_s, c->servers);
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    unlink(dat);
    return -1;
  }
  fprintf(g, "set terminal %s size 1000,650\n", svg ? "svg" : "png");
  fprintf(g, "set output '%s'\n", c->plot);
  fprintf(g, "set title \"%s\" noenhanced\n", title);
  fprintf(g, "set xlabel 'achieved rate (requests/s)'\nset ylabel 'latency (us, log)'\n");
  fprintf(g, "set logscale y\nset grid\nset key top left\n");
  fprintf(g, "plot '%s' u 1:2 w lp t 'p50', '' u 1:3 w lp t 'p90', '' u 1:4 w lp t 'p99', "
             "'' u 1:5 w lp t 'p99.9', '' u 1:6 w lp t 'p99.99', '' u 1:7 w lp t 'max'\n",
          dat);
  int rc = pclose(g);
  unlink(dat);
  return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ set-up */

static int declare_tables(const cfg *c, ps_client *cl) {
  for (int i = 0; i < c->tables; i++) {
    ps_table_spec t;
    char name[64];
    uint32_t id = (uint32_t)(c->table_id + i);
    snprintf(name, sizeof name, "pslat_%u", id);
    ps_table_spec_default(&t, id, name, (uint32_t)c->dim);
    t.consistency = PS_CONS_ASYNC; /* no step barrier: the bench has no workers */
    t.num_workers = 1;
    ps_status st = ps_client_declare(cl, &t);
    if (st != PS_OK) {
      fprintf(stderr, "ps-bench: declaring table %u (dim %" PRId64 ") failed: %s: %s\n", id,
              c->dim, ps_status_str(st), ps_client_error(cl));
      return -1;
    }
  }
  return 0;
}

/* Pulls every key of the key space once, so rows exist before the measurement (a first pull
 * of a key creates it). Eight requests in flight. */
static int prepopulate(const cfg *c, ps_client *cl) {
  uint64_t K = (uint64_t)c->key_space, B = (uint64_t)c->keys;
  if (K > 50000000ull)
    PS_WARN("--prepopulate of %" PRIu64 " keys per table will take a while", K);
  enum { DEPTH = 8 };
  uint64_t *keys = malloc(B * sizeof *keys);
  float *out = malloc(B * (size_t)c->dim * sizeof(float));
  ps_client_req *rq[DEPTH] = {0};
  if (!keys || !out) {
    free(keys);
    free(out);
    return -1;
  }
  uint64_t t0 = ps_now_ns();
  int rc = 0;
  for (int t = 0; t < c->tables && rc == 0; t++) {
    uint32_t table = (uint32_t)(c->table_id + t);
    uint64_t pos = 0;
    for (size_t it = 0; rc == 0; it++) {
      ps_client_req **slot = &rq[it % DEPTH];
      if (*slot && ps_client_wait(cl, slot) != PS_OK) {
        fprintf(stderr, "ps-bench: --prepopulate: %s\n", ps_client_error(cl));
        rc = -1;
        break;
      }
      if (pos >= K) break;
      uint64_t n = K - pos < B ? K - pos : B;
      for (uint64_t i = 0; i < n; i++) keys[i] = ps_keydist_key(pos + i);
      pos += n;
      if (ps_client_pull_start(cl, table, 0, keys, n, true, out, slot) != PS_OK) {
        fprintf(stderr, "ps-bench: --prepopulate: %s\n", ps_client_error(cl));
        rc = -1;
      }
    }
    for (int i = 0; i < DEPTH; i++)
      if (rq[i]) ps_client_wait(cl, &rq[i]);
  }
  if (rc == 0)
    PS_INFO("prepopulated %" PRIu64 " keys x %d tables in %.1f s", K, c->tables,
            ps_ns_to_s(ps_now_ns() - t0));
  free(keys);
  free(out);
  return rc;
}

int main(int argc, char **argv) {
  cfg c = {.servers = NULL,
           .op_s = "pull",
           .dist_s = "uniform",
           .arrivals_s = "constant",
           .level = "warn",
           .mix = 0.9,
           .rate = 0,
           .duration = 10,
           .warmup = 1,
           .keys = 512,
           .dim = 16,
           .key_space = 1000000,
           .requests = 0,
           .seed = 1,
           .tables = 1,
           .table_id = 1,
           .threads = 1,
           .connections = 0,
           .inflight = 0,
           .timeout_ms = 10000,
           .pool_n = 1 << 22};
  bool unique = false;
  ps_cli_opt opts[] = {
      {"servers", 's', PS_CLI_STRING, &c.servers, "URL,...", "ps-server endpoints, shard order",
       true, 0, 0},
      {"op", 0, PS_CLI_STRING, &c.op_s, "OP", "pull|push|mixed", false, 0, 0},
      {"mix", 0, PS_CLI_DOUBLE, &c.mix, "F", "read fraction of --op mixed (0..1)", false, 0, 1},
      {"keys", 'k', PS_CLI_I64, &c.keys, "N", "keys per request", false, 1, 1 << 22},
      {"dim", 0, PS_CLI_I64, &c.dim, "D", "embedding dimension", false, 1, 4096},
      {"key-space", 0, PS_CLI_I64, &c.key_space, "K", "distinct keys (ranks 0..K-1)", false, 1,
       9007199254740992.0},
      {"dist", 0, PS_CLI_STRING, &c.dist_s, "DIST", "uniform|zipf:A (A > 0, e.g. zipf:1.1)",
       false, 0, 0},
      {"rate", 'r', PS_CLI_DOUBLE, &c.rate, "R", "open loop: target requests/s (all threads)",
       false, 0, 1e9},
      {"arrivals", 0, PS_CLI_STRING, &c.arrivals_s, "A", "constant|poisson (open loop)", false, 0,
       0},
      {"closed-loop", 0, PS_CLI_FLAG, &c.closed, NULL,
       "keep --inflight requests outstanding instead of a rate", false, 0, 0},
      {"inflight", 'q', PS_CLI_INT, &c.inflight, "Q",
       "closed loop: requests in flight (default 1); open loop: window cap (default 1000)", false,
       1, 1 << 20},
      {"duration", 'd', PS_CLI_DOUBLE, &c.duration, "S", "measured seconds per point", false, 0.001,
       1e6},
      {"warmup", 0, PS_CLI_DOUBLE, &c.warmup, "S", "unmeasured seconds before each point", false,
       0, 1e6},
      {"requests", 'n', PS_CLI_I64, &c.requests, "N",
       "measured requests per point instead of --duration", false, 0, 1e15},
      {"sweep", 0, PS_CLI_STRING, &c.sweep_s, "R1,R2,...",
       "open loop at each rate in turn; prints the latency-throughput table and the knee", false,
       0, 0},
      {"tables", 0, PS_CLI_INT, &c.tables, "N", "tables, requests spread uniformly", false, 1, 1024},
      {"table-id", 0, PS_CLI_INT, &c.table_id, "ID", "first table id", false, 1, 65535},
      {"threads", 't', PS_CLI_INT, &c.threads, "T", "sender threads, one connection set each",
       false, 1, 256},
      {"connections", 'c', PS_CLI_INT, &c.connections, "C", "same as --threads", false, 0, 256},
      {"prepopulate", 0, PS_CLI_FLAG, &c.prepopulate, NULL, "pull every key once before the run",
       false, 0, 0},
      {"unique", 0, PS_CLI_FLAG, &unique, NULL,
       "skip client-side de-duplication (only for keys known distinct, e.g. uniform over a huge space)", false, 0, 0},
      {"key-pool", 0, PS_CLI_I64, &c.pool_n, "N",
       "keys drawn before the run; each request copies a random window (0 = draw per request)",
       false, 0, 1 << 28},
      {"timeout-ms", 0, PS_CLI_INT, &c.timeout_ms, "MS", "per-request timeout", false, 1,
       86400000},
      {"json", 'j', PS_CLI_STRING, &c.json, "FILE", "write results as JSON", false, 0, 0},
      {"plot", 0, PS_CLI_STRING, &c.plot, "FILE", "latency vs throughput plot (.png or .svg)",
       false, 0, 0},
      {"seed", 0, PS_CLI_I64, &c.seed, "S", "random seed", false, 0, 0},
      {"log-level", 0, PS_CLI_STRING, &c.level, "L", "debug|info|warn|error|off", false, 0, 0},
  };
  ps_cli cli = {"ps-bench",
                "Open-loop tail-latency load generator for ps-server (latency measured from each "
                "request's intended send time). Exit 0; 3 if any request failed or timed out; 2 "
                "bad arguments; 1 set-up failure.",
                NULL, opts, sizeof opts / sizeof *opts};
  int prc = ps_cli_parse(&cli, argc, argv, NULL, stderr);
  if (prc == PS_CLI_HELP) return 0;
  if (prc != PS_CLI_OK) return 2;
  c.unique = unique;
  if (ps_log_apply_level("ps-bench", c.level) != 0) return 2;
  ps_log_set_tag("bench");
  if (!strcmp(c.op_s, "pull")) c.op = OP_PULL;
  else if (!strcmp(c.op_s, "push")) c.op = OP_PUSH;
  else if (!strcmp(c.op_s, "mixed")) c.op = OP_MIXED;
  else {
    fprintf(stderr, "ps-bench: --op: '%s' is not pull|push|mixed\n", c.op_s);
    return 2;
  }
  if (!strcmp(c.dist_s, "uniform")) c.zipf_a = 0;
  else if (!strncmp(c.dist_s, "zipf:", 5)) {
    if (ps_parse_double(c.dist_s + 5, &c.zipf_a) != 0 || !(c.zipf_a > 0) || c.zipf_a > 100) {
      fprintf(stderr, "ps-bench: --dist: '%s': the Zipf exponent must be a number in (0, 100]\n",
              c.dist_s);
      return 2;
    }
  } else {
    fprintf(stderr, "ps-bench: --dist: '%s' is not uniform|zipf:A\n", c.dist_s);
    return 2;
  }
  if (!strcmp(c.arrivals_s, "constant")) c.poisson = false;
  else if (!strcmp(c.arrivals_s, "poisson")) c.poisson = true;
  else {
    fprintf(stderr, "ps-bench: --arrivals: '%s' is not constant|poisson\n", c.arrivals_s);
    return 2;
  }
  if (c.connections) c.threads = c.connections;
  if (c.table_id + c.tables - 1 > 65535) {
    fprintf(stderr, "ps-bench: --table-id %d + --tables %d goes past table id 65535\n", c.table_id,
            c.tables);
    return 2;
  }
  double rates[MAX_SWEEP];
  int nrates = 0;
  if (c.sweep_s) {
    if (c.closed || c.rate > 0) {
      fprintf(stderr, "ps-bench: --sweep is open loop and takes the rates itself (no --rate or "
                      "--closed-loop)\n");
      return 2;
    }
    char *items[MAX_SWEEP];
    int n = ps_split_list(c.sweep_s, ',', items, MAX_SWEEP);
    if (n <= 0) {
      fprintf(stderr, "ps-bench: --sweep: '%s' is not a list of at most %d rates\n", c.sweep_s,
              MAX_SWEEP);
      return 2;
    }
    for (int i = 0; i < n; i++) {
      if (ps_parse_double(items[i], &rates[i]) != 0 || !(rates[i] > 0)) {
        fprintf(stderr, "ps-bench: --sweep: '%s' is not a positive rate\n", items[i]);
        free(items[0]);
        return 2;
      }
    }
    free(items[0]);
    nrates = n;
  } else if (c.closed) {
    if (c.rate > 0) {
      fprintf(stderr, "ps-bench: --rate and --closed-loop exclude each other\n");
      return 2;
    }
    if (!c.inflight) c.inflight = 1;
    if (c.inflight < c.threads) {
      fprintf(stderr, "ps-bench: --inflight %d is below --threads %d\n", c.inflight, c.threads);
      return 2;
    }
    rates[0] = -1;
    nrates = 1;
  } else {
    if (!(c.rate > 0)) {
      fprintf(stderr, "ps-bench: give --rate R (open loop), --closed-loop, or --sweep\n");
      return 2;
    }
    rates[0] = c.rate;
    nrates = 1;
  }
  if (!c.inflight) c.inflight = 1000;
  if (c.inflight < c.threads) c.inflight = c.threads;
  if ((double)c.keys * (double)c.dim * 4.0 > 256.0 * 1048576.0) {
    fprintf(stderr, "ps-bench: --keys x --dim is over 256 MiB per request\n");
    return 2;
  }
  if (c.pool_n) {
    if (c.pool_n < 4 * c.keys) c.pool_n = 4 * c.keys;
    c.pool = malloc((size_t)c.pool_n * sizeof *c.pool);
    ps_keydist kd;
    ps_rng rng = {ps_mix64((uint64_t)c.seed ^ 0x706f6f6cull)};
    if (!c.pool || ps_keydist_init(&kd, (uint64_t)c.key_space, c.zipf_a) != 0) {
      fprintf(stderr, "ps-bench: cannot allocate a key pool of %" PRId64 " keys\n", c.pool_n);
      return 1;
    }
    for (int64_t i = 0; i < c.pool_n; i++) c.pool[i] = ps_keydist_key(ps_keydist_rank(&kd, &rng));
  }
  /* Sleeps of tens of microseconds must be that long, not the default 50 us slack more. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

  ps_client_options co;
  ps_client_options_default(&co);
  co.timeout_ms = (uint32_t)c.timeout_ms;
  ps_client **clients = calloc((size_t)c.threads + 1, sizeof *clients);
  if (!clients) return 1;
  int rc = 0;
  for (int i = 0; i <= c.threads; i++) {
    ps_status st = ps_client_create_list(c.servers, &co, &clients[i]);
    if (st != PS_OK) {
      fprintf(stderr, "ps-bench: --servers '%s': %s\n", c.servers, ps_status_str(st));
      rc = 2;
      goto out;
    }
  }
  /* clients[threads] is the control connection: declare, prepopulate, STATS. Every sender
   * declares too (idempotent), since a client learns a table's dim from its declaration. */
  for (int i = 0; i <= c.threads; i++)
    if (declare_tables(&c, clients[i]) != 0) {
      rc = 1;
      goto out;
    }
  if (c.prepopulate && prepopulate(&c, clients[c.threads]) != 0) {
    rc = 1;
    goto out;
  }
  ps_client *statcl = clients[c.threads];
  result res[MAX_SWEEP];
  int nres = 0;
  printf("ps-bench: %s, %" PRId64 " keys x dim %" PRId64 ", %s over %" PRId64
         " keys, %d table(s), %d thread(s), %zu server(s), %s%s\n",
         c.op_s, c.keys, c.dim, c.dist_s, c.key_space, c.tables, c.threads,
         ps_client_servers(statcl), c.closed ? "closed loop" : "open loop",
         c.closed ? "" : (c.poisson ? " (poisson)" : " (constant)"));
  if (c.closed) printf("  %d request(s) in flight\n", c.inflight);
  bool header = false;
  size_t nsrv = ps_client_servers(statcl);
  srv_snap *before = calloc(nsrv, sizeof *before), *after = calloc(nsrv, sizeof *after);
  if (!before || !after) {
    free(before);
    free(after);
    rc = 1;
    goto out;
  }
  for (int i = 0; i < nrates; i++) {
    result_init(&res[i], nsrv);
    stats_snap(&c, statcl, before, nsrv, true);
    ps_status st = run_point(&c, clients, statcl, rates[i], &res[i]);
    nres = i + 1;
    stats_snap(&c, statcl, after, nsrv, true);
    server_window(&res[i], before, after, nsrv);
    snaps_free(before, nsrv);
    snaps_free(after, nsrv);
    if (st != PS_OK) {
      fprintf(stderr, "ps-bench: run failed: %s\n", ps_status_str(st));
      rc = 1;
      goto report;
    }
    if (!header) print_header(stdout);
    header = true;
    print_row(stdout, &res[i]);
    print_breakdown(&res[i], nsrv);
    fflush(stdout);
  }
  if (nrates > 1 || c.sweep_s) {
    printf("\nlatency vs throughput:\n");
    print_header(stdout);
    for (int i = 0; i < nres; i++) print_row(stdout, &res[i]);
    int k = find_knee(res, nres);
    if (k >= 0) {
      printf("knee: %.0f requests/s (%.0f keys/s): the last rate, going up, sustained (>= 95%% "
             "achieved, no errors) with p99 <= 5x the lightest point's p99\n",
             res[k].target_rate, res[k].keys_per_s);
      /* The point closest to half the knee: is the tail tight there? */
      int h = -1;
      for (int i = 0; i < nres; i++)
        if (h < 0 || fabs(res[i].target_rate - res[k].target_rate / 2) <
                         fabs(res[h].target_rate - res[k].target_rate / 2))
          h = i;
      double p50 = (double)ps_hist_percentile(res[h].lat, 50);
      double p99 = (double)ps_hist_percentile(res[h].lat, 99);
      printf("at %.0f requests/s (nearest half the knee): p99/p50 = %.2f (%s)\n",
             res[h].target_rate, p50 > 0 ? p99 / p50 : 0.0,
             p50 > 0 && p99 <= 2 * p50 ? "within 2x" : "over 2x");
    } else {
      printf("knee: none of the rates was sustained\n");
    }
  }
report:
  for (int i = 0; i < nres; i++)
    if (res[i].errors || res[i].timeouts) rc = rc ? rc : 3;
  if (c.json && nres) {
    json_t *doc;
    if (c.sweep_s) {
      doc = json_array();
      for (int i = 0; i < nres; i++) json_array_append_new(doc, result_json(&c, &res[i]));
    } else {
      doc = result_json(&c, &res[0]);
    }
    if (json_dump_file(doc, c.json, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
      fprintf(stderr, "ps-bench: --json: cannot write '%s': %s\n", c.json, strerror(errno));
      rc = 1;
    }
    json_decref(doc);
  }
  if (c.plot && nres) {
    if (write_plot(&c, res, nres) != 0) {
      fprintf(stderr, "ps-bench: --plot: gnuplot failed to write '%s'\n", c.plot);
      rc = rc ? rc : 1;
    }
  }
  for (int i = 0; i < nres; i++) result_free(&res[i]);
  free(before);
  free(after);
out:
  for (int i = 0; i <= c.threads; i++) ps_client_destroy(&clients[i]);
  free(clients);
  free(c.pool);
  return rc;
}
