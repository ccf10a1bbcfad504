/* ps_reader_batch.c: from rounds to batches: epochs in sequence (an epoch without any batch
 * of this rank is passed over), one round of look-ahead so a batch knows whether it ends the
 * epoch, the optional shuffle window or shuffle buffer, and the fill of a reusable ps_batch
 * (labels, dense, keys and bag offsets, decoded from the staged sample records of ps_sample.h).
 *
 * The shuffle buffer (ps_shuffle.h) sits between the staged rounds and the decode: it draws
 * the records themselves, whatever the schema, so keys are made once, after the draw.
 *
 * The shuffle permutes the rows of `shuffle_window` consecutive batches, seeded by (seed,
 * epoch, rank, the window's first line), and re-cuts them into the original batch sizes, so
 * every rank's batch count and sizes are the same as without it. Records vary in size, so the
 * window permutes their offsets, not the records. */
#include <stdio.h>
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
  if (r->o.stream || r->o.follow) { /* no look-ahead: a batch goes out once its lines came */
    *last = 0;
    do fetch_raw(r, &r->cur);
    while (r->cur.kind == F_END_EPOCH);
    return r->cur.kind;
  }
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

/* Grows *p (of *cap elements of size el) to at least need elements. */
static int grow(void **p, size_t *cap, size_t need, size_t el) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * el);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

/* The batch of the n records at base + off[i]: labels, dense, keys and bag offsets (and with
 * keep_rows the records themselves, and Criteo rows for a schema of that shape). */
static ps_status fill_batch(ps_reader *r, ps_batch *b, const unsigned char *base,
                            const size_t *off, size_t n) {
  size_t bound = 0, bytes = 0;
  for (size_t i = 0; i < n; i++) bytes += ps_sample_len(base + off[i]);
  bound = bytes / 8; /* each key costs at least 8 bytes of its record */
  if (grow((void **)&b->keys, &b->keys_cap, bound, sizeof *b->keys)) return PS_ERR_NOMEM;
  size_t nd = (size_t)r->nd, nc = (size_t)r->nc, nk = 0;
  b->n = n;
  b->key_offsets[0] = 0;
  for (size_t i = 0; i < n; i++)
    ps_sample_decode(base + off[i], r->nd, &r->km, &b->labels[i], b->dense + i * nd, b->keys,
                     &nk, b->key_offsets + i * nc);
  b->nkeys = nk;
  if (b->rec_off) {
    if (grow((void **)&b->recs, &b->recs_cap, bytes, 1)) return PS_ERR_NOMEM;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
      size_t len = ps_sample_len(base + off[i]);
      memcpy(b->recs + at, base + off[i], len);
      b->rec_off[i] = at;
      at += len;
      if (b->rows && ps_sample_to_criteo(base + off[i], &b->rows[i]) != PS_OK) {
        snprintf(r->err, sizeof r->err, "%s: a sample holds strings or bags, which the Criteo "
                 "layout cannot: read it with the schema that wrote it", r->path);
        return PS_ERR_CORRUPT;
      }
    }
  }
  __atomic_add_fetch(&r->rows_out, n, __ATOMIC_RELAXED);
  return PS_OK;
}

static uint64_t rng_next(uint64_t *s) { return ps_mix64(*s += 0x9e3779b97f4a7c15ull); }

/* Fills b with the next batch of the shuffle window. *end = 1 when nothing is left. */
static ps_status produce_window(ps_reader *r, ps_batch *b, int *end) {
  *end = 0;
  int last = 0;
  if (r->win_pos == r->win_count) { /* refill and shuffle a window */
    r->win_count = r->win_pos = r->win_at = 0;
    r->win_data.len = 0;
    size_t total = 0;
    r->win_last = 0;
    while (r->win_count < (size_t)r->o.shuffle_window) {
      int k = next_rows(r, &last);
      if (k == F_ERROR && r->win_count == 0) return r->cur.st;
      if (k != F_BATCH) break;
      if (ps_sample_buf_reserve(&r->win_data, r->cur.data.len)) return PS_ERR_NOMEM;
      for (size_t i = 0; i < r->cur.n; i++) r->win_off[total + i] = r->win_data.len + r->cur.off[i];
      memcpy(r->win_data.p + r->win_data.len, r->cur.data.p, r->cur.data.len);
      r->win_data.len += r->cur.data.len;
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
      size_t t = r->win_off[i - 1];
      r->win_off[i - 1] = r->win_off[j];
      r->win_off[j] = t;
    }
  }
  size_t n = r->win_sizes[r->win_pos];
  ps_status st = fill_batch(r, b, r->win_data.p, r->win_off + r->win_at, n);
  if (st) return st;
  b->end_line = b->end_byte = 0; /* a window's rows come from several rounds */
  b->epoch = r->win_epoch[r->win_pos];
  b->first_line = r->win_first[r->win_pos];
  r->win_at += n;
  r->win_pos++;
  b->last_in_epoch = r->win_last && r->win_pos == r->win_count;
  b->index = r->batch_idx++;
  if (b->last_in_epoch) r->batch_idx = 0;
  return PS_OK;
}

/* The records of this rank's next batch in file order, with their metadata, in *sb (valid
 * until the next call). *end = 1 when nothing is left. */
static ps_status next_records(ps_reader *r, ps_shuffle_batch *sb, int *end) {
  int last = 0;
  *end = 0;
  int k = next_rows(r, &last);
  if (k == F_END_ALL) {
    *end = 1;
    return PS_OK;
  }
  if (k == F_ERROR) return r->cur.st;
  *sb = (ps_shuffle_batch){r->cur.data.p, r->cur.off, r->cur.n, r->cur.epoch, last,
                           r->batch_idx++, r->cur.first_line};
  if (last) r->batch_idx = 0;
  return PS_OK;
}

static ps_status shuffle_source(void *ctx, ps_shuffle_batch *sb, int *end) {
  return next_records(ctx, sb, end);
}

/* Fills b with the next batch: in file order, through the shuffle window, or drawn from the
 * shuffle buffer (made on the first batch; its slots sized for the schema's one-value record,
 * the Criteo record for the built-in schema). */
ps_status ps_reader_produce(ps_reader *r, ps_batch *b, int *end) {
  if (r->o.shuffle_window > 1) return produce_window(r, b, end);
  ps_shuffle_batch sb;
  ps_status st;
  if (!r->o.shuffle_buffer) {
    st = next_records(r, &sb, end);
  } else {
    if (!r->shuf) {
      size_t nd = (size_t)r->nd;
      ps_shuffle_opts so = {
          .capacity = r->o.shuffle_buffer, .max_batch = r->B,
          .seed = ps_mix64(r->o.seed ^ ps_mix64(0x72616e6b00ull + r->r)),
          .slot_bytes = PS_SAMPLE_HEAD + 4 * nd + (nd + 7) / 8 + 8 * (size_t)r->nc};
      if ((st = ps_shuffle_create(&so, shuffle_source, r, &r->shuf))) return st;
    }
    st = ps_shuffle_next(r->shuf, &sb, end);
  }
  if (st || *end) return st;
  if ((st = fill_batch(r, b, sb.data, sb.off, sb.n))) return st;
  b->end_line = r->o.shuffle_buffer ? 0 : r->cur.end_line; /* in file order: this round's end */
  b->end_byte = r->o.shuffle_buffer ? 0 : r->cur.end_byte;
  b->epoch = sb.epoch;
  b->first_line = sb.first_line;
  b->last_in_epoch = sb.last_in_epoch;
  b->index = sb.index;
  return PS_OK;
}

ps_batch *ps_reader_batch_new(size_t cap, int ndense, int ncat, int keep_rows, int criteo_rows) {
  ps_batch *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  int bad = 0;
  if (keep_rows) {
    b->rec_off = malloc(cap * sizeof *b->rec_off);
    bad = !b->rec_off;
    if (criteo_rows) bad |= !(b->rows = malloc(cap * sizeof(ps_criteo_row)));
  }
  b->cap = cap;
  b->keys_cap = cap * (size_t)ncat;
  b->labels = malloc(cap * sizeof(float));
  b->dense = malloc((cap * (size_t)ndense + 1) * sizeof(float));
  b->keys = malloc(b->keys_cap * sizeof(uint64_t) + 1);
  b->key_offsets = malloc((cap * (size_t)ncat + 1) * sizeof(uint32_t));
  if (bad || !b->labels || !b->dense || !b->keys || !b->key_offsets) {
    ps_reader_batch_free(b);
    return NULL;
  }
  return b;
}

void ps_reader_batch_free(ps_batch *b) {
  if (!b) return;
  free(b->labels), free(b->dense), free(b->keys), free(b->key_offsets), free(b->rows);
  free(b->recs), free(b->rec_off), free(b);
}
