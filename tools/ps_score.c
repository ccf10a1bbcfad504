/* ps_score: see ps_score.h. Moved out of ps_predict_main.c, unchanged, for ps-serve. */
#include "ps_score.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_log.h"
#include "ps_time.h"

const ps_schema *ps_predictor_schema(const ps_predictor *p) {
  return p->ex ? ps_export_model_schema(p->ex) : ps_ckpt_schema(p->ck);
}
const char *ps_predictor_dir(const ps_predictor *p) {
  return p->ex ? ps_export_model_dir(p->ex) : ps_ckpt_dir(p->ck);
}
uint64_t ps_predictor_step(const ps_predictor *p) {
  return p->ex ? ps_export_model_step(p->ex) : ps_ckpt_step(p->ck);
}

static ps_status grow_keys(ps_predictor *p, size_t nk) {
  if (nk <= p->keys_cap) return PS_OK;
  size_t cap = nk * 2;
  uint64_t *k = realloc(p->keys, cap * sizeof *k), *u = k ? realloc(p->unique, cap * sizeof *u) : NULL;
  if (k) p->keys = k;
  if (u) p->unique = u;
  uint32_t *inv = u ? realloc(p->inverse, cap * sizeof *inv) : NULL;
  if (inv) p->inverse = inv;
  int32_t *idx = inv ? realloc(p->idx, cap * sizeof *idx) : NULL;
  if (idx) p->idx = idx;
  float *rows = idx ? realloc(p->rows, cap * (size_t)p->dim * sizeof *rows) : NULL;
  if (rows) p->rows = rows;
  if (!rows) return PS_ERR_NOMEM;
  p->keys_cap = cap;
  return PS_OK;
}

ps_status ps_predictor_init(ps_predictor *p, const char *device, int threads, int batch,
                                ps_error *err) {
  p->batch = batch;
  const ps_schema *sc = ps_predictor_schema(p);
  p->nd = ps_schema_ndense(sc);
  p->nin = p->nd > 0 ? p->nd : 1; /* no dense column: one constant 0 input, as ps-worker */
  p->nc = ps_schema_ncat(sc);
  p->dim = (int)p->table.dim;
  ps_status st = ps_kern_create(device, threads, &p->kern, err);
  if (st != PS_OK) return ps_error_prefix(err, "device '%s': ", device);
  ps_dlrm_config mc;
  if (p->ex) ps_export_model_config(p->ex, batch, &mc);
  else ps_ckpt_model_config(p->ck, batch, &mc);
  mc.precision = p->prec;
  if ((st = ps_dlrm_create(p->kern, &mc, &p->model, err)) != PS_OK)
    return ps_error_prefix(err, "the checkpoint's model: ");
  size_t np;
  const float *params = p->ex ? ps_export_model_params(p->ex, &np) : ps_ckpt_params(p->ck, &np);
  if (np != ps_dlrm_num_params(p->model))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s has %zu parameters, the model %zu",
                        p->ex ? "dense/params.npy" : "dense.bin", np, ps_dlrm_num_params(p->model));
  if ((st = ps_dlrm_set_params(p->model, params, np)) != PS_OK)
    return ps_error_set(err, st, "loading the parameters: %s", ps_status_str(st));
  uint64_t hb = p->ex ? ps_export_model_hash_buckets(p->ex) : ps_ckpt_hash_buckets(p->ck);
  if ((st = ps_sample_keymap_init(&p->km, sc, hb, err)) != PS_OK) return st;
  size_t b = (size_t)batch;
  p->rec_off = malloc(b * sizeof *p->rec_off);
  p->good = malloc(b);
  p->labels = malloc(b * sizeof(float));
  p->dense = calloc(b * (size_t)p->nin, sizeof(float));
  p->probs = malloc(b * sizeof(float));
  p->offsets = malloc((b * (size_t)p->nc + 1) * sizeof *p->offsets);
  p->ioff = malloc((b * (size_t)p->nc + 1) * sizeof *p->ioff);
  if (!p->rec_off || !p->good || !p->labels || !p->dense || !p->probs || !p->offsets ||
      !p->ioff || ps_dedup_create(&p->dedup) != PS_OK || (!p->no_eval && ps_eval_create(&p->ev) != PS_OK) ||
      grow_keys(p, b * (size_t)(p->nc ? p->nc : 1)) != PS_OK)
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory for batches of %d", batch);
  return PS_OK;
}

void ps_predictor_free(ps_predictor *p) {
  ps_dlrm_destroy(&p->model);
  ps_kern_destroy(&p->kern);
  ps_dedup_destroy(&p->dedup);
  ps_eval_destroy(&p->ev);
  if (p->km.buckets) ps_sample_keymap_free(&p->km);
  ps_sample_buf_free(&p->recs);
  free(p->rec_off);
  free(p->good);
  free(p->labels);
  free(p->dense);
  free(p->probs);
  free(p->offsets);
  free(p->ioff);
  free(p->keys);
  free(p->unique);
  free(p->inverse);
  free(p->idx);
  free(p->rows);
}

static void served_clear(ps_predictor *p);
static ps_status served_is_model(ps_predictor *p);

/* Scores the good lines of the batch (into probs, in order) and adds them to the metrics. */
ps_status ps_predictor_score(ps_predictor *p, int *n_out) {
  size_t n = 0, nk = 0, room = 0;
  for (int i = 0; i < p->nlines; i++)
    if (p->good[i]) room += (ps_sample_len(p->recs.p + p->rec_off[i]) - 8) / 8;
  ps_status st = grow_keys(p, room + 1);
  if (st != PS_OK) return st;
  p->offsets[0] = 0;
  for (int i = 0; i < p->nlines; i++) {
    if (!p->good[i]) continue;
    ps_sample_decode(p->recs.p + p->rec_off[i], p->nd, &p->km, &p->labels[n],
                     p->nd ? p->dense + n * (size_t)p->nd : p->dense, p->keys, &nk,
                     p->offsets + n * (size_t)p->nc);
    n++;
  }
  *n_out = (int)n;
  if (n == 0) return PS_OK;
  uint64_t t0 = ps_now_ns();
  if (p->nd == 0) memset(p->dense, 0, n * sizeof(float));
  size_t nu = 0;
  if ((st = ps_dedup_keys(p->dedup, p->keys, nk, p->unique, p->inverse, &nu)) != PS_OK) return st;
  if (p->cl) {
    ps_error_clear(&p->pull_err);
    /* check_step: the step every reply's rows were read from (see ps_score.h) */
    if (p->check_step) served_clear(p);
    st = ps_client_pull_unique(p->cl, p->table.id, 0, p->unique, nu, p->rows,
                               &p->pull_err);
    if (st == PS_OK && p->check_step) st = served_is_model(p);
  }
  else if (p->ex)
    st = ps_export_model_pull(p->ex, p->unique, nu, p->rows);
  else
    st = ps_ckpt_pull(p->ck, p->unique, nu, p->rows);
  if (st != PS_OK) return st;
  for (size_t i = 0; i < nk; i++) p->idx[i] = (int32_t)p->inverse[i];
  for (size_t i = 0; i <= n * (size_t)p->nc; i++) p->ioff[i] = (int32_t)p->offsets[i];
  uint64_t t1 = ps_now_ns();
  p->t_rows += ps_ns_to_s(t1 - t0);
  ps_dlrm_batch mb = {.batch = (int)n, .dense = p->dense, .labels = p->labels, .nrows = (int)nu,
                      .rows = p->rows, .nnz = (int)nk, .idx = p->idx, .offsets = p->ioff};
  st = ps_dlrm_predict(p->model, &mb, p->probs);
  p->t_model += ps_ns_to_s(ps_now_ns() - t1);
  if (st != PS_OK) return st;
  return p->ev ? ps_eval_add(p->ev, p->probs, p->labels, n) : PS_OK;
}

/* Server i's STATS: it must be shard i of `n`; *step = the checkpoint step it reports serving
 * (-1: it reports none). */
static ps_status server_shard(ps_client *cl, size_t i, size_t n, long long *step, ps_error *err) {
  char *text = NULL;
  ps_status st = ps_client_stats(cl, i, &text, err);
  if (st != PS_OK) return st; /* err names the server */
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  json_int_t shard = -1, shards = -1, ck = -1;
  if (!j || json_unpack(j, "{s:I, s:I, s?{s:I}}", "shard", &shard, "shards", &shards,
                        "last_checkpoint", "step", &ck) != 0)
    st = ps_error_set(err, PS_ERR_PROTO, "%s: unreadable statistics", ps_client_url(cl, i));
  else if (shards != (json_int_t)n)
    st = ps_error_set(err, PS_ERR_INVALID, "%zu server(s), the checkpoint has %lld shard(s) (%s "
                      "says so): give one URL per shard, in shard order", n, (long long)shards,
                      ps_client_url(cl, i));
  else if (shard != (json_int_t)i)
    st = ps_error_set(err, PS_ERR_INVALID, "URL %zu (%s) is shard %lld: give one URL per shard, "
                      "in shard order", i + 1, ps_client_url(cl, i), (long long)shard);
  json_decref(j);
  *step = ck;
  return st;
}

ps_status ps_score_servers_step(ps_client *cl, long long *step, ps_error *err) {
  size_t n = ps_client_servers(cl);
  *step = -1;
  for (size_t i = 0; i < n; i++) {
    long long si = -1;
    ps_status st = server_shard(cl, i, n, &si, err);
    if (st != PS_OK) return st;
    if (si < 0 || (i && si != *step)) return *step = -1, PS_OK;
    *step = si;
  }
  return PS_OK;
}

/* check_step: forgets what earlier replies named. */
static void served_clear(ps_predictor *p) {
  uint64_t lo, hi;
  for (size_t i = 0; i < ps_client_servers(p->cl); i++) ps_client_served_take(p->cl, i, &lo, &hi);
}

/* check_step: every pull reply's rows were read from the model's step (each serving shard
 * names it in the reply: ps_client_served_take), else PS_ERR_CONFLICT (pull_err says which
 * shard served which). Shards that got no key of this pull name nothing, and need not. */
static ps_status served_is_model(ps_predictor *p) {
  const uint64_t want = ps_predictor_step(p) + 1;
  for (size_t i = 0; i < ps_client_servers(p->cl); i++) {
    uint64_t lo, hi;
    if (!ps_client_served_take(p->cl, i, &lo, &hi) || (lo == want && hi == want)) continue;
    if (lo == 0)
      return ps_error_set(&p->pull_err, PS_ERR_CONFLICT, "%s named no checkpoint step in its "
                          "pull reply (not a serving shard, or an older ps-server)",
                          ps_client_url(p->cl, i));
    return ps_error_set(&p->pull_err, PS_ERR_CONFLICT, "%s served rows of steps %" PRIu64
                        "..%" PRIu64 " to the pull, the model is step %" PRIu64,
                        ps_client_url(p->cl, i), lo - 1, hi - 1, want - 1);
  }
  return PS_OK;
}

/* --servers: one serving server per shard of the checkpoint; the table attached by its name
 * and checked against the checkpoint (shard order, the rows' dim, the step served). */
ps_status ps_predictor_connect(ps_predictor *p, const char *urls, ps_error *err) {
  ps_client_options o;
  ps_client_options_default(&o);
  ps_status st = ps_client_create_list(urls, &o, &p->cl, err);
  if (st != PS_OK) return st;
  size_t n = ps_client_servers(p->cl);
  uint64_t want = ps_predictor_step(p);
  for (size_t i = 0; i < n; i++) {
    long long step = -1;
    if ((st = server_shard(p->cl, i, n, &step, err)) != PS_OK) return st;
    if (step < 0) {
      PS_WARN("%s reports no checkpoint it serves: scoring the rows it holds now",
              ps_client_url(p->cl, i));
      p->check_step = 0; /* nothing to check a pull against */
    }
    else if ((uint64_t)step != want && !p->any_step)
      return ps_error_set(err, PS_ERR_INVALID, "%s serves step %lld, the checkpoint %s is step "
                          "%" PRIu64 ": give %s", ps_client_url(p->cl, i), step, ps_predictor_dir(p),
                          want, p->ex ? "--export an export of the step served"
                                      : "--checkpoint the step served");
  }
  char exdim[16];
  if (p->ex) snprintf(exdim, sizeof exdim, "%u", ps_export_model_table(p->ex)->dim);
  const char *name = p->ex ? ps_export_model_table(p->ex)->name : ps_ckpt_table_name(p->ck);
  const char *dim = p->ex ? exdim : ps_ckpt_config(p->ck, "emb-dim");
  if ((st = ps_client_attach(p->cl, name, &p->table, err)) != PS_OK)
    return ps_error_prefix(err, "the checkpoint's table: ");
  if ((int)p->table.dim != atoi(dim))
    return ps_error_set(err, PS_ERR_INVALID, "the servers' table '%s' has rows of %u values, "
                        "the checkpoint's emb-dim is %s: they serve another model", name,
                        p->table.dim, dim);
  return PS_OK;
}

ps_status ps_predictor_open(ps_predictor *p, const char *ckpt, const char *export,
                            const char *servers, const char *schema, ps_error *err) {
  if (!ckpt == !export)
    return ps_error_set(err, PS_ERR_INVALID, "give one of --checkpoint DIR and --export DIR");
  ps_status st = export ? (servers ? ps_export_model_open_model(export, schema, &p->ex, err)
                                   : ps_export_model_open(export, schema, &p->ex, err))
                 : servers ? ps_ckpt_open_model(ckpt, schema, &p->ck, err)
                           : ps_ckpt_open(ckpt, schema, &p->ck, err);
  if (st != PS_OK)
    return ps_error_prefix(err, "--%s %s: ", export ? "export" : "checkpoint", export ? export : ckpt);
  return PS_OK;
}

void ps_predictor_close(ps_predictor *p) {
  ps_predictor_free(p);
  ps_client_destroy(&p->cl);
  ps_ckpt_close(&p->ck);
  ps_export_model_close(&p->ex);
}

int ps_tool_fail(const char *prog, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return rc;
}
