/* ps_serve_version: ps-serve's versions (a loaded model and its step, reference counted) and
 * --follow (the looks at DIR/latest or at the shards' step, and the swaps). See ps_serve_int.h.
 *
 * Design decisions (--follow --servers):
 * - Every reply is one version's, dense model and rows alike. The serving shards follow the
 *   checkpoints on their own and switch before or after ps-serve does, so ps-serve cannot tell
 *   from `latest` which rows a pull gets. Each pull reply names the step its rows were read
 *   from (ps_score.h check_step): a pull whose rows are not all of the model's step is not
 *   scored; the request asks the main thread for a look at once and is
 *   scored again by the next version, for up to SWITCH_WAIT_MS, then refused (503).
 * - ps-serve follows the shards, not `latest`: a look loads the model of the step every shard
 *   serves (DIR/step-N, when they agree), whatever latest names. Following latest left it
 *   behind for good when the shards took longer than a checkpoint interval to switch (it only
 *   loaded latest once they served exactly that step). The model must be in DIR: a step that
 *   ps-worker's retention already removed is warned about and not served.
 * - Loaded ahead: the shards switch after `latest` moves, so the main thread loads the model
 *   latest names beforehand (s->next, its shards' step not checked) and swaps it in the moment
 *   they all serve it; requests then wait for the shards, not for a model's load.
 * - The looks use a client of their own (the main thread's): a version's client is its
 *   requests', used under the compute lock. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps_ckpt_layout.h"
#include "ps_log.h"
#include "ps_score.h"
#include "ps_serve_int.h"
#include "ps_time.h"

#define PROG "ps-serve"

static void version_free(serve *s, version *v) {
  pthread_mutex_lock(&s->compute);
  ps_predictor_close(&v->p);
  pthread_mutex_unlock(&s->compute);
  free(v);
}

/* The model of dir (a step directory with --follow, else --checkpoint/--export as given),
 * opened off to the side; only its creation on the compute backend waits for the lock. */
ps_status version_load(serve *s, const char *dir, bool any_step, version **out, ps_error *err) {
  const serve_opts *o = &s->o;
  version *v = calloc(1, sizeof *v);
  if (!v) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  ps_predictor *p = &v->p;
  p->no_eval = 1;
  p->prec = o->prec;
  p->check_step = o->follow && o->servers;
  p->any_step = any_step;
  ps_status st = ps_predictor_open(p, o->export ? NULL : dir, o->export, o->servers, o->schema, err);
  if (st == PS_OK && o->servers && (st = ps_predictor_connect(p, o->servers, err)) != PS_OK)
    ps_error_prefix(err, "--servers %s: ", o->servers);
  else if (st == PS_OK && !o->servers) p->table = p->ck ? *ps_ckpt_table(p->ck) : *ps_export_model_table(p->ex);
  if (st == PS_OK) {
    pthread_mutex_lock(&s->compute);
    st = ps_predictor_init(p, o->device, o->compute_threads, o->batch, err);
    if (st != PS_OK) ps_predictor_close(p);
    pthread_mutex_unlock(&s->compute);
  } else {
    ps_predictor_close(p);
  }
  if (st != PS_OK) {
    free(v);
    return st;
  }
  v->step = ps_predictor_step(p);
  v->refs = 1;
  *out = v;
  return PS_OK;
}

version *version_get(serve *s) {
  pthread_mutex_lock(&s->vmu);
  version *v = s->cur;
  v->refs++;
  pthread_mutex_unlock(&s->vmu);
  return v;
}

void version_put(serve *s, version *v) {
  pthread_mutex_lock(&s->vmu);
  bool last = --v->refs == 0;
  pthread_mutex_unlock(&s->vmu);
  if (last) version_free(s, v);
}

/* The new version becomes the current one; the old one is freed by its last request. */
void version_swap(serve *s, version *v) {
  pthread_mutex_lock(&s->vmu);
  version *old = s->cur;
  s->cur = v;
  pthread_cond_broadcast(&s->vcv);
  pthread_mutex_unlock(&s->vmu);
  if (old) version_put(s, old);
  ps_gauge_set(s->step_g, (double)v->step);
}

/* How long a request waits for a version whose step the shards serve (--follow --servers):
 * a switch of every shard and the load of its model take well under a second; past this, the
 * shards disagree for long (one is stuck) and the request is refused (503) rather than held. */
#define SWITCH_WAIT_MS 5000

/* CLOCK_REALTIME ms from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long ns = ts.tv_nsec + (long)(ms % 1000) * 1000000L;
  return (struct timespec){ts.tv_sec + ms / 1000 + ns / 1000000000L, ns % 1000000000L};
}

/* A request found the shards on another step than its version: it asks the main thread for a
 * look now and waits for the next swap (or a short while: the shards may still be switching
 * one by one). False when the wait is over. */
bool serve_wait_swap(serve *s, const version *v, uint64_t t0) {
  if (ps_now_ns() - t0 > (uint64_t)SWITCH_WAIT_MS * 1000000ull) return false;
  struct timespec ts = deadline_in(20);
  pthread_mutex_lock(&s->vmu);
  s->look_now = true;
  pthread_cond_broadcast(&s->vcv);
  if (s->cur == v) pthread_cond_timedwait(&s->vcv, &s->vmu, &ts);
  pthread_mutex_unlock(&s->vmu);
  return true;
}

/* --follow: DIR/latest's name into seen, or with --servers the step every shard serves when they
 * agree on one (they may be behind latest), its probe client made. */
int serve_follow_start(serve *s, char *seen, size_t len) {
  const serve_opts *o = &s->o;
  ps_error err;
  if (ps_ckpt_latest_read(o->ckpt, seen, len, &err) != PS_OK)
    return ps_tool_fail(PROG, 2, "--follow: %s: %s", o->ckpt, ps_error_str(&err));
  if (!o->servers) return 0;
  ps_client_options co;
  ps_client_options_default(&co);
  long long step = -1;
  if (ps_client_create_list(o->servers, &co, &s->probe, &err) != PS_OK ||
      ps_score_servers_step(s->probe, &step, &err) != PS_OK)
    return ps_client_destroy(&s->probe), ps_tool_fail(PROG, 2, "--servers %s: %s", o->servers, ps_error_str(&err));
  if (step >= 0) ps_ckpt_step_name(seen, len, (uint64_t)step);
  return 0;
}

/* The step directory a look would serve: with --servers the step every shard serves (they
 * follow the checkpoints themselves, and a model is only right with their rows), else the one
 * DIR/latest names. False when there is none new: no latest, or shards that disagree (some are
 * still switching) or serve what is served. */
static bool follow_target(serve *s, const char *seen, char *name, size_t len) {
  if (!s->probe)
    return ps_ckpt_latest_read(s->o.ckpt, name, len, NULL) == PS_OK && strcmp(name, seen) != 0;
  long long step = -1;
  ps_error err;
  if (ps_score_servers_step(s->probe, &step, &err) != PS_OK || step < 0) return false;
  ps_ckpt_step_name(name, len, (uint64_t)step);
  return (uint64_t)step != s->cur->step;
}

/* --follow --servers: the model of the step DIR/latest names, loaded ahead into s->next while
 * the shards still serve an older one, so that their switch finds it ready (a request waits for
 * the swap, not for a load). */
static void preload(serve *s) {
  char name[256], dir[4096];
  uint64_t step;
  if (ps_ckpt_latest_read(s->o.ckpt, name, sizeof name, NULL) != PS_OK ||
      !ps_ckpt_step_parse(name, &step) || step == s->cur->step || (s->next && s->next->step == step))
    return;
  if (s->next) version_put(s, s->next), s->next = NULL;
  snprintf(dir, sizeof dir, "%s/%s", s->o.ckpt, name);
  ps_error err;
  if (version_load(s, dir, true, &s->next, &err) != PS_OK)
    PS_DEBUG("--follow: preloading %s failed (%s)", dir, ps_error_str(&err));
}

/* --follow: a look at DIR/latest (or at the shards' step); a new name is loaded (or taken from
 * the preload) and swapped in. seen: the name being served; failed: the last name that failed
 * (warned once, retried at each look). */
void serve_follow_look(serve *s, char *seen, char *failed) {
  char name[256];
  if (!follow_target(s, seen, name, sizeof name)) {
    if (s->probe) preload(s);
    return;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", s->o.ckpt, name);
  version *v = s->next;
  ps_error err;
  uint64_t step;
  bool ahead = v && ps_ckpt_step_parse(name, &step) && v->step == step;
  if (ahead) {
    s->next = NULL;
  } else if (version_load(s, dir, false, &v, &err) != PS_OK) {
    if (strcmp(name, failed) != 0)
      PS_WARN("--follow: %s cannot be served yet (%s): still serving step %" PRIu64, dir,
              ps_error_str(&err), s->cur->step);
    snprintf(failed, 256, "%s", name);
    return;
  }
  PS_INFO("--follow: serving step %" PRIu64 " (%s%s), was %" PRIu64, v->step, dir,
          ahead ? ", loaded ahead" : "", s->cur->step);
  version_swap(s, v);
  ps_counter_inc(s->swaps);
  snprintf(seen, 256, "%s", name);
}

/* The main thread's wait between looks: poll_ms, or less when a request asks for a look. */
void serve_follow_wait(serve *s) {
  struct timespec ts = deadline_in(s->o.poll_ms);
  pthread_mutex_lock(&s->vmu);
  if (!s->look_now) pthread_cond_timedwait(&s->vcv, &s->vmu, &ts);
  s->look_now = false;
  pthread_mutex_unlock(&s->vmu);
}

