/* ps_dense_file: dense.bin, the model's dense state in a checkpoint (written by ps-worker's
 * rank 0 beside the shards' snapshots; read back by --resume, ps-predict and ps-export).
 * docs/CHECKPOINTS.md documents it for readers outside Ember.
 *
 * Layout, native little-endian, no padding:
 *   u64 magic ("EMBERCK2"; "EMBERCK1": an older file without the checksum), u64 step,
 *   u64 nparams, f32 params[nparams] (ps_dlrm.h's flat layout), i64 optimizer kind (-1 before
 *   the first step), i64 optimizer step, u64 nstate, f32 state[nstate], u64 checksum
 * The checksum chains ps_hash64 (XXH3-64) over the five parts before it, each seeded with the
 * hash so far (ps_dense_sum), so any flipped byte is found before a model is built on it.
 *
 * The checkpoint's text file (config) is guarded the same way, by its checksum line
 * (common/ps_kvfile.h). */
#ifndef PS_DENSE_FILE_H
#define PS_DENSE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

#define PS_DENSE_MAGIC_V1 0x454d424552434b31ull /* "EMBERCK1": no checksum */
#define PS_DENSE_MAGIC 0x454d424552434b32ull    /* "EMBERCK2": a checksum at the end */

/* The checksum of a file of header h = {magic, step, nparams}, params, o = {kind, opt step},
 * ns state floats. */
uint64_t ps_dense_sum(const uint64_t h[3], const float *params, const int64_t o[2], uint64_t ns,
                      const float *state);

typedef struct ps_dense_file {
  uint64_t step, nparams, nstate;
  int64_t opt_kind, opt_step;
  float *params, *state;  /* malloc'd (ps_dense_file_free) */
  int checksummed;        /* 0 for an EMBERCK1 file (nothing verified) */
} ps_dense_file;

/* Reads and verifies a whole dense.bin: PS_ERR_NOT_FOUND (no file), PS_ERR_CORRUPT (not a
 * dense.bin, truncated, trailing bytes, checksum mismatch), PS_ERR_NOMEM; err names the file. */
ps_status ps_dense_file_read(const char *path, ps_dense_file *out, ps_error *err);
void ps_dense_file_free(ps_dense_file *d);

#endif
