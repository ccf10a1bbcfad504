/* ember.h: the installable C API of Ember (libember.so), for programs that keep their own model
 * and hand their embedding tables to Ember's parameter servers.
 *
 * Installed as <ember/ember.h>; build with `pkg-config --cflags --libs ember`. docs/LIBRARY.md
 * has an example and the Python package (python/ember) over this same API.
 *
 * Design decisions (why):
 * - A small facade over the client (client/ps_client.h), not that header itself: the
 *   internal API may change with ps-worker's needs, this one is versioned (EMBER_API_VERSION,
 *   the soname libember.so.0) and every other symbol of the library is hidden (a version
 *   script exports ember_* only).
 * - No public struct but ember_error, whose layout is fixed: options of the client and of a
 *   table travel as "key=value,key=value" strings, so new options never change the ABI and a
 *   binding (ctypes) needs no struct layouts. An unknown key or a bad value is an error that
 *   names it.
 * - Errors follow Ember's convention (ps_status.h): a call that can fail returns 0 or an
 *   EMBER_E* code and, when err is not NULL, fills err with a one-line message; nothing is
 *   printed, nothing aborts on bad input.
 * - The client counts its steps: pulls and pushes carry the current step, ember_step() ends
 *   it (STEP to every shard) and moves to the next, so a sync/ssp table sees the same sequence
 *   as from ps-worker.
 * - A client is not thread-safe (one per thread); calls block only on the network, which a
 *   binding may run without its interpreter lock. */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a call is added (2: ember_table_attach); the soname changes only on a break. */
#define EMBER_API_VERSION 2

/* Error codes: Ember's ps_status values (stable; they also travel on the wire). */
enum {
  EMBER_OK = 0,
  EMBER_EINVALID = 1,
  EMBER_ENOMEM = 2,
  EMBER_EIO = 3,
  EMBER_ECORRUPT = 4,
  EMBER_ENOT_FOUND = 5,
  EMBER_ECONFLICT = 6,
  EMBER_EPROTO = 7,
  EMBER_EUNKNOWN_TABLE = 10,
  EMBER_ETIMEOUT = 12,
  EMBER_EUNAVAILABLE = 13,
  EMBER_EINTERNAL = 16
};

#define EMBER_ERROR_MSG_MAX 512
typedef struct ember_error {
  int code;                      /* EMBER_OK while nothing failed */
  char msg[EMBER_ERROR_MSG_MAX]; /* one line, "" while nothing failed */
} ember_error;

typedef struct ember_client ember_client;
typedef struct ember_request ember_request;

/* The library's version ("0.1.0") and API version (EMBER_API_VERSION it was built with). */
const char *ember_version(void);
int ember_api_version(void);

/* Connects (lazily) to the servers "tcp://H:P,tcp://H:P,..." (the list order is the shard
 * order, as ps-worker's --servers). options: "" or NULL, or "key=value,..." with keys
 *   timeout_ms (bound on each request, default 30000), ckpt_timeout_ms (600000),
 *   rank (this worker, 0), world (workers, for barriers; 1), wire_f16 (0|1),
 *   curve_secret / curve_server (Z85 keys, 40 characters; both or neither), or
 *   curve_secret_file / curve_server_file (ps-keygen's files, as ps-worker's --curve-secret /
 *   --curve-server; a path may not hold ',').
 * On failure *out = NULL. */
int ember_client_open(const char *urls, const char *options, ember_client **out,
                      ember_error *err);
/* Closes the sockets and frees the client; NULL is fine, *c becomes NULL. */
void ember_client_close(ember_client **c);

/* Declares table `id` (1..65535) on every shard, or attaches to it when it exists with the same
 * spec (a different spec is EMBER_ECONFLICT with the server's reason). options:
 *   optimizer (sgd|adagrad|rowwise_adagrad|adam|ftrl; sgd), lr (0.01), eps, beta1, beta2, l1,
 *   l2, lr_power, initial_accumulator, init (x: rows start U(-x, x); 0.05), init_dist
 *   (uniform|normal|zero), init_a, init_b (the distribution's parameters), seed (0),
 *   admit_threshold, ttl_steps, consistency (async|sync|ssp; async), staleness, num_workers,
 *   row_type (f32|f16|bf16; f32: how the servers store the row values; pulls and pushes stay
 *   float either way).
 * A table is pulled and pushed by id after this. ps-worker's table is id 1, named by its
 * schema ("criteo_emb" for the built-in Criteo layout). */
int ember_table_declare(ember_client *c, uint32_t id, const char *name, uint32_t dim,
                        const char *options, ember_error *err);
/* Attaches read-only to the table named `name` as the servers hold it (a training cluster's
 * or ps-server --serve's), without its spec: every shard is asked for it and must agree. Its id
 * into *id and dim into *dim (either may be NULL); pulls work as after a declare, a push on it
 * is EMBER_EINVALID (declare it with its spec to train it). EMBER_EUNKNOWN_TABLE when a shard
 * has no such table. (API version 2.) */
int ember_table_attach(ember_client *c, const char *name, uint32_t *id, uint32_t *dim,
                       ember_error *err);
/* The dim of a declared or attached table, 0 when this client has neither. */
uint32_t ember_table_dim(const ember_client *c, uint32_t id);

/* out[i*dim ..] = row of keys[i] (duplicates are fetched once). A row never pushed is its
 * initial value (the table's init, deterministic per key). */
int ember_pull(ember_client *c, uint32_t table, const uint64_t *keys, size_t n, float *out,
               ember_error *err);
/* grads[i*dim ..] is the gradient of keys[i]; duplicates are summed; the server applies the
 * table's optimizer once per key. */
int ember_push(ember_client *c, uint32_t table, const uint64_t *keys, size_t n,
               const float *grads, ember_error *err);
/* Pipelined forms: the request leaves before the call returns, keys/grads may be reused at
 * once, `out` must stay valid until ember_wait, which frees *r (set to NULL). */
int ember_pull_start(ember_client *c, uint32_t table, const uint64_t *keys, size_t n,
                     float *out, ember_request **r, ember_error *err);
int ember_push_start(ember_client *c, uint32_t table, const uint64_t *keys, size_t n,
                     const float *grads, ember_request **r, ember_error *err);
int ember_wait(ember_client *c, ember_request **r, ember_error *err);

/* Ends this worker's current step on table (0 = every table) and moves to the next. */
int ember_step(ember_client *c, uint32_t table, ember_error *err);
/* The current step (0 at open); set it when resuming from a checkpoint. */
uint64_t ember_current_step(const ember_client *c);
void ember_set_step(ember_client *c, uint64_t step);
/* Waits up to timeout_ms (0 = the client's timeout) until `world` workers reached the barrier
 * `name` ("" = "ember"); world 0 = the client's world option. */
int ember_barrier(ember_client *c, const char *name, uint32_t world, uint32_t timeout_ms,
                  ember_error *err);
/* A global checkpoint of every shard at the current step into path (relative: under each
 * server's data dir), two-phase: all shards or none. */
int ember_checkpoint(ember_client *c, const char *path, ember_error *err);

/* ps-worker's key of categorical feature f (0-based) with 32-bit value v (open vocabulary,
 * the default): a table shared with ps-worker sees the same keys. Missing values have their
 * own key per feature (ember_hash_missing). The array form writes out[i] for values[i]. */
uint64_t ember_hash_feature(uint32_t f, uint32_t v);
uint64_t ember_hash_missing(uint32_t f);
void ember_hash_features(uint32_t f, const uint32_t *values, size_t n, uint64_t *out);
/* ps-worker's key of categorical feature f with value[0..n) as a data file spells it under a
 * schema (docs/SCHEMA.md, "Values"; any bytes, e.g. "site_4f2a"): 8 hex digits are the number
 * they spell (ember_hash_feature's key), any other value its 63-bit hash; n == 0, an empty
 * field, is ember_hash_missing's key. Open vocabulary, as ember_hash_feature. */
uint64_t ember_hash_value(uint32_t f, const char *value, size_t n);

#ifdef __cplusplus
}
#endif
#endif
