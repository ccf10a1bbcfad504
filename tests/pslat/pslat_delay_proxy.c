/* pslat_delay_proxy: a ZeroMQ proxy that holds every request for a fixed time before passing it
 * to a ps-server: a known service delay in front of a real server, for testing what ps-bench
 * reports (ps-server has no delay option of its own).
 *
 * Clients connect their DEALERs to our ROUTER; each client identity gets its own DEALER to the
 * server, so the server sees the client's frames unchanged (no extra envelope) and replies
 * route back by which DEALER they came in on. Requests wait in one FIFO (a fixed delay keeps
 * arrival order = release order); replies pass through at once. Runs until SIGTERM/SIGINT.
 * Usage: pslat_delay_proxy LISTEN_URL UPSTREAM_URL DELAY_US */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_time.h"

#define MAX_CLIENTS 64
#define MAX_FRAMES 16

typedef struct client {
  char id[256];
  size_t idlen;
  void *dealer;
} client;

typedef struct pending {
  uint64_t release;
  int cl;
  int nf;
  zmq_msg_t f[MAX_FRAMES];
  struct pending *next;
} pending;

static volatile sig_atomic_t g_stop;
static void on_signal(int s) {
  (void)s;
  g_stop = 1;
}

/* Receives the rest of a multipart message into f; returns the frame count or -1. */
static int recv_all(void *sock, zmq_msg_t *f, int max) {
  int n = 0;
  for (;;) {
    if (n == max) return -1;
    zmq_msg_init(&f[n]);
    if (zmq_msg_recv(&f[n], sock, 0) < 0) {
      zmq_msg_close(&f[n]);
      return -1;
    }
    n++;
    if (!zmq_msg_more(&f[n - 1])) return n;
  }
}

static void send_all(void *sock, zmq_msg_t *f, int n) {
  for (int i = 0; i < n; i++) {
    zmq_msg_send(&f[i], sock, i + 1 < n ? ZMQ_SNDMORE : 0);
    zmq_msg_close(&f[i]);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pslat_delay_proxy LISTEN_URL UPSTREAM_URL DELAY_US\n");
    return 2;
  }
  uint64_t delay = strtoull(argv[3], NULL, 10) * 1000ull;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  void *ctx = zmq_ctx_new();
  void *front = zmq_socket(ctx, ZMQ_ROUTER);
  int zero = 0;
  zmq_setsockopt(front, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(front, argv[1]) != 0) {
    fprintf(stderr, "pslat_delay_proxy: cannot bind %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
    return 1;
  }
  printf("proxy listening on %s -> %s, delay %s us\n", argv[1], argv[2], argv[3]);
  fflush(stdout);
  client cl[MAX_CLIENTS];
  int ncl = 0;
  pending *head = NULL, *tail = NULL;
  zmq_pollitem_t items[1 + MAX_CLIENTS];
  while (!g_stop) {
    items[0] = (zmq_pollitem_t){front, 0, ZMQ_POLLIN, 0};
    for (int i = 0; i < ncl; i++) items[1 + i] = (zmq_pollitem_t){cl[i].dealer, 0, ZMQ_POLLIN, 0};
    long timeout = 100;
    uint64_t now = ps_now_ns();
    if (head) timeout = head->release > now ? (long)((head->release - now) / 1000000ull) : 0;
    if (timeout > 100) timeout = 100;
    zmq_poll(items, 1 + ncl, timeout);
    if (items[0].revents & ZMQ_POLLIN) {
      pending *p = calloc(1, sizeof *p);
      zmq_msg_t idm;
      zmq_msg_init(&idm);
      if (!p || zmq_msg_recv(&idm, front, 0) < 0) {
        free(p);
        zmq_msg_close(&idm);
        continue;
      }
      size_t L = zmq_msg_size(&idm);
      int who = -1;
      for (int i = 0; i < ncl; i++)
        if (cl[i].idlen == L && !memcmp(cl[i].id, zmq_msg_data(&idm), L)) who = i;
      if (who < 0 && ncl < MAX_CLIENTS && L <= sizeof cl[0].id) {
        who = ncl++;
        memcpy(cl[who].id, zmq_msg_data(&idm), L);
        cl[who].idlen = L;
        cl[who].dealer = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(cl[who].dealer, ZMQ_LINGER, &zero, sizeof zero);
        zmq_connect(cl[who].dealer, argv[2]);
      }
      int more = zmq_msg_more(&idm);
      zmq_msg_close(&idm);
      p->nf = more ? recv_all(front, p->f, MAX_FRAMES) : 0;
      if (who < 0 || p->nf <= 0) {
        for (int i = 0; i < p->nf; i++) zmq_msg_close(&p->f[i]);
        free(p);
        continue;
      }
      p->cl = who;
      p->release = ps_now_ns() + delay;
      if (tail) tail->next = p;
      else head = p;
      tail = p;
    }
    for (int i = 0; i < ncl; i++) {
      if (!(items[1 + i].revents & ZMQ_POLLIN)) continue;
      zmq_msg_t f[MAX_FRAMES];
      int n = recv_all(cl[i].dealer, f, MAX_FRAMES);
      if (n <= 0) continue;
      zmq_send(front, cl[i].id, cl[i].idlen, ZMQ_SNDMORE);
      send_all(front, f, n);
    }
    now = ps_now_ns();
    while (head && head->release <= now) {
      pending *p = head;
      head = p->next;
      if (!head) tail = NULL;
      send_all(cl[p->cl].dealer, p->f, p->nf);
      free(p);
    }
  }
  while (head) {
    pending *p = head;
    head = p->next;
    for (int i = 0; i < p->nf; i++) zmq_msg_close(&p->f[i]);
    free(p);
  }
  for (int i = 0; i < ncl; i++) zmq_close(cl[i].dealer);
  zmq_close(front);
  zmq_ctx_term(ctx);
  return 0;
}
