/* pt_cluster: see pt_cluster.h. */
#include "pt_cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_client.h"
#include "ps_curve.h"

/* Every server started and not yet stopped: killed at exit, so a failed assertion (which
 * leaves the test function early) never leaves a process behind. */
static pid_t g_live[64];
static int g_nlive;

static void kill_live(void) {
  for (int i = 0; i < g_nlive; i++) {
    if (g_live[i] <= 0) continue;
    kill(g_live[i], SIGKILL);
    waitpid(g_live[i], NULL, 0);
  }
  g_nlive = 0;
}

static void track(pid_t pid) {
  static int registered;
  if (!registered) {
    atexit(kill_live);
    registered = 1;
  }
  for (int i = 0; i < g_nlive; i++)
    if (g_live[i] <= 0) {
      g_live[i] = pid;
      return;
    }
  if (g_nlive < 64) g_live[g_nlive++] = pid;
}

static void untrack(pid_t pid) {
  for (int i = 0; i < g_nlive; i++)
    if (g_live[i] == pid) g_live[i] = 0;
}

int pt_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

void pt_tmpdir(const char *tag, char *out) {
  snprintf(out, 512, "/tmp/ember-%s-XXXXXX", tag);
  if (!mkdtemp(out)) out[0] = '\0';
}

void pt_tmpdir_s0(const char *tag, char *dir, char *d0) {
  pt_tmpdir(tag, dir);
  snprintf(d0, 600, "%s/s0", dir);
}

bool pt_start_s0(pt_server *s, const char *tag, char *dir, char *d0, int shards, int threads) {
  pt_tmpdir_s0(tag, dir, d0);
  return pt_start(s, 0, shards, d0, 0, threads);
}

void pt_rmrf(const char *dir) {
  if (!dir || strncmp(dir, "/tmp/ember-", 11) != 0) return;
  pid_t p = fork();
  if (p == 0) {
    execl("/bin/rm", "rm", "-rf", dir, (char *)NULL);
    _exit(127);
  }
  if (p > 0) waitpid(p, NULL, 0);
}

int pt_tcp_connect(const char *src, const char *dst, int port, long timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET};
  if (src && (inet_pton(AF_INET, src, &a.sin_addr) != 1 ||
              bind(fd, (struct sockaddr *)&a, sizeof a) != 0))
    goto fail;
  a.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, dst, &a.sin_addr) != 1 ||
      connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    goto fail;
  return fd;
fail:;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

char *pt_http_get(int port, const char *path) {
  int fd = pt_tcp_connect(NULL, "127.0.0.1", port, 5000);
  if (fd < 0) return NULL;
  char req[512];
  int rn = snprintf(req, sizeof req,
                    "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
  size_t len = 0, cap = 1 << 16;
  char *b = malloc(cap);
  if (!b || send(fd, req, (size_t)rn, MSG_NOSIGNAL) != rn) {
    free(b);
    close(fd);
    return NULL;
  }
  for (ssize_t got; (got = recv(fd, b + len, cap - len - 1, 0)) > 0;) {
    len += (size_t)got;
    if (cap - len < 4096) {
      char *nb = realloc(b, 2 * cap);
      if (!nb) break;
      b = nb;
      cap *= 2;
    }
  }
  close(fd);
  b[len] = '\0';
  int status = 0;
  const char *body = strstr(b, "\r\n\r\n");
  if (sscanf(b, "HTTP/1.%*d %d", &status) != 1 || status != 200 || !body) {
    free(b);
    return NULL;
  }
  memmove(b, body + 4, strlen(body + 4) + 1);
  return b;
}

const char *pt_bin(const char *name) {
  static char buf[1024];
  const char *b = getenv("EMBER_BIN");
  snprintf(buf, sizeof buf, "%s/%s", b ? b : "build/bin", name);
  return buf;
}

bool pt_start(pt_server *s, int shard, int shards, const char *dir, int port, int threads) {
  return pt_start_args(s, shard, shards, dir, port, threads, NULL);
}

static char g_curve_sec[PS_CURVE_Z85_SIZE], g_curve_srv[PS_CURVE_Z85_SIZE];

void pt_set_curve(const char *sec, const char *srv) {
  snprintf(g_curve_sec, sizeof g_curve_sec, "%s", sec ? sec : "");
  snprintf(g_curve_srv, sizeof g_curve_srv, "%s", sec && srv ? srv : "");
}

void pt_client_options(ps_client_options *o, uint32_t timeout_ms) {
  ps_client_options_default(o);
  o->timeout_ms = timeout_ms;
  memcpy(o->curve_secret, g_curve_sec, sizeof g_curve_sec);
  memcpy(o->curve_server, g_curve_srv, sizeof g_curve_srv);
}

bool pt_start_args(pt_server *s, int shard, int shards, const char *dir, int port, int threads,
                   const char *const *extra) {
  s->shard = shard;
  s->shards = shards;
  s->threads = threads;
  s->port = port ? port : pt_free_port();
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  snprintf(s->url, sizeof s->url, "tcp://127.0.0.1:%d", s->port);
  char a_shard[16], a_shards[16], a_thr[16], logf[600];
  snprintf(a_shard, sizeof a_shard, "%d", shard);
  snprintf(a_shards, sizeof a_shards, "%d", shards);
  snprintf(a_thr, sizeof a_thr, "%d", threads);
  snprintf(logf, sizeof logf, "%s.log", dir);
  const char *bin = pt_bin("ps-server");
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int fd = open(logf, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    const char *argv[32] = {bin, "--listen", s->url, "--shard", a_shard, "--shards", a_shards,
                            "--data-dir", dir, "--threads", a_thr, "--cache-mb", "64",
                            "--log-level", "info"};
    size_t n = 15;
    for (size_t i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  s->pid = pid;
  track(pid);
  const char *urls[1] = {s->url};
  ps_client_options o;
  pt_client_options(&o, 300);
  ps_client *c = NULL;
  if (ps_client_create(urls, 1, &o, &c, NULL) != PS_OK) return false;
  bool ok = false;
  for (int i = 0; i < 50 && !ok; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      fprintf(stderr, "ps-server exited early (see %s)\n", logf);
      untrack(pid);
      s->pid = 0;
      break;
    }
    ok = ps_client_ping(c, 0, NULL) == PS_OK;
  }
  ps_client_destroy(&c);
  if (!ok && s->pid) pt_stop(s, SIGKILL, 2000);
  return ok;
}

bool pt_start_dropping(pt_server *s, const char *tag, char *dir, int every,
                       const char *const *extra) {
  pt_tmpdir(tag, dir);
  char v[16];
  snprintf(v, sizeof v, "%d", every);
  if (every) setenv("EMBER_TEST_DROP_REPLY", v, 1);
  bool ok = pt_start_args(s, 0, 1, dir, 0, 2, extra);
  unsetenv("EMBER_TEST_DROP_REPLY");
  return ok;
}

void pt_stop_clean(pt_server *s, const char *dir) {
  pt_stop(s, SIGKILL, 5000);
  pt_rmrf(dir);
  char log[600];
  snprintf(log, sizeof log, "%s.log", dir);
  unlink(log);
}

int pt_stop(pt_server *s, int sig, int timeout_ms) {
  if (s->pid <= 0) return -1;
  kill(s->pid, sig);
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    int st;
    pid_t r = waitpid(s->pid, &st, WNOHANG);
    if (r == s->pid) {
      untrack(s->pid);
      s->pid = 0;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  untrack(s->pid);
  s->pid = 0;
  return -1;
}

ps_store *pt_ref_store(const char *dir, const char *name, size_t cache_bytes,
                       const ps_table_spec *t) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  ps_store_options so = {.path = path, .cache_bytes = cache_bytes, .partitions = 1};
  ps_store *s = NULL;
  ps_error err;
  ps_status st = ps_store_open(&so, &s, &err);
  if (st != PS_OK) {
    fprintf(stderr, "pt_ref_store: open %s: %s\n", path, err.msg);
    return NULL;
  }
  if ((st = ps_store_declare(s, t, &err)) != PS_OK) {
    fprintf(stderr, "pt_ref_store: declare table %u in %s: %s\n", t->id, path, err.msg);
    ps_store_close(&s);
    return NULL;
  }
  return s;
}

bool pt_start_all(pt_server *srv, int n, const char *tag, char *dir, int threads) {
  pt_tmpdir(tag, dir);
  char d[600];
  for (int i = 0; i < n; i++) {
    snprintf(d, sizeof d, "%s/s%d", dir, i);
    if (!pt_start(&srv[i], i, n, d, 0, threads)) return false;
  }
  return true;
}

void pt_stop_all(pt_server *srv, int n, const char *dir) {
  for (int i = 0; i < n; i++) pt_stop(&srv[i], SIGKILL, 5000);
  pt_rmrf(dir);
}

ps_client *pt_client(const pt_server *srv, int n, uint32_t rank, uint32_t timeout_ms) {
  const char *urls[16];
  if (n < 1 || n > 16) return NULL;
  for (int i = 0; i < n; i++) urls[i] = srv[i].url;
  ps_client_options o;
  pt_client_options(&o, timeout_ms);
  o.rank = rank;
  ps_client *c = NULL;
  return ps_client_create(urls, (size_t)n, &o, &c, NULL) == PS_OK ? c : NULL;
}

static pt_group *g_group; /* the group pt_group_run is running */

static int group_setup(void **state) {
  (void)state;
  pt_group *g = g_group;
  pt_tmpdir(g->tag, g->dir);
  char d[600];
  for (int i = 0; i < g->n; i++) {
    snprintf(d, sizeof d, "%s/s%d", g->dir, i);
    if (!pt_start(&g->srv[i], i, g->n, d, 0, g->threads[i])) return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  pt_stop_all(g_group->srv, g_group->n, g_group->dir);
  return 0;
}

int pt_group_run(pt_group *g, const struct CMUnitTest *tests, size_t n) {
  if (g->n < 1 || g->n > 4) return 1;
  g_group = g;
  return _cmocka_run_group_tests(g->tag, tests, n, group_setup, group_teardown);
}

ps_client *pt_group_client(const pt_group *g, uint32_t rank) {
  ps_client *c = pt_client(g->srv, g->n, rank, g->timeout_ms);
  if (!c) {
    fprintf(stderr, "pt_group_client: no client of the %s cluster\n", g->tag);
    exit(1);
  }
  return c;
}

ps_table_spec pt_adagrad_spec(uint32_t id, const char *name, uint32_t dim, double lr, double eps,
                              double a0, ps_consistency cons, uint32_t workers) {
  ps_table_spec t;
  ps_table_spec_default(&t, id, name, dim);
  t.optimizer = PS_OPT_ADAGRAD;
  t.lr = (float)lr;
  t.eps = (float)eps;
  t.initial_accumulator = (float)a0;
  t.init = PS_INIT_ZERO;
  t.consistency = cons;
  t.num_workers = workers;
  return t;
}
