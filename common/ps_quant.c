/* ps_quant: FBGEMM's fused row-wise int8 rows (see ps_quant.h for the layout and the bound). */
#include "ps_quant.h"

#include <math.h>
#include <string.h>

ps_status ps_quant_int8_encode(const float *x, uint32_t dim, uint8_t *out) {
  float lo = INFINITY, hi = -INFINITY;
  for (uint32_t i = 0; i < dim; i++) {
    if (!isfinite(x[i])) return PS_ERR_INVALID;
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  if (dim == 0) lo = hi = 0.0f;
  float scale = (float)(((double)hi - (double)lo) / 255.0);
  for (uint32_t i = 0; i < dim; i++) {
    /* in double with the stored scale: |x - (q * scale + lo)| <= scale / 2 exactly (ps_quant.h);
     * the clamp only catches hi / scale rounding a hair above 255 */
    double q = scale > 0.0f ? nearbyint(((double)x[i] - (double)lo) / (double)scale) : 0.0;
    out[i] = (uint8_t)(q < 0.0 ? 0.0 : q > 255.0 ? 255.0 : q);
  }
  memcpy(out + dim, &scale, sizeof scale);
  memcpy(out + dim + sizeof scale, &lo, sizeof lo);
  return PS_OK;
}

void ps_quant_int8_params(const uint8_t *row, uint32_t dim, float *scale, float *bias) {
  memcpy(scale, row + dim, sizeof *scale);
  memcpy(bias, row + dim + sizeof *scale, sizeof *bias);
}

void ps_quant_int8_decode(const uint8_t *row, uint32_t dim, float *x) {
  float scale, bias;
  ps_quant_int8_params(row, dim, &scale, &bias);
  /* q * scale is exact in double: one rounding, to the float nearest the dequantized value */
  for (uint32_t i = 0; i < dim; i++) x[i] = (float)((double)row[i] * scale + bias);
}
