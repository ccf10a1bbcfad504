/* ps_wire_spec: ps_table_spec <-> ember.proto's TableSpec, the one mapping of a table's spec
 * between memory and the wire. The enums share their numbering (ps_table.h), so the mapping
 * is field by field with a validation at the end. */
#include <stdio.h>
#include <string.h>

#include "ps_wire.h"

/* The fields that cross as they are, each named once for both directions (the name, the
 * enums and the stepping defaults need more than a copy). */
#define SPEC_PLAIN_FIELDS(X)                                                                  \
  X(id) X(dim) X(lr) X(beta1) X(beta2) X(eps) X(l1) X(l2) X(lr_power) X(initial_accumulator) \
  X(init_a) X(init_b) X(seed) X(admit_threshold) X(ttl_steps)

void ps_wire_spec_to_pb(const ps_table_spec *t, Ember__TableSpec *p) {
  ember__table_spec__init(p);
#define COPY(f) p->f = t->f;
  SPEC_PLAIN_FIELDS(COPY)
#undef COPY
  p->name = (char *)t->name;
  p->optimizer = (Ember__Optimizer)t->optimizer;
  p->init = (Ember__Init)t->init;
  p->consistency = (Ember__Consistency)t->consistency;
  p->row_type = (Ember__RowType)t->row_type;
  p->staleness = t->staleness;
  p->num_workers = t->num_workers;
}

ps_status ps_wire_spec_from_pb(const Ember__TableSpec *p, ps_table_spec *t, ps_error *err) {
  if (!p) return ps_error_set(err, PS_ERR_INVALID, "no table spec");
  ps_table_spec o = {0};
#define COPY(f) o.f = p->f;
  SPEC_PLAIN_FIELDS(COPY)
#undef COPY
  if (p->name && strlen(p->name) >= sizeof(o.name))
    return ps_error_set(err, PS_ERR_INVALID, "table %u: name must have 1..%u characters", p->id,
                        PS_TABLE_NAME_MAX - 1);
  snprintf(o.name, sizeof(o.name), "%s", p->name ? p->name : "");
  o.optimizer = (ps_optimizer)p->optimizer;
  o.init = (ps_init)p->init;
  o.consistency = (ps_consistency)p->consistency;
  o.row_type = (ps_row_type)p->row_type;
  o.staleness = o.consistency == PS_CONS_SSP ? p->staleness : 0;
  o.num_workers = p->num_workers ? p->num_workers : 1;
  ps_status st = ps_table_spec_validate(&o, err);
  if (st == PS_OK) *t = o;
  return st;
}
