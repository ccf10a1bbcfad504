/* ps_train_stream: what ps-worker adds for a stream of training data (docs/TRAINING.md,
 * "Streaming input"): --train's reader over a stream, a growing file or a resumed position;
 * progressive validation; the time-based checkpoint vote; the input position a checkpoint
 * records.
 *
 * Progressive validation. Step t's training forward already scores its batch with the
 * parameters before step t's update, so those scores are a held-out evaluation of a stream
 * that costs no extra forward: each (score, label) goes into a ring of the last
 * --progressive-window samples of this rank, whose AUC and logloss (ps_metrics_eval: exact,
 * ties at their average rank, logloss clipped at 1e-7) are the "rolling" figures of the
 * progress line (rank 0's window), of /metrics (each rank's own) and of the summary (every
 * rank's window gathered at the end). A window of samples rather than of time keeps the
 * figure's noise the same whatever the stream's rate; 100000 samples give an AUC to about
 * +-0.003 at Criteo's click rate.
 *
 * --checkpoint-every-s. Ranks must checkpoint at the same step, and their clocks do not agree:
 * rank 0 alone decides, and its "now" travels in a spare slot of the step's gradient
 * allreduce, which every rank runs anyway, so the agreement costs no message. A stop signal
 * (SIGINT, SIGTERM on a stream) travels in the same slot: the ranks that got it say so, and
 * every rank reads no further batch after that step, so all stop at the same step. */
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY

ps_status ps_train_stream_start(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  ps_train_stream *s = &t->strm;
  s->auc = s->logloss = NAN;
  s->t_ckpt = s->t_refresh = ps_now_ns();
  s->cap = (size_t)c->progressive_window;
  if (s->cap) {
    s->win_p = malloc(s->cap * sizeof *s->win_p);
    s->win_y = malloc(s->cap * sizeof *s->win_y);
    if (!s->win_p || !s->win_y) return PS_ERR_NOMEM;
  }
  if (c->progressive_dump) {
    char path[4200];
    if (t->rank == 0) snprintf(path, sizeof path, "%s", c->progressive_dump);
    else snprintf(path, sizeof path, "%s.%d", c->progressive_dump, t->rank);
    if (!(s->dump = fopen(path, "w"))) {
      PS_ERROR("--progressive-dump %s: cannot write it", path);
      return PS_ERR_IO;
    }
  }
  return PS_OK;
}

void ps_train_stream_free(ps_trainer *t) {
  ps_train_stream *s = &t->strm;
  free(s->win_p);
  free(s->win_y);
  if (s->dump) fclose(s->dump);
  memset(s, 0, sizeof *s);
}

ps_status ps_train_stream_score(ps_trainer *t, const ps_batch *b) {
  ps_train_stream *s = &t->strm;
  if (!s->cap && !s->dump) return PS_OK;
  TRY(ps_dlrm_last_probs(t->model, t->probs));
  for (size_t i = 0; i < b->n; i++) {
    if (s->cap) {
      s->win_p[s->at] = t->probs[i];
      s->win_y[s->at] = b->labels[i];
      s->at = (s->at + 1) % s->cap;
      if (s->len < s->cap) s->len++;
    }
    if (s->dump) fprintf(s->dump, "%.9g %d\n", t->probs[i], b->labels[i] != 0.0f);
  }
  return PS_OK;
}

/* The window's AUC and logloss into s (NaN with an empty window or one class only). */
static void refresh(ps_train_stream *s) {
  s->t_refresh = ps_now_ns();
  if (!s->len) return;
  s->auc = ps_eval_auc(s->win_p, s->win_y, s->len);
  s->logloss = ps_eval_logloss(s->win_p, s->win_y, s->len, 1e-7);
}

/* 1 from rank 0 for "checkpoint now", 2 from every rank that was told to stop: the sum says
 * both to every rank (exact in a float for any world up to 2^23). */
float ps_train_stream_vote(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  float v = c->stop && *c->stop ? 2.0f : 0.0f;
  if (t->rank == 0 && c->checkpoint_every_s > 0 && c->checkpoint_dir &&
      ps_train_since(t->strm.t_ckpt) >= c->checkpoint_every_s)
    v += 1.0f;
  return v;
}

void ps_train_stream_agree(ps_trainer *t, float votes) {
  long v = lrintf(votes);
  t->strm.ckpt_due = (v & 1) != 0;
  if (v >= 2 && !t->strm.stop_due && t->rank == 0)
    PS_INFO("stopping after step %" PRIu64 " (a stop signal): the final checkpoint and summary "
            "follow", t->step + 1);
  t->strm.stop_due = t->strm.stop_due || v >= 2;
}

void ps_train_stream_step_done(ps_trainer *t, const ps_batch *b) {
  ps_train_stream *s = &t->strm;
  if (b && s->pos_exact) {
    s->in_line = b->end_line;
    s->in_byte = b->end_byte;
    s->have_pos = true;
  }
  if (t->reg && s->cap && ps_train_since(s->t_refresh) >= t->cfg->progress_every) {
    refresh(s);
    ps_gauge_set(s->m_auc, s->auc);
    ps_gauge_set(s->m_logloss, s->logloss);
  }
}

ps_status ps_train_stream_metrics(ps_trainer *t) {
  const char *rank_l[] = {"rank"};
  char rank[16];
  snprintf(rank, sizeof rank, "%d", t->rank);
  const char *rv[] = {rank};
  ps_metric *f;
  TRY(ps_metrics_gauge(t->reg, "ember_worker_progressive_auc", "AUC of this rank's last "
                       "--progressive-window samples, each scored before it trained", rank_l, 1,
                       &f));
  TRY(ps_metric_series(f, rv, &t->strm.m_auc));
  TRY(ps_metrics_gauge(t->reg, "ember_worker_progressive_logloss", "logloss of the same window",
                       rank_l, 1, &f));
  return ps_metric_series(f, rv, &t->strm.m_logloss);
}

void ps_train_stream_progress(ps_trainer *t, char *buf, size_t n) {
  ps_train_stream *s = &t->strm;
  buf[0] = '\0';
  if (!s->cap) return;
  refresh(s);
  snprintf(buf, n, "  progressive auc %.5f logloss %.5f (last %zu)", s->auc, s->logloss, s->len);
}

ps_status ps_train_stream_finish(ps_trainer *t) {
  ps_train_stream *s = &t->strm;
  if (!s->cap) return PS_OK;
  if (s->dump && fflush(s->dump) != 0) {
    PS_ERROR("--progressive-dump %s: write failed", t->cfg->progressive_dump);
    return PS_ERR_IO;
  }
  ps_eval *ev = NULL; /* the ring's order does not change the figures */
  TRY(ps_eval_create(&ev));
  ps_status st = s->len ? ps_eval_add(ev, s->win_p, s->win_y, s->len) : PS_OK;
  if (st == PS_OK && t->world > 1) {
    st = ps_eval_allgather(ev, ps_train_allreduce_host, t, t->rank, t->world);
    if (st != PS_OK) ps_train_coll_fail(t, "gathering the progressive scores", st);
  }
  if (st == PS_OK && ps_eval_count(ev) > 0) {
    st = ps_eval_compute(ev, &s->all);
    s->have_all = st == PS_OK;
  }
  ps_eval_destroy(&ev);
  return st;
}

void ps_train_stream_summary(ps_trainer *t, void *summary) {
  json_t *j = summary, *p = json_object();
  ps_train_stream *s = &t->strm;
  bool have = s->have_all && !isnan(s->all.auc);
  json_object_set_new(p, "auc", have ? json_real(s->all.auc) : json_null());
  json_object_set_new(p, "logloss", s->have_all ? json_real(s->all.logloss) : json_null());
  json_object_set_new(p, "samples", json_integer(s->have_all ? (json_int_t)s->all.n : 0));
  json_object_set_new(p, "window", json_integer((json_int_t)s->cap));
  json_object_set_new(j, "progressive", p);
  if (s->have_pos) {
    json_t *in = json_object();
    json_object_set_new(in, "lines", json_integer((json_int_t)s->in_line));
    json_object_set_new(in, "bytes", json_integer((json_int_t)s->in_byte));
    json_object_set_new(j, "input", in);
  }
}

/* ------------------------------------------------------------------ the reader */

ps_status ps_train_stream_open_train(ps_trainer *t, const ps_train_split *sp, ps_reader **out) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  bool streaming = p->train_stream || c->follow_input;
  /* A stream trains in arrival order: a shuffle buffer would hold samples past a checkpoint's
   * position, and the freshness a stream is for would wait behind it. */
  size_t shuffle = streaming ? 0 : (size_t)c->shuffle_buffer;
  if (streaming && c->shuffle_buffer && t->rank == 0)
    PS_INFO("--train %s is a stream: samples train in arrival order (no shuffle buffer)",
            c->train);
  ps_reader_opts o;
  ps_train_reader_opts(t, c->epochs, 0, sp->train_end, shuffle, &o);
  o.stream = p->train_stream;
  o.follow = c->follow_input && !p->train_stream;
  o.idle_s = c->input_idle_s;
  o.stop = c->stop;
  o.start_line = t->strm.start_line;
  o.start_byte = t->strm.start_byte;
  t->strm.pos_exact = shuffle == 0;
  ps_error err;
  ps_status st = ps_reader_create(c->train, &o, out, &err);
  if (st != PS_OK) PS_ERROR("cannot read %s: %s", c->train, ps_error_str(&err));
  return st;
}

void ps_train_stream_resume_plan(ps_trainer *t, uint64_t *skip) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  ps_train_stream *s = &t->strm;
  ps_input_format fmt = PS_INPUT_TSV;
  if (p->train_stream) {
    /* A pipe cannot be re-read: what it carries now follows what the checkpoint trained only
     * if its writer starts there (deploy/kafka-train does, from the committed offset). */
    if (t->rank == 0)
      PS_INFO("--resume on a stream: training on what it carries from now on (the checkpoint "
              "trained %" PRIu64 " lines of its own stream; nothing is skipped)", s->in_line);
    *skip = 0;
    s->have_pos = false;
    s->in_line = s->in_byte = 0;
    return;
  }
  char abs[4096];
  bool same = realpath(c->train, abs) && strcmp(abs, s->in_train) == 0;
  if (s->have_pos && !same && t->rank == 0)
    PS_WARN("--resume: the checkpoint's position is in %s, not --train %s: reading --train from "
            "its start and dropping the %" PRIu64 " batches trained, as without a position",
            s->in_train, c->train, *skip);
  bool seekable = s->have_pos && same && c->epochs == 1 &&
                  (c->follow_input || !c->shuffle_buffer) &&
                  ps_data_detect(c->train, &fmt) == PS_OK && fmt == PS_INPUT_TSV;
  if (!seekable) return; /* re-read and drop *skip batches, as ever */
  s->start_line = s->in_line;
  s->start_byte = s->in_byte;
  *skip = 0;
  if (t->rank == 0)
    PS_INFO("--resume: --train %s continues at data line %" PRIu64 " (byte %" PRIu64 "), "
            "where the checkpoint's last batch ended", c->train, s->in_line, s->in_byte);
}
