/* ps-worker: trains DLRM against Ember's parameter servers (docs/DESIGN.md). Parses
 * flags into a ps_train_config (text: the flag table and the checks across flags), resolves
 * them once into the run's ps_train_plan (typed: the named choices' enums, the schema, the
 * model's widths; ps_train_plan_resolve also checks what can be known before connecting:
 * paths, checkpoint directory, model shape) and runs ps_train_run. Bad arguments exit 2 with a one-line reason before anything
 * connects; a run that fails exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_curve.h"
#include "ps_http.h"
#include "ps_log.h"
#include "ps_train.h"

/* SIGINT / SIGTERM with a stream or --follow-input: the ranks stop at the next step they all
 * take (or the input ends, when none is coming), take the final checkpoint and write the
 * summary (the default action would lose everything since the last checkpoint). A second
 * signal has its default action. */
static volatile sig_atomic_t g_stop;
static void on_stop(int sig) {
  g_stop = 1;
  signal(sig, SIG_DFL);
}

int main(int argc, char **argv) {
  /* Gloo writes its TCP sockets without MSG_NOSIGNAL: a peer that exits mid-collective would
   * kill this worker with SIGPIPE before it could say which collective failed. */
  signal(SIGPIPE, SIG_IGN);
  ps_train_config c;
  ps_train_config_default(&c);
  c.precision = "fp32";
  int64_t timeout_ms = c.timeout_ms;
  const char *log_level = "info";
  int64_t metrics_port = 0;
  const char *curve_secret = NULL, *curve_server = NULL;
  bool check_only = false;
  ps_cli_opt opts[] = {
      {"servers", 0, PS_CLI_STRING, &c.servers, "URL,...", "parameter servers, shard order; the first hosts the coordinator", true, 0, 0},
      {"train", 0, PS_CLI_STRING, &c.train, "FILE|-", "training data: Criteo TSV, .gz, or ps-convert binary; '-' (stdin) or a named pipe: a stream, read once (docs/TRAINING.md)", true, 0, 0},
      {"follow-input", 0, PS_CLI_FLAG, &c.follow_input, NULL, "--train is a text file that grows: at its end wait for more lines (ends on SIGINT/SIGTERM, --max-steps or --input-idle-s)", false, 0, 0},
      {"input-idle-s", 0, PS_CLI_DOUBLE, &c.input_idle_s, "S", "a stream or --follow-input ends after S seconds without new data (0: never)", false, 0, 1e9},
      {"checkpoint-every-s", 0, PS_CLI_DOUBLE, &c.checkpoint_every_s, "S", "also checkpoint every S seconds (rank 0's clock; with --checkpoint-dir)", false, 0, 1e9},
      {"progressive-window", 0, PS_CLI_I64, &c.progressive_window, "N", "rolling AUC/logloss over each rank's last N samples, each scored before it trains (0: off)", false, 0, 1e8},
      {"progressive-dump", 0, PS_CLI_STRING, &c.progressive_dump, "FILE", "write every progressively scored 'score label' of this rank (rank R > 0: FILE.R)", false, 0, 0},
      {"test", 0, PS_CLI_STRING, &c.test, "FILE", "evaluation data (AUC, logloss, accuracy)", false, 0, 0},
      {"holdout", 0, PS_CLI_I64, &c.holdout, "LINES", "without --test: evaluate on the last LINES lines of --train", false, 0, 1e15},
      {"rank", 0, PS_CLI_INT, &c.rank, "R", "this worker's rank (-1: assigned by the coordinator)", false, -1, 65535},
      {"world", 0, PS_CLI_INT, &c.world, "W", "number of workers", false, 1, 65536},
      {"device", 0, PS_CLI_STRING, &c.device, "cpu|cuda[:N]", "where the dense towers run", false, 0, 0},
      {"consistency", 0, PS_CLI_STRING, &c.consistency, "sync|async|ssp:K", "consistency mode", false, 0, 0},
      {"epochs", 0, PS_CLI_INT, &c.epochs, "E", "passes over the training data", false, 1, 1000},
      {"batch", 0, PS_CLI_INT, &c.batch, "B", "samples per step per worker", false, 1, 1 << 20},
      {"lr", 0, PS_CLI_DOUBLE, &c.lr, "LR", "dense optimizer learning rate", false, 0, 100},
      {"dense-opt", 0, PS_CLI_STRING, &c.dense_opt, "sgd|adagrad|adam", "dense optimizer", false, 0, 0},
      {"sparse-lr", 0, PS_CLI_DOUBLE, &c.sparse_lr, "LR", "embedding optimizer learning rate", false, 0, 100},
      {"sparse-opt", 0, PS_CLI_STRING, &c.sparse_opt, "NAME", "embedding optimizer: sgd, adagrad, rowwise-adagrad, adam, ftrl", false, 0, 0},
      {"emb-init", 0, PS_CLI_DOUBLE, &c.emb_init, "A", "embedding rows start in U(-A, A)", false, 0, 10},
      {"emb-dim", 0, PS_CLI_INT, &c.emb_dim, "D", "embedding dimension (= last --mlp-bot width)", false, 1, 4096},
      {"mlp-bot", 0, PS_CLI_STRING, &c.mlp_bot, "W-W-...", "bottom MLP widths, input (13) first", false, 0, 0},
      {"mlp-top", 0, PS_CLI_STRING, &c.mlp_top, "W-...-1", "top MLP output widths (the interaction width is prepended)", false, 0, 0},
      {"threads", 0, PS_CLI_INT, &c.threads, "T", "CPU threads for the dense towers (0: all cores)", false, 0, 1024},
      {"bad-lines", 0, PS_CLI_STRING, &c.bad_lines, "skip|fail", "what a malformed input line does", false, 0, 0},
      {"max-bad-fraction", 0, PS_CLI_DOUBLE, &c.max_bad_fraction, "F", "fail when a larger share of --train's lines is bad (real Criteo has none)", false, 0, 1},
      {"hash-buckets", 0, PS_CLI_I64, &c.hash_buckets, "N", "categorical value -> one of N rows per feature (0: open vocabulary)", false, 0, 1e15},
      {"admit-threshold", 0, PS_CLI_I64, &c.admit_threshold, "N", "a key gets its own row after N sightings (0: at once)", false, 0, 1e9},
      {"ttl-steps", 0, PS_CLI_I64, &c.ttl_steps, "N", "rows untouched for N steps expire (0: never)", false, 0, 1e15},
      {"checkpoint-dir", 0, PS_CLI_STRING, &c.checkpoint_dir, "DIR", "where checkpoints go (dense state + every shard's snapshot); made if missing", false, 0, 0},
      {"checkpoint-every", 0, PS_CLI_I64, &c.checkpoint_every, "N", "checkpoint every N steps and at the end (0: only at the end)", false, 0, 1e15},
      {"resume", 0, PS_CLI_FLAG, &c.resume, NULL, "continue from the latest checkpoint in --checkpoint-dir (none left to train: evaluate it)", false, 0, 0},
      {"summary", 0, PS_CLI_STRING, &c.summary, "FILE", "JSON summary (rank 0)", false, 0, 0},
      {"check", 0, PS_CLI_FLAG, &check_only, NULL, "check the arguments, --schema, the data's paths and headers and the checkpoint as a run would, then exit 0 without connecting", false, 0, 0},
      {"eval-every", 0, PS_CLI_I64, &c.eval_every, "N", "also evaluate every N steps", false, 0, 1e15},
      {"max-steps", 0, PS_CLI_I64, &c.max_steps, "N", "stop after N steps (0: no limit)", false, 0, 1e15},
      {"progress-every", 0, PS_CLI_DOUBLE, &c.progress_every, "S", "seconds between progress lines", false, 0.01, 1e6},
      {"seed", 0, PS_CLI_I64, &c.seed, "S", "seed of the dense and embedding initialization and of the shuffle buffer", false, 0, 0},
      {"run-id", 0, PS_CLI_STRING, &c.run_id, "ID", "rendezvous namespace (default: agreed through the coordinator)", false, 0, 0},
      {"timeout-ms", 0, PS_CLI_I64, &timeout_ms, "MS", "bound on every server request", false, 1, 86400000},
      {"metrics-port", 0, PS_CLI_I64, &metrics_port, "P", "serve Prometheus /metrics on port P (0: off)", false, 0, 65535},
      {"log-level", 0, PS_CLI_STRING, &log_level, "LEVEL", "debug, info, warn, error", false, 0, 0},
      {"curve-secret", 0, PS_CLI_STRING, &curve_secret, "FILE", "CURVE: this worker's secret key (ps-keygen); with --curve-server", false, 0, 0},
      {"curve-server", 0, PS_CLI_STRING, &curve_server, "FILE", "CURVE: the servers' public key (default: no CURVE)", false, 0, 0},
      {"schema", 0, PS_CLI_STRING, &c.schema, "criteo|FILE", "what a line of --train/--test means: the built-in Criteo layout or a JSON schema (docs/SCHEMA.md)", false, 0, 0},
      {"interaction", 0, PS_CLI_STRING, &c.interaction, "dot|dcn", "feature interaction: DLRM's dot products, or DCNv2's cross network (MLPerf DLRMv2)", false, 0, 0},
      {"precision", 0, PS_CLI_STRING, &c.precision, "fp32|bf16", "dense GEMMs (forward and backward) in FP32, or with bf16 inputs and FP32 accumulation (weights, optimizer state and element-wise ops stay FP32; a CPU without AVX512_BF16 says so and runs FP32)", false, 0, 0},
      {"dcn-layers", 0, PS_CLI_INT, &c.dcn_layers, "L", "--interaction dcn: cross layers", false, 1, PS_DLRM_MAX_CROSS},
      {"out-bias-init", 0, PS_CLI_STRING, &c.out_bias_init, "draw|zero", "the output layer's bias at step 0: DLRM's N(0, 1) draw, or 0", false, 0, 0},
      {"dcn-rank", 0, PS_CLI_INT, &c.dcn_rank, "R", "--interaction dcn: rank of each cross layer's U V (0: full-rank W; -1: D/4 of the cross width D)", false, -1, 1 << 20},
      {"metrics-bind", 0, PS_CLI_STRING, &c.metrics_bind, "ADDR",
       "address of the metrics endpoint (default 127.0.0.1; 0.0.0.0 = every interface)", false, 0, 0},
      {"shuffle-buffer", 0, PS_CLI_I64, &c.shuffle_buffer, "N", "each rank draws its training samples at random from a buffer of N, seeded by --seed and the rank (0: file order; ~300 bytes a sample)", false, 0, 1e9},
      {"wire", 0, PS_CLI_STRING, &c.wire, "f32|f16", "how pulled rows and pushed gradients travel to and from the servers (bench/RESULTS-e2e.md)", false, 0, 0},
      {"row-type", 0, PS_CLI_STRING, &c.row_type, "f32|f16|bf16", "how the servers store the embedding rows: f16/bf16 take half the bytes (optimizer state stays f32; resuming a checkpoint of another row type is refused)", false, 0, 0},
      {"checkpoint-full-every", 0, PS_CLI_I64, &c.checkpoint_full_every, "K", "every K-th checkpoint is full, the others hold only the rows changed since the previous one (1: always full)", false, 1, 1e9},
      {"prefetch", 0, PS_CLI_INT, &c.prefetch, "N", "send each batch's keys N steps before its pull, so the servers load its rows from disk into their hot tier meanwhile (0: off; bench/RESULTS-e2e.md)", false, 0, PS_TRAIN_MAX_PREFETCH},
      {"lookahead", 0, PS_CLI_STRING, &c.lookahead, "off|on|refresh|stale", "on: sync pulls the next batch's rows before this step's compute and then fetches only the rows this step changed (the same model); one worker in sync goes deeper where it can (--lookahead-depth; refresh: not); ssp and async collect push replies up to K (async 8) steps later (the same reads). stale: also, in ssp:K (K >= 1) and async, the next batch's pull goes before this step's compute, so its rows may lack this worker's own last step (docs/DESIGN.md, Lookahead pulls)", false, 0, 0},
      {"lookahead-depth", 0, PS_CLI_I64, &c.lookahead_depth, "K", "with --lookahead on, one worker in sync (f32 rows, no admission or TTL, no row cache): pull K batches ahead and apply this worker's own updates to the rows it holds with the servers' optimizer arithmetic, so no server reply waits in a step and the model is the same (0: the default, 8; docs/DESIGN.md, The deep lookahead)", false, 0, 8},
      {"row-cache-mb", 0, PS_CLI_I64, &c.row_cache_mb, "M", "keep up to M MiB of rows on the worker and pull only the rows it lacks: sync (with --lookahead on) refreshes the cached rows that changed, so the model is the same; ssp:K uses a cached row at most K steps old (0: off; docs/DESIGN.md, The worker's row cache)", false, 0, 1 << 20},
      {"failover-ms", 0, PS_CLI_INT, &c.failover_ms, "N", "replicated shards (--servers 'U0|U1,...'): a replica moved to that does not connect within N ms is left for the next (docs/OPERATIONS.md, Replicated shards)", false, 50, 600000},
  };
  ps_cli cli = {"ps-worker", "Trains DLRM on Criteo-style data against Ember parameter servers.",
                NULL, opts, sizeof opts / sizeof opts[0]};
  const char *mlp_bot_default = c.mlp_bot;
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  c.mlp_bot_given = c.mlp_bot != mlp_bot_default;
  if (ps_log_apply_level("ps-worker", log_level) != 0) return 2;
  c.timeout_ms = (uint32_t)timeout_ms;
  if (c.rank >= c.world) {
    fprintf(stderr, "ps-worker: --rank %d must be below --world %d\n", c.rank, c.world);
    return 2;
  }
  if (c.resume && !c.checkpoint_dir) {
    fprintf(stderr, "ps-worker: --resume needs --checkpoint-dir\n");
    return 2;
  }
  if (c.checkpoint_every_s > 0 && !c.checkpoint_dir) {
    fprintf(stderr, "ps-worker: --checkpoint-every-s needs --checkpoint-dir\n");
    return 2;
  }
  if (c.metrics_bind && !ps_http_addr_ok(c.metrics_bind)) {
    fprintf(stderr, "ps-worker: --metrics-bind: '%s' is not an IPv4 or IPv6 address\n",
            c.metrics_bind);
    return 2;
  }
  ps_error err;
  ps_error_clear(&err);
  ps_train_plan plan;
  memset(&plan, 0, sizeof plan);
  if (ps_curve_load_client(curve_secret, curve_server, c.curve_secret, c.curve_server, &err) !=
          PS_OK ||
      ps_train_plan_resolve(&c, &plan, &err) != PS_OK) {
    fprintf(stderr, "ps-worker: %s\n", ps_error_str(&err));
    ps_train_plan_free(&plan);
    return 2;
  }
  if (check_only) { /* deploy/ember-local: once, before any server starts */
    printf("ps-worker: --check: the arguments are fine\n");
    ps_train_plan_free(&plan);
    return 0;
  }
  c.metrics_port = (int)metrics_port;
  if (plan.train_stream || c.follow_input) {
    signal(SIGINT, on_stop); /* the reader polls its input: no read to interrupt */
    signal(SIGTERM, on_stop);
    c.stop = &g_stop;
  }
  rc = ps_train_run(&c, &plan) == PS_OK ? 0 : 1;
  ps_train_plan_free(&plan);
  return rc;
}
