/* ps_wire_half.h: IEEE half <-> single conversion of f16 bulk values (VT_F16) on the wire, and
 * the two paths behind it, exposed for the test that holds them to each other bit for bit
 * (tests/proto/test_half.c) and for the benchmark that times them (bench/net/ps_half_bench.c).
 *
 * ps_wire_f32_to_f16 / ps_wire_f16_to_f32 pick the hardware path (x86 F16C, 8 values an
 * instruction) when the CPU running them has it, else the portable path; the choice is made at
 * run time, so one build serves every x86-64 machine and nothing depends on -march. The
 * portable path reproduces F16C exactly, NaN payloads included (f32 -> f16: sign, quiet bit,
 * the payload's top 10 bits; f16 -> f32: sign, quiet bit, the payload shifted up), so a value
 * never depends on which machine converted it. */
#ifndef PS_WIRE_HALF_H
#define PS_WIRE_HALF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Round to nearest even, overflow to inf, subnormals kept, NaN quieted; widening is exact. */
void ps_wire_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void ps_wire_f16_to_f32(const uint16_t *src, float *dst, size_t n);

/* True when this CPU has F16C (and the build targets x86-64); the _hw functions may only be
 * called then. */
bool ps_wire_half_hw(void);

void ps_wire_f32_to_f16_sw(const float *src, uint16_t *dst, size_t n);
void ps_wire_f16_to_f32_sw(const uint16_t *src, float *dst, size_t n);
void ps_wire_f32_to_f16_hw(const float *src, uint16_t *dst, size_t n);
void ps_wire_f16_to_f32_hw(const uint16_t *src, float *dst, size_t n);

#endif
