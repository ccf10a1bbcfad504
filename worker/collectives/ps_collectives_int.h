/* ps_collectives_int.h: what the backends behind ps_collectives.h (collectives_gloo.cc,
 * collectives_nccl.c) share, so that both check their arguments and fill a handle alike.
 * Private to worker/collectives. */
#ifndef PS_COLLECTIVES_INT_H
#define PS_COLLECTIVES_INT_H

#include "ps_collectives.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The checks every backend's create begins with: out not NULL (then *out = NULL), a
 * rendezvous with both callbacks, 0 <= rank < world. PS_OK or PS_ERR_INVALID. */
ps_status ps_coll_check_create(const ps_rendezvous *rdv, int rank, int world, ps_coll **out,
                               ps_error *err);

/* A handle of one backend over its impl, or NULL when out of memory (impl left to the
 * caller). Freed by the backend's destroy. */
ps_coll *ps_coll_new(const ps_coll_ops *ops, ps_coll_kind kind, int rank, int world, void *impl);

#ifdef __cplusplus
}
#endif

#endif
