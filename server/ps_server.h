/* ps_server: one shard of the Ember parameter server, as a library (ps-server is a thin main
 * over it; tests and the fuzzer drive it in-process).
 *
 * One main thread owns the ZeroMQ ROUTER socket: it decodes and validates every message,
 * keeps the step bookkeeping of the consistency modes (deferring replies, never blocking a
 * thread), hosts the coordinator on shard 0, and sends every reply. Store work is handed to
 * `threads` partition threads over inproc sockets; thread t owns the store partitions p with
 * p % threads == t, so no two threads touch the same rows and FIFO order per thread gives
 * read-your-writes per connection. threads == 0 runs store work inline in the main thread
 * (what the fuzzer uses). The wire protocol is in server/PROTOCOL.md. */
#ifndef PS_SERVER_H
#define PS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef struct ps_server_options {
  const char *listen;    /* "tcp://HOST:PORT"; NULL = no socket (in-process dispatch only) */
  uint32_t shard;        /* this shard, < shards */
  uint32_t shards;       /* >= 1 */
  const char *data_dir;  /* created if absent */
  size_t cache_bytes;    /* hot-tier budget handed to the store */
  uint32_t threads;      /* partition threads; 0 = inline in the main thread */
  int metrics_port;      /* 0 = none; served by the metrics module through ps_server_stats_json */
  uint64_t inject_delay_us; /* testing: pull/push replies leave no earlier than this after
                             * their store work started (a simulated service time), without
                             * holding any thread (0 = off) */
} ps_server_options;

typedef struct ps_server ps_server;

/* Opens the store under data_dir (restoring the last checkpoint if the previous run did not
 * shut down cleanly), loads the table metadata and binds the socket. */
ps_status ps_server_create(const ps_server_options *opt, ps_server **out);
/* Serves until ps_server_request_stop, then finishes in-flight work, answers deferred requests
 * with PS_ERR_UNAVAILABLE, flushes the store and marks the data dir clean. */
ps_status ps_server_run(ps_server *s);
/* Async-signal-safe: asks ps_server_run to shut down gracefully. */
void ps_server_request_stop(ps_server *s);
void ps_server_destroy(ps_server **s);

/* The endpoint actually bound (useful with port 0 / "*"), or "" without a socket. */
const char *ps_server_endpoint(const ps_server *s);

/* Thread-safe stats snapshot as JSON (malloc'ed, free() it), refreshed by the main thread at
 * least every 200 ms: the hook for the metrics endpoint (--metrics-port). Same document as
 * the STATS reply. NULL on allocation failure. */
char *ps_server_stats_json(ps_server *s);

/* In-process dispatch without sockets (fuzzing, unit tests): handles one multipart message as
 * if it had arrived from a client, runs until nothing is runnable, and hands every reply
 * frame set to `sink`. Only for servers created with listen == NULL. */
typedef void (*ps_server_sink)(void *ctx, const void *const *frames, const size_t *sizes,
                               size_t nframes);
ps_status ps_server_feed(ps_server *s, const void *const *frames, const size_t *sizes,
                         size_t nframes, ps_server_sink sink, void *ctx);

#endif
