/* ps_server_int: the server's internal structures and the calls between its files. Not a
 * public header. The files, one concept each:
 *   ps_server.c                    the main loop: sockets, intake of messages, poll,
 *                                  lifecycle, shutdown
 *   ps_server_req.c                requests (a pooled srv_req per message) and replies
 *   ps_server_partition_threads.c  partition threads: the thread pool, the hand-off of store
 *                                  work
 *   ps_server_mem.c                memory bounds: the request cap, bytes in flight per
 *                                  connection and in all, requests parked until bytes come back
 *   ps_server_request_schedule.c   scheduling and consistency: step bookkeeping, deferred
 *                                  pulls, sync apply, exclusive operations and the queue of
 *                                  held requests
 *   ps_server_ops.c                op handlers (declare, pull, push, step, stats, checkpoint,
 *                                  restore)
 *   ps_server_checkpoint.c         the data dir's metadata and checkpoints
 *   ps_server_stats.c              the typed statistics snapshot and its JSON
 *   ps_server_permissions.c        checkpoint paths confined to the roots; restores that would
 *                                  roll back another connection's training refused
 *   ps_server_serve.c              serving: a committed checkpoint opened read-only (or an
 *                                  export's rows held in memory), what it refuses
 *   ps_server_exactly_once.c       exactly-once pushes: the (client, seq) records
 *                                  (ps_server_exactly_once_int.h)
 *   ps_server_follow.c             --follow: the watcher of `latest`, the versions of the
 *                                  served snapshot
 *   ps_server_repl.c               replicated shards: forwarding, heartbeats, failover
 *                                  (ps_server_repl_int.h), with ps_server_repl_setup.c (peers)
 *                                  and ps_server_repl_sync.c (catch-up)
 *   ps_coord.c                     the coordinator (ps_coord_int.h), which does not see this
 *                                  header
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
/* Connections are told apart for the bytes-in-flight cap by a hash of their routing id. */
#define SRV_CONN_SLOTS 4096u
/* ZeroMQ's queues of one connection, each way (ZMQ_SNDHWM, ZMQ_RCVHWM), in messages: replies
 * past it to a connection that does not read are dropped (ROUTER), requests past it wait in
 * the peer's TCP buffers. A client never has more replies queued than requests outstanding:
 * ps_client keeps at most 4095 pushes unsettled per shard (PS_WIRE_SEQ_WINDOW), and its other
 * requests in flight are few, so twice that never drops a reply a client waits for. */
#define SRV_PEER_HWM 8192
/* At most this many requests wait for bytes in flight to come back (ps_server_mem.c). */
#define SRV_PARK_MAX 1024u
/* A released pull reply buffer this large is kept for the next pull (ps_server_mem.c). */
#define SRV_SPARE_MIN ((size_t)1 << 20)
#define SRV_SPARE_MAX ((size_t)64 << 20)
/* Buffers of applied sync steps kept for the next steps, in all
 * (ps_server_partition_threads.c): reused, they spare a large push its page faults; beyond this they are freed. */
#define SRV_SYNC_KEEP ((size_t)16 << 20)
/* CURVE: a peer is given this long to authenticate (ZMQ_HANDSHAKE_IVL), and at most
 * SRV_HS_HEAVY connections may have received over SRV_HS_BYTES without delivering a message
 * (a handshake is < 1 KB: the rest is a frame, possibly a peer with no key filling a handshake
 * command up to R); newer ones are closed (ps_server_mem.c). */
#define SRV_HS_IVL_MS 5000
#define SRV_HS_HEAVY 2u
#define SRV_HS_BYTES ((uint64_t)64 << 10)
/* What a request costs besides its frames (its srv_req and ZeroMQ's message structures). */
#define SRV_REQ_COST ((size_t)1024)
enum { PARK_HANDLE = 100 };

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

/* A connection whose declaration of `table` lost to its first user's: refused until it
 * declares the table's spec. */
typedef struct srv_decl_stale {
  uint32_t table;
  srv_coord_peer peer;
} srv_decl_stale;

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
  bool exo_reg;        /* a push taken in the records: its reply settles it */
  srv_req *exo_dups;   /* copies of this push that arrived before its reply (via next) */
  ps_store *store;     /* the store its store work uses (set at dispatch) */
  struct srv_version *ver; /* --follow: the served version it holds while its store work runs */
  /* replicated shards (ps_server_repl.c) */
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

/* A rank that stepped a table on this shard (ps_server_request_schedule.c): the connection it
 * last stepped it on, and whether that connection closed since (lost), so that a pull waiting for
 * the rank's steps fails naming it instead of waiting out its timeout. */
typedef struct srv_rank_conn {
  uint32_t table, rank;
  bool lost;         /* its connection closed at lost_ns; no STEP or pull since */
  bool gone;         /* lost for the grace period: what waits for its steps fails */
  uint64_t lost_ns;
  srv_coord_peer peer;
} srv_rank_conn;

/* A connection that trained (PUSH or STEP) on this shard, until it closes. */
typedef struct srv_guard_trainer {
  srv_coord_peer peer;
  uint64_t last_ns; /* its last PUSH or STEP */
} srv_guard_trainer;

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
  ps_store *store;
  srv_table **tables;  /* indexed by id, PS_WIRE_MAX_TABLE + 1 entries */
  uint32_t max_table;  /* highest declared id: loops over tables stop there */
  srv_req *free_reqs;
  srv_req *delay_head, *delay_tail; /* --inject-delay-us: replies not yet due, FIFO (the
                                     * delay is fixed, so in due order) */
  int delay_fd;        /* a timerfd armed at the head's due time (-1: none yet) */
  bool delay_armed;
  uint64_t inflight;   /* requests handed to threads and not finished */
  uint64_t reqs_live;
  /* checkpoint / restore: exclusive operations, FIFO */
  srv_req *excl_head, *excl_tail;
  bool excl_active;
  srv_req *held_head, *held_tail; /* requests held while an exclusive op runs */
  uint64_t held;
  /* held requests released by the end of an exclusive op, to be handled again in order; the
   * main loop drains it (srv_run_ready) before it takes the next message */
  srv_req *ready_head, *ready_tail;
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
  uint64_t started_ns;
  pthread_mutex_t snap_mu;
  ps_server_stats snap;    /* the published snapshot, under snap_mu */
  ps_server_stats scratch; /* the STATS reply's, main thread only */
  uint64_t snap_ns;
  size_t snap_buckets;     /* histogram buckets the last publish copied (tests, bench) */
  /* ps_server_permissions.c: the roots checkpoints may use (canonical), and who trains */
  char data_real[4096];
  char ckpt_root[4096];  /* --checkpoint-root, or the root the job's first checkpoint pinned */
  bool ckpt_root_pinned; /* ckpt_root came from a checkpoint: recorded in the metadata */
  srv_guard_trainer *trainers;
  size_t ntrainers, trainers_cap;
  srv_decl_stale *decl_stale;
  size_t ndecl_stale, decl_stale_cap;
  srv_coord_peer stager; /* who prepared `staged`, while its connection is open */
  bool stager_open;
  srv_rank_conn *rconn;  /* ranks that stepped here (ps_server_request_schedule.c) */
  size_t nrconn, rconn_cap, nlost; /* nlost: lost, not yet gone */
  /* memory bounds (ps_server_mem.c) */
  size_t req_cap, conn_cap, all_cap, park_cap;
  _Atomic uint64_t inflight_bytes;   /* charged: frames of store requests, unreleased replies */
  _Atomic uint64_t *conn_bytes;      /* the same per connection slot (SRV_CONN_SLOTS) */
  uint32_t *conn_parked;             /* parked requests per slot */
  srv_req *park_head, *park_tail;    /* waiting for bytes, FIFO */
  uint64_t parked, parked_bytes;
  atomic_bool park_wake;             /* a released reply wakes the main loop */
  _Atomic(struct mem_hdr *) reply_spare; /* a released reply buffer kept for reuse */
  int *gone;                         /* fds of connections closed, their requests not yet
                                      * dropped (srv_drop_gone_peers) */
  size_t ngone, gone_cap;
  struct srv_hs *hs;                 /* CURVE: connections that delivered no message yet */
  size_t nhs, hs_cap;
  size_t sync_cap;                   /* of sync pushes buffered for steps not applied yet */
  uint64_t sync_bytes;               /* charged to that cap (the tables' sync_bytes summed) */
  _Atomic uint64_t sync_kept;        /* buffers of applied steps kept for reuse (threads) */
  /* in-process feed */
  ps_server_sink sink;
  void *sink_ctx;
  struct srv_auth *auth; /* the ZAP handler of a CURVE server (ps_server_auth_int.h), or NULL */
  bool serving;          /* --serve: a read-only checkpoint, pulls only (ps_server_serve.c) */
  struct ps_export_rows *export_rows; /* --serve EXPORT: this shard's rows as exported, or NULL */
  char export_tmp[4200];               /* --serve EXPORT: the private store's directory */
  struct srv_exo *exo;     /* exactly-once records (ps_server_exactly_once_int.h) */
  uint64_t exo_drop_every; /* EMBER_TEST_DROP_REPLY: cut every N-th push's connection */
  uint64_t exo_taken;      /* pushes taken, for the above */
  struct srv_follow *follow; /* --follow: the watcher and the served versions, or NULL */
  struct srv_repl *repl;     /* --replicas K > 1: replication (ps_server_repl_int.h), or NULL */
};

/* Room for `need` elements of `elem` bytes in *p of capacity *cap (doubling from `first`). */
static inline bool srv_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first) {
  if (need <= *cap) return true;
  size_t nc = *cap ? *cap : first;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, nc * elem);
  if (!q) return false;
  *p = q;
  *cap = nc;
  return true;
}

static inline void srv_list_push(srv_req **head, srv_req **tail, srv_req *r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
}

/* ps_server_req.c */
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
/* Hands the closed connections the monitor reported to the coordinator. */
void srv_peers_poll(ps_server *s);

/* ps_server_refresh.c: sync tables note the keys of every push by step (changed_note, before
 * its store work); a REFRESH whose step may be read keeps only the keys a step of [since, step)
 * changed, their positions in r->refresh_pos (all of them when that is not known). reset: the
 * rows changed otherwise (a restore): the record starts again. */
void srv_changed_note(srv_table *t, uint64_t step, const uint64_t *keys, size_t n);
void srv_changed_reset(srv_table *t);
void srv_changed_free(srv_changed *c);
ps_status srv_refresh_select(srv_req *r);

/* ps_server_pull_state.c: a PULL with_state. row_floats: the floats a pull's reply carries
 * per key (the table's dim, or dim + its optimizer state); refused: replies an error and
 * returns true when the flag cannot be served; run: a partition thread's share (first,
 * stride) of the rows. */
uint32_t srv_pull_row_floats(const srv_req *r, const srv_table *t);
bool srv_pull_state_refused(ps_server *s, srv_req *r);
ps_status srv_pull_state_run(ps_server *s, srv_req *r, uint32_t first, uint32_t stride);

/* ps_server_mem.c */
ps_status srv_mem_init(ps_server *s);
void srv_mem_free(ps_server *s);
uint32_t srv_conn_slot(zmq_msg_t *ident);
/* At intake: refuses (replies, frees r and returns true) a pull whose reply is over the cap. */
bool srv_mem_too_large(ps_server *s, srv_req *r);
/* At intake, after srv_mem_too_large: charges r's frames (and the reply of a pull that can
 * run now). true = handle it; false = r was parked (srv_mem_unpark handles it once its bytes
 * fit, after the earlier requests of its connection) or refused. */
bool srv_mem_intake(ps_server *s, srv_req *r);
/* Before a pull's store work (srv_dispatch): allocates its reply into r->out out of its
 * reservation, or charges it now; false = parked or refused. Other work: true. */
bool srv_mem_admit(ps_server *s, srv_req *r, int kind);
/* Dispatches the parked requests that fit now, in order per connection. */
void srv_mem_unpark(ps_server *s);
/* Empties the parked list: answered with PS_ERR_UNAVAILABLE (answer) or freed. */
void srv_mem_drop_parked(ps_server *s, bool answer);
/* A reply frame of n bytes for r, charged to r's connection until ZeroMQ lets go of it (large
 * replies other than pulls: STATS); false without memory. */
bool srv_mem_msg(ps_server *s, const srv_req *r, zmq_msg_t *m, size_t n);
/* Header replies up to this size are not charged (acks, short errors): a connection's send
 * queue holds at most SRV_PEER_HWM messages, so one that never reads holds at most ~4 MB of
 * them (~1 MB of acks and PINGs, which fit in ZeroMQ's message structures). Larger ones (STATS, KV values, long errors) are charged like a pull's rows. */
#define SRV_SMALL_REPLY ((size_t)256)
/* CURVE: the connection on fd was accepted / delivered a message / closed. */
void srv_mem_hs_accepted(ps_server *s, int fd);
void srv_mem_hs_seen(ps_server *s, int fd);
void srv_mem_hs_gone(ps_server *s, int fd);
/* Closes the connections past SRV_HS_HEAVY that hold a frame but delivered no message; the
 * poll timeout (ms) until the next look (100 when none is young). */
long srv_mem_hs_check(ps_server *s);
/* The connection on fd closed: its parked requests are dropped (srv_drop_gone_peers). */
void srv_mem_peer_gone(ps_server *s, int fd);
/* r is freed: gives back its charged frame bytes. */
void srv_mem_done(ps_server *s, srv_req *r);
/* A sync push about to be buffered for its step: charges its gradients (as f32, with their
 * keys) until the step is applied; refuses it (replies, frees r, false) past the sync cap. */
bool srv_mem_sync_take(ps_server *s, srv_req *r);
/* Step `step` of table t was applied: its buffered pushes are gone. */
void srv_mem_sync_release(ps_server *s, srv_table *t, uint64_t step);
/* Every buffered sync push was dropped (srv_drop_sync_all). */
void srv_mem_sync_reset(ps_server *s);

/* ps_server_partition_threads.c */
ps_status srv_parts_start(ps_server *s);
void srv_parts_stop(ps_server *s);
/* Hands r to every partition thread (or runs it inline, finishing it before returning). */
void srv_dispatch(ps_server *s, srv_req *r, int kind);
/* Takes up the finished tasks the threads sent back. */
void srv_parts_drain_done(ps_server *s);
/* Drops every buffered sync push (restore); only while no store work is in flight. */
void srv_drop_sync_all(ps_server *s);

/* ps_server_delay.c: --inject-delay-us */
/* Holds r's reply instead of sending it (true), or lets srv_reply send it now (false). */
bool srv_delay_hold(ps_server *s, srv_req *r, const Ember__Header *rh, zmq_msg_t *keys,
                    zmq_msg_t *values);
/* Sends the replies whose injected delay is over (all when stopping); ns until the next. */
uint64_t srv_release_delayed(ps_server *s);
/* The timerfd the main loop polls to wake when the next reply is due (-1: none). */
int srv_delay_fd(const ps_server *s);
void srv_delay_close(ps_server *s);

/* ps_server_request_schedule.c */
/* Store work of r is over: apply bookkeeping, or its reply. */
void srv_finish(ps_server *s, srv_req *r);
void srv_adopt_step(srv_table *t, uint64_t step);
bool srv_pull_ready(const srv_table *t, uint64_t step);
void srv_start_pull(ps_server *s, srv_req *r);
/* Re-checks t's deferred pulls. */
void srv_release_waiters(ps_server *s, srv_table *t);
/* The STEP r of rank `worker` in table `id` (0: every table): its connection is the rank's
 * from now on, and not lost. */
void srv_rank_note(ps_server *s, const srv_req *r, uint32_t id, uint32_t worker);
/* The connection on fd closed: the ranks that stepped on it are lost. */
void srv_ranks_gone(ps_server *s, int fd);
/* Ranks lost for their grace period are gone: the deferred pulls and the checkpoint that wait
 * for their steps fail naming them (the main loop calls it at least every 100 ms). */
void srv_ranks_tick(ps_server *s);
/* Answers r (a pull of `step`) with an error naming a gone rank it would wait for forever;
 * false when none holds it back. A pull of a lost rank means it is back. */
bool srv_pull_fail_lost(ps_server *s, srv_req *r, uint64_t step);
/* Forgets the lost ranks (a restore rolled every clock back: a new job). */
void srv_ranks_reset(ps_server *s);
/* Records that `worker` finished `step` in table t. */
ps_status srv_table_step(ps_server *s, srv_table *t, uint32_t worker, uint64_t step,
                         ps_error *err);
/* Queues a checkpoint or restore and runs what can run. */
void srv_exclusive_add(ps_server *s, srv_req *r);
/* Runs the head exclusive operation once it can; the requests held meanwhile go to the ready
 * queue. */
void srv_try_exclusive(ps_server *s);
/* Handles the ready queue's requests again, in order. */
void srv_run_ready(ps_server *s);
/* The connections srv_peers_poll saw close: every request of theirs still waiting --
 * deferred pulls, parked and held requests, queued checkpoints -- is dropped, with the bytes
 * it holds. Main loop only: srv_peers_poll also runs inside handlers (coordinator ops,
 * checkpoints) that may be walking these very lists (srv_mem_unpark). */
void srv_drop_gone_peers(ps_server *s);

/* ps_server_ops.c */
/* Takes ownership of a decoded request and handles it by op. */
void srv_handle(ps_server *s, srv_req *r);
/* Runs a checkpoint or restore (no store work in flight) and replies. */
void srv_run_exclusive(ps_server *s, srv_req *r);

/* ps_server_checkpoint.c */
ps_status srv_meta_load(ps_server *s, bool *clean, ps_error *err);
ps_status srv_meta_save(ps_server *s, bool clean);
srv_table *srv_table_new(const ps_table_spec *spec);
void srv_table_free(srv_table *t);
/* Serves the tables the store knows but the server does not (metadata lost or an older
 * snapshot): the first declaration of each sets its consistency mode. */
ps_status srv_tables_adopt_store(ps_server *s);
/* One phase (Ember__CkptPhase) of a checkpoint / a restore of this shard (called with no store
 * work in flight). A prepare writes a delta when base (the sender's previous checkpoint) is
 * this shard's last one and the chain since its last full one is shorter than full_every - 1
 * (ps_store_checkpoint), else a full snapshot. */
ps_status srv_checkpoint(ps_server *s, int phase, uint64_t step, const char *path,
                         const char *base, uint32_t full_every, char *dir_out, size_t dir_len,
                         ps_error *err);
/* Restores a committed checkpoint (path as for srv_ckpt_root; empty = the last one). Its step
 * is the one its own metadata records; expect_step (SRV_ANY_STEP = no expectation) and a
 * directory named step-N must agree with it, else PS_ERR_CORRUPT and nothing is restored. */
#define SRV_ANY_STEP UINT64_MAX
ps_status srv_restore(ps_server *s, const char *path, uint64_t expect_step, uint64_t *step,
                      ps_error *err);
/* The shard identity kept inside the store directory (DIR/store/EMBER-SHARD), which survives a
 * lost ember-server.json: a mismatch with this shard is refused, as is a store with tables but
 * neither file (whose shard cannot be known); otherwise (re)written. */
ps_status srv_identity_check(ps_server *s, ps_error *err);
/* At start: says, once, that the shard continues from the rows and checkpoint it found. */
void srv_log_existing_state(ps_server *s);
/* Resolves a client path (relative = under the data dir; empty = the default for a step). */
void srv_ckpt_root(ps_server *s, const char *path, uint64_t step, char *out, size_t len);
void srv_tables_reset_steps(ps_server *s, uint64_t step);
/* At start: deletes what an uncommitted prepare left (before the last checkpoint is restored). */
void srv_ckpt_discard_staged(ps_server *s);
/* {"step", "path"}: how metadata and STATS show a checkpoint. */
struct json_t *srv_ckpt_json(const ps_server_ckpt *c);

/* ps_server_permissions.c */
/* At start, after the metadata: the canonical data dir and checkpoint root (--checkpoint-root,
 * else `pinned` from the metadata, else the root of a last checkpoint outside the data dir). */
ps_status srv_guard_load(ps_server *s, const char *pinned, ps_error *err);
/* The root a checkpoint pinned (for the metadata), or NULL. */
const char *srv_guard_pinned_root(const ps_server *s);
/* Whether root (what srv_ckpt_root made of the client's path) may be used: inside the data dir
 * or the checkpoint root, resolved; may_pin lets a first checkpoint or restore outside the
 * data dir pin the root (ps-worker's layout only). PS_ERR_INVALID with the reason otherwise. */
ps_status srv_guard_path(ps_server *s, const char *path, const char *root, bool may_pin,
                         ps_error *err);
/* A KV_SET of SRV_COORD_CKPT_KEY: its {"step", "path"} must be this shard's last checkpoint. */
ps_status srv_guard_ckpt_record(ps_server *s, const Ember__Header *h, ps_error *err);
/* DECLARE of a table the store does not have: provisional (not in the store until its first
 * use), its spec the latest declared; r's declaration is remembered. PS_OK: reply success. */
ps_status srv_guard_declare(ps_server *s, srv_req *r, const ps_table_spec *spec, ps_error *err);
/* The first PULL, PUSH or STEP of provisional table `id` (r): the spec r's connection declared
 * (else the latest) goes into the store; connections that declared another one become stale. */
ps_status srv_guard_bind(ps_server *s, srv_req *r, uint32_t id, ps_error *err);
/* PS_ERR_CONFLICT when r's connection is stale for table id (only when some connection is). */
ps_status srv_guard_decl_check(ps_server *s, srv_req *r, uint32_t id, ps_error *err);
/* r declared table id with its spec: not stale any more. */
void srv_guard_decl_clear(ps_server *s, srv_req *r, uint32_t id);
/* PS_ERR_CONFLICT when r, a CHECKPOINT, comes from another connection than the one whose
 * prepared checkpoint awaits its commit or abort, while that one is open. */
ps_status srv_guard_checkpoint(ps_server *s, const srv_req *r, ps_error *err);
/* r prepared the shard's staged checkpoint. */
void srv_guard_note_stager(ps_server *s, const srv_req *r);
/* r (a PUSH or STEP that passed its checks) trained on this shard. */
void srv_guard_note_trainer(ps_server *s, const srv_req *r);
/* The connection on fd closed. */
void srv_guard_peer_gone(ps_server *s, int fd);
/* PS_ERR_CONFLICT when a connection other than r's trained here and is still open. */
ps_status srv_guard_restore(ps_server *s, const srv_req *r, ps_error *err);
void srv_guard_free(ps_server *s);

/* ps_server_serve.c (opt.serve_dir) */
/* Opens shard opt.shard's snapshot of the checkpoint read-only and adopts its tables (as async):
 * PS_ERR_INVALID when serve_dir is no checkpoint or has another shard count. */
ps_status srv_serve_open(ps_server *s, ps_error *err);
/* --serve EXPORT: the rows of r's keys (those at first, first + stride, ...) into r->outp, f32
 * or f16 as r asks, from the export's rows (ps_rowset.h), initial rows for keys it has none of.
 * Read-only: any partition thread. */
void srv_serve_pull_export(const ps_server *s, srv_req *r, uint32_t first, uint32_t stride);
/* Frees the export's rows and removes the private store's directory (after the store closed). */
void srv_serve_close(ps_server *s);
/* A serving shard: replies with the refusal and returns true for an op that would change the
 * shard (push, step, checkpoint, restore). */
bool srv_serve_refuse(ps_server *s, srv_req *r, int op);
/* A serving shard's DECLARE: PS_OK when spec's rows are the served table's. */
ps_status srv_serve_declare(ps_server *s, const ps_table_spec *spec, ps_error *err);
/* A DECLARE whose spec has dim 0 (any shard, serving or not): a lookup of the table named by
 * the spec's name, answered with its spec; changes nothing (docs/PROTOCOL.md, "Tables"). */
void srv_table_lookup(ps_server *s, srv_req *r);
/* Opens this shard's snapshot of the committed checkpoint `dir` (one step-N) read-only, after
 * checking its shard count against the cluster's; its step into *step. Any thread (reads only
 * s->opt). PS_ERR_INVALID for another shard count, else the store's or the file's failure. */
ps_status srv_serve_open_step(const ps_server *s, const char *dir, ps_store **store,
                              uint64_t *step, ps_error *err);

/* ps_server_follow.c (opt.follow) */
/* After srv_serve_open and the signal pipe: the served snapshot becomes version 1 and the
 * watcher thread starts. */
ps_status srv_follow_start(ps_server *s, ps_error *err);
/* Main loop, every turn: switches to a version the watcher opened, if there is one. */
void srv_follow_tick(ps_server *s);
/* srv_dispatch: r's store work uses the current version (r->store), held until release. */
void srv_follow_acquire(ps_server *s, srv_req *r);
/* r's store work is over: lets go of its version (closed by the watcher once unused). */
void srv_follow_release(ps_server *s, srv_req *r);
/* Destroy, after the partition threads stopped: the watcher stops, every version is closed
 * (s->store too). */
void srv_follow_stop(ps_server *s);

/* ps_server_exactly_once.c */
/* Creates the records (and reads EMBER_TEST_DROP_REPLY); PS_ERR_NOMEM without memory. */
ps_status srv_exo_init(ps_server *s);
/* A push that passed its content checks: true when r was answered (a copy: with the original's
 * outcome, now or when the original's reply leaves) and must not be applied; false: apply it
 * (a push without a client id, or a new one, now recorded). */
bool srv_exo_intake(ps_server *s, srv_req *r);
/* r's reply rh is being sent (or r is dropped): settles r's record and answers its copies. */
void srv_exo_replied(ps_server *s, srv_req *r, const Ember__Header *rh);

/* ps_server_stats.c */
/* Fills out (initialised) from the server's state. */
void srv_stats_fill(ps_server *s, ps_server_stats *out);
/* Refreshes the published snapshot (main thread): histograms by ps_hist_sync, so it costs
 * the buckets written since the last publish; s->snap_buckets counts them. */
void srv_stats_publish(ps_server *s);

#endif
