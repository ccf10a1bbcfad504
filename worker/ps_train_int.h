/* ps_train_int.h: the trainer's state, shared by the files of one ps-worker run — the loop
 * (ps_train.c), evaluation and data splits (ps_train_eval.c), distribution across ranks
 * (ps_train_dist.c), checkpoints (ps_train_ckpt.c) and reporting (ps_train_report.c).
 * Private to worker/.
 *
 * One struct holds the whole run: everything the steps need is allocated once, for the largest
 * batch, and freed once. The per-step allreduce is a static inline here, so the hot path calls
 * the collective exactly as it did when the loop and the collectives shared a file. */
#ifndef PS_TRAIN_INT_H
#define PS_TRAIN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ps_client.h"
#include "ps_collectives.h"
#include "ps_dedup.h"
#include "ps_dlrm.h"
#include "ps_http.h"
#include "ps_kernels.h"
#include "ps_log.h"
#include "ps_metrics.h"
#include "ps_metrics_eval.h"
#include "ps_reader.h"
#include "ps_time.h"
#include "ps_train.h"

#define PS_TRAIN_TABLE_ID 1u
#define PS_TRAIN_TABLE_NAME "criteo_emb" /* every run's table before schemas named theirs */
#define PS_TRAIN_NPHASES 7 /* data pull compute allreduce push push_wait optimizer */

typedef struct ps_train_slot { /* one batch in flight: its keys, pull and row buffers */
  ps_batch *b;
  size_t nunique;
  uint64_t *unique;
  uint32_t *inverse;
  float *rows;
  ps_client_req *pull;
  uint64_t step;
  size_t cap;         /* keys unique/inverse/rows have room for */
  ps_client_req *look; /* --lookahead: the pull of `step` whose rows `pull`, a REFRESH of
                        * step + 1 (once sent), brings up to date; with --row-cache-mb, every
                        * pull (of the cache's misses) */
  bool ahead;          /* a sync lookahead: its refresh is due after STEP(step) */
  bool refresh;        /* the refresh was sent: every row will be PULL(step)'s */
  /* --row-cache-mb (ps_train_cache.c): the keys the cache missed, their positions among
   * `unique` and their pulled rows (scattered into `rows` once in); the oldest version of the
   * rows the cache gave (UINT64_MAX: none); the rows this pull fetches. */
  uint64_t *mkeys;
  uint32_t *mpos;
  float *mrows;
  size_t mcap, npulled;
  bool scattered;
  uint64_t oldest;
  /* the deep lookahead (ps_train_deep.c): the pulled rows with their optimizer state, `w`
   * floats a key (ps_store_state_row_floats), room for `scap` keys */
  float *srows;
  size_t scap;
} ps_train_slot;

/* The deep lookahead pulls up to this many batches ahead (--lookahead-depth; its pushes and
 * STEPs stay in flight as long, within the flight ring). */
#define PS_TRAIN_DEEP_MAX 8
#define PS_TRAIN_NSLOTS (PS_TRAIN_DEEP_MAX + 2) /* [0]: evaluation's; the ring: [1..K+1] */

/* --prefetch N: the batches read ahead of the one whose pull goes out next (a FIFO), and the
 * prefetch requests of their keys in flight (a ring; an ack is collected before its slot's
 * reuse). */
typedef struct ps_train_ahead {
  ps_batch *q[PS_TRAIN_MAX_PREFETCH + 1];
  int head, n;
  bool end;  /* the reader ended: nothing more to read ahead */
  ps_client_req *req[PS_TRAIN_MAX_PREFETCH + 1];
  int next;
} ps_train_ahead;

/* --lookahead in ssp and async: the push and STEP requests of the last steps, whose replies
 * are collected up to `window` steps later (a FIFO) rather than at the end of their step. */
#define PS_TRAIN_ASYNC_WINDOW 8 /* async: steps in flight; ssp:K: K */
typedef struct ps_train_flight {
  ps_client_req *push[PS_TRAIN_ASYNC_WINDOW + 1], *step[PS_TRAIN_ASYNC_WINDOW + 1];
  int head, n, window;
} ps_train_flight;

/* Streaming input and progressive validation (ps_train_stream.c): the ring of the last scored
 * samples (each batch scored by its training forward, before its update), the time-based
 * checkpoint vote, and the input position after the last trained batch. */
typedef struct ps_train_stream {
  float *win_p, *win_y;     /* [cap] scores and labels, a ring */
  size_t cap, len, at;
  FILE *dump;               /* --progressive-dump */
  double auc, logloss;      /* of the window at the last refresh (NaN: none yet) */
  uint64_t t_refresh, t_ckpt; /* when metrics were last refreshed; the last checkpoint (rank 0) */
  bool ckpt_due;            /* this step's checkpoint, as the allreduce agreed */
  bool stop_due;            /* a rank was told to stop: no batch after this step */
  bool pos_exact;           /* batches carry their input position (file order, text or binary) */
  uint64_t in_line, in_byte; /* the input position after the last trained batch */
  bool have_pos;            /* ... when pos_exact and a batch was trained or resumed from */
  char in_train[4096];      /* resumed: the --train the checkpoint's position is in (absolute) */
  uint64_t start_line, start_byte; /* where this run's reader starts (a resumed position) */
  ps_series *m_auc, *m_logloss, *m_lines;
  ps_eval_result all;       /* every rank's windows together, at the end (ps_train_stream_finish) */
  bool have_all;
} ps_train_stream;

typedef struct ps_trainer {
  const ps_train_config *cfg;  /* the flags: plain numbers and paths, the choices' names */
  const ps_train_plan *plan;   /* what they resolved to: every choice the run makes */
  int rank, world;
  ps_client *cl;
  ps_error cerr;      /* the last failed client call's message (ps_train_client_fail) */
  ps_kern *kern;
  ps_dlrm *model;
  ps_coll *coll;
  ps_dedup *dedup;
  ps_dlrm_opt dopt;
  char run_id[64];
  size_t nparams;
  float *host_grads;  /* [nparams + 1] host backends: the allreduce buffer; also checkpoints */
  float *red_d;       /* [nparams + 1] device backends: the allreduce buffer */
  float *emb_grad;    /* [nkeys_max, dim] (grows with multi-hot batches) */
  int32_t *idx, *offsets;
  float *probs;
  float *zero_dense;  /* [batch] the constant input of a schema without dense columns */
  ps_train_slot slots[PS_TRAIN_NSLOTS]; /* [0], [1]: the loop's; [1..]: the deep lookahead's */
  ps_train_ahead ahead;
  ps_train_flight flight;
  int dim, batch, nkeys_max;
  int nbags, ndense;  /* the schema's categorical features and dense columns */
  uint64_t step;      /* steps done (global step, resumed runs included) */
  uint64_t step_this_run;
  uint64_t samples;   /* this rank's training samples */
  double loss_sum;
  uint64_t loss_n;
  float last_loss;
  /* Phase times of rank 0's loop (s). pull: waiting for pulled rows; push: sending the push
   * and STEP; push_wait: waiting for their replies. The wait on servers is pull + push_wait. */
  double t_data, t_pull, t_compute, t_allreduce, t_push, t_push_wait, t_opt, t_eval;
  /* Rows per step (issue 32): fetched by pulls (not those the row cache gave), refreshed after
   * a lookahead pull (ps_client_refreshed), and the row cache's look-ups and hits; 0 where a
   * feature is off. cache_max_age: the most steps a cached row used without a refresh lagged
   * its pull (ssp; <= K). */
  uint64_t rows_pulled, rows_refreshed, cache_hits, cache_lookups, cache_max_age;
  struct ps_rowcache *rc; /* --row-cache-mb (NULL: off) */
  ps_table_spec spec;      /* the embedding table as declared */
  struct ps_train_deep *deep; /* the deep lookahead (ps_train_deep.c; NULL: off) */
  uint64_t bad_lines;  /* this rank's, --train's and the evaluation set's */
  uint64_t ckpt_step;  /* the step of the last checkpoint committed or resumed from ... */
  bool have_ckpt;      /* ... when there is one: a step is never checkpointed twice */
  char ckpt_base[4800]; /* rank 0: that checkpoint's shards path, the next delta's base ("") */
  /* --metrics-port: Prometheus series updated once per step */
  ps_metrics *reg;
  ps_http *http;
  ps_series *m_samples, *m_loss, *m_step, *m_phase[PS_TRAIN_NPHASES], *m_wait, *m_rows[4];
  double phase_last[PS_TRAIN_NPHASES];
  uint64_t rows_last[4];
  ps_train_stream strm;
} ps_trainer;

/* Where the run evaluates: a --test file, the held-out tail of --train, or nothing. */
typedef struct ps_train_split {
  uint64_t train_end;              /* 0: the whole of --train */
  const char *eval_path;           /* NULL: no evaluation */
  uint64_t eval_begin, eval_end;   /* line range of eval_path (0, 0: all of it) */
} ps_train_split;

#define PS_TRAIN_TRY(x)               \
  do {                                \
    ps_status st_ = (x);              \
    if (st_ != PS_OK) return st_;     \
  } while (0)

static inline double ps_train_since(uint64_t t0) { return ps_ns_to_s(ps_now_ns() - t0); }

/* Logs a failed client call with its message (t->cerr, which every client call fills on
 * failure); returns st. */
ps_status ps_train_client_fail(ps_trainer *t, const char *what, ps_status st);

/* ps_train.c: a batch's keys de-duplicated and its pull sent for `step` / waited for; the
 * model's batch view of a slot. */
ps_status ps_train_slot_start(ps_trainer *t, ps_train_slot *s, ps_batch *b, uint64_t step);
/* ps_train.c, shared with the deep lookahead's loop: a slot's key buffers grown for nk keys;
 * one step's compute, allreduce, push and STEP (in flight in *push, *stepreq); the next batch
 * from the --prefetch FIFO; a step's push/STEP added to the flight, collected down to `keep`. */
ps_status ps_train_grow_keys(ps_trainer *t, ps_train_slot *s, size_t nk);
ps_status ps_train_step(ps_trainer *t, ps_train_slot *s, ps_client_req **push,
                        ps_client_req **stepreq);
ps_status ps_train_next_ahead(ps_trainer *t, ps_reader *r, ps_batch **b);
ps_status ps_train_flight_add(ps_trainer *t, ps_client_req *push, ps_client_req *stepreq,
                              int keep);
ps_status ps_train_slot_wait(ps_trainer *t, ps_train_slot *s);
/* A trained step's end: its batch released, the step counted, the due checkpoint and
 * evaluation run. */
ps_status ps_train_step_done(ps_trainer *t, ps_reader *r, ps_train_slot *s, bool ckpt, bool eval,
                             const ps_train_split *sp);
void ps_train_fill_batch(ps_trainer *t, const ps_train_slot *s, ps_dlrm_batch *mb);

/* ps_train_cache.c: a slot's pull, the row cache's hits taken out (look: a sync lookahead,
 * refreshed after); after its fetch is waited for, the misses landed among the rows (before a
 * refresh writes over them); after every wait, the fetched rows kept in the cache. */
ps_status ps_train_pull_start(ps_trainer *t, ps_train_slot *s, uint64_t step, bool look);
void ps_train_cache_landed(ps_trainer *t, ps_train_slot *s);
void ps_train_cache_keep(ps_trainer *t, ps_train_slot *s);
void ps_train_cache_free(ps_trainer *t);

/* ps_train_deep.c: the deep lookahead (docs/DESIGN.md, "The deep lookahead"). setup: after
 * the table is declared, turns it on where it is exact (one worker, sync, f32 rows...) or says
 * in one line why not; loop: train_loop's steps with it; free: its memory. */
ps_status ps_train_deep_setup(ps_trainer *t);
struct ps_train_split;
ps_status ps_train_deep_loop(ps_trainer *t, ps_reader *r, uint64_t total_steps,
                             const struct ps_train_split *sp);
void ps_train_deep_free(ps_trainer *t);
/* The batches the deep lookahead holds at once (K + 1; 0: off): the reader must allow them. */
int ps_train_deep_held(const ps_trainer *t);

/* ps_train_eval.c; reader_fail logs why ps_reader_next failed (err: a bad line under
 * --bad-lines fail, a read or decompression error, a corrupt binary record). */
void ps_train_reader_fail(const ps_error *err);
/* shuffle: the reader's shuffle buffer in samples (0: file order), seeded by --seed and rank. */
ps_status ps_train_open_reader(ps_trainer *t, const char *path, int epochs, uint64_t row_begin,
                               uint64_t row_end, size_t shuffle, ps_reader **out);
/* The options ps_train_open_reader opens with (ps_train_stream_open_train adds to them). */
void ps_train_reader_opts(const ps_trainer *t, int epochs, uint64_t row_begin, uint64_t row_end,
                          size_t shuffle, ps_reader_opts *o);
/* The data rows of --train (a text file read to its end; a binary file's header). Logged at
 * debug level, so that a test can see --train is counted once before step 1. */
ps_status ps_train_count_rows(const ps_train_config *c, const ps_train_plan *p, uint64_t *rows);
ps_status ps_train_split_data(const ps_train_config *c, const ps_train_plan *p,
                              ps_train_split *sp);
ps_status ps_train_evaluate(ps_trainer *t, const ps_train_split *sp, ps_eval_result *res);

/* ps_train_dist.c */
ps_status ps_train_join(ps_trainer *t);
ps_status ps_train_setup_collectives(ps_trainer *t);
ps_status ps_train_allreduce_host(void *ctx, float *buf, size_t n);
ps_status ps_train_allreduce_u64(ps_trainer *t, uint64_t *v, size_t n);
ps_status ps_train_check_replicas(ps_trainer *t, uint64_t *hash_out);
/* Logs a failed collective: which one, at which step, and that a peer probably left (Gloo and
 * NCCL say which connection broke, not which rank: the log of the rank that exited says why).
 * Returns st. */
ps_status ps_train_coll_fail(ps_trainer *t, const char *what, ps_status st);

/* Allreduce over the world; a no-op for one worker. buf is backend memory for NCCL, host
 * memory for Gloo. */
static inline ps_status ps_train_allreduce(ps_trainer *t, float *buf, size_t n) {
  if (t->world == 1 || n == 0) return PS_OK;
  return ps_coll_allreduce_sum(t->coll, buf, n);
}

/* ps_train_ckpt.c */
ps_status ps_train_checkpoint(ps_trainer *t);
ps_status ps_train_resume(ps_trainer *t, uint64_t *step);
/* --resume, before connecting: the latest checkpoint was written with this run's
 * --hash-buckets, --emb-dim, --mlp-bot, --mlp-top, --sparse-opt, schema signature and
 * --interaction (with --dcn-layers, --dcn-rank) (a warning for a checkpoint that does not record
 * them; one without the schema's line predates schemas and is not compared on it; one that
 * records no interaction was a dot model's). */
ps_status ps_train_ckpt_check_flags(const ps_train_config *c, const ps_train_plan *p,
                                    ps_error *err);
/* The embedding table's name: the schema's (ps_schema_table); under --resume the checkpoint's
 * `table-name`, or PS_TRAIN_TABLE_NAME for a checkpoint written before that line existed, so
 * a resumed run declares the table its servers' rows were saved under. */
void ps_train_table_name(const ps_train_config *c, const ps_train_plan *p, char *out,
                         size_t n);

/* ps_train_stream.c. start: the window and dump (after setup); score: after a training
 * forward, its batch's scores into the window (before the update); vote / agree: rank 0's
 * "checkpoint now" (--checkpoint-every-s) into / out of the step's allreduce slot; step_done:
 * after a trained step, its input position; finish: every rank's window gathered (collective).
 * open_train: --train's reader (stream options, a resumed position); resume_plan: after
 * ps_train_resume, how the reader starts (a recorded position, or *skip batches dropped). */
ps_status ps_train_stream_start(ps_trainer *t);
ps_status ps_train_stream_score(ps_trainer *t, const ps_batch *b);
float ps_train_stream_vote(ps_trainer *t);
void ps_train_stream_agree(ps_trainer *t, float votes);
void ps_train_stream_step_done(ps_trainer *t, const ps_batch *b);
ps_status ps_train_stream_finish(ps_trainer *t);
void ps_train_stream_free(ps_trainer *t);
ps_status ps_train_stream_open_train(ps_trainer *t, const ps_train_split *sp, ps_reader **out);
void ps_train_stream_resume_plan(ps_trainer *t, uint64_t *skip);
ps_status ps_train_stream_metrics(ps_trainer *t);   /* with --metrics-port */
/* the progress line's tail (samples so far, the window's AUC and logloss) into buf */
void ps_train_stream_progress(ps_trainer *t, char *buf, size_t n);
void ps_train_stream_summary(ps_trainer *t, void *summary); /* a json_t object */
/* ps_train_ckpt.c: the input position beside a checkpoint (its `input` file) */

/* ps_train_report.c */
ps_status ps_train_metrics_start(ps_trainer *t);
void ps_train_metrics_update(ps_trainer *t, size_t n, double loss);
void ps_train_progress(ps_trainer *t, uint64_t t_start, uint64_t total_steps, int epoch);
/* Rank 0: the "done" and time lines, and --summary. counts = {samples, bad lines, rows
 * refreshed} of all ranks. */
ps_status ps_train_report_done(ps_trainer *t, const ps_eval_result *er, bool have_eval,
                               const uint64_t counts[3], double secs, uint64_t hash);

#endif
