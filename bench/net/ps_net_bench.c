/* ps-net-bench: closed-loop throughput of Ember pulls and pushes on loopback, beside a raw
 * ZeroMQ round trip of the same bytes (the floor: what the transport alone costs).
 *
 * For every combination of --dims, --servers-list and --inflight-list, and for pull and push:
 * it starts that many ps-server processes (fresh data dirs, free ports), declares a table,
 * pushes every key of the key space once (so rows are in the hot tier), then keeps Q requests
 * of --batch keys in flight for --duration seconds, each completion immediately replaced.
 * The raw run forks the same number of ZeroMQ ROUTER echo processes that answer each request
 * with a reply of the PS reply's size, and drives them the same way (keys split per server).
 * Prints one line per run and, with --json, a list of
 *   {"impl", "op", "dim", "servers", "inflight", "batch", "requests", "keys_per_s",
 *    "mb_per_s", "p50_us", "p99_us"}. MB/s counts the bytes on the wire (8 per key plus 4, or 2
 * with --f16, per value). --curve runs Ember's servers and client with CURVE (fresh key pairs in
 * the temporary directory). --mem-floor adds a third row, "zmq+mem" (ps_net_floor.c): the raw
 * echo plus the table's memory work any server must do, so Ember can be read against both floors
 * (docs/BENCH.md); --mem-only prints single-core gather figures and nothing else. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_cli.h"
#include "ps_client.h"
#include "ps_curve.h"
#include "ps_hash.h"
#include "ps_hist.h"
#include "ps_log.h"
#include "ps_net_floor.h"
#include "ps_time.h"

#define MAXS 8
#define MAXQ 64
#define NBATCH 64

typedef struct cfg {
  const char *server_bin;
  int batch, threads;
  int64_t key_space;
  double duration, warmup;
  const char *tmp;
  bool f16;
  bool curve; /* --curve: the servers and the client use the key pairs made in tmp */
  bool verify; /* --verify: every zmq+mem pull reply is checked against a local gather */
} cfg;

typedef struct result {
  double keys_per_s, mb_per_s, p50_us, p99_us;
  uint64_t requests;
} result;

static int free_port(void) {
  /* Let zmq pick: bind a throwaway socket to port "*", read it back, close. */
  void *ctx = zmq_ctx_new();
  void *s = zmq_socket(ctx, ZMQ_ROUTER);
  int port = -1;
  if (zmq_bind(s, "tcp://127.0.0.1:*") == 0) {
    char ep[128];
    size_t len = sizeof ep;
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len);
    char *c = strrchr(ep, ':');
    if (c) port = atoi(c + 1);
  }
  int zero = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  zmq_close(s);
  zmq_ctx_term(ctx);
  return port;
}

static pid_t spawn_server(const cfg *c, int shard, int shards, const char *dir, char *url) {
  int port = free_port();
  snprintf(url, 64, "tcp://127.0.0.1:%d", port);
  char a1[16], a2[16], a3[16];
  snprintf(a1, sizeof a1, "%d", shard);
  snprintf(a2, sizeof a2, "%d", shards);
  snprintf(a3, sizeof a3, "%d", c->threads);
  char sec[600], clients[600];
  snprintf(sec, sizeof sec, "%s/server.secret", c->tmp);
  snprintf(clients, sizeof clients, "%s/clients", c->tmp);
  pid_t p = fork();
  if (p == 0) {
    execl(c->server_bin, c->server_bin, "--listen", url, "--shard", a1, "--shards", a2,
          "--data-dir", dir, "--threads", a3, "--cache-mb", "2048", "--log-level", "warn",
          c->curve ? "--curve-secret" : (char *)NULL, sec, "--curve-clients", clients,
          (char *)NULL);
    _exit(127);
  }
  return p;
}

static void stop(pid_t *p, int n) {
  for (int i = 0; i < n; i++)
    if (p[i] > 0) kill(p[i], SIGKILL);
  for (int i = 0; i < n; i++)
    if (p[i] > 0) waitpid(p[i], NULL, 0);
}

static void make_keys(uint64_t *k, int n, int64_t space, uint64_t *x) {
  for (int i = 0; i < n; i++) {
    *x = ps_mix64(*x);
    k[i] = (uint64_t)(*x % (uint64_t)space) * 2654435761ull + 1;
  }
}

/* The figures of a run, computed alike for Ember and the raw floor so that they compare:
 * nreq requests of c->batch keys completed in the measured span_ns, latencies in h. */
static void result_fill(result *res, const cfg *c, int dim, const ps_hist *h, uint64_t nreq,
                        uint64_t span_ns) {
  double secs = (double)span_ns / 1e9;
  int B = c->batch;
  res->requests = nreq;
  res->keys_per_s = (double)nreq * B / secs;
  res->mb_per_s = (double)nreq * B * (8.0 + (c->f16 ? 2.0 : 4.0) * dim) / secs / 1e6;
  res->p50_us = ps_hist_percentile(h, 50) / 1e3;
  res->p99_us = ps_hist_percentile(h, 99) / 1e3;
}

/* ------------------------------------------------------------------ Ember */

/* Starts one request of the load: a push of the B rows at v, or a pull of B rows into v, for
 * the B keys at k (table 1). */
static ps_status start_req(ps_client *cl, int op_push, const uint64_t *k, int B, float *v,
                           ps_client_req **r, ps_error *err) {
  return op_push ? ps_client_push_start(cl, 1, 0, k, (size_t)B, false, v, r, err)
                 : ps_client_pull_start(cl, 1, 0, k, (size_t)B, false, v, r, err);
}

static int run_ember(const cfg *c, int op_push, int dim, int ns, int q, result *res) {
  pid_t pid[MAXS] = {0};
  char urls[MAXS][64];
  const char *up[MAXS];
  char dir[600];
  for (int i = 0; i < ns; i++) {
    snprintf(dir, sizeof dir, "%s/s%d-%d-%d-%d-%d", c->tmp, i, ns, dim, q, op_push);
    pid[i] = spawn_server(c, i, ns, dir, urls[i]);
    up[i] = urls[i];
  }
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 30000;
  o.wire_f16 = c->f16;
  ps_client *cl = NULL;
  ps_error err;
  char sec[600], srv[600];
  snprintf(sec, sizeof sec, "%s/clients/bench.secret", c->tmp);
  snprintf(srv, sizeof srv, "%s/server.public", c->tmp);
  if (c->curve && ps_curve_load_client(sec, srv, o.curve_secret, o.curve_server, &err) != PS_OK) {
    fprintf(stderr, "client: %s\n", err.msg);
    stop(pid, ns);
    return -1;
  }
  if (ps_client_create(up, (size_t)ns, &o, &cl, &err) != PS_OK) {
    fprintf(stderr, "client: %s\n", err.msg);
    stop(pid, ns);
    return -1;
  }
  for (int i = 0; i < ns; i++) {
    int ok = 0;
    for (int t = 0; t < 100 && !ok; t++) ok = ps_client_ping(cl, (size_t)i, NULL) == PS_OK;
    if (!ok) {
      fprintf(stderr, "server %s did not come up\n", urls[i]);
      stop(pid, ns);
      return -1;
    }
  }
  ps_table_spec t;
  ps_table_spec_default(&t, 1, "bench", (uint32_t)dim);
  if (ps_client_declare(cl, &t, &err) != PS_OK) {
    fprintf(stderr, "declare: %s\n", err.msg);
    stop(pid, ns);
    return -1;
  }
  int B = c->batch;
  /* NBATCH batches drawn before the run and reused in turn, as the ps-lite driver does: the
   * measured loop is the system's work, not the benchmark's key generation. */
  uint64_t *keys = malloc((size_t)B * NBATCH * sizeof *keys);
  float *vals = malloc((size_t)B * dim * MAXQ * sizeof *vals);
  for (size_t i = 0; i < (size_t)B * dim * MAXQ; i++) vals[i] = 1e-6f;
  /* Every key of the space once: rows exist, in the hot tier. */
  uint64_t *all = malloc((size_t)B * sizeof *all);
  for (int64_t base = 0; base < c->key_space; base += B) {
    int n = (int)((c->key_space - base) < B ? (c->key_space - base) : B);
    for (int i = 0; i < n; i++) all[i] = (uint64_t)(base + i) * 2654435761ull + 1;
    if (ps_client_push(cl, 1, 0, all, (size_t)n, vals, &err) != PS_OK) {
      fprintf(stderr, "fill: %s\n", err.msg);
      stop(pid, ns);
      return -1;
    }
  }
  free(all);
  uint64_t x = 99;
  for (int i = 0; i < NBATCH; i++) make_keys(keys + (size_t)i * B, B, c->key_space, &x);
  uint64_t next = 0;
  ps_client_req *r[MAXQ] = {0};
  uint64_t t0[MAXQ];
  ps_hist *h = ps_hist_create();
  uint64_t start = ps_now_ns(), measure_from = start + (uint64_t)(c->warmup * 1e9),
           end = measure_from + (uint64_t)(c->duration * 1e9), nreq = 0;
  int slot = 0;
  ps_status st = PS_OK;
  float *outs = malloc((size_t)B * dim * MAXQ * sizeof *outs);
  for (int i = 0; i < q; i++) {
    t0[i] = ps_now_ns();
    st = start_req(cl, op_push, keys + (size_t)(next++ % NBATCH) * B, B,
                   (op_push ? vals : outs) + (size_t)i * B * dim, &r[i], &err);
  }
  uint64_t now = 0;
  while (st == PS_OK) {
    st = ps_client_wait(cl, &r[slot], &err);
    now = ps_now_ns();
    if (now >= measure_from) {
      if (now >= end) break;
      ps_hist_record(h, now - t0[slot]);
      nreq++;
    }
    t0[slot] = ps_now_ns();
    st = start_req(cl, op_push, keys + (size_t)(next++ % NBATCH) * B, B,
                   (op_push ? vals : outs) + (size_t)slot * B * dim, &r[slot], &err);
    slot = (slot + 1) % q;
  }
  if (st != PS_OK) fprintf(stderr, "ember run failed: %s\n", err.msg);
  for (int i = 0; i < q; i++)
    if (r[i]) ps_client_wait(cl, &r[i], NULL);
  result_fill(res, c, dim, h, nreq, now - measure_from);
  ps_hist_destroy(&h);
  ps_client_destroy(&cl);
  stop(pid, ns);
  free(keys);
  free(vals);
  free(outs);
  return st == PS_OK ? 0 : -1;
}

/* ------------------------------------------------------------------ raw ZeroMQ floor */

static size_t fl_keys(zmq_msg_t *m, const ps_floor *fl, int op_push);

/* The echo. With fl (the memory floor) the request's payload is [keys][gradients if push]
 * and the echo does the table's work: a pull's reply is the gathered rows, a push applies
 * Adagrad to every row. Without fl it answers with an untouched buffer. */
static void echo_main(const char *url, size_t reply_bytes, ps_floor *fl, int op_push) {
  void *ctx = zmq_ctx_new();
  void *s = zmq_socket(ctx, ZMQ_ROUTER);
  if (zmq_bind(s, url) != 0) _exit(1);
  void *reply = calloc(1, reply_bytes ? reply_bytes : 1);
  for (;;) {
    zmq_msg_t id, m;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, s, 0) < 0) _exit(0);
    zmq_msg_init(&m);
    zmq_msg_t hdr;
    zmq_msg_init(&hdr);
    int more = 1, nf = 0;
    while (more) { /* frame 0 (the "header") is echoed, the rest dropped */
      zmq_msg_t *t = nf == 0 ? &hdr : &m;
      zmq_msg_recv(t, s, 0);
      more = zmq_msg_more(t);
      nf++;
    }
    zmq_msg_send(&id, s, ZMQ_SNDMORE);
    zmq_msg_t out;
    /* Zero-copy reply of a fixed buffer, like ps-server's reply frame. */
    zmq_msg_init_size(&out, reply_bytes);
    if (fl) {
      size_t n = fl_keys(&m, fl, op_push);
      const uint64_t *k = zmq_msg_data(&m);
      if (op_push) ps_floor_push(fl, k, n, (const float *)(k + n));
      else ps_floor_pull(fl, k, n, zmq_msg_data(&out));
    } else {
      memcpy(zmq_msg_data(&out), reply, reply_bytes > 64 ? 64 : reply_bytes);
    }
    zmq_msg_send(&hdr, s, reply_bytes ? ZMQ_SNDMORE : 0);
    if (reply_bytes) zmq_msg_send(&out, s, 0);
    else zmq_msg_close(&out);
    zmq_msg_close(&m);
  }
}

/* Keys in a floor request: the payload is n keys, then n rows of gradients for a push (zmq's
 * message buffers are malloc'd, so the keys and floats are aligned). */
static size_t fl_keys(zmq_msg_t *m, const ps_floor *fl, int op_push) {
  size_t per = 8 + (op_push ? (size_t)ps_floor_dim(fl) * 4 : 0);
  return zmq_msg_size(m) / per;
}

static int run_raw(const cfg *c, int op_push, int dim, int ns, int q, bool mem, result *res) {
  int B = c->batch;
  size_t per = (size_t)(B / ns);
  size_t vb = c->f16 ? 2 : 4;
  size_t req_bytes = per * 8 + (op_push ? per * dim * vb : 0);
  size_t rep_bytes = op_push ? 0 : per * dim * vb;
  pid_t pid[MAXS];
  char urls[MAXS][64];
  for (int i = 0; i < ns; i++) {
    snprintf(urls[i], sizeof urls[i], "tcp://127.0.0.1:%d", free_port());
    pid[i] = fork();
    if (pid[i] == 0) {
      /* Each echo holds the whole key space's rows (its shard would hold 1/ns of them, but the
       * misses per key are what count: every key is a DRAM miss either way). */
      ps_floor *fl = mem ? ps_floor_create(c->key_space, dim) : NULL;
      if (mem && !fl) _exit(1);
      echo_main(urls[i], rep_bytes, fl, op_push);
      _exit(0);
    }
  }
  /* The floor's requests carry real keys drawn as Ember's run draws them (NBATCH batches
   * reused in turn), server s getting the s-th slice of each batch, gradients after them. */
  char *fpay = NULL;
  float *fout = NULL;
  if (mem) {
    fpay = calloc((size_t)NBATCH * ns, req_bytes);
    fout = malloc((size_t)B * dim * sizeof *fout * MAXQ);
    uint64_t *kb = malloc((size_t)B * sizeof *kb), x = 99;
    for (int b = 0; b < NBATCH; b++) {
      make_keys(kb, B, c->key_space, &x);
      for (int s = 0; s < ns; s++) {
        char *p = fpay + ((size_t)b * ns + s) * req_bytes;
        memcpy(p, kb + (size_t)s * per, per * 8);
        float *g = (float *)(p + per * 8);
        for (size_t j = 0; op_push && j < per * dim; j++) g[j] = 1e-3f;
      }
    }
    free(kb);
  }
  uint64_t next = 0, bat[MAXQ] = {0};
  int bad = 0;
  void *ctx = zmq_ctx_new();
  void *sock[MAXS];
  for (int i = 0; i < ns; i++) {
    sock[i] = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(sock[i], ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(sock[i], urls[i]);
  }
  char *payload = calloc(1, req_bytes);
  ps_hist *h = ps_hist_create();
  uint64_t t0[MAXQ];
  int got[MAXQ];
  uint64_t start = ps_now_ns(), measure_from = start + (uint64_t)((c->warmup + 0.3) * 1e9),
           end = measure_from + (uint64_t)(c->duration * 1e9), nreq = 0;
  /* Request = [8-byte slot id][payload]; replies carry the id back. */
  for (int i = 0; i < q; i++) {
    t0[i] = ps_now_ns();
    got[i] = 0;
    bat[i] = next++ % NBATCH;
    for (int s = 0; s < ns; s++) {
      uint64_t id = (uint64_t)i;
      zmq_send(sock[s], &id, 8, ZMQ_SNDMORE);
      zmq_send(sock[s], mem ? fpay + (bat[i] * ns + s) * req_bytes : payload, req_bytes, 0);
    }
  }
  zmq_pollitem_t items[MAXS];
  for (int i = 0; i < ns; i++) items[i] = (zmq_pollitem_t){.socket = sock[i], .events = ZMQ_POLLIN};
  uint64_t now = 0;
  for (;;) {
    zmq_poll(items, ns, 1000);
    now = ps_now_ns();
    if (now >= end || bad) break;
    for (int s = 0; s < ns; s++) {
      if (!(items[s].revents & ZMQ_POLLIN)) continue;
      for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock[s], ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&m);
          break;
        }
        uint64_t id = 0;
        memcpy(&id, zmq_msg_data(&m), 8);
        while (zmq_msg_more(&m)) {
          zmq_msg_close(&m);
          zmq_msg_init(&m);
          zmq_msg_recv(&m, sock[s], 0);
        }
        if (mem && !op_push && id < (uint64_t)q && zmq_msg_size(&m) == rep_bytes) {
          /* The caller's buffer, as ps_client_pull fills it: server s's rows at its slice. */
          float *dst = fout + ((size_t)id * B + (size_t)s * per) * dim;
          memcpy(dst, zmq_msg_data(&m), rep_bytes);
          if (c->verify) {
            const uint64_t *k = (const uint64_t *)(fpay + (bat[id] * ns + s) * req_bytes);
            for (size_t i = 0; i < per && !bad; i++)
              for (int j = 0; j < dim; j++)
                if (dst[i * dim + j] != ps_floor_init_value(k[i] % (uint64_t)c->key_space, j)) {
                  fprintf(stderr, "ps-net-bench: --verify: key %" PRIu64 " value %d: %g\n", k[i],
                          j, (double)dst[i * dim + j]);
                  bad = 1;
                  break;
                }
          }
        }
        zmq_msg_close(&m);
        if (id >= (uint64_t)q || ++got[id] < ns) continue;
        now = ps_now_ns();
        if (now >= measure_from) {
          ps_hist_record(h, now - t0[id]);
          nreq++;
        }
        got[id] = 0;
        t0[id] = ps_now_ns();
        bat[id] = next++ % NBATCH;
        for (int k = 0; k < ns; k++) {
          zmq_send(sock[k], &id, 8, ZMQ_SNDMORE);
          zmq_send(sock[k], mem ? fpay + (bat[id] * ns + k) * req_bytes : payload, req_bytes, 0);
        }
      }
    }
  }
  result_fill(res, c, dim, h, nreq, now - measure_from);
  ps_hist_destroy(&h);
  for (int i = 0; i < ns; i++) zmq_close(sock[i]);
  zmq_ctx_term(ctx);
  free(payload);
  free(fpay);
  free(fout);
  stop(pid, ns);
  return bad ? -1 : 0;
}

static int parse_ints(const char *s, int *out, int max) {
  char *items[16];
  int n = ps_split_list(s, ',', items, max < 16 ? max : 16);
  if (n <= 0) return -1;
  for (int i = 0; i < n; i++) {
    int64_t v;
    if (ps_parse_i64(items[i], &v, NULL) != PS_OK || v <= 0 || v > 4096) {
      free(items[0]);
      return -1;
    }
    out[i] = (int)v;
  }
  free(items[0]);
  return n;
}

int main(int argc, char **argv) {
  cfg c = {.batch = 4096, .threads = -1, .key_space = 1 << 18, .duration = 3, .warmup = 0.5};
  const char *dims_s = "16,64", *servers_s = "1,2", *inflight_s = "1,8", *ops_s = "pull,push",
             *json_path = NULL, *bin = NULL;
  bool no_raw = false, no_ember = false, mem_floor = false, mem_only = false;
  ps_cli_opt opts[] = {
      {"dims", 0, PS_CLI_STRING, &dims_s, "D,D", "embedding dims", false, 0, 0},
      {"servers", 0, PS_CLI_STRING, &servers_s, "N,N", "server counts", false, 0, 0},
      {"inflight", 0, PS_CLI_STRING, &inflight_s, "Q,Q", "requests in flight", false, 0, 0},
      {"ops", 0, PS_CLI_STRING, &ops_s, "pull,push", "operations", false, 0, 0},
      {"batch", 'b', PS_CLI_INT, &c.batch, "B", "keys per request", false, 1, 1 << 20},
      {"key-space", 0, PS_CLI_I64, &c.key_space, "K", "distinct keys (all pre-pushed)", false, 1,
       1 << 26},
      {"threads", 't', PS_CLI_INT, &c.threads, "T", "ps-server --threads (-1: its auto default)", false, -1, 64},
      {"duration", 0, PS_CLI_DOUBLE, &c.duration, "S", "measured seconds per run", false, 0.1,
       600},
      {"warmup", 0, PS_CLI_DOUBLE, &c.warmup, "S", "unmeasured seconds per run", false, 0, 60},
      {"server-bin", 0, PS_CLI_STRING, &bin, "PATH", "ps-server (default: beside this binary)",
       false, 0, 0},
      {"f16", 0, PS_CLI_FLAG, &c.f16, NULL, "rows and gradients as f16 on the wire", false, 0, 0},
      {"no-raw", 0, PS_CLI_FLAG, &no_raw, NULL, "skip the raw ZeroMQ floor", false, 0, 0},
      {"no-ember", 0, PS_CLI_FLAG, &no_ember, NULL, "only the raw ZeroMQ floor", false, 0, 0},
      {"mem-floor", 0, PS_CLI_FLAG, &mem_floor, NULL,
       "add the zmq+mem row: the raw echo plus the table's memory work (pull: gather each "
       "row from a store-sized array; push: Adagrad on it; the client copies the rows out). "
       "Opt-in: it adds a third of the run time and the default rows stay comparable with "
       "earlier results",
       false, 0, 0},
      {"verify", 0, PS_CLI_FLAG, &c.verify, NULL,
       "check every zmq+mem pull reply against a local gather (exit 1 on a mismatch)", false, 0,
       0},
      {"mem-only", 0, PS_CLI_FLAG, &mem_only, NULL,
       "only the single-core gather figures: 4096 random rows of 64/256 B from a 42/170 MB "
       "array, with and without prefetch, ns per key",
       false, 0, 0},
      {"json", 0, PS_CLI_STRING, &json_path, "FILE", "write the results as JSON", false, 0, 0},
      {"curve", 0, PS_CLI_FLAG, &c.curve, NULL,
       "Ember with CURVE: fresh key pairs for the servers and the client (the raw floor stays "
       "plain)",
       false, 0, 0},
  };
  ps_cli cli = {"ps-net-bench", "Closed-loop pull/push throughput on loopback vs raw ZeroMQ.",
                NULL, opts, sizeof opts / sizeof *opts};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  if (mem_only) {
    ps_floor_gather_bench();
    return 0;
  }
  if (mem_floor && c.f16) {
    fprintf(stderr, "ps-net-bench: --mem-floor gathers f32 rows; it does not combine with --f16\n");
    return 2;
  }
  int dims[16], servers[16], inflight[16];
  int nd = parse_ints(dims_s, dims, 16), nsv = parse_ints(servers_s, servers, 16),
      nq = parse_ints(inflight_s, inflight, 16);
  if (nd < 0 || nsv < 0 || nq < 0) {
    fprintf(stderr, "ps-net-bench: --dims/--servers/--inflight take lists of positive integers\n");
    return 2;
  }
  for (int i = 0; i < nsv; i++)
    if (servers[i] > MAXS) return fprintf(stderr, "ps-net-bench: at most %d servers\n", MAXS), 2;
  for (int i = 0; i < nq; i++)
    if (inflight[i] > MAXQ) return fprintf(stderr, "ps-net-bench: at most %d in flight\n", MAXQ), 2;
  char binbuf[4096];
  if (!bin) {
    ssize_t n = readlink("/proc/self/exe", binbuf, sizeof binbuf - 16);
    if (n <= 0) return 2;
    binbuf[n] = '\0';
    char *sl = strrchr(binbuf, '/');
    snprintf(sl + 1, sizeof binbuf - (size_t)(sl + 1 - binbuf), "ps-server");
    bin = binbuf;
  }
  c.server_bin = bin;
  char tmp[] = "/tmp/ember-netbench-XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  c.tmp = tmp;
  if (c.curve) {
    char pfx[600], pub[PS_CURVE_Z85_SIZE];
    ps_error err;
    snprintf(pfx, sizeof pfx, "%s/clients", tmp);
    ps_status st = mkdir(pfx, 0700) == 0 ? PS_OK : PS_ERR_IO;
    snprintf(pfx, sizeof pfx, "%s/server", tmp);
    if (st == PS_OK) st = ps_curve_write_pair(pfx, false, pub, &err);
    snprintf(pfx, sizeof pfx, "%s/clients/bench", tmp); /* bench.secret is not a .public */
    if (st == PS_OK) st = ps_curve_write_pair(pfx, false, pub, &err);
    if (st != PS_OK) {
      fprintf(stderr, "ps-net-bench: --curve: %s\n", st == PS_ERR_IO ? strerror(errno) : err.msg);
      return 1;
    }
  }
  ps_log_set_level(PS_LOG_WARN);
  signal(SIGPIPE, SIG_IGN);
  /* As in ps-server: large reply frames must not be fresh mmaps (page faults per request). */
  mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's maximum */
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  json_t *all = json_array();
  int failed = 0;
  printf("%-6s %-5s %4s %4s %4s %12s %10s %10s %10s\n", "impl", "op", "dim", "srv", "q",
         "Mkeys/s", "MB/s", "p50_us", "p99_us");
  for (int oi = 0; oi < 2; oi++) {
    int push = oi == 1;
    if (!strstr(ops_s, push ? "push" : "pull")) continue;
    for (int di = 0; di < nd; di++)
      for (int si = 0; si < nsv; si++)
        for (int qi = 0; qi < nq; qi++) {
          for (int impl = 0; impl < 3; impl++) {
            if ((impl == 0 && no_ember) || (impl == 1 && no_raw) || (impl == 2 && !mem_floor))
              continue;
            result r = {0};
            int ok = impl == 0
                         ? run_ember(&c, push, dims[di], servers[si], inflight[qi], &r)
                         : run_raw(&c, push, dims[di], servers[si], inflight[qi], impl == 2, &r);
            if (ok != 0) {
              failed = 1;
              continue;
            }
            const char *name = impl == 0 ? "ember" : impl == 1 ? "zmq" : "zmq+mem";
            printf("%-6s %-5s %4d %4d %4d %12.3f %10.1f %10.1f %10.1f\n", name,
                   push ? "push" : "pull", dims[di], servers[si], inflight[qi],
                   r.keys_per_s / 1e6, r.mb_per_s, r.p50_us, r.p99_us);
            fflush(stdout);
            json_array_append_new(
                all, json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:f, s:f, s:f, s:f}", "impl",
                               name, "op", push ? "push" : "pull", "dim", dims[di], "servers",
                               servers[si], "inflight", inflight[qi], "batch", c.batch,
                               "requests", (json_int_t)r.requests, "keys_per_s", r.keys_per_s,
                               "mb_per_s", r.mb_per_s, "p50_us", r.p50_us, "p99_us", r.p99_us));
          }
        }
  }
  if (json_path && json_dump_file(all, json_path, JSON_INDENT(1)) != 0)
    fprintf(stderr, "ps-net-bench: cannot write %s\n", json_path);
  json_decref(all);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "ps-net-bench: could not remove %s\n", tmp);
  /* A failed run (--verify's mismatch among them) is a run-time failure. */
  return failed ? 1 : 0;
}
