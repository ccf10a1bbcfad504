/* ps_schema: what a line of input data means — the user's description of a click log (the
 * `--schema FILE` of ps-worker and ps-convert) and the built-in Criteo Kaggle layout (`criteo`,
 * the default) — and the parser that turns a line into a sample record (ps_sample.h).
 *
 * FILE is JSON (docs/SCHEMA.md has the full reference and examples):
 *   {"format": "csv"|"tsv", "header": bool, "table": "NAME" (default: from the file's name),
 *    "columns": [{"name": "...", "type": "label"|"dense"|"categorical"|"skip",
 *                 "transform": "log1p"|"none",        dense only; default log1p of max(x, 0)
 *                 "missing": "zero"|"indicator",      dense only; default zero (empty = 0)
 *                 "separator": "|",                   categorical only: multi-hot
 *                 "pooling": "sum"|"mean",            multi-hot only; default sum
 *                 "hash_buckets": N}, ...]}           categorical only; default --hash-buckets
 * Exactly one label column; dense and categorical columns are numbered in file order (the
 * model's dense inputs and embedding bags). Unknown keys are refused, so a typo is not
 * silently ignored.
 *
 * Design decisions:
 * - Values of a categorical column are byte strings. A value of exactly 8 hex digits is read as
 *   the 32-bit number it spells (Criteo's encoding: so `criteo` and docs/schemas/criteo.json
 *   give the same keys as before schemas existed; 'ABCDEF01' and 'abcdef01' are one category);
 *   any other value is hashed to 63 bits. ps_sample.h turns these tokens into keys.
 * - An empty value is missing: a one-value column gets its feature's own missing key (as
 *   Criteo always did); a multi-hot column gets an empty bag (pooled to zero). Empty items of
 *   a multi-hot value ("a||b") are dropped.
 * - csv is RFC 4180 (fields separated by ',', a field in double quotes may hold ',' and '""'
 *   for a quote) except that a record is one line: the reader shards by line, so a newline
 *   inside quotes is an "unterminated quote" error. tsv has no quoting. One trailing '\r' is
 *   dropped in both.
 * - Pooling is per multi-hot column (one-value bags pool the same under sum and mean). The
 *   model takes it as a bit mask over the features (ps_kern_pool: passed by value to a CUDA
 *   kernel, no upload), so a schema that mixes sum and mean has at most 64 categorical
 *   columns; one mode for all has no limit.
 * - The built-in `criteo` schema parses with ps_criteo.c's fast path (the same records). */
#ifndef PS_SCHEMA_H
#define PS_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef enum ps_col_type { PS_COL_SKIP = 0, PS_COL_LABEL, PS_COL_DENSE, PS_COL_CAT } ps_col_type;
typedef enum ps_schema_format { PS_SCHEMA_TSV = 0, PS_SCHEMA_CSV = 1 } ps_schema_format;
typedef enum ps_schema_pool {
  PS_SCHEMA_POOL_SUM = 0,
  PS_SCHEMA_POOL_MEAN = 1,
  PS_SCHEMA_POOL_MIXED = 2 /* ps_schema_pooling only: multi-hot columns of both kinds */
} ps_schema_pool;

typedef struct ps_schema_column {
  const char *name;
  ps_col_type type;
  int index;              /* dense: input index; categorical: feature index; else -1 */
  int log1p;              /* dense: 1 = log(1 + max(x, 0)), 0 = x as is */
  int missing_ind;        /* dense: "missing": "indicator": input index + 1 is 1 when empty */
  char separator;         /* categorical: multi-hot separator, 0 = one value */
  ps_schema_pool pooling; /* multi-hot */
  uint64_t hash_buckets;  /* categorical: 0 = the run's --hash-buckets */
} ps_schema_column;

typedef struct ps_schema ps_schema;

/* "criteo" (or NULL) = the built-in Criteo Kaggle layout; anything else is a JSON file. An
 * unreadable file or a bad schema is PS_ERR_INVALID with one line naming the file and the
 * column ("s.json: column 3 'price': transform: want log1p or none, got 'sqrt'"). */
ps_status ps_schema_load(const char *spec, ps_schema **out, ps_error *err);
/* The same from JSON text; origin names it in messages. */
ps_status ps_schema_parse_json(const char *json, const char *origin, ps_schema **out,
                               ps_error *err);
void ps_schema_destroy(ps_schema **s);

const char *ps_schema_name(const ps_schema *s); /* "criteo" or the file */
/* The embedding table's name on the servers: "criteo_emb" for the built-in layout; a file's
 * "table", else its base name without ".json" and "_emb" (docs/schemas/criteo.json: criteo_emb,
 * clicks.json: clicks_emb), so tables of several schemas on one cluster are told apart. */
const char *ps_schema_table(const ps_schema *s);
int ps_schema_is_criteo(const ps_schema *s);    /* the built-in layout (its fast parser) */
ps_schema_format ps_schema_fmt(const ps_schema *s);
int ps_schema_header(const ps_schema *s);
int ps_schema_ncolumns(const ps_schema *s);
const ps_schema_column *ps_schema_column_at(const ps_schema *s, int i);
/* The dense inputs of a record and of the model: one per dense column, plus one per column
 * with "missing": "indicator" (1 when the value was empty, else 0; right after its value). */
int ps_schema_ndense(const ps_schema *s);
int ps_schema_nindicators(const ps_schema *s); /* of those, the missing indicators */
int ps_schema_ncat(const ps_schema *s);
/* The categorical column of feature f (0 .. ncat-1). */
const ps_schema_column *ps_schema_cat(const ps_schema *s, int f);
int ps_schema_multi_hot(const ps_schema *s);     /* any column with a separator */
/* The multi-hot columns' pooling: SUM (also with no multi-hot column), MEAN, or MIXED. */
ps_schema_pool ps_schema_pooling(const ps_schema *s);
/* The same for the model (ps_kern_pool's fields): bit f of *mean set when feature f pools by
 * mean, *period the number of features when the pooling is MIXED, else 1 (every bag alike,
 * *mean = 1 for MEAN). */
void ps_schema_pool_mask(const ps_schema *s, uint64_t *mean, unsigned *period);

/* What the schema makes of a line, as a short string for a checkpoint to compare: the dense
 * and categorical counts and a hash of what changes a key or a model input (transforms, per-
 * column buckets, multi-hot and pooling) — not the names or the text format, so the built-in
 * criteo and docs/schemas/criteo.json agree. out gets at most n bytes. */
void ps_schema_signature(const ps_schema *s, char *out, size_t n);

/* Checks a header line against the column names: PS_ERR_PARSE with one line naming the first
 * mismatch ("header column 3 is 'price', the schema says 'cost'"). */
ps_status ps_schema_check_header(const ps_schema *s, const char *line, size_t len, ps_error *err);

/* Parses one data line (without '\n') and appends its record (ps_sample.h) to out; out is
 * unchanged on failure: PS_ERR_PARSE with a one-line reason naming the column ("column
 * 'site_id' (4): ..."; the reader adds FILE:LINE), or PS_ERR_NOMEM. */
struct ps_sample_buf;
ps_status ps_schema_parse_line(const ps_schema *s, const char *line, size_t len,
                               struct ps_sample_buf *out, ps_error *err);

/* A one-value categorical column whose every value holds a likely multi-hot separator ('|',
 * ';' or ',') most likely lacks its "separator": it would train silently on whole strings
 * (issue 36: AUC 0.749 instead of 0.796). The reader scans its first data lines with
 * ps_schema_sep_scan and warns once with ps_schema_sep_hint's line. */
typedef struct ps_schema_sep_stats ps_schema_sep_stats;
ps_schema_sep_stats *ps_schema_sep_new(const ps_schema *s); /* NULL: out of memory */
void ps_schema_sep_free(ps_schema_sep_stats **st);
/* Counts the values of one data line (a line that does not parse counts as it splits). */
void ps_schema_sep_scan(const ps_schema *s, ps_schema_sep_stats *st, const char *line, size_t len);
uint64_t ps_schema_sep_lines(const ps_schema_sep_stats *st);
/* 1 with one line into msg (at most n bytes) naming the first such column, its separator and a
 * value, when it had at least PS_SCHEMA_SEP_MIN values; else 0. */
#define PS_SCHEMA_SEP_MIN 20
int ps_schema_sep_hint(const ps_schema *s, const ps_schema_sep_stats *st, char *msg, size_t n);

#endif
