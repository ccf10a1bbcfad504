/* ps_server_metrics: ps-server's Prometheus metrics, read at scrape time from the server's
 * statistics snapshot (ps_server_stats_read). Names: see deploy/README.md and
 * deploy/prometheus/grafana-ember.json. */
#ifndef PS_SERVER_METRICS_H
#define PS_SERVER_METRICS_H

#include "ps_metrics.h"
#include "ps_server.h"

/* Counters and gauges (requests/errors/keys per op, queues, store rows/bytes/hits/misses/
 * evictions, bytes in/out); s must outlive the registry's scrapes. Register before ps_http. */
ps_status ps_server_metrics_register(ps_metrics *m, ps_server *s);
/* Per-op histograms: ember_server_request_duration_seconds{op} (receipt -> reply), and its
 * split, ember_server_request_queue_seconds{op} (receipt -> store work starts) and
 * ember_server_request_service_seconds{op} (store work -> reply). Register after
 * ps_server_metrics_register (whose first family takes the scrape's snapshot). */
ps_status ps_server_metrics_register_latency(ps_metrics *m);

#endif
