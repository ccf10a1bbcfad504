/* ps_client: the client object (see ps_client.h for the API, ps_client_int.h for how the
 * client is laid out over its files): one DEALER socket and one socket monitor per shard,
 * options and the accessors.
 *
 * The shard count is fixed at create, so every per-shard array (servers, poll items, the
 * scratch of pulls and pushes) lives in one allocation. Connecting is lazy: ZeroMQ connects
 * and reconnects by itself, with a short reconnect interval so that a restarted server is
 * found again within a second. A URL is checked before anything is opened, since ZeroMQ
 * accepts some wrong ones silently (a missing scheme fails only at connect, a port over 65535
 * wraps); the message names the URL. With CURVE keys in the options every socket is a CURVE
 * client (ps_curve.h) before it connects, and its monitor also reports failed handshakes, so
 * a refused key is named in the request's error instead of a bare timeout.
 *
 * Exactly-once pushes: the client's id is random (getrandom, else a mix of the clock, the pid
 * and an address) unless the options give one, so two clients never share one in practice.
 * Sequence numbers are per shard, so each shard sees 1, 2, 3, ... of a client and can keep the
 * seqs it took as a window over them; the floor (the lowest seq not yet settled, i.e. released
 * by ps_client_wait) lets it forget the rest. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_cli.h"
#include "ps_client_int.h"
#include "ps_curve.h"
#include "ps_zmq.h"

void ps_client_options_default(ps_client_options *o) {
  memset(o, 0, sizeof *o);
  o->timeout_ms = 30000;
  o->ckpt_timeout_ms = 600000;
}

/* Why url is not tcp://HOST:PORT or ipc://PATH, or NULL when it is. */
static const char *url_flaw(const char *url) {
  if (!url || !*url) return "it is empty";
  if (strncmp(url, "ipc://", 6) == 0) return url[6] ? NULL : "the path is empty";
  if (strncmp(url, "tcp://", 6) != 0) return "no tcp:// or ipc:// scheme";
  const char *hp = url + 6, *colon = strrchr(hp, ':');
  if (!colon || colon == hp) return colon ? "the host is empty" : "no :PORT";
  const char *p = colon + 1;
  if (!*p) return "the port is empty";
  long port = 0;
  for (; *p; p++) {
    if (!isdigit((unsigned char)*p)) return "the port is not a number";
    if ((port = port * 10 + (*p - '0')) > 65535) break;
  }
  return port >= 1 && port <= 65535 ? NULL : "the port is not in 1..65535";
}

/* Splits a shard's 'URL|URL|...' into its replicas; -1 when empty, too many or one is empty. */
static int split_replicas(const char *url, char **items) {
  return url ? ps_split_list(url, '|', items, CL_MAX_REPLICAS) : -1;
}

ps_status ps_client_check_url(const char *url, ps_error *err) {
  char *items[CL_MAX_REPLICAS];
  int n = url && strchr(url, '|') ? split_replicas(url, items) : 0;
  if (n < 0)
    return ps_error_set(err, PS_ERR_INVALID, "server URL '%s' is not 'URL|URL|...' (1..%d "
                        "replicas, none empty)", url, CL_MAX_REPLICAS);
  const char *flaw = NULL, *bad = url;
  for (int i = 0; i < n && !flaw; i++) flaw = url_flaw(bad = items[i]);
  if (n == 0) flaw = url_flaw(url);
  ps_status st = PS_OK;
  if (flaw)
    st = ps_error_set(err, PS_ERR_INVALID,
                      "server URL '%s' is not tcp://HOST:PORT or ipc://PATH (%s)",
                      bad ? bad : "", flaw);
  if (n > 0) free(items[0]);
  return st;
}

/* Allocates the per-shard arrays of n servers in one zeroed block (all 8-byte aligned). */
static bool shards_alloc(ps_client *c, size_t n) {
  size_t per = sizeof *c->srv + 2 * sizeof *c->items + sizeof *c->cnt + sizeof *c->vbase;
  char *b = calloc(n, per);
  if (!b) return false;
  c->srv = (cl_server *)b;
  c->items = (zmq_pollitem_t *)(b + n * sizeof *c->srv);
  c->cnt = (size_t *)((char *)c->items + 2 * n * sizeof *c->items);
  c->vbase = (char **)(c->cnt + n);
  return true;
}

static ps_status shard_open_fail(size_t i, ps_error *err) {
  return ps_error_set(err, PS_ERR_NOMEM, "cannot open the socket of shard %zu: %s", i,
                      zmq_strerror(errno));
}

/* Opens shard i's socket and monitor and starts connecting to url. */
static ps_status shard_open(ps_client *c, size_t i, const char *url, ps_error *err) {
  cl_server *s = &c->srv[i];
  char *items[CL_MAX_REPLICAS];
  int n = split_replicas(url, items);
  for (int k = 0; k < n; k++) {
    if (strlen(items[k]) >= sizeof s->url) n = -1;
    else snprintf(s->rep[k], sizeof s->rep[k], "%s", items[k]);
  }
  if (n > 0) free(items[0]);
  if (n <= 0)
    return ps_error_set(err, PS_ERR_INVALID, "server URL %zu is missing or too long", i);
  s->nrep = (uint32_t)n;
  s->served_lo = UINT64_MAX; /* no pull reply yet (ps_client_served_take) */
  if (n > 1) c->replicated = true;
  snprintf(s->url, sizeof s->url, "%s", s->rep[0]);
  s->sock = ps_zmq_dealer(c->ctx, 1000);
  if (!s->sock) return shard_open_fail(i, err);
  if (c->opt.curve_secret[0]) {
    ps_status st = ps_curve_setup_client(s->sock, c->opt.curve_secret, c->opt.curve_server, err);
    if (st != PS_OK) return st;
  }
  char mon[128];
  snprintf(mon, sizeof mon, "inproc://ember-client-%p-%zu", (void *)c, i);
  if (zmq_socket_monitor(s->sock, mon,
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
    return shard_open_fail(i, err);
  s->mon = zmq_socket(c->ctx, ZMQ_PAIR);
  if (!s->mon || zmq_connect(s->mon, mon) != 0) return shard_open_fail(i, err);
  int zero = 0;
  zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_connect(s->sock, s->url) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "cannot connect to '%s': %s", s->url,
                      zmq_strerror(errno));
  c->items[2 * i].socket = s->sock;
  c->items[2 * i].events = ZMQ_POLLIN;
  c->items[2 * i + 1].socket = s->mon;
  c->items[2 * i + 1].events = ZMQ_POLLIN;
  return PS_OK;
}

/* A non-zero 64-bit id that no other client picks in practice. */
static uint64_t random_id(const ps_client *c) {
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec << 20 ^
         (uint64_t)getpid() << 40 ^ (uint64_t)(uintptr_t)c;
  }
  return id ? id : 1;
}

ps_status cl_seq_take(ps_client *c, uint32_t srv, Ember__Header *h, uint64_t *seq,
                      ps_error *err) {
  cl_server *S = &c->srv[srv];
  if (!S->seq_done) {
    if (!(S->seq_done = calloc(PS_WIRE_SEQ_WINDOW / 64, sizeof *S->seq_done)))
      return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
    S->seq_next = S->seq_floor = 1;
  }
  if (S->seq_next - S->seq_floor >= PS_WIRE_SEQ_WINDOW - 1)
    return ps_error_set(err, PS_ERR_INVALID,
                        "%u pushes to this shard are unsettled (started, not yet waited for): "
                        "wait for some before starting more",
                        PS_WIRE_SEQ_WINDOW - 1);
  *seq = S->seq_next++;
  h->client_id = c->id;
  h->seq = *seq;
  h->seq_floor = S->seq_floor;
  return PS_OK;
}

void cl_seq_settle(ps_client *c, uint32_t srv, uint64_t seq) {
  cl_server *S = &c->srv[srv];
  uint64_t *d = S->seq_done;
  d[(seq % PS_WIRE_SEQ_WINDOW) / 64] |= 1ull << (seq % 64);
  for (;;) {
    uint64_t f = S->seq_floor, w = (f % PS_WIRE_SEQ_WINDOW) / 64, b = 1ull << (f % 64);
    if (f >= S->seq_next || !(d[w] & b)) break;
    d[w] &= ~b;
    S->seq_floor++;
  }
}

ps_status ps_client_create(const char *const *urls, size_t n, const ps_client_options *opt,
                           ps_client **out, ps_error *err) {
  *out = NULL;
  if (!urls || n == 0 || n > CL_MAX_SERVERS)
    return ps_error_set(err, PS_ERR_INVALID, "a client needs 1..%d server URLs, not %zu",
                        CL_MAX_SERVERS, urls ? n : 0);
  for (size_t i = 0; i < n; i++)
    if (ps_client_check_url(urls[i], err) != PS_OK) return PS_ERR_INVALID;
  ps_client *c = calloc(1, sizeof *c);
  if (!c) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  if (opt) c->opt = *opt;
  else ps_client_options_default(&c->opt);
  if (!c->opt.timeout_ms) c->opt.timeout_ms = 30000;
  if (!c->opt.ckpt_timeout_ms) c->opt.ckpt_timeout_ms = 600000;
  if (!c->opt.failover_ms) c->opt.failover_ms = 1000;
  c->next_rid = 1;
  c->id = c->opt.client_id ? c->opt.client_id : random_id(c);
  c->nsrv = n;
  c->nunsure = n;
  c->ctx = zmq_ctx_new();
  c->dims = calloc(PS_WIRE_MAX_TABLE + 1, sizeof *c->dims);
  ps_status st = PS_ERR_NOMEM;
  if (!c->ctx || !shards_alloc(c, n) || !c->dims || ps_dedup_create(&c->dd) != PS_OK) {
    ps_error_set(err, st, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < n; i++)
    if ((st = shard_open(c, i, urls[i], err)) != PS_OK) goto fail;
  *out = c;
  return PS_OK;
fail:
  ps_client_destroy(&c);
  return st;
}

ps_status ps_client_create_list(const char *urls, const ps_client_options *opt,
                                ps_client **out, ps_error *err) {
  char *items[CL_MAX_SERVERS];
  int n = ps_split_list(urls, ',', items, CL_MAX_SERVERS);
  if (n <= 0) {
    *out = NULL;
    return ps_error_set(err, PS_ERR_INVALID,
                        "server list '%s' is empty, has an empty item or more than %d URLs",
                        urls ? urls : "", CL_MAX_SERVERS);
  }
  ps_status st = ps_client_create((const char *const *)items, (size_t)n, opt, out, err);
  free(items[0]);
  return st;
}

void ps_client_destroy(ps_client **cp) {
  if (!cp || !*cp) return;
  ps_client *c = *cp;
  *cp = NULL;
  cl_reqs_free(c);
  for (size_t i = 0; c->srv && i < c->nsrv; i++) {
    if (c->srv[i].sock) {
      zmq_socket_monitor(c->srv[i].sock, NULL, 0);
      zmq_close(c->srv[i].sock);
    }
    if (c->srv[i].mon) zmq_close(c->srv[i].mon);
    free(c->srv[i].seq_done);
  }
  if (c->ctx) zmq_ctx_term(c->ctx);
  ps_dedup_destroy(&c->dd);
  free(c->srv); /* and the other per-shard arrays */
  free(c->dims);
  free(c->pend);
  free(c->acc);
  free(c->rev);
  free(c);
}

size_t ps_client_servers(const ps_client *c) { return c->nsrv; }
const char *ps_client_url(const ps_client *c, size_t i) {
  return i < c->nsrv ? c->srv[i].url : "";
}
void ps_client_set_rank(ps_client *c, uint32_t rank) { c->opt.rank = rank; }
void ps_client_counters(const ps_client *c, uint64_t *disconnects, uint64_t *resent) {
  if (disconnects) *disconnects = c->disconnects;
  if (resent) *resent = c->resent;
}
void ps_client_failovers(const ps_client *c, uint64_t *failovers, uint64_t *last_ms) {
  if (failovers) *failovers = c->failovers;
  if (last_ms) *last_ms = c->failover_ms_last;
}
