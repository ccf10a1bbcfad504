/* Integration: pull replies written into a reused buffer (ps_server_mem.c's spare, issue 22)
 * stay bit-identical to the rows under concurrent pulls. A ps-server with 2 partition threads;
 * 4 clients on their own threads each pull 40 times, in turn, key sets of their own of 2,100 to
 * 6,000 keys at dim 128 (1.1-3 MB replies, so every reply is a spare candidate, and a smaller
 * one often reuses a larger buffer); between pulls a client pushes a gradient of its own to a
 * few of its keys. Every pull is compared with an in-process reference store that replays the
 * same pushes (same spec: its rows are the servers' bit for bit): a buffer handed to two replies
 * at once, or a reply sent from a buffer still being written, shows as other keys' rows. */
#include <pthread.h>
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

#define DIM 128
#define CLIENTS 4
#define ROUNDS 40
#define MAXK 6000

static pt_group g_cl = {.n = 1, .tag = "reuse", .threads = {2}, .timeout_ms = 60000};
static ps_table_spec g_spec;

typedef struct worker {
  int id;
  ps_store *ref; /* this client's reference: its keys are its own */
  int bad;       /* pulls that differed from the reference, or failed */
} worker;

static uint64_t key_of(int client, int round, size_t i) {
  return ((uint64_t)client << 40) + (uint64_t)(round % 5) * 100000u + i * 7u + 1u;
}

static void *run(void *arg) {
  worker *w = arg;
  ps_client *c = pt_group_client(&g_cl, (uint32_t)w->id);
  uint64_t *keys = malloc(MAXK * sizeof *keys);
  float *got = malloc((size_t)MAXK * DIM * sizeof *got), *want = malloc((size_t)MAXK * DIM * 4);
  float *g = malloc(64 * DIM * sizeof *g);
  if (!keys || !got || !want || !g || ps_client_declare(c, &g_spec, NULL) != PS_OK) {
    w->bad = -1;
    goto out;
  }
  for (int r = 0; r < ROUNDS; r++) {
    size_t n = 2100 + (size_t)((r * 2311 + w->id * 977) % (MAXK - 2100 + 1));
    for (size_t i = 0; i < n; i++) keys[i] = key_of(w->id, r, i);
    for (size_t i = 0; i < 64 * DIM; i++) g[i] = (float)((int)((i + (size_t)r) % 13) - 6) * 0.01f;
    ps_error err = {0};
    if (ps_client_push(c, 1, 0, keys, 64, g, &err) != PS_OK ||
        ps_store_push(w->ref, 1, keys, 64, g) != PS_OK ||
        ps_client_pull(c, 1, 0, keys, n, got, &err) != PS_OK ||
        ps_store_pull(w->ref, 1, keys, n, want) != PS_OK) {
      fprintf(stderr, "# client %d round %d: %s\n", w->id, r, err.msg);
      w->bad++;
    } else if (memcmp(got, want, n * DIM * sizeof *got) != 0) {
      w->bad++;
    }
  }
out:
  ps_client_destroy(&c);
  free(keys);
  free(got);
  free(want);
  free(g);
  return NULL;
}

static void test_concurrent_pulls(void **st) {
  (void)st;
  worker w[CLIENTS];
  pthread_t th[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    char name[16];
    snprintf(name, sizeof name, "ref%d", i);
    w[i] = (worker){.id = i, .ref = pt_ref_store(g_cl.dir, name, (size_t)256 << 20, &g_spec)};
    assert_non_null(w[i].ref);
  }
  for (int i = 0; i < CLIENTS; i++) assert_int_equal(pthread_create(&th[i], NULL, run, &w[i]), 0);
  for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < CLIENTS; i++) {
    printf("# client %d: %d of %d pulls differed or failed\n", i, w[i].bad, ROUNDS);
    assert_int_equal(w[i].bad, 0);
    ps_store_close(&w[i].ref);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ps_table_spec_default(&g_spec, 1, "reuse", DIM);
  g_spec.optimizer = PS_OPT_ADAGRAD;
  g_spec.lr = 0.05f;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_concurrent_pulls)};
  return pt_group_run(&g_cl, tests, 1);
}
