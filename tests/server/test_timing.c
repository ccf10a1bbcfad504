/* Integration: where a request's time goes on ps-server, as STATS (ops.<op>.queue_us /
 * service_us and their raw buckets) and /metrics (ember_server_request_{queue,service}_seconds)
 * report it. A real server with 2 partition threads, `--inject-delay-us D` (a simulated
 * service time) and `--metrics-port`:
 * - plain pulls and pushes: service >= D (the delay runs from the start of the store work),
 *   service < D + slack, queue small, and queue + service = the total per request;
 * - a sync pull of step 1 held until step 0 is applied: its own queue part (the difference
 *   of two STATS snapshots' buckets, exactly one request) is at least the hold, and its
 *   service part is still >= D, so queueing dominates;
 * - /metrics: every bucket of the three histograms, per op, equals what the STATS buckets give
 *   (cumulative, monotonic, +Inf = _count = the STATS count), and the service histogram has
 *   nothing below D;
 * - a --threads 0 server (store work inline on the socket thread) splits the same way.
 * Slack is generous (a loaded 2-core CI box), the lower bounds are exact. */
#include <jansson.h>
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

#include "prom_check.h"
#include "ps_client.h"
#include "ps_hist.h"
#include "ps_time.h"
#include "pt_cluster.h"

#define DIM 4
#define N 16
#define D_US 30000ull     /* injected service time; between the fine edges 0.025 and 0.032 s */
#define SLACK_US 250000ull /* scheduling on a loaded box, the socket loop's 1 ms rounding */
#define HOLD_MS 300ull

static pt_server g_srv;
static char g_dir[512];
static int g_mport;

static bool start(pt_server *s, const char *sub, int threads, int mport) {
  char d[600], dl[16], mp[16];
  snprintf(d, sizeof d, "%s/%s", g_dir, sub);
  snprintf(dl, sizeof dl, "%llu", D_US);
  snprintf(mp, sizeof mp, "%d", mport);
  const char *extra[] = {"--inject-delay-us", dl, mport ? "--metrics-port" : NULL, mp, NULL};
  return pt_start_args(s, 0, 1, d, 0, threads, extra);
}

static int setup(void **state) {
  (void)state;
  pt_tmpdir("timing", g_dir);
  g_mport = pt_free_port();
  return g_dir[0] && g_mport > 0 && start(&g_srv, "s0", 2, g_mport) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  pt_stop_all(&g_srv, 1, g_dir);
  return 0;
}

static ps_client *client(const pt_server *s, uint32_t rank) {
  ps_client *c = pt_client(s, 1, rank, 15000);
  assert_non_null(c);
  return c;
}

static void declare(ps_client *c, uint32_t id, ps_consistency cons) {
  ps_table_spec t;
  char name[32];
  snprintf(name, sizeof name, "timing%u", id);
  ps_table_spec_default(&t, id, name, DIM);
  t.consistency = cons;
  t.num_workers = 2;
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
}

static json_t *stats(ps_client *c) {
  char *js = NULL;
  assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
  json_t *doc = json_loads(js, 0, NULL);
  free(js);
  assert_non_null(doc);
  return doc;
}

/* ops.<op>.<obj>.<key>, or ops.<op>.<obj> when key is NULL; -1 when absent. */
static double field(json_t *doc, const char *op, const char *obj, const char *key) {
  json_t *o = json_object_get(json_object_get(json_object_get(doc, "ops"), op), obj);
  if (key) o = json_object_get(o, key);
  return json_is_number(o) ? json_number_value(o) : -1;
}

/* ops.<op>.<part>_buckets as dense counts (zeroed first); returns their sum. */
static uint64_t dense(json_t *doc, const char *op, const char *part, uint64_t *out) {
  char k[32];
  snprintf(k, sizeof k, "%s_buckets", part);
  json_t *pairs = json_object_get(json_object_get(json_object_get(doc, "ops"), op), k);
  memset(out, 0, ps_hist_nbuckets() * sizeof *out);
  uint64_t sum = 0;
  size_t i;
  json_t *p;
  json_array_foreach(pairs, i, p) {
    json_int_t idx = json_integer_value(json_array_get(p, 0));
    json_int_t cnt = json_integer_value(json_array_get(p, 1));
    assert_true(idx >= 0 && (size_t)idx < ps_hist_nbuckets() && cnt > 0);
    out[idx] = (uint64_t)cnt;
    sum += (uint64_t)cnt;
  }
  return sum;
}

/* The one bucket that gained one request between two snapshots (asserts nothing else moved). */
static size_t one_more(const uint64_t *before, const uint64_t *after, uint64_t *lo,
                       uint64_t *hi) {
  size_t at = SIZE_MAX;
  for (size_t i = 0; i < ps_hist_nbuckets(); i++) {
    if (after[i] == before[i]) continue;
    assert_true(after[i] == before[i] + 1 && at == SIZE_MAX);
    at = i;
  }
  assert_true(at != SIZE_MAX);
  ps_hist_bucket_range(at, lo, hi);
  return at;
}

/* The split of one op's requests so far, in STATS: all of them dispatched (no refusals in
 * these tests), service >= D and < D + slack, queue small, queue + service = total. */
static void expect_split(json_t *doc, const char *op, double count) {
  assert_true(field(doc, op, "count", NULL) == count);
  uint64_t *b = calloc(ps_hist_nbuckets(), sizeof *b);
  assert_non_null(b);
  assert_true((double)dense(doc, op, "queue", b) == count);
  assert_true((double)dense(doc, op, "service", b) == count);
  assert_true((double)dense(doc, op, "latency", b) == count);
  free(b);
  double s50 = field(doc, op, "service_us", "p50"), smax = field(doc, op, "service_us", "max");
  double q50 = field(doc, op, "queue_us", "p50");
  printf("%s x%.0f: queue p50 %.0f us, service p50 %.0f max %.0f us (D %llu us)\n", op, count,
         q50, s50, smax, D_US);
  /* Percentiles clamp to the exact minimum, so ">= D" holds to the microsecond. */
  assert_true(s50 >= (double)D_US);
  assert_true(smax < (double)(D_US + SLACK_US));
  assert_true(q50 >= 0 && q50 < (double)D_US / 3);
  double lat = field(doc, op, "latency_us", "mean");
  double parts = field(doc, op, "queue_us", "mean") + field(doc, op, "service_us", "mean");
  assert_true(fabs(lat - parts) <= 1e-6 * lat + 0.01);
}

static void test_delay_is_service(void **state) {
  (void)state;
  ps_client *a = client(&g_srv, 0), *b = client(&g_srv, 1);
  declare(a, 20, PS_CONS_ASYNC);
  declare(b, 20, PS_CONS_ASYNC); /* a client learns a table's dim from its declaration */
  uint64_t k[N];
  float rows[N * DIM], g[N * DIM];
  for (int i = 0; i < N; i++) k[i] = 1000 + (uint64_t)i;
  for (int i = 0; i < N * DIM; i++) g[i] = 0.01f;
  json_t *doc = stats(a);
  double pulls = field(doc, "pull", "count", NULL), pushes = field(doc, "push", "count", NULL);
  json_decref(doc);
  pulls = pulls < 0 ? 0 : pulls;
  pushes = pushes < 0 ? 0 : pushes;
  for (int i = 0; i < 8; i++) {
    uint64_t t0 = ps_now_ns();
    assert_int_equal(ps_client_pull(i % 2 ? b : a, 20, 0, k, N, rows, NULL), PS_OK);
    assert_true(ps_now_ns() - t0 >= D_US * 1000);
  }
  for (int i = 0; i < 3; i++) assert_int_equal(ps_client_push(a, 20, 0, k, N, g, NULL), PS_OK);
  doc = stats(a);
  expect_split(doc, "pull", pulls + 8);
  expect_split(doc, "push", pushes + 3);
  /* Requests that never reach the store have no split. */
  assert_true(field(doc, "stats", "queue_us", NULL) < 0);
  assert_true(field(doc, "declare", "service_us", NULL) < 0);
  json_decref(doc);
  ps_client_destroy(&a);
  ps_client_destroy(&b);
}

static void test_deferred_pull_queues(void **state) {
  (void)state;
  ps_client *a = client(&g_srv, 0), *b = client(&g_srv, 1), *ctl = client(&g_srv, 0);
  declare(a, 21, PS_CONS_SYNC);
  declare(b, 21, PS_CONS_SYNC);
  uint64_t k[N];
  float rows[N * DIM], g[N * DIM];
  for (int i = 0; i < N; i++) k[i] = 2000 + (uint64_t)i;
  for (int i = 0; i < N * DIM; i++) g[i] = 0.01f;
  assert_int_equal(ps_client_pull(a, 21, 0, k, N, rows, NULL), PS_OK);
  assert_int_equal(ps_client_push(a, 21, 0, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_step(a, 21, 0, NULL), PS_OK);
  size_t nb = ps_hist_nbuckets();
  uint64_t *q0 = calloc(nb, sizeof *q0), *s0 = calloc(nb, sizeof *s0),
           *q1 = calloc(nb, sizeof *q1), *s1 = calloc(nb, sizeof *s1);
  assert_true(q0 && s0 && q1 && s1);
  json_t *doc = stats(ctl);
  uint64_t n0 = dense(doc, "pull", "queue", q0);
  dense(doc, "pull", "service", s0);
  json_decref(doc);

  /* a finished step 0, b has not: a's pull of step 1 waits. Once STATS shows it deferred it
   * has arrived, so from then until b's step is sent is a lower bound of its wait. */
  ps_client_req *r = NULL;
  uint64_t t_send = ps_now_ns();
  assert_int_equal(ps_client_pull_start(a, 21, 1, k, N, false, rows, &r, NULL), PS_OK);
  uint64_t t_seen = 0;
  for (int i = 0; i < 500 && !t_seen; i++) {
    doc = stats(ctl);
    json_t *q = json_object_get(doc, "queue");
    if (json_integer_value(json_object_get(q, "deferred")) == 1) t_seen = ps_now_ns();
    json_decref(doc);
    if (!t_seen) ps_sleep_ns(10000000);
  }
  assert_true(t_seen != 0);
  ps_sleep_ns(HOLD_MS * 1000000);
  bool done = true;
  assert_int_equal(ps_client_ready(a, r, 0, &done, NULL), PS_OK);
  assert_false(done);
  uint64_t t_release = ps_now_ns();
  assert_int_equal(ps_client_push(b, 21, 0, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_step(b, 21, 0, NULL), PS_OK);
  assert_int_equal(ps_client_wait(a, &r, NULL), PS_OK);
  uint64_t t_done = ps_now_ns();

  doc = stats(ctl);
  assert_true(dense(doc, "pull", "queue", q1) == n0 + 1);
  dense(doc, "pull", "service", s1);
  uint64_t hold = t_release - t_seen, qlo, qhi, slo, shi;
  one_more(q0, q1, &qlo, &qhi);
  one_more(s0, s1, &slo, &shi);
  printf("deferred pull: held >= %.1f ms; queue in [%.1f, %.1f] ms, service in [%.1f, %.1f] ms; "
         "client saw %.1f ms\n",
         hold / 1e6, qlo / 1e6, qhi / 1e6, slo / 1e6, shi / 1e6, (t_done - t_send) / 1e6);
  /* Its queue part holds the whole hold (the bucket's top bounds the value from above) ... */
  assert_true(qhi >= hold);
  assert_true(field(doc, "pull", "queue_us", "max") >= (double)hold / 1e3);
  /* ... its service part still the injected delay, which starts only at the release ... */
  assert_true(shi >= D_US * 1000 && slo < (D_US + SLACK_US) * 1000);
  /* ... so queueing dominates, and the client waited for both. */
  assert_true(qlo > shi);
  assert_true(t_done - t_send >= HOLD_MS * 1000000 + D_US * 1000);
  json_decref(doc);
  free(q0);
  free(s0);
  free(q1);
  free(s1);
  ps_client_destroy(&a);
  ps_client_destroy(&b);
  ps_client_destroy(&ctl);
}

/* The samples of `<fam>_bucket{op="<op>",le="..."}` in order: le in seconds (+Inf as INFINITY)
 * and counts; returns how many. */
static size_t buckets_of(const char *text, const char *fam, const char *op, double *le,
                         double *cnt, size_t max) {
  char pre[160];
  snprintf(pre, sizeof pre, "%s_bucket{op=\"%s\",le=\"", fam, op);
  size_t n = 0, pl = strlen(pre);
  for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (strncmp(l, pre, pl) != 0) continue;
    assert_true(n < max);
    const char *v = l + pl;
    le[n] = strncmp(v, "+Inf\"", 5) == 0 ? INFINITY : strtod(v, NULL);
    const char *sp = strchr(v, ' ');
    assert_non_null(sp);
    cnt[n++] = strtod(sp + 1, NULL);
  }
  return n;
}

static void test_metrics_histograms(void **state) {
  (void)state;
  ps_client *a = client(&g_srv, 0);
  declare(a, 22, PS_CONS_ASYNC);
  uint64_t k[N];
  float rows[N * DIM], g[N * DIM];
  for (int i = 0; i < N; i++) k[i] = 3000 + (uint64_t)i;
  for (int i = 0; i < N * DIM; i++) g[i] = 0.01f;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(ps_client_pull(a, 22, 0, k, N, rows, NULL), PS_OK);
    assert_int_equal(ps_client_push(a, 22, 0, k, N, g, NULL), PS_OK);
  }
  json_t *doc = stats(a);
  static const char *fams[] = {"ember_server_request_duration_seconds",
                               "ember_server_request_queue_seconds",
                               "ember_server_request_service_seconds"};
  static const char *parts[] = {"latency", "queue", "service"};
  static const char *ops[] = {"pull", "push"};
  /* The endpoint serves a snapshot refreshed every 200 ms: wait until it has these requests
   * (no pull or push happens meanwhile, so the counts are final). */
  char *text = NULL;
  char lab[64];
  for (int i = 0; i < 50; i++) {
    free(text);
    text = pt_http_get(g_mport, "/metrics");
    double got = -1;
    snprintf(lab, sizeof lab, "op=\"push\"");
    if (text && prom_value(text, "ember_server_request_service_seconds_count", lab, &got) &&
        got == field(doc, "push", "count", NULL))
      break;
    ps_sleep_ns(100000000);
  }
  assert_non_null(text);
  char err[512];
  if (!prom_check(text, err, sizeof err)) fail_msg("/metrics is not valid exposition: %s", err);
  assert_non_null(strstr(text, "# TYPE ember_server_request_queue_seconds histogram\n"));
  assert_non_null(strstr(text, "# TYPE ember_server_request_service_seconds histogram\n"));
  size_t nb = ps_hist_nbuckets();
  uint64_t *d = calloc(nb, sizeof *d);
  ps_hist *h = ps_hist_create();
  double le[128], cnt[128];
  assert_true(d && h);
  for (int o = 0; o < 2; o++) {
    for (int f = 0; f < 3; f++) {
      uint64_t total = dense(doc, ops[o], parts[f], d);
      ps_hist_reset(h);
      ps_hist_add_buckets(h, d, nb, 0, UINT64_MAX);
      size_t n = buckets_of(text, fams[f], ops[o], le, cnt, 128);
      assert_true(n > 2 && isinf(le[n - 1]));
      double count = -1, sum = -1;
      snprintf(lab, sizeof lab, "op=\"%s\"", ops[o]);
      char name[96];
      snprintf(name, sizeof name, "%s_count", fams[f]);
      assert_true(prom_value(text, name, lab, &count));
      snprintf(name, sizeof name, "%s_sum", fams[f]);
      assert_true(prom_value(text, name, lab, &sum));
      /* _count is the STATS count: of the op for the total, of its buckets for the parts
       * (every request here reached the store, so they agree). */
      assert_true(count == (double)total && count == field(doc, ops[o], "count", NULL));
      assert_true(cnt[n - 1] == count);
      for (size_t i = 0; i + 1 < n; i++) {
        assert_true(le[i] < le[i + 1] && cnt[i] <= cnt[i + 1]);
        /* Each edge counts the ps_hist buckets up to the one holding it: exactly. */
        uint64_t edge = (uint64_t)llround(le[i] * 1e9);
        assert_true(cnt[i] == (double)ps_hist_count_le(h, edge));
        if (f == 2 && edge < D_US * 1000) assert_true(cnt[i] == 0); /* nothing beat D */
      }
      char uk[32];
      snprintf(uk, sizeof uk, "%s_us", parts[f]);
      double mean_s = field(doc, ops[o], uk, "mean") * 1e-6;
      assert_true(fabs(sum - mean_s * count) <= 0.01 * mean_s * count + 1e-9);
    }
  }
  printf("/metrics: 3 histograms x {pull, push} match STATS bucket for bucket\n");
  ps_hist_destroy(&h);
  free(d);
  free(text);
  json_decref(doc);
  ps_client_destroy(&a);
}

/* --threads 0: store work runs on the socket thread; its start is the dispatch. */
static void test_inline_split(void **state) {
  (void)state;
  pt_server s0;
  assert_true(start(&s0, "inline", 0, 0));
  ps_client *a = client(&s0, 0);
  declare(a, 23, PS_CONS_ASYNC);
  uint64_t k[N];
  float rows[N * DIM];
  for (int i = 0; i < N; i++) k[i] = 4000 + (uint64_t)i;
  for (int i = 0; i < 4; i++) assert_int_equal(ps_client_pull(a, 23, 0, k, N, rows, NULL), PS_OK);
  json_t *doc = stats(a);
  expect_split(doc, "pull", 4);
  json_decref(doc);
  ps_client_destroy(&a);
  assert_int_equal(pt_stop(&s0, SIGTERM, 10000), 0); /* a clean exit: no sanitizer report */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_delay_is_service),
      cmocka_unit_test(test_deferred_pull_queues),
      cmocka_unit_test(test_metrics_histograms),
      cmocka_unit_test(test_inline_split),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
