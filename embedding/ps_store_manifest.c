/* ps_store_manifest: the manifest every checkpoint of a store carries (EMBER-SNAPSHOT): written
 * with each snapshot (ps_store_delta.c), read by the chain's composition (ps_store_chain.c).
 *
 * - The manifest is text, NAME=VALUE lines ending in `checksum=` (XXH3-64, seed 0, of every
 *   byte before that line), the format of ps-worker's config (common/ps_kvfile.h): readable
 *   with cat, and a damaged one (or one without the checksum) is refused. A delta's table
 *   lines carry each table's spec (its stored record, hex) so the chain can declare tables the
 *   base did not have, and the size and XXH3 of its SST file, verified before the file is used
 *   (RocksDB verifies block checksums only on read, and an SST file cut short at a block
 *   boundary would read as fewer rows). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_hash.h"
#include "ps_kvfile.h"
#include "ps_store_int.h"

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
ps_status store_delta_file_sum(const char *path, uint64_t *sum, uint64_t *size) {
  char *b = NULL;
  size_t n = 0;
  ps_status st = read_all(path, &b, &n);
  if (st != PS_OK) return st;
  *sum = ps_hash64(b, n, 0);
  *size = n;
  free(b);
  return PS_OK;
}

void store_ckpt_ref_clear(store_ckpt_ref *r) {
  free(r->dir);
  memset(r, 0, sizeof *r);
}
