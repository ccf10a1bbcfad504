/* ps_server_int: what every file of the server shares -- struct ps_server (the shard: its
 * options, sockets, tables and store, the per-op counters, and one pointer per mechanism),
 * srv_req (one request from intake to reply), srv_table, and the request/reply calls of
 * ps_server_requests.c. Not a public header.
 *
 * Each mechanism keeps its state in its own file, behind its own header, as the coordinator
 * does (ps_coord_int.h): the struct is opaque to the other files, which call the header.
 *   ps_server.c                        the main loop: sockets, intake, poll, lifecycle
 *   ps_server_requests.c               requests (a pooled srv_req per message) and replies
 *   ps_server_connections.c (_int.h)   the ROUTER's connections: accepted, refused, closed
 *   ps_server_ops.c (_int.h)           op handlers, and the reply of their store work
 *   ps_server_partition_threads.c (_int.h)  the thread pool that runs store work
 *   ps_server_request_schedule.c (_int.h)   step bookkeeping, deferred pulls, sync apply,
 *                                      exclusive operations, held and ready requests, ranks
 *   ps_server_mem.c (_int.h)           memory bounds: caps, charges, parked requests
 *   ps_server_refresh.c (_int.h)       REFRESH: the keys each sync step changed
 *   ps_server_pull_state.c (_int.h)    a PULL with_state: rows with their optimizer state
 *   ps_server_checkpoint.c (_int.h)    the data dir's metadata, checkpoints and restores
 *   ps_server_permissions.c (_int.h)   checkpoint roots, restores that would roll back
 *                                      another connection's training, stale declarations
 *   ps_server_stats.c (_int.h)         the published statistics snapshot, the STATS document
 *   ps_server_serve.c (_int.h)         --serve: a checkpoint read-only or an export's rows
 *   ps_server_follow.c (_int.h)        --follow: the watcher of `latest`, served versions
 *   ps_server_exactly_once.c (_int.h)  exactly-once pushes: the (client, seq) records
 *   ps_server_delay.c (_int.h)         --inject-delay-us: replies held for a fixed delay
 *   ps_server_replication.c (_int.h)   replicated shards: forwarding, heartbeats, failover,
 *                                      with _setup.c (peers) and _catchup.c (catch-up)
 *   (the ZAP handler of a CURVE server: common/ps_curve_auth.c, declared in ps_curve.h)
 *   ps_coord.c (_int.h)                the coordinator, which does not see this header
 * Everything here runs on the main thread unless it says otherwise. */
#ifndef PS_SERVER_INT_H
#define PS_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <zmq.h>

#include "ps_coord_int.h"
#include "ps_grow.h"
#include "ps_hist.h"
#include "ps_server.h"
#include "ps_store.h"
#include "ps_wire.h"

/* Sync mode buffers the pushes of at most this many steps ahead of the last applied one. */
#define SRV_WINDOW 16u
/* A pull reply larger than this is refused (count and dim are each bounded by ps_wire, but
 * their product is not bounded enough to allocate blindly). */
#define SRV_MAX_REPLY_BYTES ((size_t)512 << 20)
#define SRV_MAX_WORKERS PS_TABLE_MAX_WORKERS
/* ZeroMQ's queues of one connection, each way (ZMQ_SNDHWM, ZMQ_RCVHWM), in messages: replies
 * past it to a connection that does not read are dropped (ROUTER), requests past it wait in
 * the peer's TCP buffers. A client never has more replies queued than requests outstanding:
 * ps_client keeps at most 4095 pushes unsettled per shard (PS_WIRE_SEQ_WINDOW), and its other
 * requests in flight are few, so twice that never drops a reply a client waits for. */
#define SRV_PEER_HWM 8192

enum { REQ_CLIENT = 0, REQ_APPLY = 1 };
/* Store work a request hands to the partition threads. */
enum { TK_PULL = 1, TK_PUSH, TK_BUFFER, TK_APPLY, TK_WARM }; /* TK_WARM: a pull with warm set */
/* Per-op counters, indexed by Ember__Op (0..13). */
#define SRV_NOPS PS_SERVER_NOPS

typedef struct srv_req srv_req;

typedef struct srv_task {
  srv_req *req;
  uint32_t part;
  ps_status st;
  uint64_t started; /* when its partition thread took it up (ns): the end of its queue wait */
} srv_task;

/* A client's declaration of a table that no client has used yet (ps_server_permissions.c). */
typedef struct srv_decl {
  srv_coord_peer peer;
  ps_table_spec spec;
} srv_decl;

typedef struct srv_changed srv_changed; /* sync: the keys each step changed (ps_server_refresh.c) */

typedef struct srv_table {
  ps_table_spec spec;    /* rows and stepping (spec.consistency, .staleness, .num_workers) */
  bool meta_unknown;     /* found in the store but not in our metadata: first declare sets it */
  bool provisional;      /* declared, used by nobody yet: not in the store, spec may change */
  srv_decl *decls;       /* provisional: who declared which spec (the first user's wins) */
  size_t ndecls;
  bool step_init;        /* step state adopted from the first step-bearing message */
  uint64_t applied;      /* sync: steps < applied are applied; ssp/async: min worker clock */
  uint64_t apply_issued; /* sync: steps < apply_issued have been handed to the threads */
  uint64_t *clock;       /* per worker: number of steps it reported finished */
  srv_req *wait_head, *wait_tail; /* deferred pulls, FIFO */
  uint64_t deferred;     /* pulls deferred so far (stats) */
  uint64_t sync_bytes[SRV_WINDOW]; /* sync: charged for the pushes buffered per step slot */
  srv_changed *chg;      /* sync: the keys each recent step's pushes carried (NULL: none yet) */
  uint64_t refreshed;    /* rows REFRESH replies carried (stats) */
  uint64_t refresh_full; /* REFRESH answers with every row: what changed was not known */
} srv_table;

struct srv_req {
  srv_req *next;
  int kind;
  zmq_msg_t ident;
  bool has_ident;
  zmq_msg_t fr[PS_WIRE_MAX_FRAMES];
  size_t nfr;
  ps_msg msg;
  Ember__Header *h;   /* msg.hdr once decoded */
  srv_table *tab;
  uint64_t step;
  int task_kind;
  zmq_msg_t out;
  bool has_out;
  float *outp;
  bool f16;           /* bulk values travel as f16 (request's value_type) */
  uint32_t pending;
  srv_task *tasks;
  ps_store_batch *batch; /* keys grouped by store partition, shared by the threads */
  uint64_t *refresh_pos; /* REFRESH: the selected keys' positions in the request */
  ps_status st;
  uint64_t t0;        /* arrival: the socket thread picked it up */
  /* Store work started: handed to the inline partition, or the last of its partition threads
   * took it up (a thread busy with earlier requests is queueing, not service). 0 = never
   * dispatched (refused, answered on the socket thread, or still deferred). */
  uint64_t t_svc;
  /* memory bounds (ps_server_mem.c) */
  uint32_t slot;       /* its connection's slot */
  int fd;              /* its connection's socket (ZMQ_SRCFD), -1 in-process: what a
                        * disconnect (the monitor's fd) drops */
  int park_kind;       /* parked: resumed by srv_handle (PARK_HANDLE) or as a TK_PULL */
  size_t charged;      /* bytes charged, released when r is freed */
  size_t reserved;     /* of which reserved for its pull reply */
  size_t park_bytes;   /* frame bytes while parked */
  /* exactly-once (ps_server_exactly_once.c) */
  bool once_reg;        /* a push taken in the records: its reply settles it */
  srv_req *once_dups;   /* copies of this push that arrived before its reply (via next) */
  ps_store *store;     /* the store its store work uses (set at dispatch) */
  struct srv_version *ver; /* --follow: the served version it holds while its store work runs */
  uint64_t served;         /* a serving shard's pull: 1 + the step its rows are read from */
  /* replicated shards (ps_server_replication.c) */
  uint64_t repl_seq;   /* primary: the id of its forward to the backups */
  uint64_t repl_sent;  /* when it was forwarded (or held, on a replica that is not primary) */
  uint32_t repl_wait;  /* primary: backups whose ack it waits for (bit per replica) */
  bool repl_done;      /* replication is done with it: handle it as usual */
  /* --inject-delay-us (ps_server_delay.c) */
  bool delay_sent;     /* its reply was held once (or is held now): send it as it is */
  bool delay_values;   /* the held reply has values (in out) */
  bool delay_keys;     /* ... and a keys frame (in delay_keys_msg) */
  zmq_msg_t delay_keys_msg;
  zmq_msg_t delay_hdr; /* the held reply's packed header */
  uint64_t delay_due;  /* when the held reply leaves (ns) */
};

typedef struct sync_slot {
  uint64_t step;
  bool used;
  uint64_t *keys;
  float *grads;
  size_t n, cap;
} sync_slot;

typedef struct sync_tab {
  uint32_t table, dim;
  sync_slot slot[SRV_WINDOW];
  struct sync_tab *next;
} sync_tab;

typedef struct srv_part {
  ps_server *s;
  uint32_t idx;
  pthread_t th;
  bool started;
  void *in;    /* PULL, used by the thread */
  void *feed;  /* PUSH, used by the main thread */
  void *done;  /* PUSH to the main thread's completion socket */
  uint64_t *kbuf;
  uint32_t *pbuf;
  float *vbuf;
  size_t kcap, vcap;
  sync_tab *sync;
} srv_part;

typedef struct srv_opstat {
  uint64_t count, errors, keys;
  ps_hist *lat;   /* arrival -> reply sent, every request */
  ps_hist *queue; /* arrival -> store work starts (t_svc), dispatched requests only */
  ps_hist *svc;   /* store work starts -> reply sent (an injected delay included) */
} srv_opstat;

struct ps_server {
  ps_server_options opt;
  char data_dir[2048];
  char endpoint[256];
  void *ctx;
  void *router;
  void *done;          /* PULL: completions from partition threads */
  int sigpipe[2];
  atomic_int stop;
  uint32_t nthreads;   /* partition threads (0 = inline) */
  srv_part *parts;
  srv_part inline_part;
  /* Where the partition threads hand finished store work (srv_finish, set at create): the
   * threads know nothing of the scheduling above them. */
  void (*finish)(ps_server *s, srv_req *r);
  ps_store *store;
  srv_table **tables;  /* indexed by id, PS_WIRE_MAX_TABLE + 1 entries */
  uint32_t max_table;  /* highest declared id: loops over tables stop there */
  srv_req *free_reqs;
  struct srv_delay *delay; /* --inject-delay-us: the held replies (ps_server_delay_int.h) */
  uint64_t inflight;   /* requests handed to threads and not finished */
  uint64_t reqs_live;
  /* requests to handle again, in order (held ones released by the end of an exclusive op,
   * replicated ones acked): the main loop drains it (srv_run_ready) before it takes the next
   * message */
  srv_req *ready_head, *ready_tail;
  struct srv_sched *sched; /* exclusive operations, held and ready requests, ranks' connections
                           * (ps_server_request_schedule.c) */
  /* last checkpoint (persisted in the metadata) */
  ps_server_ckpt last;
  /* a prepared checkpoint awaiting its commit or abort; persisted too, so that a restart can
   * find its staging and delete it */
  ps_server_ckpt staged;
  srv_coord *coord;
  void *mon;           /* PAIR: the ROUTER's disconnect events (shard 0 with a socket) */
  bool stopping;       /* shutting down: new requests are refused */
  uint64_t step_max;     /* the highest step any table reached (the store's clock) */
  uint64_t expired_at;   /* step_max at the last TTL expiry */
  bool meta_ok;        /* the data dir's metadata is ours: safe to rewrite it */
  /* stats */
  srv_opstat ops[SRV_NOPS];
  ps_server_traffic traffic;
  uint64_t deferred_now;
  uint64_t held;           /* requests held now by an exclusive operation (STATS) */
  uint64_t started_ns;
  struct srv_snapshot *snapshot; /* the published statistics (ps_server_stats_int.h) */
  struct srv_permit *permit; /* checkpoint roots, trainers, stale declarations
                              * (ps_server_permissions_int.h) */
  struct srv_mem *mem; /* memory bounds: caps, charges, parked requests (ps_server_mem.c) */
  int *gone;                         /* fds of connections closed, their requests not yet
                                      * dropped (srv_drop_gone_peers) */
  size_t ngone, gone_cap;
  /* in-process feed */
  ps_server_sink sink;
  void *sink_ctx;
  struct ps_curve_auth *auth; /* the ZAP handler of a CURVE server (ps_curve.h), or NULL */
  bool serving;          /* --serve: a read-only checkpoint, pulls only (ps_server_serve.c) */
  struct srv_export *export; /* --serve EXPORT: this shard's rows as exported (ps_server_serve.c),
                              * or NULL */
  struct srv_exactly_once *once; /* exactly-once records (ps_server_exactly_once_int.h) */
  struct srv_follow *follow; /* --follow: the watcher and the served versions, or NULL */
  struct srv_repl *repl; /* --replicas K > 1: replication (ps_server_replication_int.h), or NULL */
};

/* The server's name for ps_grow (ps_grow.h). */
static inline bool srv_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first) {
  return ps_grow(p, cap, need, elem, first);
}

static inline void srv_list_push(srv_req **head, srv_req **tail, srv_req *r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
}

/* r goes to the ready queue, handled again in order by the main loop (srv_run_ready). */
static inline void srv_ready_add(ps_server *s, srv_req *r) {
  srv_list_push(&s->ready_head, &s->ready_tail, r);
}

/* May a pull of this step of table t be answered now? */
static inline bool srv_pull_ready(const srv_table *t, uint64_t step) {
  switch (t->spec.consistency) {
    case PS_CONS_SYNC: return step <= t->applied;
    case PS_CONS_SSP: return step <= t->applied + t->spec.staleness;
    default: return true;
  }
}

/* ps_server_requests.c */
srv_req *srv_req_new(ps_server *s, int kind);
void srv_req_free(ps_server *s, srv_req *r);
void srv_req_destroy_pool(ps_server *s);
/* Each of these sends its reply (or hands it to the in-process sink) and frees r. */
void srv_reply(ps_server *s, srv_req *r, Ember__Header *rh, zmq_msg_t *values);
/* srv_reply with a keys frame before the values (a REFRESH reply: its rows' positions). */
void srv_reply_keys(ps_server *s, srv_req *r, Ember__Header *rh, zmq_msg_t *keys,
                    zmq_msg_t *values);
void srv_reply_error(ps_server *s, srv_req *r, ps_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void srv_reply_ok(ps_server *s, srv_req *r);
/* Drops r, whose connection closed while it waited: answered with PS_ERR_UNAVAILABLE (ROUTER
 * discards a reply to a connection that is gone; a new one that reused its fd before the
 * monitor's event was read gets an answer rather than silence). */
void srv_drop_gone(ps_server *s, srv_req *r);
/* Replies every request of the list with PS_ERR_UNAVAILABLE (shutdown); empties it. */
void srv_reply_unavailable_all(ps_server *s, srv_req **head, srv_req **tail);
/* The coordinator's reply interface, answering through srv_reply. */
srv_coord_reply srv_coord_io(ps_server *s);
/* Who sent r (a request that came through the socket: has_ident). */
void srv_peer_of(const srv_req *r, srv_coord_peer *p);

#endif
