/* ps_store_chain: the composition of a delta's chain back into one database (for restore and
 * read-only opens), and the store's open, which composes a delta's chain before it opens one
 * read-only; the manifest each link is read from is ps_store_manifest.c's.
 *
 * - The base is named three ways: its path relative to the delta's parent directory (so a
 *   checkpoint directory can be moved or copied whole), its step, and its random 64-bit id.
 *   A link whose base is missing, or whose base has another step or id (a checkpoint written
 *   again at that step, a directory copied from another run), breaks the chain: refused,
 *   never composed.
 * - Composition copies the full base (SST files hard-linked when asked: RocksDB never changes
 *   one), opens that copy writable, declares the tables each delta names and ingests each
 *   delta's SST files in chain order: RocksDB gives every ingested file a newer sequence number
 *   than anything before it, so a delta's rows and tombstones override its base's. Delta files
 *   are ingested by copy: a moved (linked) file may get its global sequence number written into
 *   it, which would change the checkpoint. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_kvfile.h"
#include "ps_log.h"
#include "ps_store_int.h"

#define MAX_CHAIN 4096 /* deltas a chain may have: far beyond any --checkpoint-full-every */

/* The copy of a snapshot directory tree that composition starts from (store_copy_tree). */
static int copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return -1;
  }
  char buf[1 << 16];
  ssize_t r;
  int rc = 0;
  while ((r = read(in, buf, sizeof(buf))) > 0) {
    for (ssize_t o = 0; o < r;) {
      ssize_t w = write(out, buf + o, (size_t)(r - o));
      if (w <= 0) {
        rc = -1;
        break;
      }
      o += w;
    }
    if (rc) break;
  }
  if (r < 0) rc = -1;
  if (fsync(out) != 0) rc = -1;
  close(in);
  if (close(out) != 0) rc = -1;
  return rc;
}

static const char *copy_root_src, *copy_root_dst;
static bool copy_link;
static int copy_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  char dst[4096];
  if (snprintf(dst, sizeof(dst), "%s%s", copy_root_dst, p + strlen(copy_root_src)) >= (int)sizeof(dst))
    return -1;
  if (flag == FTW_D) return (mkdir(dst, 0755) == 0 || errno == EEXIST) ? 0 : -1;
  if (flag != FTW_F || !S_ISREG(sb->st_mode)) return 0;
  /* RocksDB never changes an SST file once written, so a link shares it safely; every other
   * file (MANIFEST, WAL, OPTIONS, CURRENT) is copied, since opening a database writable may
   * append to or truncate them. */
  size_t n = strlen(p + ftw->base);
  if (copy_link && n > 4 && !strcmp(p + ftw->base + n - 4, ".sst") && link(p, dst) == 0) return 0;
  return copy_file(p, dst);
}

/* Copies a snapshot directory tree, SST files hard-linked when link_sst. */
static ps_status store_copy_tree(const char *src, const char *dst, bool link_sst, ps_error *err) {
  static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER; /* nftw callbacks use globals */
  pthread_mutex_lock(&copy_mu);
  copy_root_src = src;
  copy_root_dst = dst;
  copy_link = link_sst;
  int rc = nftw(src, copy_cb, 16, FTW_PHYS);
  pthread_mutex_unlock(&copy_mu);
  if (rc == 0) return PS_OK;
  ps_error_set(err, PS_ERR_IO, "copying %s to %s failed: %s", src, dst, strerror(errno));
  ps_rm_rf(dst);
  return PS_ERR_IO;
}

/* One link of the chain: a checkpoint directory (canonical) and its manifest. */
typedef struct link {
  char dir[PATH_MAX];
  store_manifest m;
} link_t;

static void chain_free(link_t *c, size_t n) {
  for (size_t i = 0; i < n; i++) store_manifest_free(&c[i].m);
  free(c);
}

/* The chain of dir, newest first, ending at its full base: *out[0] is dir. */
static ps_status chain_resolve(const char *dir, link_t **out, size_t *nout, ps_error *err) {
  link_t *c = NULL;
  size_t n = 0;
  ps_status st = PS_OK;
  char cur[PATH_MAX];
  if (!realpath(dir, cur))
    return ps_error_set(err, PS_ERR_NOT_FOUND, "%s: %s", dir, strerror(errno));
  for (;;) {
    link_t *nc = n <= MAX_CHAIN ? realloc(c, (n + 1) * sizeof *c) : NULL;
    if (!nc) {
      st = ps_error_set(err, n > MAX_CHAIN ? PS_ERR_CORRUPT : PS_ERR_NOMEM,
                        "%s: a chain of more than %d deltas", dir, MAX_CHAIN);
      break;
    }
    c = nc;
    link_t *l = &c[n];
    snprintf(l->dir, sizeof l->dir, "%s", cur);
    if ((st = store_manifest_read(cur, &l->m, err)) != PS_OK) {
      if (st == PS_ERR_NOT_FOUND && n > 0)
        st = ps_error_set(err, PS_ERR_CORRUPT, "broken checkpoint chain: %s, the base of the "
                          "delta %s, has no manifest (not the checkpoint the delta was taken "
                          "against)", cur, c[n - 1].dir);
      break;
    }
    n++;
    if (n > 1) {
      const store_manifest *d = &c[n - 2].m;
      if (l->m.step != d->base_step || l->m.id != d->base_id) {
        st = ps_error_set(err, PS_ERR_CORRUPT, "broken checkpoint chain: the delta %s was taken "
                          "against step %" PRIu64 " id %016" PRIx64 ", but %s is step %" PRIu64
                          " id %016" PRIx64, c[n - 2].dir, d->base_step, d->base_id, cur,
                          l->m.step, l->m.id);
        break;
      }
    }
    if (!l->m.delta) break;
    char base[2 * PATH_MAX + 2], parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", cur);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    snprintf(base, sizeof base, "%s/%s", parent, l->m.base);
    if (!realpath(base, cur)) {
      st = ps_error_set(err, PS_ERR_CORRUPT, "broken checkpoint chain: the base of the delta "
                        "%s (step %" PRIu64 ", %s) is missing: %s", l->dir, l->m.base_step, base,
                        strerror(errno));
      break;
    }
  }
  if (st != PS_OK) {
    chain_free(c, n);
    return st;
  }
  *out = c;
  *nout = n;
  return PS_OK;
}

/* err's message prefixed with the delta, as PS_ERR_CORRUPT: a chain that does not compose. */
static ps_status corrupt(ps_error *err, const link_t *l, const char *what) {
  ps_error_prefix(err, "delta %s: %s: ", l->dir, what);
  if (err) err->code = PS_ERR_CORRUPT;
  return PS_ERR_CORRUPT;
}

/* Ingests one delta (its verified files) into the composing store. */
static ps_status apply_delta(ps_store *s, const link_t *l, ps_error *err) {
  for (size_t i = 0; i < l->m.ntables; i++) {
    const store_manifest_table *mt = &l->m.tables[i];
    if (ps_store_declare(s, &mt->spec, err) != PS_OK) return corrupt(err, l, mt->spec.name);
    if (!mt->rows && !mt->tombstones) continue;
    char file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/t%u.sst", l->dir, mt->spec.id);
    uint64_t sum = 0, size = 0;
    if (store_delta_file_sum(file, &sum, &size) != PS_OK)
      return ps_error_set(err, PS_ERR_CORRUPT, "delta %s: %s: %s", l->dir, file, strerror(errno));
    if (sum != mt->sum || size != mt->bytes)
      return ps_error_set(err, PS_ERR_CORRUPT, "delta %s: %s: checksum mismatch (%" PRIu64
                          " bytes, XXH3 %016" PRIx64 "; the manifest says %" PRIu64 " bytes, %016"
                          PRIx64 "): the file is damaged", l->dir, file, size, sum, mt->bytes,
                          mt->sum);
    size_t ti;
    table *t = find_table(s, mt->spec.id, &ti);
    char *rerr = NULL;
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(io, 0);
    const char *files[1] = {file};
    store_cold_mark(t);
    rocksdb_ingest_external_file_cf(s->db, t->cf, files, 1, io, &rerr);
    rocksdb_ingestexternalfileoptions_destroy(io);
    if (rerr) {
      store_rdb_error(err, "ingest", rerr);
      return corrupt(err, l, file);
    }
  }
  return PS_OK;
}

ps_status store_chain_compose(const char *dir, const char *dst, bool link_sst,
                              store_ckpt_ref *head, ps_error *err) {
  memset(head, 0, sizeof *head);
  char cur[4200];
  snprintf(cur, sizeof cur, "%s/" STORE_MANIFEST, dir);
  if (access(cur, F_OK) != 0) { /* a snapshot from before manifests: copied as it is */
    snprintf(cur, sizeof cur, "%s/CURRENT", dir);
    if (access(cur, R_OK) != 0)
      return ps_error_set(err, PS_ERR_NOT_FOUND, "%s is not a snapshot (no CURRENT file)", dir);
    return store_copy_tree(dir, dst, link_sst, err);
  }
  link_t *c = NULL;
  size_t n = 0;
  ps_status st = chain_resolve(dir, &c, &n, err);
  if (st != PS_OK) return st;
  const link_t *full = &c[n - 1];
  snprintf(cur, sizeof cur, "%s/CURRENT", full->dir);
  if (access(cur, R_OK) != 0)
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: a full checkpoint without its database (no "
                      "CURRENT file)", full->dir);
  if (st == PS_OK) st = store_copy_tree(full->dir, dst, link_sst, err);
  if (st == PS_OK && n > 1) {
    ps_store *s = NULL;
    ps_store_options o = {.path = dst, .partitions = 1, .cache_bytes = 16u << 20};
    st = store_open_dir(&o, &s, err);
    for (size_t i = n - 1; st == PS_OK && i-- > 0;) st = apply_delta(s, &c[i], err);
    ps_store_close(&s);
    if (st != PS_OK) ps_rm_rf(dst);
  }
  if (st == PS_OK) {
    head->have = true;
    head->id = c[0].m.id;
    head->step = c[0].m.step;
    head->depth = c[0].m.depth;
    head->dir = strdup(c[0].dir);
    if (!head->dir) st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  if (st == PS_OK && n > 1)
    PS_INFO("composed %s: full checkpoint of step %" PRIu64 " and %zu delta(s)", dir,
            full->m.step, n - 1);
  chain_free(c, n);
  return st;
}

/* Composes dir's chain into a new private directory under $TMPDIR (*compose_dir, removed by
 * the caller) holding the database *db, for a read-only open. */
static ps_status compose_private(const char *dir, char **compose_dir, char **db, ps_error *err) {
  const char *tmp = getenv("TMPDIR");
  char root[PATH_MAX];
  snprintf(root, sizeof root, "%s/ember-compose-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(root))
    return ps_error_set(err, PS_ERR_IO, "composing %s: cannot create %s: %s", dir, root,
                        strerror(errno));
  char path[PATH_MAX + 8];
  snprintf(path, sizeof path, "%s/db", root);
  store_ckpt_ref head;
  ps_status st = store_chain_compose(dir, path, true, &head, err);
  store_ckpt_ref_clear(&head);
  *compose_dir = st == PS_OK ? strdup(root) : NULL;
  *db = st == PS_OK ? strdup(path) : NULL;
  if (st == PS_OK && (!*compose_dir || !*db)) st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  if (st != PS_OK) {
    ps_rm_rf(root);
    free(*compose_dir);
    free(*db);
    *compose_dir = *db = NULL;
  }
  return st;
}

/* The store's open (ps_store.h). A read-only open of a delta composes its chain first, into a
 * private copy that the store opens and removes at close; anything else is opened as it is.
 * Composition sits here, above the plain open (store_open_dir) that it uses itself, so opening
 * a store never comes back through the composition. */
ps_status ps_store_open(const ps_store_options *opt, ps_store **out, ps_error *err) {
  if (!opt || !out || !opt->path || !opt->read_only || !ps_store_is_delta(opt->path))
    return store_open_dir(opt, out, err);
  *out = NULL;
  char *compose_dir = NULL, *db = NULL;
  ps_status st = compose_private(opt->path, &compose_dir, &db, err);
  if (st != PS_OK) return st;
  ps_store_options o = *opt;
  o.path = db;
  st = store_open_dir(&o, out, err);
  free(db);
  if (st != PS_OK) {
    ps_rm_rf(compose_dir);
    free(compose_dir);
    return st;
  }
  (*out)->compose_dir = compose_dir;
  return PS_OK;
}
