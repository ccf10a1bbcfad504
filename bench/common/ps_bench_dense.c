/* ps_bench_dense.c: the synthetic batch, the step over it, and the flags, model and report
 * fields that ps-dense-bench and ps-gpu-bench share (see ps_bench_dense.h). */
#include "ps_bench_dense.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_cli.h"

static uint64_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 11;
}
static double unit(uint64_t *x) { return (double)lcg(x) / 9007199254740992.0; }

/* Fills s (zeroed first, so ps_bench_synth_free is safe after a failure). k not NULL: the
 * row-gradient buffer comes from ps_kern_host_alloc(k) as in ps-worker (page-locked on CUDA);
 * NULL: plain malloc. 0, or -1 when out of memory. */
static int bench_synth_make(ps_bench_synth *s, ps_kern *k, int B, int S, int D, int nd,
                            uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->B = B, s->S = S, s->D = D, s->nd = nd;
  size_t nnz = (size_t)B * S;
  s->dense = malloc((size_t)B * nd * sizeof(float));
  s->labels = malloc((size_t)B * sizeof(float));
  s->rows = malloc(nnz * D * sizeof(float));
  if (k && ps_kern_host_alloc(k, nnz * D * sizeof(float), (void **)&s->drows) == PS_OK)
    s->k = k;
  else if (!k)
    s->drows = malloc(nnz * D * sizeof(float));
  s->idx = malloc(nnz * sizeof(int32_t));
  s->off = malloc((nnz + 1) * sizeof(int32_t));
  if (!s->dense || !s->labels || !s->rows || !s->drows || !s->idx || !s->off) return -1;
  uint64_t x = seed;
  for (size_t i = 0; i < (size_t)B * nd; i++) s->dense[i] = (float)(unit(&x) * 5.0);
  for (int i = 0; i < B; i++) s->labels[i] = unit(&x) < 0.25 ? 1.0f : 0.0f;
  for (size_t i = 0; i < nnz * D; i++) s->rows[i] = (float)((unit(&x) - 0.5) * 0.1);
  for (size_t i = 0; i < nnz; i++) s->idx[i] = (int32_t)i;
  for (size_t i = nnz; i > 1; i--) { /* shuffle: rows are gathered in key order, not bag order */
    size_t j = (size_t)(unit(&x) * (double)i);
    int32_t t = s->idx[i - 1];
    s->idx[i - 1] = s->idx[j];
    s->idx[j] = t;
  }
  for (size_t i = 0; i <= nnz; i++) s->off[i] = (int32_t)i;
  return 0;
}

void ps_bench_synth_free(ps_bench_synth *s) {
  free(s->dense), free(s->labels), free(s->rows), free(s->idx), free(s->off);
  if (s->k)
    ps_kern_host_free(s->k, s->drows);
  else
    free(s->drows);
}

ps_status ps_bench_synth_step(ps_dlrm *m, ps_bench_synth *s, const ps_dlrm_opt *opt,
                              bool rowgrads) {
  ps_dlrm_batch b = {.batch = s->B,
                     .dense = s->dense,
                     .labels = s->labels,
                     .nrows = s->B * s->S,
                     .rows = s->rows,
                     .nnz = s->B * s->S,
                     .idx = s->idx,
                     .offsets = s->off};
  ps_status st = ps_dlrm_forward(m, &b, NULL);
  if (st == PS_OK) st = ps_dlrm_backward(m, rowgrads ? s->drows : NULL);
  if (st == PS_OK) st = ps_dlrm_step(m, opt);
  return st;
}

int ps_bench_dense_args(const char *prog, const char *opt_name, const char *list,
                        ps_dlrm_opt *opt, int bs[PS_BENCH_MAX_BATCHES]) {
  ps_dlrm_opt_kind kind;
  if (ps_dlrm_opt_parse(opt_name, &kind) != PS_OK) {
    fprintf(stderr, "%s: --opt: unknown optimizer '%s'\n", prog, opt_name);
    return -1;
  }
  *opt = ps_dlrm_opt_default(kind, 0.01f);
  char *items[PS_BENCH_MAX_BATCHES];
  int nb = ps_split_list(list, ',', items, PS_BENCH_MAX_BATCHES);
  if (nb <= 0) {
    fprintf(stderr, "%s: --batch: bad list '%s'\n", prog, list);
    return -1;
  }
  for (int i = 0; i < nb; i++) {
    int64_t v;
    if (ps_parse_i64(items[i], &v, NULL) != PS_OK || v < 1 || v > (1 << 20)) {
      fprintf(stderr, "%s: --batch: bad size '%s'\n", prog, items[i]);
      nb = -1;
      break;
    }
    bs[i] = (int)v;
  }
  free(items[0]);
  return nb;
}

void ps_bench_dense_config(const ps_bench_model *mb, int B, ps_dlrm_config *cfg) {
  ps_dlrm_config_shape(cfg, mb->mlp_bot, mb->mlp_top, mb->emb_dim, mb->num_sparse, B);
  if (ps_dlrm_interaction_parse(mb->interaction, &cfg->interaction) != PS_OK)
    cfg->interaction = (ps_dlrm_interaction)-1; /* ps_dlrm_create refuses it */
  cfg->dcn_layers = mb->dcn_layers;
  cfg->dcn_rank = mb->dcn_rank;
  if (ps_dlrm_precision_parse(mb->precision, &cfg->precision) != PS_OK)
    cfg->precision = PS_KERN_FP32; /* ps_bench_dense_open refuses it first */
}

int ps_bench_dense_open(const char *prog, ps_kern *k, const ps_bench_model *mb, int B,
                        bool host_grads, int warmup, const ps_dlrm_opt *opt, ps_dlrm **m,
                        ps_bench_synth *s) {
  ps_dlrm_config cfg;
  ps_bench_dense_config(mb, B, &cfg);
  memset(s, 0, sizeof *s);
  *m = NULL;
  ps_error err;
  ps_dlrm_interaction it;
  if (ps_dlrm_interaction_parse(mb->interaction, &it) != PS_OK) {
    fprintf(stderr, "%s: --interaction: '%s' is not dot or dcn\n", prog, mb->interaction);
    return -1;
  }
  if (ps_dlrm_precision_parse(mb->precision, &cfg.precision) != PS_OK) {
    fprintf(stderr, "%s: --precision: '%s' is not fp32 or bf16\n", prog, mb->precision);
    return -1;
  }
  ps_status st = ps_dlrm_create(k, &cfg, m, &err);
  if (st == PS_OK && bench_synth_make(s, host_grads ? k : NULL, B, mb->num_sparse, mb->emb_dim,
                                      ps_dlrm_num_dense(*m), 42) == 0) {
    for (int w = 0; w < warmup && st == PS_OK; w++) st = ps_bench_synth_step(*m, s, opt, true);
    if (st == PS_OK) return 0;
    fprintf(stderr, "%s: batch %d: warm-up step failed: %s\n", prog, B, ps_status_str(st));
  } else {
    fprintf(stderr, "%s: batch %d: %s\n", prog, B, st != PS_OK ? err.msg : "out of memory");
  }
  ps_bench_synth_free(s);
  ps_dlrm_destroy(m);
  return -1;
}

void ps_bench_dense_json_model(json_t *root, const ps_bench_model *mb) {
  json_t *m = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:s}", "mlp_bot", mb->mlp_bot, "mlp_top",
                        mb->mlp_top, "emb_dim", mb->emb_dim, "num_sparse", mb->num_sparse,
                        "optimizer", mb->opt_name, "interaction", mb->interaction, "precision",
                        mb->precision);
  if (m && !strcmp(mb->interaction, "dcn")) {
    json_object_set_new(m, "dcn_layers", json_integer(mb->dcn_layers));
    json_object_set_new(m, "dcn_rank", json_integer(mb->dcn_rank));
  }
  json_object_update(root, m);
  json_decref(m);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

void ps_bench_sort(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

int ps_bench_dense_json_finish(const char *prog, json_t *root, json_t *res, const char *path,
                               int ret) {
  json_object_set_new(root, "results", res);
  if (path && ret == 0 && json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
    fprintf(stderr, "%s: cannot write %s\n", prog, path);
    ret = 1;
  }
  json_decref(root);
  return ret;
}
