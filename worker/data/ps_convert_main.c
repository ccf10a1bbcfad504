/* ps-convert: Criteo TSV (or .gz) -> Ember's binary format (ps_criteo_bin.h), so training
 * reads fixed-size records instead of parsing text. Thin main over ps_reader (one rank, no
 * shuffle, so rows keep their file order) and the binary writer. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_criteo_bin.h"
#include "ps_log.h"
#include "ps_reader.h"
#include "ps_time.h"

int main(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *bad = "skip", *level = "info";
  ps_cli_opt opts[] = {
      {"in", 'i', PS_CLI_STRING, &in, "FILE", "input: Criteo TSV, TSV.gz (or binary)", true, 0, 0},
      {"out", 'o', PS_CLI_STRING, &out, "FILE", "output binary file", true, 0, 0},
      {"bad-lines", 0, PS_CLI_STRING, &bad, "skip|fail", "what to do with a bad line", false, 0, 0},
      PS_CLI_LOG_LEVEL_OPT(&level),
  };
  ps_cli cli = {"ps-convert", "Convert Criteo TSV to Ember's binary format.", NULL, opts,
                sizeof opts / sizeof opts[0]};
  int first;
  int rc = ps_cli_run(&cli, argc, argv, &first);
  if (rc >= 0) return rc;
  if (ps_log_apply_level("ps-convert", level) != 0) return 2;
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
  ps_reader *r;
  ps_status st = ps_reader_create(in, &o, &r, &err);
  if (st) {
    fprintf(stderr, "ps-convert: %s\n", ps_error_str(&err));
    return 1;
  }
  ps_criteo_bin_writer *w;
  if ((st = ps_criteo_bin_writer_create(out, &w))) {
    fprintf(stderr, "ps-convert: %s: cannot create: %s\n", out, ps_status_str(st));
    ps_reader_destroy(&r);
    return 1;
  }
  uint64_t t0 = ps_now_ns(), rows = 0;
  ps_batch *b;
  ps_error_clear(&err); /* a write error below leaves it clear: its status's text is shown */
  while ((st = ps_reader_next(r, &b, &err)) == PS_OK && b) {
    for (size_t i = 0; i < b->n && !st; i++) st = ps_criteo_bin_write(w, &b->rows[i]);
    rows += b->n;
    ps_reader_release(r, b);
    if (st) break;
  }
  uint64_t bad_n = ps_reader_bad_lines(r);
  if (st) {
    fprintf(stderr, "ps-convert: %s\n", err.code ? ps_error_str(&err) : ps_status_str(st));
    ps_reader_destroy(&r);
    ps_criteo_bin_writer_close(&w, bad_n);
    remove(out); /* never leave a half file that looks converted */
    return 1;
  }
  ps_reader_destroy(&r);
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
