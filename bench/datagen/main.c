/* ps-datagen: writes Criteo-format TSV from the planted model of ps_datagen.h and prints
 * that model's AUC and logloss on the rows it wrote (the ceiling a trained model can
 * approach). Same seed, same flags: byte-identical files. A name ending in .gz is written
 * gzip-compressed (zlib's gz* writer stores no timestamp, so it is reproducible too).
 * --multi-hot, --vocab-scale and --zipf-shift pick other shapes of data (ps_datagen.h);
 * --schema-out writes the JSON schema (ps-worker --schema) that reads the files written;
 * --schema FILE writes files in FILE's layout and counts instead of Criteo's (header line
 * included when it has one), for any user schema. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ps_cli.h"
#include "ps_datagen.h"
#include "ps_log.h"
#include "ps_metrics_eval.h"
#include "ps_time.h"

typedef struct out_file {
  FILE *f;
  gzFile gz;
} out_file;

static int out_open(out_file *o, const char *path) {
  size_t n = strlen(path);
  memset(o, 0, sizeof *o);
  if (n > 3 && strcmp(path + n - 3, ".gz") == 0) {
    o->gz = gzopen(path, "wb1");
    if (o->gz) gzbuffer(o->gz, 1 << 20);
    return o->gz ? 0 : -1;
  }
  o->f = fopen(path, "wb");
  if (o->f) setvbuf(o->f, NULL, _IOFBF, 1 << 20);
  return o->f ? 0 : -1;
}
static int out_write(out_file *o, const char *buf, size_t n) {
  if (o->gz) return gzwrite(o->gz, buf, (unsigned)n) == (int)n ? 0 : -1;
  return fwrite(buf, 1, n, o->f) == n ? 0 : -1;
}
static int out_close(out_file *o) {
  if (o->gz) return gzclose(o->gz) == Z_OK ? 0 : -1;
  return fclose(o->f) == 0 ? 0 : -1;
}

typedef struct split_stats {
  double auc, logloss, ctr;
} split_stats;

/* Writes rows [0, n) of `stream` to path; fills the planted model's metrics. */
static int write_split(const ps_datagen *g, int stream, int64_t n, const char *path,
                       const char *header, const char *probs_path, split_stats *st) {
  out_file o;
  if (out_open(&o, path) != 0) {
    fprintf(stderr, "ps-datagen: %s: cannot create\n", path);
    return -1;
  }
  FILE *pf = probs_path ? fopen(probs_path, "w") : NULL;
  if (probs_path && !pf) {
    fprintf(stderr, "ps-datagen: %s: cannot create\n", probs_path);
    out_close(&o);
    return -1;
  }
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  float *y = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!p || !y) {
    fprintf(stderr, "ps-datagen: out of memory\n");
    return -1;
  }
  enum { CHUNK = 1 << 20 };
  char *buf = malloc(CHUNK + ps_datagen_line_max(g));
  size_t used = 0;
  int rc = header ? out_write(&o, header, strlen(header)) : 0;
  double pos = 0;
  for (int64_t i = 0; i < n && rc == 0; i++) {
    int lab;
    used += ps_datagen_line(g, stream, (uint64_t)i, buf + used, &p[i], &lab);
    y[i] = (float)lab;
    pos += lab;
    if (pf) fprintf(pf, "%.9g\n", p[i]);
    if (used >= CHUNK) {
      rc = out_write(&o, buf, used);
      used = 0;
    }
  }
  if (rc == 0 && used) rc = out_write(&o, buf, used);
  if (out_close(&o) != 0) rc = -1;
  if (pf && fclose(pf) != 0) rc = -1;
  if (rc) fprintf(stderr, "ps-datagen: %s: write failed\n", path);
  st->auc = ps_eval_auc(p, y, (size_t)n);
  st->logloss = ps_eval_logloss(p, y, (size_t)n, 1e-7);
  st->ctr = n ? pos / (double)n : 0;
  free(buf), free(p), free(y);
  return rc;
}

/* The schema of the written files: label, i1..i13 dense, c1..c26 categorical ('|'-separated
 * bags with --multi-hot). */
static int write_schema(const char *path, int multi_hot) {
  json_t *cols = json_array();
  json_array_append_new(cols, json_pack("{s:s, s:s}", "name", "label", "type", "label"));
  char name[8];
  for (int k = 1; k <= PS_CRITEO_NDENSE; k++) {
    snprintf(name, sizeof name, "i%d", k);
    json_array_append_new(cols, json_pack("{s:s, s:s}", "name", name, "type", "dense"));
  }
  for (int f = 1; f <= PS_CRITEO_NCAT; f++) {
    snprintf(name, sizeof name, "c%d", f);
    json_t *c = json_pack("{s:s, s:s}", "name", name, "type", "categorical");
    if (multi_hot > 1) json_object_set_new(c, "separator", json_string((char[]){PS_DATAGEN_SEPARATOR, 0}));
    json_array_append_new(cols, c);
  }
  json_t *j = json_pack("{s:s, s:b, s:o}", "format", "tsv", "header", 0, "columns", cols);
  int bad = json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0;
  json_decref(j);
  if (bad) fprintf(stderr, "ps-datagen: %s: cannot write\n", path);
  return bad ? -1 : 0;
}

/* The header line of a schema that has one: its column names, csv-quoted where they must be;
 * NULL when it has none. The caller frees it. */
static char *header_of(const ps_schema *s) {
  if (!ps_schema_header(s)) return NULL;
  int csv = ps_schema_fmt(s) == PS_SCHEMA_CSV;
  size_t cap = 2;
  for (int c = 0; c < ps_schema_ncolumns(s); c++) cap += 3 + 2 * strlen(ps_schema_column_at(s, c)->name);
  char *h = malloc(cap), *o = h;
  if (!h) return NULL;
  for (int c = 0; c < ps_schema_ncolumns(s); c++) {
    const char *name = ps_schema_column_at(s, c)->name;
    if (c) *o++ = csv ? ',' : '\t';
    int q = csv && strpbrk(name, ",\"") != NULL;
    if (q) *o++ = '"';
    for (const char *p = name; *p; p++) {
      if (q && *p == '"') *o++ = '"';
      *o++ = *p;
    }
    if (q) *o++ = '"';
  }
  *o++ = '\n';
  *o = 0;
  return h;
}

int main(int argc, char **argv) {
  int64_t rows = 0, test_rows = 0, seed = 1, multi_hot = 0;
  double vocab_scale = 1.0, zipf_shift = 0.0;
  const char *out = NULL, *test_out = NULL, *json = NULL, *probs = NULL, *level = "info";
  const char *schema_out = NULL, *schema = NULL;
  ps_cli_opt opts[] = {
      {"rows", 'n', PS_CLI_I64, &rows, "N", "training rows to write", true, 0, 1e12},
      {"seed", 's', PS_CLI_I64, &seed, "S", "seed of the planted model and the rows", false, 0, 9.2e18},
      {"out", 'o', PS_CLI_STRING, &out, "FILE", "training TSV (.gz: compressed)", true, 0, 0},
      {"test-rows", 0, PS_CLI_I64, &test_rows, "M", "test rows (same model, other rows)", false, 0, 1e12},
      {"test-out", 0, PS_CLI_STRING, &test_out, "FILE2", "test TSV (with --test-rows)", false, 0, 0},
      {"json", 0, PS_CLI_STRING, &json, "FILE", "write the planted model's metrics as JSON", false, 0, 0},
      {"probs-out", 0, PS_CLI_STRING, &probs, "FILE", "write each training row's planted probability", false, 0, 0},
      PS_CLI_LOG_LEVEL_OPT(&level),
      {"multi-hot", 0, PS_CLI_I64, &multi_hot, "M", "bags of 1..M ids per categorical, '|'-separated (0 or 1: one id)", false, 0, PS_DATAGEN_MAX_BAG},
      {"vocab-scale", 0, PS_CLI_DOUBLE, &vocab_scale, "X", "every categorical vocabulary times X", false, 1e-6, 1000},
      {"zipf-shift", 0, PS_CLI_DOUBLE, &zipf_shift, "D", "every Zipf exponent plus D (> 0: a shorter tail); each stays in (0.5, 5]", false, -0.5, 3.9},
      {"schema-out", 0, PS_CLI_STRING, &schema_out, "FILE", "write the JSON schema of the files (ps-worker --schema)", false, 0, 0},
      {"schema", 0, PS_CLI_STRING, &schema, "FILE", "write the files in this JSON schema's layout and counts (docs/SCHEMA.md); its multi-hot columns get bags of 1..--multi-hot ids (default 4)", false, 0, 0},
  };
  ps_cli cli = {"ps-datagen", "Synthetic Criteo-format (or --schema) data with a planted model.", NULL, PS_CLI_OPTS(opts)};
  int first;
  int rc = ps_cli_run_logged(&cli, argc, argv, &first, &level);
  if (rc >= 0) return rc;
  if ((test_rows > 0) != (test_out != NULL)) {
    fprintf(stderr, "ps-datagen: --test-rows and --test-out go together\n");
    return 2;
  }
  ps_schema *sc = NULL;
  char *header = NULL;
  if (schema) {
    ps_error err;
    if (schema_out) {
      fprintf(stderr, "ps-datagen: --schema-out with --schema: the files' schema is %s\n", schema);
      return 2;
    }
    if (ps_schema_load(schema, &sc, &err) != PS_OK) {
      fprintf(stderr, "ps-datagen: %s\n", ps_error_str(&err));
      return 2;
    }
    if (ps_schema_ncat(sc) < 1 || ps_schema_ndense(sc) > PS_DATAGEN_MAX_DENSE ||
        ps_schema_ncat(sc) > PS_DATAGEN_MAX_CAT || ps_schema_ncolumns(sc) > PS_DATAGEN_MAX_COLS) {
      fprintf(stderr, "ps-datagen: --schema %s: want 1 to %d categorical, at most %d dense and %d "
              "columns in all, it has %d, %d and %d\n", schema, PS_DATAGEN_MAX_CAT,
              PS_DATAGEN_MAX_DENSE, PS_DATAGEN_MAX_COLS, ps_schema_ncat(sc), ps_schema_ndense(sc),
              ps_schema_ncolumns(sc));
      ps_schema_destroy(&sc);
      return 2;
    }
    header = header_of(sc);
  }
  uint64_t t0 = ps_now_ns();
  ps_datagen_opts go;
  ps_datagen_opts_default(&go);
  go.seed = (uint64_t)seed, go.multi_hot = (int)multi_hot;
  go.vocab_scale = vocab_scale, go.zipf_shift = zipf_shift, go.schema = sc;
  ps_datagen *g;
  ps_status gst = ps_datagen_create_opts(&go, &g);
  if (gst == PS_ERR_INVALID) {
    fprintf(stderr, "ps-datagen: --zipf-shift %g takes a Zipf exponent to 0.5 or below\n", zipf_shift);
    return 2;
  }
  if (gst != PS_OK) {
    fprintf(stderr, "ps-datagen: out of memory\n");
    return 1;
  }
  if (schema_out && write_schema(schema_out, (int)multi_hot) != 0) return 1;
  split_stats tr = {0}, te = {0};
  if (write_split(g, 0, rows, out, header, probs, &tr) != 0) return 1;
  if (test_out && write_split(g, 1, test_rows, test_out, header, NULL, &te) != 0) return 1;
  double secs = (double)(ps_now_ns() - t0) / 1e9;
  printf("planted model AUC: train %.4f (%lld rows, CTR %.4f, logloss %.4f)", tr.auc,
         (long long)rows, tr.ctr, tr.logloss);
  if (test_out)
    printf(", test %.4f (%lld rows, CTR %.4f, logloss %.4f)", te.auc, (long long)test_rows,
           te.ctr, te.logloss);
  printf("\n");
  PS_INFO("wrote %lld + %lld rows in %.2f s (%.0f rows/s)", (long long)rows, (long long)test_rows,
          secs, (double)(rows + test_rows) / (secs > 0 ? secs : 1e-9));
  if (json) {
    json_t *j = json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:I, s:f, s:f}", "seed",
                          (json_int_t)seed, "rows", (json_int_t)rows, "test_rows",
                          (json_int_t)test_rows, "train_auc", tr.auc, "train_logloss",
                          tr.logloss, "train_ctr", tr.ctr, "bias", ps_datagen_bias(g),
                          "multi_hot", (json_int_t)multi_hot, "vocab_scale", vocab_scale,
                          "zipf_shift", zipf_shift);
    if (test_out) {
      json_object_set_new(j, "test_auc", json_real(te.auc));
      json_object_set_new(j, "test_logloss", json_real(te.logloss));
      json_object_set_new(j, "test_ctr", json_real(te.ctr));
    }
    int bad = json_dump_file(j, json, JSON_INDENT(2) | JSON_SORT_KEYS) != 0;
    json_decref(j);
    if (bad) {
      fprintf(stderr, "ps-datagen: %s: cannot write\n", json);
      return 1;
    }
  }
  ps_datagen_destroy(&g);
  ps_schema_destroy(&sc);
  free(header);
  return 0;
}
