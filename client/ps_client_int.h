/* ps_client_int.h: the client's insides, shared by its four files and by nothing else.
 *
 *   ps_client.c        the client object: sockets per shard, options, accessors
 *   ps_client_io.c     request bookkeeping: request ids, the in-flight table, sending,
 *                      receiving and validating replies (ps_wire_check_reply), timeouts,
 *                      reconnect and re-send
 *   ps_client_data.c   pull and push: de-duplication, per-shard key splitting, gradient sums,
 *                      f16 conversion, scattering pulled rows back
 *   ps_client_coord.c  every other op: declare, step, join, barrier, kv, checkpoint, restore,
 *                      stats, ping
 *
 * Design: no background thread. Requests are sent from the caller's thread when they start;
 * waiting polls every server socket and handles whatever reply arrives, for any request in
 * flight, until the one waited for is complete (so a pipelined caller never loses a reply). A
 * request is a set of sub-requests, one per shard it touches, each with its own request id.
 * Bulk frames are written straight into zmq messages (keys sharded into them, gradients summed
 * into them), and pulled rows are copied once, from the reply frames to the caller's rows. A
 * socket monitor per server tells when a connection drops and comes back, which is what drives
 * re-sending (idempotent requests, and pushes, which a shard applies once by their sequence
 * numbers) or failing (the others). */
#ifndef PS_CLIENT_INT_H
#define PS_CLIENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "ember.pb-c.h"
#include "ps_client.h"
#include "ps_dedup.h"
#include "ps_wire.h"

#define CL_MAX_SERVERS 4096
#define CL_MAX_REPLICAS 8 /* URLs of one shard ('U0|U1|...') */

/* One request's part for one shard. */
typedef struct cl_sub {
  uint64_t rid;
  struct ps_client_req *req;
  uint32_t srv;
  bool pending;  /* registered, waiting for its reply */
  bool lost;     /* its connection dropped; re-send when it is back */
  uint64_t busy_ns; /* refused "busy": re-send at this time (0 = not) */
  uint32_t busy_tries;
  zmq_msg_t part[PS_WIRE_MAX_FRAMES]; /* kept for re-sending (idempotent requests) */
  int nparts;
  zmq_msg_t vals; /* pull reply rows */
  bool has_vals;
  zmq_msg_t pos;  /* REFRESH reply: its rows' positions among the sub-request's keys */
  bool has_pos;
  Ember__Header *rep; /* control replies */
  size_t nkeys;
  uint64_t seq; /* a push's sequence number on its shard (0: none), settled at release */
} cl_sub;

struct ps_client_req {
  ps_client *c;
  struct ps_client_req *next_free, *next_all;
  Ember__Op op;
  uint32_t table, dim;
  size_t n, nu;
  float *out;
  bool unique;
  bool warm;      /* a prefetch: a pull answered with no rows (ps_client_prefetch_start) */
  bool idempotent;
  bool keep;      /* its frames are kept for a re-send (idempotent, or any with replicas) */
  bool in_use;
  /* Key scratch of pulls and pushes, cap entries each, in one block (scratch): the unique
   * keys, each key's unique index, and each unique key's shard and index in that shard. */
  uint64_t *ukeys;
  uint32_t *inv, *ush, *uidx;
  void *scratch;
  size_t cap;
  cl_sub *subs;   /* one per server */
  struct ps_client_req *chain; /* the next part of a split pull or push (ps_client_data.c) */
  uint32_t active, done;
  ps_status st;
  char err[1024];
  uint64_t deadline;
  uint64_t timeout_ms;
};

typedef struct cl_server {
  char url[256];   /* the replica the client talks to now (rep[cur]) */
  /* replicated shards: the shard's URLs in replica order; a disconnect or a replica's
   * not-primary answer moves the client to another (cl_failover) */
  char rep[CL_MAX_REPLICAS][256];
  uint32_t nrep, cur, lost_from;
  uint64_t lost_ns; /* failing over since (0 = not): logged with the first answer after */
  uint64_t moved_ns; /* the last move to another replica; 0 once its connection is up */
  void *sock;
  void *mon;
  bool down;
  bool answered; /* a handshake succeeded once: the server is there */
  bool warned;   /* "does not answer yet" was logged */
  int refused;   /* the last handshake failed: ZMQ_EVENT_HANDSHAKE_FAILED_AUTH or _PROTOCOL */
  /* exactly-once pushes: seqs [seq_floor, seq_next) are unsettled; seq_done (a ring of
   * PS_WIRE_SEQ_WINDOW bits, allocated at the first push) marks those settled above the floor */
  uint64_t seq_next, seq_floor;
  uint64_t *seq_done;
  /* serving shards: the lowest and highest `served` of the pull replies since the last
   * ps_client_served_take (lo > hi: none) */
  uint64_t served_lo, served_hi;
} cl_server;

struct ps_client {
  ps_client_options opt;
  void *ctx;
  /* The per-shard arrays, fixed at create, in one block that srv points to. */
  cl_server *srv;
  size_t nsrv;
  zmq_pollitem_t *items; /* 2 per server: its socket, its monitor */
  size_t *cnt;           /* per-shard scratch of a pull or push */
  char **vbase;
  ps_dedup *dd;
  uint64_t next_rid;
  cl_sub **pend; /* the in-flight table: every sub-request waiting for its reply */
  size_t npend, pend_cap;
  struct ps_client_req *free_reqs, *all_reqs;
  uint16_t *dims; /* by table id; 0 = not declared here */
  uint64_t disconnects, resent, stale;
  size_t nbusy;  /* sub-requests waiting to be re-sent after a "busy" refusal */
  size_t nunsure; /* servers neither answered nor warned about: 0 keeps waits free of checks */
  float *acc;  /* f16 pushes: gradients summed in f32 before conversion */
  size_t acc_cap;
  uint64_t id; /* exactly-once pushes: this client's id (options.client_id or random) */
  bool replicated; /* some shard has replicas: STEP is re-sent too, every request kept */
  uint64_t failovers, failover_ms_last;
  uint64_t refreshed; /* rows REFRESH replies carried (ps_client_refreshed) */
  uint32_t *rev;      /* REFRESH over several shards: (shard offset + index) -> unique index */
  size_t rev_cap;
};

/* ps_client_io.c */
/* A request from the free list (or a new one) for op, due within timeout_ms; NULL if out of
 * memory. Its subs are reset; release it with cl_req_release. */
struct ps_client_req *cl_req_get(ps_client *c, Ember__Op op, uint64_t timeout_ms);
void cl_req_release(ps_client *c, struct ps_client_req *r);
/* Frees every request (at destroy). */
void cl_reqs_free(ps_client *c);
/* Packs h (with a fresh request id) as part 0 of s and sends s, whose further nbulk parts are
 * already in s->part[1..]; a failure fails s (the request reports it when waited for). */
void cl_sub_start(ps_client *c, cl_sub *s, Ember__Header *h, int nbulk);
/* ps_client_io.c: sends sub-request s on its shard's socket (keep: keep its frames). */
int cl_sub_send(ps_client *c, cl_sub *s, bool keep);
/* ps_client_resend.c: re-sends shard srv's lost sub-requests in their first-sent order. */
void cl_resend_lost(ps_client *c, uint32_t srv);
/* Shard srv moves to replica `to`: reconnects there and re-sends what was outstanding. */
void cl_failover(ps_client *c, uint32_t srv, uint32_t to, const char *why);
/* Replicas moved to that did not connect within failover_ms: on to the next (waits call it). */
void cl_failover_check(ps_client *c);
/* Waits for r and, for a pull, scatters its rows; leaves r in use (the caller reads its
 * replies and releases it). On failure err says why (the server URL and shard first). */
ps_status cl_req_wait(ps_client *c, struct ps_client_req *r, ps_error *err);

/* Exactly-once pushes: gives a push's header h to shard srv its client id, next sequence
 * number (kept in *seq) and floor; PS_ERR_INVALID (err) when PS_WIRE_SEQ_WINDOW - 1 pushes to
 * the shard are unsettled already, PS_ERR_NOMEM. */
ps_status cl_seq_take(ps_client *c, uint32_t srv, Ember__Header *h, uint64_t *seq, ps_error *err);
/* The push with this seq to shard srv will never be sent again (released). */
void cl_seq_settle(ps_client *c, uint32_t srv, uint64_t seq);

/* ps_client_data.c */
/* Copies a complete pull's rows from its reply frames to the caller's rows. */
void cl_scatter_pull(ps_client *c, struct ps_client_req *r);
/* The same for a REFRESH: only the rows its replies carry, at their positions. */
ps_status cl_scatter_refresh(ps_client *c, struct ps_client_req *r, ps_error *err);

#endif
