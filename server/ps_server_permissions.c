/* ps_server_permissions: what a client may do to a shard beyond reading and training its rows --
 * where a checkpoint may be written or restored from, when a restore may roll the shard back,
 * whose declaration of a new table counts, and what the checkpoint record may say.
 *
 * Checkpoint roots. A CHECKPOINT or RESTORE names a directory (ps-worker sends
 * <--checkpoint-dir>/step-S/shards, realpath'd on the worker). The shard writes and reads only
 * inside its data dir and one checkpoint root: --checkpoint-root when given, otherwise the
 * directory holding the step-S of the job's first checkpoint (or restore) outside the data dir
 * -- the worker's --checkpoint-dir, which is how the workers and the shards agree on it without
 * a new message. That first path must have ps-worker's layout (ROOT/step-N or
 * ROOT/step-N/shards), be absolute and free of symlinks, and ROOT/step-N must already exist
 * (the worker made it, on a file system both hosts mount at the same path). The root is then
 * pinned: recorded in ember-server.json, it survives restarts, and every later path must lie
 * under it. A persistent service whose jobs use different checkpoint dirs passes
 * --checkpoint-root (the systemd and Kubernetes recipes do). Every path is resolved before the
 * check (ps_path_canonical): '..' is refused outright, and a symlink is followed, so one that
 * leads out of the roots is refused too. Only requests are checked: the shard's own last
 * checkpoint (startup recovery, RESTORE without a path) was checked when it was committed.
 *
 * Prepares. A shard holds one prepared checkpoint, and a new PREPARE drops it, an ABORT
 * deletes it and a COMMIT makes it the shard's (before the other shards may have prepared).
 * So while a prepare awaits its commit, CHECKPOINTs from other connections are refused, as
 * long as the preparing connection (the job's driver) is open. A PREPARE waits for its step's
 * pushes before it runs, holding the CHECKPOINTs and RESTOREs behind it; when its connection
 * closes first it is dropped, so a PREPARE of a step the job never reaches cannot hold them.
 *
 * Restores. A RESTORE rolls the rows back, under any job training on the shard. It is refused
 * while another connection that trained here (sent a PUSH or STEP) is still connected; the
 * job's own driver (the connection that trained) and a resuming job (whose workers wait for
 * the restore before their first push) may restore. Connections are known by the ROUTER's
 * disconnect events (by file descriptor, as in ps_coord.c).
 *
 * Declarations. The first DECLARE of a table used to fix its spec for whoever came first, so
 * one declaration before the job made every worker fail. A table the store does not have is
 * provisional until its first PULL, PUSH or STEP: declarations only record who asked for
 * which spec (the latest is the table's for now; a connection cannot change its own), and the
 * first use puts the spec that the user's own connection declared into the store.
 * Connections that had declared another spec are then refused with a clear message (not
 * served rows of a spec they did not ask for) until they declare the table's. A used table is
 * fixed as before: another spec is refused.
 *
 * The checkpoint record. The coordinator's key ember/checkpoint/latest says which checkpoint
 * is the job's; shard 0 accepts a value only when it names the checkpoint shard 0 itself last
 * committed, so nobody can point a resume at another one. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ps_ckpt_layout.h"
#include "ps_fs.h"
#include "ps_log.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_int.h"
#include "ps_server_permissions_int.h"
#include "ps_time.h"

/* At most this many training connections are remembered; beyond, restores are refused. */
#define GUARD_MAX_TRAINERS 4096u

/* A connection that trained (PUSH or STEP) on this shard, until it closes. */
typedef struct permit_trainer {
  srv_coord_peer peer;
  uint64_t last_ns; /* its last PUSH or STEP */
} permit_trainer;

/* A connection whose declaration of `table` lost to its first user's: refused until it
 * declares the table's spec. */
typedef struct permit_stale {
  uint32_t table;
  srv_coord_peer peer;
} permit_stale;

/* The roots checkpoints may use (canonical), who trains, who prepared the staged checkpoint,
 * and whose declarations went stale. */
struct srv_permit {
  char data_real[4096];
  char ckpt_root[4096];  /* --checkpoint-root, or the root the job's first checkpoint pinned */
  bool ckpt_root_pinned; /* ckpt_root came from a checkpoint: recorded in the metadata */
  permit_trainer *trainers;
  size_t ntrainers, trainers_cap;
  permit_stale *decl_stale;
  size_t ndecl_stale, decl_stale_cap;
  srv_coord_peer stager; /* who prepared `staged`, while its connection is open */
  bool stager_open;
};

ps_status srv_permit_init(ps_server *s) {
  return (s->permit = calloc(1, sizeof *s->permit)) ? PS_OK : PS_ERR_NOMEM;
}

const char *srv_permit_data_dir(const ps_server *s) {
  return s->permit->data_real[0] ? s->permit->data_real : s->data_dir;
}

/* The directory holding step-N when canon is ROOT/step-N or ROOT/step-N/shards (ps-worker's
 * layout) into out; false otherwise. */
static bool layout_root(const char *canon, char *out, size_t len) {
  char step_dir[PATH_MAX];
  uint64_t step;
  struct stat sb;
  return ps_ckpt_path_split(canon, out, len, &step) && strcmp(out, "/") != 0 &&
         ps_ckpt_step_path(step_dir, sizeof step_dir, out, step) == PS_OK &&
         stat(step_dir, &sb) == 0 && S_ISDIR(sb.st_mode);
}

ps_status srv_permit_load(ps_server *s, const char *pinned, ps_error *err) {
  if (!realpath(s->data_dir, s->permit->data_real))
    return ps_error_set(err, PS_ERR_IO, "resolving data dir %s: %s", s->data_dir,
                        strerror(errno));
  s->permit->ckpt_root[0] = '\0';
  s->permit->ckpt_root_pinned = false;
  if (s->opt.checkpoint_root) {
    ps_status st = ps_path_canonical(s->opt.checkpoint_root, s->permit->ckpt_root, sizeof s->permit->ckpt_root,
                                     err);
    if (st != PS_OK) {
      ps_error_prefix(err, "--checkpoint-root %s: ", s->opt.checkpoint_root);
      return st;
    }
    struct stat sb;
    if (stat(s->permit->ckpt_root, &sb) != 0)
      PS_WARN("--checkpoint-root %s does not exist (yet): checkpoints there fail until it does",
              s->permit->ckpt_root);
    return PS_OK;
  }
  char derived[PATH_MAX] = "";
  if (pinned && pinned[0] == '/' && strlen(pinned) < sizeof s->permit->ckpt_root) {
    snprintf(s->permit->ckpt_root, sizeof s->permit->ckpt_root, "%s", pinned);
  } else if (s->last.have && s->last.path[0] == '/' &&
             !ps_path_within(s->last.path, s->permit->data_real) &&
             layout_root(s->last.path, derived, sizeof derived)) {
    /* Metadata from before pinning: the last checkpoint's root is the job's. */
    snprintf(s->permit->ckpt_root, sizeof s->permit->ckpt_root, "%s", derived);
  }
  s->permit->ckpt_root_pinned = s->permit->ckpt_root[0] != '\0';
  return PS_OK;
}

const char *srv_permit_pinned_root(const ps_server *s) {
  return s->permit->ckpt_root_pinned ? s->permit->ckpt_root : NULL;
}

ps_status srv_permit_path(ps_server *s, const char *path, const char *root, bool may_pin,
                         ps_error *err) {
  char canon[PATH_MAX];
  ps_status st = ps_path_canonical(root, canon, sizeof canon, err);
  if (st != PS_OK) {
    ps_error_prefix(err, "checkpoint path refused: ");
    return PS_ERR_INVALID;
  }
  if (ps_path_within(canon, s->permit->data_real)) return PS_OK;
  if (s->permit->ckpt_root[0] && ps_path_within(canon, s->permit->ckpt_root)) return PS_OK;
  char job[PATH_MAX];
  if (!s->permit->ckpt_root[0] && may_pin && path && path[0] == '/' && strcmp(canon, root) == 0 &&
      layout_root(canon, job, sizeof job)) {
    snprintf(s->permit->ckpt_root, sizeof s->permit->ckpt_root, "%s", job);
    s->permit->ckpt_root_pinned = true;
    PS_INFO("checkpoint root is %s (the job's first checkpoint outside the data dir; other "
            "roots are refused from now on; --checkpoint-root sets it)", job);
    return PS_OK;
  }
  char roots[PATH_MAX + 64] = "";
  if (s->permit->ckpt_root[0]) snprintf(roots, sizeof roots, " and checkpoint root %s", s->permit->ckpt_root);
  return ps_error_set(err, PS_ERR_INVALID,
                      "checkpoint path '%s' (%s) is outside data dir %s%s: refused (ps-server "
                      "--checkpoint-root DIR allows another root)",
                      path && path[0] ? path : "", canon, s->permit->data_real, roots);
}

ps_status srv_permit_ckpt_record(ps_server *s, const Ember__Header *h, ps_error *err) {
  json_error_t jerr;
  json_t *j = h->blob.data ? json_loadb((const char *)h->blob.data, h->blob.len, 0, &jerr) : NULL;
  json_int_t step = -1;
  const char *path = NULL;
  char root[4096] = "";
  bool ok = j && json_unpack(j, "{s:I, s:s}", "step", &step, "path", &path) == 0 && step >= 0 &&
            strlen(path) <= 1800;
  if (ok) srv_ckpt_root(s, path, (uint64_t)step, root, sizeof root);
  ok = ok && s->last.have && (uint64_t)step == s->last.step && strcmp(root, s->last.path) == 0;
  json_decref(j);
  if (ok) return PS_OK;
  char last[4200] = "none";
  if (s->last.have)
    snprintf(last, sizeof last, "step %" PRIu64 " in %s", s->last.step, s->last.path);
  return ps_error_set(err, PS_ERR_CONFLICT,
                      "KV_SET %s refused: the record must name the checkpoint shard 0 last "
                      "committed (%s) as {\"step\", \"path\"}",
                      SRV_COORD_CKPT_KEY, last);
}

/* ------------------------------------------------------------------ declarations */

/* At most this many declarations of one table are remembered before its first use. */
#define GUARD_MAX_DECLS 256u

static bool same_conn(const srv_coord_peer *a, const srv_coord_peer *b) {
  return a->conn == b->conn && a->fd == b->fd;
}

/* The same rows and stepping (no workers = 1 worker, as the server steps it). */
static bool spec_equal(const ps_table_spec *a, const ps_table_spec *b) {
  ps_table_spec x = *a, y = *b;
  if (!x.num_workers) x.num_workers = 1;
  if (!y.num_workers) y.num_workers = 1;
  return ps_table_spec_rows_equal(&x, &y) && ps_table_spec_stepping_equal(&x, &y);
}

ps_status srv_permit_declare(ps_server *s, srv_req *r, const ps_table_spec *spec, ps_error *err) {
  const uint32_t id = spec->id;
  ps_status st = ps_table_spec_validate(spec, err);
  if (st != PS_OK) {
    ps_error_prefix(err, "bad table spec: ");
    return st;
  }
  for (uint32_t o = 1; o <= s->max_table; o++)
    if (o != id && s->tables[o] &&
        strncmp(s->tables[o]->spec.name, spec->name, sizeof spec->name) == 0)
      return ps_error_set(err, PS_ERR_CONFLICT, "table %u '%s' conflicts with a table already "
                          "declared: table name %s already used by table %u", id, spec->name,
                          spec->name, o);
  srv_coord_peer p = {0};
  if (r->has_ident) srv_peer_of(r, &p);
  srv_table *t = s->tables[id];
  /* A client does not change its own declaration (an in-process caller has no other). */
  const ps_table_spec *mine = t && !r->has_ident ? &t->spec : NULL;
  for (size_t i = 0; t && r->has_ident && i < t->ndecls; i++)
    if (same_conn(&t->decls[i].peer, &p)) mine = &t->decls[i].spec;
  if (mine && !ps_table_spec_stepping_equal(mine, spec))
    return ps_error_set(err, PS_ERR_CONFLICT,
                        "table %u '%s' was declared with consistency %s (staleness %u) for %u "
                        "workers; this declaration asks for %s (staleness %u) for %u workers",
                        id, mine->name, ps_consistency_name(mine->consistency), mine->staleness,
                        mine->num_workers, ps_consistency_name(spec->consistency),
                        spec->staleness, spec->num_workers);
  char diff[160];
  if (mine && !spec_equal(mine, spec))
    return ps_error_set(err, PS_ERR_CONFLICT, "table %u '%s' conflicts with a table already "
                        "declared (another spec under this id or name): table %u (%s): "
                        "declared again with a different spec (before vs now %s)", id,
                        spec->name, id, spec->name, ps_table_spec_diff(mine, spec, diff,
                                                                       sizeof diff));
  if (r->has_ident && t && t->ndecls >= GUARD_MAX_DECLS)
    return ps_error_set(err, PS_ERR_CONFLICT, "table %u: %u declarations and no use yet", id,
                        GUARD_MAX_DECLS);
  if (!t || !spec_equal(&t->spec, spec)) {
    srv_table *nt = srv_table_new(spec);
    if (!nt) return ps_error_set(err, PS_ERR_NOMEM, "out of memory declaring table %u", id);
    nt->provisional = true;
    if (t) {
      PS_WARN("table %u '%s' declared again with another spec by %s before any client used it: "
              "the spec that its first user declared wins", id, spec->name,
              p.addr[0] ? p.addr : "an in-process caller");
      nt->decls = t->decls;
      nt->ndecls = t->ndecls;
      t->decls = NULL;
      srv_table_free(t);
    }
    s->tables[id] = t = nt;
    if (id > s->max_table) s->max_table = id;
  }
  if (!r->has_ident) return PS_OK;
  srv_decl *d = NULL;
  for (size_t i = 0; i < t->ndecls && !d; i++)
    if (same_conn(&t->decls[i].peer, &p)) d = &t->decls[i];
  if (!d) {
    srv_decl *nd = realloc(t->decls, (t->ndecls + 1) * sizeof *nd);
    if (!nd) return ps_error_set(err, PS_ERR_NOMEM, "out of memory declaring table %u", id);
    t->decls = nd;
    d = &t->decls[t->ndecls++];
  }
  d->peer = p;
  d->spec = *spec;
  return PS_OK;
}

static ps_status stale_add(ps_server *s, uint32_t id, const srv_coord_peer *p) {
  if (!srv_grow((void **)&s->permit->decl_stale, &s->permit->decl_stale_cap, s->permit->ndecl_stale + 1,
                sizeof *s->permit->decl_stale, 8))
    return PS_ERR_NOMEM;
  s->permit->decl_stale[s->permit->ndecl_stale++] = (permit_stale){.table = id, .peer = *p};
  return PS_OK;
}

ps_status srv_permit_bind(ps_server *s, srv_req *r, uint32_t id, ps_error *err) {
  srv_table *t = s->tables[id];
  ps_table_spec spec = t->spec;
  srv_coord_peer p = {0};
  if (r->has_ident) {
    srv_peer_of(r, &p);
    for (size_t i = 0; i < t->ndecls; i++)
      if (same_conn(&t->decls[i].peer, &p)) spec = t->decls[i].spec;
  }
  ps_status st = ps_store_declare(s->store, &spec, err);
  if (st != PS_OK) {
    ps_error_prefix(err, "declaring table %u '%s' at its first use failed: ", id, spec.name);
    return st;
  }
  if (!spec_equal(&spec, &t->spec)) {
    srv_table *nt = srv_table_new(&spec);
    if (!nt) return ps_error_set(err, PS_ERR_NOMEM, "out of memory declaring table %u", id);
    nt->decls = t->decls;
    nt->ndecls = t->ndecls;
    t->decls = NULL;
    srv_table_free(t);
    s->tables[id] = t = nt;
  }
  t->provisional = false;
  for (size_t i = 0; i < t->ndecls; i++) {
    if (spec_equal(&t->decls[i].spec, &spec)) continue;
    PS_WARN("table %u: the connection from %s declared another spec than its first user did; "
            "its requests are refused until it declares the table's spec", id,
            t->decls[i].peer.addr);
    if (stale_add(s, id, &t->decls[i].peer) != PS_OK)
      return ps_error_set(err, PS_ERR_NOMEM, "out of memory declaring table %u", id);
  }
  free(t->decls);
  t->decls = NULL;
  t->ndecls = 0;
  if (srv_meta_save(s, false) != PS_OK) PS_WARN("could not persist the table metadata");
  PS_INFO("declared table %u '%s' dim %u, %s for %u workers (at its first use)", id, spec.name,
          spec.dim, ps_consistency_name(spec.consistency), t->spec.num_workers);
  return PS_OK;
}

ps_status srv_permit_decl_check(ps_server *s, srv_req *r, uint32_t id, ps_error *err) {
  if (!s->permit->ndecl_stale || !r->has_ident) return PS_OK;
  srv_coord_peer p;
  srv_peer_of(r, &p);
  for (size_t i = 0; i < s->permit->ndecl_stale; i++)
    if (s->permit->decl_stale[i].table == id && same_conn(&s->permit->decl_stale[i].peer, &p))
      return ps_error_set(err, PS_ERR_CONFLICT,
                          "table %u has another spec than this connection declared: the first "
                          "client to use it had declared its own (see STATS); declare that one",
                          id);
  return PS_OK;
}

void srv_permit_decl_clear(ps_server *s, srv_req *r, uint32_t id) {
  if (!s->permit->ndecl_stale || !r->has_ident) return;
  srv_coord_peer p;
  srv_peer_of(r, &p);
  for (size_t i = 0; i < s->permit->ndecl_stale;)
    if (s->permit->decl_stale[i].table == id && same_conn(&s->permit->decl_stale[i].peer, &p))
      s->permit->decl_stale[i] = s->permit->decl_stale[--s->permit->ndecl_stale];
    else
      i++;
}

/* ------------------------------------------------------------------ prepared checkpoints */

ps_status srv_permit_checkpoint(ps_server *s, const srv_req *r, ps_error *err) {
  if (!s->staged.have || !s->permit->stager_open || !r->has_ident) return PS_OK;
  srv_coord_peer p;
  srv_peer_of(r, &p);
  if (same_conn(&s->permit->stager, &p) || s->permit->stager.fd == p.fd) return PS_OK;
  return ps_error_set(err, PS_ERR_CONFLICT,
                      "CHECKPOINT refused: the checkpoint of step %" PRIu64 " in %s, prepared "
                      "by the connection from %s, awaits that connection's commit or abort",
                      s->staged.step, s->staged.path,
                      s->permit->stager.addr[0] ? s->permit->stager.addr : "an unknown address");
}

void srv_permit_note_stager(ps_server *s, const srv_req *r) {
  s->permit->stager_open = r->has_ident && s->staged.have;
  if (s->permit->stager_open) srv_peer_of(r, &s->permit->stager);
}

/* ------------------------------------------------------------------ trainers */

void srv_permit_note_trainer(ps_server *s, const srv_req *r) {
  if (!r->has_ident) return;
  srv_coord_peer p;
  srv_peer_of(r, &p);
  for (size_t i = 0; i < s->permit->ntrainers; i++) {
    permit_trainer *t = &s->permit->trainers[i];
    if (same_conn(&t->peer, &p)) {
      t->last_ns = ps_now_ns();
      return;
    }
    if (t->peer.fd == p.fd) { /* its fd came back under another connection: it is gone */
      t->peer = p;
      t->last_ns = ps_now_ns();
      return;
    }
  }
  if (s->permit->ntrainers >= GUARD_MAX_TRAINERS) return; /* srv_permit_restore refuses then */
  if (!srv_grow((void **)&s->permit->trainers, &s->permit->trainers_cap, s->permit->ntrainers + 1, sizeof *s->permit->trainers,
                16))
    return;
  s->permit->trainers[s->permit->ntrainers++] = (permit_trainer){.peer = p, .last_ns = ps_now_ns()};
}

void srv_permit_peer_gone(ps_server *s, int fd) {
  for (size_t i = 0; i < s->permit->ntrainers;)
    if (s->permit->trainers[i].peer.fd == fd) s->permit->trainers[i] = s->permit->trainers[--s->permit->ntrainers];
    else i++;
  for (size_t i = 0; i < s->permit->ndecl_stale;)
    if (s->permit->decl_stale[i].peer.fd == fd) s->permit->decl_stale[i] = s->permit->decl_stale[--s->permit->ndecl_stale];
    else i++;
  if (s->permit->stager_open && s->permit->stager.fd == fd) s->permit->stager_open = false;
}

ps_status srv_permit_restore(ps_server *s, const srv_req *r, ps_error *err) {
  srv_coord_peer p = {0};
  if (r->has_ident) srv_peer_of(r, &p);
  else return PS_OK; /* in-process: the caller owns the server */
  if (s->permit->ntrainers >= GUARD_MAX_TRAINERS)
    return ps_error_set(err, PS_ERR_CONFLICT, "RESTORE refused: %u connections train on shard "
                        "%u", GUARD_MAX_TRAINERS, s->opt.shard);
  for (size_t i = 0; i < s->permit->ntrainers; i++) {
    const permit_trainer *t = &s->permit->trainers[i];
    if (same_conn(&t->peer, &p) || t->peer.fd == p.fd) continue;
    double ago = (double)(ps_now_ns() - t->last_ns) / 1e9;
    return ps_error_set(err, PS_ERR_CONFLICT,
                        "RESTORE refused: a job is training on shard %u (the connection from %s "
                        "trained %.1f s ago and is still open); a restore would roll it back -- "
                        "stop the job first, or restore from its own driver",
                        s->opt.shard, t->peer.addr[0] ? t->peer.addr : "an unknown address", ago);
  }
  return PS_OK;
}

void srv_permit_free(ps_server *s) {
  if (!s->permit) return;
  free(s->permit->decl_stale);
  free(s->permit->trainers);
  free(s->permit);
  s->permit = NULL;
}
