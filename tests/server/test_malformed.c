/* Robustness: >= 10,000 malformed multipart messages to a live ps-server (random frames,
 * truncated headers, huge counts, wrong versions, unknown ops, tables and checkpoint phases,
 * frame-count and size mismatches, bad table specs, bad coordinator requests, replies sent as
 * requests, keys of another shard). The server must keep running (the test is also run on the ASan build), count
 * what it could not decode, and then answer a valid pull and push correctly. A message of 4
 * frames whose header parses gets an error reply naming its request id, a push with a NaN
 * or infinite gradient is refused without touching the rows, and a push whose keys_unique
 * flag lies is applied as the sum of its duplicate keys. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <zmq.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ember.pb-c.h"
#include "ps_client.h"
#include "ps_hash.h"
#include "ps_store.h"
#include "ps_wire.h"
#include "pt_cluster.h"

static uint64_t g_x = 12345;
static uint64_t rnd(void) { return g_x = ps_mix64(g_x); }

static void send_frames(void *sock, uint8_t **f, size_t *len, int n) {
  for (int i = 0; i < n; i++) zmq_send(sock, f[i], len[i], i + 1 < n ? ZMQ_SNDMORE : 0);
}

static size_t pack(Ember__Header *h, uint8_t *buf) {
  return ember__header__pack(h, buf);
}

static int drain(void *sock) {
  int n = 0;
  zmq_msg_t m;
  zmq_msg_init(&m);
  while (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) >= 0) {
    if (!zmq_msg_more(&m)) n++;
  }
  zmq_msg_close(&m);
  return n;
}

/* One malformed (or hostile-but-well-formed) message of kind `kind`. */
static void one(void *sock, int kind) {
  static uint8_t hb[4096], kb[8192], vb[65536];
  uint8_t *f[6] = {hb, kb, vb, vb, vb, vb};
  size_t len[6] = {0};
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PULL);
  h.request_id = rnd();
  h.table_id = 1;
  h.count = 4;
  Ember__TableSpec sp;
  ember__table_spec__init(&sp);
  for (size_t i = 0; i < sizeof kb; i++) kb[i] = (uint8_t)rnd();
  switch (kind) {
    case 0: { /* random frames */
      int n = 1 + (int)(rnd() % 5);
      for (int i = 0; i < n; i++) {
        len[i] = rnd() % 200;
        for (size_t j = 0; j < len[i]; j++) f[i][j] = (uint8_t)rnd();
      }
      send_frames(sock, f, len, n);
      return;
    }
    case 1: { /* truncated header */
      size_t n = pack(&h, hb);
      len[0] = 1 + rnd() % (n - 1);
      len[1] = 32;
      send_frames(sock, f, len, 2);
      return;
    }
    case 2: /* huge counts */
      h.count = (rnd() & 1) ? ((uint64_t)1 << 40) : PS_WIRE_MAX_KEYS;
      len[1] = 64;
      break;
    case 3: /* wrong versions */
      h.version = (uint32_t)(rnd() % 3 == 0 ? 0 : 2 + rnd() % 1000);
      len[1] = 32;
      break;
    case 4: /* unknown tables */
      h.table_id = (uint32_t)((rnd() & 1) ? 9999 : 70000 + rnd() % 1000);
      len[1] = 32;
      break;
    case 5: /* unknown ops, ERROR as a request, unknown checkpoint phases, a phase elsewhere */
      if (rnd() % 3 == 0) {
        bool ck = rnd() & 1;
        h.op = ck ? EMBER__OP__OP_CHECKPOINT : EMBER__OP__OP_RESTORE;
        h.ckpt_phase = (Ember__CkptPhase)(ck ? 4 + rnd() % 100 : 1 + rnd() % 3);
        h.count = 0;
      } else {
        h.op = (Ember__Op)((rnd() & 1) ? 99 + rnd() % 100 : (rnd() & 1) ? 7 : 0);
      }
      break;
    case 6: /* frame count / size mismatches */
      if (rnd() & 1) {
        len[1] = 33; /* not count * 8 */
      } else {
        h.op = EMBER__OP__OP_PUSH;
        h.dim = 8;
        len[1] = 32;
        len[2] = 4 * 8 * 4 - 4;
      }
      break;
    case 7: { /* bad table specs */
      h.op = EMBER__OP__OP_DECLARE;
      h.count = 0;
      h.table = &sp;
      uint32_t r = (uint32_t)(rnd() % 6);
      sp.id = r == 0 ? 0 : 2 + (uint32_t)(rnd() % 5);
      sp.dim = r == 1 ? 0 : r == 2 ? 5000 : 8;
      sp.name = r == 3 ? "" : "bad";
      sp.consistency = (Ember__Consistency)(r == 4 ? 9 : 0);
      sp.num_workers = r == 5 ? 100000000u : 1;
      sp.optimizer = (Ember__Optimizer)(rnd() % 7);
      break;
    }
    case 8: /* pulls/pushes that decode but are wrong for the table */
      if (rnd() & 1) {
        h.dim = 3; /* table has 8 */
        len[1] = 32;
      } else {
        h.op = EMBER__OP__OP_PUSH;
        h.dim = (rnd() & 1) ? 3 : 8;
        h.value_type = (rnd() & 1) ? EMBER__VALUE_TYPE__VT_F16 : (Ember__ValueType)7;
        len[1] = 32;
        len[2] = 4 * h.dim * (h.value_type == EMBER__VALUE_TYPE__VT_F16 ? 2 : 4);
      }
      break;
    case 9: /* steps and coordinator requests out of range */
      h.count = 0;
      switch (rnd() % 6) {
        case 0: h.op = EMBER__OP__OP_STEP; h.table_id = 2; h.worker = 1000; break;
        case 1: h.op = EMBER__OP__OP_JOIN; h.world = (rnd() & 1) ? 0 : 1u << 30; break;
        case 2: h.op = EMBER__OP__OP_JOIN; h.world = 4; h.rank = 77; break;
        case 3: h.op = EMBER__OP__OP_BARRIER; h.name = ""; h.world = 2; break;
        case 4: h.op = EMBER__OP__OP_BARRIER; h.name = "b"; h.world = 2; h.worker = 9; break;
        default: h.op = EMBER__OP__OP_KV_GET; h.name = ""; break;
      }
      break;
    case 10: /* a reply sent to a server */
      h.is_reply = true;
      h.op = EMBER__OP__OP_PULL;
      h.dim = 8;
      len[1] = 4 * 8 * 4;
      f[1] = vb;
      break;
    default: { /* keys of the other shard, in an otherwise valid pull */
      h.count = 4;
      uint64_t *k = (uint64_t *)kb;
      for (int i = 0; i < 4; i++) {
        do k[i] = rnd();
        while (ps_shard_of(k[i], 2) != 1);
      }
      len[1] = 32;
      break;
    }
  }
  len[0] = pack(&h, hb);
  int nf = len[2] ? 3 : len[1] ? 2 : 1;
  send_frames(sock, f, len, nf);
}

static void test_malformed(void **state) {
  (void)state;
  char dir[512], d0[600];
  pt_server s;
  assert_true(pt_start_s0(&s, "malformed", dir, d0, 2, 2));
  /* A real table 1 (async) and a sync table 2, declared by a well-behaved client. */
  const char *urls[1] = {s.url};
  ps_client *c = NULL;
  assert_int_equal(ps_client_create(urls, 1, NULL, &c, NULL), PS_OK);
  ps_table_spec t;
  ps_table_spec_default(&t, 1, "good", 8);
  t.seed = 9;
  t.lr = 0.5f;
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  ps_table_spec t2;
  ps_table_spec_default(&t2, 2, "sync", 8);
  t2.consistency = PS_CONS_SYNC;
  t2.num_workers = 2;
  assert_int_equal(ps_client_declare(c, &t2, NULL), PS_OK);

  void *ctx = zmq_ctx_new();
  void *sock = zmq_socket(ctx, ZMQ_DEALER);
  int zero = 0, hwm = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
  assert_int_equal(zmq_connect(sock, s.url), 0);
  enum { TOTAL = 12000, KINDS = 12 };
  int replies = 0;
  for (int i = 0; i < TOTAL; i++) {
    one(sock, i % KINDS);
    if ((i & 255) == 255) replies += drain(sock);
  }
  /* Every message is answered or dropped; wait (bounded) for the server to get through them. */
  char *js = NULL;
  long last = -1;
  for (int tries = 0; tries < 100; tries++) {
    replies += drain(sock);
    int st;
    assert_int_not_equal(waitpid(s.pid, &st, WNOHANG), s.pid); /* still running */
    free(js);
    js = NULL;
    assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
    const char *m = strstr(js, "\"malformed\":");
    assert_non_null(m);
    long mal = strtol(m + 12, NULL, 10);
    /* Kinds 0-6 and 10 cannot be decoded; done once the count stops moving (a table's first
     * use, which creates it in the store, can stall the storm for a moment). */
    if (mal >= TOTAL / KINDS * 6 && mal == last) break;
    last = mal;
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  const char *m = strstr(js, "\"malformed\":");
  long mal = strtol(m + 12, NULL, 10);
  printf("malformed counted: %ld, replies seen: %d\n", mal, replies);
  assert_true(mal >= TOTAL / KINDS * 6);
  free(js);

  /* Four frames, the first a good header: answered PS_ERR_PROTO under its request id. */
  drain(sock);
  Ember__Header h4;
  ps_wire_header_init(&h4, EMBER__OP__OP_PING);
  h4.request_id = 4242;
  static uint8_t hb4[256], junk[8];
  uint8_t *f4[4] = {hb4, junk, junk, junk};
  size_t l4[4] = {pack(&h4, hb4), 8, 8, 8};
  send_frames(sock, f4, l4, 4);
  zmq_pollitem_t pi = {.socket = sock, .events = ZMQ_POLLIN};
  zmq_msg_t rep;
  zmq_msg_init(&rep);
  Ember__Header *rh = NULL;
  /* late replies of the storm first: as many as it had messages (a loaded machine, the ASan
   * build, answers the storm long after it was sent) */
  for (int tries = 0; tries < TOTAL + 100 && !rh; tries++) {
    assert_int_equal(zmq_poll(&pi, 1, 5000), 1);
    assert_true(zmq_msg_recv(&rep, sock, 0) >= 0);
    if (zmq_msg_more(&rep)) continue; /* only single-frame replies (errors) matter */
    rh = ember__header__unpack(NULL, zmq_msg_size(&rep), zmq_msg_data(&rep));
    if (rh && rh->request_id != 4242) {
      ember__header__free_unpacked(rh, NULL);
      rh = NULL;
    }
  }
  assert_non_null(rh);
  assert_int_equal(rh->status, PS_ERR_PROTO);
  assert_non_null(strstr(rh->message, "4 frames"));
  ember__header__free_unpacked(rh, NULL);
  zmq_msg_close(&rep);
  zmq_close(sock);
  zmq_ctx_term(ctx);

  /* The server still answers a valid pull correctly, and applies a valid push. */
  ps_table_spec sp;
  memset(&sp, 0, sizeof sp);
  sp.id = 1;
  snprintf(sp.name, sizeof sp.name, "good");
  sp.dim = 8;
  sp.lr = 0.5f;
  sp.init_a = t.init_a;
  sp.init_b = t.init_b;
  sp.seed = 9;
  uint64_t keys[16];
  int n = 0;
  for (uint64_t k = 1; n < 16; k++)
    if (ps_shard_of(k, 2) == 0) keys[n++] = k;
  float got[16 * 8], want[16 * 8], g[16 * 8];
  /* The client believes it talks to one shard; all keys are shard 0's. */
  assert_int_equal(ps_client_pull(c, 1, 0, keys, 16, got, NULL), PS_OK);
  for (int i = 0; i < 16; i++) ps_store_init_row(&sp, keys[i], want + i * 8);
  assert_memory_equal(got, want, sizeof got);
  for (int i = 0; i < 16 * 8; i++) g[i] = 1.0f;
  assert_int_equal(ps_client_push(c, 1, 0, keys, 16, g, NULL), PS_OK);
  assert_int_equal(ps_client_pull(c, 1, 0, keys, 16, got, NULL), PS_OK);
  for (int i = 0; i < 16 * 8; i++) assert_true(fabsf(got[i] - (want[i] - 0.5f)) < 1e-6f);
  /* A NaN, then an infinite gradient: refused, naming the key, and no row changes. */
  float before[16 * 8];
  memcpy(before, got, sizeof before);
  for (int bad = 0; bad < 2; bad++) {
    g[3 * 8 + 2] = bad ? INFINITY : NAN;
    ps_error e;
    assert_int_equal(ps_client_push(c, 1, 0, keys, 16, g, &e), PS_ERR_INVALID);
    char want_msg[128];
    /* The element and what it is (issue 36: "(value 2)" was the element's index). */
    snprintf(want_msg, sizeof want_msg, "gradient of key %llu is not finite (element 2 of 8 is "
             "%s)", (unsigned long long)keys[3], bad ? "+inf" : "NaN");
    printf("%s\n", e.msg);
    assert_non_null(strstr(e.msg, want_msg));
  }
  assert_int_equal(ps_client_pull(c, 1, 0, keys, 16, got, NULL), PS_OK);
  assert_memory_equal(got, before, sizeof got);
  /* keys_unique that lies (ps_client_push_unique sends the caller's keys as they are, flagged
   * unique): a key twice is still one Adagrad step of its summed gradient, never two steps,
   * as a never-stored key (the first push) and as a stored one (the second). By hand, in
   * double, from the keys' initial rows. */
  ps_table_spec ta;
  ps_table_spec_default(&ta, 3, "adagrad", 8);
  ta.optimizer = PS_OPT_ADAGRAD;
  ta.lr = 0.1f;
  ta.initial_accumulator = 0.1f;
  assert_int_equal(ps_client_declare(c, &ta, NULL), PS_OK);
  const uint64_t lk[3] = {keys[0], keys[1], keys[0]}, lk2[2] = {keys[1], keys[1]};
  float lg[3 * 8], w0[2 * 8], lw[2 * 8];
  for (int i = 0; i < 3 * 8; i++) lg[i] = 0.25f * (float)(1 + i % 5);
  assert_int_equal(ps_client_pull(c, 3, 0, keys, 2, w0, NULL), PS_OK);
  assert_int_equal(ps_client_push_unique(c, 3, 0, lk, 3, lg, NULL), PS_OK);
  assert_int_equal(ps_client_push_unique(c, 3, 0, lk2, 2, lg, NULL), PS_OK);
  assert_int_equal(ps_client_pull(c, 3, 0, keys, 2, lw, NULL), PS_OK);
  for (int j = 0; j < 8; j++) {
    double acc = 0.1, w = w0[j], gs = (double)lg[j] + lg[16 + j]; /* key 0: one step of the sum */
    acc += gs * gs;
    w -= 0.1 * gs / (sqrt(acc) + ta.eps);
    assert_true(fabs(w - lw[j]) < 1e-6);
    acc = 0.1, w = w0[8 + j], gs = lg[8 + j]; /* key 1: its own step, then one of the sum */
    acc += gs * gs;
    w -= 0.1 * gs / (sqrt(acc) + ta.eps);
    gs = (double)lg[j] + lg[8 + j];
    acc += gs * gs;
    w -= 0.1 * gs / (sqrt(acc) + ta.eps);
    assert_true(fabs(w - lw[8 + j]) < 1e-6);
  }
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 20000), 0);
  pt_rmrf(dir);
}

PS_TEST_MAIN("malformed", NULL, NULL,
  cmocka_unit_test(test_malformed))
