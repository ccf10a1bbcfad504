/* ps_metrics_series: the series of a family (one set of label values) and their updates.
 *
 * A series is looked up or created once under the registry lock and then updated through its
 * handle without it: counters and gauges are relaxed C11 atomics (a double kept as its bit
 * pattern, added by compare-and-swap, since C11 has no atomic double add), histograms a
 * ps_hist under the series' own small mutex. The number of series per family is capped
 * (PS_METRICS_MAX_SERIES) so that an unbounded label value cannot exhaust memory. */
#include "ps_metrics_int.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- series ---------------------------------------------------------------------------- */

void ps_metrics_series_free(ps_series *s) {
  if (!s) return;
  for (size_t i = 0; i < PS_METRICS_MAX_LABELS; i++) free(s->values[i]);
  if (s->hist) {
    pthread_mutex_destroy(&s->lock);
    ps_hist_destroy(&s->hist);
  }
  free(s);
}

static bool labels_match(const ps_series *s, const char *const *values, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(s->values[i], values[i]) != 0) return false;
  return true;
}

ps_status ps_metric_series(ps_metric *f, const char *const *values, ps_series **out) {
  if (out) *out = NULL;
  if (!f || !out || (f->nlabels && !values)) return PS_ERR_INVALID;
  for (size_t i = 0; i < f->nlabels; i++)
    if (!values[i]) return PS_ERR_INVALID;
  ps_metrics *m = f->reg;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < f->nseries; i++) {
    if (labels_match(f->series[i], values, f->nlabels)) {
      *out = f->series[i];
      pthread_mutex_unlock(&m->lock);
      return PS_OK;
    }
  }
  ps_status st = PS_OK;
  ps_series *s = NULL;
  if (f->nseries >= PS_METRICS_MAX_SERIES) {
    st = PS_ERR_NOMEM;
    goto done;
  }
  if (f->nseries == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8;
    ps_series **p = realloc(f->series, cap * sizeof *p);
    if (!p) {
      st = PS_ERR_NOMEM;
      goto done;
    }
    f->series = p;
    f->cap = cap;
  }
  s = calloc(1, sizeof *s);
  if (!s) {
    st = PS_ERR_NOMEM;
    goto done;
  }
  s->fam = f;
  for (size_t i = 0; i < f->nlabels; i++) {
    s->values[i] = strdup(values[i]);
    if (!s->values[i]) st = PS_ERR_NOMEM;
  }
  if (st == PS_OK && f->type == PS_METRIC_HISTOGRAM) {
    s->hist = ps_hist_create();
    if (s->hist) pthread_mutex_init(&s->lock, NULL);
    else st = PS_ERR_NOMEM;
  }
  if (st != PS_OK) {
    ps_metrics_series_free(s);
    goto done;
  }
  f->series[f->nseries++] = s;
  *out = s;
done:
  pthread_mutex_unlock(&m->lock);
  return st;
}

ps_series *ps_metric_single(ps_metric *f) {
  ps_series *s = NULL;
  if (!f || f->nlabels) return NULL;
  return ps_metric_series(f, NULL, &s) == PS_OK ? s : NULL;
}

static double bits_to_double(uint64_t b) {
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

static uint64_t double_to_bits(double d) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
}

static void atomic_add_double(_Atomic uint64_t *a, double v) {
  uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(a, &old, double_to_bits(bits_to_double(old) + v),
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

void ps_counter_inc(ps_series *s) { ps_counter_add(s, 1); }

void ps_counter_add(ps_series *s, uint64_t n) {
  if (!s || s->fam->type != PS_METRIC_COUNTER) return;
  atomic_fetch_add_explicit(&s->ival, n, memory_order_relaxed);
}

void ps_counter_add_f(ps_series *s, double v) {
  if (!s || s->fam->type != PS_METRIC_COUNTER || !(v > 0) || !isfinite(v)) return;
  atomic_add_double(&s->fbits, v);
}

void ps_gauge_set(ps_series *s, double v) {
  if (!s || s->fam->type != PS_METRIC_GAUGE) return;
  atomic_store_explicit(&s->fbits, double_to_bits(v), memory_order_relaxed);
}

void ps_gauge_add(ps_series *s, double v) {
  if (!s || s->fam->type != PS_METRIC_GAUGE) return;
  atomic_add_double(&s->fbits, v);
}

void ps_hist_series_observe_ns(ps_series *s, uint64_t ns) {
  if (!s || !s->hist) return;
  pthread_mutex_lock(&s->lock);
  ps_hist_record(s->hist, ns);
  pthread_mutex_unlock(&s->lock);
}

void ps_hist_series_merge(ps_series *s, const ps_hist *h) {
  if (!s || !s->hist || !h) return;
  pthread_mutex_lock(&s->lock);
  ps_hist_merge(s->hist, h);
  pthread_mutex_unlock(&s->lock);
}

double ps_series_value(const ps_series *cs) {
  if (!cs) return 0;
  ps_series *s = (ps_series *)cs; /* atomic loads do not modify; C11 wants non-const */
  double f = bits_to_double(atomic_load_explicit(&s->fbits, memory_order_relaxed));
  if (s->fam->type == PS_METRIC_COUNTER)
    return (double)atomic_load_explicit(&s->ival, memory_order_relaxed) + f;
  if (s->fam->type == PS_METRIC_GAUGE) return f;
  return 0;
}
