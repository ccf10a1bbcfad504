/* ps_http: the HTTP endpoint of a process's metrics: GET /metrics (Prometheus text format
 * from a ps_metrics registry) and GET /healthz (200 "ok", or 503 with the reason).
 *
 * Served by libmicrohttpd on one internal thread of its own (epoll where available), so a
 * scrape never runs on a request-serving thread; the only shared state is the registry,
 * whose render takes its lock. Other paths answer 404, methods other than GET/HEAD 405.
 * Untrusted input is bounded by libmicrohttpd's limits that we set: a connection limit, a
 * per-connection memory limit (oversized headers get an error reply, not an allocation) and
 * an idle timeout (a half-sent request does not hold a slot forever). */
#ifndef PS_HTTP_H
#define PS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_metrics.h"
#include "ps_status.h"

typedef struct ps_http ps_http;

/* Health check, called on each GET /healthz from the HTTP thread: return true when serving;
 * otherwise write a short reason into reason[0..reason_len) (NUL-terminated). NULL = always
 * healthy. Must be thread-safe with respect to the process's own state. */
typedef bool (*ps_http_health_fn)(void *ud, char *reason, size_t reason_len);

typedef struct ps_http_opts {
  const char *bind_addr;  /* IPv4 or IPv6 literal; NULL = "0.0.0.0" (all interfaces) */
  int port;               /* 0 = an ephemeral port, see ps_http_port */
  ps_metrics *metrics;    /* may be NULL: /metrics then serves an empty body */
  ps_http_health_fn health;
  void *health_ud;
  unsigned max_connections;   /* 0 = 64 */
  unsigned timeout_s;         /* idle connection timeout; 0 = 10 */
} ps_http_opts;

/* Starts serving. The registry (and health_ud) must outlive the ps_http. When a registry is
 * given, ember_http_requests_total{handler,code} is registered in it. PS_ERR_IO when the
 * address cannot be bound (port in use), PS_ERR_INVALID for a bad address or port; err (may
 * be NULL) gets the reason, e.g. "metrics endpoint: cannot listen on 0.0.0.0:9100". */
ps_status ps_http_start(const ps_http_opts *opts, ps_http **out, ps_error *err);
/* Shorthand: all interfaces unless bind_addr, default limits. */
ps_status ps_http_create(const char *bind_addr, int port, ps_metrics *metrics,
                         ps_http_health_fn health, void *health_ud, ps_http **out,
                         ps_error *err);
/* The port actually bound (the chosen one when port 0 was asked for). */
int ps_http_port(const ps_http *h);
/* Stops the thread, closes every connection, frees; sets *h = NULL. */
void ps_http_destroy(ps_http **h);

#endif
