/* ps_rowset: embedding rows held in memory as ps-export wrote them — keys with float32, f16 or
 * bf16 rows, or fused int8 rows (ps_quant.h) — and found by key, for the readers of an export that serve or
 * score from it (ps-predict --export, ps-server --serve EXPORT).
 *
 * Design decisions:
 * - The rows stay in their exported form: an int8 row is dim + 8 bytes in memory and is
 *   dequantized only when it is asked for (serving memory is the point of int8); an f16 or
 *   bf16 row is 2 dim bytes, widened (exactly) when asked for.
 * - A shard keeps only its own keys (ps_shard_of), dropped before the index is built, so a
 *   serving shard of S holds about 1/S of the rows whatever the export's shard count.
 * - Open addressing over the mixed key (keys of hashed buckets are small integers), row index
 *   + 1 per slot (4 bytes), at most half full: 8-16 bytes a row besides its key and values.
 * - A key with no row is the caller's to fill (the table's initial row lives in the store). */
#ifndef PS_ROWSET_H
#define PS_ROWSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef struct ps_rowset ps_rowset;

/* How a set's rows are held: as an export's values file has them. */
typedef enum { PS_ROWSET_F32, PS_ROWSET_F16, PS_ROWSET_BF16, PS_ROWSET_INT8 } ps_rowset_form;

/* Bytes of one row of dim values in a form: 4 dim, 2 dim (f16, bf16), dim + 8 (int8). */
size_t ps_rowset_form_bytes(ps_rowset_form f, uint32_t dim);
/* Takes keys[n] and values (n rows of ps_rowset_form_bytes(form, dim) bytes: dim floats, dim
 * f16 or bf16 numbers, or a ps_quant int8 row), both malloc'd, whatever the outcome. shards > 1: only the keys of shard `shard` are
 * kept (the arrays shrink). PS_ERR_CORRUPT if a key has two rows, PS_ERR_NOMEM. */
ps_status ps_rowset_create(uint64_t *keys, void *values, uint64_t n, uint32_t dim,
                           ps_rowset_form form,
                           uint32_t shard, uint32_t shards, ps_rowset **out, ps_error *err);
void ps_rowset_destroy(ps_rowset **r);
/* The row of key into out[dim] (dequantized, or widened); false if the set has none (out untouched). */
bool ps_rowset_get(const ps_rowset *r, uint64_t key, float *out);
uint64_t ps_rowset_rows(const ps_rowset *r);
/* Bytes of one row's values as held (ps_rowset_form_bytes). */
size_t ps_rowset_row_bytes(const ps_rowset *r);
/* Bytes held in all: keys, values and index. */
size_t ps_rowset_bytes(const ps_rowset *r);

#endif
