#include "ps_collectives.h"

#include <stddef.h>

void ps_coll_destroy(ps_coll **c) {
  if (!c || !*c) return;
  (*c)->ops->destroy(*c);
  *c = NULL;
}

#if !EMBER_HAVE_NCCL
ps_status ps_coll_create_nccl(const ps_rendezvous *rdv, const char *prefix, int rank, int world,
                              int device, void *cuda_stream, ps_coll **out) {
  (void)rdv, (void)prefix, (void)rank, (void)world, (void)device, (void)cuda_stream;
  *out = NULL;
  return PS_ERR_UNSUPPORTED; /* this build has no CUDA */
}
#endif
