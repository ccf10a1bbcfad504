/* ps_export_rows: the embedding table of a ps-export directory, read as its manifest.json says
 * (docs/CHECKPOINTS.md, "ps-export"): the rows' spec, the row type (f32, or int8 from ps-export
 * --quantize int8 in the fused row-wise layout of ps_quant.h) and the rows, held as exported
 * (ps_rowset.h). Read by ps-predict --export (through tools/ps_export_model.h) and by a serving
 * shard, ps-server --serve EXPORT (its own shard's rows only).
 *
 * Design decision: the manifest says what the files hold and every file is checked against it;
 * anything else — a values file of another dtype or width than the row type says (mislabelled),
 * a file shorter or longer than its header's shape (truncated), counts that differ, a row type
 * or int8 layout this build does not know, a manifest that is not an ember-export one — is
 * refused in one line naming the file. An export older than the row_type line is f32. Its own
 * target (ember_export), for jansson, as ember_curve is for ZeroMQ. */
#ifndef PS_EXPORT_ROWS_H
#define PS_EXPORT_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_rowset.h"
#include "ps_status.h"
#include "ps_table.h"

typedef struct ps_export_rows {
  uint64_t step;
  ps_table_spec spec;  /* the rows' fields the manifest has: id, name, dim, init, seed, optimizer */
  char row_type[8];    /* "f32" or "int8" */
  ps_rowset *rows;
} ps_export_rows;

/* Whether dir holds an ember-export manifest.json (to tell an export from a checkpoint). */
bool ps_export_rows_is_export(const char *dir);
/* dir's table 0, the rows of shard `shard` of `shards` (shards 0 or 1: all). PS_ERR_INVALID
 * (not an export, another row type than the files hold, an unknown row type or layout),
 * PS_ERR_NOT_FOUND, PS_ERR_CORRUPT (damaged, truncated), PS_ERR_IO, PS_ERR_NOMEM: one line in
 * err. */
ps_status ps_export_rows_load(const char *dir, uint32_t shard, uint32_t shards,
                              ps_export_rows *out, ps_error *err);
/* The same without the rows (x->rows NULL; the files are not read): the step, the spec and the
 * row type, for a reader whose rows are on serving shards (ps-predict --export --servers). */
ps_status ps_export_rows_spec(const char *dir, ps_export_rows *x, ps_error *err);
void ps_export_rows_free(ps_export_rows *x);
/* dir/rel for a file the manifest names; PS_ERR_CORRUPT for an absolute path or one with "..",
 * which would leave the export. */
ps_status ps_export_rows_path(const char *dir, const char *rel, char *out, size_t cap,
                              ps_error *err);

#endif
