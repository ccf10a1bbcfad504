/* ps_metrics: the metrics registry and its Prometheus text rendering.
 *
 * Families live in a singly linked list in registration order (the order of the output);
 * each owns an array of series pointers that only grows. The registry mutex guards the
 * list, series creation and rendering; updates of a counter or gauge are C11 atomics on the
 * series (a gauge or the fractional part of a counter is a double kept as its bit pattern in
 * a 64-bit atomic, added by compare-and-swap), and a histogram series has its own mutex
 * around a ps_hist, copied out at scrape time so observers wait only for a memcpy. */
#include "ps_metrics.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define US 1000ull
#define MS 1000000ull
#define SEC 1000000000ull

const uint64_t ps_metrics_default_edges_ns[] = {
    1 * US,   5 * US / 2,   5 * US,   10 * US,  25 * US,  50 * US,  100 * US, 250 * US,
    500 * US, 1 * MS,       5 * MS / 2, 5 * MS, 10 * MS,  25 * MS,  50 * MS,  100 * MS,
    250 * MS, 500 * MS,     1 * SEC,  5 * SEC / 2, 5 * SEC, 10 * SEC};
const size_t ps_metrics_default_nedges =
    sizeof ps_metrics_default_edges_ns / sizeof ps_metrics_default_edges_ns[0];

#define DECADE(b) \
  (b), (b) * 125 / 100, (b) * 160 / 100, (b) * 2, (b) * 250 / 100, (b) * 320 / 100, (b) * 4, \
      (b) * 5, (b) * 640 / 100, (b) * 8
const uint64_t ps_metrics_fine_edges_ns[] = {DECADE(1 * US),   DECADE(10 * US), DECADE(100 * US),
                                             DECADE(1 * MS),   DECADE(10 * MS), DECADE(100 * MS),
                                             DECADE(1 * SEC), 10 * SEC};
const size_t ps_metrics_fine_nedges =
    sizeof ps_metrics_fine_edges_ns / sizeof ps_metrics_fine_edges_ns[0];

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

/* ---- growable output buffer ------------------------------------------------------------ */

typedef struct buf {
  char *p;
  size_t len, cap;
  bool oom;
} buf;

static void buf_reserve(buf *b, size_t extra) {
  if (b->oom || b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return;
  }
  b->p = p;
  b->cap = cap;
}

static void buf_put(buf *b, const char *s, size_t n) {
  buf_reserve(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_puts(buf *b, const char *s) { buf_put(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void buf_printf(buf *b, const char *fmt, ...) {
  char small[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    buf_put(b, small, (size_t)n);
    return;
  }
  buf_reserve(b, (size_t)n);
  if (b->oom) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Label values: backslash, double quote and line feed are escaped (the format's rule). */
static void buf_label_value(buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\') buf_put(b, "\\\\", 2);
    else if (*s == '"') buf_put(b, "\\\"", 2);
    else if (*s == '\n') buf_put(b, "\\n", 2);
    else buf_put(b, s, 1);
  }
}

/* HELP text: backslash and line feed are escaped. */
static void buf_help(buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\') buf_put(b, "\\\\", 2);
    else if (*s == '\n') buf_put(b, "\\n", 2);
    else buf_put(b, s, 1);
  }
}

/* " %llu\n" without printf: bucket lines are most of a scrape. */
static void buf_count_line(buf *b, uint64_t v) {
  char tmp[24];
  size_t n = sizeof tmp;
  tmp[--n] = '\n';
  do {
    tmp[--n] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  tmp[--n] = ' ';
  buf_put(b, tmp + n, sizeof tmp - n);
}

static void buf_double(buf *b, double v) {
  if (isnan(v)) buf_puts(b, "NaN");
  else if (isinf(v)) buf_puts(b, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 9007199254740992.0) buf_printf(b, "%.0f", v);
  else buf_printf(b, "%.17g", v);
}

char *ps_metrics_format_seconds(uint64_t ns, char *buf, size_t buflen) {
  if (!buf || buflen == 0) return buf;
  uint64_t whole = ns / SEC, frac = ns % SEC;
  if (frac == 0) {
    snprintf(buf, buflen, "%llu", (unsigned long long)whole);
    return buf;
  }
  char f[16];
  snprintf(f, sizeof f, "%09llu", (unsigned long long)frac);
  size_t n = strlen(f);
  while (n > 0 && f[n - 1] == '0') f[--n] = '\0';
  snprintf(buf, buflen, "%llu.%s", (unsigned long long)whole, f);
  return buf;
}

/* ---- names ----------------------------------------------------------------------------- */

static bool valid_metric_name(const char *s) {
  if (!s || !*s) return false;
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':')) return false;
  for (const char *p = s + 1; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_' || *p == ':')) return false;
  return true;
}

static bool valid_label_name(const char *s) {
  if (!s || !*s) return false;
  if (s[0] == '_' && s[1] == '_') return false; /* reserved for Prometheus's own use */
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (const char *p = s + 1; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_')) return false;
  return true;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* ---- registry -------------------------------------------------------------------------- */

ps_status ps_metrics_create(ps_metrics **out) {
  if (!out) return PS_ERR_INVALID;
  *out = NULL;
  ps_metrics *m = calloc(1, sizeof *m);
  if (!m) return PS_ERR_NOMEM;
  m->scratch = ps_hist_create();
  if (!m->scratch) {
    free(m);
    return PS_ERR_NOMEM;
  }
  pthread_mutex_init(&m->lock, NULL);
  *out = m;
  return PS_OK;
}

static void series_free(ps_series *s) {
  if (!s) return;
  for (size_t i = 0; i < PS_METRICS_MAX_LABELS; i++) free(s->values[i]);
  if (s->hist) {
    pthread_mutex_destroy(&s->lock);
    ps_hist_destroy(&s->hist);
  }
  free(s);
}

static void family_free(ps_metric *f) {
  if (!f) return;
  for (size_t i = 0; i < f->nseries; i++) series_free(f->series[i]);
  free(f->series);
  for (size_t i = 0; i < f->nlabels; i++) free(f->labels[i]);
  free(f->edges);
  free(f->edge_labels);
  free(f->name);
  free(f->help);
  free(f);
}

void ps_metrics_destroy(ps_metrics **pm) {
  if (!pm || !*pm) return;
  ps_metrics *m = *pm;
  for (ps_metric *f = m->head; f;) {
    ps_metric *n = f->next;
    family_free(f);
    f = n;
  }
  ps_hist_destroy(&m->scratch);
  pthread_mutex_destroy(&m->lock);
  free(m);
  *pm = NULL;
}

static bool same_spec(const ps_metric *f, ps_metric_type type, const char *const *labels,
                      size_t nlabels, const uint64_t *edges, size_t nedges) {
  if (f->type != type || f->nlabels != nlabels) return false;
  for (size_t i = 0; i < nlabels; i++)
    if (strcmp(f->labels[i], labels[i]) != 0) return false;
  if (type == PS_METRIC_HISTOGRAM) {
    if (f->nedges != nedges) return false;
    for (size_t i = 0; i < nedges; i++)
      if (f->edges[i] != edges[i]) return false;
  }
  return true;
}

static ps_status family_register(ps_metrics *m, ps_metric_type type, const char *name,
                                 const char *help, const char *const *labels, size_t nlabels,
                                 const uint64_t *edges, size_t nedges, ps_metric **out) {
  if (out) *out = NULL;
  if (!m || !out || !valid_metric_name(name)) return PS_ERR_INVALID;
  if (nlabels > PS_METRICS_MAX_LABELS || (nlabels && !labels)) return PS_ERR_INVALID;
  /* Prometheus's conventions, enforced so that promtool's linter stays quiet. */
  if (type == PS_METRIC_COUNTER && !ends_with(name, "_total")) return PS_ERR_INVALID;
  if (type != PS_METRIC_COUNTER && ends_with(name, "_total")) return PS_ERR_INVALID;
  for (size_t i = 0; i < nlabels; i++) {
    if (!valid_label_name(labels[i])) return PS_ERR_INVALID;
    if (type == PS_METRIC_HISTOGRAM && strcmp(labels[i], "le") == 0) return PS_ERR_INVALID;
    for (size_t j = 0; j < i; j++)
      if (strcmp(labels[i], labels[j]) == 0) return PS_ERR_INVALID;
  }
  if (type == PS_METRIC_HISTOGRAM) {
    if (!edges) {
      edges = ps_metrics_default_edges_ns;
      nedges = ps_metrics_default_nedges;
    }
    if (nedges == 0) return PS_ERR_INVALID;
    for (size_t i = 1; i < nedges; i++)
      if (edges[i] <= edges[i - 1]) return PS_ERR_INVALID;
  }

  pthread_mutex_lock(&m->lock);
  for (ps_metric *f = m->head; f; f = f->next) {
    if (strcmp(f->name, name) != 0) continue;
    bool same = same_spec(f, type, labels, nlabels, edges, nedges);
    pthread_mutex_unlock(&m->lock);
    if (!same) return PS_ERR_CONFLICT;
    *out = f;
    return PS_OK;
  }
  ps_metric *f = calloc(1, sizeof *f);
  bool ok = f != NULL;
  if (ok) {
    f->reg = m;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    ok = f->name && f->help;
    for (size_t i = 0; ok && i < nlabels; i++) {
      f->labels[i] = strdup(labels[i]);
      if (f->labels[i]) f->nlabels = i + 1;
      else ok = false;
    }
    if (ok && type == PS_METRIC_HISTOGRAM) {
      f->edges = malloc(nedges * sizeof *f->edges);
      f->edge_labels = malloc(nedges * sizeof *f->edge_labels);
      if (f->edges && f->edge_labels) {
        memcpy(f->edges, edges, nedges * sizeof *edges);
        for (size_t i = 0; i < nedges; i++)
          ps_metrics_format_seconds(edges[i], f->edge_labels[i], sizeof f->edge_labels[i]);
        f->nedges = nedges;
      } else {
        ok = false;
      }
    }
  }
  if (!ok) {
    pthread_mutex_unlock(&m->lock);
    family_free(f);
    return PS_ERR_NOMEM;
  }
  if (m->tail) m->tail->next = f;
  else m->head = f;
  m->tail = f;
  pthread_mutex_unlock(&m->lock);
  *out = f;
  return PS_OK;
}

ps_status ps_metrics_counter(ps_metrics *m, const char *name, const char *help,
                             const char *const *label_names, size_t nlabels, ps_metric **out) {
  return family_register(m, PS_METRIC_COUNTER, name, help, label_names, nlabels, NULL, 0, out);
}

ps_status ps_metrics_gauge(ps_metrics *m, const char *name, const char *help,
                           const char *const *label_names, size_t nlabels, ps_metric **out) {
  return family_register(m, PS_METRIC_GAUGE, name, help, label_names, nlabels, NULL, 0, out);
}

ps_status ps_metrics_histogram(ps_metrics *m, const char *name, const char *help,
                               const char *const *label_names, size_t nlabels,
                               const uint64_t *edges_ns, size_t nedges, ps_metric **out) {
  return family_register(m, PS_METRIC_HISTOGRAM, name, help, label_names, nlabels, edges_ns,
                         nedges, out);
}

/* ---- series ---------------------------------------------------------------------------- */

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
    series_free(s);
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

/* ---- rendering ------------------------------------------------------------------------- */

struct ps_metrics_sink {
  ps_metric *fam;
  buf *b;
  ps_hist *scratch;
};

static void put_labels(buf *b, const ps_metric *f, const char *const *values, const char *le) {
  if (f->nlabels == 0 && !le) return;
  buf_put(b, "{", 1);
  for (size_t i = 0; i < f->nlabels; i++) {
    if (i) buf_put(b, ",", 1);
    buf_puts(b, f->labels[i]);
    buf_put(b, "=\"", 2);
    buf_label_value(b, values[i] ? values[i] : "");
    buf_put(b, "\"", 1);
  }
  if (le) {
    if (f->nlabels) buf_put(b, ",", 1);
    buf_puts(b, "le=\"");
    buf_puts(b, le);
    buf_put(b, "\"", 1);
  }
  buf_put(b, "}", 1);
}

static void render_value(buf *b, const ps_metric *f, const char *const *values, double v) {
  buf_puts(b, f->name);
  put_labels(b, f, values, NULL);
  buf_put(b, " ", 1);
  buf_double(b, v);
  buf_put(b, "\n", 1);
}

static void render_hist(buf *b, const ps_metric *f, const char *const *values, const ps_hist *h) {
  uint64_t total = ps_hist_count(h);
  /* One merge pass over ps_hist's buckets and the edges (the buckets are ordered by value):
   * the count for edge e takes in every bucket whose lowest value is <= e, i.e. up to and
   * including the bucket that holds e — exactly ps_hist_count_le(h, e), without its scan
   * from bucket 0 per edge (71 edges x ~4000 buckets per series made a server-sized scrape
   * cost over a millisecond). */
  const uint64_t *counts = ps_hist_buckets(h);
  size_t nb = ps_hist_nbuckets(), bi = 0;
  uint64_t acc = 0;
  for (size_t i = 0; i < f->nedges; i++) {
    for (; bi < nb; bi++) {
      uint64_t lo, hi;
      ps_hist_bucket_range(bi, &lo, &hi);
      if (lo > f->edges[i]) break;
      acc += counts[bi];
    }
    buf_puts(b, f->name);
    buf_puts(b, "_bucket");
    put_labels(b, f, values, f->edge_labels[i]);
    buf_count_line(b, acc);
  }
  buf_puts(b, f->name);
  buf_puts(b, "_bucket");
  put_labels(b, f, values, "+Inf");
  buf_count_line(b, total);
  buf_puts(b, f->name);
  buf_puts(b, "_sum");
  put_labels(b, f, values, NULL);
  buf_put(b, " ", 1);
  buf_double(b, total ? ps_hist_mean(h) * (double)total * 1e-9 : 0.0);
  buf_put(b, "\n", 1);
  buf_puts(b, f->name);
  buf_puts(b, "_count");
  put_labels(b, f, values, NULL);
  buf_count_line(b, total);
}

void ps_metrics_emit(ps_metrics_sink *sink, const char *const *values, double v) {
  if (!sink || sink->fam->type == PS_METRIC_HISTOGRAM) return;
  if (sink->fam->nlabels && !values) return;
  render_value(sink->b, sink->fam, values, v);
}

void ps_metrics_emit_hist(ps_metrics_sink *sink, const char *const *values, const ps_hist *h) {
  if (!sink || !h || sink->fam->type != PS_METRIC_HISTOGRAM) return;
  if (sink->fam->nlabels && !values) return;
  render_hist(sink->b, sink->fam, values, h);
}

ps_status ps_metric_set_collect(ps_metric *f, ps_metrics_collect_fn fn, void *ud) {
  if (!f) return PS_ERR_INVALID;
  pthread_mutex_lock(&f->reg->lock);
  f->collect = fn;
  f->collect_ud = ud;
  pthread_mutex_unlock(&f->reg->lock);
  return PS_OK;
}

static void value_fn_collect(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  ps_metric *f = sink->fam;
  ps_metrics_emit(sink, NULL, f->value_fn(f->value_ud));
}

static ps_status register_value_fn(ps_metrics *m, ps_metric_type type, const char *name,
                                   const char *help, ps_metrics_value_fn fn, void *ud) {
  if (!fn) return PS_ERR_INVALID;
  ps_metric *f = NULL;
  ps_status st = family_register(m, type, name, help, NULL, 0, NULL, 0, &f);
  if (st != PS_OK) return st;
  pthread_mutex_lock(&m->lock);
  f->value_fn = fn;
  f->value_ud = ud;
  f->collect = value_fn_collect;
  f->collect_ud = NULL;
  pthread_mutex_unlock(&m->lock);
  return PS_OK;
}

ps_status ps_metrics_gauge_fn(ps_metrics *m, const char *name, const char *help,
                              ps_metrics_value_fn fn, void *ud) {
  return register_value_fn(m, PS_METRIC_GAUGE, name, help, fn, ud);
}

ps_status ps_metrics_counter_fn(ps_metrics *m, const char *name, const char *help,
                                ps_metrics_value_fn fn, void *ud) {
  return register_value_fn(m, PS_METRIC_COUNTER, name, help, fn, ud);
}

static void render_family(ps_metrics *m, ps_metric *f, buf *b) {
  static const char *const type_names[] = {"counter", "gauge", "histogram"};
  buf_puts(b, "# HELP ");
  buf_puts(b, f->name);
  buf_put(b, " ", 1);
  buf_help(b, f->help);
  buf_puts(b, "\n# TYPE ");
  buf_puts(b, f->name);
  buf_put(b, " ", 1);
  buf_puts(b, type_names[f->type]);
  buf_put(b, "\n", 1);
  for (size_t i = 0; i < f->nseries; i++) {
    ps_series *s = f->series[i];
    const char *const *values = (const char *const *)s->values;
    if (f->type == PS_METRIC_HISTOGRAM) {
      ps_hist_reset(m->scratch);
      pthread_mutex_lock(&s->lock);
      ps_hist_merge(m->scratch, s->hist);
      pthread_mutex_unlock(&s->lock);
      render_hist(b, f, values, m->scratch);
    } else {
      render_value(b, f, values, ps_series_value(s));
    }
  }
  if (f->collect) {
    ps_metrics_sink sink = {f, b, m->scratch};
    f->collect(&sink, f->collect_ud);
  }
}

ps_status ps_metrics_render(ps_metrics *m, char **out, size_t *len) {
  if (out) *out = NULL;
  if (len) *len = 0;
  if (!m || !out) return PS_ERR_INVALID;
  buf b = {0};
  buf_reserve(&b, 0);
  pthread_mutex_lock(&m->lock);
  for (ps_metric *f = m->head; f; f = f->next) render_family(m, f, &b);
  pthread_mutex_unlock(&m->lock);
  if (b.oom || !b.p) {
    free(b.p);
    return PS_ERR_NOMEM;
  }
  *out = b.p;
  if (len) *len = b.len;
  return PS_OK;
}

/* ---- process metrics from /proc/self ----------------------------------------------------- */

typedef struct proc_stat {
  double utime_s, stime_s, start_s;
  long threads;
  bool ok;
} proc_stat;

static double boot_time_s(void) {
  FILE *fp = fopen("/proc/stat", "r");
  if (!fp) return 0;
  char line[256];
  double bt = 0;
  while (fgets(line, sizeof line, fp)) {
    unsigned long long v;
    if (sscanf(line, "btime %llu", &v) == 1) {
      bt = (double)v;
      break;
    }
  }
  fclose(fp);
  return bt;
}

static proc_stat read_proc_stat(void) {
  proc_stat ps = {0};
  FILE *fp = fopen("/proc/self/stat", "r");
  if (!fp) return ps;
  char line[1024];
  char *got = fgets(line, sizeof line, fp);
  fclose(fp);
  if (!got) return ps;
  /* The command name (field 2) may hold spaces and parentheses: parse after the last ')'. */
  char *p = strrchr(line, ')');
  if (!p) return ps;
  p++;
  unsigned long long utime = 0, stime = 0, start = 0;
  long threads = 0;
  /* fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
   * utime(14) stime(15) cutime cstime priority nice num_threads(20) itrealvalue starttime(22) */
  int n = sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld %*d %llu",
                 &utime, &stime, &threads, &start);
  if (n != 4) return ps;
  double tick = (double)sysconf(_SC_CLK_TCK);
  if (tick <= 0) tick = 100;
  ps.utime_s = (double)utime / tick;
  ps.stime_s = (double)stime / tick;
  ps.threads = threads;
  ps.start_s = boot_time_s() + (double)start / tick;
  ps.ok = true;
  return ps;
}

static void collect_memory(ps_metrics_sink *sink, void *ud) {
  bool resident = ud != NULL;
  FILE *fp = fopen("/proc/self/statm", "r");
  if (!fp) return;
  unsigned long long size = 0, rss = 0;
  int n = fscanf(fp, "%llu %llu", &size, &rss);
  fclose(fp);
  if (n != 2) return;
  double page = (double)sysconf(_SC_PAGESIZE);
  ps_metrics_emit(sink, NULL, (double)(resident ? rss : size) * page);
}

static void collect_cpu(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  proc_stat ps = read_proc_stat();
  if (ps.ok) ps_metrics_emit(sink, NULL, ps.utime_s + ps.stime_s);
}

static void collect_threads(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  proc_stat ps = read_proc_stat();
  if (ps.ok) ps_metrics_emit(sink, NULL, (double)ps.threads);
}

static void collect_start(ps_metrics_sink *sink, void *ud) {
  proc_stat ps = read_proc_stat();
  (void)ud;
  if (ps.ok) ps_metrics_emit(sink, NULL, ps.start_s);
}

static void collect_fds(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  ps_metrics_emit(sink, NULL, (double)(n > 0 ? n - 1 : 0)); /* minus opendir's own fd */
}

ps_status ps_metrics_add_process(ps_metrics *m) {
  if (!m) return PS_ERR_INVALID;
  pthread_mutex_lock(&m->lock);
  bool done = m->process_added;
  m->process_added = true;
  pthread_mutex_unlock(&m->lock);
  if (done) return PS_OK;
  static const struct {
    ps_metric_type type;
    const char *name, *help;
    ps_metrics_collect_fn fn;
    void *ud;
  } defs[] = {
      {PS_METRIC_GAUGE, "process_resident_memory_bytes", "Resident memory size in bytes.",
       collect_memory, (void *)1},
      {PS_METRIC_GAUGE, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
       collect_memory, NULL},
      {PS_METRIC_COUNTER, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
       collect_cpu, NULL},
      {PS_METRIC_GAUGE, "process_open_fds", "Number of open file descriptors.", collect_fds, NULL},
      {PS_METRIC_GAUGE, "process_threads", "Number of OS threads in the process.", collect_threads,
       NULL},
      {PS_METRIC_GAUGE, "process_start_time_seconds",
       "Start time of the process since unix epoch in seconds.", collect_start, NULL},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    ps_metric *f = NULL;
    ps_status st = family_register(m, defs[i].type, defs[i].name, defs[i].help, NULL, 0, NULL, 0, &f);
    if (st != PS_OK) return st;
    ps_metric_set_collect(f, defs[i].fn, defs[i].ud);
  }
  return PS_OK;
}
