/* lib_bench: pull/push keys/s through libember's C API (ember.h), the C half of the
 * Python-vs-C comparison (lib_bench.py is the Python half, the same workload through the
 * `ember` package; run.sh interleaves them against one server).
 *
 * Workload: table dim D (SGD), CALLS calls of KEYS keys drawn uniformly from KEYSPACE keys
 * (prepopulated by one push first), one call at a time (the blocking API, as a training loop
 * uses it). Prints one line: "c pull|push keys=K dim=D calls=N keys/s=X us/call=Y cpu_us/call=Z" (Z: this process's CPU
 * time per call, which the machine's load disturbs less than wall time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember.h"

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int main(int argc, char **argv) {
  if (argc != 7 || (strcmp(argv[2], "pull") && strcmp(argv[2], "push"))) {
    fprintf(stderr, "usage: lib_bench URL pull|push KEYS DIM CALLS KEYSPACE\n");
    return 2;
  }
  const char *url = argv[1];
  int pull = !strcmp(argv[2], "pull");
  size_t nk = strtoul(argv[3], NULL, 10), calls = strtoul(argv[5], NULL, 10);
  uint32_t dim = (uint32_t)strtoul(argv[4], NULL, 10);
  uint64_t space = strtoull(argv[6], NULL, 10);
  if (!nk || !dim || !calls || !space) {
    fprintf(stderr, "lib_bench: KEYS, DIM, CALLS and KEYSPACE must be positive\n");
    return 2;
  }
  ember_client *c = NULL;
  ember_error err = {0};
  char opts[64];
  snprintf(opts, sizeof opts, "optimizer=sgd,lr=0.001,init=0.01");
  size_t pre = space > nk ? space : nk;
  uint64_t *keys = malloc(sizeof *keys * pre);
  float *rows = calloc(pre * dim, sizeof *rows);
  int rc = 1;
  if (!keys || !rows) goto out;
  if (ember_client_open(url, "timeout_ms=60000", &c, &err) ||
      ember_table_declare(c, 77, "lib_bench", dim, opts, &err))
    goto fail;
  for (uint64_t i = 0; i < space; i++) keys[i] = i;
  if (ember_push(c, 77, keys, space, rows, &err)) goto fail;
  uint64_t s = 1;
  double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  for (size_t i = 0; i < calls; i++) {
    for (size_t j = 0; j < nk; j++) keys[j] = rng_next(&s) % space;
    int st = pull ? ember_pull(c, 77, keys, nk, rows, &err) : ember_push(c, 77, keys, nk, rows, &err);
    if (st) goto fail;
  }
  double dt = clock_s(CLOCK_MONOTONIC) - t0, dc = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  printf("c %s keys=%zu dim=%u calls=%zu keys/s=%.4g us/call=%.2f cpu_us/call=%.2f\n", argv[2], nk,
         dim, calls, (double)(nk * calls) / dt, 1e6 * dt / (double)calls, 1e6 * dc / (double)calls);
  rc = 0;
  goto out;
fail:
  fprintf(stderr, "lib_bench: %s\n", err.msg);
out:
  ember_client_close(&c);
  free(keys);
  free(rows);
  return rc;
}
