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
 * service.
 *
 * This file is main: parse (ps_bench_flags.c), build the clients and tables, run each point
 * between two STATS snapshots (ps_bench_load.c, ps_bench_stats.c), report
 * (ps_bench_report.c). */

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "ps_bench_int.h"
#include "ps_log.h"

/* Connects threads + 1 clients (the last one is the control connection: declare, prepopulate,
 * STATS), declares the tables on every one (idempotent; a client learns a table's dim from its
 * declaration) or attaches to --table by name (its id and dim into c), and prepopulates.
 * Returns 0 or main's exit code. */
static int build(ps_bench_cfg *c, ps_client **clients) {
  ps_client_options co;
  ps_client_options_default(&co);
  co.timeout_ms = (uint32_t)c->timeout_ms;
  memcpy(co.curve_secret, c->curve_secret, sizeof co.curve_secret);
  memcpy(co.curve_server, c->curve_server, sizeof co.curve_server);
  for (int i = 0; i <= c->threads; i++) {
    ps_error err;
    ps_status st = ps_client_create_list(c->servers, &co, &clients[i], &err);
    if (st != PS_OK) {
      PS_ERROR("%s", err.msg);
      fprintf(stderr, "ps-bench: --servers '%s': %s\n", c->servers, ps_status_str(st));
      return 2;
    }
  }
  for (int i = 0; i <= c->threads; i++)
    if (c->table_name ? ps_bench_attach_table(c, clients[i], i == 0) != 0
                      : ps_bench_declare_tables(c, clients[i]) != 0)
      return 1;
  if (c->prepopulate && ps_bench_prepopulate(c, clients[c->threads]) != 0) return 1;
  return 0;
}

/* Runs every point, each between two STATS snapshots, printing its row as it ends; *nres
 * counts the points that ran (a failed one included). Returns 0 or main's exit code. */
static int run(const ps_bench_cfg *c, ps_client **clients, const double *rates, int nrates,
               ps_bench_result *res, int *nres) {
  ps_client *statcl = clients[c->threads];
  size_t nsrv = ps_client_servers(statcl);
  ps_bench_snap *before = calloc(nsrv, sizeof *before), *after = calloc(nsrv, sizeof *after);
  int rc = 0;
  if (!before || !after) rc = 1;
  bool header = false;
  for (int i = 0; i < nrates && rc == 0; i++) {
    ps_bench_result_init(&res[i], nsrv);
    ps_bench_stats_snap(c, statcl, before, nsrv, true);
    ps_status st = ps_bench_run_point(c, clients, statcl, NULL, rates[i], &res[i]);
    *nres = i + 1;
    ps_bench_stats_snap(c, statcl, after, nsrv, true);
    ps_bench_server_window(c, &res[i], before, after, nsrv);
    ps_bench_snaps_free(before, nsrv);
    ps_bench_snaps_free(after, nsrv);
    if (st != PS_OK) {
      fprintf(stderr, "ps-bench: run failed: %s\n", ps_status_str(st));
      rc = 1;
      break;
    }
    if (!header) ps_bench_print_header(stdout);
    header = true;
    ps_bench_print_row(stdout, &res[i]);
    ps_bench_print_breakdown(c, &res[i], nsrv);
    fflush(stdout);
  }
  free(before);
  free(after);
  return rc;
}

/* --op score: one ps-serve client per thread (HTTP: as many connections as its share of the
 * in-flight window), each point run without STATS (ps-serve has none; its /metrics has the
 * server's side). Returns main's exit code. */
static int run_score(const ps_bench_cfg *c, const double *rates, int nrates, ps_bench_result *res,
                     int *nres) {
  ps_bench_scorer **sc = calloc((size_t)c->threads, sizeof *sc);
  int rc = sc ? 0 : 1;
  for (int i = 0; i < c->threads && rc == 0; i++) {
    int cap = c->inflight / c->threads + (i < c->inflight % c->threads ? 1 : 0);
    if (ps_bench_scorer_create(c, cap < 1 ? 1 : cap, &sc[i]) != 0) rc = 2;
  }
  if (rc == 0)
    printf("ps-bench: score, %" PRId64 " candidate(s) a request from %zu lines of %s, %s, %d "
           "thread(s), %s%s\n", c->candidates, c->score_n, c->score_lines, c->url, c->threads,
           c->closed ? "closed loop" : "open loop", c->closed ? "" : (c->poisson ? " (poisson)" : " (constant)"));
  for (int i = 0; i < nrates && rc == 0; i++) {
    ps_bench_result_init(&res[i], 0);
    ps_status st = ps_bench_run_point(c, NULL, NULL, sc, rates[i], &res[i]);
    *nres = i + 1;
    if (st != PS_OK) {
      fprintf(stderr, "ps-bench: run failed: %s\n", ps_status_str(st));
      rc = 1;
      break;
    }
    if (i == 0) ps_bench_print_header(stdout);
    ps_bench_print_row(stdout, &res[i]);
    ps_bench_print_breakdown(c, &res[i], 0);
    fflush(stdout);
  }
  for (int i = 0; sc && i < c->threads; i++) ps_bench_scorer_destroy(&sc[i]);
  free(sc);
  return rc;
}

int main(int argc, char **argv) {
  /* A server that goes away must end in a message, never a silent SIGPIPE. */
  signal(SIGPIPE, SIG_IGN);
  ps_bench_cfg c;
  double rates[PS_BENCH_MAX_SWEEP];
  int nrates = 0;
  int rc = ps_bench_flags_parse(argc, argv, &c, rates, &nrates);
  if (rc != PS_BENCH_RUN) return rc;
  if (ps_bench_key_pool(&c) != 0) {
    fprintf(stderr, "ps-bench: cannot allocate a key pool of %" PRId64 " keys\n", c.pool_n);
    free(c.pool);
    return 1;
  }
  /* Sleeps of tens of microseconds must be that long, not the default 50 us slack more. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

  ps_bench_result res[PS_BENCH_MAX_SWEEP];
  int nres = 0;
  if (c.op == PS_BENCH_OP_SCORE) {
    rc = run_score(&c, rates, nrates, res, &nres);
    if (rc == 0 && (nrates > 1 || c.sweep_s)) ps_bench_print_sweep(&c, res, nres);
    for (int i = 0; i < nres; i++)
      if (res[i].errors || res[i].timeouts) rc = rc ? rc : 3;
    rc = ps_bench_write_outputs(&c, res, nres, rc);
    for (int i = 0; i < nres; i++) ps_bench_result_free(&res[i]);
    free(c.score_buf);
    free(c.score_off);
    return rc;
  }
  ps_client **clients = calloc((size_t)c.threads + 1, sizeof *clients);
  if (!clients) return 1;
  rc = build(&c, clients);
  if (rc == 0) {
    printf("ps-bench: %s, %" PRId64 " keys x dim %" PRId64 ", %s over %" PRId64
           " keys, %d table(s), %d thread(s), %zu server(s), %s%s\n",
           c.op_s, c.keys, c.dim, c.dist_s, c.key_space, c.tables, c.threads,
           ps_client_servers(clients[c.threads]), c.closed ? "closed loop" : "open loop",
           c.closed ? "" : (c.poisson ? " (poisson)" : " (constant)"));
    if (c.closed) printf("  %d request(s) in flight\n", c.inflight);
    rc = run(&c, clients, rates, nrates, res, &nres);
    if (rc == 0 && (nrates > 1 || c.sweep_s)) ps_bench_print_sweep(&c, res, nres);
    for (int i = 0; i < nres; i++)
      if (res[i].errors || res[i].timeouts) rc = rc ? rc : 3;
    rc = ps_bench_write_outputs(&c, res, nres, rc);
  }
  for (int i = 0; i < nres; i++) ps_bench_result_free(&res[i]);
  for (int i = 0; i <= c.threads; i++) ps_client_destroy(&clients[i]);
  free(clients);
  free(c.pool);
  return rc;
}
