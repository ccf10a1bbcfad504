/* NCCL collectives (worker/collectives/collectives_nccl.c) on GPU buffers of the CUDA backend.
 *
 * Bootstrap goes through an in-process rendezvous store (the same ps_rendezvous callbacks the
 * coordinator provides in ps-worker): rank 0 publishes the ncclUniqueId, the others wait for
 * it. Values are small integers, so sums are exact and compared with ==.
 *
 *   test_nccl              one rank: argument checks, allreduce/broadcast/barrier on the
 *                          backend's stream, ordering with the backend's kernels.
 *   test_nccl --two-rank   two ranks in two threads, each on its own GPU with its own backend
 *                          and communicator. NCCL refuses two ranks on one device ("Duplicate
 *                          GPU detected"), so with fewer than two GPUs it exits 77 (SKIPPED).
 * Without a GPU both check that creation reports PS_ERR_UNSUPPORTED, then exit 77. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "cuda_test_util.h"
#include "ps_collectives.h"
#include "ps_kernels.h"
#include "ps_kernels_cuda.h"

/* ---- an in-process rendezvous store ------------------------------------------------------ */

typedef struct kv {
  char key[128];
  void *val;
  size_t len;
} kv;

typedef struct store {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  kv items[16];
  int n;
} store;

static ps_status store_set(void *ctx, const char *key, const void *val, size_t len) {
  store *s = ctx;
  pthread_mutex_lock(&s->mu);
  if (s->n == 16 || strlen(key) >= sizeof s->items[0].key) {
    pthread_mutex_unlock(&s->mu);
    return PS_ERR_NOMEM;
  }
  kv *e = &s->items[s->n++];
  snprintf(e->key, sizeof e->key, "%s", key);
  e->val = malloc(len);
  memcpy(e->val, val, len);
  e->len = len;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return PS_OK;
}

static ps_status store_get(void *ctx, const char *key, void **val, size_t *len,
                           uint32_t timeout_ms) {
  store *s = ctx;
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    for (int i = 0; i < s->n; i++)
      if (strcmp(s->items[i].key, key) == 0) {
        *val = malloc(s->items[i].len);
        memcpy(*val, s->items[i].val, s->items[i].len);
        *len = s->items[i].len;
        pthread_mutex_unlock(&s->mu);
        return PS_OK;
      }
    if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) {
      pthread_mutex_unlock(&s->mu);
      return PS_ERR_TIMEOUT;
    }
  }
}

static ps_rendezvous rdv_of(store *s) {
  return (ps_rendezvous){.ctx = s, .set = store_set, .get = store_get};
}
/* An empty store, and the rendezvous over it. */
static ps_rendezvous store_open(store *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  return rdv_of(s);
}
static void store_fini(store *s) {
  for (int i = 0; i < s->n; i++) free(s->items[i].val);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
}

/* ---- one rank's work ---------------------------------------------------------------------- */

static const size_t SIZES[] = {1, 4099, (size_t)1 << 22};

/* Rank r of w: allreduce x[i] = (r + 1) * (i % 97) and check the exact sum, broadcast from
 * the last rank, barrier. Returns a description of the first failure, or NULL. */
static const char *rank_work(ps_rendezvous *rdv, int r, int w, bool null_stream, char *why,
                             size_t whylen) {
  ps_kern *k = NULL;
  ps_coll *c = NULL;
  const char *res = NULL;
  float *h = NULL, *d = NULL;
  if (ps_kern_cuda_create(r, &k, NULL) != PS_OK) return "CUDA backend creation failed";
  /* On the backend's stream (asynchronous, stream-ordered), or on the default stream (the
   * collective then waits, since the backend's stream does not order after it). */
  ps_error err;
  ps_status st = ps_coll_create_nccl(rdv, null_stream ? "test-null" : "test", r, w, r,
                                     null_stream ? NULL : ps_kern_cuda_stream(k), &c, &err);
  if (st != PS_OK) {
    snprintf(why, whylen, "ps_coll_create_nccl: %.200s", err.msg);
    res = why;
    goto out;
  }
  if (c->rank != r || c->world != w || c->kind != PS_COLL_NCCL) {
    res = "wrong rank/world/kind";
    goto out;
  }
  size_t maxn = SIZES[2];
  h = malloc(maxn * sizeof(float));
  if (ps_kern_alloc(k, maxn * sizeof(float), (void **)&d) != PS_OK) {
    res = "alloc";
    goto out;
  }
  float tri = (float)(w * (w + 1) / 2);
  for (size_t s = 0; s < 3 && !res; s++) {
    size_t n = SIZES[s];
    for (size_t i = 0; i < n; i++) h[i] = (float)(r + 1) * (float)(i % 97);
    /* to_device and a backend kernel (scale by 2, then by 0.5) run on the stream the
     * allreduce is enqueued on: ordering, not a host sync, keeps them correct. On the default
     * stream the caller syncs the backend first (as ps-worker does); the collective waits. */
    if (ps_kern_to_device(k, d, h, n * sizeof(float)) != PS_OK ||
        ps_kern_scale(k, n, 2.0f, d) != PS_OK ||
        (null_stream && ps_kern_sync(k) != PS_OK) || ps_coll_allreduce_sum(c, d, n) != PS_OK ||
        ps_kern_scale(k, n, 0.5f, d) != PS_OK ||
        ps_kern_to_host(k, h, d, n * sizeof(float)) != PS_OK) {
      res = "allreduce sequence failed";
      break;
    }
    for (size_t i = 0; i < n; i++)
      if (h[i] != tri * (float)(i % 97)) {
        snprintf(why, whylen, "allreduce n=%zu: x[%zu] = %g, expected %g", n, i, (double)h[i],
                 (double)(tri * (float)(i % 97)));
        res = why;
        break;
      }
  }
  if (!res) {
    size_t n = 4099;
    for (size_t i = 0; i < n; i++) h[i] = (float)(r * 1000 + (int)i);
    if (ps_kern_to_device(k, d, h, n * sizeof(float)) != PS_OK ||
        (null_stream && ps_kern_sync(k) != PS_OK) ||
        ps_coll_broadcast(c, d, n * sizeof(float), w - 1) != PS_OK ||
        ps_kern_to_host(k, h, d, n * sizeof(float)) != PS_OK)
      res = "broadcast sequence failed";
    for (size_t i = 0; i < n && !res; i++)
      if (h[i] != (float)((w - 1) * 1000 + (int)i)) res = "broadcast: wrong value";
  }
  if (!res && ps_coll_barrier(c) != PS_OK) res = "barrier failed";
  if (!res && ps_coll_broadcast(c, d, 4, w) != PS_ERR_INVALID)
    res = "broadcast root out of range accepted";
  if (!res && ps_coll_allreduce_sum(c, d, 0) != PS_OK) res = "empty allreduce failed";
out:
  ps_coll_destroy(&c);
  if (c != NULL && !res) res = "destroy did not clear the pointer";
  ps_kern_free(k, d);
  ps_kern_destroy(&k);
  free(h);
  return res;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_bad_arguments(void **st) {
  (void)st;
  store s;
  ps_rendezvous rdv = store_open(&s);
  ps_coll *c = (ps_coll *)1;
  assert_int_equal(ps_coll_create_nccl(&rdv, "x", 1, 1, 0, NULL, &c, NULL), PS_ERR_INVALID);
  assert_null(c);
  assert_int_equal(ps_coll_create_nccl(NULL, "x", 0, 1, 0, NULL, &c, NULL), PS_ERR_INVALID);
  assert_int_equal(ps_coll_create_nccl(&rdv, "x", 0, 0, 0, NULL, &c, NULL), PS_ERR_INVALID);
  assert_int_equal(ps_coll_create_nccl(&rdv, "x", 0, 1, -1, NULL, &c, NULL), PS_ERR_INVALID);
  assert_int_equal(ps_coll_create_nccl(&rdv, "x", 0, 1, 1 << 20, NULL, &c, NULL), PS_ERR_INVALID);
  store_fini(&s);
}

/* A rank > 0 whose rank 0 never shows up gets a timeout from the rendezvous, not a hang. The
 * wait is NCCL_ID_TIMEOUT_MS in the library; a store that answers at once stands in for it. */
static ps_status store_get_never(void *ctx, const char *key, void **val, size_t *len,
                                 uint32_t timeout_ms) {
  (void)ctx, (void)key, (void)val, (void)len, (void)timeout_ms;
  return PS_ERR_TIMEOUT;
}
static void test_missing_rank0(void **st) {
  (void)st;
  store s;
  ps_rendezvous rdv = store_open(&s);
  rdv.get = store_get_never;
  ps_coll *c = NULL;
  assert_int_equal(ps_coll_create_nccl(&rdv, "x", 1, 2, 0, NULL, &c, NULL), PS_ERR_TIMEOUT);
  assert_null(c);
  /* and a malformed id is refused */
  const char junk[5] = "abcd";
  rdv = rdv_of(&s);
  assert_int_equal(store_set(&s, "y/nccl-id", junk, sizeof junk), PS_OK);
  ps_error err;
  assert_int_equal(ps_coll_create_nccl(&rdv, "y", 1, 2, 0, NULL, &c, &err), PS_ERR_CORRUPT);
  assert_non_null(strstr(err.msg, "has 5 bytes")); /* the reason, in err */
  store_fini(&s);
}

static void test_single_rank(void **st) {
  (void)st;
  store s;
  ps_rendezvous rdv = store_open(&s);
  char why[256];
  for (int ns = 0; ns < 2; ns++) {
    const char *res = rank_work(&rdv, 0, 1, ns, why, sizeof why);
    if (res) fail_msg("rank 0 of 1 (%s stream): %s", ns ? "default" : "backend", res);
  }
  store_fini(&s);
}

typedef struct thr {
  ps_rendezvous *rdv;
  int rank, world;
  bool null_stream;
  const char *res;
  char why[256];
} thr;

static void *thr_main(void *p) {
  thr *t = p;
  t->res = rank_work(t->rdv, t->rank, t->world, t->null_stream, t->why, sizeof t->why);
  return NULL;
}

static void test_two_ranks(void **st) {
  (void)st;
  store s;
  ps_rendezvous rdv = store_open(&s);
  for (int ns = 0; ns < 2; ns++) {
    thr t[2];
    pthread_t id[2];
    for (int r = 0; r < 2; r++) {
      t[r] = (thr){.rdv = &rdv, .rank = r, .world = 2, .null_stream = ns};
      assert_int_equal(pthread_create(&id[r], NULL, thr_main, &t[r]), 0);
    }
    for (int r = 0; r < 2; r++) pthread_join(id[r], NULL);
    for (int r = 0; r < 2; r++)
      if (t[r].res) fail_msg("rank %d of 2 (%s stream): %s", r, ns ? "default" : "backend", t[r].res);
  }
  store_fini(&s);
}

int main(int argc, char **argv) {
  bool two = argc > 1 && strcmp(argv[1], "--two-rank") == 0;
  if (!ps_cuda_available()) {
    store s;
    ps_rendezvous rdv = store_open(&s);
    ps_coll *c = (ps_coll *)1;
    ps_error err;
    ps_status st = ps_coll_create_nccl(&rdv, "x", 0, 1, 0, NULL, &c, &err);
    store_fini(&s);
    if (st != PS_ERR_UNSUPPORTED || c != NULL || !strstr(err.msg, "nccl: ")) {
      fprintf(stderr, "test_nccl: without a GPU, creation gave %s\n", ps_status_str(st));
      return 1;
    }
  }
  ct_require_gpu(two ? "test_nccl --two-rank" : "test_nccl");
  if (two) {
    int n = ps_cuda_device_count();
    if (n < 2) {
      printf(
          "test_nccl --two-rank: SKIPPED: %d GPU(s); NCCL needs one device per rank "
          "(two ranks on one GPU are refused as 'Duplicate GPU detected')\n",
          n);
      return CT_SKIP;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_ranks)};
    return cmocka_run_group_tests_name("nccl_two_rank", tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_missing_rank0),
      cmocka_unit_test(test_single_rank),
  };
  return cmocka_run_group_tests_name("nccl", tests, NULL, NULL);
}
