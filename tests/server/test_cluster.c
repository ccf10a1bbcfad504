/* Integration: 2 real ps-server processes, 1-3 clients. Pulls and pushes through the network
 * must equal what an in-process ps_store gives for the same sequence; keys of another shard,
 * conflicting declarations and pipelined out-of-order waits are checked too. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_client.h"
#include "ps_dedup.h"
#include "ps_wire.h"
#include "ps_hash.h"
#include "ps_store.h"
#include "pt_cluster.h"

#define DIM 8
#define TABLE 3

/* Shard 1 with no partition threads: store work on the socket thread, the default on
 * machines of 2 CPUs or fewer. */
static pt_group g_cl = {.n = 2, .tag = "cluster", .threads = {2, 0}, .timeout_ms = 10000};

static ps_client *client(void) { return pt_group_client(&g_cl, 0); }

static void table_of(ps_table_spec *t, int opt) {
  ps_table_spec_default(t, TABLE, "emb", DIM);
  t->optimizer = opt;
  t->lr = 0.1f;
  t->eps = 1e-6f;
  t->initial_accumulator = 0.1f;
  t->seed = 42;
  t->consistency = PS_CONS_ASYNC;
}

static void expect_close(const float *a, const float *b, size_t n, float tol) {
  for (size_t i = 0; i < n; i++) {
    if (fabsf(a[i] - b[i]) > tol) {
      fail_msg("element %zu: %.9g vs %.9g", i, a[i], b[i]);
    }
  }
}

/* Three clients push overlapping keys with duplicates; every pull equals the reference. */
static void test_equal_to_store(void **state) {
  (void)state;
  ps_client *c[3] = {client(), client(), client()};
  ps_table_spec t;
  table_of(&t, 1 /* Adagrad: order-sensitive if a push were applied twice */);
  for (int i = 0; i < 3; i++) assert_int_equal(ps_client_declare(c[i], &t, NULL), PS_OK);

  ps_store *ref = pt_ref_store(g_cl.dir, "ref", 64 << 20, &t);
  assert_non_null(ref);

  enum { N = 3000 };
  uint64_t *keys = malloc(N * sizeof *keys);
  float *g = malloc(N * DIM * sizeof *g), *got = malloc(N * DIM * sizeof *got),
        *want = malloc(N * DIM * sizeof *want);
  uint64_t x = 7;
  for (int round = 0; round < 6; round++) {
    ps_client *cl = c[round % 3];
    for (int i = 0; i < N; i++) {
      x = ps_mix64(x);
      keys[i] = (x % 2000) * 1000003ull; /* many duplicates, spread over both shards */
      for (int d = 0; d < DIM; d++) {
        x = ps_mix64(x);
        g[i * DIM + d] = (float)((int64_t)(x % 2001) - 1000) / 1000.0f;
      }
    }
    assert_int_equal(ps_client_pull(cl, TABLE, 0, keys, N, got, NULL), PS_OK);
    assert_int_equal(ps_store_pull(ref, TABLE, keys, N, want), PS_OK);
    expect_close(got, want, (size_t)N * DIM, 1e-6f);
    assert_int_equal(ps_client_push(cl, TABLE, 0, keys, N, g, NULL), PS_OK);
    assert_int_equal(ps_store_push(ref, TABLE, keys, N, g), PS_OK);
  }
  assert_int_equal(ps_client_pull(c[1], TABLE, 0, keys, N, got, NULL), PS_OK);
  assert_int_equal(ps_store_pull(ref, TABLE, keys, N, want), PS_OK);
  expect_close(got, want, (size_t)N * DIM, 1e-5f);

  /* Empty requests complete at once. */
  assert_int_equal(ps_client_pull(c[0], TABLE, 0, keys, 0, got, NULL), PS_OK);
  assert_int_equal(ps_client_push(c[0], TABLE, 0, keys, 0, g, NULL), PS_OK);
  /* Unique-key API gives the same rows. */
  uint64_t uk[5] = {1, 2, 3, 1000003ull * 5, 99};
  float a[5 * DIM], b[5 * DIM];
  assert_int_equal(ps_client_pull_unique(c[2], TABLE, 0, uk, 5, a, NULL), PS_OK);
  assert_int_equal(ps_store_pull(ref, TABLE, uk, 5, b), PS_OK);
  expect_close(a, b, 5 * DIM, 1e-6f);

  /* Pipelined: 8 pulls in flight, waited for in reverse order. */
  ps_client_req *r[8];
  float *outs = malloc(8 * 100 * DIM * sizeof(float));
  for (int i = 0; i < 8; i++)
    assert_int_equal(ps_client_pull_start(c[0], TABLE, 0, keys + i * 100, 100, false,
                                          outs + i * 100 * DIM, &r[i], NULL),
                     PS_OK);
  for (int i = 7; i >= 0; i--) assert_int_equal(ps_client_wait(c[0], &r[i], NULL), PS_OK);
  assert_int_equal(ps_store_pull(ref, TABLE, keys, 800, want), PS_OK);
  expect_close(outs, want, 800 * DIM, 1e-5f);

  free(outs);
  free(keys);
  free(g);
  free(got);
  free(want);
  ps_store_close(&ref);
  for (int i = 0; i < 3; i++) ps_client_destroy(&c[i]);
}

static void test_refusals(void **state) {
  (void)state;
  ps_client *c = client();
  ps_table_spec t;
  table_of(&t, 1);
  ps_error e;
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  /* Same id, another consistency contract: refused, with the reason. */
  ps_table_spec t2 = t;
  t2.consistency = PS_CONS_SYNC;
  t2.num_workers = 2;
  assert_int_equal(ps_client_declare(c, &t2, &e), PS_ERR_CONFLICT);
  assert_int_equal(e.code, PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "consistency"));
  /* Same id, another dim: refused by the store. */
  t2 = t;
  t2.dim = DIM * 2;
  assert_int_equal(ps_client_declare(c, &t2, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "declared again with a different spec"));
  ps_client_destroy(&c);

  /* A client that believes shard 1 is the only server sends it keys of shard 0. */
  const char *urls[1] = {g_cl.srv[1].url};
  ps_client *one = NULL;
  assert_int_equal(ps_client_create(urls, 1, NULL, &one, NULL), PS_OK);
  assert_int_equal(ps_client_declare(one, &t, NULL), PS_OK);
  uint64_t k = 0;
  while (ps_shard_of(k, 2) != 0) k++;
  float row[DIM];
  assert_int_equal(ps_client_pull(one, TABLE, 0, &k, 1, row, &e), PS_ERR_WRONG_SHARD);
  assert_non_null(strstr(e.msg, g_cl.srv[1].url));
  assert_non_null(strstr(e.msg, "(shard 0)"));
  assert_int_equal(ps_client_push(one, TABLE, 0, &k, 1, row, NULL), PS_ERR_WRONG_SHARD);
  uint64_t k1 = 0;
  while (ps_shard_of(k1, 2) != 1) k1++;
  assert_int_equal(ps_client_pull(one, TABLE, 0, &k1, 1, row, NULL), PS_OK);
  /* Unknown table. */
  assert_int_equal(ps_client_pull(one, 77, 0, &k1, 1, row, &e), PS_ERR_UNKNOWN_TABLE);
  assert_non_null(strstr(e.msg, "table 77 was not declared by this client"));
  ps_client_destroy(&one);

  /* Timeouts name the server. */
  int port = pt_free_port();
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  const char *dead[1] = {url};
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 300;
  assert_int_equal(ps_client_create(dead, 1, &o, &one, NULL), PS_OK);
  assert_int_equal(ps_client_ping(one, 0, &e), PS_ERR_TIMEOUT);
  assert_non_null(strstr(e.msg, url));
  ps_client_destroy(&one);
}

static void test_stats(void **state) {
  (void)state;
  ps_client *c = client();
  char *js = NULL;
  assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
  assert_non_null(strstr(js, "\"ops\""));
  assert_non_null(strstr(js, "\"pull\""));
  assert_non_null(strstr(js, "\"p99\""));
  assert_non_null(strstr(js, "\"store\""));
  assert_non_null(strstr(js, "\"coordinator\""));
  free(js);
  ps_client_destroy(&c);
}

/* f16 on the wire: rows are the store's rows rounded to f16; gradients are summed in f32 per
 * unique key by the client, rounded to f16, and applied as such. Checked bit-exactly. */
static void test_f16_wire(void **state) {
  (void)state;
  const char *urls[2] = {g_cl.srv[0].url, g_cl.srv[1].url};
  ps_client_options o;
  ps_client_options_default(&o);
  o.wire_f16 = true;
  ps_client *c = NULL;
  assert_int_equal(ps_client_create(urls, 2, &o, &c, NULL), PS_OK);
  ps_table_spec t;
  table_of(&t, 0);
  t.id = 4;
  snprintf(t.name, sizeof t.name, "half");
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  ps_store *ref = pt_ref_store(g_cl.dir, "ref16", 16 << 20, &t);
  assert_non_null(ref);
  enum { N = 500 };
  uint64_t keys[N], uk[N];
  uint32_t inv[N];
  float g[N * DIM], got[N * DIM], want[N * DIM], sum[N * DIM];
  uint16_t h16[N * DIM];
  for (int i = 0; i < N; i++) keys[i] = (uint64_t)(i % 300) * 7919u + 3; /* duplicates */
  for (int i = 0; i < N * DIM; i++) g[i] = 0.001f * (float)((i * 37) % 200 - 100);
  for (int round = 0; round < 3; round++) {
    assert_int_equal(ps_client_pull(c, 4, 0, keys, N, got, NULL), PS_OK);
    assert_int_equal(ps_store_pull(ref, 4, keys, N, want), PS_OK);
    ps_wire_f32_to_f16(want, h16, N * DIM);
    ps_wire_f16_to_f32(h16, want, N * DIM);
    assert_memory_equal(got, want, sizeof got);
    assert_int_equal(ps_client_push(c, 4, 0, keys, N, g, NULL), PS_OK);
    ps_dedup *d = NULL;
    size_t nu = 0;
    assert_int_equal(ps_dedup_create(&d), PS_OK);
    assert_int_equal(ps_dedup_keys(d, keys, N, uk, inv, &nu), PS_OK);
    ps_dedup_sum_rows(inv, N, nu, g, DIM, sum);
    ps_wire_f32_to_f16(sum, h16, nu * DIM);
    ps_wire_f16_to_f32(h16, sum, nu * DIM);
    assert_int_equal(ps_store_push(ref, 4, uk, nu, sum), PS_OK);
    ps_dedup_destroy(&d);
  }
  ps_store_close(&ref);
  ps_client_destroy(&c);
}

PT_GROUP_MAIN(g_cl,
  cmocka_unit_test(test_equal_to_store),
  cmocka_unit_test(test_refusals),
  cmocka_unit_test(test_stats),
  cmocka_unit_test(test_f16_wire))
