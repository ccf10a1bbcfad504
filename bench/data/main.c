/* ps-data-bench: how fast Criteo input becomes batches, per core. For one file (TSV, TSV.gz
 * or binary, detected) it measures
 *   parse   - ps_criteo_parse_line alone over the lines held in memory (TSV only),
 *   reader  - ps_reader with prefetch 0: read + parse + keys + batch on the calling thread
 *             (= rows/s per core),
 *   prefetch- ps_reader with its own thread, the consumer only touching each batch,
 * (with --world W: as rank 0 of W, which skips the other ranks' lines unparsed),
 * each as the best of --repeat runs (page cache warm after the first), and prints rows/s and
 * MB/s (of the input file), rows per CPU-second of the process (robust on a shared machine)
 * and optional JSON. With --schema FILE the file is read as that schema says (docs/SCHEMA.md)
 * and "parse" is the schema's line parser (ps_schema_parse_line into a record). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ps_cli.h"
#include "ps_criteo.h"
#include "ps_log.h"
#include "ps_reader.h"
#include "ps_sample.h"
#include "ps_schema.h"
#include "ps_time.h"

static int g_world = 1;
static ps_schema *g_schema; /* --schema (NULL: the built-in criteo) */

/* Process CPU time: rows per CPU-second stays meaningful on a shared, loaded machine. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double run_reader(const char *path, int batch, int prefetch, uint64_t hb, uint64_t *rows,
                         uint64_t *sink, double *cpu) {
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = batch, o.prefetch = prefetch, o.hash_buckets = hb, o.world = g_world;
  o.schema = g_schema;
  ps_reader *r;
  ps_error err;
  uint64_t t0 = ps_now_ns(); /* before create: the prefetch thread starts there */
  double c0 = cpu_s();
  if (ps_reader_create(path, &o, &r, &err) != PS_OK) {
    fprintf(stderr, "ps-data-bench: %s\n", ps_error_str(&err));
    exit(1);
  }
  uint64_t n = 0;
  ps_batch *b;
  while (ps_reader_next(r, &b, NULL) == PS_OK && b) {
    n += b->n;
    if (b->nkeys) *sink += b->keys[b->nkeys - 1];
    ps_reader_release(r, b);
  }
  double s = (double)(ps_now_ns() - t0) / 1e9;
  ps_reader_destroy(&r);
  *cpu = cpu_s() - c0;
  *rows = n;
  return s;
}

static double run_parse(const char *path, uint64_t *rows, uint64_t *sink, double *cpu) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)sz + 1);
  if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) sz = 0;
  fclose(f);
  uint64_t t0 = ps_now_ns(), n = 0;
  double c0 = cpu_s();
  ps_criteo_row row;
  ps_sample_buf rec = {0};
  for (char *p = buf, *e = buf + sz; p < e;) {
    char *nl = memchr(p, '\n', (size_t)(e - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(e - p);
    if (g_schema) { /* the schema's parser, into one reused record */
      rec.len = 0;
      if (ps_schema_parse_line(g_schema, p, len, &rec, NULL) == PS_OK) n++, *sink += rec.p[4];
    } else if (ps_criteo_parse_line(p, len, &row, NULL) == PS_OK) {
      n++, *sink += row.cat[25];
    }
    p += len + 1;
  }
  ps_sample_buf_free(&rec);
  double s = (double)(ps_now_ns() - t0) / 1e9;
  *cpu = cpu_s() - c0;
  free(buf);
  *rows = n;
  return s;
}

int main(int argc, char **argv) {
  const char *file = NULL, *json = NULL;
  int batch = 2048, repeat = 3;
  int64_t buckets = 0;
  const char *schema = NULL;
  ps_cli_opt opts[] = {
      {"file", 'f', PS_CLI_STRING, &file, "FILE", "Criteo TSV, TSV.gz or binary", true, 0, 0},
      {"batch", 'b', PS_CLI_INT, &batch, "B", "batch size", false, 1, 1 << 20},
      {"repeat", 'r', PS_CLI_INT, &repeat, "R", "runs per measurement (best is kept)", false, 1, 100},
      {"hash-buckets", 0, PS_CLI_I64, &buckets, "N", "key mode (0: open vocabulary)", false, 0, 1e15},
      {"world", 'w', PS_CLI_INT, &g_world, "W", "read as rank 0 of W (rows/s of one shard)", false, 1, 1024},
      {"json", 0, PS_CLI_STRING, &json, "FILE", "write the figures as JSON", false, 0, 0},
      {"schema", 0, PS_CLI_STRING, &schema, "criteo|FILE", "what a line means (docs/SCHEMA.md); a FILE is read by the schema parser", false, 0, 0},
  };
  ps_cli cli = {"ps-data-bench", "Criteo parsing/reading throughput per core.", NULL, opts,
                sizeof opts / sizeof opts[0]};
  int first, rc = ps_cli_run(&cli, argc, argv, &first);
  if (rc >= 0) return rc;
  ps_error err;
  if (schema && strcmp(schema, "criteo") && ps_schema_load(schema, &g_schema, &err) != PS_OK) {
    fprintf(stderr, "ps-data-bench: --schema %s\n", ps_error_str(&err));
    return 2;
  }
  ps_input_format fmt;
  if (ps_data_detect(file, &fmt) != PS_OK) {
    fprintf(stderr, "ps-data-bench: %s: cannot open\n", file);
    return 1;
  }
  struct stat sb;
  stat(file, &sb);
  double mb = (double)sb.st_size / 1e6;
  const char *fname = fmt == PS_INPUT_BIN ? "binary" : fmt == PS_INPUT_TSV_GZ ? "tsv.gz" : "tsv";
  uint64_t sink = 0, rows = 0;
  double best_parse = 0, best_sync = 1e30, best_pf = 1e30, cpu;
  double cpu_parse = 0, cpu_sync = 1e30, cpu_pf = 1e30;
  if (fmt == PS_INPUT_TSV && g_world == 1) {
    best_parse = cpu_parse = 1e30;
    for (int i = 0; i < repeat; i++) {
      double s = run_parse(file, &rows, &sink, &cpu);
      if (s < best_parse) best_parse = s;
      if (cpu < cpu_parse) cpu_parse = cpu;
    }
  }
  for (int i = 0; i < repeat; i++) {
    double s = run_reader(file, batch, 0, (uint64_t)buckets, &rows, &sink, &cpu);
    if (s < best_sync) best_sync = s;
    if (cpu < cpu_sync) cpu_sync = cpu;
    s = run_reader(file, batch, 4, (uint64_t)buckets, &rows, &sink, &cpu);
    if (s < best_pf) best_pf = s;
    if (cpu < cpu_pf) cpu_pf = cpu;
  }
  printf("file %s (%s, %.1f MB, %llu rows read as rank 0 of %d)\n", file, fname, mb,
         (unsigned long long)rows, g_world);
  printf("  %-26s %14s %10s %18s\n", "", "rows/s (wall)", "MB/s", "rows per CPU-s");
  if (best_parse > 0)
    printf("  %-26s %14.0f %10.1f %18.0f\n", "parse only (1 thread)", rows / best_parse, mb / best_parse, rows / cpu_parse);
  printf("  %-26s %14.0f %10.1f %18.0f\n", "reader, caller thread", rows / best_sync, mb / best_sync, rows / cpu_sync);
  printf("  %-26s %14.0f %10.1f %18.0f\n", "reader, prefetch thread", rows / best_pf, mb / best_pf, rows / cpu_pf);
  if (json) {
    json_t *j = json_pack("{s:s, s:s, s:I, s:f, s:f, s:f}", "file", file, "format", fname, "rows",
                          (json_int_t)rows, "mb", mb, "reader_rows_per_s", rows / best_sync,
                          "prefetch_rows_per_s", rows / best_pf);
    json_object_set_new(j, "world", json_integer(g_world));
    if (best_parse > 0) json_object_set_new(j, "parse_rows_per_s", json_real(rows / best_parse));
    if (best_parse > 0) json_object_set_new(j, "parse_rows_per_cpu_s", json_real(rows / cpu_parse));
    json_object_set_new(j, "reader_rows_per_cpu_s", json_real(rows / cpu_sync));
    json_object_set_new(j, "prefetch_rows_per_cpu_s", json_real(rows / cpu_pf));
    json_dump_file(j, json, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
  }
  ps_schema_destroy(&g_schema);
  return sink == 42 ? 3 : 0; /* keep the work observable */
}
