/* ps_store_tables: the tables a store holds — declaration, lookup, and registration of the
 * tables found in the database at open.
 *
 * - A table is a spec plus what the hot tier needs per partition (an index, maybe a sketch);
 *   the arrays only grow (PS_STORE_MAX_TABLES at most) and are indexed through idmap, so a
 *   data call finds its table in one load under the shared lock.
 * - Declaring is idempotent: the same spec again is a no-op, compared in its stored form so
 *   "the same" means what a reopened store would read back. */
#include <string.h>

#include "ps_log.h"
#include "ps_store_int.h"

/* Adds a table to the in-memory arrays (store write-locked or opening). */
static ps_status add_table(ps_store *s, const ps_table_spec *sp, rocksdb_column_family_handle_t *cf,
                           bool on_disk) {
  if (s->ntables >= PS_STORE_MAX_TABLES) return PS_ERR_NOMEM;
  table *nt = realloc(s->tables, (s->ntables + 1) * sizeof(table));
  if (!nt) return PS_ERR_NOMEM;
  s->tables = nt;
  for (uint32_t p = 0; p < s->nparts; p++) {
    ptable *np = realloc(s->parts[p].tabs, (s->ntables + 1) * sizeof(ptable));
    if (!np) return PS_ERR_NOMEM;
    s->parts[p].tabs = np;
    memset(&np[s->ntables], 0, sizeof(ptable));
    if (sp->admit_threshold > 1 && store_cms_create(&np[s->ntables], s->nparts) != PS_OK)
      return PS_ERR_NOMEM;
  }
  table *t = &s->tables[s->ntables];
  memset(t, 0, sizeof(*t));
  t->spec = *sp;
  t->state_floats = store_state_floats(sp);
  t->val_bytes = store_val_bytes(sp);
  t->float_bytes = t->val_bytes + 4 * t->state_floats;
  /* Adam's step count after the floats: row_adam_t */
  t->row_bytes = t->float_bytes + (sp->optimizer == PS_OPT_ADAM ? sizeof(uint32_t) : 0);
  t->rec_bytes = REC_HDR + ROW_META + t->float_bytes;
  t->alloc_bytes = row_class(t->row_bytes);
  t->cf = cf;
  atomic_init(&t->on_disk, on_disk);
  t->hdr[0] = REC_MAGIC;
  t->hdr[1] = REC_VERSION;
  t->hdr[2] = (char)sp->optimizer;
  t->hdr[3] = (char)sp->row_type; /* 0 for f32: records from before row types read the same */
  memcpy(t->hdr + 4, &sp->dim, 4);
  s->ntables++;
  s->idmap[sp->id] = (uint16_t)s->ntables;
  return PS_OK;
}

ps_status store_tables_open(ps_store *s, ps_error *err) {
  store_cold_table *found;
  size_t n;
  ps_status st = store_cold_open(s, &found, &n, err);
  if (st != PS_OK) return st;
  size_t i = 0;
  for (; i < n; i++) {
    st = add_table(s, &found[i].spec, found[i].cf, true);
    if (st != PS_OK) {
      ps_error_set(err, st, "%s: table %u (%s) could not be added", s->path, found[i].spec.id,
                   found[i].spec.name);
      break;
    }
  }
  for (; i < n; i++) rocksdb_column_family_handle_destroy(found[i].cf); /* not added */
  free(found);
  return st;
}

ps_status ps_store_declare(ps_store *s, const ps_table_spec *spec, ps_error *err) {
  if (!s || !spec) return ps_error_set(err, PS_ERR_INVALID, "declare: no store or spec");
  if (s->opt.read_only)
    return ps_error_set(err, PS_ERR_INVALID, "declare: store %s is open read-only", s->path);
  ps_status st = store_spec_validate(spec, err);
  if (st != PS_OK) return st;
  char enc[SPEC_BYTES], enc2[SPEC_BYTES];
  size_t elen = store_spec_encode(spec, enc);
  pthread_rwlock_wrlock(&s->lock);
  size_t ti;
  table *t = find_table(s, spec->id, &ti);
  if (t) {
    store_spec_encode(&t->spec, enc2);
    char diff[160];
    if (memcmp(enc, enc2, elen) != 0)
      st = ps_error_set(err, PS_ERR_CONFLICT,
                        "table %u (%s): declared again with a different spec (stored vs "
                        "declared %s)", spec->id, spec->name,
                        ps_table_spec_diff(&t->spec, spec, diff, sizeof diff));
    goto done;
  }
  for (size_t i = 0; i < s->ntables; i++)
    if (strncmp(s->tables[i].spec.name, spec->name, sizeof(spec->name)) == 0) {
      st = ps_error_set(err, PS_ERR_CONFLICT, "table name %s already used by table %u",
                        spec->name, s->tables[i].spec.id);
      goto done;
    }
  rocksdb_column_family_handle_t *cf = NULL;
  st = store_cold_table_create(s, spec, &cf, err);
  if (st != PS_OK) goto done;
  st = add_table(s, spec, cf, false); /* a new, empty column family */
  if (st != PS_OK)
    ps_error_set(err, st, "table %u (%s): out of memory or room (%zu tables, at most %u)",
                 spec->id, spec->name, s->ntables, PS_STORE_MAX_TABLES);
  else
    PS_INFO("declared table %u (%s): dim %u, optimizer %d", spec->id, spec->name, spec->dim,
            spec->optimizer);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_get_spec(ps_store *s, uint32_t table_id, ps_table_spec *out) {
  if (!s || !out) return PS_ERR_INVALID;
  size_t ti;
  ps_status st;
  table *t = store_read_table(s, table_id, &ti, &st);
  if (t) *out = t->spec;
  pthread_rwlock_unlock(&s->lock);
  return st;
}

size_t ps_store_tables(ps_store *s, uint32_t *ids, size_t max) {
  if (!s) return 0;
  pthread_rwlock_rdlock(&s->lock);
  size_t n = s->ntables;
  for (size_t i = 0; i < n && i < max && ids; i++) ids[i] = s->tables[i].spec.id;
  pthread_rwlock_unlock(&s->lock);
  return n;
}
