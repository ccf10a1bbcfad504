/* ps_store_chain: the manifest every checkpoint of a store carries (EMBER-SNAPSHOT), and the
 * composition of a delta's chain back into one database (for restore and read-only opens).
 *
 * - The manifest is text, NAME=VALUE lines ending in `checksum=` (XXH3-64, seed 0, of every
 *   byte before that line), the format of ps-worker's config (common/ps_kvfile.h): readable
 *   with cat, and a damaged one (or one without the checksum) is refused. A delta's table lines carry each table's spec (its stored record,
 *   hex) so the chain can declare tables the base did not have, and the size and XXH3 of its
 *   SST file, verified before the file is used (RocksDB verifies block checksums only on read,
 *   and an SST file cut short at a block boundary would read as fewer rows).
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
#include <inttypes.h>
#include <limits.h>
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

/* A whole file into a malloc'd, NUL-terminated buffer: PS_ERR_NOT_FOUND when absent, PS_ERR_IO
 * (errno set) when unreadable. */
static ps_status read_all(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO;
  char *b = NULL;
  size_t n = 0, cap = 0;
  ps_status st = PS_OK;
  for (;;) {
    if (n + 65536 + 1 > cap) {
      char *nb = realloc(b, cap = 2 * (n + 65536 + 1));
      if (!nb) {
        st = PS_ERR_NOMEM;
        break;
      }
      b = nb;
    }
    size_t r = fread(b + n, 1, 65536, f);
    n += r;
    if (r < 65536) {
      if (ferror(f)) st = PS_ERR_IO;
      break;
    }
  }
  fclose(f);
  if (st != PS_OK) {
    free(b);
    return st;
  }
  b[n] = '\0';
  *out = b;
  *len = n;
  return PS_OK;
}

void store_manifest_free(store_manifest *m) {
  free(m->tables);
  m->tables = NULL;
  m->ntables = 0;
}

static void hex_encode(const char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", (unsigned char)b[i]);
  out[2 * n] = '\0';
}

static bool hex_decode(const char *h, char *out, size_t *n, size_t cap) {
  size_t len = strlen(h);
  if (len % 2 || len / 2 > cap) return false;
  for (size_t i = 0; i < len / 2; i++) {
    unsigned v;
    if (sscanf(h + 2 * i, "%2x", &v) != 1) return false;
    out[i] = (char)v;
  }
  *n = len / 2;
  return true;
}

ps_status store_manifest_write(const char *dir, const store_manifest *m, ps_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/" STORE_MANIFEST, dir);
  char *text = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&text, &len);
  if (!mf) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  fprintf(mf, "# ember store checkpoint (docs/CHECKPOINTS.md)\nformat=1\nkind=%s\n",
          m->delta ? "delta" : "full");
  fprintf(mf, "step=%" PRIu64 "\nid=%016" PRIx64 "\ndepth=%u\n", m->step, m->id, m->depth);
  if (m->delta)
    fprintf(mf, "base-step=%" PRIu64 "\nbase-id=%016" PRIx64 "\nbase=%s\n", m->base_step,
            m->base_id, m->base);
  for (size_t i = 0; i < m->ntables; i++) {
    const store_manifest_table *t = &m->tables[i];
    char enc[SPEC_BYTES], hex[2 * SPEC_BYTES + 1];
    hex_encode(enc, store_spec_encode(&t->spec, enc), hex);
    fprintf(mf, "table=%u rows=%" PRIu64 " tombstones=%" PRIu64 " bytes=%" PRIu64
            " xxh3=%016" PRIx64 " spec=%s\n", t->spec.id, t->rows, t->tombstones, t->bytes,
            t->sum, hex);
  }
  if (fclose(mf) != 0) {
    free(text);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  ps_status st = ps_kvfile_write(path, text, len, err);
  free(text);
  return st;
}

/* One "table=..." line into t; false when it does not parse. */
static bool table_line(const char *v, store_manifest_table *t) {
  unsigned id;
  char hex[2 * SPEC_BYTES + 2], enc[SPEC_BYTES];
  size_t n;
  if (sscanf(v, "%u rows=%" SCNu64 " tombstones=%" SCNu64 " bytes=%" SCNu64 " xxh3=%" SCNx64
             " spec=%321s", &id, &t->rows, &t->tombstones, &t->bytes, &t->sum, hex) != 6)
    return false;
  return hex_decode(hex, enc, &n, sizeof enc) && store_spec_decode(enc, n, &t->spec) == PS_OK &&
         t->spec.id == id;
}

ps_status store_manifest_read(const char *dir, store_manifest *m, ps_error *err) {
  memset(m, 0, sizeof *m);
  char path[4200];
  snprintf(path, sizeof path, "%s/" STORE_MANIFEST, dir);
  ps_kvfile *kv = NULL;
  ps_status st = ps_kvfile_read(path, &kv, err);
  if (st == PS_ERR_NOT_FOUND) return ps_error_set(err, st, "%s: no such file", path);
  if (st != PS_OK) return st;
  if (!ps_kvfile_checksummed(kv)) {
    ps_kvfile_free(&kv);
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: checksum mismatch: the file is damaged", path);
  }
  bool have_kind = false, have_step = false, have_id = false, bad = false;
  for (size_t l = 0; l < ps_kvfile_count(kv) && !bad; l++) {
    const char *k = ps_kvfile_name(kv, l), *v = ps_kvfile_value(kv, l);
    if (!strcmp(k, "kind")) {
      have_kind = !strcmp(v, "delta") || !strcmp(v, "full");
      m->delta = !strcmp(v, "delta");
    } else if (!strcmp(k, "step")) {
      have_step = sscanf(v, "%" SCNu64, &m->step) == 1;
    } else if (!strcmp(k, "id")) {
      have_id = sscanf(v, "%" SCNx64, &m->id) == 1;
    } else if (!strcmp(k, "depth")) {
      bad = sscanf(v, "%u", &m->depth) != 1;
    } else if (!strcmp(k, "base-step")) {
      bad = sscanf(v, "%" SCNu64, &m->base_step) != 1;
    } else if (!strcmp(k, "base-id")) {
      bad = sscanf(v, "%" SCNx64, &m->base_id) != 1;
    } else if (!strcmp(k, "base")) {
      snprintf(m->base, sizeof m->base, "%s", v);
    } else if (!strcmp(k, "table")) {
      store_manifest_table *nt = realloc(m->tables, (m->ntables + 1) * sizeof *nt);
      if (!nt) break;
      m->tables = nt;
      bad = !table_line(v, &m->tables[m->ntables++]);
    }
  }
  ps_kvfile_free(&kv);
  if (bad || !have_kind || !have_step || !have_id || (m->delta && !m->base[0])) {
    store_manifest_free(m);
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: not a checkpoint manifest Ember can read",
                        path);
  }
  return PS_OK;
}

bool ps_store_is_delta(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/" STORE_MANIFEST, dir ? dir : "");
  if (!dir || access(p, F_OK) != 0) return false;
  store_manifest m;
  if (store_manifest_read(dir, &m, NULL) != PS_OK) return true; /* composing it says why */
  bool d = m.delta;
  store_manifest_free(&m);
  return d;
}

/* XXH3 of a file's bytes, and its size. */
static ps_status file_sum(const char *path, uint64_t *sum, uint64_t *size) {
  char *b = NULL;
  size_t n = 0;
  ps_status st = read_all(path, &b, &n);
  if (st != PS_OK) return st;
  *sum = ps_hash64(b, n, 0);
  *size = n;
  free(b);
  return PS_OK;
}

ps_status store_delta_file_sum(const char *path, uint64_t *sum, uint64_t *size) {
  return file_sum(path, sum, size);
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
    if (file_sum(file, &sum, &size) != PS_OK)
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
    st = ps_store_open(&o, &s, err);
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

ps_status store_compose_private(const char *dir, char **compose_dir, char **db, ps_error *err) {
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
