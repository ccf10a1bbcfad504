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
 * - A batch is scored as ps-worker evaluates one: keys de-duplicated, rows pulled (here from
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
 *   (ps_export_model.h): its manifest, schema, dense/params.npy and rows, f32, f16, bf16 or int8
 *   (ps-export --quantize int8, held as int8 and dequantized per batch); the manifest's row type
 *   is checked against the files and anything else is refused in one line. An f32 export
 *   scores as its checkpoint does. With --servers (ps-server --serve of the export), the rows
 *   come from the servers and only the export's manifest, schema and dense/params.npy are read
 *   (ps_export_model_open_model), checked against the servers as for a checkpoint. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ps_ckpt.h"
#include "ps_cli.h"
#include "ps_client.h"
#include "ps_dedup.h"
#include "ps_dlrm.h"
#include "ps_export_model.h"
#include "ps_kernels.h"
#include "ps_log.h"
#include "ps_metrics_eval.h"
#include "ps_reader.h"
#include "ps_sample.h"
#include "ps_time.h"

#define PROG "ps-predict"

typedef struct predictor {
  ps_kern_prec prec; /* --precision of the MLPs' GEMMs */
  ps_ckpt *ck;
  ps_export_model *ex;    /* --export: the model and rows from an export, ck NULL */
  ps_kern *kern;
  ps_dlrm *model;
  ps_dedup *dedup;
  ps_sample_keymap km;
  ps_eval *ev;
  int nd, nin, nc, dim, batch;
  /* one batch: line i is good (its record at rec_off[i]) or bad (good[i] = 0) */
  ps_sample_buf recs;
  size_t *rec_off;
  unsigned char *good;
  int nlines;
  float *labels, *dense, *probs, *rows;
  uint64_t *keys, *unique;
  uint32_t *offsets, *inverse;
  int32_t *idx, *ioff;
  size_t keys_cap;
  double t_rows, t_model; /* seconds: decode + dedup + row lookups; the model */
  ps_client *cl;          /* --servers: rows from serving servers, else from the snapshots */
  ps_table_spec table;    /* the embedding table: the snapshots' spec, or the servers' */
  ps_error pull_err;      /* why a pull from the servers failed */
} predictor;

static int fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return rc;
}

/* The model's source: the checkpoint, or the export of --export. */
static const ps_schema *src_schema(const predictor *p) {
  return p->ex ? ps_export_model_schema(p->ex) : ps_ckpt_schema(p->ck);
}
static const char *src_dir(const predictor *p) {
  return p->ex ? ps_export_model_dir(p->ex) : ps_ckpt_dir(p->ck);
}
static uint64_t src_step(const predictor *p) {
  return p->ex ? ps_export_model_step(p->ex) : ps_ckpt_step(p->ck);
}

static ps_status grow_keys(predictor *p, size_t nk) {
  if (nk <= p->keys_cap) return PS_OK;
  size_t cap = nk * 2;
  uint64_t *k = realloc(p->keys, cap * sizeof *k), *u = k ? realloc(p->unique, cap * sizeof *u) : NULL;
  if (k) p->keys = k;
  if (u) p->unique = u;
  uint32_t *inv = u ? realloc(p->inverse, cap * sizeof *inv) : NULL;
  if (inv) p->inverse = inv;
  int32_t *idx = inv ? realloc(p->idx, cap * sizeof *idx) : NULL;
  if (idx) p->idx = idx;
  float *rows = idx ? realloc(p->rows, cap * (size_t)p->dim * sizeof *rows) : NULL;
  if (rows) p->rows = rows;
  if (!rows) return PS_ERR_NOMEM;
  p->keys_cap = cap;
  return PS_OK;
}

static ps_status predictor_init(predictor *p, const char *device, int threads, int batch,
                                ps_error *err) {
  p->batch = batch;
  const ps_schema *sc = src_schema(p);
  p->nd = ps_schema_ndense(sc);
  p->nin = p->nd > 0 ? p->nd : 1; /* no dense column: one constant 0 input, as ps-worker */
  p->nc = ps_schema_ncat(sc);
  p->dim = (int)p->table.dim;
  ps_status st = ps_kern_create(device, threads, &p->kern, err);
  if (st != PS_OK) return ps_error_prefix(err, "device '%s': ", device);
  ps_dlrm_config mc;
  if (p->ex) ps_export_model_config(p->ex, batch, &mc);
  else ps_ckpt_model_config(p->ck, batch, &mc);
  mc.precision = p->prec;
  if ((st = ps_dlrm_create(p->kern, &mc, &p->model, err)) != PS_OK)
    return ps_error_prefix(err, "the checkpoint's model: ");
  size_t np;
  const float *params = p->ex ? ps_export_model_params(p->ex, &np) : ps_ckpt_params(p->ck, &np);
  if (np != ps_dlrm_num_params(p->model))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s has %zu parameters, the model %zu",
                        p->ex ? "dense/params.npy" : "dense.bin", np, ps_dlrm_num_params(p->model));
  if ((st = ps_dlrm_set_params(p->model, params, np)) != PS_OK)
    return ps_error_set(err, st, "loading the parameters: %s", ps_status_str(st));
  uint64_t hb = p->ex ? ps_export_model_hash_buckets(p->ex) : ps_ckpt_hash_buckets(p->ck);
  if ((st = ps_sample_keymap_init(&p->km, sc, hb, err)) != PS_OK) return st;
  size_t b = (size_t)batch;
  p->rec_off = malloc(b * sizeof *p->rec_off);
  p->good = malloc(b);
  p->labels = malloc(b * sizeof(float));
  p->dense = calloc(b * (size_t)p->nin, sizeof(float));
  p->probs = malloc(b * sizeof(float));
  p->offsets = malloc((b * (size_t)p->nc + 1) * sizeof *p->offsets);
  p->ioff = malloc((b * (size_t)p->nc + 1) * sizeof *p->ioff);
  if (!p->rec_off || !p->good || !p->labels || !p->dense || !p->probs || !p->offsets ||
      !p->ioff || ps_dedup_create(&p->dedup) != PS_OK || ps_eval_create(&p->ev) != PS_OK ||
      grow_keys(p, b * (size_t)(p->nc ? p->nc : 1)) != PS_OK)
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory for batches of %d", batch);
  return PS_OK;
}

static void predictor_free(predictor *p) {
  ps_dlrm_destroy(&p->model);
  ps_kern_destroy(&p->kern);
  ps_dedup_destroy(&p->dedup);
  ps_eval_destroy(&p->ev);
  if (p->km.buckets) ps_sample_keymap_free(&p->km);
  ps_sample_buf_free(&p->recs);
  free(p->rec_off);
  free(p->good);
  free(p->labels);
  free(p->dense);
  free(p->probs);
  free(p->offsets);
  free(p->ioff);
  free(p->keys);
  free(p->unique);
  free(p->inverse);
  free(p->idx);
  free(p->rows);
}

/* Scores the good lines of the batch (into probs, in order) and adds them to the metrics. */
static ps_status score(predictor *p, int *n_out) {
  size_t n = 0, nk = 0, room = 0;
  for (int i = 0; i < p->nlines; i++)
    if (p->good[i]) room += (ps_sample_len(p->recs.p + p->rec_off[i]) - 8) / 8;
  ps_status st = grow_keys(p, room + 1);
  if (st != PS_OK) return st;
  p->offsets[0] = 0;
  for (int i = 0; i < p->nlines; i++) {
    if (!p->good[i]) continue;
    ps_sample_decode(p->recs.p + p->rec_off[i], p->nd, &p->km, &p->labels[n],
                     p->nd ? p->dense + n * (size_t)p->nd : p->dense, p->keys, &nk,
                     p->offsets + n * (size_t)p->nc);
    n++;
  }
  *n_out = (int)n;
  if (n == 0) return PS_OK;
  uint64_t t0 = ps_now_ns();
  if (p->nd == 0) memset(p->dense, 0, n * sizeof(float));
  size_t nu = 0;
  if ((st = ps_dedup_keys(p->dedup, p->keys, nk, p->unique, p->inverse, &nu)) != PS_OK) return st;
  if (p->cl)
    st = ps_client_pull_unique(p->cl, p->table.id, 0, p->unique, nu, p->rows,
                               &p->pull_err);
  else if (p->ex)
    st = ps_export_model_pull(p->ex, p->unique, nu, p->rows);
  else
    st = ps_ckpt_pull(p->ck, p->unique, nu, p->rows);
  if (st != PS_OK) return st;
  for (size_t i = 0; i < nk; i++) p->idx[i] = (int32_t)p->inverse[i];
  for (size_t i = 0; i <= n * (size_t)p->nc; i++) p->ioff[i] = (int32_t)p->offsets[i];
  uint64_t t1 = ps_now_ns();
  p->t_rows += ps_ns_to_s(t1 - t0);
  ps_dlrm_batch mb = {.batch = (int)n, .dense = p->dense, .labels = p->labels, .nrows = (int)nu,
                      .rows = p->rows, .nnz = (int)nk, .idx = p->idx, .offsets = p->ioff};
  st = ps_dlrm_predict(p->model, &mb, p->probs);
  p->t_model += ps_ns_to_s(ps_now_ns() - t1);
  if (st != PS_OK) return st;
  return ps_eval_add(p->ev, p->probs, p->labels, n);
}

/* Scores the batch and writes one line per input line. */
static ps_status flush_batch(predictor *p, FILE *out) {
  int n = 0;
  ps_status st = score(p, &n);
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

static int predict_file(predictor *p, const char *in, const char *outp, double progress,
                        run_result *res) {
  gzFile f = gzopen(in, "rb");
  if (!f) return fail(1, "cannot open %s", in);
  FILE *out = fopen(outp, "w");
  if (!out) {
    gzclose(f);
    return fail(1, "cannot create %s", outp);
  }
  const ps_schema *sc = src_schema(p);
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

/* Server i's STATS: it must be shard i of `n`; *step = the checkpoint step it reports serving
 * (-1: it reports none). */
static ps_status server_shard(predictor *p, size_t i, size_t n, long long *step, ps_error *err) {
  char *text = NULL;
  ps_status st = ps_client_stats(p->cl, i, &text, err);
  if (st != PS_OK) return st; /* err names the server */
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  json_int_t shard = -1, shards = -1, ck = -1;
  if (!j || json_unpack(j, "{s:I, s:I, s?{s:I}}", "shard", &shard, "shards", &shards,
                        "last_checkpoint", "step", &ck) != 0)
    st = ps_error_set(err, PS_ERR_PROTO, "%s: unreadable statistics", ps_client_url(p->cl, i));
  else if (shards != (json_int_t)n)
    st = ps_error_set(err, PS_ERR_INVALID, "%zu server(s), the checkpoint has %lld shard(s) (%s "
                      "says so): give one URL per shard, in shard order", n, (long long)shards,
                      ps_client_url(p->cl, i));
  else if (shard != (json_int_t)i)
    st = ps_error_set(err, PS_ERR_INVALID, "URL %zu (%s) is shard %lld: give one URL per shard, "
                      "in shard order", i + 1, ps_client_url(p->cl, i), (long long)shard);
  json_decref(j);
  *step = ck;
  return st;
}

/* --servers: one serving server per shard of the checkpoint; the table attached by its name
 * and checked against the checkpoint (shard order, the rows' dim, the step served). */
static ps_status connect_servers(predictor *p, const char *urls, ps_error *err) {
  ps_client_options o;
  ps_client_options_default(&o);
  ps_status st = ps_client_create_list(urls, &o, &p->cl, err);
  if (st != PS_OK) return st;
  size_t n = ps_client_servers(p->cl);
  uint64_t want = src_step(p);
  for (size_t i = 0; i < n; i++) {
    long long step = -1;
    if ((st = server_shard(p, i, n, &step, err)) != PS_OK) return st;
    if (step < 0)
      PS_WARN("%s reports no checkpoint it serves: scoring the rows it holds now",
              ps_client_url(p->cl, i));
    else if ((uint64_t)step != want)
      return ps_error_set(err, PS_ERR_INVALID, "%s serves step %lld, the checkpoint %s is step "
                          "%" PRIu64 ": give %s", ps_client_url(p->cl, i), step, src_dir(p),
                          want, p->ex ? "--export an export of the step served"
                                      : "--checkpoint the step served");
  }
  char exdim[16];
  if (p->ex) snprintf(exdim, sizeof exdim, "%u", ps_export_model_table(p->ex)->dim);
  const char *name = p->ex ? ps_export_model_table(p->ex)->name : ps_ckpt_table_name(p->ck);
  const char *dim = p->ex ? exdim : ps_ckpt_config(p->ck, "emb-dim");
  if ((st = ps_client_attach(p->cl, name, &p->table, err)) != PS_OK)
    return ps_error_prefix(err, "the checkpoint's table: ");
  if ((int)p->table.dim != atoi(dim))
    return ps_error_set(err, PS_ERR_INVALID, "the servers' table '%s' has rows of %u values, "
                        "the checkpoint's emb-dim is %s: they serve another model", name,
                        p->table.dim, dim);
  return PS_OK;
}

static json_t *num(double v) { return isnan(v) ? json_null() : json_real(v); }

static int write_summary(const char *path, const char *in, const run_result *r,
                         const predictor *p) {
  json_t *j = json_object();
  json_object_set_new(j, p->ex ? "export" : "checkpoint", json_string(src_dir(p)));
  json_object_set_new(j, "step", json_integer((json_int_t)src_step(p)));
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
static int open_source(predictor *p, const char *ckpt, const char *export, const char *servers,
                       const char *schema) {
  if (!ckpt == !export) return fail(2, "give one of --checkpoint DIR and --export DIR");
  ps_error err;
  ps_status st = export ? (servers ? ps_export_model_open_model(export, schema, &p->ex, &err)
                                   : ps_export_model_open(export, schema, &p->ex, &err))
                 : servers ? ps_ckpt_open_model(ckpt, schema, &p->ck, &err)
                           : ps_ckpt_open(ckpt, schema, &p->ck, &err);
  if (st != PS_OK)
    return fail(st == PS_ERR_INVALID || st == PS_ERR_NOT_FOUND ? 2 : 1, "--%s %s: %s",
                export ? "export" : "checkpoint", export ? export : ckpt, ps_error_str(&err));
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
      {"export", 0, PS_CLI_STRING, &export, "DIR", "score from a ps-export directory instead of a checkpoint: its float32 or int8 (--quantize int8) rows, as its manifest says", false, 0, 0},
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
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  if (ps_log_apply_level(PROG, level) != 0) return 2;
  ps_kern_prec prec;
  if (ps_dlrm_precision_parse(precision, &prec) != PS_OK)
    return fail(2, "--precision: '%s' is not fp32 or bf16", precision);
  ps_input_format fmt;
  if (ps_data_detect(in, &fmt) != PS_OK) return fail(2, "--input %s: cannot read it", in);
  if (fmt == PS_INPUT_BIN)
    return fail(2, "--input %s: Ember's binary format has no lines to keep: give the text file", in);
  predictor p;
  memset(&p, 0, sizeof p);
  p.prec = prec;
  if ((rc = open_source(&p, ckpt, export, servers, schema)) >= 0) return rc;
  ps_error err;
  ps_status st;
  ps_ckpt *ck = p.ck;
  if (servers && (st = connect_servers(&p, servers, &err)) != PS_OK)
    rc = fail(st == PS_ERR_INVALID || st == PS_ERR_UNKNOWN_TABLE ? 2 : 1, "--servers %s: %s",
              servers, ps_error_str(&err));
  else if (!servers) p.table = ck ? *ps_ckpt_table(ck) : *ps_export_model_table(p.ex);
  if (rc < 0 && (st = predictor_init(&p, device, threads, batch, &err)) != PS_OK)
    rc = fail(st == PS_ERR_INVALID || st == PS_ERR_UNSUPPORTED ? 2 : 1, "%s", ps_error_str(&err));
  run_result r;
  memset(&r, 0, sizeof r);
  if (rc < 0) {
    if (p.ex && servers)
      PS_INFO("model of step %" PRIu64 " from the export %s (%zu shard(s) served, schema %s); "
              "scoring %s", src_step(&p), src_dir(&p), ps_client_servers(p.cl),
              ps_export_model_schema_file(p.ex), in);
    else if (p.ex)
      PS_INFO("model of step %" PRIu64 " from the export %s (%" PRIu64 " %s rows, %zu bytes "
              "each, schema %s); scoring %s", src_step(&p), src_dir(&p),
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
  predictor_free(&p);
  ps_client_destroy(&p.cl);
  ps_ckpt_close(&ck);
  ps_export_model_close(&p.ex);
  return rc < 0 ? 1 : rc;
}
