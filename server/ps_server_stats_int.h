/* ps_server_stats_int.h: the shard's statistics (ps_server_stats.c) -- the typed snapshot
 * published for other threads (ps_server_stats_read, /metrics) and the STATS document. The
 * counters themselves (s->ops, s->traffic) are written where requests are handled; this module
 * only reads them. Private to server/. Main thread unless it says otherwise. */
#ifndef PS_SERVER_STATS_INT_H
#define PS_SERVER_STATS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_snapshot srv_snapshot;

/* The snapshot's state, and its first (empty) snapshot; PS_ERR_NOMEM without memory. */
ps_status srv_stats_init(ps_server *s);
void srv_stats_free(ps_server *s);
/* The last publish is older than 200 ms (the main loop republishes). */
bool srv_stats_due(const ps_server *s, uint64_t now);
/* Histogram buckets the last publish copied (tests, bench). */
size_t srv_stats_buckets(const ps_server *s);
/* The STATS document (a fresh fill of the scratch copy), malloc'd; NULL without memory. */
char *srv_stats_json(ps_server *s);
/* Refreshes the published snapshot (main thread): histograms by ps_hist_sync, so it costs
 * the buckets written since the last publish; srv_stats_buckets counts them. */
void srv_stats_publish(ps_server *s);

#endif
