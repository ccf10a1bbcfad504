/* Integration: control operations from a client that is not the job cannot take the job over
 * (issue 18). One real server per test, a "job" client that declares, pushes and checkpoints,
 * and an "attacker" client on its own connection:
 *  - checkpoint paths are confined: '..', a symlink out of the data dir, an absolute path
 *    elsewhere are refused and write nothing there; ps-worker's layout (ROOT/step-N/shards)
 *    pins ROOT on the first checkpoint, the pin survives a restart, --checkpoint-root sets it;
 *  - RESTORE while the job's connection trains is refused (rows unchanged); once it closed, a
 *    restore (a resuming job) works;
 *  - a CHECKPOINT from another connection while the job's prepare awaits its commit is
 *    refused (it would drop, abort or commit the job's prepare);
 *  - a JOIN and a barrier with another world held open before the job do not stop it (the
 *    job's JOINs and barrier go through), and a JOIN under a running member's name is refused;
 *  - a table declared with another spec before the job (or between the job's declaration and
 *    its first use) does not stop it: the first user's own declaration goes into the store,
 *    and the other declarer is refused until it declares that spec;
 *  - KV_SET of ember/checkpoint/latest must name the checkpoint shard 0 committed, and other
 *    ember/ keys need a rank;
 *  - a KV flood stops at the per-client quota, far below the store's 64 MiB.
 * Each check names what the server before issue 18 did instead. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
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
#include "pt_cluster.h"

#define DIM 4
#define TAB 1
#define N 8

typedef struct fx {
  char dir[1024]; /* canonical temp dir */
  char data[1200];
  pt_server s;
  ps_client *job, *evil;
  uint64_t k[N];
} fx;

static ps_client *client_of(const pt_server *s) {
  ps_client *c = pt_client(s, 1, 0, 10000);
  assert_non_null(c);
  return c;
}

static void start(fx *f, const char *tag, const char *const *extra) {
  assert_true(pt_start_args(&f->s, 0, 1, f->data, 0, 1, extra));
  f->job = client_of(&f->s);
  f->evil = client_of(&f->s);
  (void)tag;
}

/* The job's table (a client must declare what it pulls). */
static void declare(ps_client *c) {
  ps_table_spec t;
  ps_table_spec_default(&t, TAB, "emb", DIM);
  t.lr = 1.0f;
  t.optimizer = PS_OPT_SGD;
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
}

/* A server on DIR/data/s0 (one level deeper, so that '../..' stays in DIR), a table, a push. */
static void setup(fx *f, const char *tag, const char *const *extra) {
  memset(f, 0, sizeof *f);
  char tmp[512];
  pt_tmpdir(tag, tmp);
  char real[PATH_MAX];
  assert_non_null(realpath(tmp, real));
  assert_true(strlen(real) < 900);
  snprintf(f->dir, sizeof f->dir, "%s", real);
  snprintf(f->data, sizeof f->data, "%s/data/s0", f->dir);
  start(f, tag, extra);
  declare(f->job);
  for (int i = 0; i < N; i++) f->k[i] = 100 + (uint64_t)i;
}

static void push(fx *f, float g) {
  float v[N * DIM];
  for (int i = 0; i < N * DIM; i++) v[i] = g;
  assert_int_equal(ps_client_push(f->job, TAB, 0, f->k, N, v, NULL), PS_OK);
}

static float row0(fx *f) {
  float v[N * DIM];
  assert_int_equal(ps_client_pull(f->job, TAB, 0, f->k, N, v, NULL), PS_OK);
  return v[0];
}

/* A graceful stop must exit 0: on the ASan build that includes no leaks in what the refused
 * and accepted control operations did in the server. */
static void teardown(fx *f) {
  ps_client_destroy(&f->job);
  ps_client_destroy(&f->evil);
  assert_int_equal(pt_stop(&f->s, SIGTERM, 20000), 0);
  pt_rmrf(f->dir);
}

static bool exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool exists(const char *fmt, ...) {
  char p[PATH_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p, sizeof p, fmt, ap);
  va_end(ap);
  return access(p, F_OK) == 0;
}

static void mkdirs(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mkdirs(const char *fmt, ...) {
  char p[PATH_MAX + 256], cmd[PATH_MAX + 300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p, sizeof p, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
  assert_int_equal(system(cmd), 0);
}

/* DIR/NAME: a symlink to the directory TDIR/TNAME, made first. */
static void link_to(const char *dir, const char *name, const char *tdir, const char *tname) {
  char link[PATH_MAX + 64], target[PATH_MAX + 64];
  snprintf(target, sizeof target, "%s/%s", tdir, tname);
  mkdirs("%s", target);
  snprintf(link, sizeof link, "%s/%s", dir, name);
  assert_int_equal(symlink(target, link), 0);
}

/* The checkpoint is refused with PS_ERR_INVALID and a message containing needle. */
static void refused(ps_client *c, uint64_t step, const char *path, const char *needle) {
  ps_error e;
  ps_status st = ps_client_checkpoint(c, step, path, &e);
  if (st != PS_ERR_INVALID || !strstr(e.msg, needle))
    fail_msg("checkpoint '%s': status %d '%s' (want refused, '%s')", path, (int)st,
             st == PS_OK ? "" : e.msg, needle);
}

static void test_path_dotdot(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-dotdot", NULL);
  push(&f, 1.0f);
  /* Before: wrote DIR/escape-ckpt/shard-0 (outside the data dir DIR/data/s0). */
  refused(f.evil, 1, "../../escape-ckpt", "'..' is not allowed");
  refused(f.evil, 1, "ck/../../../escape-ckpt", "'..' is not allowed");
  assert_false(exists("%s/escape-ckpt", f.dir));
  /* ... and RESTORE of such a path is refused the same way. */
  ps_error e;
  uint64_t step = 0;
  assert_int_equal(ps_client_restore(f.evil, "../../escape-ckpt", &step, &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "'..' is not allowed"));
  /* A path inside the data dir is fine. */
  assert_int_equal(ps_client_checkpoint(f.job, 1, "ck1", NULL), PS_OK);
  assert_true(exists("%s/ck1/shard-0.json", f.data));
  teardown(&f);
}

static void test_path_symlink(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-link", NULL);
  push(&f, 1.0f);
  link_to(f.data, "link", f.dir, "outside");
  /* Before: followed the link and wrote DIR/outside/ck/shard-0. */
  refused(f.evil, 1, "link/ck", "is outside data dir");
  assert_false(exists("%s/outside/ck", f.dir));
  /* Through an absolute path too, even one shaped like ps-worker's (it is not canonical). */
  mkdirs("%s/outside/step-1", f.dir);
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/link/step-1/shards", f.data);
  refused(f.evil, 1, p, "is outside data dir");
  assert_false(exists("%s/outside/step-1/shards", f.dir));
  /* A link that stays inside the data dir is followed. */
  link_to(f.data, "in-link", f.data, "inside");
  assert_int_equal(ps_client_checkpoint(f.job, 1, "in-link/ck", NULL), PS_OK);
  assert_true(exists("%s/inside/ck/shard-0.json", f.data));
  teardown(&f);
}

static void test_path_absolute(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-abs", NULL);
  push(&f, 1.0f);
  char p[PATH_MAX + 64];
  /* Before: wrote DIR/elsewhere/ck/shard-0. Not ps-worker's layout: it pins nothing. */
  snprintf(p, sizeof p, "%s/elsewhere/ck", f.dir);
  refused(f.evil, 1, p, "is outside data dir");
  assert_false(exists("%s/elsewhere", f.dir));
  /* A job's first checkpoint in ps-worker's layout pins DIR/job ... */
  mkdirs("%s/job/step-2", f.dir);
  snprintf(p, sizeof p, "%s/job/step-2/shards", f.dir);
  assert_int_equal(ps_client_checkpoint(f.job, 2, p, NULL), PS_OK);
  assert_true(exists("%s/job/step-2/shards/shard-0.json", f.dir));
  /* ... and then another root is refused, even in that layout (before: written). */
  mkdirs("%s/other/step-3", f.dir);
  snprintf(p, sizeof p, "%s/other/step-3/shards", f.dir);
  char needle[PATH_MAX + 64];
  snprintf(needle, sizeof needle, "checkpoint root %s/job", f.dir);
  refused(f.evil, 3, p, needle);
  assert_false(exists("%s/other/step-3/shards", f.dir));
  /* Deeper under the pinned root is fine (no layout needed there). */
  snprintf(p, sizeof p, "%s/job/extra/step-4/shards", f.dir);
  assert_int_equal(ps_client_checkpoint(f.job, 4, p, NULL), PS_OK);
  /* The pin survives a restart. */
  ps_client_destroy(&f.job);
  ps_client_destroy(&f.evil);
  assert_int_equal(pt_stop(&f.s, SIGTERM, 20000), 0);
  start(&f, "ctl-abs", NULL);
  snprintf(p, sizeof p, "%s/other/step-3/shards", f.dir);
  refused(f.evil, 3, p, needle);
  ps_error e;
  uint64_t step = 0;
  assert_int_equal(ps_client_restore(f.evil, p, &step, &e), PS_ERR_INVALID);
  snprintf(p, sizeof p, "%s/job/step-2/shards", f.dir);
  assert_int_equal(ps_client_restore(f.job, p, &step, NULL), PS_OK);
  assert_int_equal(step, 2);
  /* --checkpoint-root replaces the pin. */
  ps_client_destroy(&f.job);
  ps_client_destroy(&f.evil);
  assert_int_equal(pt_stop(&f.s, SIGTERM, 20000), 0);
  char root[PATH_MAX + 16];
  snprintf(root, sizeof root, "%s/other", f.dir);
  const char *extra[] = {"--checkpoint-root", root, NULL};
  start(&f, "ctl-abs", extra);
  snprintf(p, sizeof p, "%s/other/step-3/shards", f.dir);
  assert_int_equal(ps_client_checkpoint(f.job, 3, p, NULL), PS_OK);
  snprintf(p, sizeof p, "%s/job/step-5/shards", f.dir);
  mkdirs("%s/job/step-5", f.dir);
  refused(f.evil, 5, p, "is outside data dir");
  teardown(&f);
}

static void test_restore_rollback(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-restore", NULL);
  push(&f, -5.0f); /* SGD, lr 1: rows start near 0 and move by +5 */
  assert_int_equal(ps_client_checkpoint(f.job, 1, "ck1", NULL), PS_OK);
  const float at_ck1 = row0(&f);
  push(&f, -100.0f);
  const float now = row0(&f);
  assert_true(now - at_ck1 > 99.0f);
  /* Before: the rows went back to the checkpoint's under the running job. */
  ps_error e;
  uint64_t step = 0;
  assert_int_equal(ps_client_restore(f.evil, "ck1", &step, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "a job is training on shard 0"));
  assert_true(row0(&f) == now);
  /* The job's own connection may roll its rows back. */
  assert_int_equal(ps_client_restore(f.job, "ck1", &step, NULL), PS_OK);
  assert_true(row0(&f) == at_ck1);
  push(&f, -100.0f);
  /* Once the job's connection closed, a resuming job restores (the disconnect is seen within
   * a moment: bounded retries). */
  ps_client_destroy(&f.job);
  ps_status st = PS_ERR_CONFLICT;
  for (int i = 0; i < 100 && st == PS_ERR_CONFLICT; i++) {
    st = ps_client_restore(f.evil, "ck1", &step, NULL);
    if (st == PS_ERR_CONFLICT) usleep(50000);
  }
  assert_int_equal(st, PS_OK);
  assert_int_equal(step, 1);
  f.job = client_of(&f.s);
  declare(f.job);
  assert_true(row0(&f) == at_ck1);
  teardown(&f);
}

static void test_checkpoint_hijack(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-ckpt", NULL);
  push(&f, 1.0f);
  ps_error e;
  /* The job's driver between its prepare and its commit. Before: another PREPARE dropped the
   * job's (its commit then failed "no prepared checkpoint"), and an ABORT or early COMMIT of
   * it from anybody went through. */
  assert_int_equal(ps_client_checkpoint_phase(f.job, PS_CKPT_PREPARE, 2, "ck2", NULL), PS_OK);
  assert_int_equal(ps_client_checkpoint_phase(f.evil, PS_CKPT_PREPARE, 9, "ck9", &e),
                   PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "awaits that connection's commit or abort"));
  assert_int_equal(ps_client_checkpoint_phase(f.evil, PS_CKPT_ABORT, 2, "ck2", &e),
                   PS_ERR_CONFLICT);
  assert_int_equal(ps_client_checkpoint_phase(f.evil, PS_CKPT_COMMIT, 2, "ck2", &e),
                   PS_ERR_CONFLICT);
  assert_false(exists("%s/ck9", f.data));
  assert_int_equal(ps_client_checkpoint_phase(f.job, PS_CKPT_COMMIT, 2, "ck2", NULL), PS_OK);
  assert_true(exists("%s/ck2/shard-0.json", f.data));
  /* Nothing awaits a commit: anybody may checkpoint (within the roots). */
  assert_int_equal(ps_client_checkpoint(f.evil, 3, "ck3", NULL), PS_OK);
  /* A driver that died between the phases holds nothing. */
  assert_int_equal(ps_client_checkpoint_phase(f.job, PS_CKPT_PREPARE, 4, "ck4", NULL), PS_OK);
  ps_client_destroy(&f.job);
  ps_status st = PS_ERR_CONFLICT;
  for (int i = 0; i < 100 && st == PS_ERR_CONFLICT; i++) {
    st = ps_client_checkpoint(f.evil, 5, "ck5", NULL);
    if (st == PS_ERR_CONFLICT) usleep(50000);
  }
  assert_int_equal(st, PS_OK);
  teardown(&f);
}

typedef struct barrier_arg {
  ps_client *c;
  uint32_t world, timeout_ms;
  ps_status st;
} barrier_arg;

/* A barrier "ctl" of b's world in a thread of its own. */
static void *barrier_thread(void *p) {
  barrier_arg *b = p;
  b->st = ps_client_barrier(b->c, "ctl", b->world, b->timeout_ms, NULL);
  return NULL;
}

static void test_join_hijack(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-join", NULL);
  ps_client *b = client_of(&f.s), *sq = pt_client(&f.s, 1, 1, 10000); /* rank 1 */
  assert_non_null(sq);
  int r0 = -1, r1 = -1, rx = -1;
  ps_error e;
  /* Before the job: a JOIN with world 3, held open, and a barrier of the job's name in world
   * 3. Before: the cluster's world was 3 from then on, and the job's JOINs were refused. */
  assert_int_equal(ps_client_join(f.evil, 3, -1, "x", &rx, &e), PS_OK);
  barrier_arg sa = {.c = sq, .world = 3, .timeout_ms = 3000}; /* held for 3 s */
  pthread_t sth;
  pthread_create(&sth, NULL, barrier_thread, &sa);
  usleep(200000); /* the squatter's barrier is parked first (not needed to pass: makes it bite) */
  assert_int_equal(ps_client_join(f.job, 2, 0, "wa", &r0, &e), PS_OK);
  assert_int_equal(ps_client_join(b, 2, 1, "wb", &r1, NULL), PS_OK);
  /* While the job runs, neither another world nor a member's name takes a rank of it. Before:
   * a JOIN under a member's name (STATS lists them) took its rank over, and the member's next
   * barrier was refused as "already taken". */
  assert_int_equal(ps_client_join(f.evil, 2, -1, "wb", &rx, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "already taken by worker 'wb'"));
  assert_int_equal(ps_client_join(f.evil, 2, 1, "wb", &rx, &e), PS_ERR_CONFLICT);
  assert_int_equal(ps_client_join(f.evil, 2, -1, "y", &rx, &e), PS_ERR_CONFLICT); /* full */
  char *js = NULL;
  assert_int_equal(ps_client_stats(f.job, 0, &js, NULL), PS_OK);
  assert_non_null(strstr(js, "\"world\":2"));
  free(js);
  barrier_arg a = {.c = f.job, .world = 2, .timeout_ms = 10000};
  pthread_t th;
  pthread_create(&th, NULL, barrier_thread, &a);
  assert_int_equal(ps_client_barrier(b, "ctl", 2, 10000, &e), PS_OK);
  pthread_join(th, NULL);
  assert_int_equal(a.st, PS_OK);
  pthread_join(sth, NULL);
  assert_int_equal(sa.st, PS_ERR_TIMEOUT);
  ps_client_destroy(&b);
  ps_client_destroy(&sq);
  teardown(&f);
}

static ps_table_spec spec_of(uint32_t id, const char *name, float lr) {
  ps_table_spec t;
  ps_table_spec_default(&t, id, name, DIM);
  t.optimizer = PS_OPT_SGD;
  t.lr = lr;
  return t;
}

/* Row 0 of table id after one push of gradient -5 from c (SGD: it moves by 5 lr). */
static float pushed_row(ps_client *c, uint32_t id) {
  float g[N * DIM], v[N * DIM];
  uint64_t k[N];
  for (int i = 0; i < N; i++) k[i] = 500 + (uint64_t)i;
  for (int i = 0; i < N * DIM; i++) g[i] = -5.0f;
  assert_int_equal(ps_client_push(c, id, 0, k, N, g, NULL), PS_OK);
  assert_int_equal(ps_client_pull(c, id, 0, k, N, v, NULL), PS_OK);
  return v[0];
}

static void test_declare_hijack(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-declare", NULL);
  ps_error e;
  /* Before the job: table 2 declared with another learning rate. Before: the job's
   * declaration was refused ("declared again with a different spec") and the job failed. */
  ps_table_spec bad = spec_of(2, "emb2", 9.0f), good = spec_of(2, "emb2", 1.0f);
  assert_int_equal(ps_client_declare(f.evil, &bad, NULL), PS_OK);
  assert_int_equal(ps_client_declare(f.job, &good, &e), PS_OK);
  /* The job's first use puts its own spec in the store: rows move by 5 x lr 1, not lr 9
   * (init is within 0.05 of 0). */
  float v = pushed_row(f.job, 2);
  if (v < 4.9f || v > 5.1f) fail_msg("row 0 of table 2 is %g, want 5 (lr 1)", v);
  /* The squatter is told, rather than served rows of a spec it did not ask for ... */
  float out[N * DIM];
  assert_int_equal(ps_client_pull(f.evil, 2, 0, f.k, N, out, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "another spec than this connection declared"));
  /* ... and a used table keeps its spec, as before. */
  ps_table_spec other = spec_of(2, "emb2", 3.0f);
  assert_int_equal(ps_client_declare(f.evil, &other, &e), PS_ERR_CONFLICT);
  /* Declaring the table's spec makes it a client like any other. */
  ps_client_destroy(&f.evil);
  f.evil = client_of(&f.s);
  assert_int_equal(ps_client_declare(f.evil, &good, NULL), PS_OK);
  assert_int_equal(ps_client_pull(f.evil, 2, 0, f.k, N, out, NULL), PS_OK);
  /* A declaration in the window between the job's and its first use does not win either. */
  ps_table_spec good3 = spec_of(3, "emb3", 1.0f), bad3 = spec_of(3, "emb3", 9.0f);
  assert_int_equal(ps_client_declare(f.job, &good3, NULL), PS_OK);
  assert_int_equal(ps_client_declare(f.evil, &bad3, NULL), PS_OK);
  v = pushed_row(f.job, 3);
  if (v < 4.9f || v > 5.1f) fail_msg("row 0 of table 3 is %g, want 5 (lr 1)", v);
  /* A client does not change its own declaration before use (as before). */
  ps_table_spec t4 = spec_of(4, "emb4", 1.0f), t4b = spec_of(4, "emb4", 2.0f);
  assert_int_equal(ps_client_declare(f.job, &t4, NULL), PS_OK);
  assert_int_equal(ps_client_declare(f.job, &t4b, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "declared again with a different spec"));
  teardown(&f);
}

static void test_kv_reserved(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-kv", NULL);
  push(&f, 1.0f);
  const char *forged = "{\"path\":\"/tmp/forged\",\"shards\":1,\"step\":0}";
  ps_error e;
  /* Before: stored, and a resume reading it went to the forged checkpoint. */
  assert_int_equal(ps_client_kv_set(f.evil, "ember/checkpoint/latest", forged, strlen(forged), &e),
                   PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "last committed (none)"));
  assert_int_equal(ps_client_checkpoint(f.job, 3, "ck3", NULL), PS_OK);
  assert_int_equal(ps_client_kv_set(f.evil, "ember/checkpoint/latest", forged, strlen(forged), &e),
                   PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "step 3 in"));
  uint64_t step = 0;
  char path[256];
  assert_int_equal(ps_client_latest_checkpoint(f.evil, &step, path, sizeof path, NULL), PS_OK);
  assert_int_equal(step, 3);
  assert_string_equal(path, "ck3");
  /* Writing the truth again is harmless, so it is allowed. */
  const char *same = "{\"path\":\"ck3\",\"shards\":1,\"step\":3}";
  assert_int_equal(ps_client_kv_set(f.evil, "ember/checkpoint/latest", same, strlen(same), NULL),
                   PS_OK);
  /* Other ember/ keys need a rank (before: anybody's). */
  assert_int_equal(ps_client_kv_set(f.evil, "ember/train/run-id", "x", 1, &e), PS_ERR_CONFLICT);
  assert_non_null(strstr(e.msg, "holds no rank"));
  int r = -1;
  assert_int_equal(ps_client_join(f.job, 2, 0, "wa", &r, NULL), PS_OK);
  assert_int_equal(ps_client_kv_set(f.job, "ember/train/run-id", "abc", 3, NULL), PS_OK);
  teardown(&f);
}

static void test_kv_flood(void **state) {
  (void)state;
  fx f;
  setup(&f, "ctl-flood", NULL);
  static char val[60000];
  memset(val, 'v', sizeof val);
  ps_error e;
  ps_status st = PS_OK;
  size_t stored = 0;
  char key[32];
  /* Before: went on to the store's 64 MiB ("the rendezvous store is full"). */
  for (int i = 0; i < 2000 && st == PS_OK; i++) {
    snprintf(key, sizeof key, "flood/%d", i);
    st = ps_client_kv_set(f.evil, key, val, sizeof val, &e);
    if (st == PS_OK) stored += sizeof val;
  }
  assert_int_equal(st, PS_ERR_NOMEM);
  if (!strstr(e.msg, "quota")) fail_msg("refused after %zu bytes: %s", stored, e.msg);
  assert_true(stored <= (size_t)8 << 20 && stored > (size_t)7 << 20);
  /* Overwriting its own keys stays possible; so is a small key after freeing room. */
  assert_int_equal(ps_client_kv_set(f.evil, "flood/0", "x", 1, NULL), PS_OK);
  assert_int_equal(ps_client_kv_set(f.evil, "small", "y", 1, NULL), PS_OK);
  /* Too many keys, each small, stop too. */
  st = PS_OK;
  for (int i = 0; i < 5000 && st == PS_OK; i++) {
    snprintf(key, sizeof key, "k/%d", i);
    st = ps_client_kv_set(f.evil, key, "z", 1, &e);
  }
  assert_int_equal(st, PS_ERR_NOMEM);
  assert_non_null(strstr(e.msg, "4096 keys"));
  teardown(&f);
}

PS_TEST_MAIN("control", NULL, NULL,
  cmocka_unit_test(test_path_dotdot),
  cmocka_unit_test(test_path_symlink),
  cmocka_unit_test(test_path_absolute),
  cmocka_unit_test(test_restore_rollback),
  cmocka_unit_test(test_checkpoint_hijack),
  cmocka_unit_test(test_join_hijack),
  cmocka_unit_test(test_declare_hijack),
  cmocka_unit_test(test_kv_reserved),
  cmocka_unit_test(test_kv_flood))
