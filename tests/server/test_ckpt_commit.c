/* Integration: checkpoints are a two-phase commit across shards, so a crash never brings
 * shards back at different steps. 2 servers, a committed checkpoint at step 1, newer rows,
 * then:
 *  - crash between the phases: both shards prepared step 2, no commit (the driver died),
 *    kill -9 of both, restart: both serve step 1's rows, the staging is gone, and a late
 *    commit is refused;
 *  - a shard that never acks its prepare (SIGSTOP): ps_client_checkpoint fails and aborts,
 *    kill -9 of both, restart: both serve step 1's rows (before two-phase commit, shard 0 had
 *    recorded step 2 and came back there while shard 1 came back at step 1);
 *  - the normal path: a second committed checkpoint (step 3) is the one restored after
 *    kill -9 of both, and repeating its commit is harmless;
 *  - a sender that predates phases: CHECKPOINT without one is prepared and committed at once;
 *  - a PREPARE of a far-future step (it waits for that step's pushes) from a connection that
 *    then closes: later checkpoints and restores are answered (they used to wait behind it
 *    until a restart, so a --resume hung). */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_client.h"
#include "ps_hash.h"
#include "ps_wire.h"
#include "pt_cluster.h"

#define DIM 8
#define N 200
#define TAB 3

typedef struct fixture {
  char dir[512];
  pt_server s[2];
  ps_client *c;
  uint64_t k[N];
  float g[N * DIM];
  float at_ck1[N * DIM]; /* the rows of the committed checkpoint at step 1 */
} fixture;

/* Two shards, a table, pushes, a committed checkpoint "ck1" at step 1, then newer rows. */
static void setup(fixture *f, const char *tag) {
  memset(f, 0, sizeof *f);
  assert_true(pt_start_all(f->s, 2, tag, f->dir, 2));
  f->c = pt_client(f->s, 2, 0, 20000);
  assert_non_null(f->c);
  ps_table_spec t;
  ps_table_spec_default(&t, TAB, "emb", DIM);
  t.lr = 0.1f;
  assert_int_equal(ps_client_declare(f->c, &t, NULL), PS_OK);
  int on1 = 0;
  for (int i = 0; i < N; i++) {
    f->k[i] = 9000 + (uint64_t)i * 17;
    on1 += ps_shard_of(f->k[i], 2) == 1;
  }
  assert_true(on1 > 20 && on1 < N - 20);
  for (int i = 0; i < N * DIM; i++) f->g[i] = 0.3f + (float)(i % 11) * 0.1f;
  assert_int_equal(ps_client_push(f->c, TAB, 0, f->k, N, f->g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint(f->c, 1, "ck1", NULL), PS_OK);
  assert_int_equal(ps_client_pull(f->c, TAB, 1, f->k, N, f->at_ck1, NULL), PS_OK);
  assert_int_equal(ps_client_push(f->c, TAB, 1, f->k, N, f->g, NULL), PS_OK);
  float now[N * DIM];
  assert_int_equal(ps_client_pull(f->c, TAB, 2, f->k, N, now, NULL), PS_OK);
  assert_true(fabsf(now[0] - f->at_ck1[0]) > 1e-3f);
}

/* A graceful stop must exit 0: on the ASan build that includes no leaks in what the
 * checkpoint phases did in this process. */
static void teardown(fixture *f) {
  ps_client_destroy(&f->c);
  for (int i = 0; i < 2; i++) assert_int_equal(pt_stop(&f->s[i], SIGTERM, 20000), 0);
  pt_stop_all(f->s, 2, f->dir);
}

/* kill -9 of every shard, then a restart of each on its data dir and port. */
static void crash_and_restart(fixture *f) {
  for (int i = 0; i < 2; i++) assert_int_equal(pt_stop(&f->s[i], SIGKILL, 5000), 128 + SIGKILL);
  for (int i = 0; i < 2; i++) {
    char d[sizeof f->s[i].dir];
    memcpy(d, f->s[i].dir, sizeof d); /* pt_start rewrites s->dir from its argument */
    assert_true(pt_start(&f->s[i], i, 2, d, f->s[i].port, 2));
  }
}

/* Every key, on both shards, reads exactly `want`; names the first key that does not. */
static void assert_rows(fixture *f, uint64_t step, const float *want) {
  float got[N * DIM];
  assert_int_equal(ps_client_pull(f->c, TAB, step, f->k, N, got, NULL), PS_OK);
  for (int i = 0; i < N; i++)
    for (int d = 0; d < DIM; d++)
      if (fabsf(got[i * DIM + d] - want[i * DIM + d]) > 1e-6f)
        fail_msg("key %llu (shard %u) reads %g, want %g", (unsigned long long)f->k[i],
                 ps_shard_of(f->k[i], 2), got[i * DIM + d], want[i * DIM + d]);
}

/* Whether shard i has ROOT/shard-I<suffix> under its data dir (ROOT = data-dir relative). */
static bool has_file(fixture *f, int i, const char *root, const char *suffix) {
  char p[1200];
  snprintf(p, sizeof p, "%s/%s/shard-%d%s", f->s[i].dir, root, i, suffix);
  return access(p, F_OK) == 0;
}

static bool stats_has(fixture *f, int i, const char *needle) {
  char *js = NULL;
  assert_int_equal(ps_client_stats(f->c, (size_t)i, &js, NULL), PS_OK);
  bool has = strstr(js, needle) != NULL;
  free(js);
  return has;
}

/* Whether shard i's STATS names DATA_DIR/root at `step` as its last checkpoint. */
static bool last_ckpt_is(fixture *f, int i, const char *root, uint64_t step) {
  char want[1400];
  snprintf(want, sizeof want, "\"last_checkpoint\":{\"path\":\"%s/%s\",\"step\":%llu}",
           f->s[i].dir, root, (unsigned long long)step);
  return stats_has(f, i, want);
}

/* On both shards: ck2 is prepared (its staging there, recorded as prepared) or not at all, and
 * ck1 is still the last checkpoint. */
static void assert_ck2_prepared(fixture *f, bool prepared) {
  for (int i = 0; i < 2; i++) {
    assert_int_equal(has_file(f, i, "ck2", ".staging"), prepared);
    assert_int_equal(has_file(f, i, "ck2", ".staging.json"), prepared);
    assert_false(has_file(f, i, "ck2", ""));
    assert_int_equal(stats_has(f, i, "\"prepared_checkpoint\":{"), prepared);
    assert_true(last_ckpt_is(f, i, "ck1", 1));
  }
}

static void test_crash_between_phases(void **state) {
  (void)state;
  fixture f;
  setup(&f, "ckpt-2pc");
  assert_int_equal(ps_client_checkpoint_phase(f.c, PS_CKPT_PREPARE, 2, "ck2", NULL), PS_OK);
  assert_ck2_prepared(&f, true);
  /* The driver dies here: no commit, no abort. */
  crash_and_restart(&f);
  assert_rows(&f, 1, f.at_ck1);
  assert_ck2_prepared(&f, false);
  /* Nothing is left to commit; an abort of nothing is fine. */
  ps_error e;
  assert_int_equal(ps_client_checkpoint_phase(f.c, PS_CKPT_COMMIT, 2, "ck2", &e),
                   PS_ERR_NOT_FOUND);
  assert_non_null(strstr(e.msg, "no prepared checkpoint"));
  assert_int_equal(ps_client_checkpoint_phase(f.c, PS_CKPT_ABORT, 2, "ck2", NULL), PS_OK);
  /* The same step and path can be checkpointed again, all the way. */
  assert_int_equal(ps_client_checkpoint(f.c, 2, "ck2", NULL), PS_OK);
  for (int i = 0; i < 2; i++) assert_true(has_file(&f, i, "ck2", ".json"));
  teardown(&f);
}

static void test_prepare_not_acked(void **state) {
  (void)state;
  fixture f;
  setup(&f, "ckpt-stop");
  /* Shard 1 hangs: its prepare never answers, shard 0's does. */
  const char *urls[2] = {f.s[0].url, f.s[1].url};
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 1500;
  o.ckpt_timeout_ms = 1500;
  ps_client *c2 = NULL;
  assert_int_equal(ps_client_create(urls, 2, &o, &c2, NULL), PS_OK);
  assert_int_equal(kill(f.s[1].pid, SIGSTOP), 0);
  ps_error e;
  assert_int_equal(ps_client_checkpoint(c2, 2, "ck2", &e), PS_ERR_TIMEOUT);
  assert_non_null(strstr(e.msg, f.s[1].url));
  ps_client_destroy(&c2);
  crash_and_restart(&f);
  assert_rows(&f, 1, f.at_ck1);
  /* Shard 0 prepared step 2 and was aborted: its last checkpoint never moved on. */
  for (int i = 0; i < 2; i++) assert_true(last_ckpt_is(&f, i, "ck1", 1));
  assert_false(has_file(&f, 0, "ck2", ".staging"));
  assert_false(has_file(&f, 0, "ck2", ".json"));
  teardown(&f);
}

static void test_committed_is_restored(void **state) {
  (void)state;
  fixture f;
  setup(&f, "ckpt-ok");
  assert_int_equal(ps_client_checkpoint(f.c, 3, "ck3", NULL), PS_OK);
  float at_ck3[N * DIM];
  assert_int_equal(ps_client_pull(f.c, TAB, 3, f.k, N, at_ck3, NULL), PS_OK);
  for (int i = 0; i < 2; i++) {
    assert_true(has_file(&f, i, "ck3", ""));
    assert_true(has_file(&f, i, "ck3", ".json"));
    assert_false(has_file(&f, i, "ck3", ".staging"));
  }
  /* A commit repeated (its first reply lost) finds its work done. */
  assert_int_equal(ps_client_checkpoint_phase(f.c, PS_CKPT_COMMIT, 3, "ck3", NULL), PS_OK);
  assert_int_equal(ps_client_push(f.c, TAB, 3, f.k, N, f.g, NULL), PS_OK);
  crash_and_restart(&f);
  assert_rows(&f, 3, at_ck3);
  for (int i = 0; i < 2; i++) assert_true(last_ckpt_is(&f, i, "ck3", 3));
  /* The older checkpoint is still there, and RESTORE of it still works. */
  uint64_t step = 0;
  assert_int_equal(ps_client_restore(f.c, "ck1", &step, NULL), PS_OK);
  assert_int_equal(step, 1);
  assert_rows(&f, 1, f.at_ck1);
  teardown(&f);
}

/* A raw DEALER connection (replies bounded by 10 s) to url that has sent CHECKPOINT(phase,
 * step, path). */
static void *send_checkpoint(void *ctx, const char *url, int phase, uint64_t step,
                             const char *path) {
  void *sock = zmq_socket(ctx, ZMQ_DEALER);
  int zero = 0, tmo = 10000;
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(sock, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
  assert_int_equal(zmq_connect(sock, url), 0);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_CHECKPOINT);
  h.request_id = 77;
  h.step = step;
  h.path = (char *)path;
  h.ckpt_phase = (Ember__CkptPhase)phase;
  size_t hs = 0;
  uint8_t *hb = ps_wire_header_pack(&h, &hs);
  assert_int_equal(zmq_send(sock, hb, hs, 0), (int)hs);
  free(hb);
  return sock;
}

static void test_without_phase(void **state) {
  (void)state;
  fixture f;
  setup(&f, "ckpt-old");
  void *ctx = zmq_ctx_new();
  void *sock = send_checkpoint(ctx, f.s[0].url, EMBER__CKPT_PHASE__CKPT_ONESHOT, 4, "ck4");
  uint8_t rb[4096];
  int n = zmq_recv(sock, rb, sizeof rb, 0);
  assert_true(n > 0 && n < (int)sizeof rb);
  Ember__Header *rep = ember__header__unpack(NULL, (size_t)n, rb);
  assert_non_null(rep);
  assert_int_equal(rep->op, EMBER__OP__OP_CHECKPOINT);
  assert_int_equal(rep->status, 0);
  assert_int_equal(rep->ckpt_phase, EMBER__CKPT_PHASE__CKPT_ONESHOT);
  ember__header__free_unpacked(rep, NULL);
  zmq_close(sock);
  zmq_ctx_term(ctx);
  assert_true(last_ckpt_is(&f, 0, "ck4", 4));
  assert_true(has_file(&f, 0, "ck4", ".json"));
  assert_false(has_file(&f, 0, "ck4", ".staging"));
  assert_false(stats_has(&f, 0, "prepared_checkpoint"));
  teardown(&f);
}

static void test_far_prepare_abandoned(void **state) {
  (void)state;
  fixture f;
  setup(&f, "ckpt-far");
  /* A checkpoint waits for its step's pushes on synchronous tables only: one at step 1. */
  ps_table_spec t;
  ps_table_spec_default(&t, TAB + 1, "sync", DIM);
  t.consistency = PS_CONS_SYNC;
  t.num_workers = 1;
  assert_int_equal(ps_client_declare(f.c, &t, NULL), PS_OK);
  assert_int_equal(ps_client_push(f.c, TAB + 1, 0, f.k, N, f.g, NULL), PS_OK);
  assert_int_equal(ps_client_step(f.c, TAB + 1, 0, NULL), PS_OK);
  void *ctx = zmq_ctx_new();
  void *sock =
      send_checkpoint(ctx, f.s[0].url, EMBER__CKPT_PHASE__CKPT_PREPARE, 1000000, "ckfar");
  /* It waits for step 1000000: no answer. */
  zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
  assert_int_equal(zmq_poll(&it, 1, 500), 0);
  zmq_close(sock);
  zmq_ctx_term(ctx);
  /* The client's requests are bounded (20 s): before the fix this one got no reply. */
  assert_int_equal(ps_client_checkpoint(f.c, 1, "ckb", NULL), PS_OK);
  assert_true(last_ckpt_is(&f, 0, "ckb", 1));
  assert_false(has_file(&f, 0, "ckfar", ".staging"));
  uint64_t step = 0;
  assert_int_equal(ps_client_restore(f.c, "ckb", &step, NULL), PS_OK);
  assert_int_equal(step, 1);
  teardown(&f);
}

PS_TEST_MAIN("ckpt_commit", NULL, NULL,
  cmocka_unit_test(test_crash_between_phases),
  cmocka_unit_test(test_prepare_not_acked),
  cmocka_unit_test(test_committed_is_restored),
  cmocka_unit_test(test_without_phase),
  cmocka_unit_test(test_far_prepare_abandoned))
