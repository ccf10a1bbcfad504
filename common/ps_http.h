/* ps_http: the HTTP endpoint of a process's metrics: GET /metrics (Prometheus text format
 * from a ps_metrics registry) and GET /healthz (200 "ok", or 503 with the reason).
 *
 * Served by libmicrohttpd on one internal thread of its own (epoll where available), so a
 * scrape never runs on a request-serving thread; the only shared state is the registry,
 * whose render takes its lock. Other paths answer 404, methods other than GET/HEAD 405.
 * Untrusted input is bounded by libmicrohttpd's limits that we set: a connection limit, a
 * per-client-address limit (one host cannot take every slot), a per-connection memory limit
 * (oversized headers get an error reply, not an allocation) and an idle timeout (a half-sent
 * request does not hold a slot forever) -- and by a header deadline of our own: a connection
 * whose request headers are not complete within header_timeout_s of its accept is cut off,
 * however steadily it trickles bytes (slowloris resets an idle timeout with every byte).
 * At the connection limit a new connection is not refused: the one that has waited longest
 * for a request's headers is cut instead, so slow clients from many addresses cannot keep a
 * scraper out (its request is complete as soon as it connects).
 * The endpoint listens on 127.0.0.1 unless told otherwise: metrics are for the host's own
 * scraper unless the operator opens them (--metrics-bind 0.0.0.0). */
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
  const char *bind_addr;  /* IPv4 or IPv6 literal; NULL = "127.0.0.1" (this host only) */
  int port;               /* 0 = an ephemeral port, see ps_http_port */
  ps_metrics *metrics;    /* may be NULL: /metrics then serves an empty body */
  ps_http_health_fn health;
  void *health_ud;
  unsigned max_connections;   /* 0 = 64 */
  unsigned timeout_s;         /* idle connection timeout; 0 = 10 */
  unsigned per_ip_connections; /* connections from one client address; 0 = 8 */
  unsigned header_timeout_s;   /* request headers complete within this of accept; 0 = 5 */
} ps_http_opts;

/* Whether addr is an IPv4 or IPv6 literal ps_http_start can bind (the --metrics-bind check). */
bool ps_http_addr_ok(const char *addr);

/* Starts serving. The registry (and health_ud) must outlive the ps_http. When a registry is
 * given, ember_http_requests_total{handler,code} is registered in it. PS_ERR_IO when the
 * address cannot be bound (port in use), PS_ERR_INVALID for a bad address or port; err (may
 * be NULL) gets the reason, e.g. "metrics endpoint: cannot listen on 0.0.0.0:9100". */
ps_status ps_http_start(const ps_http_opts *opts, ps_http **out, ps_error *err);
/* Shorthand: 127.0.0.1 unless bind_addr, default limits. */
ps_status ps_http_create(const char *bind_addr, int port, ps_metrics *metrics,
                         ps_http_health_fn health, void *health_ud, ps_http **out,
                         ps_error *err);
/* The port actually bound (the chosen one when port 0 was asked for). */
int ps_http_port(const ps_http *h);
/* Stops the thread, closes every connection, frees; sets *h = NULL. */
void ps_http_destroy(ps_http **h);

#endif
