/* ps_server_pull_state: a PULL with_state (docs/PROTOCOL.md, "Rows with their optimizer
 * state") -- each row followed by its optimizer state, read by the store
 * (ps_store_pull_state), so that ps-worker's deep lookahead can apply its own pushes' updates
 * to the rows it holds with exactly the shard's arithmetic. Everything else about the pull is
 * a PULL's: its step wait, its memory charge (of the wider rows), its reply. */
#include "ps_log.h"
#include "ps_server_int.h"
#include "ps_server_pull_state_int.h"

bool srv_pull_state_refused(ps_server *s, srv_req *r) {
  const Ember__Header *h = r->h;
  if (!h->with_state) return false;
  const char *why = h->op != EMBER__OP__OP_PULL                       ? "a PULL's flag"
                    : h->value_type != EMBER__VALUE_TYPE__VT_F32      ? "f32 values only"
                    : r->tab->spec.row_type != PS_ROW_F32             ? "f32 tables only"
                    : s->export                                  ? "not with --serve"
                    : h->warm                                         ? "not with warm"
                                                                      : NULL;
  if (!why) return false;
  srv_reply_error(s, r, PS_ERR_UNSUPPORTED, "a pull with_state: %s", why);
  return true;
}

ps_status srv_pull_state_run(ps_server *s, srv_req *r, uint32_t first, uint32_t stride) {
  const uint32_t id = r->tab->spec.id;
  if (r->batch)
    return ps_store_pull_state_batch(r->store, id, r->msg.keys, r->batch, first, stride,
                                     r->outp);
  /* No batch (it could not be allocated): one thread reads them all. */
  (void)s;
  return first ? PS_OK : ps_store_pull_state(r->store, id, r->msg.keys, r->msg.nkeys, r->outp);
}
