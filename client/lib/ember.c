/* ember.c: the installable C API (ember.h) over the PS client, and its "key=value" options.
 *
 * Each ember_* call maps onto one ps_client call; what the facade adds is the option strings
 * (parsed here, each key checked, so a typo is an error that names it instead of a silently
 * ignored field), the step counter and the dims of the declared tables. Status codes pass
 * through unchanged (ps_status numbering); ps_error is copied into the public ember_error, whose
 * layout is fixed independently of ps_status.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "ps_cli.h"
#include "ps_client.h"
#include "ps_criteo.h"
#include "ps_curve.h"
#include "ps_sample.h"

#define EMBER_MAX_OPTIONS 32

struct ember_client {
  ps_client *cl;
  uint64_t step;
  uint32_t world;
  uint32_t timeout_ms; /* the client's bound, for barriers without one */
  size_t ntables;
  uint32_t table_id[64]; /* declared tables and their dims (more are refused) */
  uint32_t table_dim[64];
  bool table_ro[64];     /* attached by name: pulls only */
};

const char *ember_version(void) { return "0.1.0"; }
int ember_api_version(void) { return EMBER_API_VERSION; }

/* Copies a failed ps_error into the public one (when given); returns st. */
static int out_err(ps_status st, const ps_error *pe, ember_error *err) {
  if (st != PS_OK && err) {
    err->code = (int)st;
    snprintf(err->msg, sizeof err->msg, "%s", ps_error_str(pe));
  }
  return (int)st;
}

/* One option "key=value" of a list: the value (after the first '='), or NULL when no '='. */
static char *opt_value(char *item) {
  char *eq = strchr(item, '=');
  if (!eq) return NULL;
  *eq = '\0';
  return eq + 1;
}

static ps_status opt_double(const char *k, const char *v, double lo, double hi, double *out,
                            ps_error *e) {
  if (ps_parse_double(v, out, NULL) != PS_OK || !(*out >= lo && *out <= hi))
    return ps_error_set(e, PS_ERR_INVALID, "option %s=%s: not a number in [%g, %g]", k, v, lo, hi);
  return PS_OK;
}

static ps_status opt_u64(const char *k, const char *v, uint64_t hi, uint64_t *out, ps_error *e) {
  int64_t x;
  if (ps_parse_i64(v, &x, NULL) != PS_OK || x < 0 || (uint64_t)x > hi)
    return ps_error_set(e, PS_ERR_INVALID, "option %s=%s: not an integer in [0, %llu]", k, v,
                        (unsigned long long)hi);
  *out = (uint64_t)x;
  return PS_OK;
}

/* Calls set(ctx, key, value, e) for each "key=value" of s (NULL or "" = none). */
typedef ps_status (*opt_setter)(void *ctx, const char *k, const char *v, ps_error *e);
static ps_status parse_options(const char *s, opt_setter set, void *ctx, ps_error *e) {
  if (!s || !*s) return PS_OK;
  char *items[EMBER_MAX_OPTIONS];
  int n = ps_split_list(s, ',', items, EMBER_MAX_OPTIONS);
  if (n <= 0)
    return ps_error_set(e, PS_ERR_INVALID, "options '%s': an empty item or more than %d", s,
                        EMBER_MAX_OPTIONS);
  ps_status st = PS_OK;
  for (int i = 0; i < n && st == PS_OK; i++) {
    char *v = opt_value(items[i]);
    st = v ? set(ctx, items[i], v, e)
           : ps_error_set(e, PS_ERR_INVALID, "option '%s' is not key=value", items[i]);
  }
  free(items[0]);
  return st;
}

typedef struct client_opts {
  ps_client_options o;
  uint32_t world;
  char secret_file[1024], server_file[1024]; /* ps-keygen files, read after parsing */
} client_opts;

static ps_status set_client_opt(void *ctx, const char *k, const char *v, ps_error *e) {
  client_opts *co = ctx;
  uint64_t x = 0;
  ps_status st = PS_OK;
  if (!strcmp(k, "curve_secret") || !strcmp(k, "curve_server")) {
    if (strlen(v) != 40)
      return ps_error_set(e, PS_ERR_INVALID, "option %s: a Z85 key is 40 characters, not %zu",
                          k, strlen(v));
    memcpy(strcmp(k, "curve_secret") ? co->o.curve_server : co->o.curve_secret, v, 41);
  } else if (!strcmp(k, "curve_secret_file") || !strcmp(k, "curve_server_file")) {
    char *dst = strcmp(k, "curve_secret_file") ? co->server_file : co->secret_file;
    if (!*v || strlen(v) >= sizeof co->secret_file)
      return ps_error_set(e, PS_ERR_INVALID, "option %s: the path is empty or too long", k);
    snprintf(dst, sizeof co->secret_file, "%s", v);
  } else if (!strcmp(k, "timeout_ms") && (st = opt_u64(k, v, UINT32_MAX, &x, e)) == PS_OK) {
    co->o.timeout_ms = (uint32_t)x;
  } else if (!strcmp(k, "ckpt_timeout_ms") && (st = opt_u64(k, v, UINT32_MAX, &x, e)) == PS_OK) {
    co->o.ckpt_timeout_ms = (uint32_t)x;
  } else if (!strcmp(k, "rank") && (st = opt_u64(k, v, PS_TABLE_MAX_WORKERS - 1, &x, e)) == PS_OK) {
    co->o.rank = (uint32_t)x;
  } else if (!strcmp(k, "world") && (st = opt_u64(k, v, PS_TABLE_MAX_WORKERS, &x, e)) == PS_OK) {
    co->world = (uint32_t)x;
  } else if (!strcmp(k, "wire_f16") && (st = opt_u64(k, v, 1, &x, e)) == PS_OK) {
    co->o.wire_f16 = x != 0;
  } else if (st == PS_OK) {
    st = ps_error_set(e, PS_ERR_INVALID,
                      "unknown client option '%s' (timeout_ms, ckpt_timeout_ms, rank, world, "
                      "wire_f16, curve_secret, curve_server, curve_secret_file, curve_server_file)",
                      k);
  }
  return st;
}

int ember_client_open(const char *urls, const char *options, ember_client **out,
                      ember_error *err) {
  ps_error pe = {0};
  *out = NULL;
  client_opts co = {.world = 1};
  ps_client_options_default(&co.o);
  ps_status st = parse_options(options, set_client_opt, &co, &pe);
  if (st == PS_OK && (co.secret_file[0] || co.server_file[0]))
    st = ps_curve_load_client(co.secret_file[0] ? co.secret_file : NULL,
                              co.server_file[0] ? co.server_file : NULL, co.o.curve_secret,
                              co.o.curve_server, &pe);
  if (st == PS_OK && (!co.o.curve_secret[0]) != (!co.o.curve_server[0]))
    st = ps_error_set(&pe, PS_ERR_INVALID, "options curve_secret and curve_server go together");
  if (st != PS_OK) return out_err(st, &pe, err);
  ember_client *c = calloc(1, sizeof *c);
  if (!c) return out_err(ps_error_set(&pe, PS_ERR_NOMEM, "out of memory"), &pe, err);
  c->world = co.world ? co.world : 1;
  c->timeout_ms = co.o.timeout_ms;
  st = ps_client_create_list(urls, &co.o, &c->cl, &pe);
  if (st != PS_OK) {
    free(c);
    return out_err(st, &pe, err);
  }
  *out = c;
  return EMBER_OK;
}

void ember_client_close(ember_client **c) {
  if (!c || !*c) return;
  ps_client_destroy(&(*c)->cl);
  free(*c);
  *c = NULL;
}

static ps_status set_table_opt(void *ctx, const char *k, const char *v, ps_error *e) {
  ps_table_spec *t = ctx;
  double d = 0;
  uint64_t x = 0;
  float *f = !strcmp(k, "lr") ? &t->lr : !strcmp(k, "eps") ? &t->eps
           : !strcmp(k, "beta1") ? &t->beta1 : !strcmp(k, "beta2") ? &t->beta2
           : !strcmp(k, "l1") ? &t->l1 : !strcmp(k, "l2") ? &t->l2
           : !strcmp(k, "lr_power") ? &t->lr_power
           : !strcmp(k, "initial_accumulator") ? &t->initial_accumulator
           : !strcmp(k, "init_a") ? &t->init_a : !strcmp(k, "init_b") ? &t->init_b : NULL;
  if (f) {
    ps_status st = opt_double(k, v, -1e30, 1e30, &d, e);
    if (st == PS_OK) *f = (float)d;
    return st;
  }
  if (!strcmp(k, "init")) {
    ps_status st = opt_double(k, v, 0, 1e30, &d, e);
    t->init = PS_INIT_UNIFORM;
    t->init_a = (float)-d;
    t->init_b = (float)d;
    return st;
  }
  if (!strcmp(k, "optimizer")) return ps_optimizer_parse(v, &t->optimizer, e);
  if (!strcmp(k, "init_dist")) return ps_init_parse(v, &t->init, e);
  if (!strcmp(k, "consistency")) return ps_consistency_parse(v, &t->consistency, e);
  if (!strcmp(k, "row_type")) return ps_row_type_parse(v, &t->row_type, e);
  uint64_t *u64 = !strcmp(k, "seed") ? &t->seed : !strcmp(k, "ttl_steps") ? &t->ttl_steps : NULL;
  uint32_t *u32 = !strcmp(k, "admit_threshold") ? &t->admit_threshold
                : !strcmp(k, "staleness") ? &t->staleness
                : !strcmp(k, "num_workers") ? &t->num_workers : NULL;
  if (!u64 && !u32)
    return ps_error_set(e, PS_ERR_INVALID, "unknown table option '%s' (see ember.h)", k);
  ps_status st = opt_u64(k, v, u64 ? UINT64_MAX >> 1 : UINT32_MAX, &x, e);
  if (st == PS_OK && u64) *u64 = x;
  if (st == PS_OK && u32) *u32 = (uint32_t)x;
  return st;
}

/* The slot of table id among the client's tables, or the next free one (ntables). */
static size_t table_slot(const ember_client *c, uint32_t id) {
  size_t slot = 0;
  while (slot < c->ntables && c->table_id[slot] != id) slot++;
  return slot;
}

static void table_keep(ember_client *c, size_t slot, uint32_t id, uint32_t dim, bool ro) {
  c->table_id[slot] = id;
  c->table_dim[slot] = dim;
  c->table_ro[slot] = ro;
  if (slot == c->ntables) c->ntables++;
}

int ember_table_declare(ember_client *c, uint32_t id, const char *name, uint32_t dim,
                        const char *options, ember_error *err) {
  ps_error pe = {0};
  ps_table_spec t;
  ps_table_spec_default(&t, id, name ? name : "", dim);
  if (name && strlen(name) >= PS_TABLE_NAME_MAX)
    return out_err(ps_error_set(&pe, PS_ERR_INVALID, "table name '%s' is over %u characters",
                                name, PS_TABLE_NAME_MAX - 1), &pe, err);
  ps_status st = parse_options(options, set_table_opt, &t, &pe);
  if (st == PS_OK) st = ps_table_spec_validate(&t, &pe);
  size_t slot = table_slot(c, id);
  if (st == PS_OK && slot == sizeof c->table_id / sizeof c->table_id[0])
    st = ps_error_set(&pe, PS_ERR_INVALID, "more than %zu tables in one client", slot);
  if (st == PS_OK) st = ps_client_declare(c->cl, &t, &pe);
  if (st != PS_OK) return out_err(st, &pe, err);
  table_keep(c, slot, id, dim, false);
  return EMBER_OK;
}

int ember_table_attach(ember_client *c, const char *name, uint32_t *id, uint32_t *dim,
                       ember_error *err) {
  ps_error pe = {0};
  ps_table_spec t;
  ps_status st = ps_client_attach(c->cl, name, &t, &pe);
  if (st != PS_OK) return out_err(st, &pe, err);
  size_t slot = table_slot(c, t.id);
  if (slot == sizeof c->table_id / sizeof c->table_id[0])
    return out_err(ps_error_set(&pe, PS_ERR_INVALID, "more than %zu tables in one client", slot),
                   &pe, err);
  /* A table this client declared stays writable: attaching only learns what it has. */
  table_keep(c, slot, t.id, t.dim, slot == c->ntables || c->table_ro[slot]);
  if (id) *id = t.id;
  if (dim) *dim = t.dim;
  return EMBER_OK;
}

/* PS_OK, or PS_ERR_INVALID when the table was attached by name (read-only). */
static ps_status writable(const ember_client *c, uint32_t table, ps_error *pe) {
  size_t slot = table_slot(c, table);
  if (slot < c->ntables && c->table_ro[slot])
    return ps_error_set(pe, PS_ERR_INVALID, "table %u was attached read-only by name: declare "
                        "it with its spec to push", table);
  return PS_OK;
}

uint32_t ember_table_dim(const ember_client *c, uint32_t id) {
  for (size_t i = 0; i < c->ntables; i++)
    if (c->table_id[i] == id) return c->table_dim[i];
  return 0;
}

int ember_pull(ember_client *c, uint32_t table, const uint64_t *keys, size_t n, float *out,
               ember_error *err) {
  ps_error pe = {0};
  return out_err(ps_client_pull(c->cl, table, c->step, keys, n, out, &pe), &pe, err);
}

int ember_push(ember_client *c, uint32_t table, const uint64_t *keys, size_t n,
               const float *grads, ember_error *err) {
  ps_error pe = {0};
  ps_status st = writable(c, table, &pe);
  if (st == PS_OK) st = ps_client_push(c->cl, table, c->step, keys, n, grads, &pe);
  return out_err(st, &pe, err);
}

int ember_pull_start(ember_client *c, uint32_t table, const uint64_t *keys, size_t n,
                     float *out, ember_request **r, ember_error *err) {
  ps_error pe = {0};
  ps_client_req *q = NULL;
  ps_status st = ps_client_pull_start(c->cl, table, c->step, keys, n, false, out, &q, &pe);
  *r = (ember_request *)q;
  return out_err(st, &pe, err);
}

int ember_push_start(ember_client *c, uint32_t table, const uint64_t *keys, size_t n,
                     const float *grads, ember_request **r, ember_error *err) {
  ps_error pe = {0};
  ps_client_req *q = NULL;
  ps_status st = writable(c, table, &pe);
  if (st == PS_OK)
    st = ps_client_push_start(c->cl, table, c->step, keys, n, false, grads, &q, &pe);
  *r = (ember_request *)q;
  return out_err(st, &pe, err);
}

int ember_wait(ember_client *c, ember_request **r, ember_error *err) {
  ps_error pe = {0};
  ps_client_req *q = (ps_client_req *)*r;
  ps_status st = ps_client_wait(c->cl, &q, &pe);
  *r = NULL;
  return out_err(st, &pe, err);
}

int ember_step(ember_client *c, uint32_t table, ember_error *err) {
  ps_error pe = {0};
  ps_status st = ps_client_step(c->cl, table, c->step, &pe);
  if (st == PS_OK) c->step++;
  return out_err(st, &pe, err);
}

uint64_t ember_current_step(const ember_client *c) { return c->step; }
void ember_set_step(ember_client *c, uint64_t step) { c->step = step; }

int ember_barrier(ember_client *c, const char *name, uint32_t world, uint32_t timeout_ms,
                  ember_error *err) {
  ps_error pe = {0};
  ps_status st = ps_client_barrier(c->cl, name && *name ? name : "ember", world ? world : c->world,
                                   timeout_ms ? timeout_ms : c->timeout_ms, &pe);
  return out_err(st, &pe, err);
}

int ember_checkpoint(ember_client *c, const char *path, ember_error *err) {
  ps_error pe = {0};
  return out_err(ps_client_checkpoint(c->cl, c->step, path, &pe), &pe, err);
}

uint64_t ember_hash_feature(uint32_t f, uint32_t v) { return ps_criteo_key((int)f, v, 0, 0); }
uint64_t ember_hash_missing(uint32_t f) { return ps_criteo_key((int)f, 0, 1, 0); }

void ember_hash_features(uint32_t f, const uint32_t *values, size_t n, uint64_t *out) {
  for (size_t i = 0; i < n; i++) out[i] = ps_criteo_key((int)f, values[i], 0, 0);
}

/* The reader's own token and key (ps_sample.h), inline there: nothing of worker/data is linked. */
uint64_t ember_hash_value(uint32_t f, const char *value, size_t n) {
  if (n == 0) return ember_hash_missing(f);
  return ps_sample_open_key((int)f, ps_sample_token(value, n));
}
