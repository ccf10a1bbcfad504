/* ps_server_follow: ps-server --serve DIR --follow -- a serving shard that picks up each newly
 * committed checkpoint of DIR without a restart.
 *
 * A watcher thread reads DIR/latest every FOLLOW_LOOK_MS. When it names another step-N, the
 * thread opens that checkpoint's snapshot of this shard read-only (ps_server_serve.c), checks
 * it (the cluster's shard count, the same tables as the one served) and hands it to the main
 * thread as a new version; the main thread makes it current between two messages. A version is
 * reference counted: being current is one reference, and every request holds one from its
 * dispatch to the end of its store work (ps_server_partition_threads.c); the last reference
 * gone, the watcher closes it.
 *
 * Design decisions:
 * - Atomic per request: a request takes its version (r->store) once, at dispatch, and every
 *   partition thread's share of it reads that store, so a pull's rows all come from one step
 *   however the switch falls; later requests take the new one. Nothing waits: requests in
 *   flight finish on the old snapshot while new ones already use the new, so a switch costs
 *   the main thread a pointer swap (no drain, no held requests). Several
 *   shards switch independently: a client pulling from all of them may, around a switch, get
 *   one shard's rows from the old step and another's from the new.
 * - A poll, not inotify: DIR is typically on a shared filesystem (NFS, Lustre, a Kubernetes
 *   volume) written by a training job on another host, where inotify sees no remote writes;
 *   one small read every 200 ms costs nothing. Not a second: a stream checkpointing every
 *   few seconds (--checkpoint-every-s) is served within seconds of training, and the look
 *   was a large part of that (bench/serve/freshness.py through a shard, checkpoint done ->
 *   served median 2.0-2.2 s with 200 ms, 4.3-5.1 s with 1 s; bench/RESULTS-serve.md).
 *   ps-worker replaces `latest` by rename only after every shard committed, so the step it
 *   names is whole.
 * - Warm before the switch: a new snapshot's hot tier is empty, so without help every key of
 *   the first requests after a switch would be a RocksDB read, on the request path. The main
 *   thread keeps the keys of the last pulls (a ring of --follow-warm-keys, copied at dispatch
 *   under the watcher's mutex) and the watcher pulls them from the new snapshot before handing
 *   it over, so the rows being asked for are in memory when it becomes current.
 * - Opening and closing run on the watcher thread: a RocksDB open (or a delta chain's
 *   composition) and the close of a snapshot with a large hot tier take long enough to show
 *   in pull latency if the main thread did them. The main thread only swaps pointers and
 *   counts references; the watcher's hand-offs go through one mutex and the signal pipe.
 * - A checkpoint that cannot be served (unreadable, another shard count, other tables) is
 *   logged once in one WARN line and skipped; the shard keeps serving what it served, and
 *   the next new name in `latest` is tried. A `latest` that goes back to an older step is
 *   followed too: it is what the training job says is its state.
 * - Memory: while requests of the previous version run, two snapshots are open, each with
 *   its own hot tier (--cache-mb), so a following shard may briefly use twice its budget. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps_ckpt_layout.h"
#include "ps_log.h"
#include "ps_server_follow_int.h"
#include "ps_server_int.h"
#include "ps_server_serve_int.h"
#include "ps_server_stats_int.h"
#include "ps_thread.h"
#include "ps_time.h"

/* How often the watcher reads DIR/latest (see "A poll, not inotify" above). */
#define FOLLOW_LOOK_MS 200

typedef struct srv_version {
  ps_store *store;
  uint64_t step;
  size_t warmed;  /* keys pulled into its hot tier before it became current */
  double warm_ms;
  uint64_t refs; /* main thread only: current (1) + requests whose store work runs */
  char dir[4096];
  struct srv_version *next;      /* in ready / retired (under mu) */
  struct srv_version *live_next; /* in live (main thread) */
} srv_version;

typedef struct srv_follow {
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* under mu */
  bool stop;
  srv_version *ready;   /* opened by the watcher, not yet current */
  srv_version *retired; /* no longer used: to close */
  atomic_bool have_ready;
  uint64_t *ring_keys;  /* the last ring_cap keys pulled, and their tables */
  uint32_t *ring_tabs;
  size_t ring_cap, ring_pos, ring_n; /* ring_cap: --follow-warm-keys (12 bytes each) */
  /* main thread only (cur also under mu: the watcher reads its step) */
  srv_version *cur;
  srv_version *live;    /* made current once and not yet retired (cur among them) */
  /* watcher only */
  char seen[4096];      /* what `latest` named when last looked at */
  ps_table_spec specs[PS_STORE_MAX_TABLES];
  uint32_t ids[PS_STORE_MAX_TABLES];
  size_t ntables;
} srv_follow;

static void version_close(srv_version *v) {
  if (!v) return;
  ps_store_close(&v->store);
  free(v);
}

/* The tables of a new snapshot must be the served ones (ids and row specs): the server's
 * tables, and what clients declared against them, stay as they are across a switch. */
static ps_status same_tables(srv_follow *f, ps_store *st, const char *dir, ps_error *err) {
  uint32_t ids[PS_STORE_MAX_TABLES];
  size_t n = ps_store_tables(st, ids, PS_STORE_MAX_TABLES);
  if (n != f->ntables)
    return ps_error_set(err, PS_ERR_CONFLICT, "%s holds %zu table(s), the served one %zu", dir,
                        n, f->ntables);
  for (size_t i = 0; i < f->ntables; i++) {
    ps_table_spec sp;
    if (ps_store_get_spec(st, f->ids[i], &sp) != PS_OK)
      return ps_error_set(err, PS_ERR_CONFLICT, "%s has no table %u", dir, f->ids[i]);
    char diff[160];
    if (!ps_table_spec_rows_equal(&sp, &f->specs[i]))
      return ps_error_set(err, PS_ERR_CONFLICT, "%s: table %u '%s' is not the served one: new vs "
                          "served %s", dir, f->ids[i], sp.name,
                          ps_table_spec_diff(&sp, &f->specs[i], diff, sizeof diff));
  }
  return PS_OK;
}

/* The new version's hot tier gets the rows of the last keys pulled (read from its RocksDB
 * snapshot here, on the watcher thread, while nothing else uses it), so that the first
 * requests after the switch find them in memory instead of all going to RocksDB. */
static void warm(srv_follow *f, srv_version *v) {
  uint64_t t0 = ps_now_ns();
  pthread_mutex_lock(&f->mu);
  size_t n = f->ring_n;
  uint64_t *keys = n ? malloc(n * sizeof *keys) : NULL;
  uint32_t *tabs = n ? malloc(n * sizeof *tabs) : NULL;
  if (keys && tabs) {
    memcpy(keys, f->ring_keys, n * sizeof *keys);
    memcpy(tabs, f->ring_tabs, n * sizeof *tabs);
  }
  pthread_mutex_unlock(&f->mu);
  enum { CHUNK = 65536 };
  uint64_t *sel = malloc(CHUNK * sizeof *sel);
  for (size_t t = 0; keys && tabs && sel && t < f->ntables; t++) {
    const uint32_t id = f->ids[t];
    float *rows = malloc((size_t)CHUNK * f->specs[t].dim * sizeof *rows);
    size_t m = 0;
    for (size_t i = 0; rows && i <= n; i++) {
      if (i < n && tabs[i] == id) sel[m++] = keys[i];
      if (m == CHUNK || (i == n && m)) {
        if (ps_store_pull(v->store, id, sel, m, rows) == PS_OK) v->warmed += m;
        m = 0;
      }
    }
    free(rows);
  }
  free(sel);
  free(keys);
  free(tabs);
  v->warm_ms = (double)(ps_now_ns() - t0) / 1e6;
}

/* The watcher's look at `latest`: a new name is opened and handed over, or logged. */
static void watch_once(ps_server *s, srv_follow *f) {
  char name[256]; /* "" when latest cannot be read: a rename in progress is retried */
  ps_status named = ps_ckpt_latest_read(s->opt.serve_dir, name, sizeof name, NULL);
  if (!name[0] || strcmp(name, f->seen) == 0) return;
  snprintf(f->seen, sizeof f->seen, "%s", name);
  srv_version *v = calloc(1, sizeof *v);
  ps_error err;
  ps_status st = v ? PS_OK : ps_error_set(&err, PS_ERR_NOMEM, "out of memory");
  if (st == PS_OK && named != PS_OK)
    st = ps_error_set(&err, PS_ERR_CORRUPT, "it does not name a checkpoint");
  if (st == PS_OK &&
      (size_t)snprintf(v->dir, sizeof v->dir, "%s/%s", s->opt.serve_dir, name) >= sizeof v->dir)
    st = ps_error_set(&err, PS_ERR_INVALID, "path too long");
  if (st == PS_OK) st = srv_serve_open_step(s, v->dir, &v->store, &v->step, &err);
  if (st == PS_OK) st = same_tables(f, v->store, v->dir, &err);
  if (st == PS_OK) warm(f, v);
  if (st != PS_OK) {
    pthread_mutex_lock(&f->mu);
    uint64_t step = f->cur ? f->cur->step : 0; /* f->cur is set before the thread starts */
    pthread_mutex_unlock(&f->mu);
    PS_WARN("--follow: %s/latest names %s, which cannot be served (%s): still serving step "
            "%" PRIu64, s->opt.serve_dir, name, ps_error_str(&err), step);
    version_close(v);
    return;
  }
  pthread_mutex_lock(&f->mu);
  srv_version *late = f->ready; /* opened a moment ago and never made current: superseded */
  f->ready = v;
  atomic_store(&f->have_ready, true);
  pthread_mutex_unlock(&f->mu);
  version_close(late);
  char c = 1;
  ssize_t w = write(s->sigpipe[1], &c, 1); /* wakes the main loop */
  (void)w;
}

static void *watch_main(void *arg) {
  ps_server *s = arg;
  srv_follow *f = s->follow;
  pthread_mutex_lock(&f->mu);
  while (!f->stop) {
    while (f->retired) {
      srv_version *v = f->retired;
      f->retired = v->next;
      pthread_mutex_unlock(&f->mu);
      version_close(v);
      pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    watch_once(s, f);
    pthread_mutex_lock(&f->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += FOLLOW_LOOK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (!f->stop && !f->retired) pthread_cond_timedwait(&f->cv, &f->mu, &ts);
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

ps_status srv_follow_start(ps_server *s, ps_error *err) {
  srv_follow *f = calloc(1, sizeof *f);
  srv_version *v = calloc(1, sizeof *v);
  size_t cap = s->opt.follow_warm_keys;
  if (f && cap) {
    f->ring_cap = cap;
    f->ring_keys = malloc(cap * sizeof *f->ring_keys);
    f->ring_tabs = malloc(cap * sizeof *f->ring_tabs);
  }
  if (!f || !v || (cap && (!f->ring_keys || !f->ring_tabs))) {
    if (f) {
      free(f->ring_keys);
      free(f->ring_tabs);
    }
    free(f);
    free(v);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  atomic_init(&f->have_ready, false);
  v->store = s->store;
  v->step = s->last.step;
  v->refs = 1;
  snprintf(v->dir, sizeof v->dir, "%s", s->last.path);
  f->cur = f->live = v;
  const char *slash = strrchr(s->last.path, '/');
  snprintf(f->seen, sizeof f->seen, "%s", slash ? slash + 1 : s->last.path);
  f->ntables = ps_store_tables(s->store, f->ids, PS_STORE_MAX_TABLES);
  for (size_t i = 0; i < f->ntables; i++) ps_store_get_spec(s->store, f->ids[i], &f->specs[i]);
  s->follow = f;
  if (pthread_create(&f->th, NULL, watch_main, s) != 0) {
    s->follow = NULL;
    free(v); /* s->store stays the server's */
    free(f->ring_keys);
    free(f->ring_tabs);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
    return ps_error_set(err, PS_ERR_INTERNAL, "cannot start the --follow watcher: %s",
                        strerror(errno));
  }
  f->started = true;
  PS_INFO("--follow: watching %s/latest (a look every %d ms)", s->opt.serve_dir, FOLLOW_LOOK_MS);
  return PS_OK;
}

static void unref(srv_follow *f, srv_version *v) {
  if (--v->refs) return;
  for (srv_version **p = &f->live; *p; p = &(*p)->live_next)
    if (*p == v) {
      *p = v->live_next;
      break;
    }
  pthread_mutex_lock(&f->mu);
  v->next = f->retired;
  f->retired = v;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

bool srv_follow_tick(ps_server *s) {
  srv_follow *f = s->follow;
  if (!f || !atomic_load(&f->have_ready)) return false;
  pthread_mutex_lock(&f->mu);
  srv_version *v = f->ready, *old = f->cur;
  f->ready = NULL;
  atomic_store(&f->have_ready, false);
  if (v) f->cur = v; /* under mu: the watcher's WARN line reads the step served */
  pthread_mutex_unlock(&f->mu);
  if (!v) return false;
  v->refs = 1;
  v->live_next = f->live;
  f->live = v;
  s->store = v->store;
  s->last.step = v->step;
  snprintf(s->last.path, sizeof s->last.path, "%s", v->dir);
  PS_INFO("now serving step %" PRIu64 " (%s), shard %u of %u, its hot tier warmed with the "
          "last %zu keys pulled (%.0f ms); step %" PRIu64 " closes after its %" PRIu64
          " request(s) in flight", v->step, v->dir, s->opt.shard, s->opt.shards, v->warmed,
          v->warm_ms, old->step, old->refs - 1);
  unref(f, old);
  return true;
}

/* The keys of r (a pull) into the ring the watcher warms a new version with. */
static void remember(srv_follow *f, const srv_req *r) {
  size_t n = r->msg.nkeys;
  const uint64_t *k = r->msg.keys;
  const size_t cap = f->ring_cap;
  if (!cap || !r->tab || !n || !k) return;
  if (n > cap) {
    k += n - cap;
    n = cap;
  }
  const uint32_t id = r->tab->spec.id;
  pthread_mutex_lock(&f->mu);
  for (size_t done = 0; done < n;) {
    size_t run = cap - f->ring_pos;
    if (run > n - done) run = n - done;
    memcpy(f->ring_keys + f->ring_pos, k + done, run * sizeof *k);
    for (size_t i = 0; i < run; i++) f->ring_tabs[f->ring_pos + i] = id;
    f->ring_pos = (f->ring_pos + run) % cap;
    done += run;
  }
  f->ring_n = f->ring_n + n > cap ? cap : f->ring_n + n;
  pthread_mutex_unlock(&f->mu);
}

void srv_follow_acquire(ps_server *s, srv_req *r) {
  if (r->ver) srv_follow_release(s, r);
  r->ver = s->follow->cur;
  r->ver->refs++;
  r->store = r->ver->store;
  if (r->task_kind == TK_PULL) remember(s->follow, r);
}

void srv_follow_release(ps_server *s, srv_req *r) {
  srv_version *v = r->ver;
  r->ver = NULL;
  if (v) unref(s->follow, v);
}

void srv_follow_stop(ps_server *s) {
  srv_follow *f = s->follow;
  if (!f) return;
  if (f->started) ps_thread_stop(f->th, &f->mu, &f->cv, &f->stop);
  /* Every version, whatever requests still hold it (their threads are gone). */
  version_close(f->ready);
  while (f->retired) {
    srv_version *v = f->retired;
    f->retired = v->next;
    version_close(v);
  }
  while (f->live) {
    srv_version *v = f->live;
    f->live = v->live_next;
    version_close(v);
  }
  s->store = NULL;
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f->ring_keys);
  free(f->ring_tabs);
  free(f);
  s->follow = NULL;
}
