/* ps_score: the scoring core of ps-predict and ps-serve -- a model opened from a checkpoint
 * or an export (rows from its snapshots, its export files or serving servers) and one batch of
 * parsed lines scored as ps-worker evaluates one (keys de-duplicated, rows pulled, ps_dlrm_predict).
 *
 * The struct is open: its callers fill a batch in place (recs, rec_off, good, nlines: the lines
 * parsed by ps_schema_parse_line) and read probs, the metrics (ev) and the timings after
 * ps_predictor_score. One ps_predictor scores one batch at a time (its buffers are the batch's):
 * a caller with several threads serializes them. */
#ifndef PS_SCORE_H
#define PS_SCORE_H

#include <stdint.h>

#include "ps_ckpt.h"
#include "ps_client.h"
#include "ps_dedup.h"
#include "ps_dlrm.h"
#include "ps_export_model.h"
#include "ps_kernels.h"
#include "ps_metrics_eval.h"
#include "ps_sample.h"
#include "ps_schema.h"

typedef struct ps_predictor {
  ps_kern_prec prec;      /* set before init: --precision of the MLPs' GEMMs */
  ps_ckpt *ck;
  ps_export_model *ex;    /* --export: the model and rows from an export, ck NULL */
  ps_kern *kern;
  ps_dlrm *model;
  ps_dedup *dedup;
  ps_sample_keymap km;
  ps_eval *ev;            /* NULL when no_eval */
  int no_eval;            /* set before init: no metrics kept (a server scores forever) */
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
  /* Set before connect (ps-serve --follow): a pull from the servers whose replies' rows were
   * not all read from the model's step fails with PS_ERR_CONFLICT, so no score mixes the model
   * of one step with rows of another. A serving shard names in each pull reply the step of the
   * snapshot it read (wire field `served`, ps_client_served_take). It used to be bracketed by
   * every shard's STATS before and after the pull: four round trips a request with two shards,
   * p50 0.72 -> 11.9 ms. Cleared by connect when a shard reports no step. */
  int check_step;
  int any_step; /* set before connect: no check that the shards serve the model's step (a
                 * model loaded ahead of their switch) */
} ps_predictor;

/* The model's source: the checkpoint, or the export of --export. */
const ps_schema *ps_predictor_schema(const ps_predictor *p);
const char *ps_predictor_dir(const ps_predictor *p);
uint64_t ps_predictor_step(const ps_predictor *p);

/* Opens --checkpoint (its snapshots, or only its model when servers) or --export into p (one of
 * ckpt and export). PS_ERR_INVALID or PS_ERR_NOT_FOUND for a bad argument; err says
 * "--checkpoint DIR: reason". */
ps_status ps_predictor_open(ps_predictor *p, const char *ckpt, const char *export,
                            const char *servers, const char *schema, ps_error *err);
/* --servers: one serving server per shard of the model; the table attached by its name and
 * checked against it (shard order, the rows' dim, the step served). */
ps_status ps_predictor_connect(ps_predictor *p, const char *urls, ps_error *err);
/* The step every shard of cl serves (STATS), or *step = -1 when they differ or one reports
 * none; errors as connect's (a shard out of order, down). */
ps_status ps_score_servers_step(ps_client *cl, long long *step, ps_error *err);
/* After open (and connect, else the table is the source's): the model built, its parameters
 * loaded, the batch buffers for `batch` lines. */
ps_status ps_predictor_init(ps_predictor *p, const char *device, int threads, int batch,
                            ps_error *err);
/* Scores the good lines of the batch (into probs, in order) and adds them to the metrics;
 * *n_out = how many. The batch is left as it was (the caller resets nlines and recs.len). */
ps_status ps_predictor_score(ps_predictor *p, int *n_out);
/* Frees the buffers and the model (not the source: see ps_predictor_close). */
void ps_predictor_free(ps_predictor *p);
/* ps_predictor_free, then the client, the checkpoint and the export closed. */
void ps_predictor_close(ps_predictor *p);

/* For the tools' main(): "PROG: message" on stderr; returns rc (the exit code). */
int ps_tool_fail(const char *prog, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
