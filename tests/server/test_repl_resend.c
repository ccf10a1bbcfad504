/* Integration (client side of replicated shards, issue 23): a client that leaves a replica
 * re-sends EVERY request outstanding on it, not only the one whose answer made it leave.
 *
 * Two fake replicas of one shard (ZeroMQ ROUTER sockets in a thread of this test, so that what
 * they answer is exact, with no timing to win): replica 0 answers the DECLARE, takes N pushes
 * in flight, refuses the first one as "not the primary, replica 1 is" and never answers the
 * other N - 1; replica 1 answers whatever comes. The client leaves replica 0 on that refusal
 * and its connection with it (zmq_disconnect drops whatever that replica would still send):
 * every one of the N pushes must reach replica 1, marked retry, and succeed well within the
 * request bound. Before the fix only the refused push was re-sent and the other N - 1 waited
 * out their whole bound on a replica the client had left: the run where ps-bench's pushes
 * all timed out after a primary's kill -9 (a backup's held pushes refused in a batch before
 * its promotion). Every wait is bounded (the client's timeout; the fake stops on a flag). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"
#include <zmq.h>

#include "ember.pb-c.h"
#include "ps_client.h"
#include "ps_time.h"
#include "ps_wire.h"
#include "pt_cluster.h"

#define N 40u
#define DIM 4
#define TIMEOUT_MS 4000

typedef struct fake {
  void *ctx, *sock[2];
  int port[2];
  volatile int stop;
  unsigned pushes[2], retries[2];
  int refused;
} fake;

/* Answers the request in frames (routing id first) on replica r's socket: a plain ack of
 * its op, or with status/primary a refusal naming replica primary (0-based). */
static void answer(void *sock, zmq_msg_t *id, const Ember__Header *q, int status,
                   uint32_t primary) {
  Ember__Header h;
  ps_wire_header_init(&h, status ? EMBER__OP__OP_ERROR : q->op);
  h.is_reply = true;
  h.request_id = q->request_id;
  h.table_id = q->table_id;
  h.status = status;
  if (status) {
    h.message = "not the primary (fake)";
    h.repl_primary = primary + 1;
  }
  size_t n;
  uint8_t *b = ps_wire_header_pack(&h, &n);
  zmq_send(sock, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
  zmq_send(sock, b, n, 0);
  free(b);
}

static void *fake_main(void *arg) {
  fake *f = arg;
  zmq_msg_t held_id;
  Ember__Header *held = NULL;
  zmq_msg_init(&held_id);
  while (!f->stop) {
    zmq_pollitem_t it[2] = {{f->sock[0], 0, ZMQ_POLLIN, 0}, {f->sock[1], 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(it, 2, 20) <= 0) continue;
    for (int r = 0; r < 2; r++) {
      if (!(it[r].revents & ZMQ_POLLIN)) continue;
      zmq_msg_t fr[PS_WIRE_MAX_FRAMES + 1];
      int nfr = 0, more = 1;
      while (more && nfr < (int)PS_WIRE_MAX_FRAMES + 1) {
        zmq_msg_init(&fr[nfr]);
        if (zmq_msg_recv(&fr[nfr], f->sock[r], 0) < 0) break;
        more = zmq_msg_more(&fr[nfr++]);
      }
      if (nfr >= 2) {
        ps_frame hf = {zmq_msg_data(&fr[1]), zmq_msg_size(&fr[1])};
        Ember__Header *q = ps_wire_header_unpack(&hf);
        if (q && q->op == EMBER__OP__OP_PUSH) {
          f->pushes[r]++;
          f->retries[r] += q->retry;
        }
        if (q && r == 0 && q->op == EMBER__OP__OP_PUSH) {
          /* The first push is held until all N came, then refused; the rest stay unanswered. */
          if (!held) {
            held = q;
            q = NULL;
            zmq_msg_copy(&held_id, &fr[0]);
          }
          if (f->pushes[0] == N && held && !f->refused) {
            answer(f->sock[0], &held_id, held, PS_ERR_UNAVAILABLE, 1);
            f->refused = 1;
          }
        } else if (q) {
          answer(f->sock[r], &fr[0], q, 0, 0);
        }
        if (q) ember__header__free_unpacked(q, NULL);
      }
      for (int i = 0; i < nfr; i++) zmq_msg_close(&fr[i]);
    }
  }
  if (held) ember__header__free_unpacked(held, NULL);
  zmq_msg_close(&held_id);
  return NULL;
}

static void test_every_outstanding_push_resent(void **st) {
  (void)st;
  fake f = {0};
  f.ctx = zmq_ctx_new();
  char urls[128], ep[64];
  for (int r = 0; r < 2; r++) {
    f.sock[r] = zmq_socket(f.ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(f.sock[r], ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_bind(f.sock[r], "tcp://127.0.0.1:*"), 0);
    size_t n = sizeof ep;
    zmq_getsockopt(f.sock[r], ZMQ_LAST_ENDPOINT, ep, &n);
    f.port[r] = atoi(strrchr(ep, ':') + 1);
  }
  snprintf(urls, sizeof urls, "tcp://127.0.0.1:%d|tcp://127.0.0.1:%d", f.port[0], f.port[1]);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);

  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = TIMEOUT_MS;
  ps_client *c = NULL;
  ps_error e;
  if (ps_client_create_list(urls, &o, &c, &e) != PS_OK) fail_msg("client: %s", e.msg);
  ps_table_spec t = pt_adagrad_spec(1, "t", DIM, 0.1, 1e-8, 0.1, PS_CONS_ASYNC, 1);
  if (ps_client_declare(c, &t, &e) != PS_OK) fail_msg("declare: %s", e.msg);

  uint64_t keys[2] = {7, 11};
  float g[2 * DIM] = {0};
  ps_client_req *rq[N];
  for (unsigned i = 0; i < N; i++)
    if (ps_client_push_start(c, 1, 0, keys, 2, false, g, &rq[i], &e) != PS_OK)
      fail_msg("push_start %u: %s", i, e.msg);
  const uint64_t t0 = ps_now_ns();
  int failed = 0;
  for (unsigned i = 0; i < N; i++)
    if (ps_client_wait(c, &rq[i], &e) != PS_OK && failed++ == 0)
      print_message("push %u: %s\n", i, e.msg);
  const uint64_t ms = (ps_now_ns() - t0) / 1000000ull;
  uint64_t fo = 0, last = 0;
  ps_client_failovers(c, &fo, &last);
  ps_client_destroy(&c);
  f.stop = 1;
  pthread_join(th, NULL);
  for (int r = 0; r < 2; r++) zmq_close(f.sock[r]);
  zmq_ctx_term(f.ctx);

  print_message("replica 0 took %u pushes, replica 1 %u (%u marked retry); %d failed; %llu ms\n",
                f.pushes[0], f.pushes[1], f.retries[1], failed, (unsigned long long)ms);
  assert_int_equal(f.refused, 1);
  assert_int_equal(failed, 0);             /* before the fix: N - 1 timed out */
  assert_int_equal(f.pushes[1], N);        /* every one re-sent to replica 1 ... */
  assert_int_equal(f.retries[1], N);       /* ... marked retry (applied once there) */
  assert_true(ms < TIMEOUT_MS / 2);        /* none waited for its bound */
  assert_int_equal(fo, 1);
}

PS_TEST_MAIN("repl_resend", NULL, NULL,
  cmocka_unit_test(test_every_outstanding_push_resent))
