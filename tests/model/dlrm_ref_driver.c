/* dlrm_ref_driver: runs the C DLRM (CPU backend) on fixed weights and batches and dumps
 * everything the PyTorch reference (dlrm_ref.py) needs to check it, as JSON:
 *   - the config, the initial flat parameters, one batch with multi-hot and empty bags;
 *   - the C loss, probabilities, every dense gradient and every embedding-row gradient;
 *   - for each dense optimizer (sgd, adagrad, adam): 20 steps on 20 fresh batches, with the
 *     embedding rows trained by plain SGD from their row gradients (as a server would), and
 *     the loss at each step.
 * INTERACTION is dot (the default) or dcn:L:R, the DCNv2 cross network with L layers of rank R
 * (R 0: full rank).
 * PRECISION (fp32, the default, or bf16) is the model's --precision; with bf16 the JSON's
 * config says "precision": "bf16" and "precision_used" what ran (fp32 on a CPU without it).
 * Usage: dlrm_ref_driver OUT.json [sum|mean] [threads] [INTERACTION] [PRECISION] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_dlrm.h"
#include "ps_kernels.h"

enum { B = 32, S = 5, D = 8, U = 60, STEPS = 20 };

static uint64_t rng = 12345;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct batch_buf {
  float dense[B * 13], labels[B];
  int32_t idx[B * S * 3], offsets[B * S + 1];
  int nnz;
} batch_buf;

static void make_batch(batch_buf *bb) {
  for (int i = 0; i < B * 13; i++) bb->dense[i] = (float)(urand() * 4.0);
  for (int i = 0; i < B; i++) bb->labels[i] = urand() < 0.4 ? 1.0f : 0.0f;
  int n = 0;
  bb->offsets[0] = 0;
  for (int g = 0; g < B * S; g++) {
    int len = (int)(urand() * 4.0); /* 0..3: empty, one-hot and multi-hot bags */
    for (int j = 0; j < len; j++) bb->idx[n++] = (int32_t)(urand() * (U - 10)); /* rows >= 50 untouched */
    bb->offsets[g + 1] = n;
  }
  bb->nnz = n;
}

static json_t *farr(const float *x, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_real(x[i]));
  return a;
}
static json_t *iarr(const int32_t *x, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(x[i]));
  return a;
}
static json_t *batch_json(const batch_buf *bb) {
  json_t *o = json_object();
  json_object_set_new(o, "dense", farr(bb->dense, B * 13));
  json_object_set_new(o, "labels", farr(bb->labels, B));
  json_object_set_new(o, "idx", iarr(bb->idx, (size_t)bb->nnz));
  json_object_set_new(o, "offsets", iarr(bb->offsets, B * S + 1));
  return o;
}

#define CHECK(x)                                                         \
  do {                                                                   \
    ps_status st_ = (x);                                                 \
    if (st_ != PS_OK) {                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, ps_status_str(st_)); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT.json [sum|mean|mixed] [threads] [dot|dcn:L:R] [fp32|bf16]\n", argv[0]);
    return 2;
  }
  /* mixed: per feature, the even ones by mean, the odd ones by sum */
  const char *pname = argc > 2 ? argv[2] : "sum";
  ps_kern_pool pool = !strcmp(pname, "mean") ? PS_KERN_POOL_MEAN : PS_KERN_POOL_SUM;
  if (!strcmp(pname, "mixed")) {
    pool.period = S;
    for (int f = 0; f < S; f += 2) pool.mean |= 1ull << f;
  }
  int threads = argc > 3 ? atoi(argv[3]) : 2;
  ps_kern *k = NULL;
  CHECK(ps_kern_cpu_create(threads, &k));
  ps_dlrm_config cfg;
  ps_dlrm_config_shape(&cfg, "13-64-32-8", "32-16-1", D, S, B);
  cfg.pool = pool;
  cfg.seed = 7;
  const char *prec = argc > 5 ? argv[5] : "fp32";
  if (ps_dlrm_precision_parse(prec, &cfg.precision) != PS_OK) {
    fprintf(stderr, "%s: want fp32 or bf16\n", prec);
    return 2;
  }
  if (argc > 4 && !strncmp(argv[4], "dcn:", 4)) {
    cfg.interaction = PS_DLRM_DCN;
    if (sscanf(argv[4] + 4, "%d:%d", &cfg.dcn_layers, &cfg.dcn_rank) != 2) {
      fprintf(stderr, "%s: want dcn:LAYERS:RANK\n", argv[4]);
      return 2;
    }
  }
  ps_dlrm *m = NULL;
  CHECK(ps_dlrm_create(k, &cfg, &m, NULL));
  size_t np = ps_dlrm_num_params(m);
  float *p0 = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
  float rows0[U * D], rows[U * D], drows[U * D], probs[B], loss;
  CHECK(ps_dlrm_get_params(m, p0, np));
  /* DCN biases start at zero (TorchRec's init): give them values, so that the first forward
   * exercises them too; the same p0 seeds every model below and the reference. */
  for (int l = 0; l < ps_dlrm_num_cross(m); l++) {
    ps_dlrm_cross_layer cl;
    CHECK(ps_dlrm_cross_info(m, l, &cl));
    for (int i = 0; i < cl.dim; i++) p0[cl.b_off + i] = (float)(0.2 * (urand() - 0.5));
  }
  CHECK(ps_dlrm_set_params(m, p0, np));
  for (int i = 0; i < U * D; i++) rows0[i] = (float)(urand() - 0.5);

  json_t *root = json_object();
  json_t *jc = json_object();
  json_object_set_new(jc, "mlp_bot", json_string(cfg.mlp_bot));
  json_object_set_new(jc, "mlp_top", json_string(cfg.mlp_top));
  json_object_set_new(jc, "emb_dim", json_integer(D));
  json_object_set_new(jc, "num_sparse", json_integer(S));
  json_object_set_new(jc, "nrows", json_integer(U));
  json_object_set_new(jc, "pool", json_string(pname));
  json_object_set_new(jc, "pool_mean_mask", json_integer((json_int_t)pool.mean));
  json_object_set_new(jc, "pool_period", json_integer((json_int_t)pool.period));
  json_object_set_new(jc, "interaction",
                      json_string(cfg.interaction == PS_DLRM_DCN ? "dcn" : "dot"));
  json_object_set_new(jc, "dcn_layers", json_integer(cfg.dcn_layers));
  json_object_set_new(jc, "dcn_rank", json_integer(cfg.dcn_rank));
  json_object_set_new(jc, "precision", json_string(prec));
  json_object_set_new(jc, "precision_used",
                      json_string(ps_dlrm_precision(m) == PS_KERN_BF16 ? "bf16" : "fp32"));
  json_object_set_new(root, "config", jc);
  json_object_set_new(root, "params", farr(p0, np));
  json_object_set_new(root, "rows", farr(rows0, U * D));

  batch_buf bb;
  make_batch(&bb);
  ps_dlrm_batch b = {.batch = B, .dense = bb.dense, .labels = bb.labels, .nrows = U,
                     .rows = rows0, .nnz = bb.nnz, .idx = bb.idx, .offsets = bb.offsets};
  CHECK(ps_dlrm_forward(m, &b, &loss));
  CHECK(ps_dlrm_last_probs(m, probs));
  CHECK(ps_dlrm_backward(m, drows));
  CHECK(ps_dlrm_get_grads(m, g, np));
  json_t *j1 = batch_json(&bb);
  json_object_set_new(j1, "loss", json_real(loss));
  json_object_set_new(j1, "probs", farr(probs, B));
  json_object_set_new(j1, "grads", farr(g, np));
  json_object_set_new(j1, "emb_grads", farr(drows, U * D));
  float eval_probs[B];
  CHECK(ps_dlrm_predict(m, &b, eval_probs));
  json_object_set_new(j1, "eval_probs", farr(eval_probs, B));
  json_object_set_new(root, "single", j1);

  const char *names[] = {"sgd", "adagrad", "adam"};
  const float lrs[] = {0.1f, 0.05f, 0.01f};
  const float emb_lr = 0.1f;
  json_t *curves = json_object();
  for (int o = 0; o < 3; o++) {
    ps_dlrm_opt_kind kind;
    CHECK(ps_dlrm_opt_parse(names[o], &kind));
    ps_dlrm_opt opt = ps_dlrm_opt_default(kind, lrs[o]);
    /* a fresh model per optimizer: same init (same seed), fresh optimizer state */
    ps_dlrm_destroy(&m);
    CHECK(ps_dlrm_create(k, &cfg, &m, NULL));
    CHECK(ps_dlrm_set_params(m, p0, np));
    memcpy(rows, rows0, sizeof(rows));
    json_t *jo = json_object(), *jb = json_array(), *jl = json_array();
    for (int s = 0; s < STEPS; s++) {
      make_batch(&bb);
      b.dense = bb.dense, b.labels = bb.labels, b.rows = rows, b.nnz = bb.nnz;
      CHECK(ps_dlrm_forward(m, &b, &loss));
      CHECK(ps_dlrm_backward(m, drows));
      CHECK(ps_dlrm_step(m, &opt));
      for (int i = 0; i < U * D; i++) rows[i] -= emb_lr * drows[i];
      json_array_append_new(jb, batch_json(&bb));
      json_array_append_new(jl, json_real(loss));
    }
    json_object_set_new(jo, "lr", json_real(lrs[o]));
    json_object_set_new(jo, "emb_lr", json_real(emb_lr));
    json_object_set_new(jo, "batches", jb);
    json_object_set_new(jo, "losses", jl);
    json_object_set_new(curves, names[o], jo);
  }
  json_object_set_new(root, "curves", curves);
  if (json_dump_file(root, argv[1], JSON_COMPACT | JSON_REAL_PRECISION(9)) != 0) {
    fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  json_decref(root);
  free(p0);
  free(g);
  ps_dlrm_destroy(&m);
  ps_kern_destroy(&k);
  return 0;
}
