/* f16 conversion (proto/ps_wire_half.c): the portable path is bit-exact with F16C on all 65536
 * halves and on a sweep of floats (every sign/exponent/top-7-mantissa pattern with the low bits
 * at and around every rounding boundary, subnormals, inf, NaN payloads, overflow, plus random
 * bits), tails of every length agree, and both paths give hand-computed IEEE results (round to
 * nearest even, overflow to inf, subnormals kept, NaN quieted). Where the CPU has no F16C, the
 * hardware comparisons are skipped with a note and only the hand-computed values are held. */
#include <stdio.h>
#include <string.h>

#include "ps_test_main.h"

#include "ps_wire_half.h"

static float f_of(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

static bool have_hw(void) {
  if (ps_wire_half_hw()) return true;
  print_message("no F16C on this CPU: the hardware comparison is skipped\n");
  return false;
}

/* Every half to f32, both paths; and back, which must give the half again (a NaN quieted). */
static void test_all_halves(void **st) {
  (void)st;
  static uint16_t h[65536], back_sw[65536], back_hw[65536];
  static float sw[65536], hw[65536], disp[65536];
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  ps_wire_f16_to_f32_sw(h, sw, 65536);
  ps_wire_f32_to_f16_sw(sw, back_sw, 65536);
  for (uint32_t i = 0; i < 65536; i++) {
    bool nan = (i & 0x7c00u) == 0x7c00u && (i & 0x3ffu);
    uint16_t want = nan ? (uint16_t)(i | 0x200u) : (uint16_t)i;
    if (back_sw[i] != want) fail_msg("half %04x -> %08x -> %04x", i, bits_of(sw[i]), back_sw[i]);
  }
  ps_wire_f16_to_f32(h, disp, 65536);
  if (!have_hw()) return;
  ps_wire_f16_to_f32_hw(h, hw, 65536);
  ps_wire_f32_to_f16_hw(hw, back_hw, 65536);
  for (uint32_t i = 0; i < 65536; i++) {
    if (bits_of(sw[i]) != bits_of(hw[i]))
      fail_msg("half %04x: portable %08x, F16C %08x", i, bits_of(sw[i]), bits_of(hw[i]));
    if (bits_of(disp[i]) != bits_of(hw[i])) fail_msg("half %04x: dispatch differs", i);
  }
  assert_memory_equal(back_sw, back_hw, sizeof back_sw);
}

/* Low 16 bits of a float at and around the rounding points of every shift a conversion uses
 * (13 for normal halves, 14..24 for subnormal ones): the boundary, one below, one above. */
static size_t low_patterns(uint32_t *lo) {
  size_t n = 0;
  lo[n++] = 0;
  lo[n++] = 0xffffu;
  for (int s = 1; s <= 16; s++) {
    uint32_t mid = 1u << (s - 1);
    lo[n++] = mid;
    lo[n++] = mid - 1;
    lo[n++] = mid + 1;
    lo[n++] = (mid | (1u << s)) & 0xffffu; /* tie with the kept bit odd */
  }
  return n;
}

static void compare_floats(const float *f, size_t n) {
  static uint16_t sw[1 << 16], hw[1 << 16], disp[1 << 16];
  assert_true(n <= (1u << 16));
  ps_wire_f32_to_f16_sw(f, sw, n);
  ps_wire_f32_to_f16_hw(f, hw, n);
  ps_wire_f32_to_f16(f, disp, n);
  for (size_t i = 0; i < n; i++) {
    if (sw[i] != hw[i])
      fail_msg("float %08x: portable %04x, F16C %04x", bits_of(f[i]), sw[i], hw[i]);
    if (disp[i] != hw[i]) fail_msg("float %08x: dispatch differs", bits_of(f[i]));
  }
}

static void test_float_sweep(void **st) {
  (void)st;
  if (!have_hw()) return;
  static float f[1 << 16];
  uint32_t lo[80];
  size_t nlo = low_patterns(lo);
  /* hi = sign, exponent and the top 7 mantissa bits: every one of them. */
  for (size_t l = 0; l < nlo; l++) {
    for (uint32_t hi = 0; hi < 65536; hi++) f[hi] = f_of(hi << 16 | lo[l]);
    compare_floats(f, 65536);
  }
  uint64_t s = 0x9e3779b97f4a7c15ull; /* xorshift: 4M random bit patterns */
  for (int r = 0; r < 64; r++) {
    for (uint32_t i = 0; i < 65536; i++) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      f[i] = f_of((uint32_t)(s >> 32));
    }
    compare_floats(f, 65536);
  }
}

/* Lengths 0..40 from an odd offset: the vector loop and its padded tail against the portable
 * loop, and nothing written past n. */
static void test_tails(void **st) {
  (void)st;
  if (!have_hw()) return;
  float src[48], wide_sw[48], wide_hw[48];
  uint16_t h_sw[48], h_hw[48];
  for (int i = 0; i < 48; i++) src[i] = 0.37f * (float)(i - 20) + 1e-6f * (float)i;
  for (size_t n = 0; n <= 40; n++) {
    memset(h_sw, 0xab, sizeof h_sw);
    memset(h_hw, 0xab, sizeof h_hw);
    ps_wire_f32_to_f16_sw(src + 1, h_sw + 1, n);
    ps_wire_f32_to_f16_hw(src + 1, h_hw + 1, n);
    assert_memory_equal(h_sw, h_hw, sizeof h_sw);
    memset(wide_sw, 0xcd, sizeof wide_sw);
    memset(wide_hw, 0xcd, sizeof wide_hw);
    ps_wire_f16_to_f32_sw(h_sw + 1, wide_sw + 1, n);
    ps_wire_f16_to_f32_hw(h_sw + 1, wide_hw + 1, n);
    assert_memory_equal(wide_sw, wide_hw, sizeof wide_sw);
  }
}

/* IEEE 754 binary16 worked by hand: 1 = 0x3c00; the largest half 65504 = 0x7bff; 65520 is the
 * midpoint to 2^16 and rounds (to even) to inf; 2^-24 is the smallest subnormal 0x0001, 2^-25
 * its half-way point (ties to even: 0), 1.5 * 2^-25 rounds up to 0x0001; 2^-14 the smallest
 * normal 0x0400; 1 + 2^-11 is the midpoint of 0x3c00 and 0x3c01 (to even: 0x3c00), 1 + 3 * 2^-11
 * that of 0x3c01 and 0x3c02 (to even: 0x3c02); the largest subnormal 0x03ff = 1023 * 2^-24;
 * -0 = 0x8000; inf; a quiet NaN 0x7fc00000 = 0x7e00; a signalling NaN with payload bit 13 set
 * (0x7f802000) is quieted to 0x7e01. */
static void test_hand_values(void **st) {
  (void)st;
  static const struct {
    uint32_t f;
    uint16_t h;
  } cases[] = {
      {0x3f800000u, 0x3c00u}, {0x477fe000u, 0x7bffu}, {0x477ff000u, 0x7c00u},
      {0x477fefffu, 0x7bffu}, {0x33800000u, 0x0001u}, {0x33000000u, 0x0000u},
      {0x33400000u, 0x0001u}, {0x38800000u, 0x0400u}, {0x3f801000u, 0x3c00u},
      {0x3f803000u, 0x3c02u}, {0x387fc000u, 0x03ffu}, {0x80000000u, 0x8000u},
      {0x7f800000u, 0x7c00u}, {0xff800000u, 0xfc00u}, {0x7fc00000u, 0x7e00u},
      {0x7f802000u, 0x7e01u}, {0x7f7fffffu, 0x7c00u}, {0xc0490fdbu, 0xc248u},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    float f = f_of(cases[i].f);
    uint16_t sw, hw;
    ps_wire_f32_to_f16_sw(&f, &sw, 1);
    if (sw != cases[i].h) fail_msg("%08x: portable %04x, want %04x", cases[i].f, sw, cases[i].h);
    if (ps_wire_half_hw()) {
      ps_wire_f32_to_f16_hw(&f, &hw, 1);
      if (hw != cases[i].h) fail_msg("%08x: F16C %04x, want %04x", cases[i].f, hw, cases[i].h);
    }
  }
  /* And back: 0x0001 = 2^-24, 0x03ff = 1023 * 2^-24, 0x7bff = 65504, a NaN 0x7c01 quieted with
   * its payload moved up (0x7fc02000). */
  static const struct {
    uint16_t h;
    uint32_t f;
  } back[] = {{0x0001u, 0x33800000u}, {0x03ffu, 0x387fc000u}, {0x7bffu, 0x477fe000u},
              {0x7c01u, 0x7fc02000u}, {0xfc00u, 0xff800000u}, {0x3555u, 0x3eaaa000u}};
  for (size_t i = 0; i < sizeof back / sizeof *back; i++) {
    float f;
    ps_wire_f16_to_f32_sw(&back[i].h, &f, 1);
    if (bits_of(f) != back[i].f)
      fail_msg("%04x: portable %08x, want %08x", back[i].h, bits_of(f), back[i].f);
  }
}

PS_TEST_MAIN("half", NULL, NULL, cmocka_unit_test(test_all_halves),
             cmocka_unit_test(test_float_sweep), cmocka_unit_test(test_tails),
             cmocka_unit_test(test_hand_values))
