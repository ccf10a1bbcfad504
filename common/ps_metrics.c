/* ps_metrics: the registry of metric families — registration, its checks, and lifetime.
 *
 * A family is registered once and found again by name (idempotent, or PS_ERR_CONFLICT on
 * another spec); names and labels are checked against Prometheus's rules and conventions at
 * registration, so that neither a scrape nor promtool's linter can fail later. The structures
 * and the locking rules are in ps_metrics_int.h; series and their updates are in
 * ps_metrics_series.c, the text format in ps_metrics_render.c. */
#include "ps_metrics_int.h"

#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

static void family_free(ps_metric *f) {
  if (!f) return;
  for (size_t i = 0; i < f->nseries; i++) ps_metrics_series_free(f->series[i]);
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

ps_status ps_metrics_family_register(ps_metrics *m, ps_metric_type type, const char *name,
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
  return ps_metrics_family_register(m, PS_METRIC_COUNTER, name, help, label_names, nlabels, NULL,
                                    0, out);
}

ps_status ps_metrics_gauge(ps_metrics *m, const char *name, const char *help,
                           const char *const *label_names, size_t nlabels, ps_metric **out) {
  return ps_metrics_family_register(m, PS_METRIC_GAUGE, name, help, label_names, nlabels, NULL, 0,
                                    out);
}

ps_status ps_metrics_histogram(ps_metrics *m, const char *name, const char *help,
                               const char *const *label_names, size_t nlabels,
                               const uint64_t *edges_ns, size_t nedges, ps_metric **out) {
  return ps_metrics_family_register(m, PS_METRIC_HISTOGRAM, name, help, label_names, nlabels,
                                    edges_ns, nedges, out);
}

/* ---- collect callbacks ------------------------------------------------------------------ */

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
  ps_status st = ps_metrics_family_register(m, type, name, help, NULL, 0, NULL, 0, &f);
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
