/* ps_sample: one parsed sample as a self-contained byte record, whatever the schema — the form
 * the reader stages, shuffles and batches, and the record of the binary format's version 2
 * (ps_criteo_bin.h) — plus the tokens of categorical values and their keys.
 *
 * Record, little-endian, no alignment (read with memcpy):
 *   0  u32      total bytes of the record
 *   4  u8       label (0 or 1)
 *   5  u8       layout: 0 = bags, PS_SAMPLE_ONE = one value per feature
 *   6  u8[2]    reserved (0)
 *   8  f32[nd]  dense inputs, transformed
 *      u8[(nd+7)/8]  dense missing bitmap (bit i of byte i/8: input i was empty)
 *      then, layout 0:   per categorical feature in order, u16 count, u64 tokens[count];
 *            layout ONE: u64 tokens[nc], one per feature (no counts: the one-hot fast path,
 *                        Criteo's and every schema without a multi-hot column)
 * A record is variable-sized (bags of 0 .. 65535 values), so shuffling and batching move
 * records, not fixed structs, and the binary file needs an index (ps_criteo_bin.h).
 *
 * Tokens (u64): a value of 8 hex digits is its 32-bit number; a missing one-value column is
 * PS_SAMPLE_TOK_MISSING (bit 32); any other byte string is its 63-bit hash with bit 63 set.
 * The three ranges never meet. Keys (what the parameter server stores), per feature f:
 *   open vocabulary: ps_hash_u64((f << 33) ^ tok, PS_CRITEO_KEY_SEED) — for a hex value v or
 *     a missing value exactly Criteo's key (ps_criteo_key), so old runs' keys are unchanged;
 *   hash buckets N_f: base_f + (tok mod N_f), missing -> base_f, with base_f the sum of the
 *     buckets of the bucketed features before f (f * N when every feature has N buckets:
 *     Criteo's mapping). */
#ifndef PS_SAMPLE_H
#define PS_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ps_criteo.h"
#include "ps_schema.h"
#include "ps_status.h"

#define PS_SAMPLE_TOK_MISSING (1ull << 32)
#define PS_SAMPLE_TOK_STRING (1ull << 63)
#define PS_SAMPLE_TOKEN_SEED 0x454d42544f4bull /* "EMBTOK" */
#define PS_SAMPLE_MAX_BAG 65535u
#define PS_SAMPLE_HEAD 8u
#define PS_SAMPLE_ONE 1u

/* A growable byte buffer of records. */
typedef struct ps_sample_buf {
  unsigned char *p;
  size_t len, cap;
} ps_sample_buf;

/* Room for `more` bytes after len (PS_ERR_NOMEM). */
ps_status ps_sample_buf_reserve(ps_sample_buf *b, size_t more);
void ps_sample_buf_free(ps_sample_buf *b);

static inline uint32_t ps_sample_len(const unsigned char *rec) {
  uint32_t n;
  memcpy(&n, rec, 4);
  return n;
}

/* Token of a categorical value p[0..n) (n > 0). Inline: libember's ember_hash_value. */
static inline uint64_t ps_sample_token(const char *p, size_t n) {
  uint32_t v;
  if (n == 8 && ps_criteo_hex8(p, &v)) return v;
  return ps_hash64(p, n, PS_SAMPLE_TOKEN_SEED) | PS_SAMPLE_TOK_STRING;
}

/* Appends the record of a parsed Criteo row (13 dense, 26 one-value features). */
ps_status ps_sample_from_criteo(const ps_criteo_row *row, ps_sample_buf *b);
/* The Criteo row of a record of that shape; PS_ERR_INVALID for another shape. */
ps_status ps_sample_to_criteo(const unsigned char *rec, ps_criteo_row *row);
/* Checks a record read from a file: its length fits in avail and matches its bags, the label
 * is 0/1. PS_ERR_CORRUPT otherwise. */
ps_status ps_sample_check(const unsigned char *rec, size_t avail, int ndense, int ncat);

/* The key mapping of one run: per feature, its buckets (0: open vocabulary) and base. */
typedef struct ps_sample_keymap {
  int ncat;
  uint64_t *buckets, *base;
} ps_sample_keymap;

/* From the schema's per-column hash_buckets, else the run's hash_buckets. PS_ERR_INVALID when
 * the bucketed key space passes 2^64. */
ps_status ps_sample_keymap_init(ps_sample_keymap *km, const ps_schema *s, uint64_t hash_buckets,
                                ps_error *err);
void ps_sample_keymap_free(ps_sample_keymap *km);

/* The open-vocabulary key of token tok of feature f (also libember's ember_hash_value). */
static inline uint64_t ps_sample_open_key(int f, uint64_t tok) {
  return ps_hash_u64(((uint64_t)f << 33) ^ tok, PS_CRITEO_KEY_SEED);
}

static inline uint64_t ps_sample_key(const ps_sample_keymap *km, int f, uint64_t tok) {
  uint64_t n = km->buckets[f];
  if (n) return km->base[f] + (tok == PS_SAMPLE_TOK_MISSING ? 0 : tok % n);
  return ps_sample_open_key(f, tok);
}

/* Decodes a record into a batch: label into *label, the dense inputs into dense[0..nd), its
 * keys appended at keys[*nkeys..] (room for the record's values is the caller's: at most
 * (len - 8) / 8), and one offset per feature appended at offsets[1..ncat] (offsets[0] is
 * the running count the caller keeps; each new entry is the running count after the bag). */
void ps_sample_decode(const unsigned char *rec, int ndense, const ps_sample_keymap *km,
                      float *label, float *dense, uint64_t *keys, size_t *nkeys,
                      uint32_t *offsets);

#endif
