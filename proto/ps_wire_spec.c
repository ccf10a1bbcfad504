/* ps_wire_spec: ps_table_spec <-> ember.proto's TableSpec, the one mapping of a table's spec
 * between memory and the wire. The enums share their numbering (ps_table.h), so the mapping
 * is field by field with a validation at the end. */
#include <stdio.h>
#include <string.h>

#include "ps_wire.h"

void ps_wire_spec_to_pb(const ps_table_spec *t, Ember__TableSpec *p) {
  ember__table_spec__init(p);
  p->id = t->id;
  p->name = (char *)t->name;
  p->dim = t->dim;
  p->optimizer = (Ember__Optimizer)t->optimizer;
  p->lr = t->lr;
  p->beta1 = t->beta1;
  p->beta2 = t->beta2;
  p->eps = t->eps;
  p->l1 = t->l1;
  p->l2 = t->l2;
  p->lr_power = t->lr_power;
  p->initial_accumulator = t->initial_accumulator;
  p->init = (Ember__Init)t->init;
  p->init_a = t->init_a;
  p->init_b = t->init_b;
  p->seed = t->seed;
  p->admit_threshold = t->admit_threshold;
  p->ttl_steps = t->ttl_steps;
  p->consistency = (Ember__Consistency)t->consistency;
  p->staleness = t->staleness;
  p->num_workers = t->num_workers;
}

ps_status ps_wire_spec_from_pb(const Ember__TableSpec *p, ps_table_spec *t, ps_error *err) {
  if (!p) return ps_error_set(err, PS_ERR_INVALID, "no table spec");
  ps_table_spec o = {0};
  o.id = p->id;
  if (p->name && strlen(p->name) >= sizeof(o.name))
    return ps_error_set(err, PS_ERR_INVALID, "table %u: name must have 1..%u characters", p->id,
                        PS_TABLE_NAME_MAX - 1);
  snprintf(o.name, sizeof(o.name), "%s", p->name ? p->name : "");
  o.dim = p->dim;
  o.optimizer = (ps_optimizer)p->optimizer;
  o.lr = p->lr;
  o.beta1 = p->beta1;
  o.beta2 = p->beta2;
  o.eps = p->eps;
  o.l1 = p->l1;
  o.l2 = p->l2;
  o.lr_power = p->lr_power;
  o.initial_accumulator = p->initial_accumulator;
  o.init = (ps_init)p->init;
  o.init_a = p->init_a;
  o.init_b = p->init_b;
  o.seed = p->seed;
  o.admit_threshold = p->admit_threshold;
  o.ttl_steps = p->ttl_steps;
  o.consistency = (ps_consistency)p->consistency;
  o.staleness = o.consistency == PS_CONS_SSP ? p->staleness : 0;
  o.num_workers = p->num_workers ? p->num_workers : 1;
  ps_status st = ps_table_spec_validate(&o, err);
  if (st == PS_OK) *t = o;
  return st;
}
