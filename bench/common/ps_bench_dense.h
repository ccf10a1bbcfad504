/* ps_bench_dense: the pieces ps-dense-bench and ps-gpu-bench share, so that both time the
 * same batch through the same step and accept the same --batch lists.
 *
 * The batch is synthetic, one-hot and Criteo-shaped with every row unique (nrows = B * S, the
 * worst case for pooling and the most upload-heavy one), drawn from a fixed LCG so that a
 * seed gives the same batch in both benchmarks. */
#ifndef PS_BENCH_DENSE_H
#define PS_BENCH_DENSE_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_dlrm.h"
#include "ps_status.h"

enum { PS_BENCH_MAX_BATCHES = 64 };

typedef struct ps_bench_synth {
  int B, S, D, nd; /* batch, sparse features, embedding dim, dense features */
  float *dense, *labels, *rows, *drows;
  int32_t *idx, *off;
} ps_bench_synth;

/* Fills s (zeroed first, so ps_bench_synth_free is safe after a failure). 0, or -1 when out
 * of memory. */
int ps_bench_synth_make(ps_bench_synth *s, int B, int S, int D, int nd, uint64_t seed);
void ps_bench_synth_free(ps_bench_synth *s);

/* Forward, backward and optimizer step of m over s; rowgrads false skips the download of
 * the embedding-row gradients (the dense part alone). */
ps_status ps_bench_synth_step(ps_dlrm *m, ps_bench_synth *s, const ps_dlrm_opt *opt,
                              bool rowgrads);

/* Checks the options both benchmarks take: --opt (a dense optimizer name, with its default
 * hyper-parameters at lr 0.01) into opt, and --batch (comma-separated sizes, each 1 .. 2^20)
 * into bs. Returns the number of batch sizes, or -1 after a one-line reason on stderr that
 * starts with prog (exit 2). */
int ps_bench_dense_args(const char *prog, const char *opt_name, const char *batches,
                        ps_dlrm_opt *opt, int bs[PS_BENCH_MAX_BATCHES]);

#endif
