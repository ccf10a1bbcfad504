/* ps_ckpt: a checkpoint opened read-only (see ps_ckpt.h for the design): DIR's latest step
 * directory (or DIR, one step-N), its config (a ps_kvfile: ps-worker's flags, schema-file,
 * table-id, table-name, interaction), dense.bin (ps_dense_file.h), schema.json when the run
 * had a JSON one, and every shard's snapshot (RocksDB files, or a delta that the store's
 * read-only open composes with its chain) with shard-I.json its step. Where each lies is
 * common/ps_ckpt_layout.h's. */
#include "ps_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ps_ckpt_layout.h"
#include "ps_dense_file.h"
#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_kvfile.h"

#define MAX_SHARDS 4096u

struct ps_ckpt {
  char dir[4096];
  char schema_file[4200];
  ps_kvfile *config;
  ps_dense_file dense;
  ps_schema *schema;
  uint64_t hash_buckets;
  ps_table_spec table;
  uint32_t nshards;
  ps_store **shards;
  ps_dlrm_interaction interaction; /* from the config's interaction line (absent: dot) */
  int dcn_layers, dcn_rank;
};

/* The interaction as ps-worker records it: "dot" where the config has no line (a run from
 * before DCN). */
static const char *ckpt_interaction(const ps_ckpt *c) {
  const char *v = ps_ckpt_config(c, "interaction");
  return v ? v : "dot";
}

static ps_status read_config(ps_ckpt *c, ps_error *err) {
  char p[4300];
  ps_ckpt_file_path(p, sizeof p, c->dir, PS_CKPT_CONFIG);
  ps_status vst = ps_kvfile_read(p, &c->config, err);
  if (vst == PS_ERR_NOT_FOUND)
    return ps_error_set(err, PS_ERR_INVALID, "%s: no config (written by an older ps-worker, "
                        "it does not say the model's shape)", c->dir);
  if (vst != PS_OK) return vst;
  static const char *need[] = {"mlp-bot", "mlp-top", "emb-dim", "hash-buckets"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!ps_ckpt_config(c, need[i]))
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: no %s line", p, need[i]);
  char *end;
  c->hash_buckets = strtoull(ps_ckpt_config(c, "hash-buckets"), &end, 10);
  if (*end) return ps_error_set(err, PS_ERR_CORRUPT, "%s: bad hash-buckets", p);
  /* "dot", or "dcn --dcn-layers L --dcn-rank R" as ps-worker records it (the rank resolved) */
  const char *it = ckpt_interaction(c);
  int used = 0;
  c->interaction = PS_DLRM_DOT;
  if (!strcmp(it, "dot")) return PS_OK;
  if (sscanf(it, "dcn --dcn-layers %d --dcn-rank %d%n", &c->dcn_layers, &c->dcn_rank, &used) ==
          2 &&
      it[used] == '\0' && c->dcn_layers >= 1 && c->dcn_rank >= 0) {
    c->interaction = PS_DLRM_DCN;
    return PS_OK;
  }
  return ps_error_set(err, PS_ERR_INVALID, "%s: interaction '%s' is not supported by this "
                      "build (it runs: dot, dcn --dcn-layers L --dcn-rank R)", c->dir, it);
}

/* The checkpoint's schema, or `user`'s when it has the same signature. */
static ps_status load_schema(ps_ckpt *c, const char *user, ps_error *err) {
  const char *sf = ps_ckpt_config(c, "schema-file"), *sig = ps_ckpt_config(c, "schema");
  if (user) snprintf(c->schema_file, sizeof c->schema_file, "%s", user);
  else if (!sf || !strcmp(sf, "criteo")) snprintf(c->schema_file, sizeof c->schema_file, "criteo");
  else if (strchr(sf, '/'))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s/config: bad schema-file %s", c->dir, sf);
  else snprintf(c->schema_file, sizeof c->schema_file, "%s/%s", c->dir, sf);
  ps_status st = ps_schema_load(c->schema_file, &c->schema, err);
  if (st != PS_OK) return ps_error_prefix(err, "schema: ");
  char mine[256];
  ps_schema_signature(c->schema, mine, sizeof mine);
  if (sig && strcmp(sig, mine) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "schema %s (%s) is not the one the checkpoint was "
                        "trained with (%s)%s", c->schema_file, mine, sig,
                        user || sf ? "" : ": give it with --schema");
  return PS_OK;
}

static ps_status open_shards(ps_ckpt *c, ps_error *err) {
  char p[4400];
  c->nshards = ps_ckpt_count_shards(c->dir, MAX_SHARDS);
  if (!c->nshards) {
    ps_ckpt_step_shard_path(p, sizeof p, c->dir, 0, PS_CKPT_SHARD_DIR);
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: no %s", c->dir, p + strlen(c->dir) + 1);
  }
  c->shards = calloc(c->nshards, sizeof *c->shards);
  if (!c->shards) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  const char *tid = ps_ckpt_config(c, "table-id");
  uint32_t table = tid ? (uint32_t)strtoul(tid, NULL, 10) : 1u;
  for (uint32_t i = 0; i < c->nshards; i++) {
    ps_ckpt_step_shard_path(p, sizeof p, c->dir, i, PS_CKPT_SHARD_META);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    json_int_t step = -1, shards = c->nshards;
    const char *why = !j ? je.text : NULL;
    if (j && json_unpack(j, "{s:I, s?I}", "step", &step, "shards", &shards) != 0) why = "no step";
    json_decref(j);
    if (why) return ps_error_set(err, PS_ERR_CORRUPT, "%s: unreadable (%s)", p, why);
    if (shards != (json_int_t)c->nshards)
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: written by one of %lld shards, the checkpoint "
                          "holds %u", p, (long long)shards, c->nshards);
    if ((uint64_t)step != c->dense.step)
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: shard %u is at step %lld, dense.bin at %" PRIu64,
                          c->dir, i, (long long)step, c->dense.step);
    ps_ckpt_step_shard_path(p, sizeof p, c->dir, i, PS_CKPT_SHARD_DIR);
    ps_store_options o = {.path = p, .partitions = 1, .read_only = true};
    ps_status st = ps_store_open(&o, &c->shards[i], err);
    if (st != PS_OK) return st;
    ps_table_spec sp;
    if (ps_store_get_spec(c->shards[i], table, &sp) != PS_OK)
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: no table %u", p, table);
    if (i == 0) c->table = sp;
    else if (!ps_table_spec_rows_equal(&sp, &c->table))
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: table %u differs from shard 0's", p, table);
  }
  if ((int)c->table.dim != atoi(ps_ckpt_config(c, "emb-dim")))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: the table's rows have %u values, emb-dim is %s",
                        c->dir, c->table.dim, ps_ckpt_config(c, "emb-dim"));
  return PS_OK;
}

/* shards: false for ps_ckpt_open_model (config, dense.bin and the schema only). */
static ps_status open_ckpt(const char *dir, const char *schema, bool shards, ps_ckpt **out,
                           ps_error *err) {
  *out = NULL;
  ps_ckpt *c = calloc(1, sizeof *c);
  if (!c) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  char p[4300];
  ps_status st = ps_ckpt_resolve(dir, PS_CKPT_DENSE, c->dir, sizeof c->dir, err);
  if (st == PS_OK) st = read_config(c, err);
  if (st == PS_OK) {
    ps_ckpt_file_path(p, sizeof p, c->dir, PS_CKPT_DENSE);
    st = ps_dense_file_read(p, &c->dense, err);
  }
  if (st == PS_OK) st = load_schema(c, schema, err);
  if (st == PS_OK && shards) st = open_shards(c, err);
  if (st != PS_OK) {
    ps_ckpt_close(&c);
    return st;
  }
  *out = c;
  return PS_OK;
}

ps_status ps_ckpt_open(const char *dir, const char *schema, ps_ckpt **out, ps_error *err) {
  return open_ckpt(dir, schema, true, out, err);
}

ps_status ps_ckpt_open_model(const char *dir, const char *schema, ps_ckpt **out,
                             ps_error *err) {
  return open_ckpt(dir, schema, false, out, err);
}

void ps_ckpt_close(ps_ckpt **cp) {
  if (!cp || !*cp) return;
  ps_ckpt *c = *cp;
  for (uint32_t i = 0; c->shards && i < c->nshards; i++) ps_store_close(&c->shards[i]);
  free(c->shards);
  ps_kvfile_free(&c->config);
  ps_dense_file_free(&c->dense);
  ps_schema_destroy(&c->schema);
  free(c);
  *cp = NULL;
}

const char *ps_ckpt_dir(const ps_ckpt *c) { return c->dir; }
uint64_t ps_ckpt_step(const ps_ckpt *c) { return c->dense.step; }
const ps_schema *ps_ckpt_schema(const ps_ckpt *c) { return c->schema; }
const char *ps_ckpt_schema_file(const ps_ckpt *c) { return c->schema_file; }
uint64_t ps_ckpt_hash_buckets(const ps_ckpt *c) { return c->hash_buckets; }
const ps_table_spec *ps_ckpt_table(const ps_ckpt *c) { return &c->table; }
uint32_t ps_ckpt_nshards(const ps_ckpt *c) { return c->nshards; }
ps_store *ps_ckpt_shard(ps_ckpt *c, uint32_t i) { return i < c->nshards ? c->shards[i] : NULL; }

const char *ps_ckpt_config(const ps_ckpt *c, const char *name) {
  return c->config ? ps_kvfile_get(c->config, name) : NULL;
}

const char *ps_ckpt_table_name(const ps_ckpt *c) {
  const char *v = ps_ckpt_config(c, "table-name");
  return v ? v : "criteo_emb"; /* every run's table before the line existed */
}

const float *ps_ckpt_params(const ps_ckpt *c, size_t *n) {
  *n = (size_t)c->dense.nparams;
  return c->dense.params;
}

void ps_ckpt_model_config(const ps_ckpt *c, int max_batch, ps_dlrm_config *cfg) {
  ps_dlrm_config_shape(cfg, ps_ckpt_config(c, "mlp-bot"), ps_ckpt_config(c, "mlp-top"),
                       atoi(ps_ckpt_config(c, "emb-dim")), ps_schema_ncat(c->schema), max_batch);
  ps_schema_pool_mask(c->schema, &cfg->pool.mean, &cfg->pool.period);
  cfg->interaction = c->interaction;
  cfg->dcn_layers = c->dcn_layers;
  cfg->dcn_rank = c->dcn_rank;
}

ps_status ps_ckpt_pull(ps_ckpt *c, const uint64_t *keys, size_t n, float *out) {
  if (!c->nshards) return PS_ERR_INVALID; /* ps_ckpt_open_model: no rows here */
  if (c->nshards == 1) return ps_store_pull(c->shards[0], c->table.id, keys, n, out);
  const size_t dim = c->table.dim;
  uint32_t *shard = malloc(n * sizeof *shard);
  size_t *pos = malloc(n * sizeof *pos), *start = calloc(c->nshards + 1, sizeof *start);
  uint64_t *k = malloc(n * sizeof *k);
  float *rows = malloc(n * dim * sizeof *rows);
  ps_status st = shard && pos && start && k && (rows || !n) ? PS_OK : PS_ERR_NOMEM;
  if (st == PS_OK) {
    /* Counting sort by shard: each shard's keys contiguous in k, pos[j] = their place in out. */
    for (size_t i = 0; i < n; i++) start[(shard[i] = ps_shard_of(keys[i], c->nshards)) + 1]++;
    for (uint32_t s = 0; s < c->nshards; s++) start[s + 1] += start[s];
    for (size_t i = 0; i < n; i++) {
      size_t j = start[shard[i]]++;
      k[j] = keys[i];
      pos[j] = i;
    }
    for (uint32_t s = c->nshards; s > 0; s--) start[s] = start[s - 1];
    start[0] = 0;
    for (uint32_t s = 0; st == PS_OK && s < c->nshards; s++)
      if (start[s + 1] > start[s])
        st = ps_store_pull(c->shards[s], c->table.id, k + start[s], start[s + 1] - start[s],
                           rows + start[s] * dim);
    for (size_t j = 0; st == PS_OK && j < n; j++)
      memcpy(out + pos[j] * dim, rows + j * dim, dim * sizeof *rows);
  }
  free(shard);
  free(pos);
  free(start);
  free(k);
  free(rows);
  return st;
}

int ps_ckpt_open_main(const char *prog, const char *dir, const char *schema, ps_ckpt **out) {
  ps_error err;
  ps_status st = ps_ckpt_open(dir, schema, out, &err);
  if (st == PS_OK) return 0;
  fprintf(stderr, "%s: --checkpoint %s: %s\n", prog, dir, ps_error_str(&err));
  return st == PS_ERR_INVALID || st == PS_ERR_NOT_FOUND ? 2 : 1;
}
