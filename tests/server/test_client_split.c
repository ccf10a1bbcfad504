/* Integration: the client keeps its requests under a server's request cap by splitting them.
 * A ps-server with `--max-request-mb 1`; a dim-16 Adagrad table (64 B rows, so 16384 keys per
 * 1 MiB part). 100,000 keys, 40,000 of them twice and far apart (key i % 60000), in one pull
 * and one push:
 *   - unsplit (a client told the cap is 1 GiB) the pull is refused, "too large";
 *   - split, the pull equals the rows pulled in small batches, and the push (duplicates summed
 *     before the split, so each key is in one part) steps Adagrad once per key with the summed
 *     gradient: w1 = w0 - lr * G / (sqrt(a0 + G^2) + eps), G = 2 for a repeated key, 1 else --
 *     two separate steps of 1 would give a different w1 (checked). */
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
#include "pt_cluster.h"

#define DIM 16
#define N 100000
#define DISTINCT 60000
#define SMALL 10000 /* keys per reference pull: 640 KB */

static pt_server g_srv;
static char g_dir[512];

static ps_client *client(size_t cap) {
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 60000;
  o.max_request_bytes = cap;
  const char *url = g_srv.url;
  ps_client *c = NULL;
  assert_int_equal(ps_client_create(&url, 1, &o, &c, NULL), PS_OK);
  ps_table_spec t;
  ps_table_spec_default(&t, 1, "ada", DIM);
  t.optimizer = PS_OPT_ADAGRAD;
  t.lr = 0.1f;
  t.eps = 1e-8f;
  t.initial_accumulator = 0.1f;
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  return c;
}

static void pull_small(ps_client *c, const uint64_t *keys, size_t n, float *out) {
  for (size_t off = 0; off < n; off += SMALL) {
    size_t m = n - off < SMALL ? n - off : SMALL;
    assert_int_equal(ps_client_pull(c, 1, 0, keys + off, m, out + off * DIM, NULL), PS_OK);
  }
}

static void test_split(void **st) {
  (void)st;
  uint64_t *keys = malloc(N * sizeof *keys);
  float *a = malloc((size_t)N * DIM * sizeof *a), *b = malloc((size_t)N * DIM * sizeof *b);
  float *g = malloc((size_t)N * DIM * sizeof *g);
  assert_true(keys && a && b && g);
  for (size_t i = 0; i < N; i++) keys[i] = 1000003u * (uint64_t)(i % DISTINCT) + 7u;
  for (size_t i = 0; i < (size_t)N * DIM; i++) g[i] = 1.0f;

  ps_client *big = client((size_t)1 << 30);
  ps_error err;
  assert_int_equal(ps_client_pull(big, 1, 0, keys, N, a, &err), PS_ERR_NOMEM);
  assert_non_null(strstr(err.msg, "too large"));
  ps_client_destroy(&big);

  ps_client *c = client((size_t)1 << 20);
  pull_small(c, keys, N, a);
  assert_int_equal(ps_client_pull(c, 1, 0, keys, N, b, &err), PS_OK);
  assert_memory_equal(a, b, (size_t)N * DIM * sizeof *a);

  assert_int_equal(ps_client_push(c, 1, 0, keys, N, g, &err), PS_OK);
  pull_small(c, keys, N, b);
  size_t once_apart = 0;
  for (size_t i = 0; i < N; i++) {
    double G = i % DISTINCT < N - DISTINCT ? 2.0 : 1.0;
    for (int j = 0; j < DIM; j++) {
      double w0 = a[i * DIM + j];
      double want = w0 - 0.1 * G / (sqrt(0.1 + G * G) + 1e-8);
      assert_float_equal(b[i * DIM + j], want, 1e-5);
      if (G == 2.0) {
        /* two steps of 1 would land elsewhere */
        double two = w0 - 0.1 / (sqrt(1.1) + 1e-8);
        two -= 0.1 / (sqrt(2.1) + 1e-8);
        once_apart += fabs(two - want) > 1e-3;
      }
    }
  }
  assert_int_equal(once_apart, (size_t)2 * (N - DISTINCT) * DIM); /* both positions of each */
  ps_client_destroy(&c);
  free(keys);
  free(a);
  free(b);
  free(g);
}

/* Issue 36, 12: 4 clients' split pulls at once (7 parts of 1 MiB replies each) fill the
 * server's waiting room (R = 1 MiB of parked frames): parts are refused "busy", and the
 * client used to fail the whole pull. It re-sends a part refused busy after a backoff, within
 * the pull's bound: every pull completes, each equal to the same rows pulled in small
 * batches. */
static void test_split_busy(void **st) {
  (void)st;
  enum { NC = 4 };
  uint64_t *keys = malloc(N * sizeof *keys);
  float *ref = malloc((size_t)N * DIM * sizeof *ref);
  float *out[NC];
  ps_client *c[NC];
  ps_client_req *r[NC];
  assert_true(keys && ref);
  for (size_t i = 0; i < N; i++) keys[i] = 7919u * (uint64_t)i + 11u;
  for (int i = 0; i < NC; i++) {
    c[i] = client((size_t)1 << 20);
    assert_non_null(out[i] = malloc((size_t)N * DIM * sizeof *out[i]));
  }
  pull_small(c[0], keys, N, ref);
  for (int i = 0; i < NC; i++)
    assert_int_equal(ps_client_pull_start(c[i], 1, 0, keys, N, false, out[i], &r[i], NULL),
                     PS_OK);
  int failed = 0;
  for (int i = 0; i < NC; i++) {
    ps_error err;
    ps_status s = ps_client_wait(c[i], &r[i], &err);
    if (s != PS_OK) printf("pull %d: %s\n", i, err.msg), failed++;
    else assert_memory_equal(out[i], ref, (size_t)N * DIM * sizeof *ref);
  }
  char *js = NULL;
  assert_int_equal(ps_client_stats(c[0], 0, &js, NULL), PS_OK);
  const char *rm = strstr(js, "\"refused_memory\"");
  printf("server: %.24s\n", rm ? rm : "no refused_memory");
  free(js);
  assert_int_equal(failed, 0);
  for (int i = 0; i < NC; i++) {
    ps_client_destroy(&c[i]);
    free(out[i]);
  }
  free(keys);
  free(ref);
}

static int setup(void **st) {
  (void)st;
  pt_tmpdir("split", g_dir);
  const char *extra[] = {"--max-request-mb", "1", NULL};
  return pt_start_args(&g_srv, 0, 1, g_dir, 0, 0, extra) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  pt_stop(&g_srv, SIGKILL, 5000);
  pt_rmrf(g_dir);
  return 0;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_split),
                                     cmocka_unit_test(test_split_busy)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
