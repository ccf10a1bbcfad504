/* ps_npy: NumPy .npy files written without NumPy, for ps-export, and read back by the readers
 * of an export (ps_export_rows.h: ps-predict --export, ps-server --serve EXPORT). The format (numpy.lib.format,
 * version 1.0): the magic "\x93NUMPY", bytes 1 and 0, a little-endian u16 header length, then
 * an ASCII dict "{'descr': '<f4', 'fortran_order': False, 'shape': (N, D), }" padded with
 * spaces and ending in '\n' so the data starts at a multiple of 64, then the data, C order.
 *
 * Design decision: the header is always 128 bytes, which fits any shape of two dims, so a file
 * whose row count is known only at the end (every row of a table, streamed shard by shard) is
 * written in one pass and its header rewritten in place at close. */
#ifndef PS_NPY_H
#define PS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef struct ps_npy ps_npy;

/* A file of rows: descr is "<f4", "<u8", "<f2", "<u2" (its digit is the item size) or "|u1"
 * (bytes: the fused int8 rows of ps_quant.h); cols 0 = a vector [N], else a matrix [N, cols].
 * PS_ERR_IO with err naming the path. */
ps_status ps_npy_create(const char *path, const char *descr, uint64_t cols, ps_npy **out,
                        ps_error *err);
/* Appends rows (each cols values, or one for a vector) of the descr's item size. */
ps_status ps_npy_write(ps_npy *f, const void *data, uint64_t rows, ps_error *err);
/* Writes the final header and closes; *f = NULL. Frees f even on failure. */
ps_status ps_npy_close(ps_npy **f, ps_error *err);
/* A whole array in one call. */
ps_status ps_npy_save(const char *path, const char *descr, uint64_t rows, uint64_t cols,
                      const void *data, ps_error *err);

/* An array read whole (for ps-predict --export): the file's descr must be `descr` and its
 * shape [N] (want_cols 0) or [N, want_cols]; *rows = N, *data malloc'd (free it; NULL when
 * N = 0). Refused in one line naming the path: PS_ERR_NOT_FOUND (no file), PS_ERR_INVALID
 * (another dtype or shape: the file is not what the caller was told it holds), PS_ERR_CORRUPT
 * (not a .npy, Fortran order, or its size is not the header's shape: truncated or padded),
 * PS_ERR_IO, PS_ERR_NOMEM. Reads headers of any length (NumPy's own writer pads to 64). */
ps_status ps_npy_load(const char *path, const char *descr, uint64_t want_cols, uint64_t *rows,
                      void **data, ps_error *err);

#endif
