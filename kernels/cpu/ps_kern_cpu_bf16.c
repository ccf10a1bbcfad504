/* ps_kern_cpu_bf16: the CPU backend's bf16 GEMM (ps_kern_gemm with PS_KERN_BF16) through
 * oneDNN's matmul primitive: bf16 inputs, FP32 accumulation and output.
 *
 * Design decisions:
 * - oneDNN (Debian's libdnnl 2.6) rather than OpenBLAS (0.3.21 has no sbgemm) or a kernel of
 *   our own: on this Xeon its bf16 matmul runs on AMX tiles, which a hand-written
 *   AVX512_BF16 (vdpbf16ps) kernel does not reach; measured in bench/RESULTS-dense.md
 *   (bench/dense/ps_gemm_bench.c times all three on ps-worker's shapes).
 * - The inputs arrive as FP32 (the model keeps FP32 master weights and FP32 activations, as
 *   torch.autocast does) and are rounded here, once per call, to bf16 with round-to-nearest-
 *   even into the backend's scratch; a transposed operand is transposed in the same pass, so
 *   the primitive always sees plain row-major [m, kk] x [kk, n] and one fast path.
 * - A primitive is created once per shape (m, n, kk, ldc, alpha, beta) and kept in a small
 *   cache: a model has a handful of shapes, and creating one costs far more than a small GEMM.
 * - oneDNN's OpenMP runtime is the same libgomp pool as OpenBLAS's and ours; the backend's
 *   thread count is set on the calling thread before each execution. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>

#include "ps_kern_cpu_int.h"

#define BF16_CACHE 64

typedef struct bf16_prim {
  int m, n, kk, ldc;
  float alpha, beta;
  dnnl_primitive_t prim;
  dnnl_memory_t src, wei, dst;
} bf16_prim;

struct ps_kern_cpu_bf16 {
  dnnl_engine_t eng;
  dnnl_stream_t strm;
  bf16_prim cache[BF16_CACHE];
  int ncache;
};

/* EMBER_CPU_NO_BF16=1 makes a CPU with the instructions behave as one without (to test the
 * FP32 fallback and its message, and to compare on one machine). */
int ps_kern_cpu_have_bf16(void) {
  static int v = -1;
  if (v < 0) {
    __builtin_cpu_init();
    const char *off = getenv("EMBER_CPU_NO_BF16");
    v = __builtin_cpu_supports("avx512bf16") && !(off && *off && strcmp(off, "0") != 0) ? 1 : 0;
  }
  return v;
}

/* ---- FP32 -> bf16 ---- */

/* Round to nearest even, NaN kept a (quiet) NaN: what VCVTNEPS2BF16 does for normal numbers. */
static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__attribute__((target("avx512f,avx512bf16"))) static void cvt_row(const float *src, uint16_t *dst,
                                                                  int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + j));
    _mm256_storeu_si256((__m256i *)(dst + j), (__m256i)v);
  }
  for (; j < n; j++) dst[j] = f32_to_bf16(src[j]);
}

/* dst [rows, cols] row-major bf16 = op(src): src is [rows, cols] with leading dimension ld, or
 * with trans [cols, rows] read transposed. Transposes go in 32 x 32 blocks so that both sides
 * stay in cache lines. */
static void to_bf16(int T, bool trans, int rows, int cols, const float *src, int ld,
                    uint16_t *dst) {
  if (!trans) {
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)rows * cols >= PAR_MIN)
    for (int i = 0; i < rows; i++) cvt_row(src + (size_t)i * ld, dst + (size_t)i * cols, cols);
    return;
  }
  int rb = (rows + 31) / 32;
#pragma omp parallel for schedule(static) num_threads(T) if ((size_t)rows * cols >= PAR_MIN)
  for (int bi = 0; bi < rb; bi++) {
    int i0 = bi * 32, i1 = i0 + 32 < rows ? i0 + 32 : rows;
    for (int j0 = 0; j0 < cols; j0 += 32) {
      int j1 = j0 + 32 < cols ? j0 + 32 : cols;
      for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++)
          dst[(size_t)i * cols + j] = f32_to_bf16(src[(size_t)j * ld + i]);
    }
  }
}

/* ---- primitives ---- */

#define DN(call)                                     \
  do {                                               \
    if ((call) != dnnl_success) goto fail;           \
  } while (0)

static ps_status prim_make(ps_kern_cpu_bf16 *s, bf16_prim *p) {
  dnnl_memory_desc_t a_md, b_md, c_md;
  dnnl_dims_t ad = {p->m, p->kk}, as = {p->kk, 1};
  dnnl_dims_t bd = {p->kk, p->n}, bs = {p->n, 1};
  dnnl_dims_t cd = {p->m, p->n}, cs = {p->ldc, 1};
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  DN(dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dnnl_bf16, as));
  DN(dnnl_memory_desc_init_by_strides(&b_md, 2, bd, dnnl_bf16, bs));
  DN(dnnl_memory_desc_init_by_strides(&c_md, 2, cd, dnnl_f32, cs));
  dnnl_matmul_desc_t md;
  DN(dnnl_matmul_desc_init(&md, &a_md, &b_md, NULL, &c_md));
  DN(dnnl_primitive_attr_create(&attr));
  if (p->alpha != 1.0f) DN(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha));
  if (p->beta != 0.0f) {
    DN(dnnl_post_ops_create(&po));
    DN(dnnl_post_ops_append_sum(po, p->beta));
    DN(dnnl_primitive_attr_set_post_ops(attr, po));
  }
  DN(dnnl_primitive_desc_create(&pd, &md, attr, s->eng, NULL));
  DN(dnnl_primitive_create(&p->prim, pd));
  DN(dnnl_memory_create(&p->src, &a_md, s->eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&p->wei, &b_md, s->eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&p->dst, &c_md, s->eng, DNNL_MEMORY_NONE));
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  if (po) dnnl_post_ops_destroy(po);
  return PS_OK;
fail:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (po) dnnl_post_ops_destroy(po);
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->src) dnnl_memory_destroy(p->src);
  if (p->wei) dnnl_memory_destroy(p->wei);
  memset(p, 0, sizeof(*p));
  return PS_ERR_INTERNAL;
}

static void prim_free(bf16_prim *p) {
  dnnl_primitive_destroy(p->prim);
  dnnl_memory_destroy(p->src);
  dnnl_memory_destroy(p->wei);
  dnnl_memory_destroy(p->dst);
}

static ps_status prim_get(ps_kern_cpu_bf16 *s, int m, int n, int kk, int ldc, float alpha,
                          float beta, bf16_prim **out) {
  for (int i = 0; i < s->ncache; i++) {
    bf16_prim *p = &s->cache[i];
    if (p->m == m && p->n == n && p->kk == kk && p->ldc == ldc && p->alpha == alpha &&
        p->beta == beta) {
      *out = p;
      return PS_OK;
    }
  }
  if (s->ncache == BF16_CACHE) { /* a model has a handful of shapes; evict the oldest */
    prim_free(&s->cache[0]);
    memmove(&s->cache[0], &s->cache[1], (BF16_CACHE - 1) * sizeof(bf16_prim));
    s->ncache--;
  }
  bf16_prim *p = &s->cache[s->ncache];
  *p = (bf16_prim){.m = m, .n = n, .kk = kk, .ldc = ldc, .alpha = alpha, .beta = beta};
  ps_status st = prim_make(s, p);
  if (st != PS_OK) return st;
  s->ncache++;
  *out = p;
  return PS_OK;
}

static ps_status state_get(ps_kern *k, ps_kern_cpu_bf16 **out) {
  cpu_ctx *c = CTX(k);
  if (!c->bf16) {
    ps_kern_cpu_bf16 *s = calloc(1, sizeof(*s));
    if (!s) return PS_ERR_NOMEM;
    if (dnnl_engine_create(&s->eng, dnnl_cpu, 0) != dnnl_success) {
      free(s);
      return PS_ERR_INTERNAL;
    }
    if (dnnl_stream_create(&s->strm, s->eng, dnnl_stream_default_flags) != dnnl_success) {
      dnnl_engine_destroy(s->eng);
      free(s);
      return PS_ERR_INTERNAL;
    }
    c->bf16 = s;
  }
  *out = c->bf16;
  return PS_OK;
}

void ps_kern_cpu_bf16_free(ps_kern_cpu_bf16 *s) {
  if (!s) return;
  for (int i = 0; i < s->ncache; i++) prim_free(&s->cache[i]);
  dnnl_stream_destroy(s->strm);
  dnnl_engine_destroy(s->eng);
  free(s);
}

ps_status ps_kern_cpu_gemm_bf16(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha,
                                const float *a, int lda, const float *b, int ldb, float beta,
                                float *c, int ldc) {
  if (!ps_kern_cpu_have_bf16()) return PS_ERR_UNSUPPORTED;
  if (kk == 0) { /* oneDNN refuses an empty reduction; C = beta * C as sgemm does */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
    return PS_OK;
  }
  ps_kern_cpu_bf16 *s = NULL;
  ps_status st = state_get(k, &s);
  if (st != PS_OK) return st;
  bf16_prim *p = NULL;
  if ((st = prim_get(s, m, n, kk, ldc, alpha, beta, &p)) != PS_OK) return st;
  size_t an = (size_t)m * kk, bn = (size_t)kk * n;
  uint16_t *a16 = scratch_get(k, (an + bn + 32) * sizeof(uint16_t));
  if (!a16) return PS_ERR_NOMEM;
  uint16_t *b16 = a16 + ((an + 31) & ~(size_t)31); /* 64-byte aligned within the scratch */
  int T = CTX(k)->threads;
  to_bf16(T, ta, m, kk, a, lda, a16);
  to_bf16(T, tb, kk, n, b, ldb, b16);
  if (dnnl_memory_set_data_handle(p->src, a16) != dnnl_success ||
      dnnl_memory_set_data_handle(p->wei, b16) != dnnl_success ||
      dnnl_memory_set_data_handle(p->dst, c) != dnnl_success)
    return PS_ERR_INTERNAL;
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei}, {DNNL_ARG_DST, p->dst}};
  omp_set_num_threads(T);
  if (dnnl_primitive_execute(p->prim, s->strm, 3, args) != dnnl_success ||
      dnnl_stream_wait(s->strm) != dnnl_success)
    return PS_ERR_INTERNAL;
  return PS_OK;
}
