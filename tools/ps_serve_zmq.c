/* ps_serve_zmq: ps-serve's ZeroMQ front (--listen URL): the same scoring requests as POST
 * /v1/score, without HTTP's parsing and connection handling (docs/PROTOCOL.md, "ps-serve over
 * ZeroMQ").
 *
 * Design decisions:
 * - One ROUTER socket, owned by one I/O thread. A message is an envelope (every frame but the
 *   last, echoed back unchanged: a REQ client's empty delimiter, a DEALER client's request id
 *   and delimiter) and one request frame, "CONTENT-TYPE\nBODY"; the reply is the envelope and
 *   one frame "STATUS\nJSON", the status and JSON an HTTP client would get. So REQ, DEALER
 *   with ids (many requests in flight on one socket, ps-bench) and raw DEALER clients all work.
 * - The I/O thread only moves messages: a request goes, stamped with its receipt time, to a
 *   queue that --threads request threads take from (a free thread takes the next one, so a
 *   long request does not hold short ones behind it while another thread idles); a thread's
 *   reply comes back over its own inproc PUSH socket (a ZeroMQ socket belongs to one thread)
 *   and the I/O thread sends it on. Scoring itself is serve_score's, under the compute lock.
 * - Every malformed request gets one error reply and the service goes on: no newline after
 *   the content type (400), another content type (415), a body over --max-body-kb (413), a
 *   bad line or row (400, serve_score). A message over twice --max-body-kb (plus 4 KB) is cut
 *   by libzmq (ZMQ_MAXMSGSIZE) before it is read into memory: that client's connection is
 *   closed instead. A message of more than SZ_MAX_FRAMES frames is dropped with a warning (its
 *   envelope is not one a client library makes). When SZ_MAX_QUEUED requests wait, a new
 *   one is answered 503 at once.
 * - The servers' defaults: loopback (or ipc://) unless --allow-remote; CURVE with
 *   --curve-secret/--curve-clients and the same ZAP handler as ps-server (ps_curve.h), so a
 *   client whose key is not listed never gets a message through. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_curve.h"
#include "ps_log.h"
#include "ps_serve_int.h"
#include "ps_time.h"

#define SZ_MAX_FRAMES 16
#define SZ_MAX_QUEUED 4096
#define SZ_REPLIES "inproc://ps-serve-replies"

typedef struct sz_job {
  struct sz_job *next;
  zmq_msg_t f[SZ_MAX_FRAMES]; /* identity, envelope, request */
  int n;
  uint64_t t0;
} sz_job;

typedef struct serve_zmq {
  char url[512], bound[512];
  char sec[PS_CURVE_Z85_SIZE];
  ps_curve_keyset *keys;
  ps_curve_auth *auth;
  void *ctx, *router, *pull;
  pthread_t io, *workers;
  int nworkers;
  bool io_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sz_job *head, *tail;
  int queued;
  volatile int stop; /* under mu for the request threads; the I/O thread polls it */
} serve_zmq;

typedef struct sz_worker {
  serve *s;
  void *push;
} sz_worker;

static void job_free(sz_job *j) {
  for (int i = 0; i < j->n; i++) zmq_msg_close(&j->f[i]);
  free(j);
}

/* Sends the envelope of j (frames 0..n-2) and one reply frame "CODE\nBODY" on sock. */
static void send_reply(void *sock, sz_job *j, int code, const char *body, size_t len) {
  char head[8];
  int hl = snprintf(head, sizeof head, "%d\n", code);
  for (int i = 0; i < j->n - 1; i++)
    zmq_send(sock, zmq_msg_data(&j->f[i]), zmq_msg_size(&j->f[i]), ZMQ_SNDMORE);
  zmq_msg_t m;
  if (zmq_msg_init_size(&m, (size_t)hl + len) != 0) return;
  memcpy(zmq_msg_data(&m), head, (size_t)hl);
  if (len) memcpy((char *)zmq_msg_data(&m) + hl, body, len);
  if (zmq_msg_send(&m, sock, 0) < 0) zmq_msg_close(&m);
}

static void send_error(void *sock, sz_job *j, int code, const char *msg) {
  char body[1200];
  /* msg is ours or serve_score's: quotes and backslashes escaped, no control characters */
  size_t o = (size_t)snprintf(body, sizeof body, "{\"error\":\"");
  for (const char *p = msg; *p && o < sizeof body - 8; p++) {
    if (*p == '"' || *p == '\\') body[o++] = '\\';
    body[o++] = (unsigned char)*p < 0x20 ? ' ' : *p;
  }
  o += (size_t)snprintf(body + o, sizeof body - o, "\"}");
  send_reply(sock, j, code, body, o);
}

/* One request of a request thread: the reply on push, the metrics. */
static void handle(serve *s, void *push, sz_job *j) {
  const zmq_msg_t *rq = &j->f[j->n - 1];
  const char *d = zmq_msg_data((zmq_msg_t *)rq);
  size_t len = zmq_msg_size((zmq_msg_t *)rq), max = (size_t)s->o.max_body_kb * 1024;
  const char *nl = memchr(d, '\n', len < 256 ? len : 256);
  char msg[1024] = "", *text = NULL;
  size_t tlen = 0;
  int code = 200;
  bool json = false;
  if (j->n < 2 || !nl) {
    code = 400, snprintf(msg, sizeof msg, "request frame: give a content type (text/plain or "
                         "application/json), a newline, then the body (docs/PROTOCOL.md)");
  } else if (!(json = (size_t)(nl - d) >= 16 && strncmp(d, "application/json", 16) == 0) &&
             !((size_t)(nl - d) >= 10 && strncmp(d, "text/plain", 10) == 0)) {
    code = 415, snprintf(msg, sizeof msg, "content type '%.*s': give text/plain (lines) or "
                         "application/json ({\"rows\": [...]})", (int)(nl - d < 64 ? nl - d : 64), d);
  } else if (len - (size_t)(nl + 1 - d) > max) {
    code = 413, snprintf(msg, sizeof msg, "body over --max-body-kb %d", s->o.max_body_kb);
  } else {
    code = serve_score(s, nl + 1, len - (size_t)(nl + 1 - d), json, &text, &tlen, msg, sizeof msg);
  }
  if (code == 200) send_reply(push, j, 200, text, tlen);
  else send_error(push, j, code, msg);
  free(text);
  serve_count(s, SERVE_ZMQ, code);
  ps_hist_series_observe_ns(s->lat[SERVE_ZMQ], ps_now_ns() - j->t0);
}

static void *worker_main(void *arg) {
  sz_worker *w = arg;
  serve *s = w->s;
  serve_zmq *z = s->z;
  for (;;) {
    pthread_mutex_lock(&z->mu);
    while (!z->head && !z->stop) pthread_cond_wait(&z->cv, &z->mu);
    sz_job *j = z->stop ? NULL : z->head;
    if (j && !(z->head = j->next)) z->tail = NULL;
    if (j) z->queued--;
    pthread_mutex_unlock(&z->mu);
    if (!j) break;
    handle(s, w->push, j);
    job_free(j);
  }
  zmq_close(w->push);
  free(w);
  return NULL;
}

/* The I/O thread's side of a request: the whole message in, queued (or answered 503). */
static void take_request(serve *s) {
  serve_zmq *z = s->z;
  sz_job *j = calloc(1, sizeof *j);
  bool more = true, over = false;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, z->router, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (j && j->n < SZ_MAX_FRAMES) j->f[j->n++] = m;
    else over = true, zmq_msg_close(&m);
  }
  if (!j) return;
  j->t0 = ps_now_ns();
  if (over || j->n < 2) {
    PS_WARN_RL("--listen: dropped a message of %s frames (a request is an envelope and one "
               "frame, docs/PROTOCOL.md)", over ? "too many" : "too few");
    job_free(j);
    return;
  }
  pthread_mutex_lock(&z->mu);
  bool full = z->queued >= SZ_MAX_QUEUED;
  if (!full) {
    if (z->tail) z->tail->next = j;
    else z->head = j;
    z->tail = j;
    z->queued++;
    pthread_cond_signal(&z->cv);
  }
  pthread_mutex_unlock(&z->mu);
  if (full) {
    send_error(z->router, j, 503, "busy: too many requests queued, try again");
    serve_count(s, SERVE_ZMQ, 503);
    job_free(j);
  }
}

/* A request thread's reply: forwarded to the ROUTER, its first frame the client's identity. */
static void forward_reply(serve_zmq *z) {
  bool more = true;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, z->pull, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (zmq_msg_send(&m, z->router, more ? ZMQ_SNDMORE : 0) < 0) zmq_msg_close(&m);
  }
}

static void *io_main(void *arg) {
  serve *s = arg;
  serve_zmq *z = s->z;
  while (!z->stop) {
    zmq_pollitem_t it[2] = {{.socket = z->router, .events = ZMQ_POLLIN},
                            {.socket = z->pull, .events = ZMQ_POLLIN}};
    if (zmq_poll(it, 2, 100) < 0 && zmq_errno() == ETERM) break;
    if (it[1].revents & ZMQ_POLLIN) forward_reply(z);
    if (it[0].revents & ZMQ_POLLIN) take_request(s);
  }
  return NULL;
}

/* --listen's host is loopback: 127.0.0.0/8, ::1, localhost (ipc:// is local too). */
static bool loopback(const char *host, size_t n) {
  char h[64];
  if (n >= sizeof h) return false;
  memcpy(h, host, n);
  h[n] = '\0';
  return strncmp(h, "127.", 4) == 0 || strcmp(h, "[::1]") == 0 || strcmp(h, "::1") == 0 ||
         strcmp(h, "localhost") == 0;
}

int serve_zmq_check(serve *s) {
  const serve_opts *o = &s->o;
  if (!o->listen) {
    if (o->curve_secret || o->curve_clients || o->allow_remote)
      return ps_tool_fail("ps-serve", 2, "--curve-secret, --curve-clients and --allow-remote are "
                          "for --listen (ZeroMQ): give --listen URL");
    return 0;
  }
  serve_zmq *z = s->z = calloc(1, sizeof *z);
  if (!z) return ps_tool_fail("ps-serve", 1, "out of memory");
  pthread_mutex_init(&z->mu, NULL);
  pthread_cond_init(&z->cv, NULL);
  const char *url = o->listen, *colon = strrchr(url, ':');
  bool ipc = strncmp(url, "ipc://", 6) == 0 && url[6];
  if (!ipc && (strncmp(url, "tcp://", 6) != 0 || colon == url + 3 || colon == url + 6 || !colon[1] ||
               strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 5 ||
               atol(colon + 1) > 65535))
    return ps_tool_fail("ps-serve", 2, "--listen %s: give tcp://HOST:PORT (PORT 0..65535) or ipc://PATH", url);
  if (strlen(url) >= sizeof z->url - 8) return ps_tool_fail("ps-serve", 2, "--listen: the URL is too long");
  if (!ipc && !o->allow_remote && !loopback(url + 6, (size_t)(colon - url - 6)))
    return ps_tool_fail("ps-serve", 2, "--listen %s is not a loopback address: give --allow-remote "
                        "to serve other hosts (with --curve-secret/--curve-clients)", url);
  /* ZeroMQ's any-free-port is *, not 0 */
  if (!ipc && strcmp(colon + 1, "0") == 0) snprintf(z->url, sizeof z->url, "%.*s*", (int)(colon + 1 - url), url);
  else snprintf(z->url, sizeof z->url, "%s", url);
  if (!o->curve_secret && !o->curve_clients) return 0;
  ps_error err;
  if (!o->curve_secret || !o->curve_clients)
    return ps_tool_fail("ps-serve", 2, "--curve-secret and --curve-clients go together (the "
                        "server's key and the clients it serves)");
  if (ps_curve_read_key(o->curve_secret, true, z->sec, &err) != PS_OK ||
      ps_curve_keyset_load(o->curve_clients, &z->keys, &err) != PS_OK)
    return ps_tool_fail("ps-serve", 2, "%s", ps_error_str(&err));
  return 0;
}

int serve_zmq_start(serve *s) {
  serve_zmq *z = s->z;
  if (!z) return 0;
  ps_error err;
  int zero = 0, v6 = strncmp(z->url, "tcp://[", 7) == 0;
  int64_t maxmsg = (int64_t)s->o.max_body_kb * 2048 + 4096;
  if (!(z->ctx = zmq_ctx_new())) return ps_tool_fail("ps-serve", 1, "--listen: no ZeroMQ context");
  if (z->keys && ps_curve_auth_start(z->ctx, z->keys, &z->auth, &err) != PS_OK)
    return ps_tool_fail("ps-serve", 1, "--listen: %s", ps_error_str(&err));
  z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
  z->pull = zmq_socket(z->ctx, ZMQ_PULL);
  if (!z->router || !z->pull || zmq_setsockopt(z->router, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
      zmq_setsockopt(z->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0 ||
      zmq_setsockopt(z->router, ZMQ_IPV6, &v6, sizeof v6) != 0 ||
      zmq_setsockopt(z->pull, ZMQ_LINGER, &zero, sizeof zero) != 0 || zmq_bind(z->pull, SZ_REPLIES) != 0)
    return ps_tool_fail("ps-serve", 1, "--listen: ZeroMQ sockets: %s", zmq_strerror(zmq_errno()));
  if (z->keys && ps_curve_setup_server(z->router, z->sec, &err) != PS_OK)
    return ps_tool_fail("ps-serve", 1, "--listen: %s", ps_error_str(&err));
  if (zmq_bind(z->router, z->url) != 0)
    return ps_tool_fail("ps-serve", 1, "--listen %s: cannot bind: %s", s->o.listen, zmq_strerror(zmq_errno()));
  size_t bl = sizeof z->bound;
  if (zmq_getsockopt(z->router, ZMQ_LAST_ENDPOINT, z->bound, &bl) != 0) snprintf(z->bound, sizeof z->bound, "%s", z->url);
  if (z->keys)
    PS_INFO("--listen: CURVE: encrypted; serving only the %zu client key(s) in --curve-clients",
            ps_curve_keyset_size(z->keys));
  else if (s->o.allow_remote)
    PS_WARN("--listen: unauthenticated: no --curve-secret/--curve-clients, so anyone who can reach "
            "%s can score (docs/OPERATIONS.md, Authentication)", z->bound);
  z->workers = calloc((size_t)s->o.threads, sizeof *z->workers);
  if (!z->workers) return ps_tool_fail("ps-serve", 1, "out of memory");
  for (; z->nworkers < s->o.threads; z->nworkers++) {
    sz_worker *w = calloc(1, sizeof *w);
    if (w) w->s = s, w->push = zmq_socket(z->ctx, ZMQ_PUSH);
    if (!w || !w->push || zmq_setsockopt(w->push, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(w->push, SZ_REPLIES) != 0 ||
        pthread_create(&z->workers[z->nworkers], NULL, worker_main, w) != 0) {
      if (w && w->push) zmq_close(w->push);
      free(w);
      return ps_tool_fail("ps-serve", 1, "--listen: cannot start the request threads");
    }
  }
  if (pthread_create(&z->io, NULL, io_main, s) != 0)
    return ps_tool_fail("ps-serve", 1, "--listen: cannot start the I/O thread");
  z->io_started = true;
  printf("ps-serve: listening on %s\n", z->bound);
  fflush(stdout);
  return 0;
}

void serve_zmq_stop(serve *s) {
  serve_zmq *z = s->z;
  if (!z) return;
  pthread_mutex_lock(&z->mu);
  z->stop = 1;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  for (int i = 0; i < z->nworkers; i++) pthread_join(z->workers[i], NULL);
  if (z->io_started) pthread_join(z->io, NULL);
  while (z->head) {
    sz_job *j = z->head;
    z->head = j->next;
    job_free(j);
  }
  if (z->router) zmq_close(z->router);
  if (z->pull) zmq_close(z->pull);
  ps_curve_auth_stop(&z->auth);
  if (z->ctx) zmq_ctx_term(z->ctx);
  ps_curve_keyset_destroy(&z->keys);
  pthread_mutex_destroy(&z->mu);
  pthread_cond_destroy(&z->cv);
  free(z->workers);
  free(z);
  s->z = NULL;
}
