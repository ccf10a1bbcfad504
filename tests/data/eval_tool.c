/* eval_tool: test helper for test_eval_sklearn.py. Reads "p y" lines from argv[1], computes
 * the metrics of ps_metrics_eval three ways (one accumulator; K accumulators merged; K
 * threads acting as ranks through ps_eval_allgather over an in-process allreduce) and
 * prints them as JSON for comparison with scikit-learn. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_metrics_eval.h"

#define K 3

/* In-process allreduce across K threads: each adds its buffer into a shared sum, then
 * copies the sum back; two barriers delimit the phases. */
typedef struct world {
  pthread_barrier_t bar;
  pthread_mutex_t mu;
  float *sum;
  size_t n;
} world;

typedef struct rank_arg {
  world *w;
  int rank;
  ps_eval *e;
  ps_status st;
} rank_arg;

static ps_status fake_allreduce(void *ctx, float *buf, size_t n) {
  rank_arg *a = ctx;
  world *w = a->w;
  if (pthread_barrier_wait(&w->bar) == PTHREAD_BARRIER_SERIAL_THREAD) {
    free(w->sum);
    w->sum = calloc(n + 1, sizeof(float));
    w->n = n;
  }
  pthread_barrier_wait(&w->bar);
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < n; i++) w->sum[i] += buf[i];
  pthread_mutex_unlock(&w->mu);
  pthread_barrier_wait(&w->bar);
  memcpy(buf, w->sum, n * sizeof(float));
  pthread_barrier_wait(&w->bar);
  return PS_OK;
}

static void *rank_main(void *p) {
  rank_arg *a = p;
  a->st = ps_eval_allgather(a->e, fake_allreduce, a, a->rank, K);
  return NULL;
}

static json_t *res_json(const ps_eval *e) {
  ps_eval_result r;
  ps_eval_compute(e, &r);
  return json_pack("{s:f, s:f, s:f, s:I, s:I}", "auc", isnan(r.auc) ? -1.0 : r.auc, "logloss",
                   r.logloss, "accuracy", r.accuracy, "n", (json_int_t)r.n, "positives",
                   (json_int_t)r.positives);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  FILE *f = fopen(argv[1], "r");
  if (!f) return 2;
  size_t n = 0, cap = 1024;
  float *p = malloc(cap * sizeof(float)), *y = malloc(cap * sizeof(float));
  float a, b;
  while (fscanf(f, "%f %f", &a, &b) == 2) {
    if (n == cap) {
      cap *= 2;
      p = realloc(p, cap * sizeof(float));
      y = realloc(y, cap * sizeof(float));
    }
    p[n] = a, y[n] = b, n++;
  }
  fclose(f);
  ps_eval *all, *part[K], *merged;
  ps_eval_create(&all);
  ps_eval_create(&merged);
  if (ps_eval_add(all, p, y, n) != PS_OK) return 3;
  for (int k = 0; k < K; k++) {
    ps_eval_create(&part[k]);
    size_t lo = n * (size_t)k / K, hi = n * (size_t)(k + 1) / K;
    ps_eval_add(part[k], p + lo, y + lo, hi - lo);
    ps_eval_merge(merged, part[k]);
  }
  world w;
  pthread_barrier_init(&w.bar, NULL, K);
  pthread_mutex_init(&w.mu, NULL);
  w.sum = NULL;
  pthread_t th[K];
  rank_arg ra[K];
  for (int k = 0; k < K; k++) {
    ra[k] = (rank_arg){&w, k, part[k], PS_OK};
    pthread_create(&th[k], NULL, rank_main, &ra[k]);
  }
  for (int k = 0; k < K; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < K; k++)
    if (ra[k].st != PS_OK || ps_eval_count(part[k]) != n) return 4;
  json_t *j = json_object();
  json_object_set_new(j, "single", res_json(all));
  json_object_set_new(j, "merged", res_json(merged));
  json_t *g = json_array();
  for (int k = 0; k < K; k++) json_array_append_new(g, res_json(part[k]));
  json_object_set_new(j, "gathered", g);
  json_object_set_new(j, "auc_fn", json_real(ps_eval_auc(p, y, n)));
  char *s = json_dumps(j, JSON_REAL_PRECISION(17));
  puts(s);
  free(s);
  json_decref(j);
  for (int k = 0; k < K; k++) ps_eval_destroy(&part[k]);
  ps_eval_destroy(&all);
  ps_eval_destroy(&merged);
  free(w.sum), free(p), free(y);
  pthread_barrier_destroy(&w.bar);
  pthread_mutex_destroy(&w.mu);
  return 0;
}
