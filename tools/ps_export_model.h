/* ps_export_model: a ps-export directory opened for scoring (ps-predict --export): its
 * manifest.json, the schema it names, the dense parameters (dense/params.npy) and the embedding
 * table's rows (embeddings/table_ID.keys.npy and the values file), held in memory as exported:
 * float32 rows, or int8 rows (ps-export --quantize int8, ps_quant.h) kept as dim + 8 bytes each
 * and dequantized only into the rows a batch pulls — serving memory is the point of int8.
 *
 * Design decisions:
 * - The table (its spec, row type and rows) is read by common/ps_export_rows.h, which checks
 *   every file against the manifest and refuses anything else in one line; this module adds
 *   the model: its shape, the schema (whose signature must be the manifest's) and
 *   dense/params.npy.
 * - A key with no exported row gets the table's initial row (ps_store_init_row from the
 *   manifest's init spec), as ps-predict from the checkpoint gives it; so an f32 export scores
 *   exactly as its checkpoint does. */
#ifndef PS_EXPORT_MODEL_H
#define PS_EXPORT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ps_dlrm.h"
#include "ps_schema.h"
#include "ps_status.h"
#include "ps_table.h"

typedef struct ps_export_model ps_export_model;

/* dir: an export's directory (holding manifest.json). schema: NULL (the export's own) or
 * "criteo"/a JSON file of the same signature. PS_ERR_INVALID (not an export, another schema, a
 * file that is not what the manifest says, an unknown row type or interaction),
 * PS_ERR_NOT_FOUND, PS_ERR_CORRUPT (a damaged or truncated file), PS_ERR_IO, PS_ERR_NOMEM: one
 * line in err. */
ps_status ps_export_model_open(const char *dir, const char *schema, ps_export_model **out,
                               ps_error *err);
/* The same without the rows (ps-predict --export --servers: they are on serving shards): the
 * manifest, schema and dense/params.npy only, so a scoring host needs no embeddings/ files;
 * ps_export_model_pull is PS_ERR_INVALID, ps_export_model_rows 0. */
ps_status ps_export_model_open_model(const char *dir, const char *schema, ps_export_model **out,
                                     ps_error *err);
void ps_export_model_close(ps_export_model **x);

const char *ps_export_model_dir(const ps_export_model *x);
uint64_t ps_export_model_step(const ps_export_model *x);
const ps_schema *ps_export_model_schema(const ps_export_model *x);
const char *ps_export_model_schema_file(const ps_export_model *x); /* "criteo" or the file */
uint64_t ps_export_model_hash_buckets(const ps_export_model *x);
const ps_table_spec *ps_export_model_table(const ps_export_model *x);
/* "f32" or "int8"; the rows held and the bytes each takes in memory (values only). */
const char *ps_export_model_row_type(const ps_export_model *x);
uint64_t ps_export_model_rows(const ps_export_model *x);
size_t ps_export_model_row_bytes(const ps_export_model *x);
const float *ps_export_model_params(const ps_export_model *x, size_t *n);
/* The model's shape for batches of max_batch; the strings point into x. */
void ps_export_model_config(const ps_export_model *x, int max_batch, ps_dlrm_config *cfg);
/* out[i*dim ..] = the row of keys[i] (int8 rows dequantized; the initial row for a key with no
 * exported row). Read-only: safe from several threads. */
ps_status ps_export_model_pull(const ps_export_model *x, const uint64_t *keys, size_t n,
                               float *out);

#endif
