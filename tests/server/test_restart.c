/* Integration: durability and recovery. 2 servers; a global checkpoint at step 5; more
 * pushes; kill -9 of shard 1 with a pull and a push outstanding; restart on the same data dir and
 * port: the client reconnects by itself and re-sends both; the restarted shard has no record of
 * the push (exactly-once records live in memory) and refuses it clearly ("may or may not have
 * been applied"), and serves the pull the checkpoint's rows
 * while shard 0 keeps its newer rows. SIGTERM of shard 0 is a clean shutdown (exit 0, rows
 * kept as they were, not rolled back); RESTORE brings every shard back to the checkpoint.
 * Recovery guards (one server): a restart on a used data dir says it continues from existing
 * state; a crash recovery whose checkpoint records another step than the data dir names is
 * refused and leaves the dir unclean (every start refuses again); a checkpoint whose directory
 * is named step-N but records another step is not restored; a store whose ember-server.json is
 * gone still refuses to start as another shard, and one with neither record refuses to start.
 * Incremental checkpoints: deltas where the base is the shard's last, crash recovery from one. */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_client.h"
#include "ps_hash.h"
#include "pt_cluster.h"

#define DIM 8
#define N 200

/* A client of the servers at urls with table `table` (dim DIM, lr 0.1) declared. */
static ps_client *connect_declare(const char **urls, size_t n, uint32_t table) {
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 20000;
  ps_client *c = NULL;
  assert_int_equal(ps_client_create(urls, n, &o, &c, NULL), PS_OK);
  ps_table_spec t;
  ps_table_spec_default(&t, table, "emb", DIM);
  t.lr = 0.1f;
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  return c;
}

static void test_restart(void **state) {
  (void)state;
  char dir[512], d0[600], d1[600];
  pt_tmpdir_s0("restart", dir, d0);
  snprintf(d1, sizeof d1, "%s/s1", dir);
  pt_server s[2];
  assert_true(pt_start(&s[0], 0, 2, d0, 0, 2));
  assert_true(pt_start(&s[1], 1, 2, d1, 0, 2));
  const char *urls[2] = {s[0].url, s[1].url};
  ps_client *c = connect_declare(urls, 2, 5);

  uint64_t k[N];
  float g[N * DIM];
  int on1 = 0;
  for (int i = 0; i < N; i++) {
    k[i] = 7000 + (uint64_t)i * 31;
    on1 += ps_shard_of(k[i], 2) == 1;
  }
  assert_true(on1 > 20 && on1 < N - 20);
  for (int i = 0; i < N * DIM; i++) g[i] = 0.5f + (float)(i % 13) * 0.1f;
  assert_int_equal(ps_client_push(c, 5, 4, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint(c, 5, "ck5", NULL), PS_OK);
  float at_ckpt[N * DIM], after[N * DIM], got[N * DIM];
  assert_int_equal(ps_client_pull(c, 5, 5, k, N, at_ckpt, NULL), PS_OK);
  /* The checkpoint is committed at the coordinator. */
  void *v = NULL;
  size_t vl = 0;
  assert_int_equal(ps_client_kv_get(c, "ember/checkpoint/latest", &v, &vl, 1000, NULL), PS_OK);
  char *vs = calloc(1, vl + 1);
  memcpy(vs, v, vl);
  assert_non_null(strstr(vs, "\"step\":5"));
  free(vs);
  free(v);
  uint64_t lstep = 0;
  char lpath[64];
  assert_int_equal(ps_client_latest_checkpoint(c, &lstep, lpath, sizeof lpath, NULL), PS_OK);
  assert_int_equal(lstep, 5);
  assert_string_equal(lpath, "ck5");
  /* A second checkpoint into the same place is refused, clearly. */
  assert_int_equal(ps_client_checkpoint(c, 5, "ck5", NULL), PS_ERR_CONFLICT);

  assert_int_equal(ps_client_push(c, 5, 5, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_pull(c, 5, 6, k, N, after, NULL), PS_OK);
  assert_true(fabsf(after[0] - at_ckpt[0]) > 1e-3f);

  /* Freeze shard 1 so that a pull and a push are outstanding on it, then kill -9 it: both wait
   * for it to come back and are re-sent; the restarted shard cannot tell whether it applied the
   * push and says so. */
  uint64_t k1[8];
  int n1 = 0;
  for (int i = 0; i < N && n1 < 8; i++)
    if (ps_shard_of(k[i], 2) == 1) k1[n1++] = k[i];
  kill(s[1].pid, SIGSTOP);
  ps_client_req *r = NULL, *pr = NULL;
  assert_int_equal(ps_client_pull_start(c, 5, 6, k, N, false, got, &r, NULL), PS_OK);
  assert_int_equal(ps_client_push_start(c, 5, 6, k1, (size_t)n1, false, g, &pr, NULL), PS_OK);
  bool done = true;
  assert_int_equal(ps_client_ready(c, r, 200, &done, NULL), PS_OK);
  assert_false(done);
  assert_int_equal(pt_stop(&s[1], SIGKILL, 5000), 128 + SIGKILL);
  ps_error e;
  assert_int_equal(ps_client_ready(c, r, 300, &done, NULL), PS_OK);
  assert_false(done);
  assert_int_equal(ps_client_ready(c, pr, 0, &done, NULL), PS_OK);
  assert_false(done);
  assert_true(pt_start(&s[1], 1, 2, d1, s[1].port, 2));
  assert_int_equal(ps_client_wait(c, &pr, &e), PS_ERR_UNAVAILABLE);
  assert_non_null(strstr(e.msg, "no record"));
  assert_non_null(strstr(e.msg, "may or may not"));
  assert_non_null(strstr(e.msg, s[1].url));
  assert_int_equal(ps_client_wait(c, &r, NULL), PS_OK);
  for (int i = 0; i < N; i++) {
    const float *want = ps_shard_of(k[i], 2) == 1 ? at_ckpt : after;
    for (int d = 0; d < DIM; d++) assert_true(fabsf(got[i * DIM + d] - want[i * DIM + d]) < 1e-6f);
  }
  uint64_t disc = 0, resent = 0;
  ps_client_counters(c, &disc, &resent);
  assert_true(disc >= 1);

  /* SIGTERM: graceful, exit 0; restart keeps the newest rows (no roll-back). */
  assert_int_equal(pt_stop(&s[0], SIGTERM, 15000), 0);
  assert_true(pt_start(&s[0], 0, 2, d0, s[0].port, 2));
  assert_int_equal(ps_client_pull(c, 5, 6, k, N, got, NULL), PS_OK);
  for (int i = 0; i < N; i++) {
    const float *want = ps_shard_of(k[i], 2) == 1 ? at_ckpt : after;
    for (int d = 0; d < DIM; d++) assert_true(fabsf(got[i * DIM + d] - want[i * DIM + d]) < 1e-6f);
  }
  /* RESTORE brings every shard back to the checkpoint. */
  uint64_t step = 0;
  assert_int_equal(ps_client_restore(c, "ck5", &step, NULL), PS_OK);
  assert_int_equal(step, 5);
  assert_int_equal(ps_client_pull(c, 5, 5, k, N, got, NULL), PS_OK);
  for (int i = 0; i < N * DIM; i++) assert_true(fabsf(got[i] - at_ckpt[i]) < 1e-6f);
  /* A server refuses a data dir of another shard. */
  pt_server wrong;
  assert_false(pt_start(&wrong, 0, 2, d1, 0, 1));

  ps_client_destroy(&c);
  pt_stop(&s[0], SIGKILL, 5000);
  pt_stop(&s[1], SIGKILL, 5000);
  pt_rmrf(dir);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 20);
  size_t n = fread(buf, 1, (1 << 20) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static bool file_has(const char *path, const char *needle) {
  char *t = slurp(path);
  bool yes = t && strstr(t, needle);
  free(t);
  return yes;
}

/* Replaces the first `from` in the file by `to`. */
static void file_edit(const char *path, const char *from, const char *to) {
  char *t = slurp(path);
  assert_non_null(t);
  char *at = strstr(t, from);
  assert_non_null(at);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite(t, 1, (size_t)(at - t), f);
  fputs(to, f);
  fputs(at + strlen(from), f);
  fclose(f);
  free(t);
}

static void test_recovery_guards(void **state) {
  (void)state;
  char dir[512], d[600], logf[700], meta[700], ckmeta[700], ident[700];
  pt_tmpdir_s0("guards", dir, d);
  snprintf(logf, sizeof logf, "%s.log", d);
  snprintf(meta, sizeof meta, "%s/ember-server.json", d);
  snprintf(ckmeta, sizeof ckmeta, "%s/ck/shard-0.json", d);
  snprintf(ident, sizeof ident, "%s/store/EMBER-SHARD", d);
  pt_server s;
  assert_true(pt_start(&s, 0, 1, d, 0, 1));
  ps_client *c = pt_client(&s, 1, 0, 20000);
  assert_non_null(c);
  ps_table_spec t;
  ps_table_spec_default(&t, 3, "emb", DIM);
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  uint64_t k[4] = {1, 2, 3, 4};
  float g[4 * DIM];
  for (int i = 0; i < 4 * DIM; i++) g[i] = 1.0f;
  assert_int_equal(ps_client_push(c, 3, 0, k, 4, g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint(c, 3, "ck", NULL), PS_OK);
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 15000), 0);
  assert_false(file_has(logf, "continuing from the existing state"));

  /* A restart on the used data dir says so. */
  assert_true(pt_start(&s, 0, 1, d, 0, 1));
  assert_true(file_has(logf, "continuing from the existing state in"));
  assert_true(file_has(logf, "1 tables, about "));
  assert_true(file_has(logf, "last checkpoint at step 3"));
  assert_int_equal(pt_stop(&s, SIGKILL, 5000), 128 + SIGKILL);

  /* The checkpoint's own metadata now says step 7, the data dir says 3: refused, and the data
   * dir stays unclean, so the next start refuses again instead of serving the store as is. */
  file_edit(ckmeta, "\"step\": 3", "\"step\": 7");
  pt_server bad;
  assert_false(pt_start(&bad, 0, 1, d, 0, 1));
  assert_true(file_has(logf, "records step 7"));
  assert_true(file_has(meta, "\"clean\": false"));
  assert_false(pt_start(&bad, 0, 1, d, 0, 1));
  assert_true(file_has(meta, "\"clean\": false"));
  file_edit(ckmeta, "\"step\": 7", "\"step\": 3");
  assert_true(pt_start(&s, 0, 1, d, 0, 1));

  /* A checkpoint taken at step 7 in a directory named step-20 is not restored as either. */
  c = pt_client(&s, 1, 0, 20000);
  assert_non_null(c);
  assert_int_equal(ps_client_checkpoint(c, 7, "step-20", NULL), PS_OK);
  uint64_t got = 0;
  ps_error e;
  assert_int_equal(ps_client_restore(c, "step-20", &got, &e), PS_ERR_CORRUPT);
  assert_non_null(strstr(e.msg, "records step 7"));
  assert_non_null(strstr(e.msg, "named step-20"));
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 15000), 0);

  /* ember-server.json lost: the store still knows its shard. */
  assert_true(file_has(ident, "\"shards\": 1"));
  unlink(meta);
  assert_false(pt_start(&bad, 1, 2, d, 0, 1));
  assert_true(file_has(logf, "holds the store of shard 0 of 1"));
  assert_true(pt_start(&s, 0, 1, d, 0, 1));
  assert_int_equal(pt_stop(&s, SIGTERM, 15000), 0);
  /* Neither record: nobody can tell whose rows these are. */
  unlink(meta);
  unlink(ident);
  assert_false(pt_start(&bad, 0, 1, d, 0, 1));
  assert_true(file_has(logf, "its shard cannot be known"));
  pt_rmrf(dir);
  unlink(logf);
}

/* Incremental checkpoints through the server: a prepare naming the shard's last checkpoint
 * writes a delta (shard-0.json says so), one naming another writes a full one; a kill -9
 * after more pushes recovers the delta's rows (its chain composed); the recovered delta is the
 * next delta's base. */
static bool says_delta(const char *d, const char *ck, bool delta) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s/shard-0.json", d, ck);
  return file_has(p, delta ? "\"delta\": true" : "\"delta\": false");
}

/* N keys from `first` (stride apart) and their gradients, g0 + (i % mod) / 10. */
static void keys_grads(uint64_t *k, float *g, uint64_t first, uint64_t stride, float g0, int mod) {
  for (int i = 0; i < N; i++) k[i] = first + (uint64_t)i * stride;
  for (int i = 0; i < N * DIM; i++) g[i] = g0 + (float)(i % mod) * 0.1f;
}

static void test_delta_recovery(void **state) {
  (void)state;
  char dir[512], d[600];
  pt_server s;
  assert_true(pt_start_s0(&s, "delta", dir, d, 1, 2));
  const char *urls[1] = {s.url};
  ps_client *c = connect_declare(urls, 1, 3);
  uint64_t k[N];
  float g[N * DIM], at2[N * DIM], got[N * DIM];
  keys_grads(k, g, 900, 17, 0.25f, 11);
  assert_int_equal(ps_client_push(c, 3, 1, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint_delta(c, 1, "ck1", "ck1", 8, NULL), PS_OK);
  assert_true(says_delta(d, "ck1", false)); /* no last checkpoint yet: full */
  assert_int_equal(ps_client_push(c, 3, 2, k, N / 4, g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint_delta(c, 2, "ck2", "ck1", 8, NULL), PS_OK);
  assert_true(says_delta(d, "ck2", true));
  assert_int_equal(ps_client_pull(c, 3, 2, k, N, at2, NULL), PS_OK);
  assert_int_equal(ps_client_push(c, 3, 3, k, N, g, NULL), PS_OK);
  assert_int_equal(pt_stop(&s, SIGKILL, 5000), 128 + SIGKILL);
  assert_true(pt_start(&s, 0, 1, d, s.port, 2));
  assert_int_equal(ps_client_pull(c, 3, 2, k, N, got, NULL), PS_OK);
  assert_memory_equal(got, at2, sizeof got);
  assert_int_equal(ps_client_push(c, 3, 3, k, 3, g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint_delta(c, 3, "ck3", "ck2", 8, NULL), PS_OK);
  assert_true(says_delta(d, "ck3", true));
  /* a base that is not the shard's last checkpoint, or a chain at its length: full */
  assert_int_equal(ps_client_checkpoint_delta(c, 4, "ck4", "ck1", 8, NULL), PS_OK);
  assert_true(says_delta(d, "ck4", false));
  assert_int_equal(ps_client_checkpoint_delta(c, 5, "ck5", "ck4", 8, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint_delta(c, 6, "ck6", "ck5", 2, NULL), PS_OK);
  assert_true(says_delta(d, "ck5", true) && says_delta(d, "ck6", false));
  ps_client_destroy(&c);
  pt_stop(&s, SIGKILL, 5000);
  pt_rmrf(dir);
}

/* A relative --data-dir: the checkpoint's root was recorded relative and resolved against the
 * data dir again by the crash recovery (DIR/DIR/checkpoints/...), so after a kill -9 the
 * shard never started again. */
static void test_relative_data_dir(void **state) {
  (void)state;
  char dir[512], cwd[4096];
  pt_tmpdir("reldd", dir);
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(dir), 0);
  assert_int_equal(mkdir("relt", 0755), 0); /* for the server's log, relt/d.log */
  pt_server s;
  bool up = pt_start(&s, 0, 1, "relt/d", 0, 2);
  assert_int_equal(chdir(cwd), 0); /* the server keeps the one it started in */
  assert_true(up);
  ps_client *c = connect_declare((const char *[]){s.url}, 1, 3);
  uint64_t k[N];
  float g[N * DIM], at1[N * DIM], got[N * DIM];
  keys_grads(k, g, 700, 13, 0.5f, 7);
  assert_int_equal(ps_client_push(c, 3, 0, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint(c, 1, NULL, NULL), PS_OK);
  assert_int_equal(ps_client_pull(c, 3, 1, k, N, at1, NULL), PS_OK);
  assert_int_equal(ps_client_push(c, 3, 1, k, N, g, NULL), PS_OK);
  assert_int_equal(pt_stop(&s, SIGKILL, 5000), 128 + SIGKILL);
  assert_int_equal(chdir(dir), 0);
  up = pt_start(&s, 0, 1, "relt/d", s.port, 2);
  assert_int_equal(chdir(cwd), 0);
  assert_true(up); /* it refused to start: "checkpoint metadata relt/d/relt/d/checkpoints/..." */
  assert_int_equal(ps_client_pull(c, 3, 1, k, N, got, NULL), PS_OK);
  assert_memory_equal(got, at1, sizeof got);
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 20000), 0);
  pt_rmrf(dir);
}

PS_TEST_MAIN("restart", NULL, NULL,
  cmocka_unit_test(test_restart),
  cmocka_unit_test(test_recovery_guards),
  cmocka_unit_test(test_delta_recovery),
  cmocka_unit_test(test_relative_data_dir))
