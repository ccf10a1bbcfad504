/* ps_reader_batch.c: from rounds to batches: epochs in sequence (an epoch without any batch
 * of this rank is passed over), one round of look-ahead so a batch knows whether it ends the
 * epoch, the optional shuffle window, and the fill of a reusable ps_batch (labels, dense, keys).
 *
 * The shuffle permutes the rows of `shuffle_window` consecutive batches, seeded by (seed,
 * epoch, rank, the window's first line), and re-cuts them into the original batch sizes, so
 * every rank's batch count and sizes are the same as without it. */
#include <stdlib.h>
#include <string.h>

#include "ps_reader_int.h"
#include "ps_shuffle.h"

/* This rank's next round, an end-of-epoch mark, or the end of all epochs. */
static void fetch_raw(ps_reader *r, staged *s) {
  s->st = PS_OK;
  s->n = 0;
  if (r->all_done) {
    s->kind = F_END_ALL;
    return;
  }
  if (r->epoch_done) { /* the previous round ended the epoch */
    if (r->lines_epoch < 0) {
      int64_t n = r->fmt == PS_INPUT_BIN ? r->lines_epoch
                                         : (int64_t)(r->line_no - (r->o.row_begin < r->line_no
                                                                       ? r->o.row_begin
                                                                       : r->line_no));
      __atomic_store_n(&r->lines_epoch, n, __ATOMIC_RELAXED);
    }
    s->kind = F_END_EPOCH;
    s->epoch = r->epoch;
    r->epoch_started = 0;
    r->epoch_done = 0;
    if (++r->epoch >= r->o.epochs) r->all_done = 1;
    return;
  }
  if (!r->epoch_started) {
    if ((s->st = ps_reader_start_epoch(r))) {
      s->kind = F_ERROR;
      return;
    }
  }
  s->epoch = r->epoch;
  s->st = r->fmt == PS_INPUT_BIN ? ps_reader_fetch_bin(r, s) : ps_reader_fetch_text(r, s);
  if (s->st) {
    s->kind = F_ERROR;
    r->all_done = 1;
    return;
  }
  if (s->kind == F_END_EPOCH) { /* no batch in this round: close the epoch now */
    r->epoch_done = 1;
    fetch_raw(r, s);
  }
}

/* The next batch's rows in r->cur with one round of look-ahead. Returns F_BATCH (sets
 * *last), F_END_ALL or F_ERROR. Epochs without any batch are passed over. */
static int next_rows(ps_reader *r, int *last) {
  if (!r->la_valid) {
    fetch_raw(r, &r->la);
    r->la_valid = 1;
  }
  for (;;) {
    staged t = r->cur;
    r->cur = r->la;
    r->la = t;
    if (r->cur.kind == F_END_EPOCH) {
      fetch_raw(r, &r->la);
      continue;
    }
    if (r->cur.kind != F_BATCH) return r->cur.kind;
    fetch_raw(r, &r->la);
    *last = r->la.kind == F_END_EPOCH || r->la.kind == F_END_ALL;
    return F_BATCH;
  }
}

static void fill_batch(ps_reader *r, ps_batch *b, const ps_criteo_row *rows, size_t n) {
  b->n = n;
  b->nkeys = n * PS_CRITEO_NCAT;
  b->key_offsets = NULL;
  if (b->rows) memcpy(b->rows, rows, n * sizeof *rows);
  for (size_t i = 0; i < n; i++) {
    b->labels[i] = rows[i].label ? 1.0f : 0.0f;
    memcpy(b->dense + i * PS_CRITEO_NDENSE, rows[i].dense, sizeof rows[i].dense);
    ps_criteo_row_keys(&rows[i], r->o.hash_buckets, b->keys + i * PS_CRITEO_NCAT);
  }
  __atomic_add_fetch(&r->rows_out, n, __ATOMIC_RELAXED);
}

static uint64_t rng_next(uint64_t *s) { return ps_mix64(*s += 0x9e3779b97f4a7c15ull); }

/* Fills b with the next batch in file order (or shuffle window). *end = 1 when nothing is left. */
static ps_status produce_plain(ps_reader *r, ps_batch *b, int *end) {
  *end = 0;
  int last = 0;
  if (r->o.shuffle_window <= 1) {
    int k = next_rows(r, &last);
    if (k == F_END_ALL) {
      *end = 1;
      return PS_OK;
    }
    if (k == F_ERROR) return r->cur.st;
    fill_batch(r, b, r->cur.rows, r->cur.n);
    b->epoch = r->cur.epoch;
    b->first_line = r->cur.first_line;
    b->last_in_epoch = last;
    b->index = r->batch_idx++;
    if (last) r->batch_idx = 0;
    return PS_OK;
  }
  if (r->win_pos == r->win_count) { /* refill and shuffle a window */
    r->win_count = r->win_pos = r->win_off = 0;
    size_t total = 0;
    r->win_last = 0;
    while (r->win_count < (size_t)r->o.shuffle_window) {
      int k = next_rows(r, &last);
      if (k == F_ERROR && r->win_count == 0) return r->cur.st;
      if (k != F_BATCH) break;
      memcpy(r->win_rows + total, r->cur.rows, r->cur.n * sizeof(ps_criteo_row));
      r->win_sizes[r->win_count] = r->cur.n;
      r->win_epoch[r->win_count] = r->cur.epoch;
      r->win_first[r->win_count] = r->cur.first_line;
      r->win_count++;
      total += r->cur.n;
      if (last) {
        r->win_last = 1;
        break;
      }
    }
    if (r->win_count == 0) {
      *end = 1;
      return PS_OK;
    }
    uint64_t s = ps_mix64(r->o.seed ^ ps_mix64(((uint64_t)r->win_epoch[0] << 40) ^
                                               ((uint64_t)r->r << 20) ^ r->win_first[0]));
    for (size_t i = total; i > 1; i--) {
      size_t j = (size_t)(((unsigned __int128)rng_next(&s) * i) >> 64);
      ps_criteo_row t = r->win_rows[i - 1];
      r->win_rows[i - 1] = r->win_rows[j];
      r->win_rows[j] = t;
    }
  }
  size_t n = r->win_sizes[r->win_pos];
  fill_batch(r, b, r->win_rows + r->win_off, n);
  b->epoch = r->win_epoch[r->win_pos];
  b->first_line = r->win_first[r->win_pos];
  r->win_off += n;
  r->win_pos++;
  b->last_in_epoch = r->win_last && r->win_pos == r->win_count;
  b->index = r->batch_idx++;
  if (b->last_in_epoch) r->batch_idx = 0;
  return PS_OK;
}

static ps_status shuffle_source(void *ctx, ps_batch **b, int *end) {
  ps_reader *r = ctx;
  *b = r->shuf_raw;
  return produce_plain(r, r->shuf_raw, end);
}

/* Fills b with the next batch, through the shuffle buffer when there is one. */
ps_status ps_reader_produce(ps_reader *r, ps_batch *b, int *end) {
  if (!r->o.shuffle_buffer) return produce_plain(r, b, end);
  if (!r->shuf) {
    ps_shuffle_opts so = {.capacity = r->o.shuffle_buffer, .max_batch = r->B,
                          .seed = ps_mix64(r->o.seed ^ ps_mix64(0x72616e6b00ull + r->r)),
                          .ndense = PS_CRITEO_NDENSE, .nbags = PS_CRITEO_NCAT};
    if (!(r->shuf_raw = ps_reader_batch_new(r->B, 0)) ||
        ps_shuffle_create(&so, shuffle_source, r, &r->shuf) != PS_OK)
      return PS_ERR_NOMEM;
  }
  return ps_shuffle_next(r->shuf, b, end);
}

ps_batch *ps_reader_batch_new(size_t cap, int keep_rows) {
  ps_batch *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  if (keep_rows && !(b->rows = malloc(cap * sizeof(ps_criteo_row)))) {
    free(b);
    return NULL;
  }
  b->cap = cap;
  b->labels = malloc(cap * sizeof(float));
  b->dense = malloc(cap * PS_CRITEO_NDENSE * sizeof(float));
  b->keys = malloc(cap * PS_CRITEO_NCAT * sizeof(uint64_t));
  if (!b->labels || !b->dense || !b->keys) {
    ps_reader_batch_free(b);
    return NULL;
  }
  return b;
}

void ps_reader_batch_free(ps_batch *b) {
  if (!b) return;
  free(b->labels), free(b->dense), free(b->keys), free(b->rows), free(b);
}