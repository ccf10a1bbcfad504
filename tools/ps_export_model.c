/* ps_export_model: an export opened for scoring (see ps_export_model.h for the design). */
#include "ps_export_model.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_npy.h"
#include "ps_quant.h"
#include "ps_store.h"

struct ps_export_model {
  char dir[4096], schema_file[4200];
  json_t *man;               /* kept: the model's strings point into it */
  const char *mlp_bot, *mlp_top, *row_type;
  int emb_dim, dcn_layers, dcn_rank;
  ps_dlrm_interaction interaction;
  uint64_t step, hash_buckets, rows;
  ps_schema *schema;
  ps_table_spec table;
  float *params;
  size_t nparams;
  uint64_t *keys;
  void *values;              /* rows * row_bytes: float32 rows or fused int8 rows */
  size_t row_bytes;
  int int8;
  uint32_t *slot;            /* open addressing: row index + 1, 0 empty */
  uint64_t mask;
};

/* A file the manifest names, inside the export (no absolute path, no ".."). */
static ps_status file_path(const ps_export_model *x, const char *rel, char *out, size_t cap,
                           ps_error *err) {
  if (!rel || !*rel || rel[0] == '/' || strstr(rel, ".."))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: bad file name '%s'", x->dir,
                        rel ? rel : "");
  snprintf(out, cap, "%s/%s", x->dir, rel);
  return PS_OK;
}

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
  ps_status st = file_path(x, params, p, sizeof p, err);
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
  else st = file_path(x, file, x->schema_file, sizeof x->schema_file, err);
  if (st == PS_OK && (st = ps_schema_load(x->schema_file, &x->schema, err)) != PS_OK)
    return ps_error_prefix(err, "schema: ");
  char mine[256];
  if (st == PS_OK) ps_schema_signature(x->schema, mine, sizeof mine);
  if (st == PS_OK && strcmp(sig, mine) != 0)
    st = ps_error_set(err, PS_ERR_INVALID, "schema %s (%s) is not the one the export was "
                      "trained with (%s)", x->schema_file, mine, sig);
  return st;
}

/* The table's spec (for initial rows), its row type and its layout, as the manifest says. */
static ps_status read_table(ps_export_model *x, json_t *t, ps_error *err) {
  const char *name = NULL, *init = NULL, *opt = NULL, *layout = NULL;
  json_int_t id = 0, dim = 0, seed = 0, rows = -1, rb = 0;
  double a = 0, b = 0;
  x->row_type = "f32"; /* exports before the line existed */
  if (json_unpack(t, "{s:I, s:s, s:I, s:s, s:F, s:F, s:I, s:s, s:I, s?s, s?{s:s, s:I}}", "id",
                  &id, "name", &name, "dim", &dim, "init", &init, "init_a", &a, "init_b", &b,
                  "seed", &seed, "optimizer", &opt, "rows", &rows, "row_type", &x->row_type,
                  "layout", "name", &layout, "row_bytes", &rb) != 0 || dim <= 0 || rows < 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: incomplete table", x->dir);
  if (dim != x->emb_dim)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: the table's dim %lld is not the "
                        "model's emb_dim %d", x->dir, (long long)dim, x->emb_dim);
  x->table.id = (uint32_t)id;
  snprintf(x->table.name, sizeof x->table.name, "%s", name);
  x->table.dim = (uint32_t)dim;
  x->table.init_a = (float)a;
  x->table.init_b = (float)b;
  x->table.seed = (uint64_t)seed;
  x->rows = (uint64_t)rows;
  ps_status st = ps_init_parse(init, &x->table.init, err);
  if (st == PS_OK) st = ps_optimizer_parse(opt, &x->table.optimizer, err);
  if (st != PS_OK) return ps_error_prefix(err, "%s/manifest.json: ", x->dir);
  x->int8 = !strcmp(x->row_type, "int8");
  if (!x->int8 && strcmp(x->row_type, "f32") != 0)
    return ps_error_set(err, PS_ERR_INVALID, "row_type '%s' is not one this build reads "
                        "(f32, int8)", x->row_type);
  x->row_bytes = x->int8 ? ps_quant_int8_row_bytes(x->table.dim) : x->table.dim * sizeof(float);
  if (x->int8 && (!layout || strcmp(layout, PS_QUANT_INT8_LAYOUT) != 0 ||
                  (size_t)rb != x->row_bytes))
    return ps_error_set(err, PS_ERR_INVALID, "row_type int8 with layout %s of %lld bytes a "
                        "row; this build reads %s, dim + 8 = %zu bytes",
                        layout ? layout : "(none)", (long long)rb, PS_QUANT_INT8_LAYOUT,
                        x->row_bytes);
  return PS_OK;
}

static uint64_t slot_of(const ps_export_model *x, uint64_t key) { return ps_mix64(key) & x->mask; }

static ps_status build_index(ps_export_model *x, ps_error *err) {
  uint64_t cap = 16;
  while (cap < 2 * x->rows) cap *= 2;
  if (x->rows >= UINT32_MAX || !(x->slot = calloc(cap, sizeof *x->slot)))
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory indexing %" PRIu64 " rows", x->rows);
  x->mask = cap - 1;
  for (uint64_t i = 0; i < x->rows; i++) {
    uint64_t s = slot_of(x, x->keys[i]);
    for (; x->slot[s]; s = (s + 1) & x->mask)
      if (x->keys[x->slot[s] - 1] == x->keys[i])
        return ps_error_set(err, PS_ERR_CORRUPT, "%s: key %" PRIu64 " has two rows", x->dir,
                            x->keys[i]);
    x->slot[s] = (uint32_t)(i + 1);
  }
  return PS_OK;
}

/* The keys and values files, checked against the manifest's row type and counts. */
static ps_status read_rows(ps_export_model *x, json_t *t, ps_error *err) {
  const char *kf = NULL, *vf = NULL;
  if (json_unpack(t, "{s:s, s:s}", "keys", &kf, "values", &vf) != 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: no keys or values file", x->dir);
  char kp[4400], vp[4400];
  uint64_t nk = 0, nv = 0;
  ps_status st = file_path(x, kf, kp, sizeof kp, err);
  if (st == PS_OK) st = file_path(x, vf, vp, sizeof vp, err);
  if (st == PS_OK) st = ps_npy_load(kp, "<u8", 0, &nk, (void **)&x->keys, err);
  if (st == PS_OK) {
    st = x->int8 ? ps_npy_load(vp, "|u1", x->row_bytes, &nv, &x->values, err)
                 : ps_npy_load(vp, "<f4", x->table.dim, &nv, &x->values, err);
    if (st == PS_ERR_INVALID) ps_error_prefix(err, "the manifest says row_type %s: ", x->row_type);
  }
  if (st == PS_OK && (nk != nv || nk != x->rows))
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: %" PRIu64 " keys and %" PRIu64 " rows, the "
                      "manifest says %" PRIu64, x->dir, nk, nv, x->rows);
  return st == PS_OK ? build_index(x, err) : st;
}

ps_status ps_export_model_open(const char *dir, const char *schema, ps_export_model **out,
                               ps_error *err) {
  *out = NULL;
  ps_export_model *x = calloc(1, sizeof *x);
  if (!x) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  snprintf(x->dir, sizeof x->dir, "%s", dir);
  char p[4200];
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  json_error_t je;
  const char *fmt = NULL;
  json_int_t ver = 0, step = 0;
  json_t *tabs = NULL;
  ps_status st = PS_OK;
  if (!(x->man = json_load_file(p, 0, &je)))
    st = ps_error_set(err, PS_ERR_INVALID, "not an export (%s: %s)", p, je.text);
  else if (json_unpack(x->man, "{s:s, s:I, s:I, s:o}", "format", &fmt, "version", &ver, "step",
                       &step, "tables", &tabs) != 0 || strcmp(fmt, "ember-export") != 0 ||
           !json_is_array(tabs) || json_array_size(tabs) != 1)
    st = ps_error_set(err, PS_ERR_INVALID, "%s is not an ember-export manifest of one table", p);
  else if (ver != 1)
    st = ps_error_set(err, PS_ERR_INVALID, "%s: version %lld, this build reads 1", p, (long long)ver);
  x->step = (uint64_t)step;
  if (st == PS_OK) st = read_model(x, err);
  if (st == PS_OK) st = read_schema(x, schema, err);
  if (st == PS_OK) st = read_table(x, json_array_get(tabs, 0), err);
  if (st == PS_OK) st = read_rows(x, json_array_get(tabs, 0), err);
  if (st != PS_OK) {
    ps_export_model_close(&x);
    return st;
  }
  *out = x;
  return PS_OK;
}

void ps_export_model_close(ps_export_model **xp) {
  if (!xp || !*xp) return;
  ps_export_model *x = *xp;
  ps_schema_destroy(&x->schema);
  json_decref(x->man);
  free(x->params);
  free(x->keys);
  free(x->values);
  free(x->slot);
  free(x);
  *xp = NULL;
}

const char *ps_export_model_dir(const ps_export_model *x) { return x->dir; }
uint64_t ps_export_model_step(const ps_export_model *x) { return x->step; }
const ps_schema *ps_export_model_schema(const ps_export_model *x) { return x->schema; }
const char *ps_export_model_schema_file(const ps_export_model *x) { return x->schema_file; }
uint64_t ps_export_model_hash_buckets(const ps_export_model *x) { return x->hash_buckets; }
const ps_table_spec *ps_export_model_table(const ps_export_model *x) { return &x->table; }
const char *ps_export_model_row_type(const ps_export_model *x) { return x->row_type; }
uint64_t ps_export_model_rows(const ps_export_model *x) { return x->rows; }
size_t ps_export_model_row_bytes(const ps_export_model *x) { return x->row_bytes; }

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
  const uint32_t dim = x->table.dim;
  for (size_t i = 0; i < n; i++) {
    float *row = out + i * dim;
    uint64_t s = slot_of(x, keys[i]);
    while (x->slot[s] && x->keys[x->slot[s] - 1] != keys[i]) s = (s + 1) & x->mask;
    if (!x->slot[s]) {
      ps_store_init_row(&x->table, keys[i], row);
      continue;
    }
    const unsigned char *v = (const unsigned char *)x->values + (x->slot[s] - 1) * x->row_bytes;
    if (x->int8) ps_quant_int8_decode(v, dim, row);
    else memcpy(row, v, x->row_bytes);
  }
  return PS_OK;
}
