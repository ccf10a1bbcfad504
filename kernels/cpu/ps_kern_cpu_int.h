/* ps_kern_cpu_int: what the files of the CPU backend share — its context (thread count and
 * the scratch buffer), the size below which loops stay on one thread, and the CPU-feature
 * flag. Private to kernels/cpu/; users see ps_kernels.h.
 *
 * The backend is one vtable (ps_kern_cpu.c) over kernels kept in files by concept: the
 * feature interaction (ps_kern_cpu_interact.c), embedding-bag pooling
 * (ps_kern_cpu_pool.c) and the DCNv2 cross layer's element-wise part (ps_kern_cpu_cross.c). Helpers called from their loops are static inline here, so moving a
 * kernel to its own file changed no inlining. */
#ifndef PS_KERN_CPU_INT_H
#define PS_KERN_CPU_INT_H

#include <stdint.h>
#include <stdlib.h>

#include "ps_kernels.h"

/* The bf16 GEMM's oneDNN engine, stream and primitives (ps_kern_cpu_bf16.c). */
typedef struct ps_kern_cpu_bf16 ps_kern_cpu_bf16;

/* The backend's state; an instance is used by one thread at a time (like a stream). */
typedef struct cpu_ctx {
  int threads;
  void *scratch;
  size_t scratch_bytes;
  ps_kern_cpu_bf16 *bf16; /* made on the first bf16 GEMM */
} cpu_ctx;

/* Work below this many elements runs on the calling thread. */
#define PAR_MIN 16384

static inline cpu_ctx *CTX(ps_kern *k) { return (cpu_ctx *)k->ctx; }

/* The backend's scratch, at least `bytes`, grown by half again so that a steady-state step
 * allocates nothing; its contents do not survive the next call. NULL if out of memory. */
static inline void *scratch_get(ps_kern *k, size_t bytes) {
  cpu_ctx *c = CTX(k);
  if (bytes > c->scratch_bytes) {
    size_t want = bytes + bytes / 2 + 64;
    void *p = realloc(c->scratch, want);
    if (!p) return NULL;
    c->scratch = p;
    c->scratch_bytes = want;
  }
  return c->scratch;
}

/* 1 if the CPU has AVX-512F (the dim-16 and thin-GEMM kernels), else 0. Settled by
 * ps_kern_cpu_create before any kernel runs, so parallel regions only read it. */
int ps_kern_cpu_have_avx512(void);

/* 1 if the CPU has AVX512_BF16 (bf16 GEMMs), else 0; settled by ps_kern_cpu_create. */
int ps_kern_cpu_have_bf16(void);
/* The vtable's gemm_bf16 slot, and the free of its state (NULL allowed). */
ps_status ps_kern_cpu_gemm_bf16(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha,
                                const float *a, int lda, const float *b, int ldb, float beta,
                                float *c, int ldc);
void ps_kern_cpu_bf16_free(ps_kern_cpu_bf16 *s);

/* The vtable's interaction and pooling slots (contracts at their wrappers in ps_kernels.h). */
ps_status ps_kern_cpu_interact_fwd(ps_kern *k, int batch, int S, int D, const float *bottom,
                                   const float *emb, float *out);
ps_status ps_kern_cpu_interact_bwd(ps_kern *k, int batch, int S, int D, const float *bottom,
                                   const float *emb, const float *dout, float *dbottom,
                                   float *demb);
ps_status ps_kern_cpu_pool_fwd(ps_kern *k, ps_kern_pool mode, int nbags, int D, int nrows,
                               const float *rows, int nnz, const int32_t *idx,
                               const int32_t *offsets, float *out);
ps_status ps_kern_cpu_pool_bwd(ps_kern *k, ps_kern_pool mode, int nbags, int D, int nrows,
                               int nnz, const int32_t *idx, const int32_t *offsets,
                               const float *dout, float *drows);
/* The vtable's cross-network slots. */
ps_status ps_kern_cpu_copy2d(ps_kern *k, int rows, int cols, const float *src, int lds,
                             float *dst, int ldd);
ps_status ps_kern_cpu_cross_fwd(ps_kern *k, int m, int n, const float *x0, const float *z,
                                const float *bias, const float *xl, float *zb, float *y);
ps_status ps_kern_cpu_cross_bwd(ps_kern *k, int m, int n, const float *x0, const float *zb,
                                const float *dy, float resid, float *dz, float *dx0);

#endif
