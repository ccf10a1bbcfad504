/* ps_http: /metrics and /healthz over libmicrohttpd.
 *
 * One internal polling thread (MHD_USE_AUTO picks epoll on Linux) serves every connection:
 * scrapes are rare (one per scrape interval per Prometheus) and small, so a thread pool would
 * only add contention with the server's own threads. A method we refuse is answered on the
 * first call of the access handler, before any body is read (the client gets its 405 and a
 * closed connection); GET/HEAD are answered once the request is complete, keeping the
 * connection alive between scrapes. libmicrohttpd's
 * diagnostics (malformed requests from port scanners and the like) go to PS_DEBUG, not to
 * stderr at every probe.
 *
 * The header deadline is ours (libmicrohttpd has only an idle timeout, which every trickled
 * byte resets): the connection notifier records each accepted socket with a deadline, the
 * access handler's first call (headers complete) clears it, a completed request re-arms it for
 * the next request on a kept-alive connection, and a reaper thread shutdown()s the sockets
 * past their deadline four times a second -- libmicrohttpd then reads EOF and closes them
 * itself. The table is under a mutex that the notifier also takes when a connection closes,
 * before libmicrohttpd closes its socket, so the reaper never touches a reused descriptor. */
#include "ps_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ps_log.h"
#include "ps_thread.h"
#include "ps_time.h"

enum { H_METRICS, H_HEALTHZ, H_OTHER, H_COUNT };
enum { C_200, C_404, C_405, C_503, C_500, C_COUNT };
static const char *const handler_names[H_COUNT] = {"metrics", "healthz", "other"};
static const char *const code_names[C_COUNT] = {"200", "404", "405", "503", "500"};

/* A connection the header deadline watches (fd -1: a free entry). */
typedef struct http_conn {
  int fd;
  bool waiting; /* its request headers are not complete yet */
  bool cut;     /* shut down by the reaper, or to make room */
  uint64_t deadline_ns;
  uint64_t since_ns; /* when it began waiting for its (next) request's headers */
} http_conn;

struct ps_http {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  http_conn *conns; /* max_conn + HTTP_SPARE + 16 entries (accepted sockets above the limit
                     * pass briefly) */
  size_t nconns;
  unsigned max_conn; /* connections kept; one more makes room (make_room) */
  uint64_t header_ns, idle_ns;
  bool stop, reaper_on;
  pthread_t reaper;
  ps_metrics *metrics;
  ps_metric *requests; /* ember_http_requests_total, whose collect callback reads `counts` */
  ps_http_health_fn health;
  void *health_ud;
  int port;
  _Atomic uint64_t counts[H_COUNT][C_COUNT];
};

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[256];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
  PS_DEBUG("http: %s", msg);
}

static void collect_requests(ps_metrics_sink *sink, void *ud) {
  ps_http *h = ud;
  for (int i = 0; i < H_COUNT; i++) {
    for (int c = 0; c < C_COUNT; c++) {
      uint64_t v = atomic_load_explicit(&h->counts[i][c], memory_order_relaxed);
      /* Always show successful scrapes (so the series exists from the first one); the
       * rest once they happen. */
      if (v == 0 && !(i == H_METRICS && c == C_200)) continue;
      const char *labels[2] = {handler_names[i], code_names[c]};
      ps_metrics_emit(sink, labels, (double)v);
    }
  }
}

static enum MHD_Result reply(ps_http *h, struct MHD_Connection *conn, int handler,
                             unsigned status, const char *ctype, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (!r) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  int code = status == 200 ? C_200 : status == 404 ? C_404 : status == 405 ? C_405
             : status == 503 ? C_503 : C_500;
  atomic_fetch_add_explicit(&h->counts[handler][code], 1, memory_order_relaxed);
  return ret;
}

/* ---------------------------------------------------------------- the header deadline */

/* libmicrohttpd's own limit is max_conn + HTTP_SPARE: room for the connections make_room has
 * shut down until libmicrohttpd has closed them. */
#define HTTP_SPARE 32u

/* Connection `fresh` was accepted: over max_conn, the one that has waited longest for its
 * request's headers (or, kept alive, for its next request) is shut down. At the limit
 * libmicrohttpd refused every new connection, so 8 slow connections from each of 20 addresses
 * (the per-address limit is 8) kept a scraper out until the header deadline and again after
 * every reconnect: 0 of 7 scrapes. A scraper's request is complete within milliseconds of its
 * accept, so it is never the one that has waited longest. Called with h->mu held. */
static void make_room(ps_http *h, const http_conn *fresh) {
  size_t open = 0;
  http_conn *oldest = NULL;
  for (size_t i = 0; i < h->nconns; i++) {
    http_conn *c = &h->conns[i];
    if (c->fd < 0 || c->cut) continue;
    open++;
    if (c != fresh && c->waiting && (!oldest || c->since_ns < oldest->since_ns)) oldest = c;
  }
  if (open <= h->max_conn || !oldest) return;
  shutdown(oldest->fd, SHUT_RDWR); /* libmicrohttpd reads EOF and closes it */
  oldest->cut = true;
  PS_DEBUG("http: %zu connections: cut the one idle longest to make room", open);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  ps_http *h = cls;
  pthread_mutex_lock(&h->mu);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    *socket_context = NULL;
    for (size_t i = 0; ci && i < h->nconns; i++) {
      if (h->conns[i].fd >= 0) continue;
      const uint64_t now = ps_now_ns();
      h->conns[i] = (http_conn){.fd = ci->connect_fd, .waiting = true,
                                .deadline_ns = now + h->header_ns, .since_ns = now};
      *socket_context = &h->conns[i];
      make_room(h, &h->conns[i]);
      break;
    }
  } else if (*socket_context) {
    ((http_conn *)*socket_context)->fd = -1;
    *socket_context = NULL;
  }
  pthread_mutex_unlock(&h->mu);
}

/* waiting = the next request's headers are due (by the idle timeout on a kept-alive one). */
static void conn_mark(ps_http *h, struct MHD_Connection *conn, bool waiting) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (!ci || !ci->socket_context) return;
  pthread_mutex_lock(&h->mu);
  http_conn *c = ci->socket_context;
  c->waiting = waiting;
  c->since_ns = ps_now_ns();
  c->deadline_ns = c->since_ns + h->idle_ns;
  pthread_mutex_unlock(&h->mu);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)con_cls;
  (void)toe;
  conn_mark(cls, conn, true);
}

static void *reaper_main(void *arg) {
  ps_http *h = arg;
  pthread_mutex_lock(&h->mu);
  while (!h->stop) {
    uint64_t now = ps_now_ns();
    for (size_t i = 0; i < h->nconns; i++) {
      http_conn *c = &h->conns[i];
      if (c->fd < 0 || !c->waiting || c->cut || now < c->deadline_ns) continue;
      shutdown(c->fd, SHUT_RDWR);
      c->cut = true;
      PS_DEBUG("http: cut a connection whose request headers were late");
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 250000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static void http_free(ps_http *h) {
  if (h->reaper_on) ps_thread_stop(h->reaper, &h->mu, &h->cv, &h->stop);
  if (h->requests) ps_metric_set_collect(h->requests, NULL, NULL);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h->conns);
  free(h);
}

/* ---------------------------------------------------------------- requests */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  (void)upload_data;
  ps_http *h = cls;
  static int first_call_seen; /* only its address is used, as the per-request marker */
  static const char text[] = "text/plain; charset=utf-8";
  int handler = H_OTHER;
  if (url && strcmp(url, "/metrics") == 0) handler = H_METRICS;
  else if (url && strcmp(url, "/healthz") == 0) handler = H_HEALTHZ;

  if (!method || (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)) {
    static char msg[] = "method not allowed\n";
    return reply(h, conn, handler, MHD_HTTP_METHOD_NOT_ALLOWED, text, msg, sizeof msg - 1,
                 MHD_RESPMEM_PERSISTENT);
  }
  /* GET/HEAD: answer on the second call, once libmicrohttpd has the whole request; a reply
   * queued on the first call makes it close the connection (it cannot know that no body
   * follows), which would defeat keep-alive between scrapes. Any stray body is discarded. */
  if (*con_cls == NULL) {
    *con_cls = &first_call_seen;
    conn_mark(h, conn, false); /* headers complete: the deadline is met */
    return MHD_YES;
  }
  if (*upload_data_size) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (handler == H_METRICS) {
    char *body = NULL;
    size_t len = 0;
    if (h->metrics) {
      if (ps_metrics_render(h->metrics, &body, &len) != PS_OK) {
        static char msg[] = "out of memory\n";
        return reply(h, conn, handler, MHD_HTTP_INTERNAL_SERVER_ERROR, text, msg, sizeof msg - 1,
                     MHD_RESPMEM_PERSISTENT);
      }
    } else {
      body = calloc(1, 1);
      if (!body) return MHD_NO;
    }
    return reply(h, conn, handler, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body,
                 len, MHD_RESPMEM_MUST_FREE);
  }
  if (handler == H_HEALTHZ) {
    char reason[256] = "";
    bool ok = !h->health || h->health(h->health_ud, reason, sizeof reason);
    if (ok) {
      static char msg[] = "ok\n";
      return reply(h, conn, handler, MHD_HTTP_OK, text, msg, sizeof msg - 1, MHD_RESPMEM_PERSISTENT);
    }
    reason[sizeof reason - 1] = '\0';
    char body[300];
    int n = snprintf(body, sizeof body, "unavailable: %s\n", reason[0] ? reason : "not serving");
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof body) n = (int)sizeof body - 1;
    return reply(h, conn, handler, MHD_HTTP_SERVICE_UNAVAILABLE, text, body, (size_t)n,
                 MHD_RESPMEM_MUST_COPY);
  }
  static char msg[] = "not found: try /metrics or /healthz\n";
  return reply(h, conn, handler, MHD_HTTP_NOT_FOUND, text, msg, sizeof msg - 1, MHD_RESPMEM_PERSISTENT);
}

bool ps_http_addr_ok(const char *addr) {
  struct in6_addr a;
  return addr && (inet_pton(AF_INET, addr, &a) == 1 || inet_pton(AF_INET6, addr, &a) == 1);
}

ps_status ps_http_start(const ps_http_opts *o, ps_http **out, ps_error *err) {
  if (out) *out = NULL;
  if (!o || !out) return ps_error_set(err, PS_ERR_INVALID, "metrics endpoint: no options or output");
  if (o->port < 0 || o->port > 65535)
    return ps_error_set(err, PS_ERR_INVALID, "metrics endpoint: bad port %d", o->port);
  const char *addr = o->bind_addr ? o->bind_addr : "127.0.0.1";
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (strchr(addr, ':')) {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)o->port);
    if (inet_pton(AF_INET6, addr, &a6->sin6_addr) != 1)
      return ps_error_set(err, PS_ERR_INVALID, "metrics endpoint: bad address %s", addr);
    flags |= MHD_USE_IPv6;
  } else {
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)o->port);
    if (inet_pton(AF_INET, addr, &a4->sin_addr) != 1)
      return ps_error_set(err, PS_ERR_INVALID, "metrics endpoint: bad address %s", addr);
  }

  unsigned max_conn = o->max_connections ? o->max_connections : 64;
  unsigned timeout = o->timeout_s ? o->timeout_s : 10;
  unsigned per_ip = o->per_ip_connections ? o->per_ip_connections : 8;
  unsigned header_s = o->header_timeout_s ? o->header_timeout_s : 5;
  ps_http *h = calloc(1, sizeof *h);
  if (h) h->nconns = (size_t)max_conn + HTTP_SPARE + 16, h->max_conn = max_conn;
  if (h && !(h->conns = malloc(h->nconns * sizeof *h->conns))) {
    free(h);
    h = NULL;
  }
  if (!h) return ps_error_set(err, PS_ERR_NOMEM, "metrics endpoint: out of memory");
  for (size_t i = 0; i < h->nconns; i++) h->conns[i].fd = -1;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->header_ns = (uint64_t)header_s * 1000000000ull;
  h->idle_ns = (uint64_t)timeout * 1000000000ull;
  h->metrics = o->metrics;
  h->health = o->health;
  h->health_ud = o->health_ud;
  if (h->metrics) {
    static const char *const labels[] = {"handler", "code"};
    ps_status st = ps_metrics_counter(h->metrics, "ember_http_requests_total",
                                      "HTTP requests to the metrics endpoint, by handler and status code.",
                                      labels, 2, &h->requests);
    if (st != PS_OK) {
      http_free(h);
      return ps_error_set(err, st, "metrics endpoint: cannot register ember_http_requests_total: %s",
                          ps_status_str(st));
    }
    ps_metric_set_collect(h->requests, collect_requests, h);
  }

  h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                          MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                          MHD_OPTION_CONNECTION_LIMIT, max_conn + HTTP_SPARE,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                          MHD_OPTION_CONNECTION_TIMEOUT, timeout,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                          MHD_OPTION_LISTEN_BACKLOG_SIZE, 128u,
                          MHD_OPTION_END);
  if (h->d && pthread_create(&h->reaper, NULL, reaper_main, h) == 0) h->reaper_on = true;
  if (!h->d || !h->reaper_on) {
    if (h->d) MHD_stop_daemon(h->d);
    http_free(h);
    return ps_error_set(err, PS_ERR_IO, "metrics endpoint: cannot listen on %s:%d", addr, o->port);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : o->port;
  PS_INFO("metrics endpoint on http://%s:%d/metrics", addr, h->port);
  *out = h;
  return PS_OK;
}

ps_status ps_http_create(const char *bind_addr, int port, ps_metrics *metrics,
                         ps_http_health_fn health, void *health_ud, ps_http **out,
                         ps_error *err) {
  ps_http_opts o = {.bind_addr = bind_addr, .port = port, .metrics = metrics,
                    .health = health, .health_ud = health_ud};
  return ps_http_start(&o, out, err);
}

int ps_http_port(const ps_http *h) { return h ? h->port : 0; }

void ps_http_destroy(ps_http **ph) {
  if (!ph || !*ph) return;
  ps_http *h = *ph;
  MHD_stop_daemon(h->d);
  /* The registry may outlive us: its callback must not reach freed memory (http_free). */
  http_free(h);
  *ph = NULL;
}
