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
 * The config keeps each named choice twice: the name as given (a flag's text, its --help
 * default, what the logs and the summary report) and its parsed value, which is what the run
 * uses. ps_train_config_default sets both; a caller that changes a name parses it too
 * (ps-worker's main does, beside its flag table). */
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
  int dcn_layers, dcn_rank; /* DCNv2 cross layers and their rank (0: full rank, -1: auto,
                             * resolved by ps_train_config_check) */
  const char *metrics_bind; /* its address; NULL = 127.0.0.1 */
  int64_t shuffle_buffer;   /* training samples in each rank's shuffle buffer (0: file order) */
  const char *wire;         /* f32 | f16: how pulled rows and pushed gradients travel */
  const char *row_type;     /* f32 | f16 | bf16: how the servers store the table's rows */
  int prefetch;             /* batches ahead whose keys are sent as a prefetch (0: off; at
                             * most PS_TRAIN_MAX_PREFETCH) */
  /* The names above, parsed: */
  ps_consistency consistency_mode; /* consistency */
  uint32_t staleness;              /* K of ssp:K (0 otherwise) */
  ps_dlrm_opt_kind dense_optimizer; /* dense_opt */
  ps_optimizer sparse_optimizer;   /* sparse_opt */
  ps_bad_lines bad_lines_mode;     /* bad_lines */
  ps_dlrm_interaction interaction_kind; /* interaction */
  ps_kern_prec precision_kind;          /* precision (zero: FP32) */
  bool out_bias_zero;                   /* out_bias_init is zero */
  bool wire_f16;                   /* wire */
  ps_row_type row_type_kind;       /* row_type */
  uint64_t train_lines;            /* lines of train, counted by ps_train_config_check when
                                    * holdout needs them (0: not counted) */
  const char *schema;              /* --schema: "criteo" (built in) or a JSON file */
  bool mlp_bot_given;              /* --mlp-bot was given: checked against the schema; else
                                    * its first width is the schema's dense inputs */
  ps_schema *schema_obj;           /* loaded by ps_train_config_check; ps_train_config_free */
  char mlp_bot_buf[256];           /* mlp_bot derived from the schema */
  int64_t checkpoint_full_every;   /* every K-th checkpoint full, the others deltas (1: full) */
  int failover_ms;                 /* replicated shards: the client's --failover-ms */
  const char *lookahead;           /* off | on | stale */
  bool lookahead_on;               /* on or stale: sync pulls each batch's rows a step early and
                                    * refreshes them; ssp/async keep pushes in flight */
  bool lookahead_stale;            /* stale: ssp/async also pull a step early (own step missing) */
  bool lookahead_refresh;          /* refresh: on, but never the deep lookahead (ps_train_deep.c) */
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
  bool train_stream;               /* set by ps_train_config_check: --train is "-" or a FIFO */
} ps_train_config;

void ps_train_config_default(ps_train_config *c);
/* Everything about c that can be known before connecting (ps_train_check.c): every input path
 * readable, the directory of --summary writable, the checkpoint directory there (created as mkdir -p would, except for --resume),
 * the model's shape, --holdout against the lines of --train. PS_ERR_INVALID with a one-line
 * reason in err that names the flag (a bad argument: ps-worker exits 2). */
ps_status ps_train_config_check(ps_train_config *c, ps_error *err);
/* Frees what ps_train_config_check loaded (the schema). */
void ps_train_config_free(ps_train_config *c);
/* The model's dense inputs for a schema of nd dense columns: nd, or 1 (a constant 0 input,
 * so the bottom MLP's output is a learned vector) when the schema has none. */
static inline int ps_train_dense_inputs(int nd) { return nd > 0 ? nd : 1; }
/* Runs the whole job; returns PS_OK or an error after logging its reason. */
ps_status ps_train_run(const ps_train_config *c);

#endif
