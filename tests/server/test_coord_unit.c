/* Unit: the coordinator (server/ps_coord.c) driven in-process through a fake reply interface,
 * no server and no sockets: a barrier of 3 ranks, a superseded barrier request, KV_SET waking
 * a waiting KV_GET, KV_GET of an absent key, timeouts through srv_coord_expire, JOIN's rank
 * assignment (a JOIN or BARRIER with another world is another world's, leaving the job's
 * alone) and the coordinator's statistics, a shutdown drain, and ranks held per connection
 * (a second holder of a rank refused by name, a rank freed when its connection closes). Requests are small
 * integers cast to handles; each reply is recorded with its status and header fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_coord_int.h"
#include "ps_time.h"

typedef struct reply_rec {
  intptr_t req;
  ps_status st;
  int op;
  uint32_t world;
  int32_t rank;
  uint32_t count;
  char blob[64];
  char msg[256]; /* an error's message */
} reply_rec;

typedef struct fake {
  reply_rec r[64];
  size_t n;
} fake;

static void fake_reply(void *ctx, void *req, Ember__Header *rh) {
  fake *f = ctx;
  assert_true(f->n < 64);
  reply_rec *e = &f->r[f->n++];
  memset(e, 0, sizeof *e);
  e->req = (intptr_t)req;
  e->st = (ps_status)rh->status;
  e->op = (int)rh->op;
  e->world = rh->world;
  e->rank = rh->rank;
  e->count = rh->count;
  if (rh->blob.data && rh->blob.len < sizeof e->blob) memcpy(e->blob, rh->blob.data, rh->blob.len);
}

static void fake_error(void *ctx, void *req, ps_status st, const char *msg) {
  fake *f = ctx;
  assert_non_null(msg);
  assert_true(f->n < 64);
  reply_rec *e = &f->r[f->n++];
  memset(e, 0, sizeof *e);
  e->req = (intptr_t)req;
  e->st = st;
  e->op = EMBER__OP__OP_ERROR;
  snprintf(e->msg, sizeof e->msg, "%s", msg);
}

static srv_coord *coord(fake *f) {
  memset(f, 0, sizeof *f);
  srv_coord_reply io = {.ctx = f, .reply = fake_reply, .error = fake_error};
  srv_coord *c = srv_coord_create(&io);
  assert_non_null(c);
  return c;
}

static void *req(intptr_t id) { return (void *)id; }

static Ember__Header hdr(Ember__Op op, const char *name, uint32_t world, uint32_t worker,
                         uint32_t timeout_ms) {
  Ember__Header h;
  ps_wire_header_init(&h, op);
  h.name = (char *)name;
  h.world = world;
  h.worker = worker;
  h.timeout_ms = timeout_ms;
  return h;
}

static void test_barrier_of_three(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  Ember__Header h[3];
  for (uint32_t i = 0; i < 3; i++) h[i] = hdr(EMBER__OP__OP_BARRIER, "epoch", 3, i, 0);
  srv_coord_handle(c, req(10), &h[2]);
  srv_coord_handle(c, req(11), &h[0]);
  assert_int_equal(f.n, 0); /* nobody answered before the last rank arrives */
  ps_server_coord_stats st = {0};
  srv_coord_get_stats(c, &st);
  assert_int_equal(st.barriers_open, 1);
  srv_coord_handle(c, req(12), &h[1]);
  assert_int_equal(f.n, 3);
  intptr_t by_rank[3] = {11, 12, 10};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(f.r[i].req, by_rank[i]);
    assert_int_equal(f.r[i].st, PS_OK);
    assert_int_equal(f.r[i].op, EMBER__OP__OP_BARRIER);
    assert_int_equal(f.r[i].world, 3);
  }
  srv_coord_get_stats(c, &st);
  assert_int_equal(st.barriers_open, 0);
  free(st.ranks);
  srv_coord_destroy(&c);
  assert_null(c);
}

static void test_barrier_superseded(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  Ember__Header a = hdr(EMBER__OP__OP_BARRIER, "b", 2, 0, 0);
  Ember__Header b = a, other = hdr(EMBER__OP__OP_BARRIER, "b", 2, 1, 0);
  srv_coord_handle(c, req(1), &a);
  srv_coord_handle(c, req(2), &b); /* rank 0 again: the older request is refused */
  assert_int_equal(f.n, 1);
  assert_int_equal(f.r[0].req, 1);
  assert_int_equal(f.r[0].st, PS_ERR_CONFLICT);
  Ember__Header wrong = hdr(EMBER__OP__OP_BARRIER, "b", 3, 1, 0);
  srv_coord_handle(c, req(3), &wrong); /* another world under the same name: another barrier */
  assert_int_equal(f.n, 1);
  srv_coord_handle(c, req(4), &other);
  assert_int_equal(f.n, 3);
  assert_int_equal(f.r[1].req, 2);
  assert_int_equal(f.r[1].st, PS_OK);
  assert_int_equal(f.r[2].req, 4);
  assert_int_equal(f.r[2].st, PS_OK);
  /* The other world's barrier still waits; its timeout names the world that waited too. */
  Ember__Header mine = hdr(EMBER__OP__OP_BARRIER, "b", 2, 0, 0);
  srv_coord_handle(c, req(5), &mine);
  srv_coord_expire(c, UINT64_MAX);
  assert_int_equal(f.n, 3); /* no deadlines */
  srv_coord_drain(c);
  assert_int_equal(f.n, 5);
  srv_coord_destroy(&c);
}

static void test_kv(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  Ember__Header get0 = hdr(EMBER__OP__OP_KV_GET, "nccl/uid", 0, 0, 0);
  srv_coord_handle(c, req(1), &get0); /* absent, no wait */
  assert_int_equal(f.n, 1);
  assert_int_equal(f.r[0].st, PS_ERR_NOT_FOUND);
  Ember__Header wait = hdr(EMBER__OP__OP_KV_GET, "nccl/uid", 0, 0, 60000);
  srv_coord_handle(c, req(2), &wait);
  assert_int_equal(f.n, 1); /* parked */
  Ember__Header set = hdr(EMBER__OP__OP_KV_SET, "nccl/uid", 0, 0, 0);
  set.blob.data = (uint8_t *)"abc";
  set.blob.len = 3;
  srv_coord_handle(c, req(3), &set);
  assert_int_equal(f.n, 3);
  assert_int_equal(f.r[1].req, 2); /* the waiter first, with the value */
  assert_int_equal(f.r[1].st, PS_OK);
  assert_int_equal(f.r[1].op, EMBER__OP__OP_KV_GET);
  assert_string_equal(f.r[1].blob, "abc");
  assert_int_equal(f.r[2].req, 3);
  assert_int_equal(f.r[2].op, EMBER__OP__OP_KV_SET);
  srv_coord_handle(c, req(4), &get0);
  assert_int_equal(f.r[3].req, 4);
  assert_string_equal(f.r[3].blob, "abc");
  ps_server_coord_stats st = {0};
  srv_coord_get_stats(c, &st);
  assert_int_equal(st.kv_keys, 1);
  assert_int_equal(st.kv_bytes, 3);
  assert_int_equal(st.kv_waiting, 0);
  free(st.ranks);
  srv_coord_destroy(&c);
}

static void test_timeouts_and_drain(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  assert_int_equal(srv_coord_expire(c, ps_now_ns()), 0); /* nobody waits */
  Ember__Header get = hdr(EMBER__OP__OP_KV_GET, "never", 0, 0, 50);
  Ember__Header bar = hdr(EMBER__OP__OP_BARRIER, "b", 2, 0, 10000);
  Ember__Header forever = hdr(EMBER__OP__OP_KV_GET, "never", 0, 0, 3600000);
  srv_coord_handle(c, req(1), &get);
  srv_coord_handle(c, req(2), &bar);
  srv_coord_handle(c, req(3), &forever);
  uint64_t now = ps_now_ns();
  uint64_t next = srv_coord_expire(c, now);
  assert_true(next > now && next <= now + 50000000ull); /* the KV_GET's 50 ms comes first */
  next = srv_coord_expire(c, now + 20000000000ull); /* 20 s later */
  assert_int_equal(f.n, 2);
  assert_int_equal(f.r[0].req, 1);
  assert_int_equal(f.r[0].st, PS_ERR_TIMEOUT);
  assert_int_equal(f.r[1].req, 2);
  assert_int_equal(f.r[1].st, PS_ERR_TIMEOUT);
  assert_true(next > now + 20000000000ull); /* only the hour-long wait is left */
  Ember__Header bar2 = hdr(EMBER__OP__OP_BARRIER, "c", 2, 1, 0);
  srv_coord_handle(c, req(4), &bar2);
  srv_coord_drain(c);
  assert_int_equal(f.n, 4);
  for (size_t i = 2; i < 4; i++) assert_int_equal(f.r[i].st, PS_ERR_UNAVAILABLE);
  srv_coord_destroy(&c);
}

static void test_join(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  Ember__Header a = hdr(EMBER__OP__OP_JOIN, "w-a", 2, 0, 0);
  a.rank = -1;
  Ember__Header b = a;
  b.name = "w-b";
  srv_coord_handle(c, req(1), &a);
  srv_coord_handle(c, req(2), &b);
  srv_coord_handle(c, req(3), &a); /* re-join under its name: same rank */
  Ember__Header d = a;
  d.name = "w-d";
  srv_coord_handle(c, req(4), &d); /* full */
  Ember__Header w = a;
  w.world = 3;
  srv_coord_handle(c, req(5), &w); /* another world: its own ranks, the job's untouched */
  assert_int_equal(f.n, 5);
  assert_int_equal(f.r[0].rank, 0);
  assert_int_equal(f.r[1].rank, 1);
  assert_int_equal(f.r[1].count, 2);
  assert_int_equal(f.r[2].rank, 0);
  assert_int_equal(f.r[3].st, PS_ERR_CONFLICT);
  assert_int_equal(f.r[4].st, PS_OK);
  assert_int_equal(f.r[4].world, 3);
  assert_int_equal(f.r[4].rank, 0);
  assert_int_equal(f.r[4].count, 1);
  ps_server_coord_stats st = {0};
  srv_coord_get_stats(c, &st); /* the world with the most members */
  assert_int_equal(st.world, 2);
  assert_int_equal(st.members, 2);
  assert_int_equal(st.joins, 4);
  assert_int_equal(st.nranks, 2);
  assert_string_equal(st.ranks[0].name, "w-a");
  assert_string_equal(st.ranks[1].name, "w-b");
  srv_coord_get_stats(c, &st); /* refilled in place */
  assert_int_equal(st.nranks, 2);
  for (size_t i = 0; i < st.nranks; i++) free(st.ranks[i].name);
  free(st.ranks);
  srv_coord_destroy(&c);
}

static srv_coord_peer peer(uint64_t conn, int fd, const char *addr) {
  srv_coord_peer p = {.conn = conn, .fd = fd};
  snprintf(p.addr, sizeof p.addr, "%s", addr);
  return p;
}

static Ember__Header join_hdr(const char *name, uint32_t world, int rank) {
  Ember__Header h = hdr(EMBER__OP__OP_JOIN, name, world, 0, 0);
  h.rank = rank;
  return h;
}

/* Two workers asking for the same rank from two connections: the second is told who has it,
 * at JOIN and at a BARRIER; the holder itself may join again. */
static void test_rank_taken(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  srv_coord_peer pa = peer(1, 10, "10.0.0.1"), pb = peer(2, 11, "10.0.0.2");
  Ember__Header j = join_hdr("", 2, 1);
  srv_coord_handle_from(c, req(1), &j, &pa);
  srv_coord_handle_from(c, req(2), &j, &pb);
  srv_coord_handle_from(c, req(3), &j, &pa); /* the holder again: fine */
  Ember__Header b = hdr(EMBER__OP__OP_BARRIER, "start", 2, 1, 0);
  srv_coord_handle_from(c, req(4), &b, &pb);
  assert_int_equal(f.n, 4);
  assert_int_equal(f.r[0].st, PS_OK);
  assert_int_equal(f.r[0].rank, 1);
  assert_int_equal(f.r[1].st, PS_ERR_CONFLICT);
  assert_non_null(strstr(f.r[1].msg, "rank 1 is already taken by a worker at 10.0.0.1"));
  assert_int_equal(f.r[2].st, PS_OK);
  assert_int_equal(f.r[3].st, PS_ERR_CONFLICT);
  assert_non_null(strstr(f.r[3].msg, "rank 1 is already taken by a worker at 10.0.0.1"));
  /* A named holder is named. */
  Ember__Header n = join_hdr("host/42", 2, -1);
  srv_coord_handle_from(c, req(5), &n, &pa);
  j.rank = 0;
  srv_coord_handle_from(c, req(6), &j, &pb);
  assert_int_equal(f.r[4].rank, 0);
  assert_non_null(strstr(f.r[5].msg, "rank 0 is already taken by worker 'host/42' at 10.0.0.1"));
  srv_coord_destroy(&c);
}

/* A worker that joined and went away (its connection closed) leaves its rank free, its barrier
 * wait dropped, and with nobody left the world is forgotten; a late disconnect event of an fd
 * that a new connection already reuses does not release the new holder. */
static void test_rank_released(void **state) {
  (void)state;
  fake f;
  srv_coord *c = coord(&f);
  srv_coord_peer pa = peer(1, 10, "10.0.0.1"), pb = peer(2, 11, "10.0.0.2");
  Ember__Header j = join_hdr("host/1", 1, -1), k = join_hdr("host/2", 1, -1);
  srv_coord_handle_from(c, req(1), &j, &pa);
  srv_coord_handle_from(c, req(2), &k, &pb);
  assert_int_equal(f.r[1].st, PS_ERR_CONFLICT); /* all 1 ranks are taken */
  Ember__Header b = hdr(EMBER__OP__OP_BARRIER, "x", 2, 0, 0);
  srv_coord_handle_from(c, req(3), &b, &pa); /* parked */
  assert_int_equal(f.n, 2);
  srv_coord_peer_gone(c, 10);
  assert_int_equal(f.n, 3); /* the parked barrier of the closed connection is dropped */
  assert_int_equal(f.r[2].req, 3);
  assert_int_equal(f.r[2].st, PS_ERR_UNAVAILABLE);
  srv_coord_handle_from(c, req(4), &k, &pb);
  assert_int_equal(f.r[3].st, PS_OK);
  assert_int_equal(f.r[3].rank, 0);
  srv_coord_peer_gone(c, 11);
  Ember__Header w = k;
  w.world = 3; /* nobody left: another world is fine */
  srv_coord_handle_from(c, req(5), &w, &pb);
  assert_int_equal(f.r[4].st, PS_OK);
  /* pb's fd 11 comes back under a new connection before pb's disconnect event is read: pb is
   * gone, so its rank 0 goes to the new one, and the late event does not release it. */
  w.rank = 0;
  w.name = "";
  srv_coord_peer pc = peer(3, 11, "10.0.0.3"), pd = peer(4, 12, "10.0.0.4");
  srv_coord_handle_from(c, req(6), &w, &pc);
  assert_int_equal(f.r[5].st, PS_OK);
  assert_int_equal(f.r[5].rank, 0);
  srv_coord_peer_gone(c, 11);
  srv_coord_handle_from(c, req(7), &w, &pd);
  assert_int_equal(f.r[6].st, PS_ERR_CONFLICT);
  assert_non_null(strstr(f.r[6].msg, "rank 0 is already taken by a worker at 10.0.0.3"));
  srv_coord_destroy(&c);
}

PS_TEST_MAIN("coord_unit", NULL, NULL,
  cmocka_unit_test(test_barrier_of_three),
  cmocka_unit_test(test_barrier_superseded),
  cmocka_unit_test(test_kv),
  cmocka_unit_test(test_timeouts_and_drain),
  cmocka_unit_test(test_join),
  cmocka_unit_test(test_rank_taken),
  cmocka_unit_test(test_rank_released))
