/* ps_train_report: what a ps-worker run tells — rank 0's progress lines (throughput, mean loss
 * since the last line, ETA), the final "done" and phase-time lines, the --summary JSON, and the
 * --metrics-port Prometheus series.
 *
 * The Prometheus series are updated once per step from the loop's own phase timers (a delta
 * per phase), so serving /metrics costs the loop nothing but a few counter adds. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY

static const char *const k_phases[PS_TRAIN_NPHASES] = {"data", "pull", "compute", "allreduce",
                                                       "push", "push_wait", "optimizer"};
/* Row counters (issue 32), in the order of t->m_rows and t->rows_last. */
static const char *const k_rows[4][2] = {
    {"ember_worker_rows_pulled_total", "embedding rows pulled from the servers"},
    {"ember_worker_rows_refreshed_total", "rows sent again after a lookahead pull (changed)"},
    {"ember_worker_cache_hits_total", "row cache look-ups that found the row"},
    {"ember_worker_cache_lookups_total", "row cache look-ups"}};

static void rows_now(const ps_trainer *t, uint64_t v[4]) {
  v[0] = t->rows_pulled;
  v[1] = t->rows_refreshed;
  v[2] = t->cache_hits;
  v[3] = t->cache_lookups;
}

/* The time spent waiting on servers: for pulled rows and for the push/STEP replies. */
static double wait_s(const ps_trainer *t) { return t->t_pull + t->t_push_wait; }

ps_status ps_train_metrics_start(ps_trainer *t) {
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
  for (int i = 0; i < PS_TRAIN_NPHASES; i++) {
    const char *pv[] = {rank, k_phases[i]};
    TRY(ps_metric_series(f, pv, &t->m_phase[i]));
  }
  TRY(ps_metrics_counter(t->reg, "ember_worker_server_wait_seconds_total",
                         "time waiting on servers: pulled rows and push/STEP replies", rank_l, 1,
                         &f));
  TRY(ps_metric_series(f, rv, &t->m_wait));
  for (int i = 0; i < 4; i++) {
    TRY(ps_metrics_counter(t->reg, k_rows[i][0], k_rows[i][1], rank_l, 1, &f));
    TRY(ps_metric_series(f, rv, &t->m_rows[i]));
  }
  if (t->strm.cap) TRY(ps_train_stream_metrics(t));
  TRY(ps_metrics_add_process(t->reg));
  ps_error err;
  const char *bind = t->cfg->metrics_bind ? t->cfg->metrics_bind : "127.0.0.1";
  ps_status st = ps_http_create(bind, t->cfg->metrics_port, t->reg, NULL, NULL, &t->http, &err);
  if (st != PS_OK) {
    PS_ERROR("--metrics-port %d: cannot serve /metrics (%s)", t->cfg->metrics_port, err.msg);
    return st;
  }
  PS_INFO("metrics on http://%s:%d/metrics", bind, ps_http_port(t->http));
  return PS_OK;
}

void ps_train_metrics_update(ps_trainer *t, size_t n, double loss) {
  if (!t->reg) return;
  ps_counter_add(t->m_samples, n);
  if (n) ps_gauge_set(t->m_loss, loss);
  ps_gauge_set(t->m_step, (double)t->step);
  const double now[PS_TRAIN_NPHASES] = {t->t_data,      t->t_pull, t->t_compute, t->t_allreduce,
                                        t->t_push,      t->t_push_wait, t->t_opt};
  for (int i = 0; i < PS_TRAIN_NPHASES; i++) {
    ps_counter_add_f(t->m_phase[i], now[i] - t->phase_last[i]);
    if (i == 1 || i == 5) ps_counter_add_f(t->m_wait, now[i] - t->phase_last[i]);
    t->phase_last[i] = now[i];
  }
  uint64_t rows[4];
  rows_now(t, rows);
  for (int i = 0; i < 4; i++) {
    ps_counter_add(t->m_rows[i], rows[i] - t->rows_last[i]);
    t->rows_last[i] = rows[i];
  }
}

void ps_train_progress(ps_trainer *t, uint64_t t_start, uint64_t total_steps, int epoch) {
  double el = ps_train_since(t_start);
  double sps = el > 0 ? (double)t->samples * t->world / el : 0;
  double loss = t->loss_n ? t->loss_sum / (double)t->loss_n : NAN;
  char prog[128];
  ps_train_stream_progress(t, prog, sizeof prog);
  if (t->plan->train_stream || t->cfg->follow_input) { /* by time: no end to estimate */
    PS_INFO("step %" PRIu64 "  %.0f s  %" PRIu64 " samples  %.0f samples/s  loss %.5f%s", t->step,
            el, t->samples * (uint64_t)t->world, sps, loss, prog);
    t->loss_sum = 0;
    t->loss_n = 0;
    return;
  }
  char eta[32] = "?";
  if (total_steps && t->step > 0 && t->step <= total_steps) {
    double per = el / (double)t->step_this_run;
    snprintf(eta, sizeof eta, "%.0fs", per * (double)(total_steps - t->step));
  }
  /* Since the start, as samples/s: the wait on servers per step and its share of the time. */
  double steps = t->step_this_run ? (double)t->step_this_run : 1.0;
  double smp = t->samples ? (double)t->samples : 1.0;
  double hit = t->cache_lookups ? 100.0 * (double)t->cache_hits / (double)t->cache_lookups : 0;
  PS_INFO("step %" PRIu64 "%s%" PRIu64 " epoch %d  %.0f samples/s  loss %.5f  ETA %s  wait "
          "%.2f ms/step (%.0f%%)  rows/sample pulled %.2f refreshed %.2f  cache hits %.0f%%%s",
          t->step, total_steps ? "/" : "", total_steps, epoch + 1, sps, loss, eta,
          1e3 * wait_s(t) / steps, el > 0 ? 100.0 * wait_s(t) / el : 0,
          (double)t->rows_pulled / smp, (double)t->rows_refreshed / smp, hit, prog);
  t->loss_sum = 0;
  t->loss_n = 0;
}

static ps_status write_summary(ps_trainer *t, const ps_eval_result *er, bool have_eval,
                               uint64_t samples, uint64_t bad, uint64_t refreshed, double secs,
                               uint64_t hash) {
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
  json_object_set_new(j, "interaction", json_string(c->interaction));
  json_object_set_new(j, "wire", json_string(c->wire));
  uint64_t fo = 0, fo_ms = 0;
  ps_client_failovers(t->cl, &fo, &fo_ms); /* replicated shards: this rank's moves */
  json_object_set_new(j, "failovers", json_integer((json_int_t)fo));
  json_object_set_new(j, "failover_ms", json_integer((json_int_t)fo_ms));
  char hx[17];
  snprintf(hx, sizeof hx, "%016" PRIx64, hash);
  json_object_set_new(j, "dense_hash", json_string(hx));
  /* --lookahead: rows the refreshes carried, all ranks; the row cache's counters (rank 0). */
  json_object_set_new(j, "rows_refreshed", json_integer((json_int_t)refreshed));
  json_object_set_new(j, "cache_hits", json_integer((json_int_t)t->cache_hits));
  json_object_set_new(j, "cache_lookups", json_integer((json_int_t)t->cache_lookups));
  json_t *tm = json_object();
  json_object_set_new(tm, "data", json_real(t->t_data));
  json_object_set_new(tm, "pull", json_real(t->t_pull));
  json_object_set_new(tm, "compute", json_real(t->t_compute));
  json_object_set_new(tm, "allreduce", json_real(t->t_allreduce));
  json_object_set_new(tm, "push", json_real(t->t_push));
  json_object_set_new(tm, "push_wait", json_real(t->t_push_wait));
  json_object_set_new(tm, "wait", json_real(wait_s(t)));
  json_object_set_new(tm, "optimizer", json_real(t->t_opt));
  json_object_set_new(tm, "eval", json_real(t->t_eval));
  json_object_set_new(j, "seconds_rank0", tm);
  /* rank 0's wait on servers per step and as a share of its training time, and its rows */
  double steps = t->step_this_run ? (double)t->step_this_run : 1.0;
  double smp = t->samples ? (double)t->samples : 1.0;
  json_t *w = json_object();
  json_object_set_new(w, "wait_ms_per_step", json_real(1e3 * wait_s(t) / steps));
  json_object_set_new(w, "wait_share", json_real(secs > 0 ? wait_s(t) / secs : 0));
  json_object_set_new(w, "rows_pulled", json_integer((json_int_t)t->rows_pulled));
  json_object_set_new(w, "rows_refreshed", json_integer((json_int_t)t->rows_refreshed));
  json_object_set_new(w, "cache_hits", json_integer((json_int_t)t->cache_hits));
  json_object_set_new(w, "cache_lookups", json_integer((json_int_t)t->cache_lookups));
  json_object_set_new(w, "cache_max_age", json_integer((json_int_t)t->cache_max_age));
  json_object_set_new(w, "pulled_rows_per_sample", json_real((double)t->rows_pulled / smp));
  json_object_set_new(w, "refreshed_rows_per_sample",
                      json_real((double)t->rows_refreshed / smp));
  json_object_set_new(w, "cache_hit_rate",
                      json_real(t->cache_lookups ? (double)t->cache_hits /
                                                       (double)t->cache_lookups : 0));
  json_object_set_new(j, "servers_rank0", w);
  ps_train_stream_summary(t, j);
  int rc = json_dump_file(j, c->summary, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  json_decref(j);
  if (rc != 0) {
    PS_ERROR("cannot write the summary %s", c->summary);
    return PS_ERR_IO;
  }
  return PS_OK;
}

ps_status ps_train_report_done(ps_trainer *t, const ps_eval_result *er, bool have_eval,
                               const uint64_t counts[3], double secs, uint64_t hash) {
  const ps_train_config *c = t->cfg;
  double sps = secs > 0 ? (double)counts[0] / secs : 0;
  if (have_eval)
    PS_INFO("done: %" PRIu64 " steps, %" PRIu64 " samples in %.1f s (%.0f samples/s); test auc "
            "%.5f logloss %.5f accuracy %.4f on %" PRIu64 " samples; %" PRIu64 " bad lines",
            t->step, counts[0], secs, sps, er->auc, er->logloss, er->accuracy, er->n, counts[1]);
  else
    PS_INFO("done: %" PRIu64 " steps, %" PRIu64 " samples in %.1f s (%.0f samples/s); %" PRIu64
            " bad lines (no --test or --holdout: no evaluation)", t->step, counts[0], secs, sps,
            counts[1]);
  PS_INFO("time (rank 0): data %.1fs pull %.1fs compute %.1fs allreduce %.1fs push %.1fs "
          "push_wait %.1fs optimizer %.1fs eval %.1fs (waiting on servers %.1fs)", t->t_data,
          t->t_pull, t->t_compute, t->t_allreduce, t->t_push, t->t_push_wait, t->t_opt,
          t->t_eval, wait_s(t));
  if (c->summary) TRY(write_summary(t, er, have_eval, counts[0], counts[1], counts[2], secs, hash));
  return PS_OK;
}
