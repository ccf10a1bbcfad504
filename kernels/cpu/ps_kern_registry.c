/* ps_kern_registry: ps_kern_create, choosing a backend by name among those built.
 * Kept apart from the backends so that ember_kernels_cpu does not depend on CUDA and the
 * CUDA backend does not depend on the CPU one. */
#include <stdlib.h>
#include <string.h>

#include "ps_kernels.h"

ps_status ps_kern_create(const char *name, int threads, ps_kern **out) {
  if (!name || !out) return PS_ERR_INVALID;
  *out = NULL;
  if (strcmp(name, "cpu") == 0) return ps_kern_cpu_create(threads, out);
  if (strcmp(name, "cuda") == 0 || strncmp(name, "cuda:", 5) == 0) {
    int dev = 0;
    if (name[4] == ':') {
      char *end = NULL;
      long v = strtol(name + 5, &end, 10);
      if (end == name + 5 || *end || v < 0 || v > 1024) return PS_ERR_INVALID;
      dev = (int)v;
    }
#ifdef EMBER_KERN_HAVE_CUDA
    return ps_kern_cuda_create(dev, out);
#else
    (void)dev;
    return PS_ERR_UNSUPPORTED;
#endif
  }
  return PS_ERR_INVALID;
}
