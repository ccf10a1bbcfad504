/* ps_export_rows: an export's table read as its manifest says (see ps_export_rows.h). */
#include "ps_export_rows.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_npy.h"
#include "ps_quant.h"

ps_status ps_export_rows_path(const char *dir, const char *rel, char *out, size_t cap,
                           ps_error *err) {
  if (!rel || !*rel || rel[0] == '/' || strstr(rel, ".."))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: bad file name '%s'", dir,
                        rel ? rel : "");
  snprintf(out, cap, "%s/%s", dir, rel);
  return PS_OK;
}

/* The table's spec, its row type and, for int8, its layout, as the manifest says. */
static ps_status read_spec(const char *dir, json_t *t, ps_export_rows *x, uint64_t *rows,
                           ps_error *err) {
  const char *name = NULL, *init = NULL, *opt = NULL, *layout = NULL, *rt = "f32";
  json_int_t id = 0, dim = 0, seed = 0, n = -1, rb = 0;
  double a = 0, b = 0;
  if (json_unpack(t, "{s:I, s:s, s:I, s:s, s:F, s:F, s:I, s:s, s:I, s?s, s?{s:s, s:I}}", "id",
                  &id, "name", &name, "dim", &dim, "init", &init, "init_a", &a, "init_b", &b,
                  "seed", &seed, "optimizer", &opt, "rows", &n, "row_type", &rt, "layout",
                  "name", &layout, "row_bytes", &rb) != 0 || dim <= 0 || dim > PS_TABLE_MAX_DIM ||
      n < 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: incomplete table", dir);
  x->spec.id = (uint32_t)id;
  snprintf(x->spec.name, sizeof x->spec.name, "%s", name);
  x->spec.dim = (uint32_t)dim;
  x->spec.init_a = (float)a;
  x->spec.init_b = (float)b;
  x->spec.seed = (uint64_t)seed;
  *rows = (uint64_t)n;
  ps_status st = ps_init_parse(init, &x->spec.init, err);
  if (st == PS_OK) st = ps_optimizer_parse(opt, &x->spec.optimizer, err);
  if (st != PS_OK) return ps_error_prefix(err, "%s/manifest.json: ", dir);
  ps_row_type r16;
  if (strcmp(rt, "int8") != 0 && ps_row_type_parse(rt, &r16, NULL) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "row_type '%s' is not one this build reads "
                        "(f32, f16, bf16, int8)", rt);
  snprintf(x->row_type, sizeof x->row_type, "%s", rt);
  /* A 16-bit table's unseen keys get its initial row rounded once, as the store gives them */
  if (strcmp(rt, "int8") != 0) x->spec.row_type = r16;
  size_t want = ps_quant_int8_row_bytes(x->spec.dim);
  if (!strcmp(rt, "int8") && (!layout || strcmp(layout, PS_QUANT_INT8_LAYOUT) != 0 ||
                              (size_t)rb != want))
    return ps_error_set(err, PS_ERR_INVALID, "row_type int8 with layout %s of %lld bytes a "
                        "row; this build reads %s, dim + 8 = %zu bytes",
                        layout ? layout : "(none)", (long long)rb, PS_QUANT_INT8_LAYOUT, want);
  return PS_OK;
}

/* The keys and values files, checked against the row type and the manifest's count. */
static ps_status read_rows(const char *dir, json_t *t, ps_export_rows *x, uint64_t rows,
                           uint32_t shard, uint32_t shards, ps_error *err) {
  const char *kf = NULL, *vf = NULL;
  if (json_unpack(t, "{s:s, s:s}", "keys", &kf, "values", &vf) != 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/manifest.json: no keys or values file", dir);
  char kp[4400], vp[4400];
  uint64_t nk = 0, nv = 0, *keys = NULL;
  void *values = NULL;
  bool int8 = !strcmp(x->row_type, "int8");
  /* f16 and bf16 rows ("<f2", bf16's bits as "<u2") stay 16-bit: ps_rowset widens a row
   * (exactly) when it is asked for, so a 16-bit export takes half an f32 one's memory */
  ps_row_type r16 = PS_ROW_F32;
  if (!int8) (void)ps_row_type_parse(x->row_type, &r16, NULL);
  const char *descr = r16 == PS_ROW_F16 ? "<f2" : r16 == PS_ROW_BF16 ? "<u2" : "<f4";
  ps_status st = ps_export_rows_path(dir, kf, kp, sizeof kp, err);
  if (st == PS_OK) st = ps_export_rows_path(dir, vf, vp, sizeof vp, err);
  if (st == PS_OK) st = ps_npy_load(kp, "<u8", 0, &nk, (void **)&keys, err);
  if (st == PS_OK) {
    st = int8 ? ps_npy_load(vp, "|u1", ps_quant_int8_row_bytes(x->spec.dim), &nv, &values, err)
              : ps_npy_load(vp, descr, x->spec.dim, &nv, &values, err);
    if (st == PS_ERR_INVALID) ps_error_prefix(err, "the manifest says row_type %s: ", x->row_type);
  }
  if (st == PS_OK && (nk != nv || nk != rows))
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: %" PRIu64 " keys and %" PRIu64 " rows, the "
                      "manifest says %" PRIu64, dir, nk, nv, rows);
  if (st != PS_OK) {
    free(keys);
    free(values);
    return st;
  }
  ps_rowset_form form = int8 ? PS_ROWSET_INT8
                        : r16 == PS_ROW_F16 ? PS_ROWSET_F16
                        : r16 == PS_ROW_BF16 ? PS_ROWSET_BF16 : PS_ROWSET_F32;
  st = ps_rowset_create(keys, values, nk, x->spec.dim, form, shard, shards, &x->rows, err);
  return st == PS_OK ? st : ps_error_prefix(err, "%s: ", dir);
}

static json_t *load_manifest(const char *dir, json_error_t *je) {
  char p[4200];
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  return json_load_file(p, 0, je);
}

bool ps_export_rows_is_export(const char *dir) {
  json_error_t je;
  json_t *m = load_manifest(dir, &je);
  const char *fmt = json_string_value(json_object_get(m, "format"));
  bool yes = fmt && !strcmp(fmt, "ember-export");
  json_decref(m);
  return yes;
}

/* with_rows false: the manifest's step, spec and row type only (ps_export_rows_spec). */
static ps_status load(const char *dir, bool with_rows, uint32_t shard, uint32_t shards,
                      ps_export_rows *x, ps_error *err) {
  memset(x, 0, sizeof *x);
  json_error_t je;
  json_t *m = load_manifest(dir, &je), *tabs = NULL;
  const char *fmt = NULL;
  json_int_t ver = 0, step = 0;
  uint64_t rows = 0;
  ps_status st = PS_OK;
  if (!m)
    st = ps_error_set(err, PS_ERR_INVALID, "not an export (%s/manifest.json: %s)", dir, je.text);
  else if (json_unpack(m, "{s:s, s:I, s:I, s:o}", "format", &fmt, "version", &ver, "step", &step,
                       "tables", &tabs) != 0 || strcmp(fmt, "ember-export") != 0 ||
           !json_is_array(tabs) || json_array_size(tabs) != 1)
    st = ps_error_set(err, PS_ERR_INVALID, "%s/manifest.json is not an ember-export manifest of "
                      "one table", dir);
  else if (ver != 1)
    st = ps_error_set(err, PS_ERR_INVALID, "%s/manifest.json: version %lld, this build reads 1",
                      dir, (long long)ver);
  x->step = (uint64_t)step;
  if (st == PS_OK) st = read_spec(dir, json_array_get(tabs, 0), x, &rows, err);
  if (st == PS_OK && with_rows)
    st = read_rows(dir, json_array_get(tabs, 0), x, rows, shard, shards, err);
  json_decref(m);
  if (st != PS_OK) ps_export_rows_free(x);
  return st;
}

ps_status ps_export_rows_load(const char *dir, uint32_t shard, uint32_t shards,
                              ps_export_rows *x, ps_error *err) {
  return load(dir, true, shard, shards, x, err);
}

ps_status ps_export_rows_spec(const char *dir, ps_export_rows *x, ps_error *err) {
  return load(dir, false, 0, 0, x, err);
}

void ps_export_rows_free(ps_export_rows *x) { ps_rowset_destroy(&x->rows); }
