/* ps_bench_dense: the pieces ps-dense-bench and ps-gpu-bench share, so that both time the
 * same batch through the same step and accept the same --batch lists.
 *
 * The batch is synthetic, one-hot and Criteo-shaped with every row unique (nrows = B * S, the
 * worst case for pooling and the most upload-heavy one), drawn from a fixed LCG so that a
 * seed gives the same batch in both benchmarks. */
#ifndef PS_BENCH_DENSE_H
#define PS_BENCH_DENSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "ps_cli.h"
#include "ps_dlrm.h"
#include "ps_kernels.h"
#include "ps_status.h"

enum { PS_BENCH_MAX_BATCHES = 64 };

/* The model both benchmarks build from their flags (--mlp-bot, --mlp-top, --emb-dim,
 * --num-sparse, --opt). */
typedef struct ps_bench_model {
  const char *mlp_bot, *mlp_top, *opt_name;
  int emb_dim, num_sparse;
  const char *interaction; /* dot | dcn */
  int dcn_layers, dcn_rank;
  const char *precision; /* fp32 | bf16: of the GEMMs (ps_dlrm_config.precision) */
} ps_bench_model;

/* The model both benchmarks time unless told otherwise: DLRM on Criteo Kaggle (13 dense
 * features, 26 sparse ones of dimension 16), with plain SGD. */
#define PS_BENCH_KAGGLE_MODEL                                                             \
  {.mlp_bot = "13-512-256-64-16", .mlp_top = "512-256-1", .opt_name = "sgd", .emb_dim = 16, \
   .num_sparse = 26, .interaction = "dot", .dcn_layers = 3, .dcn_rank = -1,  \
   .precision = "fp32"}

typedef struct ps_bench_synth {
  int B, S, D, nd; /* batch, sparse features, embedding dim, dense features */
  float *dense, *labels, *rows, *drows;
  int32_t *idx, *off;
  ps_kern *k; /* drows from ps_kern_host_alloc on k (as ps-worker's row gradients), or NULL */
} ps_bench_synth;

void ps_bench_synth_free(ps_bench_synth *s);

/* Forward, backward and optimizer step of m over s; rowgrads false skips the download of
 * the embedding-row gradients (the dense part alone). */
ps_status ps_bench_synth_step(ps_dlrm *m, ps_bench_synth *s, const ps_dlrm_opt *opt,
                              bool rowgrads);

/* Checks the options both benchmarks take: --opt (a dense optimizer name, with its default
 * hyper-parameters at lr 0.01) into opt, and --batch (comma-separated sizes, each 1 .. 2^20)
 * into bs. Returns the number of batch sizes, or -1 after a one-line reason on stderr that
 * starts with prog (exit 2). */
int ps_bench_dense_args(const char *prog, const char *opt_name, const char *batches,
                        ps_dlrm_opt *opt, int bs[PS_BENCH_MAX_BATCHES]);

/* Rows of a ps_cli_opt table that mean the same in both benchmarks: --batch (for
 * ps_bench_dense_args), --warmup and --json. */
#define PS_BENCH_BATCH_OPT(batches) \
  {"batch", 'b', PS_CLI_STRING, (batches), "LIST", "comma-separated batch sizes", false, 0, 0}
#define PS_BENCH_WARMUP_OPT(warmup) \
  {"warmup", 0, PS_CLI_INT, (warmup), "N", "untimed steps first", false, 0, 1000}
#define PS_BENCH_JSON_OPT(path) \
  {"json", 0, PS_CLI_STRING, (path), "FILE", "write results as JSON", false, 0, 0}

/* The rows of the model flags in a ps_cli_opt table, the same in both benchmarks. */
#define PS_BENCH_MODEL_OPTS(mb)                                                               \
  {"mlp-bot", 0, PS_CLI_STRING, &(mb)->mlp_bot, "DIMS", "bottom MLP widths", false, 0, 0},    \
  {"mlp-top", 0, PS_CLI_STRING, &(mb)->mlp_top, "DIMS", "top MLP widths (input prepended)",   \
   false, 0, 0},                                                                              \
  {"emb-dim", 0, PS_CLI_INT, &(mb)->emb_dim, "D", "embedding dimension", false, 1, 4096},     \
  {"num-sparse", 0, PS_CLI_INT, &(mb)->num_sparse, "N", "sparse features (tables)", false, 0, \
   1024},                                                                                     \
  {"opt", 0, PS_CLI_STRING, &(mb)->opt_name, "NAME", "dense optimizer: sgd, adagrad, adam",   \
   false, 0, 0},                                                                              \
  {"interaction", 0, PS_CLI_STRING, &(mb)->interaction, "dot|dcn", "feature interaction",      \
   false, 0, 0},                                                                              \
  {"dcn-layers", 0, PS_CLI_INT, &(mb)->dcn_layers, "L", "DCN cross layers", false, 1, 64},     \
  {"dcn-rank", 0, PS_CLI_INT, &(mb)->dcn_rank, "R", "DCN rank (0: full, -1: D/4)", false, -1,  \
   1 << 20},                                                                                  \
  {"precision", 0, PS_CLI_STRING, &(mb)->precision, "fp32|bf16", "GEMM inputs (bf16: FP32 "   \
   "accumulation)", false, 0, 0}

/* The DLRM configuration of model mb for batches of up to B samples (defaults elsewhere). */
void ps_bench_dense_config(const ps_bench_model *mb, int B, ps_dlrm_config *cfg);

/* Creates the model of mb for batch size B on k (*m) and its synthetic batch (*s, seed 42),
 * its row-gradient buffer from ps_kern_host_alloc(k) where host_grads (as ps-worker's), plain
 * malloc otherwise, and runs `warmup` training steps of opt on it (not timed: the first steps
 * pay for page faults and lazy set-up). 0, or -1 after "prog: batch B: reason" on stderr,
 * nothing left to free. */
int ps_bench_dense_open(const char *prog, ps_kern *k, const ps_bench_model *mb, int B,
                        bool host_grads, int warmup, const ps_dlrm_opt *opt, ps_dlrm **m,
                        ps_bench_synth *s);

/* Adds the model's fields (mlp_bot, mlp_top, emb_dim, num_sparse, optimizer) to a report. */
void ps_bench_dense_json_model(json_t *root, const ps_bench_model *mb);
/* Sorts n timings ascending (a benchmark's median is v[n / 2], its best v[0]). */
void ps_bench_sort(double *v, size_t n);

/* Sets root's "results" to res, writes root to path (when not NULL and ret is 0) and frees
 * it. Returns ret, or 1 after "prog: cannot write path" on stderr. */
int ps_bench_dense_json_finish(const char *prog, json_t *root, json_t *res, const char *path,
                               int ret);

#endif
