/* ps_wire_half: IEEE half <-> single conversion for f16 bulk values on the wire
 * (ps_wire_half.h).
 *
 * Design decisions:
 * - Round to nearest even, overflow to inf, subnormals kept (no flush to zero): what F16C's
 *   VCVTPS2PH does with an immediate rounding mode, and what numpy's float16 does.
 * - The hardware path is chosen at run time (__builtin_cpu_supports), compiled with a target
 *   attribute rather than -mf16c, so a Release build needs no -march and still runs on an x86-64
 *   without F16C. Its tail (n not a multiple of 8) goes through the same instruction on a padded
 *   copy, so every value of a hardware call is converted by the hardware.
 * - The portable path is bit-exact with F16C, NaNs included, so a pull's bytes never depend on
 *   the server's CPU; tests/proto/test_half.c checks all 65536 halves and a sweep of floats. */
#include "ps_wire_half.h"

#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define PS_HALF_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ portable */

static uint16_t f32_to_f16_one(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int32_t exp = (int32_t)((x >> 23) & 0xffu);
  if (exp == 0xff) /* inf; NaN quieted, payload truncated to its top 10 bits (as F16C) */
    return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  exp = exp - 127 + 15;
  if (exp >= 0x1f) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (exp <= 0) {                                     /* subnormal or zero */
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++; /* may carry into the smallest normal */
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++; /* may carry into inf: right */
  return (uint16_t)(sign | half);
}

static float f16_to_f32_one(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  if (exp == 0x1f) { /* inf; NaN quieted, payload kept (as F16C) */
    x = sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0);
  } else if (exp == 0) {
    if (!mant) {
      x = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        mant <<= 1;
        e++;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

void ps_wire_f32_to_f16_sw(const float *src, uint16_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = f32_to_f16_one(src[i]);
}

void ps_wire_f16_to_f32_sw(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32_one(src[i]);
}

/* ------------------------------------------------------------------ F16C */

#ifdef PS_HALF_X86
/* CPUID leaf 1 (ECX: AVX bit 28, F16C bit 29, OSXSAVE bit 27) and XGETBV (the OS saves the YMM
 * state: XCR0 bits 1 and 2). Read directly rather than through __builtin_cpu_supports, which
 * clang (the fuzz build's compiler) does not know "f16c" for. */
bool ps_wire_half_hw(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned need = (1u << 27) | (1u << 28) | (1u << 29);
  if ((c & need) != need) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return (lo & 6u) == 6u;
}

__attribute__((target("avx,f16c"))) void ps_wire_f32_to_f16_hw(const float *src, uint16_t *dst,
                                                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n) {
    float in[8] = {0};
    uint16_t out[8];
    memcpy(in, src + i, (n - i) * sizeof *in);
    _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
}

__attribute__((target("avx,f16c"))) void ps_wire_f16_to_f32_hw(const uint16_t *src, float *dst,
                                                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  if (i < n) {
    uint16_t in[8] = {0};
    float out[8];
    memcpy(in, src + i, (n - i) * sizeof *in);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
}
#else
bool ps_wire_half_hw(void) { return false; }
void ps_wire_f32_to_f16_hw(const float *src, uint16_t *dst, size_t n) {
  ps_wire_f32_to_f16_sw(src, dst, n);
}
void ps_wire_f16_to_f32_hw(const uint16_t *src, float *dst, size_t n) {
  ps_wire_f16_to_f32_sw(src, dst, n);
}
#endif

/* ------------------------------------------------------------------ dispatch */

/* -1 unknown, 0 portable, 1 F16C; a racing first call computes the same answer twice. */
static int g_hw = -1;

static bool use_hw(void) {
  int v = __atomic_load_n(&g_hw, __ATOMIC_RELAXED);
  if (v < 0) {
    v = ps_wire_half_hw() ? 1 : 0;
    __atomic_store_n(&g_hw, v, __ATOMIC_RELAXED);
  }
  return v == 1;
}

void ps_wire_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
  if (use_hw()) ps_wire_f32_to_f16_hw(src, dst, n);
  else ps_wire_f32_to_f16_sw(src, dst, n);
}

void ps_wire_f16_to_f32(const uint16_t *src, float *dst, size_t n) {
  if (use_hw()) ps_wire_f16_to_f32_hw(src, dst, n);
  else ps_wire_f16_to_f32_sw(src, dst, n);
}
