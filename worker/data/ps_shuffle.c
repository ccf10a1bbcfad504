/* ps_shuffle.c: the seeded shuffle buffer (contract and design in ps_shuffle.h).
 *
 * Invariant: the pool holds exactly the records of the queued batch descriptors (count == the
 * sum of their n), so an empty queue is an empty pool, and reading stops at an epoch's last
 * source batch until its descriptors have drained. A read happens only while count <
 * capacity + the front batch's n, so count never exceeds capacity + 2 * max_batch: the
 * number of slots allocated up front.
 *
 * A draw moves the chosen slot to the end of the live region (a pointer swap) and shrinks it,
 * so a batch's n draws end up in slots [count, count + n), the first draw last; they are
 * copied out in draw order before the next read can overwrite those slots. */
#include "ps_shuffle.h"

#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_sample.h"

typedef struct slot {
  unsigned char *rec; /* [cap] */
  size_t cap;
  int owned; /* rec is the slot's own allocation (a record longer than slot_bytes) */
} slot;

typedef struct desc {
  size_t n;
  int epoch, last;
  uint64_t index, first_line;
} desc;

struct ps_shuffle {
  ps_shuffle_opts o;
  ps_shuffle_source src;
  void *ctx;
  slot *slots;
  size_t nslots, count;
  unsigned char *arena;
  ps_sample_buf out; /* the drawn batch's records ... */
  size_t *out_off;   /* ... record i at out.p + out_off[i] */
  desc *q;
  size_t qhead, qlen, qcap;
  int in_done; /* the current epoch's last source batch has been read */
  int src_end;
  int cur_epoch;
  uint64_t rng;
};

static uint64_t rng_next(uint64_t *s) { return ps_mix64(*s += 0x9e3779b97f4a7c15ull); }

ps_status ps_shuffle_create(const ps_shuffle_opts *o, ps_shuffle_source src, void *ctx,
                            ps_shuffle **out) {
  *out = NULL;
  if (!o || o->capacity == 0 || o->max_batch == 0 || o->slot_bytes < PS_SAMPLE_HEAD || !src)
    return PS_ERR_INVALID;
  ps_shuffle *s = calloc(1, sizeof *s);
  if (!s) return PS_ERR_NOMEM;
  s->o = *o;
  s->src = src;
  s->ctx = ctx;
  s->cur_epoch = -1;
  s->nslots = o->capacity + 2 * o->max_batch;
  s->slots = calloc(s->nslots, sizeof *s->slots);
  s->arena = malloc(s->nslots * o->slot_bytes);
  s->out_off = malloc(o->max_batch * sizeof *s->out_off);
  s->qcap = 16;
  s->q = malloc(s->qcap * sizeof *s->q);
  if (!s->slots || !s->arena || !s->out_off || !s->q ||
      ps_sample_buf_reserve(&s->out, o->max_batch * o->slot_bytes)) {
    ps_shuffle_destroy(&s);
    return PS_ERR_NOMEM;
  }
  for (size_t i = 0; i < s->nslots; i++)
    s->slots[i] = (slot){s->arena + i * o->slot_bytes, o->slot_bytes, 0};
  *out = s;
  return PS_OK;
}

void ps_shuffle_destroy(ps_shuffle **sp) {
  if (!sp || !*sp) return;
  ps_shuffle *s = *sp;
  *sp = NULL;
  if (s->slots)
    for (size_t i = 0; i < s->nslots; i++)
      if (s->slots[i].owned) free(s->slots[i].rec);
  ps_sample_buf_free(&s->out);
  free(s->slots), free(s->arena), free(s->out_off), free(s->q);
  free(s);
}

static ps_status push_desc(ps_shuffle *s, const ps_shuffle_batch *b) {
  if (s->qlen == s->qcap) { /* grow the ring, unrolled into the new array */
    desc *q = malloc(2 * s->qcap * sizeof *q);
    if (!q) return PS_ERR_NOMEM;
    for (size_t i = 0; i < s->qlen; i++) q[i] = s->q[(s->qhead + i) % s->qcap];
    free(s->q);
    s->q = q;
    s->qhead = 0;
    s->qcap *= 2;
  }
  s->q[(s->qhead + s->qlen++) % s->qcap] =
      (desc){b->n, b->epoch, b->last_in_epoch, b->index, b->first_line};
  return PS_OK;
}

/* The record rec into the next free slot. */
static ps_status push_record(ps_shuffle *s, const unsigned char *rec) {
  slot *sl = &s->slots[s->count];
  size_t len = ps_sample_len(rec);
  if (len > sl->cap) {
    unsigned char *p = malloc(len);
    if (!p) return PS_ERR_NOMEM;
    if (sl->owned) free(sl->rec);
    *sl = (slot){p, len, 1};
  }
  memcpy(sl->rec, rec, len);
  s->count++;
  return PS_OK;
}

/* Reads source batches until the front batch can be drawn; *end when nothing is left. */
static ps_status fill(ps_shuffle *s, int *end) {
  for (;;) {
    if (s->qlen == 0) {
      if (s->src_end) {
        *end = 1;
        return PS_OK;
      }
      s->in_done = 0; /* the previous epoch has drained */
    } else if (s->in_done || s->count >= s->o.capacity + s->q[s->qhead].n) {
      return PS_OK;
    }
    ps_shuffle_batch b = {0};
    int e = 0;
    ps_status st = s->src(s->ctx, &b, &e);
    if (st != PS_OK) return st;
    if (e) {
      s->src_end = s->in_done = 1;
      continue;
    }
    if (b.n > s->o.max_batch) return PS_ERR_INTERNAL;
    if (b.epoch != s->cur_epoch) { /* the pool is empty here: a fresh stream per epoch */
      s->cur_epoch = b.epoch;
      s->rng = ps_mix64(s->o.seed ^ ps_mix64(0x5348554646ull + (uint64_t)b.epoch));
    }
    if ((st = push_desc(s, &b)) != PS_OK) return st;
    for (size_t i = 0; i < b.n; i++)
      if ((st = push_record(s, b.data + b.off[i])) != PS_OK) return st;
    if (b.last_in_epoch) s->in_done = 1;
  }
}

ps_status ps_shuffle_next(ps_shuffle *s, ps_shuffle_batch *out, int *end) {
  *end = 0;
  ps_status st = fill(s, end);
  if (st != PS_OK || *end) return st;
  desc d = s->q[s->qhead];
  s->qhead = (s->qhead + 1) % s->qcap;
  s->qlen--;
  /* draw d.n slots into [count - d.n, count), the i-th draw at count - 1 - i */
  size_t bytes = 0;
  for (size_t i = 0; i < d.n; i++) {
    size_t j = (size_t)(((unsigned __int128)rng_next(&s->rng) * s->count) >> 64);
    slot t = s->slots[j];
    s->slots[j] = s->slots[s->count - 1];
    s->slots[--s->count] = t;
    bytes += ps_sample_len(t.rec);
  }
  s->out.len = 0;
  if (ps_sample_buf_reserve(&s->out, bytes)) return PS_ERR_NOMEM;
  for (size_t i = 0; i < d.n; i++) {
    const unsigned char *rec = s->slots[s->count + d.n - 1 - i].rec;
    size_t len = ps_sample_len(rec);
    s->out_off[i] = s->out.len;
    memcpy(s->out.p + s->out.len, rec, len);
    s->out.len += len;
  }
  *out = (ps_shuffle_batch){s->out.p, s->out_off, d.n, d.epoch, d.last, d.index, d.first_line};
  return PS_OK;
}
