/* ps_export_model: an export opened for scoring (see ps_export_model.h for the design). */
#include "ps_export_model.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_export_rows.h"
#include "ps_npy.h"
#include "ps_store.h"

struct ps_export_model {
  char dir[4096], schema_file[4200];
  json_t *man;               /* kept: the model's strings point into it */
  const char *mlp_bot, *mlp_top;
  int emb_dim, dcn_layers, dcn_rank;
  ps_dlrm_interaction interaction;
  uint64_t hash_buckets;
  ps_schema *schema;
  float *params;
  size_t nparams;
  ps_export_rows rows;       /* the table: spec, row type, rows as exported */
};

static ps_status read_model(ps_export_model *x, ps_error *err) {
  json_t *m = json_object_get(x->man, "model");
  const char *it = NULL, *params = NULL;
  json_int_t dim = 0, np = 0, layers = 0, rank = 0;
  if (json_unpack(m, "{s:s, s:s, s:I, s:s, s:s, s:I, s?I, s?I}", "mlp_bot", &x->mlp_bot,
                  "mlp_top", &x->mlp_top, "emb_dim", &dim, "interaction", &it, "params", &params,
                  "nparams", &np, "dcn_layers", &layers, "dcn_rank", &rank) != 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: no model shape", x->dir);
  x->emb_dim = (int)dim;
  x->dcn_layers = (int)layers;
  x->dcn_rank = (int)rank;
  if (!strcmp(it, "dot")) x->interaction = PS_DLRM_DOT;
  else if (!strcmp(it, "dcn") && layers >= 1 && rank >= 0) x->interaction = PS_DLRM_DCN;
  else
    return ps_error_set(err, PS_ERR_INVALID, "%s: interaction '%s' is not supported by this "
                        "build (it runs: dot, dcn)", x->dir, it);
  char p[4400];
  uint64_t n = 0;
  ps_status st = ps_export_rows_path(x->dir, params, p, sizeof p, err);
  if (st == PS_OK) st = ps_npy_load(p, "<f4", 0, &n, (void **)&x->params, err);
  if (st == PS_OK && n != (uint64_t)np)
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s has %" PRIu64 " parameters, the manifest says %lld",
                      p, n, (long long)np);
  x->nparams = (size_t)n;
  return st;
}

/* The export's schema (or the user's, of the same signature) and the key hashing. */
static ps_status read_schema(ps_export_model *x, const char *user, ps_error *err) {
  const char *file = NULL, *sig = NULL;
  json_int_t hb = -1;
  if (json_unpack(x->man, "{s:{s:s, s:s}, s:{s:I}}", "schema", "file", &file, "signature", &sig,
                  "hashing", "hash_buckets", &hb) != 0 || hb < 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: no schema or hashing", x->dir);
  x->hash_buckets = (uint64_t)hb;
  ps_status st = PS_OK;
  if (user) snprintf(x->schema_file, sizeof x->schema_file, "%s", user);
  else if (!strcmp(file, "criteo")) snprintf(x->schema_file, sizeof x->schema_file, "criteo");
  else st = ps_export_rows_path(x->dir, file, x->schema_file, sizeof x->schema_file, err);
  if (st == PS_OK && (st = ps_schema_load(x->schema_file, &x->schema, err)) != PS_OK)
    return ps_error_prefix(err, "schema: ");
  char mine[256];
  if (st == PS_OK) ps_schema_signature(x->schema, mine, sizeof mine);
  if (st == PS_OK && strcmp(sig, mine) != 0)
    st = ps_error_set(err, PS_ERR_INVALID, "schema %s (%s) is not the one the export was "
                      "trained with (%s)", x->schema_file, mine, sig);
  return st;
}

/* rows false: ps_export_model_open_model (no rows read). */
static ps_status open_export(const char *dir, const char *schema, bool rows,
                             ps_export_model **out, ps_error *err) {
  *out = NULL;
  ps_export_model *x = calloc(1, sizeof *x);
  if (!x) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  snprintf(x->dir, sizeof x->dir, "%s", dir);
  /* the table first: it checks the manifest is an export's (format, version, row type) */
  ps_status st = rows ? ps_export_rows_load(dir, 0, 0, &x->rows, err)
                     : ps_export_rows_spec(dir, &x->rows, err);
  char p[4200];
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  json_error_t je;
  if (st == PS_OK && !(x->man = json_load_file(p, 0, &je)))
    st = ps_error_set(err, PS_ERR_IO, "%s: %s", p, je.text);
  if (st == PS_OK) st = read_model(x, err);
  if (st == PS_OK && (int)x->rows.spec.dim != x->emb_dim)
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: the table's dim %u is not the model's emb_dim %d",
                      p, x->rows.spec.dim, x->emb_dim);
  if (st == PS_OK) st = read_schema(x, schema, err);
  if (st != PS_OK) {
    ps_export_model_close(&x);
    return st;
  }
  *out = x;
  return PS_OK;
}

ps_status ps_export_model_open(const char *dir, const char *schema, ps_export_model **out,
                               ps_error *err) {
  return open_export(dir, schema, true, out, err);
}

ps_status ps_export_model_open_model(const char *dir, const char *schema, ps_export_model **out,
                                     ps_error *err) {
  return open_export(dir, schema, false, out, err);
}

void ps_export_model_close(ps_export_model **xp) {
  if (!xp || !*xp) return;
  ps_export_model *x = *xp;
  ps_schema_destroy(&x->schema);
  json_decref(x->man);
  free(x->params);
  ps_export_rows_free(&x->rows);
  free(x);
  *xp = NULL;
}

const char *ps_export_model_dir(const ps_export_model *x) { return x->dir; }
uint64_t ps_export_model_step(const ps_export_model *x) { return x->rows.step; }
const ps_schema *ps_export_model_schema(const ps_export_model *x) { return x->schema; }
const char *ps_export_model_schema_file(const ps_export_model *x) { return x->schema_file; }
uint64_t ps_export_model_hash_buckets(const ps_export_model *x) { return x->hash_buckets; }
const ps_table_spec *ps_export_model_table(const ps_export_model *x) { return &x->rows.spec; }
const char *ps_export_model_row_type(const ps_export_model *x) { return x->rows.row_type; }
uint64_t ps_export_model_rows(const ps_export_model *x) {
  return x->rows.rows ? ps_rowset_rows(x->rows.rows) : 0;
}
size_t ps_export_model_row_bytes(const ps_export_model *x) {
  return x->rows.rows ? ps_rowset_row_bytes(x->rows.rows) : 0;
}

const float *ps_export_model_params(const ps_export_model *x, size_t *n) {
  *n = x->nparams;
  return x->params;
}

void ps_export_model_config(const ps_export_model *x, int max_batch, ps_dlrm_config *cfg) {
  ps_dlrm_config_shape(cfg, x->mlp_bot, x->mlp_top, x->emb_dim, ps_schema_ncat(x->schema),
                       max_batch);
  ps_schema_pool_mask(x->schema, &cfg->pool.mean, &cfg->pool.period);
  cfg->interaction = x->interaction;
  cfg->dcn_layers = x->dcn_layers;
  cfg->dcn_rank = x->dcn_rank;
}

ps_status ps_export_model_pull(const ps_export_model *x, const uint64_t *keys, size_t n,
                               float *out) {
  const uint32_t dim = x->rows.spec.dim;
  if (!x->rows.rows) return PS_ERR_INVALID; /* ps_export_model_open_model: no rows here */
  for (size_t i = 0; i < n; i++)
    if (!ps_rowset_get(x->rows.rows, keys[i], out + i * dim))
      ps_store_init_row(&x->rows.spec, keys[i], out + i * dim);
  return PS_OK;
}
