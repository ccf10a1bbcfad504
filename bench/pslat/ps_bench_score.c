/* ps_bench_score: --op score's clients of ps-serve, one per sender thread: requests of
 * --candidates lines of --score-lines, sent at the open loop's times, their replies taken in
 * by polling, as ps_client's are for pulls.
 *
 * - HTTP (--url http://HOST:PORT): POST /v1/score with a text/plain body over keep-alive
 *   connections, one request outstanding on each (HTTP/1.1 has no ids to match replies out
 *   of order); a request finds the first idle connection, or opens one, up to the thread's
 *   in-flight window. A connection the server closed while idle (its --timeout-s) is seen
 *   before a send (readable at end of file) and replaced, so it costs a connect, not an error.
 * - ZeroMQ (--url tcp://HOST:PORT or ipc://PATH): one DEALER socket (CURVE with --curve-secret
 *   and --curve-server), each request the frames [tag][""]["text/plain\nBODY"]: ps-serve echoes
 *   the envelope, so replies are matched by tag whatever their order (docs/PROTOCOL.md).
 * A request's lines start at a random line and run on (wrapping), so requests differ without
 * drawing per line; the body is built at the send, its cost in the client queue time like a
 * pull's key drawing. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_bench_int.h"
#include "ps_curve.h"
#include "ps_zmq.h"

typedef struct hconn {
  int fd;            /* -1: not connected */
  bool busy;
  uint32_t tag;
  char *rb;          /* the reply so far */
  size_t rlen, rcap;
} hconn;

struct ps_bench_scorer {
  const ps_bench_cfg *c;
  bool zmq;
  /* HTTP */
  struct addrinfo *ai;
  char host[256];
  hconn *conns;
  int nconns;
  /* ZeroMQ */
  void *ctx, *sock;
  /* the request being built */
  char *body;
  size_t cap;
};

int ps_bench_score_load(ps_bench_cfg *c) {
  FILE *f = fopen(c->score_lines, "rb");
  if (!f) return fprintf(stderr, "ps-bench: --score-lines %s: %s\n", c->score_lines, strerror(errno)), 2;
  char *buf = NULL;
  size_t len = 0, n = 0;
  FILE *m = open_memstream(&buf, &len);
  char chunk[65536];
  size_t got;
  while (m && (got = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, got, m);
  fclose(f);
  if (!m || fclose(m) != 0) return fprintf(stderr, "ps-bench: --score-lines: out of memory\n"), 1;
  for (size_t i = 0; i < len; i++) n += buf[i] == '\n';
  if (len && buf[len - 1] != '\n') n++;
  c->score_buf = buf;
  c->score_off = malloc((n + 1) * sizeof *c->score_off);
  if (!c->score_off) return 1;
  size_t k = 0;
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(buf + at, '\n', len - at);
    size_t end = nl ? (size_t)(nl - buf) : len;
    if (end > at) c->score_off[k++] = at; /* empty lines are not candidates */
    at = end + 1;
  }
  c->score_off[k] = len;
  c->score_n = k;
  if (!k) return fprintf(stderr, "ps-bench: --score-lines %s has no lines\n", c->score_lines), 2;
  return 0;
}

/* Line i of --score-lines (without its newline). */
static const char *line_at(const ps_bench_cfg *c, size_t i, size_t *len) {
  const char *p = c->score_buf + c->score_off[i];
  const char *nl = memchr(p, '\n', c->score_buf + c->score_off[c->score_n] - p);
  *len = nl ? (size_t)(nl - p) : (size_t)(c->score_buf + c->score_off[c->score_n] - p);
  return p;
}

/* The request's body after `head` bytes of room: --candidates lines from line pick on. */
static int build(ps_bench_scorer *s, size_t head, uint64_t pick, size_t *blen) {
  const ps_bench_cfg *c = s->c;
  size_t need = head, first = (size_t)(pick % c->score_n);
  for (int64_t k = 0; k < c->candidates; k++) {
    size_t l;
    line_at(c, (first + (size_t)k) % c->score_n, &l);
    need += l + 1;
  }
  if (need > s->cap) {
    char *b = realloc(s->body, need);
    if (!b) return -1;
    s->body = b, s->cap = need;
  }
  char *o = s->body + head;
  for (int64_t k = 0; k < c->candidates; k++) {
    size_t l;
    const char *p = line_at(c, (first + (size_t)k) % c->score_n, &l);
    memcpy(o, p, l);
    o[l] = '\n';
    o += l + 1;
  }
  *blen = need - head;
  return 0;
}

int ps_bench_scorer_create(const ps_bench_cfg *c, int cap, ps_bench_scorer **out) {
  ps_bench_scorer *s = calloc(1, sizeof *s);
  *out = s;
  if (!s) return -1;
  s->c = c;
  if (strncmp(c->url, "http://", 7) == 0) {
    const char *hp = c->url + 7, *colon = strrchr(hp, ':');
    size_t hl = colon ? (size_t)(colon - hp) : 0;
    char port[16];
    if (!colon || !hl || hl >= sizeof s->host || strlen(colon + 1) >= sizeof port)
      return fprintf(stderr, "ps-bench: --url %s: give http://HOST:PORT\n", c->url), -1;
    snprintf(port, sizeof port, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
    memcpy(s->host, hp, hl);
    s->host[hl] = '\0';
    char h[256];
    snprintf(h, sizeof h, "%s", s->host);
    if (h[0] == '[') memmove(h, h + 1, strlen(h)), h[strlen(h) - 1] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(h, port, &hints, &s->ai);
    if (rc != 0) return fprintf(stderr, "ps-bench: --url %s: %s\n", c->url, gai_strerror(rc)), -1;
    s->conns = calloc((size_t)cap, sizeof *s->conns);
    if (!s->conns) return -1;
    s->nconns = cap;
    for (int i = 0; i < cap; i++) s->conns[i].fd = -1;
    return 0;
  }
  s->zmq = true;
  int zero = 0;
  ps_error err;
  s->ctx = zmq_ctx_new();
  s->sock = s->ctx ? zmq_socket(s->ctx, ZMQ_DEALER) : NULL;
  if (!s->sock) return fprintf(stderr, "ps-bench: no ZeroMQ socket\n"), -1;
  zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof zero);
  if (c->curve_secret[0] && ps_curve_setup_client(s->sock, c->curve_secret, c->curve_server, &err) != PS_OK)
    return fprintf(stderr, "ps-bench: %s\n", err.msg), -1;
  if (zmq_connect(s->sock, c->url) != 0)
    return fprintf(stderr, "ps-bench: --url %s: %s\n", c->url, zmq_strerror(zmq_errno())), -1;
  return 0;
}

static void hclose(hconn *h) {
  if (h->fd >= 0) close(h->fd);
  h->fd = -1, h->busy = false, h->rlen = 0;
}

void ps_bench_scorer_destroy(ps_bench_scorer **sp) {
  ps_bench_scorer *s = *sp;
  if (!s) return;
  *sp = NULL;
  for (int i = 0; i < s->nconns; i++) hclose(&s->conns[i]), free(s->conns[i].rb);
  free(s->conns);
  if (s->ai) freeaddrinfo(s->ai);
  if (s->sock) zmq_close(s->sock);
  if (s->ctx) zmq_ctx_term(s->ctx);
  free(s->body);
  free(s);
}

/* An idle connection, connected and not closed by the server meanwhile; NULL when none. */
static hconn *idle_conn(ps_bench_scorer *s, char *err, size_t errlen) {
  for (int i = 0; i < s->nconns; i++) {
    hconn *h = &s->conns[i];
    if (h->busy) continue;
    if (h->fd >= 0) {
      struct pollfd p = {.fd = h->fd, .events = POLLIN};
      if (poll(&p, 1, 0) == 0) return h;
      hclose(h); /* readable while idle: closed by the server (or garbage): a new one */
    }
    h->fd = socket(s->ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (h->fd >= 0) setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (h->fd < 0 || connect(h->fd, s->ai->ai_addr, s->ai->ai_addrlen) != 0) {
      snprintf(err, errlen, "connect to %s: %s", s->c->url, strerror(errno));
      hclose(h);
      return NULL;
    }
    return h;
  }
  snprintf(err, errlen, "no idle connection (the in-flight window is full)");
  return NULL;
}

int ps_bench_scorer_send(ps_bench_scorer *s, uint64_t pick, uint32_t tag, char *err, size_t errlen) {
  size_t blen;
  if (s->zmq) {
    static const char ct[] = "text/plain\n";
    if (build(s, sizeof ct - 1, pick, &blen) != 0) return snprintf(err, errlen, "out of memory"), -1;
    memcpy(s->body, ct, sizeof ct - 1);
    if (zmq_send(s->sock, &tag, sizeof tag, ZMQ_SNDMORE) < 0 || zmq_send(s->sock, "", 0, ZMQ_SNDMORE) < 0 ||
        zmq_send(s->sock, s->body, sizeof ct - 1 + blen, 0) < 0)
      return snprintf(err, errlen, "send: %s", zmq_strerror(zmq_errno())), -1;
    return 0;
  }
  hconn *h = idle_conn(s, err, errlen);
  if (!h) return -1;
  char head[512];
  if (build(s, sizeof head, pick, &blen) != 0) return snprintf(err, errlen, "out of memory"), -1;
  int hl = snprintf(head, sizeof head, "POST /v1/score HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                    "text/plain\r\nContent-Length: %zu\r\n\r\n", s->host, blen);
  char *msg = s->body + sizeof head - (size_t)hl;
  memcpy(msg, head, (size_t)hl);
  size_t total = (size_t)hl + blen;
  for (size_t off = 0; off < total;) {
    ssize_t n = send(h->fd, msg + off, total - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      snprintf(err, errlen, "send to %s: %s", s->c->url, strerror(errno));
      hclose(h);
      return -1;
    }
    off += (size_t)n;
  }
  h->busy = true, h->tag = tag, h->rlen = 0;
  return 0;
}

/* A complete HTTP reply in h: 1 (status in *code, its body's first bytes in msg), 0: not yet. */
static int http_done(hconn *h, int *code, char *msg, size_t msglen) {
  if (h->rlen < 12) return 0;
  char *end = memmem(h->rb, h->rlen, "\r\n\r\n", 4);
  if (!end) return 0;
  size_t hdr = (size_t)(end + 4 - h->rb), cl = 0;
  for (char *p = h->rb; p < end; p++)
    if ((*p == '\n') && strncasecmp(p + 1, "content-length:", 15) == 0) cl = strtoull(p + 16, NULL, 10);
  if (h->rlen < hdr + cl) return 0;
  *code = atoi(h->rb + 9);
  snprintf(msg, msglen, "HTTP %d: %.*s", *code, (int)(cl < 300 ? cl : 300), h->rb + hdr);
  return 1;
}

void ps_bench_scorer_poll(ps_bench_scorer *s, int wait_ms, ps_bench_score_done done, void *arg) {
  char msg[400];
  if (s->zmq) {
    zmq_pollitem_t it = {.socket = s->sock, .events = ZMQ_POLLIN};
    for (int first = 1; zmq_poll(&it, 1, first ? wait_ms : 0) > 0; first = 0) {
      zmq_msg_t f[3];
      int n = ps_zmq_recv_frames(s->sock, f, 3);
      if (n == 3 && zmq_msg_size(&f[0]) == sizeof(uint32_t)) {
        uint32_t tag;
        memcpy(&tag, zmq_msg_data(&f[0]), sizeof tag);
        const char *r = zmq_msg_data(&f[2]);
        size_t rl = zmq_msg_size(&f[2]);
        bool ok = rl > 4 && memcmp(r, "200\n", 4) == 0;
        snprintf(msg, sizeof msg, "%.*s", (int)(rl < 300 ? rl : 300), r);
        done(arg, tag, ok, msg);
      }
      for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    }
    return;
  }
  struct pollfd p[s->nconns > 0 ? s->nconns : 1];
  int np = 0, idx[s->nconns > 0 ? s->nconns : 1];
  for (int i = 0; i < s->nconns; i++)
    if (s->conns[i].busy) p[np] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN}, idx[np++] = i;
  if (!np || poll(p, (nfds_t)np, wait_ms) <= 0) return;
  for (int k = 0; k < np; k++) {
    if (!p[k].revents) continue;
    hconn *h = &s->conns[idx[k]];
    if (h->rcap - h->rlen < 65536) {
      char *b = realloc(h->rb, h->rcap + 65536);
      if (!b) continue;
      h->rb = b, h->rcap += 65536;
    }
    ssize_t n = recv(h->fd, h->rb + h->rlen, h->rcap - h->rlen, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    int code = 0;
    if (n <= 0) {
      snprintf(msg, sizeof msg, "%s closed the connection: %s", s->c->url, n ? strerror(errno) : "end of file");
      uint32_t tag = h->tag;
      hclose(h);
      done(arg, tag, false, msg);
      continue;
    }
    h->rlen += (size_t)n;
    if (http_done(h, &code, msg, sizeof msg)) {
      h->busy = false, h->rlen = 0;
      done(arg, h->tag, code == 200, msg);
    }
  }
}

void ps_bench_scorer_forget(ps_bench_scorer *s, uint32_t tag) {
  for (int i = 0; i < s->nconns; i++)
    if (s->conns[i].busy && s->conns[i].tag == tag) hclose(&s->conns[i]);
}
