/* ps_train_eval: ps-worker's data sources and evaluation — the readers over --train and the
 * evaluation set (a --test file, or the last --holdout lines of --train), and AUC, logloss and
 * accuracy over the whole evaluation set.
 *
 * Evaluation is collective: every rank scores its own shard of the set (its pulls tagged with
 * the current step, so in sync mode they see every applied step), then the (score, label) pairs
 * are gathered exactly to every rank, so all ranks compute the same numbers. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY

void ps_train_reader_fail(const ps_error *err) { PS_ERROR("%s", ps_error_str(err)); }

void ps_train_reader_opts(const ps_trainer *t, int epochs, uint64_t row_begin, uint64_t row_end,
                          size_t shuffle, ps_reader_opts *out) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = c->batch;
  o.rank = t->rank;
  o.world = t->world;
  o.epochs = epochs;
  o.bad_lines = p->bad_lines;
  o.hash_buckets = (uint64_t)c->hash_buckets;
  o.row_begin = row_begin;
  o.row_end = row_end;
  o.schema = p->schema;
  o.shuffle_buffer = shuffle;
  o.seed = (uint64_t)c->seed;
  o.prefetch += p->prefetch; /* the trainer holds --prefetch batches more (ps_train.c) */
  o.prefetch += ps_train_deep_held(t); /* and the deep lookahead its ring's */
  *out = o;
}

ps_status ps_train_open_reader(ps_trainer *t, const char *path, int epochs, uint64_t row_begin,
                               uint64_t row_end, size_t shuffle, ps_reader **out) {
  ps_reader_opts o;
  ps_train_reader_opts(t, epochs, row_begin, row_end, shuffle, &o);
  ps_error err;
  ps_status st = ps_reader_create(path, &o, out, &err);
  if (st != PS_OK) PS_ERROR("cannot read %s: %s", path, ps_error_str(&err));
  return st;
}

ps_status ps_train_count_rows(const ps_train_config *c, const ps_train_plan *p, uint64_t *rows) {
  PS_DEBUG("counting the rows of --train %s", c->train);
  return ps_data_count_rows(c->train, p->schema, rows);
}

/* --test, or without it the last --holdout lines of --train (counted here). */
ps_status ps_train_split_data(const ps_train_config *c, const ps_train_plan *p,
                              ps_train_split *sp) {
  memset(sp, 0, sizeof *sp);
  sp->eval_path = c->test;
  if (c->test || c->holdout <= 0) return PS_OK;
  uint64_t lines = p->train_lines; /* counted by ps_train_plan_resolve, or here */
  ps_status st = lines ? PS_OK : ps_train_count_rows(c, p, &lines);
  if (st != PS_OK) {
    PS_ERROR("cannot count the lines of %s", c->train);
    return st;
  }
  if ((uint64_t)c->holdout >= lines) {
    PS_ERROR("--holdout %" PRId64 " leaves no training lines (%s has %" PRIu64 ")",
             c->holdout, c->train, lines);
    return PS_ERR_INVALID;
  }
  sp->train_end = lines - (uint64_t)c->holdout;
  sp->eval_path = c->train;
  sp->eval_begin = sp->train_end;
  sp->eval_end = lines;
  return PS_OK;
}

/* AUC, logloss and accuracy over the whole evaluation set (see the top of the file). */
ps_status ps_train_evaluate(ps_trainer *t, const ps_train_split *sp, ps_eval_result *res) {
  uint64_t t0 = ps_now_ns();
  ps_reader *r = NULL;
  TRY(ps_train_open_reader(t, sp->eval_path, 1, sp->eval_begin, sp->eval_end, 0, &r));
  ps_eval *ev = NULL;
  ps_status st = ps_eval_create(&ev);
  ps_train_slot *s = &t->slots[0];
  for (;;) {
    ps_batch *b = NULL;
    ps_error err = {st, ""}; /* a step's failure is logged here too, by its status's text */
    if (st == PS_OK) st = ps_reader_next(r, &b, &err);
    if (st != PS_OK) {
      ps_train_reader_fail(&err);
      break;
    }
    if (!b) break;
    if (b->n > 0) {
      st = ps_train_slot_start(t, s, b, t->step);
      if (st == PS_OK) st = ps_train_slot_wait(t, s);
      ps_dlrm_batch mb;
      if (st == PS_OK) {
        ps_train_fill_batch(t, s, &mb);
        st = ps_dlrm_predict(t->model, &mb, t->probs);
      }
      if (st == PS_OK) st = ps_eval_add(ev, t->probs, b->labels, b->n);
    }
    ps_reader_release(r, b);
  }
  uint64_t v[2] = {ps_reader_rows(r), ps_reader_bad_lines(r)};
  t->bad_lines += v[1];
  ps_reader_destroy(&r);
  /* An evaluation set of nothing (an empty file, or every line bad: a wrong file or format)
   * is a failure, as for --train: it reported "auc null" over 0 samples and exited 0. All
   * ranks count together. */
  if (st == PS_OK) st = ps_train_allreduce_u64(t, v, 2);
  if (st == PS_OK && v[0] == 0) {
    char what[64] = "--test";
    if (!t->cfg->test) snprintf(what, sizeof what, "--holdout %" PRId64 " of", t->cfg->holdout);
    if (v[1] == 0) PS_ERROR("%s %s: no lines to evaluate (an empty file?)", what, sp->eval_path);
    else PS_ERROR("%s %s: evaluated 0 samples: %" PRIu64 " of %" PRIu64 " lines were bad", what,
                  sp->eval_path, v[1], v[1]);
    st = PS_ERR_INVALID;
  }
  if (st == PS_OK && t->world > 1) {
    st = ps_eval_allgather(ev, ps_train_allreduce_host, t, t->rank, t->world);
    if (st != PS_OK) ps_train_coll_fail(t, "gathering the evaluation scores", st);
  }
  if (st == PS_OK) st = ps_eval_compute(ev, res);
  ps_eval_destroy(&ev);
  t->t_eval += ps_train_since(t0);
  return st;
}
