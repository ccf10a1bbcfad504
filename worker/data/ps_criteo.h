/* ps_criteo: the Criteo click-log sample: its text line format, its compact binary record,
 * and how a sample becomes model input (dense transform, categorical keys).
 *
 * Text: one sample per line, TAB-separated, exactly 40 fields: label (0|1), I1..I13 (decimal
 * integers, optional leading '-'), C1..C26 (exactly 8 hex digits, either case). Any of the
 * 39 features may be empty (missing); the label may not. One trailing '\r' (CRLF files) is
 * dropped. Nothing is guessed: too few or too many fields (an extra trailing TAB makes 41
 * fields and is an error), a non-numeric or out-of-int64 integer, a token that is not 8 hex
 * digits, or a label other than 0/1 is a parse error with a reason; the reader adds the file
 * name and line number.
 *
 * Dense transform (as the DLRM reference): d = log(1 + max(x, 0)), missing x = 0, computed in
 * double and rounded to float once, so the text and binary paths give bit-identical floats.
 *
 * Categorical keys (64-bit, for the parameter server), two modes:
 *  - open vocabulary (hash_buckets == 0, the default): key = ps_hash_u64(f << 33 | m << 32 | v,
 *    PS_CRITEO_KEY_SEED) with f the feature index 0..25, v the raw 32-bit token value and m = 1
 *    for a missing value (then v = 0). A missing value therefore has its own key per feature,
 *    distinct from every real token (including 00000000).
 *  - hash buckets N (the DLRM reference's --max-ind-range): key = f * N + (v mod N); a missing
 *    value is v = 0, as the reference does (int("" or 0, 16)), so it shares bucket 0 of its
 *    feature with token 00000000 and every other multiple of N. Keys of feature f lie in
 *    [f*N, (f+1)*N), so one table of 26*N rows or 26 tables of N rows both work.
 *
 * Binary record (see ps_criteo_bin.h): the raw categorical values and a missing mask are
 * kept, so the key mode is still chosen at train time. */
#ifndef PS_CRITEO_H
#define PS_CRITEO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_status.h"

#define PS_CRITEO_NDENSE 13
#define PS_CRITEO_NCAT 26
#define PS_CRITEO_NFIELDS (1 + PS_CRITEO_NDENSE + PS_CRITEO_NCAT)
#define PS_CRITEO_KEY_SEED 0x43524954454full /* "CRITEO" */

/* One parsed sample, before the key mapping. */
typedef struct ps_criteo_row {
  uint8_t label;                      /* 0 or 1 */
  uint16_t dense_missing;             /* bit i: I(i+1) was empty */
  uint32_t cat_missing;               /* bit j: C(j+1) was empty */
  float dense[PS_CRITEO_NDENSE];      /* transformed: log(1 + max(x, 0)), missing -> 0 */
  uint32_t cat[PS_CRITEO_NCAT];       /* raw token values, 0 where missing */
} ps_criteo_row;

/* Parses one line (without its '\n'; a trailing '\r' is accepted). On PS_ERR_PARSE fills err
 * (when not NULL) with a one-line reason ("too few fields (39, want 40)", "I3: not an
 * integer"). */
ps_status ps_criteo_parse_line(const char *line, size_t len, ps_criteo_row *row, ps_error *err);

/* Eight hex digits at p (either case; p[0] most significant) -> *v; 0 if any byte is not a
 * hex digit. Reads exactly 8 bytes. Schemas read any 8-hex-digit value this way (ps_sample.h).
 * Inline, as ps_sample_token over it: libember computes ps-worker's keys of string values
 * (ember_hash_value) without linking worker/data.
 * SWAR on one 64-bit load. Per-byte range tests from "Bit Twiddling Hacks" (hasbetween),
 * valid for bytes < 0x80, which is checked first. */
#define PS_HEX_ONES 0x0101010101010101ull
#define PS_HEX_HIGHS 0x8080808080808080ull
#define PS_HEX_BETWEEN(x, m, n)                                                          \
  (((PS_HEX_ONES * (127 + (n)) - ((x) & PS_HEX_ONES * 127)) & ~(x) &                     \
    (((x) & PS_HEX_ONES * 127) + PS_HEX_ONES * (127 - (m)))) &                           \
   PS_HEX_HIGHS)
static inline int ps_criteo_hex8(const char *p, uint32_t *v) {
  uint64_t x;
  memcpy(&x, p, 8);
  if (x & PS_HEX_HIGHS) return 0;
  uint64_t digits = PS_HEX_BETWEEN(x, 0x2f, 0x3a);          /* '0'..'9' */
  uint64_t lower = x | (PS_HEX_ONES * 0x20);
  uint64_t letters = PS_HEX_BETWEEN(lower, 0x60, 0x67);     /* 'a'..'f' or 'A'..'F' */
  if ((digits | letters) != PS_HEX_HIGHS) return 0;
  uint64_t n = (x & (PS_HEX_ONES * 0x0f)) + (letters >> 7) * 9; /* nibble per byte */
  n = ((n << 4) | (n >> 8)) & 0x00FF00FF00FF00FFull;
  n = ((n << 8) | (n >> 16)) & 0x0000FFFF0000FFFFull;
  n = ((n << 16) | (n >> 32)) & 0xFFFFFFFFull;
  *v = (uint32_t)n;
  return 1;
}

/* A field as an error message shows it: at most 16 bytes then "...", control bytes escaped
 * as \xNN. out gets at most outlen bytes (80 is enough). */
void ps_criteo_show_field(const char *p, size_t n, char *out, size_t outlen);

/* The dense transform, exposed for tests and the data generator. */
float ps_criteo_dense_transform(int64_t x);

/* Key of categorical feature f (0..25) with raw value v, missing or not. */
static inline uint64_t ps_criteo_key(int f, uint32_t v, int missing, uint64_t hash_buckets) {
  if (hash_buckets) return (uint64_t)f * hash_buckets + (missing ? 0 : (uint64_t)v % hash_buckets);
  uint64_t x = ((uint64_t)f << 33) | ((uint64_t)(missing ? 1 : 0) << 32) | (missing ? 0 : v);
  return ps_hash_u64(x, PS_CRITEO_KEY_SEED);
}

#endif
