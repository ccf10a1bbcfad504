/* ps-server: one shard of the Ember parameter server (a thin main over ps_server.h).
 * SIGTERM/SIGINT: graceful shutdown (finish in-flight work, flush, mark the data dir clean);
 * a second signal exits at once. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_cli.h"
#include "ps_curve.h"
#include "ps_fs.h"
#include "ps_log.h"
#include "ps_http.h"
#include "ps_metrics.h"
#include "ps_server.h"
#include "ps_server_metrics.h"

/* ps-server's malloc is jemalloc (the store's rows need its size classes), read by jemalloc at
 * start-up; MALLOC_CONF in the environment is read after it and overrides it. Request and reply
 * frames of a multi-hot batch are tens of MB, allocated per request; jemalloc purges freed pages
 * back to the kernel, and each 4 KB page touched again costs a fault (on this project's VMs
 * several microseconds each). With its memory in 2 MB pages (the kernel's THP setting permits
 * it on Debian's default, madvise) a 25 MB frame is 13 faults instead of 6,400 and random row
 * reads miss the TLB less: a DLRMv2-like push of 49k rows x dim 128 ran 5.3-7x faster and its
 * pull 1.1-2.7x, the in-process pull p50 of 1M rows halved; small requests unchanged
 * (bench/RESULTS-pslat.md, session 8). It replaces glibc mallopt() calls that never applied:
 * glibc's malloc is not the one in use. */
const char *malloc_conf = "thp:always,metadata_thp:always";

static ps_server *g_server;
static volatile sig_atomic_t g_signals;

/* --listen: tcp://HOST:PORT (PORT 0..65535, 0 or * = any free one) or ipc://PATH; prints the
 * one-line reason and returns false otherwise (ZeroMQ would bind a port out of range modulo
 * 65536, i.e. some other port). */
static bool listen_ok(const char *url) {
  if (strncmp(url, "ipc://", 6) == 0 && url[6]) return true;
  const char *colon = strncmp(url, "tcp://", 6) == 0 ? strrchr(url + 6, ':') : NULL;
  if (!colon || colon == url + 6 || (url[6] == '[' && colon[-1] != ']')) {
    fprintf(stderr, "ps-server: --listen: '%s' is not tcp://HOST:PORT or ipc://PATH\n", url);
    return false;
  }
  const char *port = colon + 1;
  if (strcmp(port, "*") == 0) return true;
  size_t n = strspn(port, "0123456789");
  if (n == 0 || port[n] || n > 5 || atol(port) > 65535) {
    fprintf(stderr, "ps-server: --listen: port '%s' of '%s' is not in 0..65535 (or *)\n", port,
            url);
    return false;
  }
  return true;
}

/* --curve-secret and --curve-clients, both or neither, read before anything starts: 0, or -1
 * after printing the one-line reason. */
static int curve_load(const char *secret, const char *dir, char key[PS_CURVE_Z85_SIZE],
                      ps_curve_keyset **clients) {
  *clients = NULL;
  if (!secret && !dir) return 0;
  ps_error err;
  if (!secret || !dir)
    ps_error_set(&err, PS_ERR_INVALID,
                 "--curve-secret and --curve-clients go together (the server's key and the "
                 "clients it serves)");
  else if (ps_curve_read_key(secret, true, key, &err) == PS_OK &&
           ps_curve_keyset_load(dir, clients, &err) == PS_OK)
    return 0;
  fprintf(stderr, "ps-server: %s\n", err.msg);
  return -1;
}

static void on_signal(int sig) {
  (void)sig;
  if (++g_signals > 1) _exit(130);
  ps_server_request_stop(g_server);
}

int main(int argc, char **argv) {
  const char *listen = NULL, *data_dir = NULL, *level = "info", *checkpoint_root = NULL;
  const char *curve_secret = NULL, *curve_clients = NULL;
  const char *serve_dir = NULL;
  bool follow = false;
  int64_t follow_warm_keys = 1 << 20;
  int shard = 0, shards = 1, threads = -1, metrics_port = 0;
  int64_t cache_mb = 1024, inject_delay_us = 0;
  int64_t max_request_mb = 0;
  const char *metrics_bind = "127.0.0.1";
  int replica = 0, replicas = 1, failover_ms = 1000;
  const char *peers = NULL;
  ps_cli_opt opts[] = {
      {"listen", 'l', PS_CLI_STRING, &listen, "URL", "ZeroMQ endpoint to bind, tcp://HOST:PORT",
       true, 0, 0},
      {"shard", 0, PS_CLI_INT, &shard, "I", "this server's shard index", false, 0, 65535},
      {"shards", 0, PS_CLI_INT, &shards, "N", "number of shards in the cluster", false, 1, 65536},
      {"data-dir", 'd', PS_CLI_STRING, &data_dir, "DIR",
       "store, metadata and default checkpoints (required unless --serve)", false, 0, 0},
      {"cache-mb", 0, PS_CLI_I64, &cache_mb, "MB", "hot-tier DRAM budget", false, 1, 1 << 24},
      {"threads", 't', PS_CLI_INT, &threads, "T",
       "partition threads (0 = store work on the socket thread; -1 = auto: 0 with 2 CPUs or "
       "fewer, else min(CPUs - 2, 8))",
       false, -1, 256},
      {"metrics-port", 0, PS_CLI_INT, &metrics_port, "P",
       "HTTP port for Prometheus metrics (0 = off)", false, 0, 65535},
      {"inject-delay-us", 0, PS_CLI_I64, &inject_delay_us, "US",
       "testing/benchmarks: a network hop and a queue, every reply but PING's and STATS' "
       "leaves US after it is ready (no thread waits; 0 = off)",
       false, 0, 60000000},
      {"log-level", 0, PS_CLI_STRING, &level, "L", "debug|info|warn|error|off", false, 0, 0},
      {"curve-secret", 0, PS_CLI_STRING, &curve_secret, "FILE",
       "CURVE: this server's secret key (ps-keygen); with --curve-clients", false, 0, 0},
      {"curve-clients", 0, PS_CLI_STRING, &curve_clients, "DIR",
       "CURVE: serve only the clients whose NAME.public is in DIR (default: anyone, "
       "unencrypted)",
       false, 0, 0},
      {"checkpoint-root", 0, PS_CLI_STRING, &checkpoint_root, "DIR",
       "checkpoints outside --data-dir go only under DIR (default: the directory holding the "
       "job's first step-N checkpoint outside it, pinned then)",
       false, 0, 0},
      {"max-request-mb", 0, PS_CLI_I64, &max_request_mb, "MB",
       "request cap R: largest frame and pull reply; replies in flight are held to R per "
       "connection and 2R in all (0 = max(64, min(cache-mb/4, 256)))",
       false, 0, 1 << 16},
      {"metrics-bind", 0, PS_CLI_STRING, &metrics_bind, "ADDR",
       "address the metrics endpoint listens on (0.0.0.0 = every interface)", false, 0, 0},
      {"serve", 0, PS_CLI_STRING, &serve_dir, "DIR",
       "serve a ps-worker checkpoint read-only (its latest, or one step-N): this shard's "
       "snapshot answers pulls, pushes/steps/checkpoints are refused; no --data-dir, and "
       "--shards must be the checkpoint's. Or a ps-export directory (f32 or --quantize int8): "
       "this shard's rows held in memory as exported, on any --shards",
       false, 0, 0},
      {"follow", 0, PS_CLI_FLAG, &follow, NULL,
       "with --serve DIR (the checkpoint directory, not one step-N): serve each checkpoint "
       "DIR/latest names next, switching without a restart (a look every 200 ms)",
       false, 0, 0},
      {"follow-warm-keys", 0, PS_CLI_I64, &follow_warm_keys, "N",
       "--follow: warm a new checkpoint's hot tier with the last N keys pulled before switching "
       "to it (12 bytes each; 0 = no warm-up)",
       false, 0, 1 << 28},
      {"replica", 0, PS_CLI_INT, &replica, "R",
       "replicated shards: this replica's index (0-based, below --replicas)", false, 0, 7},
      {"replicas", 0, PS_CLI_INT, &replicas, "K",
       "replicas of this shard (1 = not replicated; with K > 1, --peers)", false, 1, 8},
      {"peers", 0, PS_CLI_STRING, &peers, "URLS",
       "with --replicas K: 'URL|URL|...', the K replicas' URLs in replica order, --listen at "
       "index --replica (the shard's entry of the clients' --servers)",
       false, 0, 0},
      {"failover-ms", 0, PS_CLI_INT, &failover_ms, "N",
       "replicated shards: a primary or backup silent this long is dead", false, 50, 600000},
  };
  ps_cli cli = {"ps-server", "One shard of the Ember parameter server.", NULL, opts,
                sizeof opts / sizeof *opts};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  if (ps_log_apply_level("ps-server", level) != 0) return 2;
  if (shard >= shards) {
    fprintf(stderr, "ps-server: --shard %d must be below --shards %d\n", shard, shards);
    return 2;
  }
  if (!listen_ok(listen)) return 2;
  if (!data_dir == !serve_dir) {
    fprintf(stderr, "ps-server: %s\n",
            serve_dir ? "--serve DIR serves a checkpoint read-only and takes no --data-dir"
                      : "--data-dir DIR is required (or --serve DIR)");
    return 2;
  }
  if (replica >= replicas || (replicas > 1) != (peers != NULL) || (replicas > 1 && serve_dir)) {
    fprintf(stderr, "ps-server: %s\n",
            replica >= replicas ? "--replica R must be below --replicas K"
            : serve_dir        ? "--replicas K > 1 replicates a training shard, not --serve"
            : peers            ? "--peers goes with --replicas K > 1"
                               : "--replicas K > 1 needs --peers 'URL|URL|...' (K URLs)");
    return 2;
  }
  if (replicas > 1) { /* --peers: K URLs, this replica's --listen at index R */
    char *items[9];
    int n = ps_split_list(peers, '|', items, 9);
    bool own = n == replicas && strcmp(items[replica], listen) == 0;
    if (n > 0) free(items[0]);
    if (!own) {
      fprintf(stderr, "ps-server: --peers '%s' must list exactly %d URLs separated by |, entry "
              "%d (--replica) being --listen %s\n", peers, replicas, replica, listen);
      return 2;
    }
  }
  if (follow && !serve_dir) {
    fprintf(stderr, "ps-server: --follow follows the checkpoints of --serve DIR (and needs it)\n");
    return 2;
  }
  char curve_key[PS_CURVE_Z85_SIZE];
  ps_curve_keyset *clients = NULL;
  if (curve_load(curve_secret, curve_clients, curve_key, &clients) != 0) return 2;
  char root_buf[4096];
  ps_error rerr;
  if (checkpoint_root &&
      ps_path_canonical(checkpoint_root, root_buf, sizeof root_buf, &rerr) != PS_OK) {
    fprintf(stderr, "ps-server: --checkpoint-root: %s\n", rerr.msg);
    return 2;
  }
  if (!ps_http_addr_ok(metrics_bind)) {
    fprintf(stderr, "ps-server: --metrics-bind: '%s' is not an IPv4 or IPv6 address\n",
            metrics_bind);
    return 2;
  }
  if (threads < 0) {
    /* A hand-off to partition threads costs two wake-ups per request; it pays only when
     * they get cores of their own beside the socket thread and ZeroMQ's I/O thread. On 2
     * CPUs the store work is faster on the socket thread (bench/RESULTS-net.md). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    threads = ncpu <= 2 ? 0 : (int)(ncpu - 2 < 8 ? ncpu - 2 : 8);
  }
  char tag[32];
  snprintf(tag, sizeof tag, "server/%d", shard);
  ps_log_set_tag(tag);

  ps_server_options o = {.listen = listen,
                         .shard = (uint32_t)shard,
                         .shards = (uint32_t)shards,
                         .data_dir = data_dir,
                         .cache_bytes = (size_t)cache_mb << 20,
                         .threads = (uint32_t)threads,
                         .metrics_port = metrics_port,
                         .inject_delay_us = (uint64_t)inject_delay_us,
                         .curve_secret = clients ? curve_key : NULL,
                         .curve_clients = clients,
                         .checkpoint_root = checkpoint_root,
                         .max_request_bytes = (size_t)max_request_mb << 20,
                         .serve_dir = serve_dir,
                         .follow = follow,
                         .follow_warm_keys = (size_t)follow_warm_keys,
                         .replica = (uint32_t)replica,
                         .replicas = (uint32_t)replicas,
                         .peers = peers,
                         .failover_ms = (uint32_t)failover_ms};
  ps_error err;
  ps_status st = ps_server_create(&o, &g_server, &err);
  if (st != PS_OK) {
    fprintf(stderr, "ps-server: cannot start: %s\n", err.msg);
    ps_curve_keyset_destroy(&clients);
    /* --serve: not a checkpoint, --shards; --peers that do not name this replica */
    return (serve_dir || replicas > 1) && st == PS_ERR_INVALID ? 2 : 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* A line on stdout that launchers and tests can wait for. */
  printf("ps-server shard %d listening on %s\n", shard, ps_server_endpoint(g_server));
  fflush(stdout);
  ps_metrics *reg = NULL;
  ps_http *http = NULL;
  if (metrics_port) {
    st = ps_metrics_create(&reg);
    if (st == PS_OK) st = ps_metrics_add_process(reg);
    if (st == PS_OK) st = ps_server_metrics_register(reg, g_server);
    if (st == PS_OK) st = ps_server_metrics_register_latency(reg);
    if (st == PS_OK) {
      ps_error herr;
      st = ps_http_create(metrics_bind, metrics_port, reg, NULL, NULL, &http, &herr);
      if (st != PS_OK) PS_ERROR("%s", herr.msg);
    }
    if (st != PS_OK) {
      fprintf(stderr, "ps-server: --metrics-port %d: %s\n", metrics_port, ps_status_str(st));
      ps_server_destroy(&g_server);
      ps_curve_keyset_destroy(&clients);
      return 1;
    }
  }
  st = ps_server_run(g_server);
  ps_http_destroy(&http); /* before the server: scrapes read its stats */
  ps_metrics_destroy(&reg);
  ps_server_destroy(&g_server);
  ps_curve_keyset_destroy(&clients);
  PS_INFO("stopped");
  return st == PS_OK ? 0 : 1;
}
