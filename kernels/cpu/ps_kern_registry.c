/* ps_kern_registry: ps_kern_create, choosing a backend by name among those built.
 * Kept apart from the backends so that ember_kernels_cpu does not depend on CUDA and the
 * CUDA backend does not depend on the CPU one. */
#include <stdlib.h>
#include <string.h>

#include "ps_kernels.h"

ps_status ps_kern_create(const char *name, int threads, ps_kern **out, ps_error *err) {
  if (!name || !out) return ps_error_set(err, PS_ERR_INVALID, "no device name or output");
  *out = NULL;
  if (strcmp(name, "cpu") == 0) {
    ps_status st = ps_kern_cpu_create(threads, out);
    return st == PS_OK ? PS_OK : ps_error_set(err, st, "cpu backend: %s", ps_status_str(st));
  }
  if (strcmp(name, "cuda") == 0 || strncmp(name, "cuda:", 5) == 0) {
    int dev = 0;
    if (name[4] == ':') {
      char *end = NULL;
      long v = strtol(name + 5, &end, 10);
      if (end == name + 5 || *end || v < 0 || v > 1024)
        return ps_error_set(err, PS_ERR_INVALID, "%s", ps_status_str(PS_ERR_INVALID));
      dev = (int)v;
    }
#ifdef EMBER_KERN_HAVE_CUDA
    return ps_kern_cuda_create(dev, out, err);
#else
    (void)dev;
    return ps_error_set(err, PS_ERR_UNSUPPORTED, "not available (CUDA not built, or no GPU)");
#endif
  }
  return ps_error_set(err, PS_ERR_INVALID, "%s", ps_status_str(PS_ERR_INVALID));
}
