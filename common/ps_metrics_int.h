/* ps_metrics_int: the registry's structures, shared by the files that make up ps_metrics
 * (ps_metrics.c the families, ps_metrics_series.c the series and their updates,
 * ps_metrics_render.c the text format, ps_metrics_process.c the /proc/self collectors).
 *
 * Families live in a singly linked list in registration order (the order of the output);
 * each owns an array of series pointers that only grows. Locking, in one place: the registry
 * mutex guards the family list, series creation and rendering; updates of a counter or gauge
 * are C11 atomics on the series (a gauge or the fractional part of a counter is a double kept
 * as its bit pattern in a 64-bit atomic, added by compare-and-swap), and a histogram series
 * has its own mutex around a ps_hist, copied out at scrape time so observers wait only for a
 * memcpy. Not installed: users see ps_metrics.h. */
#ifndef PS_METRICS_INT_H
#define PS_METRICS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ps_metrics.h"

struct ps_series {
  ps_metric *fam;
  char *values[PS_METRICS_MAX_LABELS];
  _Atomic uint64_t ival;  /* counters: the integer part */
  _Atomic uint64_t fbits; /* counters: the fractional part; gauges: the value (double bits) */
  pthread_mutex_t lock;   /* histograms */
  ps_hist *hist;
};

struct ps_metric {
  ps_metrics *reg;
  char *name, *help;
  ps_metric_type type;
  size_t nlabels;
  char *labels[PS_METRICS_MAX_LABELS];
  uint64_t *edges;
  char (*edge_labels)[32]; /* the edges formatted once, as `le` values */
  size_t nedges;
  ps_series **series;
  size_t nseries, cap;
  ps_metrics_collect_fn collect;
  void *collect_ud;
  ps_metrics_value_fn value_fn; /* for the *_fn shorthands */
  void *value_ud;
  ps_metric *next;
};

struct ps_metrics {
  pthread_mutex_t lock;
  ps_metric *head, *tail;
  ps_hist *scratch; /* histogram snapshot buffer, used under the lock */
  bool process_added;
};

/* What a collect callback emits into: the family being rendered and the output buffer
 * (struct ps_metrics_buf is private to ps_metrics_render.c). */
struct ps_metrics_buf;
struct ps_metrics_sink {
  ps_metric *fam;
  struct ps_metrics_buf *b;
  ps_hist *scratch;
};

/* Registers (or finds) a family; the checks and the idempotence of ps_metrics_counter & co.
 * edges == NULL means the default edges (histograms only). */
ps_status ps_metrics_family_register(ps_metrics *m, ps_metric_type type, const char *name,
                                     const char *help, const char *const *labels, size_t nlabels,
                                     const uint64_t *edges, size_t nedges, ps_metric **out);

/* Frees a series and its label values (NULL is a no-op); the family owns its series. */
void ps_metrics_series_free(ps_series *s);

#endif
