/* A store opened read-only (ps_store_options.read_only), as ps-predict and ps-export open a
 * checkpoint's snapshot: pulls return exactly the rows the writable store had (stored rows) and
 * the initial rows of ps_store_init_row (keys it never stored); declare and push are refused;
 * ps_store_scan visits every stored row once with its values, stops at the callback's status,
 * and refuses a writable store; no file of the snapshot changes, and a missing path is an
 * error rather than a new database. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_hash.h"
#include "ps_store.h"

enum { DIM = 4, NKEYS = 300 };

/* XXH3 of every file's name and bytes in dir, summed (order-free). */
static uint64_t dir_digest(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    sum += ps_hash64(b, (size_t)n, ps_hash64(e->d_name, strlen(e->d_name), 0));
    free(b);
  }
  closedir(d);
  return sum;
}

typedef struct seen {
  uint64_t n, stop_after;
  unsigned char hit[NKEYS + 1];
  const float *want; /* [NKEYS + 1][DIM] by key */
  int bad;
} seen;

static ps_status on_row(void *ctx, uint64_t key, const float *v) {
  seen *s = ctx;
  if (key < 1 || key > NKEYS || s->hit[key]++ || memcmp(v, s->want + key * DIM, DIM * 4)) s->bad++;
  return ++s->n == s->stop_after ? PS_ERR_CONFLICT : PS_OK;
}

static void test_read_only_snapshot(void **st) {
  (void)st;
  char live[128], snap[160];
  snprintf(live, sizeof live, "/tmp/ember-test-store-ro-%d", (int)getpid());
  snprintf(snap, sizeof snap, "%s-snap", live);
  ps_store_options o = {.path = live, .cache_bytes = 8u << 20, .partitions = 2};
  ps_store *s = NULL;
  ps_error e;
  assert_int_equal(ps_store_open(&o, &s, &e), PS_OK);
  ps_table_spec sp;
  ps_table_spec_default(&sp, 7, "t", DIM);
  sp.seed = 9;
  sp.optimizer = PS_OPT_ADAGRAD;
  sp.lr = 0.3f;
  assert_int_equal(ps_store_declare(s, &sp, &e), PS_OK);
  uint64_t keys[NKEYS];
  float g[NKEYS * DIM];
  for (int i = 0; i < NKEYS; i++) {
    keys[i] = (uint64_t)i + 1;
    for (int j = 0; j < DIM; j++) g[i * DIM + j] = 0.01f * (float)(i % 17) - 0.07f * (float)j;
  }
  assert_int_equal(ps_store_push(s, 7, keys, NKEYS, g), PS_OK);
  assert_int_equal(ps_store_push(s, 7, keys, NKEYS / 2, g), PS_OK);
  static float want[(NKEYS + 1) * DIM];
  assert_int_equal(ps_store_pull(s, 7, keys, NKEYS, want + DIM), PS_OK);
  seen sc = {0};
  assert_int_equal(ps_store_scan(s, 7, on_row, &sc, &e), PS_ERR_INVALID); /* writable */
  assert_int_equal(ps_store_snapshot(s, snap, &e), PS_OK);
  ps_store_close(&s);
  uint64_t before = dir_digest(snap);

  ps_store_options ro = {.path = snap, .partitions = 3, .read_only = true};
  assert_int_equal(ps_store_open(&ro, &s, &e), PS_OK);
  /* stored rows as the live store had them; unseen keys at their initial rows */
  uint64_t q[NKEYS + 20];
  for (int i = 0; i < NKEYS + 20; i++) q[i] = (uint64_t)(i + 1) * (i < NKEYS ? 1 : 1000);
  float got[(NKEYS + 20) * DIM], init[DIM];
  assert_int_equal(ps_store_pull(s, 7, q, NKEYS + 20, got), PS_OK);
  assert_memory_equal(got, want + DIM, sizeof(float) * NKEYS * DIM);
  ps_table_spec back;
  assert_int_equal(ps_store_get_spec(s, 7, &back), PS_OK);
  for (int i = NKEYS; i < NKEYS + 20; i++) {
    ps_store_init_row(&back, q[i], init);
    assert_memory_equal(got + i * DIM, init, sizeof init);
  }
  /* writes refused */
  assert_int_equal(ps_store_declare(s, &sp, &e), PS_ERR_INVALID);
  assert_int_equal(ps_store_push(s, 7, keys, 4, g), PS_ERR_INVALID);
  /* scan: every row once, values equal; a callback's status stops it */
  sc = (seen){.want = want};
  assert_int_equal(ps_store_scan(s, 7, on_row, &sc, &e), PS_OK);
  assert_int_equal(sc.n, NKEYS);
  assert_int_equal(sc.bad, 0);
  sc = (seen){.want = want, .stop_after = 10};
  assert_int_equal(ps_store_scan(s, 7, on_row, &sc, &e), PS_ERR_CONFLICT);
  assert_int_equal(sc.n, 10);
  assert_int_equal(ps_store_scan(s, 8, on_row, &sc, &e), PS_ERR_UNKNOWN_TABLE);
  ps_store_close(&s);
  assert_true(dir_digest(snap) == before);

  /* a path that is not there: an error, and nothing created */
  char none[200];
  snprintf(none, sizeof none, "%s-none", live);
  ps_store_options rn = {.path = none, .read_only = true};
  assert_int_not_equal(ps_store_open(&rn, &s, &e), PS_OK);
  assert_int_not_equal(access(none, F_OK), 0);
  assert_int_equal(ps_store_snapshot_remove(snap, NULL), PS_OK);
  assert_int_equal(ps_store_snapshot_remove(live, NULL), PS_OK);
}

PS_TEST_MAIN("store_readonly", NULL, NULL, cmocka_unit_test(test_read_only_snapshot))
