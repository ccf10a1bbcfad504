/* ps-export: a checkpoint's model as files a NumPy or PyTorch user loads in a few lines — the
 * dense parameters per layer and flat, every embedding row (keys uint64 and values float32, per
 * table) as .npy (ps_npy.h), and manifest.json: the model's shape and layer layout, the schema,
 * the key hashing (the constants and per-feature buckets of docs/CHECKPOINTS.md), the tables'
 * specs (their initial-row rule for keys with no row) and the step.
 *
 * Design decisions:
 * - The checkpoint is opened read-only (ps_ckpt.h) and the rows come from the shards' snapshots
 *   through the store's own scan (ps_store_scan), so the record format stays the store's.
 * - Rows are streamed shard by shard, in no useful order (keys are hashes); a user sorts the
 *   keys once (np.argsort) to look rows up. Memory stays one row, whatever the table's size.
 * - --quantize int8 writes each row in FBGEMM's fused row-wise 8-bit layout (ps_quant.h: dim
 *   bytes, then a float32 scale and bias; dim + 8 bytes a row instead of 4 * dim) for serving,
 *   and the manifest's table says row_type int8 and the layout, so a reader (ps-predict
 *   --export, NumPy) decodes it without guessing; a plain export says row_type f32.
 * - Only the values are exported: the optimizer state (Adagrad sums, ...) is for training,
 *   which resumes from the checkpoint itself.
 * - A DCN model's cross layers are exported as their own matrices (V_l [R, D], U_l [D, R],
 *   b_l [D]; full rank W_l [D, D]) in the shapes TorchRec's LowRankCrossNet keeps them (its
 *   V_kernels, W_kernels, bias), with their offsets into params.npy, so a user copies them
 *   into a module without knowing the flat layout; the dot model's manifest is unchanged. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_ckpt.h"
#include "ps_cli.h"
#include "ps_dlrm.h"
#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_kernels.h"
#include "ps_log.h"
#include "ps_npy.h"
#include "ps_quant.h"
#include "ps_sample.h"
#include "ps_time.h"

#define PROG "ps-export"

typedef struct rows_out {
  ps_npy *keys, *values;
  uint64_t rows;
  ps_error *err;
  uint8_t *qrow; /* --quantize int8: one fused row (ps_quant.h), else NULL */
  uint32_t dim;
  const ps_table_spec *sp; /* its row_type: how the values are written (not int8) */
} rows_out;

/* A 16-bit table's rows are written in their type (the scan widened them exactly, so this
 * narrowing gives the stored bits back): f16 as "<f2", bf16 as its bits, "<u2" (NumPy has no
 * bfloat16; manifest.json's row_type says so). */
static const char *const k_values_descr[PS_ROW_TYPE_COUNT_] = {"<f4", "<f2", "<u2"};

static ps_status put_row(void *ctx, uint64_t key, const float *values) {
  rows_out *o = ctx;
  uint16_t narrow[PS_TABLE_MAX_DIM];
  const void *v = values;
  if (o->sp->row_type != PS_ROW_F32) {
    ps_row_narrow(o->sp->row_type, values, narrow, o->sp->dim);
    v = narrow;
  }
  ps_status st = ps_npy_write(o->keys, &key, 1, o->err);
  if (st == PS_OK) st = ps_npy_write(o->values, v, 1, o->err);
  o->rows += st == PS_OK;
  return st;
}

/* --quantize int8: the row quantized (FBGEMM's fused row-wise layout) instead of its floats;
 * a 16-bit table's rows are quantized from the exactly widened stored values. */
static ps_status put_row_int8(void *ctx, uint64_t key, const float *values) {
  rows_out *o = ctx;
  if (ps_quant_int8_encode(values, o->dim, o->qrow) != PS_OK)
    return ps_error_set(o->err, PS_ERR_CORRUPT, "the row of key %" PRIu64 " holds a value that "
                        "is not finite: it has no int8 form", key);
  ps_status st = ps_npy_write(o->keys, &key, 1, o->err);
  if (st == PS_OK) st = ps_npy_write(o->values, o->qrow, 1, o->err);
  o->rows += st == PS_OK;
  return st;
}

/* The manifest's row_type and, for int8, the layout a reader needs to decode the values file. */
static void describe_row_type(json_t *tab, bool int8, const ps_table_spec *sp) {
  uint32_t dim = sp->dim;
  json_object_set_new(tab, "row_type", json_string(int8 ? "int8" : ps_row_type_name(sp->row_type)));
  if (!int8) return;
  json_object_set_new(tab, "layout", json_pack(
      "{s:s, s:I, s:s, s:I, s:I, s:s}", "name", PS_QUANT_INT8_LAYOUT, "row_bytes",
      (json_int_t)ps_quant_int8_row_bytes(dim), "q", "uint8 [dim] at byte 0",
      "scale_offset", (json_int_t)dim, "bias_offset", (json_int_t)dim + 4, "dequantize",
      "q * scale + bias (scale, bias: little-endian float32); scale = (max - min) / 255, "
      "bias = min, |error| <= scale / 2"));
}

/* Every row of the table, all shards, into OUT/embeddings/table_ID.{keys,values}.npy (int8:
 * table_ID.values.int8.npy, uint8 [rows, dim + 8]). */
static ps_status export_rows(ps_ckpt *ck, const char *out, json_t *tab, bool int8,
                             ps_error *err) {
  const ps_table_spec *sp = ps_ckpt_table(ck);
  char kp[4400], vp[4400], vrel[64];
  snprintf(vrel, sizeof vrel, "embeddings/table_%u.values%s.npy", sp->id, int8 ? ".int8" : "");
  snprintf(kp, sizeof kp, "%s/embeddings/table_%u.keys.npy", out, sp->id);
  snprintf(vp, sizeof vp, "%s/%s", out, vrel);
  rows_out o = {NULL, NULL, 0, err, NULL, sp->dim, sp};
  ps_status st = PS_OK;
  if (int8 && !(o.qrow = malloc(ps_quant_int8_row_bytes(sp->dim))))
    st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  if (st == PS_OK) st = ps_npy_create(kp, "<u8", 0, &o.keys, err);
  if (st == PS_OK)
    st = int8 ? ps_npy_create(vp, "|u1", ps_quant_int8_row_bytes(sp->dim), &o.values, err)
              : ps_npy_create(vp, k_values_descr[sp->row_type], sp->dim, &o.values, err);
  uint64_t t0 = ps_now_ns();
  for (uint32_t i = 0; st == PS_OK && i < ps_ckpt_nshards(ck); i++) {
    st = ps_store_scan(ps_ckpt_shard(ck, i), sp->id, int8 ? put_row_int8 : put_row, &o, err);
    PS_INFO("shard %u of %u: %" PRIu64 " rows so far (%.1f s)", i + 1, ps_ckpt_nshards(ck),
            o.rows, ps_ns_to_s(ps_now_ns() - t0));
  }
  free(o.qrow);
  ps_error e2;
  ps_status c1 = ps_npy_close(&o.keys, &e2), c2 = ps_npy_close(&o.values, &e2);
  if (st == PS_OK && (c1 != PS_OK || c2 != PS_OK)) st = ps_error_set(err, e2.code, "%s", e2.msg);
  json_object_set_new(tab, "rows", json_integer((json_int_t)o.rows));
  json_object_set_new(tab, "keys", json_sprintf("embeddings/table_%u.keys.npy", sp->id));
  json_object_set_new(tab, "values", json_string(vrel));
  describe_row_type(tab, int8, sp);
  return st;
}

/* One matrix or vector of the flat parameters as OUT/dense/NAME.npy, and its entry in o. */
static ps_status save_part(const char *out, const char *name, const float *p, size_t off,
                           int rows, int cols, json_t *o, const char *key, ps_error *err) {
  char path[4400];
  snprintf(path, sizeof path, "%s/dense/%s.npy", out, name);
  json_object_set_new(o, key, json_sprintf("dense/%s.npy", name));
  char ok[64];
  snprintf(ok, sizeof ok, "%s_offset", key);
  json_object_set_new(o, ok, json_integer((json_int_t)off));
  return ps_npy_save(path, "<f4", (uint64_t)rows, (uint64_t)cols, p + off, err);
}

/* DCN: the cross layers (ps_dlrm.h), model.cross: per layer l, V [R, D], U [D, R] and b [D]
 * (low rank) or W [D, D] and b [D] (full rank, R = 0), so that
 * x_{l+1} = x0 * (U (V x_l) + b) + x_l, resp. x0 * (W x_l + b) + x_l. Nothing for dot. */
static ps_status export_cross(const ps_dlrm *m, const float *p, const char *out, json_t *model,
                              ps_error *err) {
  int n = ps_dlrm_num_cross(m);
  if (n == 0) return PS_OK;
  json_t *cross = json_array();
  json_object_set_new(model, "cross", cross);
  ps_status st = PS_OK;
  for (int l = 0; st == PS_OK && l < n; l++) {
    ps_dlrm_cross_layer c;
    if ((st = ps_dlrm_cross_info(m, l, &c)) != PS_OK) break;
    char name[48];
    json_t *o = json_pack("{s:i, s:i}", "dim", c.dim, "rank", c.rank);
    json_array_append_new(cross, o);
    if (c.rank > 0) {
      snprintf(name, sizeof name, "cross.%d.V", l);
      st = save_part(out, name, p, c.v_off, c.rank, c.dim, o, "V", err);
      snprintf(name, sizeof name, "cross.%d.U", l);
      if (st == PS_OK) st = save_part(out, name, p, c.u_off, c.dim, c.rank, o, "U", err);
    } else {
      snprintf(name, sizeof name, "cross.%d.W", l);
      st = save_part(out, name, p, c.w_off, c.dim, c.dim, o, "W", err);
    }
    snprintf(name, sizeof name, "cross.%d.bias", l);
    if (st == PS_OK) st = save_part(out, name, p, c.b_off, c.dim, 0, o, "bias", err);
  }
  return st;
}

/* The dense parameters: flat (dense/params.npy) and per layer, and their layout. */
static ps_status export_dense(ps_ckpt *ck, const char *out, json_t *model, ps_error *err) {
  ps_kern *k = NULL;
  ps_dlrm *m = NULL;
  ps_dlrm_config mc;
  ps_ckpt_model_config(ck, 1, &mc);
  ps_status st = ps_kern_create("cpu", 1, &k, err);
  if (st == PS_OK && (st = ps_dlrm_create(k, &mc, &m, err)) != PS_OK)
    ps_error_prefix(err, "the checkpoint's model: ");
  size_t np = 0;
  const float *p = ps_ckpt_params(ck, &np);
  if (st == PS_OK && np != ps_dlrm_num_params(m))
    st = ps_error_set(err, PS_ERR_CORRUPT, "dense.bin has %zu parameters, the model %zu", np,
                      ps_dlrm_num_params(m));
  char path[4400];
  snprintf(path, sizeof path, "%s/dense/params.npy", out);
  if (st == PS_OK) st = ps_npy_save(path, "<f4", np, 0, p, err);
  int nb = 0, nt = 0, n = st == PS_OK ? ps_dlrm_num_layers(m, &nb, &nt) : 0;
  json_t *layers = json_array();
  for (int i = 0; st == PS_OK && i < n; i++) {
    ps_dlrm_layer l;
    if ((st = ps_dlrm_layer_info(m, i, &l)) != PS_OK) break;
    char name[32];
    snprintf(name, sizeof name, "%s.%d", i < nb ? "bot" : "top", i < nb ? i : i - nb);
    snprintf(path, sizeof path, "%s/dense/%s.weight.npy", out, name);
    st = ps_npy_save(path, "<f4", (uint64_t)l.out, (uint64_t)l.in, p + l.w_off, err);
    snprintf(path, sizeof path, "%s/dense/%s.bias.npy", out, name);
    if (st == PS_OK) st = ps_npy_save(path, "<f4", (uint64_t)l.out, 0, p + l.b_off, err);
    json_array_append_new(layers, json_pack(
        "{s:s, s:i, s:i, s:b, s:o, s:o, s:I, s:I}", "name", name, "in", l.in, "out", l.out,
        "relu", l.relu, "weight", json_sprintf("dense/%s.weight.npy", name), "bias",
        json_sprintf("dense/%s.bias.npy", name), "weight_offset", (json_int_t)l.w_off,
        "bias_offset", (json_int_t)l.b_off));
  }
  json_object_set_new(model, "layers", layers);
  if (st == PS_OK) st = export_cross(m, p, out, model, err);
  json_object_set_new(model, "params", json_string("dense/params.npy"));
  json_object_set_new(model, "nparams", json_integer((json_int_t)np));
  json_object_set_new(model, "dense_inputs", json_integer(m ? ps_dlrm_num_dense(m) : 0));
  ps_dlrm_destroy(&m);
  ps_kern_destroy(&k);
  return st;
}

/* The schema's columns and the key hashing of docs/CHECKPOINTS.md ("The key hashing"). */
static ps_status describe_keys(ps_ckpt *ck, json_t *man, ps_error *err) {
  const ps_schema *sc = ps_ckpt_schema(ck);
  char sig[256];
  ps_schema_signature(sc, sig, sizeof sig);
  json_t *cols = json_array();
  static const char *types[] = {"skip", "label", "dense", "categorical"};
  for (int i = 0; i < ps_schema_ncolumns(sc); i++) {
    const ps_schema_column *c = ps_schema_column_at(sc, i);
    json_t *o = json_pack("{s:s, s:s, s:i}", "name", c->name ? c->name : "", "type",
                          types[c->type], "index", c->index);
    if (c->type == PS_COL_DENSE) json_object_set_new(o, "transform", json_string(c->log1p ? "log1p" : "none"));
    if (c->type == PS_COL_CAT && c->separator) {
      json_object_set_new(o, "separator", json_sprintf("%c", c->separator));
      json_object_set_new(o, "pooling",
                          json_string(c->pooling == PS_SCHEMA_POOL_MEAN ? "mean" : "sum"));
    }
    json_array_append_new(cols, o);
  }
  const char *sf = ps_ckpt_config(ck, "schema-file");
  json_object_set_new(man, "schema", json_pack(
      "{s:s, s:s, s:i, s:i, s:s, s:s, s:b, s:o}", "file", sf && strcmp(sf, "criteo") ? "schema.json" : "criteo",
      "signature", sig, "dense", ps_schema_ndense(sc), "categorical", ps_schema_ncat(sc),
      "format", ps_schema_fmt(sc) == PS_SCHEMA_CSV ? "csv" : "tsv", "pooling",
      ps_schema_pooling(sc) == PS_SCHEMA_POOL_MIXED  ? "mixed"
      : ps_schema_pooling(sc) == PS_SCHEMA_POOL_MEAN ? "mean"
                                                     : "sum", "header",
      ps_schema_header(sc), "columns", cols));
  ps_sample_keymap km;
  ps_status st = ps_sample_keymap_init(&km, sc, ps_ckpt_hash_buckets(ck), err);
  if (st != PS_OK) return st;
  json_t *feats = json_array();
  for (int f = 0; f < km.ncat; f++) {
    const ps_schema_column *c = ps_schema_cat(sc, f);
    json_array_append_new(feats, json_pack("{s:i, s:s, s:I, s:I}", "feature", f, "column",
                                           c->name ? c->name : "", "buckets",
                                           (json_int_t)km.buckets[f], "base", (json_int_t)km.base[f]));
  }
  ps_sample_keymap_free(&km);
  json_object_set_new(man, "hashing", json_pack(
      "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "doc", "docs/CHECKPOINTS.md#the-key-hashing",
      "hash_buckets", (json_int_t)ps_ckpt_hash_buckets(ck), "token_seed",
      (json_int_t)PS_SAMPLE_TOKEN_SEED, "key_seed", (json_int_t)PS_CRITEO_KEY_SEED, "shard_seed",
      (json_int_t)PS_HASH_SEED_SHARD, "missing_token", (json_int_t)PS_SAMPLE_TOK_MISSING,
      "shards", (json_int_t)ps_ckpt_nshards(ck), "features", feats));
  return PS_OK;
}

static ps_status export_all(ps_ckpt *ck, const char *out, bool int8, ps_error *err) {
  char path[4400];
  snprintf(path, sizeof path, "%s/dense", out);
  if (ps_mkdir_p(path) != PS_OK) return ps_error_set(err, PS_ERR_IO, "cannot create %s", path);
  snprintf(path, sizeof path, "%s/embeddings", out);
  if (ps_mkdir_p(path) != PS_OK) return ps_error_set(err, PS_ERR_IO, "cannot create %s", path);
  const ps_table_spec *sp = ps_ckpt_table(ck);
  json_t *man = json_pack("{s:s, s:i, s:s, s:I}", "format", "ember-export", "version", 1,
                          "checkpoint", ps_ckpt_dir(ck), "step", (json_int_t)ps_ckpt_step(ck));
  ps_dlrm_config mc;
  ps_ckpt_model_config(ck, 1, &mc);
  bool dcn = mc.interaction == PS_DLRM_DCN;
  json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i}", "type", "dlrm", "interaction",
                            dcn ? "dcn" : "dot", "mlp_bot", ps_ckpt_config(ck, "mlp-bot"),
                            "mlp_top", ps_ckpt_config(ck, "mlp-top"), "emb_dim",
                            (json_int_t)sp->dim, "num_sparse", ps_schema_ncat(ps_ckpt_schema(ck)));
  if (dcn) {
    json_object_set_new(model, "dcn_layers", json_integer(mc.dcn_layers));
    json_object_set_new(model, "dcn_rank", json_integer(mc.dcn_rank));
  }
  json_object_set_new(man, "model", model);
  json_t *tab = json_pack("{s:I, s:s, s:I, s:s, s:f, s:f, s:I, s:s}", "id", (json_int_t)sp->id,
                          "name", sp->name, "dim", (json_int_t)sp->dim, "init",
                          ps_init_name(sp->init), "init_a", (double)sp->init_a, "init_b",
                          (double)sp->init_b, "seed", (json_int_t)sp->seed, "optimizer",
                          ps_optimizer_name(sp->optimizer));
  json_object_set_new(man, "tables", json_pack("[o]", tab));
  ps_status st = describe_keys(ck, man, err);
  const char *sf = ps_ckpt_config(ck, "schema-file");
  if (st == PS_OK && sf && strcmp(sf, "criteo") != 0) {
    snprintf(path, sizeof path, "%s/schema.json", out);
    if (ps_copy_file(ps_ckpt_schema_file(ck), path) != PS_OK)
      st = ps_error_set(err, PS_ERR_IO, "copying %s to %s: %s", ps_ckpt_schema_file(ck), path,
                        strerror(errno));
  }
  if (st == PS_OK) st = export_dense(ck, out, model, err);
  if (st == PS_OK) st = export_rows(ck, out, tab, int8, err);
  snprintf(path, sizeof path, "%s/manifest.json", out);
  if (st == PS_OK && json_dump_file(man, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) != 0)
    st = ps_error_set(err, PS_ERR_IO, "cannot write %s", path);
  json_decref(man);
  return st;
}

int main(int argc, char **argv) {
  const char *ckpt = NULL, *out = NULL, *schema = NULL, *level = "info", *quantize = "none";
  ps_cli_opt opts[] = {
      {"checkpoint", 'c', PS_CLI_STRING, &ckpt, "DIR", "a checkpoint directory (its latest) or one step-N in it", true, 0, 0},
      {"out", 'o', PS_CLI_STRING, &out, "DIR", "where to write manifest.json, dense/*.npy and embeddings/*.npy (created)", true, 0, 0},
      {"schema", 0, PS_CLI_STRING, &schema, "criteo|FILE", "the schema to describe (default: the checkpoint's; must have its signature)", false, 0, 0},
      {"quantize", 0, PS_CLI_STRING, &quantize, "none|int8", "int8: the rows as FBGEMM's fused row-wise 8-bit rows (uint8 values, a float32 scale and bias per row: dim + 8 bytes) in table_ID.values.int8.npy instead of float32 values, for serving", false, 0, 0},
      PS_CLI_LOG_LEVEL_OPT(&level),
  };
  ps_cli cli = {PROG, "Export a checkpoint's model as NumPy .npy files and a manifest (docs/CHECKPOINTS.md).",
                NULL, opts, sizeof opts / sizeof opts[0]};
  int rc = ps_cli_run_logged(&cli, argc, argv, NULL, &level);
  if (rc >= 0) return rc;
  if (strcmp(quantize, "none") != 0 && strcmp(quantize, "int8") != 0) {
    fprintf(stderr, PROG ": --quantize %s: expected none or int8\n", quantize);
    return 2;
  }
  ps_ckpt *ck = NULL;
  if ((rc = ps_ckpt_open_main(PROG, ckpt, schema, &ck)) != 0) return rc;
  ps_error err;
  uint64_t t0 = ps_now_ns();
  ps_status st = export_all(ck, out, !strcmp(quantize, "int8"), &err);
  if (st != PS_OK) fprintf(stderr, PROG ": %s\n", ps_error_str(&err));
  else PS_INFO("exported step %" PRIu64 " of %s to %s in %.2f s", ps_ckpt_step(ck),
               ps_ckpt_dir(ck), out, ps_ns_to_s(ps_now_ns() - t0));
  ps_ckpt_close(&ck);
  return st == PS_OK ? 0 : 1;
}
