/* ps_server_replication_int.h: replicated shards (ps-server --replica R --replicas K --peers URLS),
 * the server's calls into ps_server_replication.c. Private to server/.
 *
 * A shard runs as K replicas; the primary (the lowest-numbered live one, see
 * docs/DESIGN.md "Replicated shards") forwards every state-changing request to its live
 * backups, one ordered DEALER channel each, and handles it itself once every live backup
 * acknowledged it; backups refuse (after holding them up to --failover-ms) the requests of
 * clients, watch the primary's heartbeats and promote themselves when it falls silent. With
 * K == 1 none of this exists (s->repl is NULL) and every hook is a no-op. */
#ifndef PS_SERVER_REPLICATION_INT_H
#define PS_SERVER_REPLICATION_INT_H

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
  SRV_REPL_STALE = 3,   /* restarted or dropped while a primary lived: out of the live set */
  SRV_REPL_CATCHING = 4 /* loading the primary's base and history */
};

typedef struct repl_peer {
  char url[256];
  void *sock;       /* DEALER to the peer (NULL for this replica) */
  bool live;        /* primary: in the live set */
  bool heard;       /* primary: it answered once */
  uint64_t heard_ns; /* its last answer */
  struct repl_sync *sync; /* primary: its catch-up in progress (ps_server_replication_catchup.c) */
} repl_peer;

/* A request of the shard's history since the base: its frames (shared with the request's). */
typedef struct repl_entry {
  zmq_msg_t fr[PS_WIRE_MAX_FRAMES];
  size_t nfr;
} repl_entry;

typedef struct srv_repl {
  uint32_t self, n;
  int role;
  uint32_t primary;     /* the replica known as primary (n = none) */
  uint64_t epoch;
  uint32_t live_mask;   /* the last live set the primary announced (backups) */
  repl_peer peer[SRV_REPL_MAX];
  uint64_t failover_ns, beat_ns, next_beat, started, probe_end;
  uint64_t primary_heard; /* backups: last word from the primary (0 = never) */
  uint64_t fseq;          /* forwards and beats sent (their request ids) */
  srv_req *q_head, *q_tail; /* primary: taken requests, in order, waiting for acks */
  srv_req *h_head, *h_tail; /* not primary: clients' requests held for a promotion */
  bool complete;          /* saw every push of the shard's history (backup, then primary) */
  /* catch-up (ps_server_replication_catchup.c): the base snapshot (data dir/repl-base) and every
   * state-changing request taken since, in order; a stale replica's request for it */
  repl_entry *log;
  size_t nlog, log_cap;
  uint64_t base_step;
  bool have_base;
  uint64_t sync_asked;    /* stale: when it last asked its primary for a catch-up */
  uint64_t sync_heard;    /* catching up: the primary's last catch-up message */
  uint64_t catchups;      /* replicas this one caught up (primary), or its own (1) */
  uint64_t forwarded, dropped, promotions, refused, held_ns_max;
  char curve_pub[PS_CURVE_Z85_SIZE]; /* with --curve-secret: its public key (peers' server) */
} srv_repl;

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
/* Requests the acks released go to the ready queue (the caller runs it: srv_run_ready). */
void srv_repl_poll(ps_server *s, const zmq_pollitem_t *items, int n);
/* Heartbeats, silent peers, promotion, held requests that are due: ms until it must run
 * again (at most 100). */
long srv_repl_tick(ps_server *s); /* also fills the ready queue (promotion): run it after */
/* Shutdown: every queued or held request is answered PS_ERR_UNAVAILABLE. */
void srv_repl_drain(ps_server *s);
/* Whether this replica saw every push its shard ever took (it was a live backup, then
 * promoted): a re-sent push it has no record of was never applied anywhere. */
bool srv_repl_records_complete(const ps_server *s);
/* The STATS fields of replication. */
void srv_repl_stats(const ps_server *s, ps_server_stats *out);
/* After a RESTORE (no store work in flight): the primary's history starts again there. */
void srv_repl_restored(ps_server *s, uint64_t step);

/* Between ps_server_replication.c, ps_server_replication_setup.c and
 * ps_server_replication_catchup.c. */
/* "primary", "backup", ... (STATS, messages). */
const char *srv_repl_role_name(int role);
/* This replica and the live backups (bit per replica): the primary's live set. */
uint32_t srv_repl_live_mask(const srv_repl *x);
/* A DEALER to peer p's URL into p->sock (NULL when it cannot be opened). */
void srv_repl_open_peer(ps_server *s, repl_peer *p);
/* Header h (and nb bulk frames, shared) to peer i; false when its channel does not take it. */
bool srv_repl_send(srv_repl *x, uint32_t i, Ember__Header *h, zmq_msg_t *bulk, size_t nb);
/* Answers r PS_ERR_UNAVAILABLE naming the primary known (repl_primary), as a refusal
 * (repl_from). */
void srv_repl_refuse(ps_server *s, srv_req *r, const char *what);
/* The history: r (a state-changing request taken) appended; the base taken now (no store work
 * in flight), the history emptied; everything freed. */
void srv_repl_log_add(ps_server *s, srv_req *r);
void srv_repl_base_take(ps_server *s, uint64_t step);
void srv_repl_log_free(srv_repl *x);
/* Primary: OP_REPL_CATCHUP r from replica i starts its catch-up (or refuses); the catch-ups
 * in progress send what their windows allow; an answer from i, true when it was a catch-up's. */
void srv_repl_sync_start(ps_server *s, srv_req *r, uint32_t i);
void srv_repl_sync_pump(ps_server *s);
bool srv_repl_sync_ack(ps_server *s, uint32_t i, const Ember__Header *h);
void srv_repl_sync_stop(repl_peer *p);
/* Stale: asks the primary for a catch-up. Catching: OP_REPL_FILE / OP_REPL_BASE taken (true),
 * or not one of them (false). */
void srv_repl_sync_ask(ps_server *s);
bool srv_repl_sync_intake(ps_server *s, srv_req *r);

#endif
