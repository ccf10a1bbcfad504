/* ps-predict: scores a file with a trained model, offline — one probability per data line of
 * --input, in order, from a checkpoint opened read-only (ps_ckpt.h), with no server running;
 * with labels, AUC, logloss, accuracy and the count (as ps-worker's evaluation computes them,
 * ps_metrics_eval.h), printed and written to --summary as JSON.
 *
 * Design decisions:
 * - Lines are read here, not through ps_reader: the reader drops a bad line, and the output
 *   must keep one line per input line (a bad line gets an empty one and is counted), so the
 *   line order is kept by parsing each line with the schema's own parser (ps_schema_parse_line)
 *   and turning its record into keys with the same key map the reader uses (ps_sample_decode).
 *   zlib's gz reader reads plain and gzipped text alike. Ember's binary format has no lines to
 *   keep: it is refused (give the text file).
 * - A batch is scored as ps-worker evaluates one (ps_score.h, shared with ps-serve): keys de-duplicated, rows pulled (here from
 *   the shards' snapshots, unseen keys at the store's initial value), ps_dlrm_predict. So the
 *   scores equal the worker's evaluation of the same checkpoint to float rounding.
 * - --threads is the compute backend's (the MLPs); parsing is one thread.
 * - --servers URL,... (ps-server --serve of the same checkpoint, one URL per shard in shard
 *   order) looks the rows up on serving servers instead of the snapshots, which are not opened
 *   (ps_ckpt_open_model): a scoring host needs only the checkpoint's config, dense.bin and
 *   schema. The table is attached by the config's table-name (its spec is the servers', a DECLARE
 *   with dim 0, docs/PROTOCOL.md), and refused in one line unless it agrees with the checkpoint:
 *   each server's STATS must say it is shard i of as many shards as URLs, the table's rows must
 *   have emb-dim values, and a server that reports the checkpoint step it serves must serve this
 *   one (checked once, at start). A serving server answers a key it stores no row for with the
 *   same initial row, so the scores are the offline ones.
 * - --export DIR (instead of --checkpoint) scores from a ps-export directory alone
 *   (ps_export_model.h): its manifest, schema, dense/params.npy and rows, f32 or int8
 *   (ps-export --quantize int8, held as int8 and dequantized per batch); the manifest's row type
 *   is checked against the files and anything else is refused in one line. An f32 export
 *   scores as its checkpoint does. With --servers (ps-server --serve of the export), the rows
 *   come from the servers and only the export's manifest, schema and dense/params.npy are read
 *   (ps_export_model_open_model), checked against the servers as for a checkpoint. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ps_cli.h"
#include "ps_client.h"
#include "ps_log.h"
#include "ps_reader.h"
#include "ps_score.h"
#include "ps_sample.h"
#include "ps_time.h"

#define PROG "ps-predict"

#define fail(rc, ...) ps_tool_fail(PROG, rc, __VA_ARGS__)

/* Scores the batch and writes one line per input line. */
static ps_status flush_batch(ps_predictor *p, FILE *out) {
  int n = 0;
  ps_status st = ps_predictor_score(p, &n);
  if (st != PS_OK) return st;
  for (int i = 0, j = 0; i < p->nlines; i++) {
    if (p->good[i]) fprintf(out, "%.9g\n", (double)p->probs[j++]);
    else fputc('\n', out);
  }
  p->nlines = 0;
  p->recs.len = 0;
  return ferror(out) ? PS_ERR_IO : PS_OK;
}

/* One line of a gz stream (plain text reads through too) into *buf without its '\n'; 0 at
 * the end, -1 on a read error. */
static long read_line(gzFile f, char **buf, size_t *cap) {
  size_t len = 0;
  for (;;) {
    if (*cap - len < 2) {
      size_t nc = *cap ? *cap * 2 : 65536;
      char *b = realloc(*buf, nc);
      if (!b) return -1;
      *buf = b;
      *cap = nc;
    }
    if (!gzgets(f, *buf + len, (int)(*cap - len > INT32_MAX ? INT32_MAX : *cap - len))) {
      int e;
      gzerror(f, &e);
      if (e != Z_OK && e != Z_STREAM_END) return -1;
      return len ? (long)len : 0;
    }
    len += strlen(*buf + len);
    if (len && (*buf)[len - 1] == '\n') {
      (*buf)[--len] = '\0';
      return (long)len + 1; /* +1: an empty line is not the end */
    }
  }
}

typedef struct run_result {
  uint64_t lines, bad;
  double secs;
  ps_eval_result er;
} run_result;

static int predict_file(ps_predictor *p, const char *in, const char *outp, double progress,
                        run_result *res) {
  gzFile f = gzopen(in, "rb");
  if (!f) return fail(1, "cannot open %s", in);
  FILE *out = fopen(outp, "w");
  if (!out) {
    gzclose(f);
    return fail(1, "cannot create %s", outp);
  }
  const ps_schema *sc = ps_predictor_schema(p);
  char *buf = NULL;
  size_t cap = 0;
  uint64_t t0 = ps_now_ns(), last = t0, phys = 0;
  int rc = 0;
  ps_status st = PS_OK;
  long got;
  while ((got = read_line(f, &buf, &cap)) > 0) {
    size_t len = strlen(buf);
    phys++;
    if (phys == 1 && ps_schema_header(sc)) {
      ps_error why;
      if (ps_schema_check_header(sc, buf, len, &why) != PS_OK) {
        rc = fail(2, "%s: %s", in, ps_error_str(&why));
        break;
      }
      continue;
    }
    ps_error why;
    size_t at = p->recs.len;
    st = ps_schema_parse_line(sc, buf, len, &p->recs, &why);
    if (st == PS_ERR_NOMEM) break;
    p->good[p->nlines] = st == PS_OK;
    p->rec_off[p->nlines++] = at;
    if (st != PS_OK && res->bad++ < 10) PS_WARN("%s:%" PRIu64 ": %s", in, phys, ps_error_str(&why));
    st = PS_OK;
    res->lines++;
    if (p->nlines == p->batch && (st = flush_batch(p, out)) != PS_OK) break;
    uint64_t now = ps_now_ns();
    if (progress > 0 && ps_ns_to_s(now - last) >= progress) {
      last = now;
      PS_INFO("%" PRIu64 " lines, %.0f rows/s", res->lines, res->lines / ps_ns_to_s(now - t0));
    }
  }
  if (got < 0 && !rc) rc = fail(1, "%s: read error", in);
  if (!rc && st == PS_OK && p->nlines) st = flush_batch(p, out);
  if (!rc && st != PS_OK)
    rc = fail(1, "scoring %s: %s", in, p->pull_err.msg[0] ? p->pull_err.msg : ps_status_str(st));
  if (fclose(out) != 0 && !rc) rc = fail(1, "writing %s failed", outp);
  gzclose(f);
  free(buf);
  res->secs = ps_ns_to_s(ps_now_ns() - t0);
  if (!rc && ps_eval_compute(p->ev, &res->er) != PS_OK) rc = fail(1, "computing the metrics");
  return rc;
}

static json_t *num(double v) { return isnan(v) ? json_null() : json_real(v); }

static int write_summary(const char *path, const char *in, const run_result *r,
                         const ps_predictor *p) {
  json_t *j = json_object();
  json_object_set_new(j, p->ex ? "export" : "checkpoint", json_string(ps_predictor_dir(p)));
  json_object_set_new(j, "step", json_integer((json_int_t)ps_predictor_step(p)));
  if (p->ex) json_object_set_new(j, "row_type", json_string(ps_export_model_row_type(p->ex)));
  json_object_set_new(j, "input", json_string(in));
  json_object_set_new(j, "lines", json_integer((json_int_t)r->lines));
  json_object_set_new(j, "bad_lines", json_integer((json_int_t)r->bad));
  json_object_set_new(j, "count", json_integer((json_int_t)r->er.n));
  json_object_set_new(j, "auc", r->er.n ? num(r->er.auc) : json_null());
  json_object_set_new(j, "logloss", r->er.n ? num(r->er.logloss) : json_null());
  json_object_set_new(j, "accuracy", r->er.n ? num(r->er.accuracy) : json_null());
  json_object_set_new(j, "seconds", json_real(r->secs));
  json_object_set_new(j, "rows_per_s", json_real(r->secs > 0 ? r->lines / r->secs : 0));
  json_object_set_new(j, "seconds_rows", json_real(p->t_rows));   /* keys and row lookups */
  json_object_set_new(j, "seconds_model", json_real(p->t_model)); /* the MLPs and interaction */
  int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) == 0 ? 0 : 1;
  json_decref(j);
  return rc ? fail(1, "cannot write --summary %s", path) : 0;
}

/* Opens --checkpoint (its snapshots, or only its model for --servers) or --export into p.
 * Returns -1 when open, else the exit code after one line on stderr. */
static int open_source(ps_predictor *p, const char *ckpt, const char *export,
                       const char *servers, const char *schema) {
  ps_error err;
  ps_status st = ps_predictor_open(p, ckpt, export, servers, schema, &err);
  if (st != PS_OK)
    return fail(st == PS_ERR_INVALID || st == PS_ERR_NOT_FOUND ? 2 : 1, "%s", ps_error_str(&err));
  return -1;
}

int main(int argc, char **argv) {
  /* A server that goes away must end in a message, never a silent SIGPIPE. */
  signal(SIGPIPE, SIG_IGN);
  const char *ckpt = NULL, *in = NULL, *outp = NULL, *schema = NULL, *summary = NULL;
  const char *device = "cpu", *level = "info", *servers = NULL, *export = NULL;
  const char *precision = "fp32";
  int batch = 4096, threads = 0;
  double progress = 5.0;
  ps_cli_opt opts[] = {
      {"checkpoint", 'c', PS_CLI_STRING, &ckpt, "DIR", "a checkpoint directory (its latest) or one step-N in it (or give --export)", false, 0, 0},
      {"export", 0, PS_CLI_STRING, &export, "DIR", "score from a ps-export directory instead of a checkpoint: its float32, f16, bf16 or int8 (--quantize int8) rows, as its manifest says", false, 0, 0},
      {"input", 'i', PS_CLI_STRING, &in, "FILE", "data to score: text as the schema says, or .gz", true, 0, 0},
      {"out", 'o', PS_CLI_STRING, &outp, "FILE", "one probability per data line of --input (empty for a bad line)", true, 0, 0},
      {"schema", 0, PS_CLI_STRING, &schema, "criteo|FILE", "what a line means (default: the checkpoint's; must have its signature)", false, 0, 0},
      {"summary", 0, PS_CLI_STRING, &summary, "FILE", "write AUC, logloss, accuracy, count, rows/s as JSON", false, 0, 0},
      {"batch", 0, PS_CLI_INT, &batch, "N", "lines scored together", false, 1, 1 << 20},
      {"threads", 0, PS_CLI_INT, &threads, "T", "compute threads (0: all cores)", false, 0, 1024},
      {"device", 0, PS_CLI_STRING, &device, "D", "cpu | cuda | cuda:N", false, 0, 0},
      {"precision", 0, PS_CLI_STRING, &precision, "fp32|bf16", "the MLPs' GEMMs in FP32, or with bf16 inputs and FP32 accumulation (FP32, with a warning, where the device has no bf16)", false, 0, 0},
      {"progress-every", 0, PS_CLI_DOUBLE, &progress, "S", "seconds between progress lines on stderr (0: none)", false, 0, 1e9},
      PS_CLI_LOG_LEVEL_OPT(&level),
      {"servers", 0, PS_CLI_STRING, &servers, "URL,...", "look rows up on ps-server --serve servers of the checkpoint (one per shard, in order) instead of its snapshots, which DIR then need not hold; with --export, servers of the export, whose embeddings/ files are then not read", false, 0, 0},
  };
  ps_cli cli = {PROG, "Score a file with a trained model from a checkpoint, offline (no server).",
                NULL, opts, sizeof opts / sizeof opts[0]};
  int rc = ps_cli_run_logged(&cli, argc, argv, NULL, &level);
  if (rc >= 0) return rc;
  ps_kern_prec prec;
  if (ps_dlrm_precision_parse(precision, &prec) != PS_OK)
    return fail(2, "--precision: '%s' is not fp32 or bf16", precision);
  ps_input_format fmt;
  if (ps_data_detect(in, &fmt) != PS_OK) return fail(2, "--input %s: cannot read it", in);
  if (fmt == PS_INPUT_BIN)
    return fail(2, "--input %s: Ember's binary format has no lines to keep: give the text file", in);
  ps_predictor p;
  memset(&p, 0, sizeof p);
  p.prec = prec;
  if ((rc = open_source(&p, ckpt, export, servers, schema)) >= 0) return rc;
  ps_error err;
  ps_status st;
  ps_ckpt *ck = p.ck;
  if (servers && (st = ps_predictor_connect(&p, servers, &err)) != PS_OK)
    rc = fail(st == PS_ERR_INVALID || st == PS_ERR_UNKNOWN_TABLE ? 2 : 1, "--servers %s: %s",
              servers, ps_error_str(&err));
  else if (!servers) p.table = ck ? *ps_ckpt_table(ck) : *ps_export_model_table(p.ex);
  if (rc < 0 && (st = ps_predictor_init(&p, device, threads, batch, &err)) != PS_OK)
    rc = fail(st == PS_ERR_INVALID || st == PS_ERR_UNSUPPORTED ? 2 : 1, "%s", ps_error_str(&err));
  run_result r;
  memset(&r, 0, sizeof r);
  if (rc < 0) {
    if (p.ex && servers)
      PS_INFO("model of step %" PRIu64 " from the export %s (%zu shard(s) served, schema %s); "
              "scoring %s", ps_predictor_step(&p), ps_predictor_dir(&p), ps_client_servers(p.cl),
              ps_export_model_schema_file(p.ex), in);
    else if (p.ex)
      PS_INFO("model of step %" PRIu64 " from the export %s (%" PRIu64 " %s rows, %zu bytes "
              "each, schema %s); scoring %s", ps_predictor_step(&p), ps_predictor_dir(&p),
              ps_export_model_rows(p.ex), ps_export_model_row_type(p.ex),
              ps_export_model_row_bytes(p.ex), ps_export_model_schema_file(p.ex), in);
    else
      PS_INFO("model of step %" PRIu64 " from %s (%zu shard(s)%s, schema %s); scoring %s",
              ps_ckpt_step(ck), ps_ckpt_dir(ck),
              servers ? ps_client_servers(p.cl) : (size_t)ps_ckpt_nshards(ck),
              servers ? " served" : "", ps_ckpt_schema_file(ck), in);
    rc = predict_file(&p, in, outp, progress, &r);
  }
  if (rc == 0) {
    printf("lines %" PRIu64 " bad_lines %" PRIu64 " count %" PRIu64 " auc %.6f logloss %.6f "
           "accuracy %.6f seconds %.3f rows_per_s %.0f\n", r.lines, r.bad, r.er.n, r.er.auc,
           r.er.logloss, r.er.accuracy, r.secs, r.secs > 0 ? r.lines / r.secs : 0.0);
    if (summary) rc = write_summary(summary, in, &r, &p);
  }
  ps_predictor_free(&p);
  ps_client_destroy(&p.cl);
  ps_ckpt_close(&ck);
  ps_export_model_close(&p.ex);
  return rc < 0 ? 1 : rc;
}
