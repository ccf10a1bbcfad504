/* ps_shuffle.c: the seeded shuffle buffer (contract and design in ps_shuffle.h).
 *
 * Invariant: the pool holds exactly the samples of the queued batch descriptors (count == the
 * sum of their n), so an empty queue is an empty pool, and reading stops at an epoch's last
 * source batch until its descriptors have drained. A read happens only while count <
 * capacity + the front batch's n, so count never exceeds capacity + 2 * max_batch: the
 * number of slots allocated up front.
 *
 * A draw moves the chosen slot to the end of the live region (a pointer swap) and shrinks it,
 * so a batch's n draws end up in slots [count, count + n), the first draw last. */
#include "ps_shuffle.h"

#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"

typedef struct slot {
  float label;
  uint32_t nkeys, kcap;
  int multi;      /* lens is meaningful: the bags' sizes */
  int owned;      /* keys is this slot's own allocation (grown past the arena's nbags) */
  float *dense;   /* [ndense] */
  uint64_t *keys; /* [kcap] */
  uint32_t *lens; /* [nbags] bag sizes, NULL until a multi-hot sample is seen */
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
  float *dense_arena;
  uint64_t *key_arena;
  uint32_t *lens_arena;
  size_t extra_bytes; /* keys owned by slots */
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
  if (!o || o->capacity == 0 || o->max_batch == 0 || o->nbags == 0 || !src)
    return PS_ERR_INVALID;
  ps_shuffle *s = calloc(1, sizeof *s);
  if (!s) return PS_ERR_NOMEM;
  s->o = *o;
  s->src = src;
  s->ctx = ctx;
  s->cur_epoch = -1;
  s->nslots = o->capacity + 2 * o->max_batch;
  s->slots = calloc(s->nslots, sizeof *s->slots);
  s->dense_arena = malloc((s->nslots * o->ndense + 1) * sizeof(float));
  s->key_arena = malloc(s->nslots * o->nbags * sizeof(uint64_t));
  s->qcap = 16;
  s->q = malloc(s->qcap * sizeof *s->q);
  if (!s->slots || !s->dense_arena || !s->key_arena || !s->q) {
    ps_shuffle_destroy(&s);
    return PS_ERR_NOMEM;
  }
  for (size_t i = 0; i < s->nslots; i++) {
    s->slots[i].dense = s->dense_arena + i * o->ndense;
    s->slots[i].keys = s->key_arena + i * o->nbags;
    s->slots[i].kcap = (uint32_t)o->nbags;
  }
  *out = s;
  return PS_OK;
}

void ps_shuffle_destroy(ps_shuffle **sp) {
  if (!sp || !*sp) return;
  ps_shuffle *s = *sp;
  *sp = NULL;
  if (s->slots)
    for (size_t i = 0; i < s->nslots; i++)
      if (s->slots[i].owned) free(s->slots[i].keys);
  free(s->slots), free(s->dense_arena), free(s->key_arena), free(s->lens_arena), free(s->q);
  free(s);
}

size_t ps_shuffle_bytes(const ps_shuffle *s) {
  size_t b = s->nslots * (sizeof(slot) + s->o.ndense * sizeof(float) + s->o.nbags * sizeof(uint64_t));
  if (s->lens_arena) b += s->nslots * s->o.nbags * sizeof(uint32_t);
  return b + s->extra_bytes;
}

static ps_status push_desc(ps_shuffle *s, const ps_batch *b) {
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

/* Sample i of b into the next free slot. */
static ps_status push_sample(ps_shuffle *s, const ps_batch *b, size_t i) {
  size_t nb = s->o.nbags;
  slot *sl = &s->slots[s->count];
  const uint64_t *keys = b->keys + i * nb;
  size_t k = nb;
  const uint32_t *off = b->key_offsets ? b->key_offsets + i * nb : NULL;
  if (off) {
    keys = b->keys + off[0];
    k = off[nb] - off[0];
  }
  if (k > sl->kcap) {
    uint64_t *nk = malloc(k * sizeof *nk);
    if (!nk) return PS_ERR_NOMEM;
    if (sl->owned) {
      free(sl->keys);
      s->extra_bytes -= sl->kcap * sizeof(uint64_t);
    }
    sl->keys = nk;
    sl->kcap = (uint32_t)k;
    sl->owned = 1;
    s->extra_bytes += k * sizeof(uint64_t);
  }
  sl->label = b->labels[i];
  memcpy(sl->dense, b->dense + i * s->o.ndense, s->o.ndense * sizeof(float));
  memcpy(sl->keys, keys, k * sizeof *keys);
  sl->nkeys = (uint32_t)k;
  sl->multi = off != NULL;
  if (off) {
    if (!s->lens_arena) { /* first multi-hot sample: bag sizes for every slot */
      if (!(s->lens_arena = malloc(s->nslots * nb * sizeof(uint32_t)))) return PS_ERR_NOMEM;
      for (size_t j = 0; j < s->nslots; j++) s->slots[j].lens = s->lens_arena + j * nb;
    }
    for (size_t f = 0; f < nb; f++) sl->lens[f] = off[f + 1] - off[f];
  }
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
    ps_batch *b = NULL;
    int e = 0;
    ps_status st = s->src(s->ctx, &b, &e);
    if (st != PS_OK) return st;
    if (e || !b) {
      s->src_end = s->in_done = 1;
      continue;
    }
    if (b->n > s->o.max_batch) return PS_ERR_INTERNAL;
    if (b->epoch != s->cur_epoch) { /* the pool is empty here: a fresh stream per epoch */
      s->cur_epoch = b->epoch;
      s->rng = ps_mix64(s->o.seed ^ ps_mix64(0x5348554646ull + (uint64_t)b->epoch));
    }
    if ((st = push_desc(s, b)) != PS_OK) return st;
    for (size_t i = 0; i < b->n; i++)
      if ((st = push_sample(s, b, i)) != PS_OK) return st;
    if (b->last_in_epoch) s->in_done = 1;
  }
}

ps_status ps_shuffle_next(ps_shuffle *s, ps_batch *out, int *end) {
  *end = 0;
  ps_status st = fill(s, end);
  if (st != PS_OK || *end) return st;
  desc d = s->q[s->qhead];
  s->qhead = (s->qhead + 1) % s->qcap;
  s->qlen--;
  /* draw d.n slots into [count - d.n, count), the i-th draw at count - 1 - i */
  size_t nk = 0;
  int multi = 0;
  for (size_t i = 0; i < d.n; i++) {
    size_t j = (size_t)(((unsigned __int128)rng_next(&s->rng) * s->count) >> 64);
    slot t = s->slots[j];
    s->slots[j] = s->slots[s->count - 1];
    s->slots[--s->count] = t;
    nk += t.nkeys;
    multi |= t.multi;
  }
  size_t nb = s->o.nbags, nd = s->o.ndense;
  if (multi && (!s->o.reserve_keys || s->o.reserve_keys(s->ctx, out, nk) != 0))
    return s->o.reserve_keys ? PS_ERR_NOMEM : PS_ERR_INTERNAL;
  if (!multi) out->key_offsets = NULL;
  size_t kpos = 0;
  for (size_t i = 0; i < d.n; i++) {
    const slot *sl = &s->slots[s->count + d.n - 1 - i];
    out->labels[i] = sl->label;
    memcpy(out->dense + i * nd, sl->dense, nd * sizeof(float));
    memcpy(out->keys + kpos, sl->keys, sl->nkeys * sizeof(uint64_t));
    if (multi)
      for (size_t f = 0; f < nb; f++) {
        out->key_offsets[i * nb + f] = (uint32_t)kpos;
        kpos += sl->multi ? sl->lens[f] : 1;
      }
    else
      kpos += sl->nkeys;
  }
  if (multi) out->key_offsets[d.n * nb] = (uint32_t)kpos;
  out->n = d.n;
  out->nkeys = nk;
  out->epoch = d.epoch;
  out->index = d.index;
  out->last_in_epoch = d.last;
  out->first_line = d.first_line;
  return PS_OK;
}
