/* test_curve_auth: a real ps-server with --curve-secret/--curve-clients serves only the listed
 * client key (issue 18).
 *
 * One server process on 127.0.0.1, keys made with ps_curve_write_pair: "good" is listed in the
 * clients directory, "bad" is not. A client without CURVE, one with the unlisted key, and one
 * with the listed key but a wrong server key each try a ping, a declare of a new table and a
 * KV write; every one must time out (bounded: 1.5 s per request), its error naming the reason,
 * and change nothing: the listed client then reads the row exactly as before, the server's
 * STATS count none of their ops and show no new table, and the KV key is not there. The listed client's own push moves the row by -lr * gradient (SGD, lr 0.01: a hand
 * calculation). The server is stopped by PID. */
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_client.h"
#include "ps_curve.h"
#include "pt_cluster.h"

#define DIM 4
#define KEY 7u

static char g_dir[512], g_url[64];
static pid_t g_pid;
static char g_server_pub[PS_CURVE_Z85_SIZE];

/* A client of the server with the given key files (NULL, NULL: no CURVE). */
static ps_client *client(const char *secret, const char *server, uint32_t timeout_ms) {
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = timeout_ms;
  char sp[600], vp[600];
  if (secret) {
    snprintf(sp, sizeof sp, "%s/%s", g_dir, secret);
    snprintf(vp, sizeof vp, "%s/%s", g_dir, server);
  }
  ps_error err;
  assert_int_equal(ps_curve_load_client(secret ? sp : NULL, secret ? vp : NULL, o.curve_secret,
                                        o.curve_server, &err),
                   PS_OK);
  const char *urls[1] = {g_url};
  ps_client *c = NULL;
  assert_int_equal(ps_client_create(urls, 1, &o, &c, &err), PS_OK);
  return c;
}

static void declare(ps_client *c) {
  ps_table_spec t;
  ps_table_spec_default(&t, 1, "curve", DIM);
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
}

static void pull(ps_client *c, float *row) {
  uint64_t k = KEY;
  ps_error err;
  ps_status st = ps_client_pull(c, 1, 0, &k, 1, row, &err);
  if (st != PS_OK) fail_msg("pull: %s", err.msg);
}

/* ops.<op>.count of the server's STATS, read by the listed client. */
static long long op_count(ps_client *c, const char *op) {
  char *doc = NULL;
  assert_int_equal(ps_client_stats(c, 0, &doc, NULL), PS_OK);
  json_t *j = json_loads(doc, 0, NULL);
  free(doc);
  assert_non_null(j);
  json_t *n = json_object_get(json_object_get(json_object_get(j, "ops"), op), "count");
  long long v = n ? json_integer_value(n) : 0;
  json_decref(j);
  return v;
}

static int setup(void **state) {
  (void)state;
  pt_tmpdir("curve", g_dir);
  char p[700];
  snprintf(p, sizeof p, "%s/clients", g_dir);
  if (mkdir(p, 0755) != 0) return -1;
  const char *names[] = {"server", "good", "bad"};
  char pub[PS_CURVE_Z85_SIZE];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
    if (ps_curve_write_pair(p, false, pub, NULL) != PS_OK) return -1;
    if (i == 0) memcpy(g_server_pub, pub, sizeof pub);
    if (i == 1) { /* only good is listed */
      snprintf(p, sizeof p, "%s/clients/good.public", g_dir);
      FILE *f = fopen(p, "w");
      if (!f) return -1;
      fprintf(f, "%s\n", pub);
      fclose(f);
    }
  }
  int port = pt_free_port();
  snprintf(g_url, sizeof g_url, "tcp://127.0.0.1:%d", port);
  char data[600], secret[600], clients[600], logf[600], bin[600];
  snprintf(data, sizeof data, "%s/data", g_dir);
  snprintf(secret, sizeof secret, "%s/server.secret", g_dir);
  snprintf(clients, sizeof clients, "%s/clients", g_dir);
  snprintf(logf, sizeof logf, "%s/server.log", g_dir);
  snprintf(bin, sizeof bin, "%s/ps-server", getenv("EMBER_BIN") ? getenv("EMBER_BIN") : ".");
  g_pid = fork();
  if (g_pid < 0) return -1;
  if (g_pid == 0) {
    int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execl(bin, bin, "--listen", g_url, "--data-dir", data, "--threads", "0", "--cache-mb", "64",
          "--curve-secret", secret, "--curve-clients", clients, (char *)NULL);
    _exit(127);
  }
  /* Up when the listed client's ping is answered (bounded: 50 x 300 ms). */
  ps_client *c = client("good.secret", "server.public", 300);
  bool ok = false;
  for (int i = 0; i < 50 && !ok; i++) ok = ps_client_ping(c, 0, NULL) == PS_OK;
  if (ok) declare(c);
  ps_client_destroy(&c);
  return ok ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  if (g_pid > 0) {
    kill(g_pid, SIGKILL);
    waitpid(g_pid, NULL, 0);
  }
  pt_rmrf(g_dir);
  return 0;
}

/* A client that must get no service: no ping, declare or KV write answered, nothing changed
 * (the row, the op counts, the tables, the KV store as the listed client sees them). */
static void refused(const char *secret, const char *server, const char *say) {
  ps_client *good = client("good.secret", "server.public", 10000);
  declare(good);
  float before[DIM], after[DIM];
  pull(good, before);
  const char *ops[] = {"ping", "declare", "kv_set", "push"};
  long long counts[4];
  for (int i = 0; i < 4; i++) counts[i] = op_count(good, ops[i]);

  ps_client *c = client(secret, server, 1500);
  ps_error err;
  assert_int_equal(ps_client_ping(c, 0, &err), PS_ERR_TIMEOUT);
  if (!strstr(err.msg, say)) fail_msg("'%s' does not say '%s'", err.msg, say);
  ps_table_spec t;
  ps_table_spec_default(&t, 2, "intruder", DIM);
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_ERR_TIMEOUT);
  assert_int_not_equal(ps_client_kv_set(c, "curve/intruder", "x", 1, NULL), PS_OK);
  ps_client_destroy(&c);

  pull(good, after);
  assert_memory_equal(before, after, sizeof before);
  for (int i = 0; i < 4; i++) assert_int_equal(op_count(good, ops[i]), counts[i]);
  char *doc = NULL;
  assert_int_equal(ps_client_stats(good, 0, &doc, NULL), PS_OK);
  assert_null(strstr(doc, "intruder"));
  free(doc);
  void *val = NULL;
  size_t len = 0;
  assert_int_not_equal(ps_client_kv_get(good, "curve/intruder", &val, &len, 200, NULL), PS_OK);
  free(val);
  ps_client_destroy(&good);
}

static void test_unauthenticated_client_refused(void **state) {
  (void)state;
  refused(NULL, NULL, "one side uses CURVE and the other does not");
}

static void test_unlisted_key_refused(void **state) {
  (void)state;
  refused("bad.secret", "server.public", "is the key's .public in the server's --curve-clients");
}

static void test_wrong_server_key_refused(void **state) {
  (void)state;
  refused("good.secret", "bad.public", "is --curve-server its public key"); /* "another" server */
}

static void test_listed_client_served(void **state) {
  (void)state;
  ps_client *c = client("good.secret", "server.public", 10000);
  declare(c);
  float before[DIM], after[DIM], g[DIM] = {1, -2, 3, -4};
  pull(c, before);
  long long pushes = op_count(c, "push");
  uint64_t k = KEY;
  assert_int_equal(ps_client_push(c, 1, 0, &k, 1, g, NULL), PS_OK);
  pull(c, after);
  for (int i = 0; i < DIM; i++) assert_float_equal(after[i], before[i] - 0.01f * g[i], 1e-6);
  assert_int_equal(op_count(c, "push"), pushes + 1);
  ps_client_destroy(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_listed_client_served),
      cmocka_unit_test(test_unauthenticated_client_refused),
      cmocka_unit_test(test_unlisted_key_refused),
      cmocka_unit_test(test_wrong_server_key_refused),
      cmocka_unit_test(test_listed_client_served),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
