/* ps_criteo_bin: Ember's compact binary form of Criteo samples, so that training does not
 * re-parse text. Fixed-size records allow random access (sharding seeks to its rows) and the
 * raw categorical values are kept, so the key mode (open vocabulary or hash buckets) is still
 * chosen at train time.
 *
 * File layout, all little-endian:
 *   header, 64 bytes:
 *     0  char[8]  magic "EMBCRTO1"
 *     8  u32      version (1)
 *     12 u32      record size in bytes (164)
 *     16 u64      row count
 *     24 u32      dense features (13)
 *     28 u32      categorical features (26)
 *     32 u32      dense kind: 1 = f32 already transformed as log(1 + max(x, 0))
 *     36 u32      reserved (0)
 *     40 u64      bad lines skipped when the file was converted (informative)
 *     48 u8[16]   reserved (0)
 *   then `row count` records of 164 bytes:
 *     0  u8       label (0 or 1)
 *     1  u8       reserved (0)
 *     2  u16      dense missing mask (bit i: I(i+1) was empty)
 *     4  u32      categorical missing mask (bit j: C(j+1) was empty)
 *     8  f32[13]  dense, transformed
 *     60 u32[26]  raw categorical values (0 where missing)
 * A reader checks magic, version, sizes, and that the file holds exactly header + rows *
 * record bytes (the row count is written last, so an unfinished file is refused).
 *
 * Version 2 holds any schema's samples, multi-hot bags included: records of variable size (the
 * sample record of ps_sample.h), so random access (sharding) goes through an index.
 *   header, 64 bytes: as version 1 but
 *     8  u32      version (2)
 *     12 u32      record size 0 (variable)
 *     24 u32      dense inputs, 28 u32 categorical features (of the schema that wrote it)
 *     36 u32      flags: bit 0 = some bag may hold other than one value (multi-hot)
 *     48 u64      index offset: where the index starts
 *   records from byte 64, then the index: u64[rows + 1], the file offset of each record and
 *   last the index offset itself. The file is exactly index offset + 8 * (rows + 1) bytes.
 * Version 1 files are still read (as samples of the built-in criteo schema); ps-convert still
 * writes version 1 for the built-in schema, so its files stay byte-identical. */
#ifndef PS_CRITEO_BIN_H
#define PS_CRITEO_BIN_H

#include <stdint.h>

#include "ps_criteo.h"

#define PS_CRITEO_BIN_MAGIC "EMBCRTO1"
#define PS_CRITEO_BIN_VERSION 1u
#define PS_CRITEO_BIN_HEADER 64u
#define PS_CRITEO_BIN_RECORD 164u
#define PS_CRITEO_BIN_VERSION2 2u
#define PS_CRITEO_BIN_MULTI_HOT 1u

typedef struct ps_criteo_bin_header {
  uint32_t version, record_bytes, ndense, ncat, dense_kind;
  uint64_t rows, bad_lines;
  uint32_t flags;      /* version 2 */
  uint64_t index_off;  /* version 2 */
} ps_criteo_bin_header;

/* Record decoding (buf holds PS_CRITEO_BIN_RECORD bytes): checks the label and masks. */
ps_status ps_criteo_bin_decode(const unsigned char *buf, ps_criteo_row *row);
/* Header decoding (buf holds PS_CRITEO_BIN_HEADER bytes), either version: PS_ERR_CORRUPT if
 * the magic matches but something else is wrong, PS_ERR_NOT_FOUND if the magic does not match. */
ps_status ps_criteo_bin_decode_header(const unsigned char *buf, ps_criteo_bin_header *h);

typedef struct ps_criteo_bin_writer ps_criteo_bin_writer;
ps_status ps_criteo_bin_writer_create(const char *path, ps_criteo_bin_writer **out);
ps_status ps_criteo_bin_write(ps_criteo_bin_writer *w, const ps_criteo_row *row);
/* A version 2 writer for samples of ndense inputs and ncat features; write_sample takes one
 * record (ps_sample.h). The index is spooled to a temporary file, so memory stays flat. */
ps_status ps_criteo_bin_writer_create_v2(const char *path, int ndense, int ncat, int multi_hot,
                                         ps_criteo_bin_writer **out);
ps_status ps_criteo_bin_write_sample(ps_criteo_bin_writer *w, const unsigned char *rec);
/* Writes the final header (rows, bad_lines) and, for version 2, the index; closes; *w = NULL.
 * Safe on NULL. */
ps_status ps_criteo_bin_writer_close(ps_criteo_bin_writer **w, uint64_t bad_lines);

#endif
