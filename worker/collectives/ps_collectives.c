/* ps_collectives.c: the backend-independent part of ps_collectives.h (destroy, the shared
 * argument checks and handle of ps_collectives_int.h) and the NCCL stand-in of builds
 * without CUDA. */
#include "ps_collectives.h"

#include <stddef.h>
#include <stdlib.h>

#include "ps_collectives_int.h"

void ps_coll_destroy(ps_coll **c) {
  if (!c || !*c) return;
  (*c)->ops->destroy(*c);
  *c = NULL;
}

ps_status ps_coll_check_create(const ps_rendezvous *rdv, int rank, int world, ps_coll **out,
                               ps_error *err) {
  if (!out) return ps_error_set(err, PS_ERR_INVALID, "no output handle");
  *out = NULL;
  if (!rdv || !rdv->set || !rdv->get) return ps_error_set(err, PS_ERR_INVALID, "no rendezvous");
  if (world < 1 || rank < 0 || rank >= world)
    return ps_error_set(err, PS_ERR_INVALID, "rank %d outside a world of %d", rank, world);
  return PS_OK;
}

ps_coll *ps_coll_new(const ps_coll_ops *ops, ps_coll_kind kind, int rank, int world, void *impl) {
  ps_coll *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ops = ops;
  c->kind = kind;
  c->rank = rank;
  c->world = world;
  c->impl = impl;
  return c;
}

#if !EMBER_HAVE_NCCL
ps_status ps_coll_create_nccl(const ps_rendezvous *rdv, const char *prefix, int rank, int world,
                              int device, void *cuda_stream, ps_coll **out, ps_error *err) {
  (void)rdv, (void)prefix, (void)rank, (void)world, (void)device, (void)cuda_stream;
  *out = NULL;
  return ps_error_set(err, PS_ERR_UNSUPPORTED, "nccl: this build has no CUDA");
}
#endif
