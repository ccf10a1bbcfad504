/* ps-half-bench: ns per value of the f16 wire conversions (proto/ps_wire_half.c), the portable
 * path beside F16C, both directions, on one pull reply's worth of values (4096 keys x dim).
 *
 * Design decisions: the two paths run interleaved, repetition after repetition, and the table
 * gives medians over repetitions, so a noisy minute hits both alike (the dev box is shared);
 * values are a spread of normal, subnormal and out-of-range floats, not a constant, so no branch
 * of the portable path is predicted for free. Prints one Markdown table. */
#include <stdio.h>
#include <stdlib.h>

#include "ps_cli.h"
#include "ps_time.h"
#include "ps_wire_half.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int64_t dim = 64, reps = 21, inner = 20;
  ps_cli_opt opts[] = {
      {"dim", 0, PS_CLI_I64, &dim, "D", "values per key (4096 keys a call)", false, 1, 4096},
      {"reps", 0, PS_CLI_I64, &reps, "N", "interleaved repetitions (medians are reported)", false, 1, 1000},
  };
  ps_cli cli = {"ps-half-bench", "ns per value of the f16 wire conversions, portable vs F16C.",
                NULL, opts, sizeof opts / sizeof opts[0]};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  const bool hw = ps_wire_half_hw();
  size_t n = 4096 * (size_t)dim;
  float *f = malloc(n * sizeof *f), *g = malloc(n * sizeof *g);
  uint16_t *h = malloc(n * sizeof *h);
  double *t = malloc(4 * (size_t)reps * sizeof *t);
  if (!f || !g || !h || !t) {
    fprintf(stderr, "ps-half-bench: out of memory\n");
    return 1;
  }
  uint32_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    f[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 1e-5f : i % 11 == 0 ? 1e5f : 0.2f);
  }
  for (int64_t r = 0; r < reps; r++) {
    for (int k = 0; k < 4; k++) {
      if (k >= 2 && !hw) continue;
      uint64_t t0 = ps_now_ns();
      for (int64_t i = 0; i < inner; i++) {
        if (k == 0) ps_wire_f32_to_f16_sw(f, h, n);
        else if (k == 1) ps_wire_f16_to_f32_sw(h, g, n);
        else if (k == 2) ps_wire_f32_to_f16_hw(f, h, n);
        else ps_wire_f16_to_f32_hw(h, g, n);
      }
      t[k * reps + r] = (double)(ps_now_ns() - t0) / (double)(inner * (int64_t)n);
    }
  }
  const char *name[4] = {"f32 -> f16", "f16 -> f32", "f32 -> f16", "f16 -> f32"};
  double med[4] = {0};
  for (int k = 0; k < (hw ? 4 : 2); k++) {
    qsort(t + k * reps, (size_t)reps, sizeof *t, cmp_d);
    med[k] = t[k * reps + reps / 2];
  }
  printf("| direction | dim | portable ns/value | F16C ns/value | portable / F16C |\n|---|---|---|---|---|\n");
  for (int k = 0; k < 2; k++) {
    if (hw)
      printf("| %s | %lld | %.3f | %.3f | %.1fx |\n", name[k], (long long)dim, med[k], med[k + 2],
             med[k] / med[k + 2]);
    else
      printf("| %s | %lld | %.3f | (no F16C) | |\n", name[k], (long long)dim, med[k]);
  }
  free(f);
  free(g);
  free(h);
  free(t);
  return 0;
}
