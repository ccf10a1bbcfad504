/* ps_bench_int.h: what the files of ps-bench share — the run's configuration (flags, in
 * ps_bench_flags.c), a measured point's result (load generation fills it, ps_bench_load.c),
 * the servers' STATS snapshots and the queue/service breakdown (ps_bench_stats.c), and the
 * report (text, JSON, plot; ps_bench_report.c, with the knee and the plot script over plain
 * figures in ps_bench_present.c). main (ps_bench.c) strings them together.
 *
 * The latency-critical part — the per-thread send/reap loop — stays whole inside
 * ps_bench_load.c; nothing it calls per request crosses a file. */
#ifndef PS_BENCH_INT_H
#define PS_BENCH_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ps_client.h"
#include "ps_hist.h"

enum { PS_BENCH_OP_PULL, PS_BENCH_OP_PUSH, PS_BENCH_OP_MIXED, PS_BENCH_OP_SCORE };
/* A request's kind, as the per-op figures index it (push = 1, so `is_push` indexes). */
enum { PS_BENCH_OPS = 2 };
extern const char *const ps_bench_op_name[PS_BENCH_OPS]; /* "pull", "push" */
#define PS_BENCH_MAX_SWEEP 64

typedef struct ps_bench_cfg {
  const char *servers, *op_s, *dist_s, *arrivals_s, *sweep_s, *json, *plot, *level;
  const char *table_name; /* --table: attach to this table by name (pulls only) */
  double mix, rate, duration, warmup;
  double knee_p99_ms; /* --knee-p99-ms: the knee's absolute p99 bound (0: 5x the lightest) */
  int64_t keys, dim, key_space, requests, seed;
  int tables, table_id, threads, connections, inflight, timeout_ms;
  int queue_sample_ms; /* --queue-sample-ms: STATS during the load every MS (0: never) */
  bool closed, prepopulate, poisson, unique;
  int op;
  double zipf_a;
  int64_t pool_n;          /* --key-pool: pre-drawn keys (0 = draw per request) */
  uint64_t *pool;
  const char *curve_secret_file, *curve_server_file; /* --curve-secret, --curve-server */
  char curve_secret[41], curve_server[41];           /* their keys ("": no CURVE) */
  /* --bag-size LO..HI: multi-hot requests. --keys is then the bags of a request, each of
   * LO..HI ids (uniform), and the request's ids are de-duplicated as ps-worker does (ps_dedup)
   * before its unique rows are sent. bag_hi == 0: off (a request is --keys keys). */
  const char *bag_s;
  int64_t bag_lo, bag_hi;
  /* --op score: ps-serve at --url (http://, tcp:// or ipc://), requests of --candidates lines
   * (kept in keys too, so keys/s is candidates/s) of --score-lines, read into score_buf with
   * the offsets of its score_n lines (score_off[score_n]: the end). */
  const char *url, *score_lines;
  int64_t candidates;
  char *score_buf;
  size_t *score_off, score_n;
} ps_bench_cfg;

/* The most ids one request can hold: --keys, or --keys x the longest bag. */
static inline int64_t ps_bench_max_ids(const ps_bench_cfg *c) {
  return c->bag_hi ? c->keys * c->bag_hi : c->keys;
}

/* The parts of a server's time, as STATS names them (ops.<op>.<part>_us and _buckets): the
 * total (receipt -> reply) and its split at the start of the store work. */
enum { PS_BENCH_SP_TOTAL, PS_BENCH_SP_QUEUE, PS_BENCH_SP_SERVICE, PS_BENCH_SP_N };
extern const char *const ps_bench_sp_field[PS_BENCH_SP_N];

/* One op's share of a point (--op mixed reports pulls and pushes apart). */
typedef struct ps_bench_op_figs {
  uint64_t requests, errors, timeouts, keys;
  uint64_t rows; /* rows sent: the unique ids of --bag-size requests, else = keys */
  ps_hist *lat; /* intended -> reply, as the point's lat */
} ps_bench_op_figs;

/* One measured point (a rate, or the closed loop). */
typedef struct ps_bench_result {
  double target_rate; /* < 0: closed loop */
  double achieved_rate, keys_per_s, rows_per_s, elapsed_s;
  uint64_t requests, errors, timeouts, keys, rows, late; /* rows: see ps_bench_op_figs */
  ps_hist *lat, *cq, *rtt;
  ps_bench_op_figs op[PS_BENCH_OPS]; /* pulls and pushes apart (lat above: together) */
  char first_error[256];
  double srv_mean_us;                       /* < 0: unknown */
  /* The slowest shard's receipt-to-reply time over this point and its split (see
   * ps_bench_sp_field): histograms of the point's requests (NULL: unknown) and exact means. */
  ps_hist *win[PS_BENCH_SP_N];
  double win_mean_us[PS_BENCH_SP_N];
  int win_shard;
  json_t *srv;                              /* per-shard server view */
  int64_t *q_inflight_max, *q_deferred_max; /* per shard, sampled during the run */
} ps_bench_result;

/* The servers' STATS, per shard (see ps_bench_stats_snap). */
typedef struct ps_bench_snap {
  bool ok;
  int64_t inflight, deferred;
  double stats_count; /* STATS requests the server answered (ops.stats.count) */
  json_t *lat; /* cumulative latency_us of the main op (borrowed into the result's JSON) */
  /* Pulls and pushes together, cumulative since the server started: per part, the raw
   * ps_hist bucket counts (only when asked for) and count x mean. */
  uint64_t *b[PS_BENCH_SP_N];
  double n[PS_BENCH_SP_N], sum_us[PS_BENCH_SP_N];
} ps_bench_snap;

/* ps_bench_flags.c: parses and checks the flags into c and the point rates. Returns
 * PS_BENCH_RUN to go on, else the exit code (0 after --help, 2 bad arguments). */
#define PS_BENCH_RUN (-1)
int ps_bench_flags_parse(int argc, char **argv, ps_bench_cfg *c, double *rates, int *nrates);

/* ps_bench_load.c */
int ps_bench_key_pool(ps_bench_cfg *c);
int ps_bench_declare_tables(const ps_bench_cfg *c, ps_client *cl);
/* --table NAME: attaches cl to it by name; the first call takes its id and dim into c, later
 * ones must find the same. 0, or -1 after one line on stderr. */
int ps_bench_attach_table(ps_bench_cfg *c, ps_client *cl, bool first);
int ps_bench_prepopulate(const ps_bench_cfg *c, ps_client *cl);
void ps_bench_result_init(ps_bench_result *r, size_t nsrv);
void ps_bench_result_free(ps_bench_result *r);
typedef struct ps_bench_scorer ps_bench_scorer;
/* One point: clients (and statcl, STATS) for ps-server's ops, or scorers (--op score; clients
 * and statcl NULL), one per thread. */
ps_status ps_bench_run_point(const ps_bench_cfg *c, ps_client **clients, ps_client *statcl,
                             ps_bench_scorer **scorers, double rate, ps_bench_result *res);

/* ps_bench_score.c: --op score's clients of ps-serve, one per sender thread (HTTP keep-alive
 * connections up to cap, or one ZeroMQ DEALER). Set-up failures print one line and return
 * -1; ps_bench_score_load returns main's exit code (2: no such file or no lines). */
typedef void (*ps_bench_score_done)(void *arg, uint32_t tag, bool ok, const char *msg);
int ps_bench_score_load(ps_bench_cfg *c);
int ps_bench_scorer_create(const ps_bench_cfg *c, int cap, ps_bench_scorer **out);
void ps_bench_scorer_destroy(ps_bench_scorer **s);
/* Sends --candidates lines from line pick (mod the file's) as request tag; -1 with err. */
int ps_bench_scorer_send(ps_bench_scorer *s, uint64_t pick, uint32_t tag, char *err, size_t errlen);
/* Takes in every reply there is, waiting up to wait_ms for one: done(arg, tag, ok, msg) each
 * (msg: the reply's status and first bytes, or why it failed). */
void ps_bench_scorer_poll(ps_bench_scorer *s, int wait_ms, ps_bench_score_done done, void *arg);
/* Request tag timed out: its late reply is ignored (HTTP: its connection is closed). */
void ps_bench_scorer_forget(ps_bench_scorer *s, uint32_t tag);

/* ps_bench_stats.c */
void ps_bench_stats_snap(const ps_bench_cfg *c, ps_client *cl, ps_bench_snap *v, size_t n,
                         bool buckets);
void ps_bench_snaps_free(ps_bench_snap *v, size_t n);
void ps_bench_sample_queues(const ps_bench_cfg *c, ps_client *cl, ps_bench_result *res,
                            size_t nsrv);
void ps_bench_server_window(const ps_bench_cfg *c, ps_bench_result *r, const ps_bench_snap *b,
                            const ps_bench_snap *a, size_t n);
double ps_bench_network_mean_us(const ps_bench_result *r);

/* ps_bench_report.c */
/* A server-side window: percentiles from a bucket difference, the exact mean, the count (no
 * max: a difference of histograms does not keep it). */
json_t *ps_bench_win_json(const ps_hist *h, double mean_us);
void ps_bench_print_header(FILE *f);
void ps_bench_print_row(FILE *f, const ps_bench_result *r);
void ps_bench_print_breakdown(const ps_bench_cfg *c, const ps_bench_result *r, size_t nsrv);
void ps_bench_print_sweep(const ps_bench_cfg *c, ps_bench_result *rs, int n);
json_t *ps_bench_result_json(const ps_bench_cfg *c, const ps_bench_result *r);
/* --json and --plot; returns rc updated as main's exit code. The --json document has one shape
 * for a single run and a sweep (docs/BENCH.md, "ps-bench --json"); its "format" is this. */
#define PS_BENCH_JSON_FORMAT "ps-bench/2"
int ps_bench_write_outputs(const ps_bench_cfg *c, ps_bench_result *rs, int n, int rc);

#endif
