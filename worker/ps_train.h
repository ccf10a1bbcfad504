/* ps_train: the ps-worker training loop — data → dedup → pull → DLRM forward/backward →
 * dense allreduce → sparse push → step → dense optimizer — plus evaluation, progress,
 * checkpoints and the JSON summary. ps-worker's main only parses flags into ps_train_config.
 *
 * Sync equivalence: worker r's gradients are of the mean loss over its n_r samples; both the
 * dense gradients (through the allreduce) and the sparse ones (before the push) are rescaled
 * by n_r / N with N = the samples of the step over all workers, so W workers with batch B
 * train the model one worker trains with batch W·B (up to float summation order). N travels
 * in the same allreduce as the dense gradients (one extra float), which therefore runs before
 * the push.
 *
 * Flags and plan: ps_train_config is the flags as given (text for every named choice: what
 * --help shows as the default, what the logs, the summary and the checkpoint's config name);
 * ps_train_plan is what they resolve to (ps_train_plan_resolve, once, before connecting): the
 * enums, the schema, the model's widths as ints, what --train is. The run reads the plan for
 * every choice and the config for the plain numbers and paths. */
#ifndef PS_TRAIN_H
#define PS_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "ps_dlrm.h"
#include "ps_reader.h"
#include "ps_status.h"
#include "ps_table.h"

#define PS_TRAIN_MAX_PREFETCH 16 /* --prefetch's bound */

typedef struct ps_train_config {
  const char *servers;      /* "URL,URL,..." (shard order) */
  const char *train;        /* text as --schema says (Criteo TSV by default), .gz, or binary */
  const char *test;         /* NULL: evaluate on a held-out tail of train (holdout lines) */
  int64_t holdout;          /* lines at the end of train held out when test is NULL */
  int rank, world;          /* rank -1: assigned by the coordinator */
  const char *device;       /* "cpu", "cuda", "cuda:N" */
  const char *consistency;  /* "sync", "async", "ssp:K" */
  int epochs;
  int batch;
  double lr;                /* dense optimizer */
  const char *dense_opt;    /* sgd | adagrad | adam */
  double sparse_lr;
  const char *sparse_opt;   /* sgd | adagrad | rowwise-adagrad | adam | ftrl */
  double emb_init;          /* embedding rows start in U(-emb_init, emb_init) */
  int emb_dim;
  const char *mlp_bot, *mlp_top;
  int threads;
  const char *bad_lines;    /* skip | fail */
  double max_bad_fraction;  /* the run fails when more of --train's lines than this are bad */
  int64_t hash_buckets;
  int64_t admit_threshold;
  int64_t ttl_steps;
  const char *checkpoint_dir;
  int64_t checkpoint_every; /* steps; 0 = only with --checkpoint-dir at the end */
  bool resume;
  const char *summary;
  int64_t eval_every;       /* steps; 0 = only at the end */
  int64_t max_steps;        /* stop after this many steps (0 = no limit): tests, benchmarks */
  double progress_every;    /* seconds between progress lines */
  int64_t seed;
  const char *run_id;       /* rendezvous namespace; NULL = agreed through the coordinator */
  uint32_t timeout_ms;
  int metrics_port;         /* Prometheus /metrics (0: off) */
  char curve_secret[41];    /* CURVE: this worker's Z85 secret key, the servers' public key */
  char curve_server[41];    /* (ps_curve_load_client; both "" = no CURVE) */
  const char *interaction;  /* dot | dcn */
  const char *precision;    /* fp32 | bf16: of the dense GEMMs (NULL: fp32) */
  const char *out_bias_init; /* draw | zero: the output layer's bias at step 0 */
  int dcn_layers, dcn_rank; /* DCNv2 cross layers and their rank (0: full rank, -1: auto:
                             * ps_train_plan's dcn_rank is the rank the run trains with) */
  const char *metrics_bind; /* its address; NULL = 127.0.0.1 */
  int64_t shuffle_buffer;   /* training samples in each rank's shuffle buffer (0: file order) */
  const char *wire;         /* f32 | f16: how pulled rows and pushed gradients travel */
  const char *row_type;     /* f32 | f16 | bf16: how the servers store the table's rows */
  int prefetch;             /* batches ahead whose keys are sent as a prefetch (0: off; at
                             * most PS_TRAIN_MAX_PREFETCH; a stream: the plan's is 0) */
  const char *schema;              /* --schema: "criteo" (built in) or a JSON file */
  bool mlp_bot_given;              /* --mlp-bot was given: checked against the schema; else
                                    * its first width is the schema's dense inputs */
  int64_t checkpoint_full_every;   /* every K-th checkpoint full, the others deltas (1: full) */
  int failover_ms;                 /* replicated shards: the client's --failover-ms */
  const char *lookahead;           /* off | on | stale */
  int64_t row_cache_mb;            /* the worker's row cache in MiB (0: off; sync and ssp) */
  int64_t lookahead_depth;         /* the deep lookahead's batches ahead (0: the default, 8) */
  /* Streaming input and progressive validation (ps_train_stream.c; docs/TRAINING.md): */
  bool follow_input;               /* --train grows: at its end wait for more lines */
  double input_idle_s;             /* a stream or followed file ends after S s with no data (0:
                                    * never) */
  double checkpoint_every_s;       /* also a checkpoint every S seconds (0: off) */
  int64_t progressive_window;      /* scored samples in the rolling AUC/logloss (0: off) */
  const char *progressive_dump;    /* every (score, label) scored by this rank, as text */
  const volatile sig_atomic_t *stop; /* a signal handler's flag: a stream or followed file ends
                                    * at its next line (ps-worker: SIGINT, SIGTERM) */
} ps_train_config;

/* The flags resolved: each named choice's enum, the schema loaded, the model's widths parsed
 * once (and checked against the schema), --dcn-rank -1 made the rank the model takes, --train
 * classified (a stream or a file) and, where --holdout needs it, counted. */
typedef struct ps_train_plan {
  ps_consistency consistency;      /* --consistency */
  uint32_t staleness;              /* K of ssp:K (0 otherwise) */
  ps_dlrm_opt_kind dense_opt;      /* --dense-opt */
  ps_optimizer sparse_opt;         /* --sparse-opt */
  ps_bad_lines bad_lines;          /* --bad-lines */
  ps_dlrm_interaction interaction; /* --interaction */
  ps_kern_prec precision;          /* --precision */
  bool out_bias_zero;              /* --out-bias-init zero */
  bool wire_f16;                   /* --wire f16 */
  ps_row_type row_type;            /* --row-type */
  bool lookahead_on;      /* --lookahead on, refresh or stale: sync pulls each batch's rows a
                           * step early and refreshes them; ssp/async keep pushes in flight */
  bool lookahead_stale;   /* stale: ssp/async also pull a step early (own step missing) */
  bool lookahead_refresh; /* refresh: on, but never the deep lookahead (ps_train_deep.c) */
  ps_schema *schema;      /* --schema, loaded (ps_train_plan_free) */
  int mlp_bot[PS_DLRM_MAX_LAYERS + 1], nbot; /* --mlp-bot's widths; without the flag, the
                                              * default's with the schema's dense inputs first */
  int mlp_top[PS_DLRM_MAX_LAYERS], ntop;     /* --mlp-top's widths */
  char mlp_bot_text[256]; /* --mlp-bot as given, or the widths above as text: the model's
                           * config, the checkpoint's and the logs take text */
  int dcn_rank;           /* --dcn-rank resolved (-1: the model's auto rank) */
  int prefetch;           /* --prefetch; 0 for a stream or a followed file */
  bool train_stream;      /* --train is "-" or a named pipe */
  uint64_t train_lines;   /* --train's rows, counted when --holdout needs them (0: not) */
} ps_train_plan;

void ps_train_config_default(ps_train_config *c);
/* The flags resolved into *p, and everything about them that can be known before connecting
 * (ps_train_plan.c): every named choice a known name, every input path readable, the directory
 * of --summary writable, the checkpoint directory there (created as mkdir -p would, except for
 * --resume), the model's shape, --holdout against the rows of --train. PS_ERR_INVALID with a
 * one-line reason in err that names the flag (a bad argument: ps-worker exits 2). *p needs
 * ps_train_plan_free whatever the result. */
ps_status ps_train_plan_resolve(const ps_train_config *c, ps_train_plan *p, ps_error *err);
/* Frees what ps_train_plan_resolve loaded (the schema). */
void ps_train_plan_free(ps_train_plan *p);
/* The model's dense inputs for a schema of nd dense columns: nd, or 1 (a constant 0 input,
 * so the bottom MLP's output is a learned vector) when the schema has none. */
static inline int ps_train_dense_inputs(int nd) { return nd > 0 ? nd : 1; }
/* Runs the whole job; returns PS_OK or an error after logging its reason. */
ps_status ps_train_run(const ps_train_config *c, const ps_train_plan *p);

#endif
