/* ps_coord_int: the coordinator's interface (JOIN, KV_SET/KV_GET, BARRIER on shard 0).
 *
 * The coordinator owns its state and nothing else: it sees a request as an opaque handle plus
 * its decoded header, and answers through the two callbacks of srv_coord_reply. So it knows
 * nothing of sockets, the server's request pool or its statistics, and a test can drive it
 * in-process with a fake reply interface. A handle given to srv_coord_handle belongs to the
 * coordinator until it is answered (now or later: KV_GET waits, barriers); its header must stay
 * valid until then. Not a public header. */
#ifndef PS_COORD_INT_H
#define PS_COORD_INT_H

#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_coord_reply {
  void *ctx;
  /* Answers req with rh (the coordinator filled its op and fields) and releases req. */
  void (*reply)(void *ctx, void *req, Ember__Header *rh);
  /* Answers req with an error status and message and releases req. */
  void (*error)(void *ctx, void *req, ps_status st, const char *msg);
} srv_coord_reply;

typedef struct srv_coord srv_coord;

/* The global checkpoint's record (ps_client_checkpoint): the one key under the reserved
 * "ember/" prefix that any client may set, because the server checks its value against the
 * checkpoint shard 0 committed before handing it over. Other "ember/" keys are set only by a
 * member of a world (a connection holding a rank); see ps_coord_kv.c for the quotas. */
#define SRV_COORD_CKPT_KEY "ember/checkpoint/latest"

/* Who sent a request: its connection (the ROUTER routing id, as a number), the connection's
 * file descriptor (what a disconnect event names) and the peer's address, for messages. */
typedef struct srv_coord_peer {
  uint64_t conn;
  int fd;
  char addr[64];
} srv_coord_peer;

/* The reply interface is copied. NULL without memory. */
srv_coord *srv_coord_create(const srv_coord_reply *io);
/* Frees the state; waiters still parked are dropped unanswered (drain first). */
void srv_coord_destroy(srv_coord **c);
/* Takes ownership of req (answers now or later); h is its decoded header. Without a peer
 * (in-process dispatch) nothing is known of the sender's connection: a rank taken by JOIN is
 * then never "already taken" and never released. */
void srv_coord_handle(srv_coord *c, void *req, const Ember__Header *h);
/* The same, from a known connection (copied): a JOIN of a rank that another live connection
 * holds is refused with "rank R is already taken by ...", and srv_coord_peer_gone releases
 * the ranks and waits of a connection. */
void srv_coord_handle_from(srv_coord *c, void *req, const Ember__Header *h,
                           const srv_coord_peer *peer);
/* A backup of shard 0: applies the state change of a JOIN, KV_SET or BARRIER its primary
 * forwarded (the primary already checked who sent it); nothing is answered, a barrier arrival
 * is recorded without waiting for the barrier. Other ops are ignored. */
void srv_coord_apply(srv_coord *c, const Ember__Header *h);
/* The connection on file descriptor fd closed: its ranks are free again, its parked requests
 * are dropped (answered PS_ERR_UNAVAILABLE, which goes nowhere), and once no rank is taken the
 * cluster forgets its world. */
void srv_coord_peer_gone(srv_coord *c, int fd);
/* Answers PS_ERR_TIMEOUT to waiters whose deadline is <= now (ns, ps_now_ns); returns the next
 * deadline or 0 when nobody waits with one. */
uint64_t srv_coord_expire(srv_coord *c, uint64_t now);
/* Answers every waiter with PS_ERR_UNAVAILABLE (shutdown). */
void srv_coord_drain(srv_coord *c);
/* The coordinator's part of the server's statistics (ranks reuses out's earlier allocation). */
void srv_coord_get_stats(const srv_coord *c, ps_server_coord_stats *out);

#endif
