/* ps_serve_int.h: what ps-serve's files share -- the server's state (the versions, the compute
 * lock, the metrics), one request scored as HTTP and ZeroMQ both answer it (ps_serve_main.c),
 * and the ZeroMQ front (--listen, ps_serve_zmq.c). Private to ps-serve. */
#ifndef PS_SERVE_INT_H
#define PS_SERVE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_metrics.h"
#include "ps_score.h"

typedef struct version {
  ps_predictor p;
  uint64_t step;
  int refs; /* under serve.vmu: the server's own and one per request */
} version;

typedef struct serve_opts {
  const char *ckpt, *export, *servers, *schema, *device, *http, *precision;
  const char *listen, *curve_secret, *curve_clients; /* --listen and its CURVE keys */
  ps_kern_prec prec;
  int threads, compute_threads, batch, max_body_kb, timeout_s, request_timeout_s, max_conn, poll_ms;
  bool follow, allow_remote;
} serve_opts;

/* The transports, as /metrics labels them. */
enum { SERVE_HTTP, SERVE_ZMQ, SERVE_NTRANSPORTS };

typedef struct serve {
  serve_opts o;
  pthread_mutex_t vmu;
  version *cur;
  /* under vmu: broadcast at each swap (a request waiting for the shards' version); look_now
   * asks the main thread for a look at once (a request found the shards on another step) */
  pthread_cond_t vcv;
  bool look_now;
  struct ps_client *probe; /* --follow --servers: the main thread's own client, for its looks */
  version *next;           /* --follow --servers: latest's model loaded ahead (main thread) */
  /* Every use of the compute backend: scoring, a model's creation and its destruction. The
   * CPU backend's OpenBLAS keeps global state (its thread count, set at each creation, and
   * buffers) that two models must not use at once: measured, a request scored while a new
   * version was being created got scores one float rounding off, 1 in ~4,000. */
  pthread_mutex_t compute;
  ps_metrics *m;
  ps_series *lat[SERVE_NTRANSPORTS], *rows, *step_g, *swaps;
  ps_metric *reqs;
  struct MHD_Daemon *d;
  pthread_mutex_t cmu; /* the connections, for the request deadline */
  struct conn_slot *conns;
  struct serve_zmq *z; /* --listen, or NULL */
} serve;

/* One request: body (len bytes; lines, or {"rows": [...]} when json) scored by the current
 * version. Returns the HTTP status; 200 with *text (malloc'ed, *tlen bytes) the reply
 * {"step":..,"scores":[..]}, else msg says why in one line. Counts the rows scored. */
int serve_score(serve *s, const char *body, size_t len, bool json, char **text, size_t *tlen,
                char *msg, size_t msglen);
/* A request answered over transport t with status code: the counter by transport and code. */
void serve_count(serve *s, int t, int code);

/* ps_serve_version.c: a version's model loaded from dir (a step directory with --follow, else
 * --checkpoint/--export as given; any_step: whatever step the shards serve) with one reference; a reference taken and dropped (the last
 * frees it); v made current (the old one dropped). */
ps_status version_load(serve *s, const char *dir, bool any_step, version **out, ps_error *err);
version *version_get(serve *s);
void version_put(serve *s, version *v);
void version_swap(serve *s, version *v);
/* A request whose rows were of another step than v (t0: when it began) asks for a look and waits
 * for a swap, briefly; false when it has waited SWITCH_WAIT_MS in all (then it is refused). */
bool serve_wait_swap(serve *s, const version *v, uint64_t t0);
/* --follow: the first name to serve into seen (exit code 2 after one line, or 0); one look (a new
 * version swapped in when there is one); the wait between looks. */
int serve_follow_start(serve *s, char *seen, size_t len);
void serve_follow_look(serve *s, char *seen, char *failed);
void serve_follow_wait(serve *s);

/* --listen: checks the URL and reads the CURVE keys (exit code 2 after one line on stderr, or 0;
 * nothing without --listen);
 * then starts the socket and its threads (exit code 1 after one line, or 0; prints the
 * endpoint bound), and stops them. */
int serve_zmq_check(serve *s);
int serve_zmq_start(serve *s);
void serve_zmq_stop(serve *s);

#endif
