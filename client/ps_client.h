/* ps_client: the worker side of the Ember parameter server (used by ps-worker and ps-bench).
 *
 * One DEALER socket per server; keys are placed by ps_shard_of(key, nservers), so the order of
 * the URL list is the shard order. A pull or push de-duplicates its keys (ps_dedup.h), sends one
 * message per shard in parallel, and gathers the replies: rows come back per original position,
 * pushed gradients are summed per unique key before they leave. Every request carries an id;
 * many may be in flight (the *_start calls) and replies may come back in any order.
 *
 * Failures: every wait is bounded (options.timeout_ms). Every call that can fail follows the
 * ps_error convention (ps_status.h): it takes `ps_error *err` last (NULL when the caller only
 * branches) and fills it on failure with a one-line message that names the server URL and
 * shard when a server is concerned ("tcp://H:P (shard 1): ..."); nothing is formatted on
 * success. ZeroMQ reconnects by itself after a server restart; the client watches
 * its connections and, when one drops, re-sends the idempotent requests outstanding on it
 * (pull, declare, stats, ping, kv_get, join, barrier) once it is back, and fails the others
 * (step, checkpoint, restore, kv_set) with PS_ERR_UNAVAILABLE, since they may or may not
 * have been applied. Pushes are re-sent too: each carries this client's id and a sequence
 * number per shard, and a shard applies each at most once (docs/PROTOCOL.md, "Exactly-once
 * pushes"); a shard that restarted meanwhile has no record of it and refuses the re-send
 * ("may or may not have been applied"). At most PS_WIRE_SEQ_WINDOW - 1 pushes to one shard may
 * be unsettled (started and not yet waited for); one more fails with PS_ERR_INVALID.
 *
 * A client is not thread-safe: use one per thread. The wire protocol is docs/PROTOCOL.md. */
#ifndef PS_CLIENT_H
#define PS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"
#include "ps_table.h"

/* Tables are declared with the one table vocabulary, ps_table_spec (ps_table.h): the store's
 * row fields plus the consistency contract, which every worker must declare identically. */

typedef struct ps_client_options {
  uint32_t timeout_ms;      /* bound on each request (default 30000) */
  uint32_t ckpt_timeout_ms; /* bound on CHECKPOINT / RESTORE (default 600000) */
  uint32_t rank;            /* this worker's rank, sent with pulls/pushes/steps (default 0) */
  bool wire_f16;            /* rows and gradients travel as f16 (half the bytes); the API stays
                               f32 and gradients are summed in f32 before the conversion */
  char curve_secret[41];    /* CURVE (ps_curve.h): this client's Z85 secret key and the     */
  char curve_server[41];    /* servers' Z85 public key (ps_curve_load_client fills both);
                               both empty (the default) = no CURVE. A server that refuses
                               the key never answers: requests fail on their bound, naming it */
  size_t max_request_bytes; /* a pull or push whose rows (or keys) exceed this is sent as several
                               requests, none over it to any shard; 0 = PS_CLIENT_MAX_REQUEST.
                               A server refuses larger ones (its --max-request-mb) */
  uint64_t client_id;       /* exactly-once pushes: the id this client's pushes carry, with a
                               sequence number per shard; 0 (the default) = a random one */
  uint32_t failover_ms;     /* replicated shards: a replica the client moved to that has not
                               completed a connection this long is left for the next one
                               (0 = 1000; the servers' --failover-ms) */
} ps_client_options;

/* 64 MiB: the smallest request cap a ps-server has by default (ps_server_request_cap). */
#define PS_CLIENT_MAX_REQUEST ((size_t)64 << 20)

void ps_client_options_default(ps_client_options *o);

typedef struct ps_client ps_client;
typedef struct ps_client_req ps_client_req;

/* Whether url is a server URL the client can use: tcp://HOST:PORT (PORT 1..65535) or
 * ipc://PATH, or a replicated shard's 'URL|URL|...' (at most 8 replicas: the client talks to
 * the primary and moves to another replica when its connection drops or a replica says it is
 * not the primary, re-sending what was outstanding; docs/PROTOCOL.md, "Replication"). On
 * failure err (when not NULL) names the URL:
 * "server URL 'X' is not tcp://HOST:PORT or ipc://PATH (...)". */
ps_status ps_client_check_url(const char *url, ps_error *err);

/* urls[i] is shard i. Connects lazily: no server needs to be up yet, and a server that has
 * not answered within PS_CLIENT_SILENT_WARN_MS of a request is named once in a WARN log line
 * ("server U (shard I) does not answer yet; waiting up to N s") while the request waits on
 * up to its bound. A URL that ps_client_check_url refuses is PS_ERR_INVALID, with that
 * message in err (the caller prints it). */
#define PS_CLIENT_SILENT_WARN_MS 3000
ps_status ps_client_create(const char *const *urls, size_t n, const ps_client_options *opt,
                           ps_client **out, ps_error *err);
/* Same, from "URL,URL,...". */
ps_status ps_client_create_list(const char *urls, const ps_client_options *opt,
                                ps_client **out, ps_error *err);
void ps_client_destroy(ps_client **c);

size_t ps_client_servers(const ps_client *c);
const char *ps_client_url(const ps_client *c, size_t shard);
void ps_client_set_rank(ps_client *c, uint32_t rank);
/* How many times a server connection dropped, and how many requests were re-sent. */
void ps_client_counters(const ps_client *c, uint64_t *disconnects, uint64_t *resent);
/* Replicated shards: how many times a shard moved to another replica, and how long the last
 * move took (ms from losing the replica to the first answer of the next one). */
void ps_client_failovers(const ps_client *c, uint64_t *failovers, uint64_t *last_ms);

/* Declares on every shard (idempotent). A different spec or consistency contract under the
 * same id is PS_ERR_CONFLICT, with the server's explanation in err. Pulls and
 * pushes need the table declared by this client first (it learns the dim here). */
ps_status ps_client_declare(ps_client *c, const ps_table_spec *t, ps_error *err);
/* Attaches to the table named `name` without its spec: every shard is asked for the spec it
 * holds (a DECLARE with dim 0, docs/PROTOCOL.md), they must agree, and *out is that spec.
 * PS_ERR_UNKNOWN_TABLE when a shard has no such table. Pulls work after this like after a
 * declare; the client itself does not stop pushes (ember_table_attach does). */
ps_status ps_client_attach(ps_client *c, const char *name, ps_table_spec *out, ps_error *err);

/* out[i*dim ..] = row of keys[i]; duplicates are fetched once. `step` is this worker's current
 * step (sync/ssp tables defer the reply until that step may read). */
ps_status ps_client_pull(ps_client *c, uint32_t table, uint64_t step, const uint64_t *keys,
                         size_t n, float *out, ps_error *err);
/* grads[i*dim ..] for keys[i]; gradients of duplicate keys are summed before sending. */
ps_status ps_client_push(ps_client *c, uint32_t table, uint64_t step, const uint64_t *keys,
                         size_t n, const float *grads, ps_error *err);
/* The same for keys known to be distinct (e.g. from ps_dedup_keys): no de-duplication pass. */
ps_status ps_client_pull_unique(ps_client *c, uint32_t table, uint64_t step,
                                const uint64_t *keys, size_t n, float *out, ps_error *err);
ps_status ps_client_push_unique(ps_client *c, uint32_t table, uint64_t step,
                                const uint64_t *keys, size_t n, const float *grads,
                                ps_error *err);

/* Pipelined forms: the request is sent when *_start returns; keys/grads may be reused at once,
 * `out` must stay valid until ps_client_wait, which frees the handle and sets *r = NULL. A
 * failure found while sending (a server that is down) is reported by ps_client_wait. */
ps_status ps_client_pull_start(ps_client *c, uint32_t table, uint64_t step,
                               const uint64_t *keys, size_t n, bool unique, float *out,
                               ps_client_req **r, ps_error *err);
ps_status ps_client_push_start(ps_client *c, uint32_t table, uint64_t step,
                               const uint64_t *keys, size_t n, bool unique, const float *grads,
                               ps_client_req **r, ps_error *err);
/* A prefetch: the shards load these keys' rows from disk into their hot tier (a pull with
 * the header's warm flag) and answer with an ack of no rows, at once, whatever the step (step
 * only labels it). It changes no value, so it may go out any time before the pull it speeds
 * up; ps_client_wait collects the ack. */
ps_status ps_client_prefetch_start(ps_client *c, uint32_t table, uint64_t step,
                                   const uint64_t *keys, size_t n, bool unique,
                                   ps_client_req **r, ps_error *err);
/* A pull with state (docs/PROTOCOL.md, "Rows with their optimizer state"): the rows of n
 * distinct keys each followed by its optimizer state as the shard's next push will find it,
 * `width` floats a key (ps_store_state_row_floats of the table's spec), into out. Waited for as
 * a pull; f32 on the wire only. ps-worker's deep lookahead applies its own updates to them. */
ps_status ps_client_pull_state_start(ps_client *c, uint32_t table, uint64_t step,
                                     const uint64_t *keys, size_t n, uint32_t width, float *out,
                                     ps_client_req **r, ps_error *err);
/* A refresh (docs/PROTOCOL.md, "Lookahead pulls and refreshes"): out holds the rows of the
 * distinct keys as a pull of step `since` read them, sent before this worker's STEP(since) (a
 * sync shard answers such a pull at once: the lookahead). Answered once `step` may be read, as
 * a pull of `step` would be; ps_client_wait writes into out only the rows a step in
 * [since, step) changed (by any worker), so that out then holds what that pull would have. */
ps_status ps_client_refresh_start(ps_client *c, uint32_t table, uint64_t step, uint64_t since,
                                  const uint64_t *keys, size_t n, float *out, ps_client_req **r,
                                  ps_error *err);
/* Rows that refreshes brought back so far, every one counted. */
uint64_t ps_client_refreshed(const ps_client *c);
/* Serving shards (ps-server --serve) name in each pull reply the checkpoint step its rows were
 * read from (docs/PROTOCOL.md, "Serving shards"). Into *lo and *hi: the lowest and highest
 * such step + 1 of `server`'s pull replies since the previous call (0: a reply of a shard that
 * is not serving); false when there was none. Starts over. */
bool ps_client_served_take(ps_client *c, size_t server, uint64_t *lo, uint64_t *hi);
ps_status ps_client_step_start(ps_client *c, uint32_t table, uint64_t step, ps_client_req **r,
                               ps_error *err);
ps_status ps_client_wait(ps_client *c, ps_client_req **r, ps_error *err);
/* Handles replies for up to wait_ms and tells whether r is complete (then ps_client_wait
 * returns at once). Lets a caller overlap work with requests in flight. */
ps_status ps_client_ready(ps_client *c, ps_client_req *r, uint32_t wait_ms, bool *done,
                          ps_error *err);

/* This worker finished `step` (all its pushes of that step sent before): table 0 = every
 * table. Sent to every shard; see docs/PROTOCOL.md for the per-step sequence. */
ps_status ps_client_step(ps_client *c, uint32_t table, uint64_t step, ps_error *err);

/* Coordinator (shard 0). */
ps_status ps_client_join(ps_client *c, uint32_t world, int want_rank, const char *name,
                         int *rank, ps_error *err);
ps_status ps_client_barrier(ps_client *c, const char *name, uint32_t world, uint32_t timeout_ms,
                            ps_error *err);
ps_status ps_client_kv_set(ps_client *c, const char *key, const void *val, size_t len,
                           ps_error *err);
/* Waits up to timeout_ms for the key; *val is malloc'ed (free it). */
ps_status ps_client_kv_get(ps_client *c, const char *key, void **val, size_t *len,
                           uint32_t timeout_ms, ps_error *err);
/* ps_rendezvous callbacks (worker/collectives/ps_collectives.h): ctx is the ps_client. Their
 * signature is the rendezvous interface's, which has no err: they pass NULL. */
ps_status ps_client_rdv_set(void *client, const char *key, const void *val, size_t len);
ps_status ps_client_rdv_get(void *client, const char *key, void **val, size_t *len,
                            uint32_t timeout_ms);

/* Global checkpoint at `step` (call after STEP(step-1), before STEP(step)), a two-phase
 * commit: every shard prepares (snapshots into path/shard-I.staging; relative paths live
 * under each server's data dir); once all have, every shard commits (renames it to
 * path/shard-I and makes it the checkpoint it restores after a crash); then the coordinator
 * records {"step", "path"} under "ember/checkpoint/latest". A failed prepare is aborted on
 * every shard, so each keeps its previous checkpoint. */
ps_status ps_client_checkpoint(ps_client *c, uint64_t step, const char *path, ps_error *err);
/* ps_client_checkpoint, incremental: a shard whose last checkpoint is base (the caller's
 * previous one, a path as `path`; NULL = none) writes only the rows changed since (a delta),
 * unless its chain since its last full checkpoint already has full_every - 1 deltas (full_every
 * <= 1: always full); else a full snapshot. Each shard decides for itself. */
ps_status ps_client_checkpoint_delta(ps_client *c, uint64_t step, const char *path,
                                     const char *base, uint32_t full_every, ps_error *err);
/* The phases of ps_client_checkpoint (ember.proto's CkptPhase), for drivers of their own. */
typedef enum ps_ckpt_phase {
  PS_CKPT_PREPARE = 1,
  PS_CKPT_COMMIT = 2,
  PS_CKPT_ABORT = 3
} ps_ckpt_phase;
/* One phase of a checkpoint on every shard of this client; nothing at the coordinator. */
ps_status ps_client_checkpoint_phase(ps_client *c, ps_ckpt_phase phase, uint64_t step,
                                     const char *path, ps_error *err);
/* The last committed global checkpoint (from the coordinator): PS_ERR_NOT_FOUND if none. */
ps_status ps_client_latest_checkpoint(ps_client *c, uint64_t *step, char *path, size_t pathlen,
                                      ps_error *err);
/* Every shard restores path (NULL/"" = its last checkpoint); *step = the checkpoint's step. */
ps_status ps_client_restore(ps_client *c, const char *path, uint64_t *step, ps_error *err);
/* The STATS document of one shard (malloc'ed JSON). */
ps_status ps_client_stats(ps_client *c, size_t shard, char **json, ps_error *err);
/* The same within timeout_ms instead of options.timeout_ms (a question asked while reporting
 * another failure, which should not wait out the long bound). */
ps_status ps_client_stats_within(ps_client *c, size_t shard, uint32_t timeout_ms, char **json,
                                 ps_error *err);
ps_status ps_client_ping(ps_client *c, size_t shard, ps_error *err);

#endif
