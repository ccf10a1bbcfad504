/* test_gloo: the Gloo collectives of ps_collectives.h across 2 and 3 real processes on
 * 127.0.0.1, bootstrapped through a file-based rendezvous store (a directory; set = write a
 * temp file and rename, get = poll until it exists). Checks: exact sums of integer-valued
 * floats over a multi-segment buffer, bit-identical results of random-float sums on every
 * rank (and close to a double-precision reference), broadcast of an odd byte count, barrier
 * ordering, empty buffers, bad arguments, and a second group on the same store. The parent
 * bounds every wait and kills its children by PID. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_collectives.h"
#include "ps_hash.h"

/* ---------- file store ---------- */

typedef struct fstore {
  char dir[256];
} fstore;

static void key_path(const fstore *s, const char *key, char *out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "%s/k_", s->dir);
  for (const char *p = key; *p && o + 4 < cap; p++) {
    unsigned char c = (unsigned char)*p;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')
      out[o++] = (char)c;
    else o += (size_t)snprintf(out + o, cap - o, "%%%02x", c);
  }
  out[o] = 0;
}

static ps_status fs_set(void *ctx, const char *key, const void *val, size_t len) {
  fstore *s = ctx;
  char path[1024], tmp[1100];
  key_path(s, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return PS_ERR_IO;
  if (len && fwrite(val, 1, len, f) != len) {
    fclose(f);
    return PS_ERR_IO;
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0) return PS_ERR_IO;
  return PS_OK;
}

static ps_status fs_get(void *ctx, const char *key, void **val, size_t *len, uint32_t timeout_ms) {
  fstore *s = ctx;
  char path[1024];
  key_path(s, key, path, sizeof path);
  for (uint32_t waited = 0;; waited += 2) {
    FILE *f = fopen(path, "rb");
    if (f) {
      fseek(f, 0, SEEK_END);
      long n = ftell(f);
      fseek(f, 0, SEEK_SET);
      *val = malloc((size_t)n + 1);
      *len = fread(*val, 1, (size_t)n, f);
      fclose(f);
      return *len == (size_t)n ? PS_OK : PS_ERR_IO;
    }
    if (waited >= timeout_ms) return PS_ERR_TIMEOUT;
    usleep(2000);
  }
}

/* ---------- one rank ---------- */

#define N_EXACT 1000003u /* ~4 MB: several of Gloo's 1 MiB segments, odd length */
#define N_RAND 300007u
#define N_BCAST 12345u

static float urand(uint64_t seed, uint64_t i) {
  return (float)((double)(ps_mix64(seed * 1000003u + i) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int rank_main(fstore *s, int rank, int world) {
  setenv("EMBER_GLOO_TIMEOUT_S", "30", 1);
  ps_rendezvous rdv = {s, fs_set, fs_get};
  ps_coll *c = NULL, *bad = NULL;
  ps_error err;
  if (ps_coll_create_gloo(&rdv, "t", world, world, "127.0.0.1", &bad, &err) != PS_ERR_INVALID) return 10;
  if (err.code != PS_ERR_INVALID || !strstr(err.msg, "outside a world")) return 13; /* the reason */
  if (ps_coll_create_gloo(&rdv, "t", rank, world, "127.0.0.1", &c, NULL) != PS_OK) return 11;
  if (c->rank != rank || c->world != world || c->kind != PS_COLL_GLOO) return 12;

  /* exact: integer-valued floats, sum known in closed form */
  float *x = malloc(N_EXACT * sizeof(float));
  for (uint32_t i = 0; i < N_EXACT; i++) x[i] = (float)((rank + 1) * (int)(i % 1000));
  if (ps_coll_allreduce_sum(c, x, N_EXACT) != PS_OK) return 13;
  float tri = (float)(world * (world + 1) / 2);
  for (uint32_t i = 0; i < N_EXACT; i++)
    if (x[i] != tri * (float)(i % 1000)) return 14;
  free(x);

  /* random floats: bit-identical everywhere (hash compared by the parent), close to double */
  float *y = malloc(N_RAND * sizeof(float));
  for (uint32_t i = 0; i < N_RAND; i++) y[i] = urand((uint64_t)rank + 1, i);
  if (ps_coll_allreduce_sum(c, y, N_RAND) != PS_OK) return 15;
  for (uint32_t i = 0; i < N_RAND; i++) {
    double ref = 0;
    for (int r = 0; r < world; r++) ref += urand((uint64_t)r + 1, i);
    if (fabs((double)y[i] - ref) > 1e-6 * world) return 16;
  }
  uint64_t h = ps_hash64(y, N_RAND * sizeof(float), 1);
  free(y);
  char hv[32];
  snprintf(hv, sizeof hv, "%016llx", (unsigned long long)h);
  char key[32];
  snprintf(key, sizeof key, "result/%d", rank);
  if (fs_set(s, key, hv, strlen(hv)) != PS_OK) return 17;

  /* broadcast from the last rank, odd byte count */
  unsigned char *bb = calloc(N_BCAST, 1);
  int root = world - 1;
  if (rank == root)
    for (uint32_t i = 0; i < N_BCAST; i++) bb[i] = (unsigned char)(i * 7 + 3);
  if (ps_coll_broadcast(c, bb, N_BCAST, root) != PS_OK) return 18;
  for (uint32_t i = 0; i < N_BCAST; i++)
    if (bb[i] != (unsigned char)(i * 7 + 3)) return 19;
  if (ps_coll_broadcast(c, bb, 1, world) != PS_ERR_INVALID) return 20;
  free(bb);

  /* barrier: every rank's marker exists after it */
  snprintf(key, sizeof key, "before-barrier/%d", rank);
  usleep((useconds_t)(rank * 100000)); /* late ranks make an early exit visible */
  if (fs_set(s, key, "x", 1) != PS_OK) return 21;
  if (ps_coll_barrier(c) != PS_OK) return 22;
  for (int r = 0; r < world; r++) {
    char p[1024];
    snprintf(key, sizeof key, "before-barrier/%d", r);
    key_path(s, key, p, sizeof p);
    if (access(p, F_OK) != 0) return 23;
  }

  /* empty buffer is a no-op */
  if (ps_coll_allreduce_sum(c, NULL, 0) != PS_OK) return 24;

  /* a second group on the same store, other prefix */
  ps_coll *c2 = NULL;
  if (ps_coll_create_gloo(&rdv, "second", rank, world, "127.0.0.1", &c2, NULL) != PS_OK) return 25;
  float v = (float)rank;
  if (ps_coll_allreduce_sum(c2, &v, 1) != PS_OK) return 26;
  if (v != (float)(world * (world - 1) / 2)) return 27;
  ps_coll_destroy(&c2);
  if (c2 != NULL) return 28;

  if (ps_coll_barrier(c) != PS_OK) return 29;
  ps_coll_destroy(&c);
  return 0;
}

/* ---------- parent ---------- */

static void run_world(int world) {
  fstore s;
  snprintf(s.dir, sizeof s.dir, "/tmp/ember-gloo-XXXXXX");
  assert_non_null(mkdtemp(s.dir));
  pid_t pids[8];
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) _exit(rank_main(&s, r, world));
  }
  int status[8], done = 0;
  for (int r = 0; r < world; r++) status[r] = -1;
  for (int waited_ms = 0; done < world && waited_ms < 60000; waited_ms += 10) {
    for (int r = 0; r < world; r++) {
      if (status[r] != -1) continue;
      int stv;
      if (waitpid(pids[r], &stv, WNOHANG) == pids[r]) {
        status[r] = WIFEXITED(stv) ? WEXITSTATUS(stv) : 128 + WTERMSIG(stv);
        done++;
      }
    }
    if (done < world) usleep(10000);
  }
  for (int r = 0; r < world; r++)
    if (status[r] == -1) { /* bounded wait: kill the straggler by its PID */
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
      status[r] = 999;
    }
  for (int r = 0; r < world; r++) {
    if (status[r]) fprintf(stderr, "world %d rank %d: exit %d\n", world, r, status[r]);
    assert_int_equal(status[r], 0);
  }
  /* bit-identical random sums on every rank */
  char first[64] = "";
  for (int r = 0; r < world; r++) {
    char key[32];
    snprintf(key, sizeof key, "result/%d", r);
    void *v;
    size_t n;
    assert_int_equal(fs_get(&s, key, &v, &n, 0), PS_OK);
    char hv[64];
    snprintf(hv, sizeof hv, "%.*s", (int)n, (char *)v);
    free(v);
    if (r == 0) strcpy(first, hv);
    assert_string_equal(hv, first);
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", s.dir);
  assert_int_equal(system(cmd), 0);
}

static void test_world2(void **st) {
  (void)st;
  run_world(2);
}
static void test_world3(void **st) {
  (void)st;
  run_world(3);
}
static void test_world1(void **st) {
  (void)st;
  run_world(1);
}

PS_TEST_MAIN("gloo", NULL, NULL,
  cmocka_unit_test(test_world1),
  cmocka_unit_test(test_world2),
  cmocka_unit_test(test_world3))
