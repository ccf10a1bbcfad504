/* ps_metrics_render: the Prometheus text exposition format (0.0.4) of a registry.
 *
 * A scrape renders every family into one growable buffer under the registry lock: first the
 * series stored in the family, then what its collect callback emits (ps_metrics_emit*).
 * Histogram bucket lines are most of a server's scrape, so they are written without printf
 * and counted in one merge pass over ps_hist's buckets; `le` labels are formatted once, at
 * registration. An allocation failure anywhere only marks the buffer, and the render fails
 * with PS_ERR_NOMEM at the end. */
#include "ps_metrics_int.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000000000ull

/* ---- growable output buffer ------------------------------------------------------------ */

typedef struct ps_metrics_buf {
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

/* ---- rendering ------------------------------------------------------------------------- */

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
