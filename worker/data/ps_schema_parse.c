/* ps_schema_parse.c: a line of schema data -> a sample record (ps_sample.h), and the header
 * check. Rules in ps_schema.h.
 *
 * Fields are cut one at a time by a small iterator (TAB for tsv; ',' with RFC 4180 quotes for
 * csv). A quoted field is returned in place when it holds no doubled quote, so the common case
 * copies nothing; only a field with "" is unescaped into a scratch buffer. The built-in Criteo
 * schema goes through ps_criteo_parse_line (its hex fast path), then ps_sample_from_criteo. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_criteo.h"
#include "ps_sample.h"
#include "ps_schema.h"

typedef struct field_it {
  const char *p, *end;
  int csv, done;
  char *scratch;
  size_t scratch_cap;
  const char *f;   /* the current field, n bytes */
  size_t n;
  const char *why; /* after a quoting error */
  char shown[80];  /* for messages: ps_criteo_show_field of the field */
} field_it;

/* The next field into (it->f, it->n); 0 at the end of the line, -1 on a quoting error (why). */
static int next_field_(field_it *it, const char **f, size_t *n, const char **why) {
  if (it->done) return 0;
  const char *p = it->p, *end = it->end;
  char delim = it->csv ? ',' : '\t';
  if (it->csv && p < end && *p == '"') {
    const char *s = ++p;
    size_t esc = 0;
    for (;;) {
      const char *q = memchr(p, '"', (size_t)(end - p));
      if (!q) {
        *why = "unterminated quoted field (a record must fit on one line)";
        return -1;
      }
      if (q + 1 < end && q[1] == '"') {
        esc++;
        p = q + 2;
        continue;
      }
      p = q;
      break;
    }
    *f = s;
    *n = (size_t)(p - s);
    p++; /* the closing quote */
    if (p < end && *p != delim) {
      *why = "text after a closing quote";
      return -1;
    }
    if (esc) { /* "" -> " */
      if (it->scratch_cap < *n) {
        char *t = realloc(it->scratch, *n);
        if (!t) {
          *why = "out of memory";
          return -1;
        }
        it->scratch = t;
        it->scratch_cap = *n;
      }
      size_t o = 0;
      for (size_t i = 0; i < *n; i++) {
        it->scratch[o++] = s[i];
        if (s[i] == '"') i++;
      }
      *f = it->scratch;
      *n = o;
    }
  } else {
    const char *q = p < end ? memchr(p, delim, (size_t)(end - p)) : NULL;
    if (!q) q = end;
    if (it->csv && memchr(p, '"', (size_t)(q - p))) {
      *why = "a '\"' inside an unquoted field";
      return -1;
    }
    *f = p;
    *n = (size_t)(q - p);
    p = q;
  }
  if (p == end) it->done = 1;
  else it->p = p + 1;
  return 1;
}

static int next_field(field_it *it) { return next_field_(it, &it->f, &it->n, &it->why); }

static const char *shown(field_it *it) {
  ps_criteo_show_field(it->f, it->n, it->shown, sizeof it->shown);
  return it->shown;
}

static void it_init(field_it *it, const ps_schema *s, const char *line, size_t len) {
  if (len && line[len - 1] == '\r') len--;
  memset(it, 0, sizeof *it);
  it->p = line;
  it->end = line + len;
  it->csv = ps_schema_fmt(s) == PS_SCHEMA_CSV;
}

ps_status ps_schema_check_header(const ps_schema *s, const char *line, size_t len, ps_error *err) {
  field_it it;
  it_init(&it, s, line, len);
  int i = 0, r;
  ps_status st = PS_OK;
  while ((r = next_field(&it)) == 1) {
    if (i >= ps_schema_ncolumns(s)) {
      st = ps_error_set(err, PS_ERR_PARSE, "header has more columns than the schema's %d "
                        "(column %d is '%s')", ps_schema_ncolumns(s), i + 1, shown(&it));
      break;
    }
    const char *want = ps_schema_column_at(s, i)->name;
    if (strlen(want) != it.n || memcmp(want, it.f, it.n) != 0) {
      st = ps_error_set(err, PS_ERR_PARSE, "header column %d is '%s', the schema says '%s'",
                        i + 1, shown(&it), want);
      break;
    }
    i++;
  }
  if (r < 0) st = ps_error_set(err, PS_ERR_PARSE, "header column %d: %s", i + 1, it.why);
  else if (!st && i < ps_schema_ncolumns(s))
    st = ps_error_set(err, PS_ERR_PARSE, "header has %d columns, the schema %d (first missing: "
                      "'%s')", i, ps_schema_ncolumns(s), ps_schema_column_at(s, i)->name);
  free(it.scratch);
  return st;
}

/* A decimal number ([+-] digits [. digits] [e [+-] digits]), finite. */
static int parse_number(const char *p, size_t n, double *x) {
  char buf[72];
  if (n == 0 || n >= sizeof buf) return 0;
  size_t i = 0, digits = 0;
  if (n <= 16) { /* the common case, an integer: exact in a double, no strtod */
    int neg = p[0] == '-';
    size_t k = (p[0] == '-' || p[0] == '+');
    int64_t v = 0;
    while (k < n && p[k] >= '0' && p[k] <= '9') v = v * 10 + (p[k++] - '0');
    if (k == n && n > (size_t)(p[0] == '-' || p[0] == '+')) {
      *x = neg ? -(double)v : (double)v; /* "-0" is -0.0, as strtod has it */
      return 1;
    }
  }
  if (p[i] == '+' || p[i] == '-') i++;
  while (i < n && p[i] >= '0' && p[i] <= '9') i++, digits++;
  if (i < n && p[i] == '.') {
    i++;
    while (i < n && p[i] >= '0' && p[i] <= '9') i++, digits++;
  }
  if (!digits) return 0;
  if (i < n && (p[i] == 'e' || p[i] == 'E')) {
    size_t e0 = ++i;
    if (i < n && (p[i] == '+' || p[i] == '-')) i++, e0++;
    while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    if (i == e0) return 0;
  }
  if (i != n) return 0;
  memcpy(buf, p, n);
  buf[n] = 0;
  *x = strtod(buf, NULL);
  return isfinite(*x);
}

/* Appends the bag of a categorical field (with its count unless the layout is ONE). */
static ps_status put_bag(const ps_schema_column *c, const char *f, size_t n, int one_layout,
                         ps_sample_buf *out, const char **why) {
  uint64_t one[1];
  size_t cnt = 0;
  size_t at = out->len;
  if (ps_sample_buf_reserve(out, 2 + 8)) return PS_ERR_NOMEM;
  if (one_layout) {
    one[0] = n ? ps_sample_token(f, n) : PS_SAMPLE_TOK_MISSING;
    memcpy(out->p + out->len, one, 8);
    out->len += 8;
    return PS_OK;
  }
  out->len += 2;
  if (!c->separator) {
    one[0] = n ? ps_sample_token(f, n) : PS_SAMPLE_TOK_MISSING;
    memcpy(out->p + out->len, one, 8);
    out->len += 8;
    cnt = 1;
  } else {
    const char *p = f, *end = f + n;
    while (p < end) {
      const char *q = memchr(p, c->separator, (size_t)(end - p));
      if (!q) q = end;
      if (q > p) { /* empty items are dropped */
        if (++cnt > PS_SAMPLE_MAX_BAG) {
          *why = "more than 65535 values";
          return PS_ERR_PARSE;
        }
        if (ps_sample_buf_reserve(out, 8)) return PS_ERR_NOMEM;
        one[0] = ps_sample_token(p, (size_t)(q - p));
        memcpy(out->p + out->len, one, 8);
        out->len += 8;
      }
      p = q + 1;
    }
  }
  uint16_t c16 = (uint16_t)cnt;
  memcpy(out->p + at, &c16, 2);
  return PS_OK;
}

static ps_status parse_generic(const ps_schema *s, const char *line, size_t len,
                               ps_sample_buf *out, ps_error *err) {
  int nd = ps_schema_ndense(s), ncol = ps_schema_ncolumns(s);
  size_t start = out->len, fixed = PS_SAMPLE_HEAD + 4 * (size_t)nd + ((size_t)nd + 7) / 8;
  if (ps_sample_buf_reserve(out, fixed)) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  memset(out->p + start, 0, fixed);
  int one_layout = !ps_schema_multi_hot(s);
  out->p[start + 5] = one_layout ? PS_SAMPLE_ONE : 0;
  out->len += fixed;
  field_it it;
  it_init(&it, s, line, len);
  int col = 0, r;
  ps_status st = PS_OK;
  const ps_schema_column *c = NULL;
  while ((r = next_field(&it)) == 1) {
    const char *f = it.f;
    size_t n = it.n;
    if (col >= ncol) {
      int total = col + 1;
      while (next_field(&it) == 1) total++;
      st = ps_error_set(err, PS_ERR_PARSE, "too many fields (%d, want %d)", total, ncol);
      goto fail;
    }
    c = ps_schema_column_at(s, col);
    unsigned char *rec = out->p + start;
    if (c->type == PS_COL_LABEL) {
      if (n != 1 || (f[0] != '0' && f[0] != '1')) {
        st = ps_error_set(err, PS_ERR_PARSE, "column '%s' (%d): label: want 0 or 1, got '%s'",
                          c->name, col + 1, shown(&it));
        goto fail;
      }
      rec[4] = (unsigned char)(f[0] - '0');
    } else if (c->type == PS_COL_DENSE) {
      float v = 0.0f;
      double x;
      if (n == 0) {
        rec[PS_SAMPLE_HEAD + 4 * nd + c->index / 8] |= (unsigned char)(1u << (c->index % 8));
        const float one = 1.0f; /* its indicator input (0 from the memset otherwise) */
        if (c->missing_ind) memcpy(rec + PS_SAMPLE_HEAD + 4 * (size_t)(c->index + 1), &one, 4);
      } else if (!parse_number(f, n, &x)) {
        st = ps_error_set(err, PS_ERR_PARSE, "column '%s' (%d): not a number: '%s'", c->name,
                          col + 1, shown(&it));
        goto fail;
      } else {
        v = c->log1p ? (x > 0 ? (float)log1p(x) : 0.0f) : (float)x;
      }
      memcpy(rec + PS_SAMPLE_HEAD + 4 * (size_t)c->index, &v, 4);
    } else if (c->type == PS_COL_CAT) {
      if ((st = put_bag(c, f, n, one_layout, out, &it.why))) {
        if (st == PS_ERR_NOMEM) ps_error_set(err, st, "out of memory");
        else ps_error_set(err, st, "column '%s' (%d): %s", c->name, col + 1, it.why);
        goto fail;
      }
    }
    col++;
  }
  if (r < 0) {
    c = col < ncol ? ps_schema_column_at(s, col) : NULL;
    st = ps_error_set(err, PS_ERR_PARSE, "column '%s' (%d): %s", c ? c->name : "?", col + 1,
                      it.why);
    goto fail;
  }
  if (col < ncol) {
    st = ps_error_set(err, PS_ERR_PARSE, "too few fields (%d, want %d; '%s' is missing)", col,
                      ncol, ps_schema_column_at(s, col)->name);
    goto fail;
  }
  uint32_t rl = (uint32_t)(out->len - start);
  memcpy(out->p + start, &rl, 4);
  free(it.scratch);
  return PS_OK;
fail:
  free(it.scratch);
  out->len = start;
  return st;
}

ps_status ps_schema_parse_line(const ps_schema *s, const char *line, size_t len,
                               ps_sample_buf *out, ps_error *err) {
  if (!ps_schema_is_criteo(s)) return parse_generic(s, line, len, out, err);
  ps_criteo_row row;
  ps_status st = ps_criteo_parse_line(line, len, &row, err);
  if (st) return st;
  if (ps_sample_from_criteo(&row, out)) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  return PS_OK;
}

/* ---------- the missing-separator hint ---------- */

static const char SEP_CANDIDATES[] = "|;,";
#define SEP_NCAND (sizeof SEP_CANDIDATES - 1)

struct ps_schema_sep_stats {
  uint64_t lines;
  int ncol;
  uint64_t *values;            /* per column: non-empty values seen */
  uint64_t (*with)[SEP_NCAND]; /* per column and candidate: values holding it */
  char (*example)[80];         /* per column: its first value (as messages show a field) */
};

ps_schema_sep_stats *ps_schema_sep_new(const ps_schema *s) {
  ps_schema_sep_stats *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->ncol = ps_schema_ncolumns(s);
  st->values = calloc((size_t)st->ncol, sizeof *st->values);
  st->with = calloc((size_t)st->ncol, sizeof *st->with);
  st->example = calloc((size_t)st->ncol, sizeof *st->example);
  if (!st->values || !st->with || !st->example) ps_schema_sep_free(&st);
  return st;
}

void ps_schema_sep_free(ps_schema_sep_stats **st) {
  if (!st || !*st) return;
  free((*st)->values), free((*st)->with), free((*st)->example);
  free(*st);
  *st = NULL;
}

uint64_t ps_schema_sep_lines(const ps_schema_sep_stats *st) { return st->lines; }

void ps_schema_sep_scan(const ps_schema *s, ps_schema_sep_stats *st, const char *line, size_t len) {
  field_it it;
  it_init(&it, s, line, len);
  st->lines++;
  for (int col = 0; col < st->ncol && next_field(&it) == 1; col++) {
    const ps_schema_column *c = ps_schema_column_at(s, col);
    if (c->type != PS_COL_CAT || c->separator || it.n == 0) continue;
    if (st->values[col]++ == 0) ps_criteo_show_field(it.f, it.n, st->example[col], sizeof st->example[0]);
    for (size_t k = 0; k < SEP_NCAND; k++)
      if (memchr(it.f, SEP_CANDIDATES[k], it.n)) st->with[col][k]++;
  }
  free(it.scratch);
}

int ps_schema_sep_hint(const ps_schema *s, const ps_schema_sep_stats *st, char *msg, size_t n) {
  for (int col = 0; col < st->ncol; col++) {
    if (st->values[col] < PS_SCHEMA_SEP_MIN) continue;
    for (size_t k = 0; k < SEP_NCAND; k++) {
      if (st->with[col][k] != st->values[col]) continue;
      snprintf(msg, n,
               "column '%s' (%d): all %llu values of the first %llu lines hold '%c' (e.g. '%s'), "
               "but the schema gives it no \"separator\": each whole value is one category. "
               "A multi-hot column needs \"separator\": \"%c\" (docs/SCHEMA.md)",
               ps_schema_column_at(s, col)->name, col + 1, (unsigned long long)st->values[col],
               (unsigned long long)st->lines, SEP_CANDIDATES[k], st->example[col], SEP_CANDIDATES[k]);
      return 1;
    }
  }
  return 0;
}
