/* ps_schema.c: the schema's JSON loader and checks, the built-in Criteo layout, and the
 * accessors (the format is in ps_schema.h; the line parser in ps_schema_parse.c).
 *
 * Every refusal is one line: the file, the column (1-based number and name) and what is wrong,
 * so a user fixes a schema from the message alone. Keys that are not part of the format are
 * refused rather than ignored: "seperator" silently doing nothing would train a one-hot model. */
#include "ps_schema.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_criteo.h"
#include "ps_hash.h"

#define MAX_COLUMNS 4096

struct ps_schema {
  char *name;
  char table[64]; /* the embedding table's name on the servers (ps_schema_table) */
  int criteo, header, ncol, ndense, nind, ncat, multi;
  ps_schema_format fmt;
  ps_schema_pool pool;
  ps_schema_column *cols;
  int *cat_col; /* feature -> column */
};

void ps_schema_destroy(ps_schema **sp) {
  if (!sp || !*sp) return;
  ps_schema *s = *sp;
  *sp = NULL;
  for (int i = 0; s->cols && i < s->ncol; i++) free((char *)s->cols[i].name);
  free(s->cols);
  free(s->cat_col);
  free(s->name);
  free(s);
}

static ps_schema *schema_new(const char *name, int ncol) {
  ps_schema *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->name = strdup(name);
  s->cols = calloc((size_t)ncol, sizeof *s->cols);
  s->cat_col = calloc((size_t)ncol, sizeof *s->cat_col);
  if (!s->name || !s->cols || !s->cat_col) ps_schema_destroy(&s);
  return s;
}

/* Numbers the dense and categorical columns; the run's pooling. */
static ps_status finish(ps_schema *s, const char *origin, ps_error *err) {
  int labels = 0, nmean = 0, nsum = 0;
  for (int i = 0; i < s->ncol; i++) {
    ps_schema_column *c = &s->cols[i];
    c->index = -1;
    if (c->type == PS_COL_LABEL) labels++;
    if (c->type == PS_COL_DENSE) c->index = s->ndense++;
    if (c->type == PS_COL_DENSE && c->missing_ind) s->ndense++, s->nind++; /* at index + 1 */
    if (c->type != PS_COL_CAT) continue;
    c->index = s->ncat;
    s->cat_col[s->ncat++] = i;
    if (!c->separator) continue;
    s->multi = 1;
    if (c->pooling == PS_SCHEMA_POOL_MEAN) nmean++;
    else nsum++;
  }
  s->pool = nmean && nsum ? PS_SCHEMA_POOL_MIXED : nmean ? PS_SCHEMA_POOL_MEAN : PS_SCHEMA_POOL_SUM;
  if (s->pool == PS_SCHEMA_POOL_MIXED && s->ncat > 64)
    return ps_error_set(err, PS_ERR_INVALID,
                        "%s: %d multi-hot columns pool by mean and %d by sum: mixing them works "
                        "for at most 64 categorical columns, this schema has %d (pool them alike)",
                        origin, nmean, nsum, s->ncat);
  if (labels != 1)
    return ps_error_set(err, PS_ERR_INVALID, "%s: want exactly one column of type label, found %d",
                        origin, labels);
  if (s->ncat == 0)
    return ps_error_set(err, PS_ERR_INVALID,
                        "%s: no categorical column (the model needs at least one embedding bag)",
                        origin);
  return PS_OK;
}

static ps_status criteo(ps_schema **out, ps_error *err) {
  ps_schema *s = schema_new("criteo", PS_CRITEO_NFIELDS);
  if (!s) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  s->criteo = 1;
  snprintf(s->table, sizeof s->table, "criteo_emb"); /* what every run before schemas used */
  s->ncol = PS_CRITEO_NFIELDS;
  for (int i = 0; i < PS_CRITEO_NFIELDS; i++) {
    char name[8];
    ps_schema_column *c = &s->cols[i];
    if (i == 0) snprintf(name, sizeof name, "label"), c->type = PS_COL_LABEL;
    else if (i <= PS_CRITEO_NDENSE) snprintf(name, sizeof name, "I%d", i), c->type = PS_COL_DENSE;
    else snprintf(name, sizeof name, "C%d", i - PS_CRITEO_NDENSE), c->type = PS_COL_CAT;
    c->log1p = 1;
    if (!(c->name = strdup(name))) {
      ps_schema_destroy(&s);
      return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
    }
  }
  ps_status st = finish(s, "criteo", err);
  if (st) ps_schema_destroy(&s);
  *out = s;
  return st;
}

/* Whether v is the string a or b; *second: it is b. */
static bool two_choices(json_t *v, const char *a, const char *b, int *second) {
  const char *s = json_string_value(v);
  if (!s || (strcmp(s, a) && strcmp(s, b))) return false;
  *second = !strcmp(s, b);
  return true;
}

/* One column object into c (i: 0-based column number). */
static ps_status parse_column(json_t *o, int i, ps_schema_format fmt, ps_schema_column *c,
                              const char *origin, ps_error *err) {
  if (!json_is_object(o))
    return ps_error_set(err, PS_ERR_INVALID, "%s: column %d: want an object", origin, i + 1);
  json_t *jn = json_object_get(o, "name"), *jt = json_object_get(o, "type");
  const char *name = json_string_value(jn);
  if (!name || !*name)
    return ps_error_set(err, PS_ERR_INVALID, "%s: column %d: want a non-empty \"name\"", origin,
                        i + 1);
  if (!(c->name = strdup(name))) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
#define COL_ERR(...) ps_error_set(err, PS_ERR_INVALID, "%s: column %d '%s': " __VA_ARGS__)
#define CHOICE_ERR(a, b)                                                                   \
  COL_ERR("\"%s\": want %s or %s, got %s", origin, i + 1, name, key, a, b,                   \
          json_string_value(v) ? json_string_value(v) : "a non-string")
  const char *type = json_string_value(jt);
  static const char *const types[] = {"skip", "label", "dense", "categorical"};
  int t = -1;
  for (int k = 0; type && k < 4; k++)
    if (!strcmp(type, types[k])) t = k;
  if (t < 0)
    return COL_ERR("\"type\": want label, dense, categorical or skip, got %s", origin, i + 1,
                   name, type ? type : "none");
  c->type = (ps_col_type)t;
  c->log1p = 1;
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (!strcmp(key, "name") || !strcmp(key, "type")) continue;
    int second; /* of a key with two choices: the value is the second one */
    if (!strcmp(key, "transform") && c->type == PS_COL_DENSE) {
      if (!two_choices(v, "log1p", "none", &second)) return CHOICE_ERR("log1p", "none");
      c->log1p = !second;
    } else if (!strcmp(key, "missing") && c->type == PS_COL_DENSE) {
      if (!two_choices(v, "zero", "indicator", &second)) return CHOICE_ERR("zero", "indicator");
      c->missing_ind = second;
    } else if (!strcmp(key, "separator") && c->type == PS_COL_CAT) {
      const char *sep = json_string_value(v);
      char delim = fmt == PS_SCHEMA_CSV ? ',' : '\t';
      if (!sep || strlen(sep) != 1 || sep[0] == delim || sep[0] == '"' || sep[0] == '\n' ||
          sep[0] == '\r')
        return COL_ERR("\"separator\": want one character other than the field delimiter, "
                       "'\"' and newlines", origin, i + 1, name);
      c->separator = sep[0];
    } else if (!strcmp(key, "pooling") && c->type == PS_COL_CAT) {
      if (!two_choices(v, "sum", "mean", &second)) return CHOICE_ERR("sum", "mean");
      c->pooling = second ? PS_SCHEMA_POOL_MEAN : PS_SCHEMA_POOL_SUM;
    } else if (!strcmp(key, "hash_buckets") && c->type == PS_COL_CAT) {
      if (!json_is_integer(v) || json_integer_value(v) < 1)
        return COL_ERR("\"hash_buckets\": want a positive integer", origin, i + 1, name);
      c->hash_buckets = (uint64_t)json_integer_value(v);
    } else {
      return COL_ERR("\"%s\" is not a key of a %s column", origin, i + 1, name, key, type);
    }
  }
  if (json_object_get(o, "pooling") && !c->separator)
    return COL_ERR("\"pooling\" needs a \"separator\" (a one-value column has nothing to pool)",
                   origin, i + 1, name);
#undef COL_ERR
#undef CHOICE_ERR
  return PS_OK;
}

static bool table_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

/* The table name of a schema without "table": the file's base name without ".json", other
 * characters than table_char as '_', then "_emb" (docs/schemas/criteo.json: criteo_emb, the
 * built-in layout's; clicks.json: clicks_emb). */
static void table_from_origin(const char *origin, char *out, size_t n) {
  const char *b = strrchr(origin, '/');
  b = b ? b + 1 : origin;
  size_t len = strlen(b);
  if (len > 5 && !strcmp(b + len - 5, ".json")) len -= 5;
  if (len > n - 5) len = n - 5; /* room for "_emb" and the NUL */
  for (size_t i = 0; i < len; i++) out[i] = table_char(b[i]) ? b[i] : '_';
  snprintf(out + len, n - len, "_emb");
}

ps_status ps_schema_parse_json(const char *text, const char *origin, ps_schema **out,
                               ps_error *err) {
  *out = NULL;
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  if (!root)
    return ps_error_set(err, PS_ERR_INVALID, "%s:%d: not valid JSON: %s", origin, je.line,
                        je.text);
  ps_status st = PS_ERR_INVALID;
  ps_schema *s = NULL;
  json_t *cols = json_object_get(root, "columns"), *fmt = json_object_get(root, "format");
  json_t *hdr = json_object_get(root, "header"), *tab = json_object_get(root, "table");
  const char *key;
  json_t *v;
  if (!json_is_object(root)) {
    ps_error_set(err, st, "%s: want a JSON object with \"columns\"", origin);
    goto out;
  }
  json_object_foreach(root, key, v) {
    if (strcmp(key, "format") && strcmp(key, "header") && strcmp(key, "columns") &&
        strcmp(key, "table")) {
      ps_error_set(err, st, "%s: \"%s\" is not a schema key (format, header, table, columns)",
                   origin, key);
      goto out;
    }
  }
  ps_schema_format f = PS_SCHEMA_TSV;
  if (fmt && (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "tsv") &&
                                       strcmp(json_string_value(fmt), "csv")))) {
    ps_error_set(err, st, "%s: \"format\": want tsv or csv", origin);
    goto out;
  }
  if (fmt && !strcmp(json_string_value(fmt), "csv")) f = PS_SCHEMA_CSV;
  if (hdr && !json_is_boolean(hdr)) {
    ps_error_set(err, st, "%s: \"header\": want true or false", origin);
    goto out;
  }
  const char *tn = json_string_value(tab);
  bool tn_ok = tn && *tn && strlen(tn) < sizeof s->table;
  for (const char *c = tn; tn_ok && *c; c++) tn_ok = table_char(*c);
  if (tab && !tn_ok) {
    ps_error_set(err, st, "%s: \"table\": want a name of 1 to %zu letters, digits, '_', '-' or "
                 "'.'", origin, sizeof s->table - 1);
    goto out;
  }
  size_t n = json_array_size(cols);
  if (!json_is_array(cols) || n == 0 || n > MAX_COLUMNS) {
    ps_error_set(err, st, "%s: \"columns\": want an array of 1 to %d columns", origin,
                 MAX_COLUMNS);
    goto out;
  }
  if (!(s = schema_new(origin, (int)n))) {
    st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
    goto out;
  }
  if (tab) snprintf(s->table, sizeof s->table, "%s", tn);
  else table_from_origin(origin, s->table, sizeof s->table);
  s->fmt = f;
  s->header = hdr && json_is_true(hdr);
  for (size_t i = 0; i < n; i++) {
    s->ncol = (int)i + 1;
    if ((st = parse_column(json_array_get(cols, i), (int)i, f, &s->cols[i], origin, err)))
      goto out;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(s->cols[j].name, s->cols[i].name)) {
        st = ps_error_set(err, PS_ERR_INVALID, "%s: column %zu '%s': the name of column %zu too",
                          origin, i + 1, s->cols[i].name, j + 1);
        goto out;
      }
  }
  st = finish(s, origin, err);
out:
  json_decref(root);
  if (st) ps_schema_destroy(&s);
  *out = s;
  return st;
}

ps_status ps_schema_load(const char *spec, ps_schema **out, ps_error *err) {
  *out = NULL;
  if (!spec || !strcmp(spec, "criteo")) return criteo(out, err);
  FILE *f = fopen(spec, "rb");
  if (!f) return ps_error_set(err, PS_ERR_INVALID, "%s: cannot read it", spec);
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      char *t = realloc(text, cap = cap ? cap * 2 : 8192);
      if (!t) {
        free(text);
        fclose(f);
        return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
      }
      text = t;
    }
    size_t got = fread(text + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad || len > (16u << 20)) {
    free(text);
    return ps_error_set(err, PS_ERR_INVALID, "%s: %s", spec, bad ? "read error" : "too large");
  }
  text[len] = 0;
  ps_status st = ps_schema_parse_json(text, spec, out, err);
  free(text);
  return st;
}

void ps_schema_signature(const ps_schema *s, char *out, size_t n) {
  uint64_t h = 0;
  for (int i = 0; i < s->ncol; i++) {
    const ps_schema_column *c = &s->cols[i];
    if (c->type == PS_COL_SKIP) continue;
    uint64_t v[4] = {(uint64_t)c->type, (uint64_t)(c->type == PS_COL_DENSE && c->log1p),
                     (uint64_t)(c->separator != 0) | (uint64_t)c->pooling << 1, c->hash_buckets};
    h = ps_hash64(v, sizeof v, h);
    /* mixed in only when set, so every schema without it keeps its signature (and its
     * checkpoints resume) */
    if (c->type == PS_COL_DENSE && c->missing_ind) h = ps_hash64("missing", 7, h);
  }
  snprintf(out, n, "%d dense, %d categorical, %016llx", s->ndense, s->ncat, (unsigned long long)h);
}

const char *ps_schema_name(const ps_schema *s) { return s->name; }
const char *ps_schema_table(const ps_schema *s) { return s->table; }
int ps_schema_is_criteo(const ps_schema *s) { return s->criteo; }
ps_schema_format ps_schema_fmt(const ps_schema *s) { return s->fmt; }
int ps_schema_header(const ps_schema *s) { return s->header; }
int ps_schema_ncolumns(const ps_schema *s) { return s->ncol; }
const ps_schema_column *ps_schema_column_at(const ps_schema *s, int i) { return &s->cols[i]; }
int ps_schema_ndense(const ps_schema *s) { return s->ndense; }
int ps_schema_nindicators(const ps_schema *s) { return s->nind; }
int ps_schema_ncat(const ps_schema *s) { return s->ncat; }
const ps_schema_column *ps_schema_cat(const ps_schema *s, int f) { return &s->cols[s->cat_col[f]]; }
int ps_schema_multi_hot(const ps_schema *s) { return s->multi; }
ps_schema_pool ps_schema_pooling(const ps_schema *s) { return s->pool; }

void ps_schema_pool_mask(const ps_schema *s, uint64_t *mean, unsigned *period) {
  *mean = s->pool == PS_SCHEMA_POOL_MEAN;
  *period = 1;
  if (s->pool != PS_SCHEMA_POOL_MIXED) return;
  *mean = 0;
  *period = (unsigned)s->ncat;
  for (int f = 0; f < s->ncat; f++) {
    const ps_schema_column *c = ps_schema_cat(s, f);
    if (c->separator && c->pooling == PS_SCHEMA_POOL_MEAN) *mean |= 1ull << f;
  }
}
