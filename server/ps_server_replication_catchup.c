/* ps_server_replication_catchup: catch-up of a replica that lost the shard's history (restarted
 * while a primary lived, or dropped from the live set) -- the base and the history every replica
 * keeps, the primary's side that streams them, and the stale replica's side that loads them.
 *
 * Design decisions (docs/DESIGN.md, "Replicated shards"):
 * - Base plus history, not a snapshot under a pause: every replica keeps a base (a store
 *   snapshot, data dir/repl-base, taken where the shard's history starts: its first role at
 *   start, or the primary's RESTORE) and every state-changing request it took since, in order
 *   (the frames, shared with the requests'). A stale replica gets the base's files over the
 *   wire in 512 KiB chunks, loads it, and then the history as ordinary forwards, through the same
 *   code a backup runs, so that it ends in the primary's state bit for bit: rows, optimizer
 *   state, sync buffers, step bookkeeping and exactly-once records alike (a snapshot taken now
 *   would miss the sync buffers and the records). The base files are immutable (RocksDB
 *   checkpoint files), so the primary streams them while it keeps serving: no store work is
 *   held. The catching replica joins the live set when every message was acknowledged and
 *   nothing of the history is left unsent, all on the main thread, so no forward falls between.
 * - The price is memory: the history grows with the job (every push's frames). It is dropped at
 *   each new base; taking a base at each committed checkpoint would bound it (not done yet).
 * - One channel, bounded: catch-up messages travel on the primary's DEALER to the peer, at most
 *   SYNC_WINDOW unacknowledged, and carry request ids with the top bit set, told apart from the
 *   heartbeats that share the channel. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_exactly_once_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_replication_int.h"
#include "ps_time.h"

#define SYNC_CHUNK ((size_t)512 << 10) /* under PS_WIRE_MAX_HEADER with its header */
#define SYNC_WINDOW 64u
#define SYNC_BIT (1ull << 63)

typedef struct repl_sync {
  char **files; /* the base's files, relative */
  size_t nfiles, fi, log_pos;
  uint64_t off, bytes, started;
  uint32_t outstanding;
  bool base_sent;
} repl_sync;

static void base_path(const ps_server *s, const char *name, char *out, size_t len) {
  snprintf(out, len, "%s/%s", s->data_dir, name);
}

/* ---------------------------------------------------------------- the history */

void srv_repl_log_add(ps_server *s, srv_req *r) {
  srv_repl *x = s->repl;
  if (!x->have_base) return;
  if (!srv_grow((void **)&x->log, &x->log_cap, x->nlog + 1, sizeof *x->log, 1024)) {
    PS_ERROR_RL("out of memory for the replication history: no catch-up from this replica");
    x->have_base = false;
    return;
  }
  repl_entry *e = &x->log[x->nlog++];
  e->nfr = r->nfr;
  for (size_t i = 0; i < r->nfr; i++) {
    zmq_msg_init(&e->fr[i]);
    zmq_msg_copy(&e->fr[i], &r->fr[i]);
  }
}

static void log_clear(srv_repl *x) {
  for (size_t k = 0; k < x->nlog; k++)
    for (size_t i = 0; i < x->log[k].nfr; i++) zmq_msg_close(&x->log[k].fr[i]);
  x->nlog = 0;
}

void srv_repl_log_free(srv_repl *x) {
  log_clear(x);
  free(x->log);
  x->log = NULL;
  x->log_cap = 0;
}

void srv_repl_base_take(ps_server *s, uint64_t step) {
  srv_repl *x = s->repl;
  char dir[2200];
  base_path(s, "repl-base", dir, sizeof dir);
  ps_error err;
  log_clear(x);
  for (uint32_t i = 0; i < x->n; i++) srv_repl_sync_stop(&x->peer[i]); /* they ask again */
  x->have_base = ps_store_snapshot_remove(dir, &err) == PS_OK &&
                 ps_store_snapshot(s->store, dir, &err) == PS_OK;
  x->base_step = step;
  if (!x->have_base)
    PS_WARN("replica %u of shard %u: no base for catch-ups (%s): a stale replica cannot catch "
            "up from this one", x->self, s->opt.shard, err.msg);
}

/* ---------------------------------------------------------------- the primary's side */

/* The regular files under dir (relative names, into *files); false without memory. */
static bool list_files(const char *root, const char *rel, char ***files, size_t *n, size_t *cap) {
  char path[4200];
  snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
  DIR *d = opendir(path);
  if (!d) return false;
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char sub[4200], full[8400];
    snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
    snprintf(full, sizeof full, "%s/%s", root, sub);
    struct stat st;
    if (stat(full, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      ok = list_files(root, sub, files, n, cap);
    } else if (S_ISREG(st.st_mode)) {
      ok = srv_grow((void **)files, cap, *n + 1, sizeof **files, 16) &&
           ((*files)[*n] = strdup(sub)) != NULL;
      if (ok) (*n)++;
    }
  }
  closedir(d);
  return ok;
}

void srv_repl_sync_stop(repl_peer *p) {
  repl_sync *y = p->sync;
  if (!y) return;
  for (size_t i = 0; i < y->nfiles; i++) free(y->files[i]);
  free(y->files);
  free(y);
  p->sync = NULL;
}

/* OP_REPL_CATCHUP from replica i: its catch-up starts (a running one starts over). */
void srv_repl_sync_start(ps_server *s, srv_req *r, uint32_t i) {
  srv_repl *x = s->repl;
  repl_peer *p = &x->peer[i];
  if (x->role != SRV_REPL_PRIMARY || !x->have_base) {
    srv_repl_refuse(s, r, x->role != SRV_REPL_PRIMARY ? "a catch-up" : "a catch-up (no base)");
    return;
  }
  srv_repl_sync_stop(p);
  repl_sync *y = calloc(1, sizeof *y);
  char dir[2200];
  base_path(s, "repl-base", dir, sizeof dir);
  size_t cap = 0;
  if (!y || !list_files(dir, "", &y->files, &y->nfiles, &cap)) {
    if (y) p->sync = y;
    srv_repl_sync_stop(p);
    srv_reply_error(s, r, PS_ERR_IO, "cannot list the base %s", dir);
    return;
  }
  y->started = ps_now_ns();
  p->sync = y;
  p->live = false;
  PS_INFO("catching up replica %u (%s) of shard %u: a base of %zu files and %zu requests so far",
          i, p->url, s->opt.shard, y->nfiles, x->nlog);
  srv_reply_ok(s, r);
}

static bool send_file_chunk(ps_server *s, uint32_t i, repl_sync *y) {
  srv_repl *x = s->repl;
  char dir[2200], path[6500];
  base_path(s, "repl-base", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, y->files[y->fi]);
  static unsigned char buf[SYNC_CHUNK];
  int fd = open(path, O_RDONLY);
  ssize_t n = fd >= 0 ? pread(fd, buf, SYNC_CHUNK, (off_t)y->off) : -1;
  if (fd >= 0) close(fd);
  if (n < 0) return false;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_REPL_FILE);
  h.request_id = SYNC_BIT | ++x->fseq;
  h.repl_epoch = x->epoch;
  h.repl_from = x->self + 1;
  h.name = y->files[y->fi];
  h.step = y->off;
  h.blob.data = buf;
  h.blob.len = (size_t)n;
  if (!srv_repl_send(x, i, &h, NULL, 0)) return false;
  y->outstanding++;
  y->off += (uint64_t)n;
  y->bytes += (uint64_t)n;
  if ((size_t)n < SYNC_CHUNK) { /* the file's end */
    y->fi++;
    y->off = 0;
  }
  return true;
}

/* Sends entry k of the history to peer i as a forward. */
static bool send_entry(srv_repl *x, uint32_t i, repl_entry *e) {
  Ember__Header *h =
      ember__header__unpack(NULL, zmq_msg_size(&e->fr[0]), zmq_msg_data(&e->fr[0]));
  if (!h) return false;
  h->request_id = SYNC_BIT | ++x->fseq;
  h->repl_epoch = x->epoch;
  h->repl_from = x->self + 1;
  bool ok = srv_repl_send(x, i, h, e->fr + 1, e->nfr - 1);
  ember__header__free_unpacked(h, NULL);
  return ok;
}

static void sync_fail(ps_server *s, uint32_t i, const char *why) {
  PS_WARN("catch-up of replica %u of shard %u stopped: %s", i, s->opt.shard, why);
  srv_repl_sync_stop(&s->repl->peer[i]);
}

/* Sends what peer i's window allows; the end of its catch-up makes it live. */
static void pump_one(ps_server *s, uint32_t i) {
  srv_repl *x = s->repl;
  repl_peer *p = &x->peer[i];
  repl_sync *y = p->sync;
  while (y->outstanding < SYNC_WINDOW) {
    if (y->fi < y->nfiles) {
      if (!send_file_chunk(s, i, y)) return sync_fail(s, i, "a base file could not be sent");
    } else if (!y->base_sent) {
      Ember__Header h;
      ps_wire_header_init(&h, EMBER__OP__OP_REPL_BASE);
      h.request_id = SYNC_BIT | ++x->fseq;
      h.repl_epoch = x->epoch;
      h.repl_from = x->self + 1;
      h.step = x->base_step;
      if (!srv_repl_send(x, i, &h, NULL, 0)) return sync_fail(s, i, "its channel is closed");
      y->base_sent = true;
      y->outstanding++;
    } else if (y->log_pos < x->nlog) {
      if (!send_entry(x, i, &x->log[y->log_pos++]))
        return sync_fail(s, i, "a request of the history could not be sent");
      y->outstanding++;
    } else {
      break;
    }
  }
  if (y->base_sent && y->log_pos == x->nlog && y->outstanding == 0) {
    PS_INFO("replica %u of shard %u caught up: base %zu files (%" PRIu64 " bytes) and %zu "
            "requests in %.0f ms, no store work held; it is live again", i, s->opt.shard,
            y->nfiles, y->bytes, y->log_pos, (double)(ps_now_ns() - y->started) / 1e6);
    srv_repl_sync_stop(p);
    p->live = true;
    p->heard = true;
    p->heard_ns = ps_now_ns();
    x->catchups++;
  }
}

void srv_repl_sync_pump(ps_server *s) {
  srv_repl *x = s->repl;
  for (uint32_t i = 0; i < x->n; i++)
    if (x->peer[i].sync) pump_one(s, i);
}

bool srv_repl_sync_ack(ps_server *s, uint32_t i, const Ember__Header *h) {
  repl_peer *p = &s->repl->peer[i];
  if (!(h->request_id & SYNC_BIT)) return false;
  if (!p->sync) return true; /* of an abandoned catch-up */
  if (h->status == PS_ERR_UNAVAILABLE && h->repl_from) {
    sync_fail(s, i, h->message ? h->message : "refused");
    return true;
  }
  if (p->sync->outstanding) p->sync->outstanding--;
  if (h->status && (h->op == EMBER__OP__OP_REPL_FILE || h->op == EMBER__OP__OP_REPL_BASE ||
                    h->op == EMBER__OP__OP_ERROR) && !p->sync->base_sent) {
    sync_fail(s, i, h->message ? h->message : "a base message failed");
    return true;
  }
  pump_one(s, i);
  return true;
}

/* ---------------------------------------------------------------- the stale replica's side */

void srv_repl_sync_ask(ps_server *s) {
  srv_repl *x = s->repl;
  if (x->primary >= x->n) return;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_REPL_CATCHUP);
  h.request_id = ++x->fseq;
  h.repl_from = x->self + 1;
  h.repl_epoch = x->epoch;
  x->sync_asked = ps_now_ns();
  char dir[2200];
  base_path(s, "repl-incoming", dir, sizeof dir);
  ps_error err;
  ps_store_snapshot_remove(dir, &err); /* what an earlier try left */
  if (srv_repl_send(x, x->primary, &h, NULL, 0))
    PS_INFO("replica %u of shard %u asks replica %u to catch it up", x->self, s->opt.shard,
            x->primary);
}

/* A chunk of the base into data dir/repl-incoming/NAME at its offset. */
static ps_status write_chunk(ps_server *s, const Ember__Header *h, ps_error *err) {
  if (!h->name || !h->name[0] || strstr(h->name, "..") || h->name[0] == '/')
    return ps_error_set(err, PS_ERR_INVALID, "a base file named '%s'", h->name ? h->name : "");
  char dir[2200], path[4400];
  base_path(s, "repl-incoming", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, h->name);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  ps_status st = ps_mkdir_p(path);
  *slash = '/';
  int fd = st == PS_OK ? open(path, O_WRONLY | O_CREAT, 0644) : -1;
  ssize_t w = fd >= 0 ? pwrite(fd, h->blob.data, h->blob.len, (off_t)h->step) : -1;
  if (fd >= 0) close(fd);
  if (w != (ssize_t)h->blob.len)
    return ps_error_set(err, PS_ERR_IO, "writing %s: %s", path, strerror(errno));
  return PS_OK;
}

/* The base is complete: the store takes its content, the server forgets its own history. */
static ps_status load_base(ps_server *s, uint64_t step, ps_error *err) {
  srv_repl *x = s->repl;
  char in[2200], base[2200];
  base_path(s, "repl-incoming", in, sizeof in);
  base_path(s, "repl-base", base, sizeof base);
  ps_status st = ps_store_restore(s->store, in, err);
  if (st != PS_OK) return st;
  for (uint32_t id = 1; id <= PS_WIRE_MAX_TABLE; id++) {
    srv_table_free(s->tables[id]);
    s->tables[id] = NULL;
  }
  s->max_table = 0;
  srv_tables_adopt_store(s);
  if (step) srv_tables_reset_steps(s, step);
  srv_drop_sync_all(s);
  srv_once_forget(s);
  log_clear(x);
  ps_store_snapshot_remove(base, err);
  x->have_base = rename(in, base) == 0;
  x->base_step = step;
  x->complete = true; /* from here on it takes the whole history */
  return PS_OK;
}

bool srv_repl_sync_intake(ps_server *s, srv_req *r) {
  srv_repl *x = s->repl;
  const Ember__Header *h = r->h;
  const int op = (int)h->op;
  if (op != EMBER__OP__OP_REPL_FILE && op != EMBER__OP__OP_REPL_BASE) return false;
  if ((x->role != SRV_REPL_STALE && x->role != SRV_REPL_CATCHING) ||
      h->repl_from != x->primary + 1 || h->repl_epoch != x->epoch) {
    srv_repl_refuse(s, r, "a catch-up");
    return true;
  }
  x->role = SRV_REPL_CATCHING;
  x->sync_heard = ps_now_ns();
  ps_error err;
  ps_status st = op == EMBER__OP__OP_REPL_FILE ? write_chunk(s, h, &err)
                                               : load_base(s, h->step, &err);
  if (st != PS_OK) {
    srv_reply_error(s, r, st, "catch-up: %s", err.msg);
    return true;
  }
  if (op == EMBER__OP__OP_REPL_BASE)
    PS_INFO("replica %u of shard %u loaded the base of replica %u; taking its history",
            x->self, s->opt.shard, x->primary);
  srv_reply_ok(s, r);
  return true;
}
