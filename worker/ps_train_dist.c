/* ps_train_dist: how one ps-worker run spreads over ranks — its rank (given, or assigned by
 * the coordinator), the rendezvous namespace, the collectives (Gloo for host backends, NCCL for
 * device ones), the exact u64 and host-memory allreduces, and the end-of-run check that every
 * rank's dense replica is bit-identical.
 *
 * Exactness: counters and hashes cross ranks as float sums, so each u64 travels as four 16-bit
 * parts (exact for up to 256 ranks) and each rank's hash sits in its own slot of a zero buffer
 * (the sum is a concatenation). The per-step gradient allreduce is ps_train_allreduce, inline
 * in ps_train_int.h. */
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_hash.h"
#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY

/* Rank: given, or assigned by the coordinator (which also counts the world in). */
ps_status ps_train_join(ps_trainer *t) {
  const ps_train_config *c = t->cfg;
  int rank = c->rank;
  char host[256] = "", name[300];
  gethostname(host, sizeof host - 1);
  snprintf(name, sizeof name, "%s/%d", host, (int)getpid());
  if (c->world > 1 || rank < 0) {
    ps_status st = ps_client_join(t->cl, (uint32_t)c->world, rank, rank < 0 ? name : NULL,
                                  &rank, &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "joining the cluster", st);
  }
  t->rank = rank < 0 ? 0 : rank;
  t->world = c->world;
  ps_client_set_rank(t->cl, (uint32_t)t->rank);
  char tag[32];
  snprintf(tag, sizeof tag, "worker/%d", t->rank);
  ps_log_set_tag(tag);
  return PS_OK;
}

ps_status ps_train_allreduce_host(void *ctx, float *buf, size_t n) {
  ps_trainer *t = ctx;
  if (t->world == 1) return PS_OK;
  if (t->coll->kind == PS_COLL_GLOO) return ps_coll_allreduce_sum(t->coll, buf, n);
  /* NCCL reduces device memory: stage through the backend. */
  float *d = NULL;
  TRY(ps_kern_alloc(t->kern, n * sizeof(float), (void **)&d));
  ps_status st = ps_kern_to_device(t->kern, d, buf, n * sizeof(float));
  if (st == PS_OK) st = ps_kern_sync(t->kern);
  if (st == PS_OK) st = ps_coll_allreduce_sum(t->coll, d, n);
  if (st == PS_OK) st = ps_kern_to_host(t->kern, buf, d, n * sizeof(float));
  ps_kern_free(t->kern, d);
  return st;
}

/* The ranks of this job that the coordinator (shard 0) no longer holds, as "rank 1" or "ranks
 * 1, 3" in out ("" when it cannot tell). A collective fails at once when a peer process dies,
 * but Gloo names only an address; the coordinator saw which rank's connection closed. Asked
 * for up to ~2 s, since that disconnect may reach it after Gloo's. */
static void lost_ranks(ps_trainer *t, char *out, size_t len) {
  out[0] = '\0';
  bool *held = calloc((size_t)t->world, sizeof *held);
  for (int tries = 0; held && tries < 20 && !out[0]; tries++) {
    if (tries) usleep(100000);
    char *js = NULL;
    if (ps_client_stats_within(t->cl, 0, 1000, &js, NULL) != PS_OK) break;
    json_t *j = json_loads(js, 0, NULL);
    free(js);
    json_t *co = json_object_get(j, "coordinator"), *ranks = json_object_get(co, "ranks");
    if (json_integer_value(json_object_get(co, "world")) == t->world && json_is_array(ranks)) {
      memset(held, 0, (size_t)t->world * sizeof *held);
      size_t i, n = 0;
      json_t *m;
      json_array_foreach(ranks, i, m) {
        json_int_t r = json_integer_value(json_object_get(m, "rank"));
        if (r >= 0 && r < t->world) held[r] = true;
      }
      char list[200];
      size_t at = 0;
      for (int r = 0; r < t->world && at < sizeof list; r++)
        if (!held[r])
          at += (size_t)snprintf(list + at, sizeof list - at, "%s%d", n++ ? ", " : "", r);
      if (n) snprintf(out, len, "%s %.*s", n > 1 ? "ranks" : "rank", (int)sizeof list, list);
    }
    json_decref(j);
  }
  free(held);
}

ps_status ps_train_coll_fail(ps_trainer *t, const char *what, ps_status st) {
  char lost[256];
  lost_ranks(t, lost, sizeof lost);
  if (lost[0])
    PS_ERROR("%s at step %" PRIu64 " failed (%s): %s left the job (the coordinator saw its "
             "connection close: that worker died or exited; its log says why)",
             what, t->step, ps_status_str(st), lost);
  else
    PS_ERROR("%s at step %" PRIu64 " failed (%s): another worker probably exited; its log says "
             "why", what, t->step, ps_status_str(st));
  return st;
}

/* Sums u64 counters over ranks exactly: each value travels as four 16-bit parts, so float
 * sums stay exact for up to 256 ranks. */
ps_status ps_train_allreduce_u64(ps_trainer *t, uint64_t *v, size_t n) {
  if (t->world == 1) return PS_OK;
  float *f = calloc(n * 4, sizeof *f);
  if (!f) return PS_ERR_NOMEM;
  for (size_t i = 0; i < n; i++)
    for (int p = 0; p < 4; p++) f[i * 4 + p] = (float)((v[i] >> (16 * p)) & 0xffff);
  ps_status st = ps_train_allreduce_host(t, f, n * 4);
  if (st != PS_OK) ps_train_coll_fail(t, "allreduce of the run's counters", st);
  if (st == PS_OK)
    for (size_t i = 0; i < n; i++) {
      v[i] = 0;
      for (int p = 0; p < 4; p++) v[i] += (uint64_t)f[i * 4 + p] << (16 * p);
    }
  free(f);
  return st;
}

/* The run's rendezvous namespace: given, or made by rank 0 and published through the
 * coordinator between two barriers (so no rank can read a previous run's value). */
static ps_status agree_run_id(ps_trainer *t) {
  if (t->cfg->run_id) {
    snprintf(t->run_id, sizeof t->run_id, "%s", t->cfg->run_id);
    return PS_OK;
  }
  uint32_t to = t->cfg->timeout_ms;
  ps_status st =
      ps_client_barrier(t->cl, "ember/train/start", (uint32_t)t->world, to, &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "start barrier", st);
  if (t->rank == 0) {
    uint64_t nonce = ps_hash_u64(ps_now_ns() ^ ((uint64_t)getpid() << 32), 0x52554e);
    snprintf(t->run_id, sizeof t->run_id, "%016" PRIx64, nonce);
    st = ps_client_kv_set(t->cl, "ember/train/run-id", t->run_id, strlen(t->run_id), &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "publishing the run id", st);
  }
  st = ps_client_barrier(t->cl, "ember/train/run-id", (uint32_t)t->world, to, &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "run-id barrier", st);
  if (t->rank != 0) {
    void *v = NULL;
    size_t len = 0;
    st = ps_client_kv_get(t->cl, "ember/train/run-id", &v, &len, to, &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "reading the run id", st);
    snprintf(t->run_id, sizeof t->run_id, "%.*s", (int)(len < 63 ? len : 63), (char *)v);
    free(v);
  }
  return PS_OK;
}

ps_status ps_train_setup_collectives(ps_trainer *t) {
  if (t->world == 1) return PS_OK;
  TRY(agree_run_id(t));
  ps_rendezvous rdv = {t->cl, ps_client_rdv_set, ps_client_rdv_get};
  ps_status st;
  ps_error err;
  if (t->kern->host_memory) {
    /* Gloo needs this host's address as its peers see it: loopback serves one machine;
     * EMBER_GLOO_HOST (an address of this host the other workers reach) serves several. */
    const char *host = getenv("EMBER_GLOO_HOST");
    if (!host || !*host) host = "127.0.0.1";
    st = ps_coll_create_gloo(&rdv, t->run_id, t->rank, t->world, host, &t->coll, &err);
  } else {
    int dev = 0;
    if (!strncmp(t->cfg->device, "cuda:", 5)) dev = atoi(t->cfg->device + 5);
    /* On the kernels' stream: the allreduce runs in order with the backward and the
     * optimizer, with no host wait between them (ps_kern_to_host of N waits for it). */
    st = ps_coll_create_nccl(&rdv, t->run_id, t->rank, t->world, dev, ps_kern_stream(t->kern),
                             &t->coll, &err);
  }
  if (st != PS_OK) PS_ERROR("collectives for %d workers: %s", t->world, err.msg);
  return st;
}

/* Gathers every rank's hash of its dense parameters (each in its own slot, zeros elsewhere,
 * so the sum is an exact concatenation) and checks they are all equal. */
ps_status ps_train_check_replicas(ps_trainer *t, uint64_t *hash_out) {
  TRY(ps_dlrm_get_params(t->model, t->host_grads, t->nparams));
  uint64_t h = ps_hash64(t->host_grads, t->nparams * sizeof(float), 0);
  *hash_out = h;
  if (t->world == 1) return PS_OK;
  size_t w = (size_t)t->world;
  uint64_t *all = calloc(w, sizeof *all);
  if (!all) return PS_ERR_NOMEM;
  all[t->rank] = h;
  ps_status st = ps_train_allreduce_u64(t, all, w);
  for (size_t r = 0; st == PS_OK && r < w; r++)
    if (all[r] != h) {
      PS_ERROR("dense replicas differ: rank %zu has hash %016" PRIx64 ", rank %d %016" PRIx64, r,
               all[r], t->rank, h);
      st = PS_ERR_INTERNAL;
    }
  free(all);
  return st;
}
