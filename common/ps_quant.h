/* ps_quant: row-wise 8-bit quantization of embedding rows for serving (ps-export --quantize
 * int8, ps-predict --export), in FBGEMM's fused layout ("Fused8BitRowwiseQuantizedSBFloat"):
 * one row of dim values is dim bytes q[0..dim) followed by two little-endian float32s, the
 * row's scale and bias, so a row is dim + 8 bytes (a float32 row: 4 * dim) and
 *   scale = (max - min) / 255,  bias = min,  q[i] = round((x[i] - bias) / scale) in 0..255,
 *   x[i] ~ q[i] * scale + bias.
 *
 * Design decisions:
 * - The division uses the scale as stored (float32), in double: then every value's error is
 *   within scale / 2 exactly (the rounding of q), which a reader checks from the file alone;
 *   FBGEMM multiplies by 255 / (range + 1e-8) instead, which can miss that bound by an ulp.
 * - A constant row (max == min) gets scale 0 and every q 0: it is decoded exactly.
 * - A row holding a NaN or an infinity has no range and is refused (PS_ERR_INVALID): a trained
 *   model's rows are finite, and a silent garbage row would be worse than a failed export.
 * - The two floats sit after the bytes unaligned; they are copied with memcpy, never loaded
 *   through a float pointer. */
#ifndef PS_QUANT_H
#define PS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

/* The name of the layout in an export's manifest (tables[].layout). */
#define PS_QUANT_INT8_LAYOUT "fused-rowwise-int8"

/* Bytes of one fused int8 row of dim values: dim + 8. */
static inline size_t ps_quant_int8_row_bytes(uint32_t dim) { return (size_t)dim + 8; }

/* x[dim] into out[ps_quant_int8_row_bytes(dim)]. PS_ERR_INVALID (out untouched) if a value
 * is not finite. */
ps_status ps_quant_int8_encode(const float *x, uint32_t dim, uint8_t *out);
/* A fused row into x[dim]: q * scale + bias. */
void ps_quant_int8_decode(const uint8_t *row, uint32_t dim, float *x);
/* The scale and the bias of a fused row. */
void ps_quant_int8_params(const uint8_t *row, uint32_t dim, float *scale, float *bias);

#endif
