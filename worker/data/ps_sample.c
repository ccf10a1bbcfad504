/* ps_sample.c: the sample record's codec, tokens and keys (format in ps_sample.h). Fields are
 * copied with memcpy in host order: the record is little-endian on the little-endian hosts Ember
 * builds for (the binary file refuses a big-endian host at compile time, ps_criteo_bin.c). */
#include "ps_sample.h"

#include <stdlib.h>

#include "ps_hash.h"

ps_status ps_sample_buf_reserve(ps_sample_buf *b, size_t more) {
  if (b->cap - b->len >= more) return PS_OK;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < more) cap *= 2;
  unsigned char *p = realloc(b->p, cap);
  if (!p) return PS_ERR_NOMEM;
  b->p = p;
  b->cap = cap;
  return PS_OK;
}

void ps_sample_buf_free(ps_sample_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

#define CRITEO_REC (PS_SAMPLE_HEAD + 4 * PS_CRITEO_NDENSE + 2 + PS_CRITEO_NCAT * 8)

ps_status ps_sample_from_criteo(const ps_criteo_row *row, ps_sample_buf *b) {
  if (ps_sample_buf_reserve(b, CRITEO_REC)) return PS_ERR_NOMEM;
  unsigned char *p = b->p + b->len;
  uint32_t len = CRITEO_REC;
  memcpy(p, &len, 4);
  p[4] = row->label, p[5] = PS_SAMPLE_ONE, p[6] = p[7] = 0;
  memcpy(p + 8, row->dense, 4 * PS_CRITEO_NDENSE);
  p += 8 + 4 * PS_CRITEO_NDENSE;
  p[0] = (unsigned char)row->dense_missing, p[1] = (unsigned char)(row->dense_missing >> 8);
  p += 2;
  uint64_t tok[PS_CRITEO_NCAT];
  for (int f = 0; f < PS_CRITEO_NCAT; f++)
    tok[f] = (row->cat_missing >> f) & 1u ? PS_SAMPLE_TOK_MISSING : row->cat[f];
  memcpy(p, tok, sizeof tok);
  b->len += CRITEO_REC;
  return PS_OK;
}

ps_status ps_sample_to_criteo(const unsigned char *rec, ps_criteo_row *row) {
  if (ps_sample_len(rec) != CRITEO_REC || rec[5] != PS_SAMPLE_ONE) return PS_ERR_INVALID;
  row->label = rec[4];
  memcpy(row->dense, rec + 8, 4 * PS_CRITEO_NDENSE);
  const unsigned char *p = rec + 8 + 4 * PS_CRITEO_NDENSE;
  row->dense_missing = (uint16_t)(p[0] | (p[1] << 8));
  row->cat_missing = 0;
  p += 2;
  for (int f = 0; f < PS_CRITEO_NCAT; f++, p += 8) {
    uint64_t tok;
    memcpy(&tok, p, 8);
    if (tok > PS_SAMPLE_TOK_MISSING) return PS_ERR_INVALID;
    if (tok == PS_SAMPLE_TOK_MISSING) row->cat_missing |= 1u << f;
    row->cat[f] = tok == PS_SAMPLE_TOK_MISSING ? 0 : (uint32_t)tok;
  }
  return PS_OK;
}

ps_status ps_sample_check(const unsigned char *rec, size_t avail, int ndense, int ncat) {
  size_t fixed = PS_SAMPLE_HEAD + 4 * (size_t)ndense + ((size_t)ndense + 7) / 8;
  if (avail < fixed) return PS_ERR_CORRUPT;
  size_t len = ps_sample_len(rec);
  if (len > avail || len < fixed || rec[4] > 1 || rec[5] > PS_SAMPLE_ONE || rec[6] || rec[7])
    return PS_ERR_CORRUPT;
  if (rec[5] == PS_SAMPLE_ONE) return len == fixed + 8 * (size_t)ncat ? PS_OK : PS_ERR_CORRUPT;
  size_t at = fixed;
  for (int f = 0; f < ncat; f++) {
    if (at + 2 > len) return PS_ERR_CORRUPT;
    uint16_t cnt;
    memcpy(&cnt, rec + at, 2);
    at += 2 + 8 * (size_t)cnt;
  }
  return at == len ? PS_OK : PS_ERR_CORRUPT;
}

ps_status ps_sample_keymap_init(ps_sample_keymap *km, const ps_schema *s, uint64_t hash_buckets,
                                ps_error *err) {
  int nc = ps_schema_ncat(s);
  km->ncat = nc;
  km->buckets = calloc((size_t)nc + 1, sizeof *km->buckets);
  km->base = calloc((size_t)nc + 1, sizeof *km->base);
  if (!km->buckets || !km->base) {
    ps_sample_keymap_free(km);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  uint64_t base = 0;
  for (int f = 0; f < nc; f++) {
    const ps_schema_column *c = ps_schema_cat(s, f);
    uint64_t n = c->hash_buckets ? c->hash_buckets : hash_buckets;
    km->buckets[f] = n;
    km->base[f] = base;
    if (n > UINT64_MAX - base) {
      ps_sample_keymap_free(km);
      return ps_error_set(err, PS_ERR_INVALID, "hash buckets: column '%s' passes 2^64 keys",
                          c->name);
    }
    base += n;
  }
  return PS_OK;
}

void ps_sample_keymap_free(ps_sample_keymap *km) {
  free(km->buckets);
  free(km->base);
  km->buckets = km->base = NULL;
}

void ps_sample_decode(const unsigned char *rec, int ndense, const ps_sample_keymap *km,
                      float *label, float *dense, uint64_t *keys, size_t *nkeys,
                      uint32_t *offsets) {
  *label = rec[4] ? 1.0f : 0.0f;
  memcpy(dense, rec + 8, 4 * (size_t)ndense);
  const unsigned char *p = rec + 8 + 4 * (size_t)ndense + ((size_t)ndense + 7) / 8;
  size_t k = *nkeys;
  if (rec[5] == PS_SAMPLE_ONE) {
    for (int f = 0; f < km->ncat; f++, p += 8) {
      uint64_t tok;
      memcpy(&tok, p, 8);
      keys[k++] = ps_sample_key(km, f, tok);
      offsets[f + 1] = (uint32_t)k;
    }
    *nkeys = k;
    return;
  }
  for (int f = 0; f < km->ncat; f++) {
    uint16_t cnt;
    memcpy(&cnt, p, 2);
    p += 2;
    for (unsigned j = 0; j < cnt; j++, p += 8) {
      uint64_t tok;
      memcpy(&tok, p, 8);
      keys[k++] = ps_sample_key(km, f, tok);
    }
    offsets[f + 1] = (uint32_t)k;
  }
  *nkeys = k;
}
