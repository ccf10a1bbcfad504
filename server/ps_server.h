/* ps_server: one shard of the Ember parameter server, as a library (ps-server is a thin main
 * over it; tests and the fuzzer drive it in-process).
 *
 * One main thread owns the ZeroMQ ROUTER socket: it decodes and validates every message,
 * keeps the step bookkeeping of the consistency modes (deferring replies, never blocking a
 * thread), hosts the coordinator on shard 0, and sends every reply. Store work is handed to
 * `threads` partition threads over inproc sockets; thread t owns the store partitions p with
 * p % threads == t, so no two threads touch the same rows and FIFO order per thread gives
 * read-your-writes per connection. threads == 0 runs store work inline in the main thread
 * (what the fuzzer uses). The wire protocol is in docs/PROTOCOL.md. */
#ifndef PS_SERVER_H
#define PS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_curve.h"
#include "ps_hist.h"
#include "ps_status.h"
#include "ps_store.h"
#include "ps_table.h"

typedef struct ps_server_options {
  const char *listen;    /* "tcp://HOST:PORT"; NULL = no socket (in-process dispatch only) */
  uint32_t shard;        /* this shard, < shards */
  uint32_t shards;       /* >= 1 */
  const char *data_dir;  /* created if absent */
  size_t cache_bytes;    /* hot-tier budget handed to the store */
  uint32_t threads;      /* partition threads; 0 = inline in the main thread */
  int metrics_port;      /* 0 = none; served by the metrics module through ps_server_stats_read */
  uint64_t inject_delay_us; /* testing: pull/push replies leave no earlier than this after
                             * their store work started (a simulated service time), without
                             * holding any thread (0 = off) */
  const char *curve_secret; /* CURVE: the server's Z85 secret key (ps_curve.h); NULL = no
                             * authentication, anyone who reaches the socket is served */
  const ps_curve_keyset *curve_clients; /* with curve_secret: the only client keys served;
                                         * the caller keeps it alive until destroy */
  const char *checkpoint_root; /* checkpoints outside data_dir go only here; NULL = the root
                                * the job's first checkpoint outside data_dir pins */
  size_t max_request_bytes; /* the request cap R: frames, pull replies (0 = derived from
                             * cache_bytes, see ps_server_request_cap) */
  const char *serve_dir; /* serving: a ps-worker checkpoint (its `latest`, or one step-N)
                          * whose shard-`shard` snapshot is opened read-only and answers pulls;
                          * data_dir is not used (ps_server_serve.c). NULL = a training shard */
  bool follow;           /* with serve_dir (a checkpoint directory, not one step-N): serve each
                          * checkpoint its `latest` names next, switching without a restart
                          * (ps_server_follow.c) */
  size_t follow_warm_keys; /* with follow: a new snapshot's hot tier is warmed with the keys of
                            * the last this many pulled keys before the switch (0 = not) */
  uint32_t replica;      /* replicated shards: this replica's index, < replicas */
  uint32_t replicas;     /* replicas of this shard (0 or 1 = not replicated) */
  const char *peers;     /* with replicas > 1: 'URL|URL|...', every replica's URL in replica
                          * order, listen at index replica */
  uint32_t failover_ms;  /* a peer silent this long is dead (0 = 1000) */
} ps_server_options;

typedef struct ps_server ps_server;

/* Opens the store under data_dir (restoring the last checkpoint if the previous run did not
 * shut down cleanly), loads the table metadata and binds the socket. On failure err (when not
 * NULL) says why: bad options, the data dir, the store, a shard mismatch, a failed recovery,
 * the listen address. */
ps_status ps_server_create(const ps_server_options *opt, ps_server **out, ps_error *err);
/* Serves until ps_server_request_stop, then finishes in-flight work, answers deferred requests
 * with PS_ERR_UNAVAILABLE, flushes the store and marks the data dir clean. */
ps_status ps_server_run(ps_server *s);
/* Async-signal-safe: asks ps_server_run to shut down gracefully. */
void ps_server_request_stop(ps_server *s);
void ps_server_destroy(ps_server **s);

/* The request cap R a server with these options applies: max_request_bytes, else
 * max(64 MiB, min(cache_bytes / 4, 256 MiB)). Frames over R are cut off, pulls whose reply is
 * over R refused, and the replies in flight held to R per connection and 2R in all
 * (docs/OPERATIONS.md states the memory bound that follows). */
size_t ps_server_request_cap(size_t cache_bytes, size_t max_request_bytes);

/* The endpoint actually bound (useful with port 0 / "*"), or "" without a socket. */
const char *ps_server_endpoint(const ps_server *s);

/* ---------------------------------------------------------------- statistics
 * What a shard publishes about itself, as a typed snapshot: the STATS reply (JSON) and the
 * metrics endpoint (Prometheus text) are both rendered from it. The main thread fills the
 * published copy at least every 200 ms under its own lock, so its counters need none. */

#define PS_SERVER_NOPS 15 /* per-op entries, indexed by the wire's op number (Ember__Op) */

typedef struct ps_server_op_stats {
  uint64_t count, errors, keys;
  ps_hist *latency; /* arrival -> reply sent (ns), every request */
  ps_hist *queue;   /* arrival -> store work starts: requests that reached the store only */
  ps_hist *service; /* store work starts -> reply sent */
} ps_server_op_stats;

typedef struct ps_server_table_stats {
  uint32_t id;
  ps_table_spec spec; /* as the server steps it (num_workers >= 1) */
  uint64_t applied_step, pulls_deferred;
  /* REFRESH (issue 32): rows its replies carried; replies with every row (what changed was not
   * known) */
  uint64_t rows_refreshed, refreshes_full;
  bool step_known;
} ps_server_table_stats;

typedef struct ps_server_rank {
  uint32_t rank;
  char *name; /* owned */
} ps_server_rank;

typedef struct ps_server_coord_stats {
  uint32_t world, members;
  uint64_t joins;
  ps_server_rank *ranks; /* the ranks taken, in rank order; owned */
  size_t nranks, ranks_cap;
  uint64_t kv_keys, kv_bytes, kv_waiting, barriers_open;
} ps_server_coord_stats;

/* A checkpoint as the shard records it (the last committed one, or one prepared). */
typedef struct ps_server_ckpt {
  bool have;
  uint64_t step;
  char path[4096];
} ps_server_ckpt;

/* What crossed the socket. */
typedef struct ps_server_traffic {
  uint64_t malformed;       /* messages dropped or refused as undecodable */
  uint64_t replies_dropped; /* replies the socket could not take */
  uint64_t bytes_in, bytes_out;
  uint64_t refused_memory;  /* requests refused by the memory bounds ("too large", "busy") */
} ps_server_traffic;

typedef struct ps_server_stats {
  uint32_t shard, shards, threads;
  double uptime_s;
  ps_server_op_stats ops[PS_SERVER_NOPS]; /* [0] and OP_ERROR unused */
  ps_server_traffic traffic;
  uint64_t inflight, deferred, held, requests_live; /* queue depths now */
  uint64_t parked;          /* requests waiting for bytes in flight to come back */
  uint64_t bytes_in_flight; /* charged by the memory bounds (frames, unreleased replies) */
  ps_server_table_stats *tables;                    /* declared tables by id; owned */
  size_t ntables, tables_cap;
  bool has_store;
  ps_store_stats store;
  ps_server_ckpt last_ckpt, prepared_ckpt;
  bool has_coord; /* shard 0 */
  ps_server_coord_stats coord;
  /* Exactly-once pushes: clients on record, copies of pushes answered without being applied,
   * re-sends refused because the shard had no record of them (restarted, client forgotten). */
  uint64_t exo_clients, exo_duplicates, exo_unknown;
  /* Replicated shards (replicas > 1): this replica's role ("primary", "backup", "probing",
   * "stale"), the primary it knows (replicas = none), the epoch, the live set (bit per replica),
   * requests forwarded to backups, backups dropped, promotions, client requests refused. */
  uint32_t replica, replicas, repl_primary, repl_live;
  const char *repl_role;
  uint64_t repl_epoch, repl_forwarded, repl_dropped, repl_promotions, repl_refused;
  uint64_t repl_catchups; /* replicas this one caught up */
} ps_server_stats;

/* An empty snapshot (with its histograms): PS_ERR_NOMEM without memory. */
ps_status ps_server_stats_init(ps_server_stats *st);
/* Frees what st owns (st may be zeroed or initialised). */
void ps_server_stats_free(ps_server_stats *st);
/* Thread-safe: copies the latest published snapshot into out (initialised by
 * ps_server_stats_init; its allocations are reused). The hook of the metrics endpoint. */
ps_status ps_server_stats_read(ps_server *s, ps_server_stats *out);
/* The STATS document (compact JSON, sorted keys; malloc'ed, free() it). NULL without memory. */
char *ps_server_stats_to_json(const ps_server_stats *st);
/* Whether the STATS document and the metrics list op: a request op that was seen. */
bool ps_server_stats_op_listed(const ps_server_stats *st, int op);
/* The name of op (Ember__Op) in STATS and metrics ("pull", "kv_set", ...). */
const char *ps_server_op_name(int op);

/* In-process dispatch without sockets (fuzzing, unit tests): handles one multipart message as
 * if it had arrived from a client, runs until nothing is runnable, and hands every reply
 * frame set to `sink`. Only for servers created with listen == NULL. */
typedef void (*ps_server_sink)(void *ctx, const void *const *frames, const size_t *sizes,
                               size_t nframes);
ps_status ps_server_feed(ps_server *s, const void *const *frames, const size_t *sizes,
                         size_t nframes, ps_server_sink sink, void *ctx);

#endif
