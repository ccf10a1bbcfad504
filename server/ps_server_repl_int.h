/* ps_server_repl_int.h: replicated shards (ps-server --replica R --replicas K --peers URLS),
 * the server's calls into ps_server_repl.c. Private to server/.
 *
 * A shard runs as K replicas; the primary (the lowest-numbered live one, see
 * docs/DESIGN.md "Replicated shards") forwards every state-changing request to its live
 * backups, one ordered DEALER channel each, and handles it itself once every live backup
 * acknowledged it; backups refuse (after holding them up to --failover-ms) the requests of
 * clients, watch the primary's heartbeats and promote themselves when it falls silent. With
 * K == 1 none of this exists (s->repl is NULL) and every hook is a no-op. */
#ifndef PS_SERVER_REPL_INT_H
#define PS_SERVER_REPL_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <zmq.h>

#include "ps_server_int.h"

#define SRV_REPL_MAX 8 /* replicas of one shard */

/* What a replica is now. */
enum {
  SRV_REPL_PROBING = 0, /* just started: asking its peers whether a primary lives */
  SRV_REPL_PRIMARY = 1,
  SRV_REPL_BACKUP = 2,
  SRV_REPL_STALE = 3 /* restarted or dropped while a primary lived: out of the live set */
};

/* After the socket is bound: the peers' DEALER sockets, then the probe. opt.replicas <= 1:
 * nothing (PS_OK). PS_ERR_INVALID when --peers is not K URLs with --listen at index R. */
ps_status srv_repl_start(ps_server *s, const char *listen, ps_error *err);
void srv_repl_stop(ps_server *s);
/* srv_handle's first step: true when r was taken here (queued until the backups acked it,
 * held or refused by a replica that is not the primary, a heartbeat answered). false: handle
 * r as usual (no replication, a forward a backup takes, a request already acked). */
bool srv_repl_intake(ps_server *s, srv_req *r);
/* The main loop's poll: the peers' sockets go into items (at most SRV_REPL_MAX); returns how
 * many. srv_repl_poll takes up what they received (acks, probe answers). */
int srv_repl_poll_items(ps_server *s, zmq_pollitem_t *items);
void srv_repl_poll(ps_server *s, const zmq_pollitem_t *items, int n);
/* Heartbeats, silent peers, promotion, held requests that are due: ms until it must run
 * again (at most 100). */
long srv_repl_tick(ps_server *s);
/* Shutdown: every queued or held request is answered PS_ERR_UNAVAILABLE. */
void srv_repl_drain(ps_server *s);
/* Whether this replica saw every push its shard ever took (it was a live backup, then
 * promoted): a re-sent push it has no record of was never applied anywhere. */
bool srv_repl_records_complete(const ps_server *s);
/* The STATS fields of replication. */
void srv_repl_stats(const ps_server *s, ps_server_stats *out);

#endif
