/* prom_check: see prom_check.h. Line-by-line parser; state is small arrays searched
 * linearly (test outputs have a few thousand lines at most). */
#include "prom_check.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct family {
  char name[128];
  char type[16];
  bool help, typed, closed, has_samples;
} family;

typedef struct histo {
  char key[1200]; /* base name + labels without le */
  double last_le, last_count, inf_count, count;
  bool has_bucket, has_inf, has_count, has_sum;
} histo;

typedef struct state {
  family *fams;
  size_t nfams;
  char **series;
  size_t nseries;
  histo *hists;
  size_t nhists;
  int cur; /* index of the family whose samples are being read, -1 none */
  char *err;
  size_t errlen;
  int line;
} state;

__attribute__((format(printf, 2, 3))) static bool fail(state *s, const char *fmt, ...) {
  char msg[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (s->err) snprintf(s->err, s->errlen, "line %d: %s", s->line, msg);
  return false;
}

static bool metric_name_ok(const char *p, size_t n) {
  if (n == 0 || !(isalpha((unsigned char)p[0]) || p[0] == '_' || p[0] == ':')) return false;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == ':')) return false;
  return true;
}

static bool label_name_ok(const char *p, size_t n) {
  if (n == 0 || !(isalpha((unsigned char)p[0]) || p[0] == '_')) return false;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)p[i]) || p[i] == '_')) return false;
  return true;
}

static bool parse_float(const char *p, double *out) {
  if (strcmp(p, "+Inf") == 0) return *out = INFINITY, true;
  if (strcmp(p, "-Inf") == 0) return *out = -INFINITY, true;
  if (strcmp(p, "NaN") == 0) return *out = NAN, true;
  if (!*p) return false;
  for (const char *q = p; *q; q++) /* reject hex floats, "inf", "nan" spellings */
    if (!(isdigit((unsigned char)*q) || strchr("+-.eE", *q))) return false;
  char *end;
  *out = strtod(p, &end);
  return *end == '\0';
}

static family *find_family(state *s, const char *name) {
  for (size_t i = 0; i < s->nfams; i++)
    if (strcmp(s->fams[i].name, name) == 0) return &s->fams[i];
  return NULL;
}

static family *add_family(state *s, const char *name) {
  family *f = find_family(s, name);
  if (f) return f;
  family *p = realloc(s->fams, (s->nfams + 1) * sizeof *p);
  if (!p) return NULL;
  s->fams = p;
  f = &s->fams[s->nfams++];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  return f;
}

static histo *get_histo(state *s, const char *key) {
  for (size_t i = 0; i < s->nhists; i++)
    if (strcmp(s->hists[i].key, key) == 0) return &s->hists[i];
  histo *p = realloc(s->hists, (s->nhists + 1) * sizeof *p);
  if (!p) return NULL;
  s->hists = p;
  histo *h = &s->hists[s->nhists++];
  memset(h, 0, sizeof *h);
  snprintf(h->key, sizeof h->key, "%s", key);
  h->last_le = -INFINITY;
  return h;
}

static bool comment_line(state *s, const char *line) {
  if (strncmp(line, "# HELP ", 7) != 0 && strncmp(line, "# TYPE ", 7) != 0)
    return true; /* other comments are allowed and ignored */
  bool help = line[2] == 'H';
  const char *p = line + 7;
  const char *sp = strchr(p, ' ');
  size_t n = sp ? (size_t)(sp - p) : strlen(p);
  if (!metric_name_ok(p, n)) return fail(s, "bad metric name in comment");
  char name[128];
  if (n >= sizeof name) return fail(s, "name too long");
  memcpy(name, p, n);
  name[n] = '\0';
  family *f = find_family(s, name);
  if (f && (f->has_samples || f->closed)) return fail(s, "HELP/TYPE for %s after its samples", name);
  f = add_family(s, name);
  if (!f) return fail(s, "out of memory");
  if (help) {
    if (f->help) return fail(s, "second HELP for %s", name);
    f->help = true;
    const char *t = sp ? sp + 1 : "";
    for (; *t; t++)
      if (*t == '\\' && t[1] != '\\' && t[1] != 'n') return fail(s, "bad escape in HELP");
      else if (*t == '\\') t++;
    return true;
  }
  if (f->typed) return fail(s, "second TYPE for %s", name);
  if (!sp) return fail(s, "TYPE without a type");
  const char *t = sp + 1;
  if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
      strcmp(t, "summary") && strcmp(t, "untyped"))
    return fail(s, "unknown type '%s'", t);
  f->typed = true;
  snprintf(f->type, sizeof f->type, "%s", t);
  return true;
}

/* Parses `{a="x",b="y"}` at *pp; writes the label text without braces and without `le` into
 * rest, the le value into le (empty if none). */
static bool parse_labels(state *s, const char **pp, char *all, size_t alln, char *rest,
                         size_t restn, char *le, size_t len) {
  const char *p = *pp;
  rest[0] = le[0] = all[0] = '\0';
  if (*p != '{') return true;
  const char *start = ++p;
  char names[16][64];
  int nnames = 0;
  size_t rlen = 0;
  while (*p != '}') {
    const char *ln = p;
    while (*p && *p != '=') p++;
    if (*p != '=' || !label_name_ok(ln, (size_t)(p - ln))) return fail(s, "bad label name");
    size_t nl = (size_t)(p - ln);
    if (nl >= 64 || nnames == 16) return fail(s, "label name too long or too many labels");
    if (nl >= 2 && ln[0] == '_' && ln[1] == '_') return fail(s, "reserved label name");
    for (int i = 0; i < nnames; i++)
      if (strlen(names[i]) == nl && memcmp(names[i], ln, nl) == 0) return fail(s, "duplicate label");
    memcpy(names[nnames], ln, nl);
    names[nnames++][nl] = '\0';
    p++;
    if (*p != '"') return fail(s, "label value not quoted");
    const char *vs = ++p;
    while (*p && *p != '"') {
      if (*p == '\\') {
        if (p[1] != '\\' && p[1] != '"' && p[1] != 'n') return fail(s, "bad escape in label value");
        p++;
      } else if (*p == '\n') {
        return fail(s, "raw newline in label value");
      }
      p++;
    }
    if (*p != '"') return fail(s, "unterminated label value");
    const char *ve = p++;
    bool is_le = nl == 2 && memcmp(ln, "le", 2) == 0;
    if (is_le) {
      size_t vl = (size_t)(ve - vs);
      if (vl >= len) return fail(s, "le too long");
      memcpy(le, vs, vl);
      le[vl] = '\0';
    } else {
      size_t part = (size_t)(p - ln);
      if (rlen + part + 2 >= restn) return fail(s, "labels too long");
      if (rlen) rest[rlen++] = ',';
      memcpy(rest + rlen, ln, part);
      rlen += part;
      rest[rlen] = '\0';
    }
    if (*p == ',') {
      p++;
      if (*p == '}') return fail(s, "trailing comma in labels");
    } else if (*p != '}') {
      return fail(s, "expected , or } after label");
    }
  }
  size_t an = (size_t)(p - start);
  if (an >= alln) return fail(s, "labels too long");
  memcpy(all, start, an);
  all[an] = '\0';
  *pp = p + 1;
  return true;
}

static bool sample_line(state *s, const char *line) {
  const char *p = line;
  while (*p && *p != '{' && *p != ' ') p++;
  size_t n = (size_t)(p - line);
  if (!metric_name_ok(line, n) || n >= 128) return fail(s, "bad metric name");
  char name[128];
  memcpy(name, line, n);
  name[n] = '\0';
  char all[1024], rest[1024], le[64];
  if (!parse_labels(s, &p, all, sizeof all, rest, sizeof rest, le, sizeof le)) return false;
  if (*p != ' ') return fail(s, "expected a space before the value");
  p++;
  char val[64];
  const char *vs = p;
  while (*p && *p != ' ') p++;
  size_t vl = (size_t)(p - vs);
  if (vl == 0 || vl >= sizeof val) return fail(s, "missing or overlong value");
  memcpy(val, vs, vl);
  val[vl] = '\0';
  double v;
  if (!parse_float(val, &v)) return fail(s, "bad value '%s'", val);
  if (*p == ' ') { /* optional integer timestamp */
    p++;
    if (*p == '-') p++;
    if (!isdigit((unsigned char)*p)) return fail(s, "bad timestamp");
    while (isdigit((unsigned char)*p)) p++;
  }
  if (*p) return fail(s, "trailing characters after the value");

  /* Which family? A histogram's samples carry suffixes. */
  char base[128];
  snprintf(base, sizeof base, "%s", name);
  const char *suffix = "";
  family *f = find_family(s, name);
  if (!f || strcmp(f->type, "histogram") == 0) {
    static const char *const sufs[] = {"_bucket", "_sum", "_count"};
    for (int i = 0; i < 3; i++) {
      size_t sl = strlen(sufs[i]);
      if (n > sl && strcmp(name + n - sl, sufs[i]) == 0) {
        char b[128];
        memcpy(b, name, n - sl);
        b[n - sl] = '\0';
        family *hf = find_family(s, b);
        if (hf && strcmp(hf->type, "histogram") == 0) {
          f = hf;
          snprintf(base, sizeof base, "%s", b);
          suffix = sufs[i];
        }
        break;
      }
    }
  }
  if (!f || !f->typed) return fail(s, "sample %s without a TYPE line", name);
  int idx = (int)(f - s->fams);
  if (f->closed) return fail(s, "family %s not contiguous", base);
  if (s->cur >= 0 && s->cur != idx) s->fams[s->cur].closed = true;
  s->cur = idx;
  f->has_samples = true;

  char key[1200];
  snprintf(key, sizeof key, "%s{%s}", name, all);
  for (size_t i = 0; i < s->nseries; i++)
    if (strcmp(s->series[i], key) == 0) return fail(s, "duplicate series %s", key);
  char **sp = realloc(s->series, (s->nseries + 1) * sizeof *sp);
  if (!sp) return fail(s, "out of memory");
  s->series = sp;
  s->series[s->nseries] = strdup(key);
  if (!s->series[s->nseries]) return fail(s, "out of memory");
  s->nseries++;

  if (strcmp(f->type, "counter") == 0) {
    size_t bl = strlen(base);
    if (bl < 6 || strcmp(base + bl - 6, "_total") != 0) return fail(s, "counter %s not named *_total", base);
    if (!(v >= 0)) return fail(s, "counter %s negative or NaN", base);
  }
  if (strcmp(f->type, "histogram") == 0) {
    if (!*suffix) return fail(s, "histogram sample %s without _bucket/_sum/_count", name);
    if (*suffix != '_' || (strcmp(suffix, "_bucket") == 0) != (le[0] != '\0'))
      return fail(s, "le label only and always on _bucket");
    char hkey[1200];
    snprintf(hkey, sizeof hkey, "%s{%s}", base, rest);
    histo *h = get_histo(s, hkey);
    if (!h) return fail(s, "out of memory");
    if (!(v >= 0) || v != floor(v)) {
      if (strcmp(suffix, "_sum") != 0) return fail(s, "bucket/count not a non-negative integer");
    }
    if (strcmp(suffix, "_bucket") == 0) {
      double lev;
      if (!parse_float(le, &lev)) return fail(s, "bad le '%s'", le);
      if (h->has_inf) return fail(s, "bucket after +Inf");
      if (!(lev > h->last_le)) return fail(s, "le not increasing");
      if (v < h->last_count) return fail(s, "buckets not cumulative");
      h->last_le = lev;
      h->last_count = v;
      h->has_bucket = true;
      if (isinf(lev)) {
        h->has_inf = true;
        h->inf_count = v;
      }
    } else if (strcmp(suffix, "_count") == 0) {
      h->has_count = true;
      h->count = v;
    } else {
      h->has_sum = true;
    }
  }
  return true;
}

static void state_free(state *s) {
  for (size_t i = 0; i < s->nseries; i++) free(s->series[i]);
  free(s->series);
  free(s->fams);
  free(s->hists);
}

bool prom_check(const char *text, char *err, size_t errlen) {
  state s = {.cur = -1, .err = err, .errlen = errlen};
  if (err && errlen) err[0] = '\0';
  bool ok = true;
  if (!text) return fail(&s, "no text");
  size_t len = strlen(text);
  if (len && text[len - 1] != '\n') {
    s.line = 0;
    return fail(&s, "output does not end with a newline");
  }
  const char *p = text;
  while (ok && *p) {
    s.line++;
    const char *nl = strchr(p, '\n');
    size_t n = (size_t)(nl - p);
    char *line = malloc(n + 1);
    if (!line) {
      ok = fail(&s, "out of memory");
      break;
    }
    memcpy(line, p, n);
    line[n] = '\0';
    if (n == 0) ok = fail(&s, "empty line");
    else if (line[0] == '#') ok = comment_line(&s, line);
    else ok = sample_line(&s, line);
    free(line);
    p = nl + 1;
  }
  for (size_t i = 0; ok && i < s.nhists; i++) {
    histo *h = &s.hists[i];
    if (!h->has_inf) ok = fail(&s, "histogram %s without a +Inf bucket", h->key);
    else if (!h->has_count || !h->has_sum) ok = fail(&s, "histogram %s without _count or _sum", h->key);
    else if (h->count != h->inf_count) ok = fail(&s, "histogram %s: +Inf bucket != _count", h->key);
  }
  state_free(&s);
  return ok;
}

bool prom_value(const char *text, const char *name, const char *labels, double *out) {
  size_t nn = strlen(name), ln = strlen(labels);
  for (const char *p = text; p && *p;) {
    const char *nl = strchr(p, '\n');
    if (!nl) nl = p + strlen(p);
    if (*p != '#' && strncmp(p, name, nn) == 0) {
      const char *q = p + nn;
      bool match = false;
      if (ln == 0 && *q == ' ') {
        match = true;
      } else if (ln && *q == '{' && strncmp(q + 1, labels, ln) == 0 && q[1 + ln] == '}') {
        q += ln + 2;
        match = *q == ' ';
      }
      if (match) {
        char val[64];
        size_t vl = (size_t)(nl - (q + 1));
        const char *sp = memchr(q + 1, ' ', vl);
        if (sp) vl = (size_t)(sp - (q + 1));
        if (vl >= sizeof val) return false;
        memcpy(val, q + 1, vl);
        val[vl] = '\0';
        return parse_float(val, out);
      }
    }
    p = *nl ? nl + 1 : nl;
  }
  return false;
}
