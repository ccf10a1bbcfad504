/* ps_metrics: a thread-safe registry of counters, gauges and histograms with labels,
 * rendered in the Prometheus text exposition format (version 0.0.4).
 *
 * A metric family (name, help, type, label names) is registered once; a series is one set of
 * label values in it, looked up (or created) once and then updated through its handle with
 * lock-free atomics, so the hot path never takes the registry lock. Histograms are fed from
 * ps_hist (nanoseconds) and rendered in seconds against fixed bucket edges (cumulative
 * `_bucket{le=..}`, `_sum`, `_count`); a bucket counts every value in the ps_hist bucket that
 * holds its edge (ps_hist_count_le), so an edge is exact to within ps_hist's 1/64 resolution.
 *
 * Values that already live elsewhere (a server's per-thread histograms, a queue's depth, RSS)
 * are not copied on every event: a family may instead have a collect callback, called at
 * scrape time, that emits its series through ps_metrics_emit / ps_metrics_emit_hist.
 * Callbacks run with the registry lock held: they must not register families or look up
 * series, only emit (and read their own state).
 *
 * Conventions (checked where cheap): names match [a-zA-Z_:][a-zA-Z0-9_:]*, counters end in
 * `_total`, units are base units (`_seconds`, `_bytes`); label names match
 * [a-zA-Z_][a-zA-Z0-9_]*, do not start with "__", and a histogram may not use "le". */
#ifndef PS_METRICS_H
#define PS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "ps_hist.h"
#include "ps_status.h"

typedef struct ps_metrics ps_metrics;      /* the registry */
typedef struct ps_metric ps_metric;        /* a family */
typedef struct ps_series ps_series;        /* one label set of a family */
typedef struct ps_metrics_sink ps_metrics_sink; /* what a collect callback emits into */

typedef enum ps_metric_type {
  PS_METRIC_COUNTER = 0,
  PS_METRIC_GAUGE = 1,
  PS_METRIC_HISTOGRAM = 2
} ps_metric_type;

/* At most this many labels per family, this many series per family (a guard against
 * unbounded cardinality: creating more fails with PS_ERR_NOMEM). */
enum { PS_METRICS_MAX_LABELS = 8, PS_METRICS_MAX_SERIES = 4096 };

/* The default histogram edges, in nanoseconds: 1 µs .. 10 s in 1-2.5-5 steps (22 edges, +Inf
 * is implicit). Exported so that dashboards and tests know them. */
extern const uint64_t ps_metrics_default_edges_ns[];
extern const size_t ps_metrics_default_nedges;
/* Finer edges for request latencies, where histogram_quantile's linear interpolation inside a
 * bucket should stay within ~25%: 10 per decade (1, 1.25, 1.6, 2, 2.5, 3.2, 4, 5, 6.4, 8)
 * from 1 µs to 10 s (71 edges). */
extern const uint64_t ps_metrics_fine_edges_ns[];
extern const size_t ps_metrics_fine_nedges;

ps_status ps_metrics_create(ps_metrics **out);
/* Frees the registry, its families and series; handles become invalid. */
void ps_metrics_destroy(ps_metrics **m);

/* Registers a family. label_names may be NULL when nlabels == 0. Registering the same name
 * again with the same type and labels returns the existing family (idempotent); with another
 * spec it fails with PS_ERR_CONFLICT. Bad names give PS_ERR_INVALID. */
ps_status ps_metrics_counter(ps_metrics *m, const char *name, const char *help,
                             const char *const *label_names, size_t nlabels, ps_metric **out);
ps_status ps_metrics_gauge(ps_metrics *m, const char *name, const char *help,
                           const char *const *label_names, size_t nlabels, ps_metric **out);
/* edges_ns: strictly increasing upper edges in ns, or NULL for the default edges. */
ps_status ps_metrics_histogram(ps_metrics *m, const char *name, const char *help,
                               const char *const *label_names, size_t nlabels,
                               const uint64_t *edges_ns, size_t nedges, ps_metric **out);

/* The series of a family with these label values (nlabels of them, NULL when 0), created on
 * first use with value 0. Values may be any UTF-8 (escaped on output). Stable handle. */
ps_status ps_metric_series(ps_metric *f, const char *const *label_values, ps_series **out);
/* Shorthand for families without labels (NULL on error, which can only be a bad family). */
ps_series *ps_metric_single(ps_metric *f);

/* Counters: only increase. add_f ignores negative and non-finite amounts. */
void ps_counter_inc(ps_series *s);
void ps_counter_add(ps_series *s, uint64_t n);
void ps_counter_add_f(ps_series *s, double v);
/* Gauges. */
void ps_gauge_set(ps_series *s, double v);
void ps_gauge_add(ps_series *s, double v);
/* Histograms: one observation in ns, or a whole ps_hist merged in (per-thread histograms
 * flushed periodically). These take the series' own small lock. */
void ps_hist_series_observe_ns(ps_series *s, uint64_t ns);
void ps_hist_series_merge(ps_series *s, const ps_hist *h);
/* Current value of a counter or gauge series (tests, /healthz logic). */
double ps_series_value(const ps_series *s);

/* Collect callbacks. A family with a callback renders the series that the callback emits at
 * scrape time, after the series stored in it (normally a family uses one or the other). */
typedef void (*ps_metrics_collect_fn)(ps_metrics_sink *sink, void *ud);
ps_status ps_metric_set_collect(ps_metric *f, ps_metrics_collect_fn fn, void *ud);
/* Emit a counter or gauge sample (the family's label values, then the value). */
void ps_metrics_emit(ps_metrics_sink *sink, const char *const *label_values, double v);
/* Emit a histogram sample from a ps_hist of nanoseconds. */
void ps_metrics_emit_hist(ps_metrics_sink *sink, const char *const *label_values,
                          const ps_hist *h);

/* A label-less gauge whose value is fn(ud) at scrape time (queue depth, rows in memory). */
typedef double (*ps_metrics_value_fn)(void *ud);
ps_status ps_metrics_gauge_fn(ps_metrics *m, const char *name, const char *help,
                              ps_metrics_value_fn fn, void *ud);
/* Same, for a label-less counter kept elsewhere (e.g. an atomic in a server's state). */
ps_status ps_metrics_counter_fn(ps_metrics *m, const char *name, const char *help,
                                ps_metrics_value_fn fn, void *ud);

/* Registers the standard process metrics, read at scrape time from /proc/self:
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_cpu_seconds_total,
 * process_open_fds, process_threads, process_start_time_seconds. Idempotent. */
ps_status ps_metrics_add_process(ps_metrics *m);

/* Renders every family into a NUL-terminated malloc'd buffer (*len excludes the NUL); the
 * caller frees it. PS_ERR_NOMEM only if allocation fails. */
ps_status ps_metrics_render(ps_metrics *m, char **out, size_t *len);

/* Formats a nanosecond count as a decimal number of seconds, exactly ("0.0025", "1", "0"):
 * how `le` labels are written. buf needs 32 bytes. Returns buf. */
char *ps_metrics_format_seconds(uint64_t ns, char *buf, size_t buflen);

#endif
