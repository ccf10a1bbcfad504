/* ps_bench_flags: ps-bench's command line — the flag table (its --help), the defaults, and
 * the checks across flags (open loop needs a rate, --sweep takes the rates itself, the closed
 * loop needs a window of at least one request per thread, a request stays under 256 MiB, a
 * --bag-size range is LO..HI with 1 <= LO <= HI).
 * Every refusal is one line on stderr and exit code 2, before anything connects. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_int.h"
#include "ps_cli.h"
#include "ps_curve.h"
#include "ps_log.h"

#define PS_BENCH_DIM 16 /* --dim's default (with --table: the table's own) */

int ps_bench_flags_parse(int argc, char **argv, ps_bench_cfg *c, double *rates, int *nrates) {
  *c = (ps_bench_cfg){.servers = NULL,
                       .op_s = "pull",
                       .dist_s = "uniform",
                       .arrivals_s = "constant",
                       .level = "warn",
                       .mix = 0.9,
                       .rate = 0,
                       .duration = 10,
                       .warmup = 1,
                       .keys = 512,
                       .dim = PS_BENCH_DIM,
                       .key_space = 1000000,
                       .requests = 0,
                       .seed = 1,
                       .tables = 1,
                       .table_id = 1,
                       .threads = 1,
                       .connections = 0,
                       .inflight = 0,
                       .timeout_ms = 10000,
                       .candidates = 64,
                       .pool_n = 1 << 22};
  bool unique = false;
  ps_cli_opt opts[] = {
      {"servers", 's', PS_CLI_STRING, &c->servers, "URL,...",
       "ps-server endpoints, shard order (required but for --op score)", false, 0, 0},
      {"op", 0, PS_CLI_STRING, &c->op_s, "OP",
       "pull|push|mixed, or score: ps-serve's scoring requests (--url, --score-lines)", false, 0, 0},
      {"url", 0, PS_CLI_STRING, &c->url, "URL",
       "--op score: ps-serve's http://HOST:PORT (--http) or tcp://HOST:PORT | ipc://PATH (--listen)",
       false, 0, 0},
      {"score-lines", 0, PS_CLI_STRING, &c->score_lines, "FILE",
       "--op score: the candidate rows, lines of the model's schema (a request takes the next "
       "--candidates from a random line on)", false, 0, 0},
      {"candidates", 0, PS_CLI_I64, &c->candidates, "N",
       "--op score: rows per request (default 64)", false, 1, 1 << 20},
      {"mix", 0, PS_CLI_DOUBLE, &c->mix, "F", "read fraction of --op mixed (0..1)", false, 0, 1},
      {"keys", 'k', PS_CLI_I64, &c->keys, "N", "keys per request", false, 1, 1 << 22},
      {"dim", 0, PS_CLI_I64, &c->dim, "D", "embedding dimension", false, 1, 4096},
      {"key-space", 0, PS_CLI_I64, &c->key_space, "K", "distinct keys (ranks 0..K-1)", false, 1,
       9007199254740992.0},
      {"dist", 0, PS_CLI_STRING, &c->dist_s, "DIST", "uniform|zipf:A (A > 0, e.g. zipf:1.1)",
       false, 0, 0},
      {"rate", 'r', PS_CLI_DOUBLE, &c->rate, "R", "open loop: target requests/s (all threads)",
       false, 0, 1e9},
      {"arrivals", 0, PS_CLI_STRING, &c->arrivals_s, "A", "constant|poisson (open loop)", false, 0,
       0},
      {"closed-loop", 0, PS_CLI_FLAG, &c->closed, NULL,
       "keep --inflight requests outstanding instead of a rate", false, 0, 0},
      {"inflight", 'q', PS_CLI_INT, &c->inflight, "Q",
       "closed loop: requests in flight (default 1); open loop: window cap (default 1000)", false,
       1, 1 << 20},
      {"duration", 'd', PS_CLI_DOUBLE, &c->duration, "S", "measured seconds per point", false, 0.001,
       1e6},
      {"warmup", 0, PS_CLI_DOUBLE, &c->warmup, "S", "unmeasured seconds before each point", false,
       0, 1e6},
      {"requests", 'n', PS_CLI_I64, &c->requests, "N",
       "measured requests per point instead of --duration", false, 0, 1e15},
      {"sweep", 0, PS_CLI_STRING, &c->sweep_s, "R1,R2,...",
       "open loop at each rate in turn; prints the latency-throughput table and the knee", false,
       0, 0},
      {"tables", 0, PS_CLI_INT, &c->tables, "N", "tables, requests spread uniformly", false, 1, 1024},
      {"table-id", 0, PS_CLI_INT, &c->table_id, "ID", "first table id", false, 1, 65535},
      {"table", 0, PS_CLI_STRING, &c->table_name, "NAME",
       "pull an existing table (e.g. ps-server --serve's) by name, its id and dim the servers'",
       false, 0, 0},
      {"threads", 't', PS_CLI_INT, &c->threads, "T", "sender threads, one connection set each",
       false, 1, 256},
      {"connections", 'c', PS_CLI_INT, &c->connections, "C", "same as --threads", false, 0, 256},
      {"prepopulate", 0, PS_CLI_FLAG, &c->prepopulate, NULL, "create every key's row before the run (a zero-gradient push each)",
       false, 0, 0},
      {"unique", 0, PS_CLI_FLAG, &unique, NULL,
       "skip client-side de-duplication (only for keys known distinct, e.g. uniform over a huge space)", false, 0, 0},
      {"key-pool", 0, PS_CLI_I64, &c->pool_n, "N",
       "keys drawn before the run; each request copies a random window (0 = draw per request)",
       false, 0, 1 << 28},
      {"timeout-ms", 0, PS_CLI_INT, &c->timeout_ms, "MS", "per-request timeout", false, 1,
       86400000},
      {"json", 'j', PS_CLI_STRING, &c->json, "FILE", "write the run as one JSON document (docs/BENCH.md)", false, 0, 0},
      {"plot", 0, PS_CLI_STRING, &c->plot, "FILE",
       "latency (ms) vs offered rate, knee marked (.png or .svg; FILE.gp keeps the script)",
       false, 0, 0},
      {"queue-sample-ms", 0, PS_CLI_INT, &c->queue_sample_ms, "MS",
       "sample the servers' queue depths by STATS every MS during the load (0 = never: each "
       "STATS delays the requests behind it)",
       false, 0, 60000},
      {"knee-p99-ms", 0, PS_CLI_DOUBLE, &c->knee_p99_ms, "MS",
       "--sweep's knee: its p99 bound in ms (0 = 5x the lightest point's p99)", false, 0, 1e9},
      {"seed", 0, PS_CLI_I64, &c->seed, "S", "random seed", false, 0, 0},
      {"bag-size", 0, PS_CLI_STRING, &c->bag_s, "LO..HI",
       "multi-hot requests: --keys bags of LO..HI ids each (uniform), de-duplicated as ps-worker "
       "does; rows/s counts the unique rows sent",
       false, 0, 0},
      {"log-level", 0, PS_CLI_STRING, &c->level, "L", "debug|info|warn|error|off", false, 0, 0},
      {"curve-secret", 0, PS_CLI_STRING, &c->curve_secret_file, "FILE",
       "CURVE: this client's secret key (ps-keygen); with --curve-server", false, 0, 0},
      {"curve-server", 0, PS_CLI_STRING, &c->curve_server_file, "FILE",
       "CURVE: the servers' public key (default: no CURVE)", false, 0, 0},
  };
  ps_cli cli = {"ps-bench",
                "Open-loop tail-latency load generator for ps-server (latency measured from each "
                "request's intended send time). Exit 0; 3 if any request failed or timed out; 2 "
                "bad arguments; 1 set-up failure.",
                NULL, opts, sizeof opts / sizeof *opts};
  int prc = ps_cli_run(&cli, argc, argv, NULL);
  if (prc >= 0) return prc;
  c->unique = unique;
  if (ps_log_apply_level("ps-bench", c->level) != 0) return 2;
  ps_log_set_tag("bench");
  if (!strcmp(c->op_s, "pull")) c->op = PS_BENCH_OP_PULL;
  else if (!strcmp(c->op_s, "push")) c->op = PS_BENCH_OP_PUSH;
  else if (!strcmp(c->op_s, "mixed")) c->op = PS_BENCH_OP_MIXED;
  else if (!strcmp(c->op_s, "score")) c->op = PS_BENCH_OP_SCORE;
  else {
    fprintf(stderr, "ps-bench: --op: '%s' is not pull|push|mixed|score\n", c->op_s);
    return 2;
  }
  if (c->op == PS_BENCH_OP_SCORE) {
    /* ps-serve, not ps-server: no tables, keys or STATS; --keys counts the candidates. */
    if (!c->url || !c->score_lines || c->servers || c->table_name || c->bag_s || c->prepopulate) {
      fprintf(stderr, "ps-bench: --op score takes --url URL and --score-lines FILE (and no "
                      "--servers, --table, --bag-size or --prepopulate)\n");
      return 2;
    }
    if (strncmp(c->url, "http://", 7) != 0 && strncmp(c->url, "tcp://", 6) != 0 &&
        strncmp(c->url, "ipc://", 6) != 0) {
      fprintf(stderr, "ps-bench: --url %s: give http://HOST:PORT, tcp://HOST:PORT or ipc://PATH\n",
              c->url);
      return 2;
    }
    if (c->curve_secret_file && strncmp(c->url, "http://", 7) == 0) {
      fprintf(stderr, "ps-bench: --curve-secret/--curve-server are for a ZeroMQ --url (tcp://, ipc://)\n");
      return 2;
    }
    c->keys = c->candidates;
    c->pool_n = 0;
  } else if (!c->servers || c->url || c->score_lines) {
    fprintf(stderr, "ps-bench: --op %s takes --servers URL,... (--url and --score-lines are for "
                    "--op score)\n", c->op_s);
    return 2;
  }
  if (!strcmp(c->dist_s, "uniform")) c->zipf_a = 0;
  else if (!strncmp(c->dist_s, "zipf:", 5)) {
    if (ps_parse_double(c->dist_s + 5, &c->zipf_a, NULL) != PS_OK || !(c->zipf_a > 0) || c->zipf_a > 100) {
      fprintf(stderr, "ps-bench: --dist: '%s': the Zipf exponent must be a number in (0, 100]\n",
              c->dist_s);
      return 2;
    }
  } else {
    fprintf(stderr, "ps-bench: --dist: '%s' is not uniform|zipf:A\n", c->dist_s);
    return 2;
  }
  if (!strcmp(c->arrivals_s, "constant")) c->poisson = false;
  else if (!strcmp(c->arrivals_s, "poisson")) c->poisson = true;
  else {
    fprintf(stderr, "ps-bench: --arrivals: '%s' is not constant|poisson\n", c->arrivals_s);
    return 2;
  }
  if (c->connections) c->threads = c->connections;
  /* --table reads a table as the servers hold it: nothing to declare, and nothing to write
   * (a serving shard refuses pushes; a training one's rows are not the bench's to change). */
  if (c->table_name && (c->op != PS_BENCH_OP_PULL || c->prepopulate || c->tables != 1 ||
                        c->table_id != 1 || c->dim != PS_BENCH_DIM)) {
    fprintf(stderr, "ps-bench: --table %s attaches read-only: --op pull, and no --prepopulate, "
                    "--tables, --table-id or --dim (the servers give its id and dim)\n",
            c->table_name);
    return 2;
  }
  if (c->table_id + c->tables - 1 > 65535) {
    fprintf(stderr, "ps-bench: --table-id %d + --tables %d goes past table id 65535\n", c->table_id,
            c->tables);
    return 2;
  }
  *nrates = 0;
  if (c->sweep_s) {
    if (c->closed || c->rate > 0) {
      fprintf(stderr, "ps-bench: --sweep is open loop and takes the rates itself (no --rate or "
                      "--closed-loop)\n");
      return 2;
    }
    char *items[PS_BENCH_MAX_SWEEP];
    int n = ps_split_list(c->sweep_s, ',', items, PS_BENCH_MAX_SWEEP);
    if (n <= 0) {
      fprintf(stderr, "ps-bench: --sweep: '%s' is not a list of at most %d rates\n", c->sweep_s,
              PS_BENCH_MAX_SWEEP);
      return 2;
    }
    for (int i = 0; i < n; i++) {
      if (ps_parse_double(items[i], &rates[i], NULL) != PS_OK || !(rates[i] > 0)) {
        fprintf(stderr, "ps-bench: --sweep: '%s' is not a positive rate\n", items[i]);
        free(items[0]);
        return 2;
      }
    }
    free(items[0]);
    *nrates = n;
  } else if (c->closed) {
    if (c->rate > 0) {
      fprintf(stderr, "ps-bench: --rate and --closed-loop exclude each other\n");
      return 2;
    }
    if (!c->inflight) c->inflight = 1;
    if (c->inflight < c->threads) {
      fprintf(stderr, "ps-bench: --inflight %d is below --threads %d\n", c->inflight, c->threads);
      return 2;
    }
    rates[0] = -1;
    *nrates = 1;
  } else {
    if (!(c->rate > 0)) {
      fprintf(stderr, "ps-bench: give --rate R (open loop), --closed-loop, or --sweep\n");
      return 2;
    }
    rates[0] = c->rate;
    *nrates = 1;
  }
  if (!c->inflight) c->inflight = 1000;
  if (c->inflight < c->threads) c->inflight = c->threads;
  if (c->bag_s) {
    char tail;
    long long lo, hi;
    if (sscanf(c->bag_s, "%lld..%lld%c", &lo, &hi, &tail) != 2 || lo < 1 || hi < lo ||
        hi > 65536) {
      fprintf(stderr, "ps-bench: --bag-size: '%s' is not LO..HI with 1 <= LO <= HI <= 65536\n",
              c->bag_s);
      return 2;
    }
    c->bag_lo = lo, c->bag_hi = hi;
    if ((double)c->keys * (double)hi > 2147483647.0) {
      fprintf(stderr, "ps-bench: --keys x the longest bag is over 2^31 ids per request\n");
      return 2;
    }
  }
  /* The rows of a request: --keys, or with bags at most its ids and at most the key space. */
  double rows = (double)ps_bench_max_ids(c);
  if (c->bag_hi && rows > (double)c->key_space) rows = (double)c->key_space;
  if (rows * (double)c->dim * 4.0 > 256.0 * 1048576.0) {
    fprintf(stderr, "ps-bench: the rows of a request (--keys%s) x --dim are over 256 MiB\n",
            c->bag_hi ? " x the longest bag, at most --key-space" : "");
    return 2;
  }
  ps_error err;
  if (ps_curve_load_client(c->curve_secret_file, c->curve_server_file, c->curve_secret,
                           c->curve_server, &err) != PS_OK) {
    fprintf(stderr, "ps-bench: %s\n", err.msg);
    return 2;
  }
  if (c->op == PS_BENCH_OP_SCORE) {
    int rc = ps_bench_score_load(c);
    if (rc) return rc;
  }
  return PS_BENCH_RUN;
}
