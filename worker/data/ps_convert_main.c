/* ps-convert: text data (Criteo TSV by default, or as --schema says; or .gz) -> Ember's binary
 * format (ps_criteo_bin.h), so training reads records instead of parsing text. Thin main over
 * ps_reader (one rank, no shuffle, so rows keep their file order) and the binary writer. The
 * built-in criteo schema writes version 1 (fixed records: the same bytes as before schemas);
 * any other schema writes version 2 (variable records, multi-hot bags). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_criteo_bin.h"
#include "ps_log.h"
#include "ps_reader.h"
#include "ps_schema.h"
#include "ps_time.h"

int main(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *bad = "skip", *level = "info", *schema = "criteo";
  ps_cli_opt opts[] = {
      {"in", 'i', PS_CLI_STRING, &in, "FILE", "input: text as --schema says, .gz (or binary)", true, 0, 0},
      {"out", 'o', PS_CLI_STRING, &out, "FILE", "output binary file", true, 0, 0},
      {"bad-lines", 0, PS_CLI_STRING, &bad, "skip|fail", "what to do with a bad line", false, 0, 0},
      PS_CLI_LOG_LEVEL_OPT(&level),
      {"schema", 0, PS_CLI_STRING, &schema, "criteo|FILE", "what a line of --in means: the built-in Criteo layout or a JSON schema (docs/SCHEMA.md)", false, 0, 0},
  };
  ps_cli cli = {"ps-convert", "Convert text data (Criteo TSV or as --schema says) to Ember's binary format.", NULL, opts,
                sizeof opts / sizeof opts[0]};
  int first;
  int rc = ps_cli_run_logged(&cli, argc, argv, &first, &level);
  if (rc >= 0) return rc;
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  if (strcmp(bad, "skip") == 0) o.bad_lines = PS_BAD_LINES_SKIP;
  else if (strcmp(bad, "fail") == 0) o.bad_lines = PS_BAD_LINES_FAIL;
  else {
    fprintf(stderr, "ps-convert: --bad-lines: want skip or fail, got '%s'\n", bad);
    return 2;
  }
  o.batch = 8192;
  o.keep_rows = 1;
  ps_error err;
  ps_schema *sc = NULL;
  if (ps_schema_load(schema, &sc, &err) != PS_OK) {
    fprintf(stderr, "ps-convert: --schema %s\n", ps_error_str(&err));
    return 2;
  }
  o.schema = sc;
  ps_reader *r;
  ps_status st = ps_reader_create(in, &o, &r, &err);
  if (st) {
    fprintf(stderr, "ps-convert: %s\n", ps_error_str(&err));
    ps_schema_destroy(&sc);
    return 1;
  }
  int v1 = ps_schema_is_criteo(sc);
  ps_criteo_bin_writer *w;
  st = v1 ? ps_criteo_bin_writer_create(out, &w)
          : ps_criteo_bin_writer_create_v2(out, ps_schema_ndense(sc), ps_schema_ncat(sc),
                                           ps_schema_multi_hot(sc), &w);
  if (st) {
    fprintf(stderr, "ps-convert: %s: cannot create: %s\n", out, ps_status_str(st));
    ps_reader_destroy(&r);
    ps_schema_destroy(&sc);
    return 1;
  }
  uint64_t t0 = ps_now_ns(), rows = 0;
  ps_batch *b;
  ps_error_clear(&err); /* a write error below leaves it clear: its status's text is shown */
  while ((st = ps_reader_next(r, &b, &err)) == PS_OK && b) {
    for (size_t i = 0; i < b->n && !st; i++)
      st = v1 ? ps_criteo_bin_write(w, &b->rows[i])
              : ps_criteo_bin_write_sample(w, b->recs + b->rec_off[i]);
    rows += b->n;
    ps_reader_release(r, b);
    if (st) break;
  }
  uint64_t bad_n = ps_reader_bad_lines(r);
  if (st) {
    fprintf(stderr, "ps-convert: %s\n", err.code ? ps_error_str(&err) : ps_status_str(st));
    ps_reader_destroy(&r);
    ps_schema_destroy(&sc);
    ps_criteo_bin_writer_close(&w, bad_n);
    remove(out); /* never leave a half file that looks converted */
    return 1;
  }
  ps_reader_destroy(&r);
  ps_schema_destroy(&sc);
  if (ps_criteo_bin_writer_close(&w, bad_n) != PS_OK) {
    fprintf(stderr, "ps-convert: %s: write failed\n", out);
    remove(out);
    return 1;
  }
  double s = (double)(ps_now_ns() - t0) / 1e9;
  printf("rows %llu bad_lines %llu seconds %.3f\n", (unsigned long long)rows,
         (unsigned long long)bad_n, s);
  PS_INFO("%s -> %s: %llu rows, %llu bad lines skipped, %.2f s", in, out,
          (unsigned long long)rows, (unsigned long long)bad_n, s);
  return 0;
}
