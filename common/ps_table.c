/* ps_table: defaults, validation, comparison and names of a table spec (see ps_table.h). */
#include "ps_table.h"

#include "ps_wire_half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_opt[PS_OPT_COUNT_] = {"sgd", "adagrad", "rowwise_adagrad", "adam",
                                                 "ftrl"};
static const char *const k_init[PS_INIT_COUNT_] = {"uniform", "normal", "zero"};
static const char *const k_cons[PS_CONS_COUNT_] = {"sync", "async", "ssp"};
static const char *const k_row[PS_ROW_TYPE_COUNT_] = {"f32", "f16", "bf16"};

void ps_table_spec_default(ps_table_spec *t, uint32_t id, const char *name, uint32_t dim) {
  memset(t, 0, sizeof(*t));
  t->id = id;
  snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
  t->dim = dim;
  t->optimizer = PS_OPT_SGD;
  t->lr = 0.01f;
  t->beta1 = 0.9f;
  t->beta2 = 0.999f;
  t->eps = 1e-8f;
  t->lr_power = -0.5f;
  t->init = PS_INIT_UNIFORM;
  t->init_a = -0.05f;
  t->init_b = 0.05f;
  t->consistency = PS_CONS_ASYNC;
  t->num_workers = 1;
}

ps_status ps_table_spec_validate(const ps_table_spec *t, ps_error *err) {
  if (!t) return ps_error_set(err, PS_ERR_INVALID, "no table spec");
  if (t->id == 0 || t->id > PS_TABLE_MAX_ID)
    return ps_error_set(err, PS_ERR_INVALID, "table id %u is not in 1..%u", t->id, PS_TABLE_MAX_ID);
  size_t nl = strnlen(t->name, sizeof(t->name));
  if (nl == 0 || nl == sizeof(t->name))
    return ps_error_set(err, PS_ERR_INVALID, "table %u: name must have 1..%u characters", t->id,
                        PS_TABLE_NAME_MAX - 1);
  if (t->dim == 0 || t->dim > PS_TABLE_MAX_DIM)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': dim %u is not in 1..%u", t->id,
                        t->name, t->dim, PS_TABLE_MAX_DIM);
  if ((unsigned)t->optimizer >= PS_OPT_COUNT_)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': unknown optimizer %d", t->id,
                        t->name, (int)t->optimizer);
  if ((unsigned)t->init >= PS_INIT_COUNT_)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': unknown init %d", t->id, t->name,
                        (int)t->init);
  if ((unsigned)t->row_type >= PS_ROW_TYPE_COUNT_)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': unknown row type %d", t->id,
                        t->name, (int)t->row_type);
  if ((unsigned)t->consistency >= PS_CONS_COUNT_)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': unknown consistency %d", t->id,
                        t->name, (int)t->consistency);
  if (t->num_workers == 0 || t->num_workers > PS_TABLE_MAX_WORKERS)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': %u workers is not in 1..%u", t->id,
                        t->name, t->num_workers, PS_TABLE_MAX_WORKERS);
  const float f[] = {t->lr, t->eps, t->beta1, t->beta2, t->l1, t->l2,
                     t->lr_power, t->initial_accumulator, t->init_a, t->init_b};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
    if (!isfinite(f[i]))
      return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': a hyperparameter is not finite",
                          t->id, t->name);
  if (t->optimizer == PS_OPT_FTRL && t->lr <= 0)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': FTRL needs lr > 0", t->id, t->name);
  if (t->optimizer == PS_OPT_ADAM &&
      (t->beta1 < 0 || t->beta1 >= 1 || t->beta2 < 0 || t->beta2 >= 1))
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': Adam needs betas in [0, 1)", t->id,
                        t->name);
  if (t->initial_accumulator < 0)
    return ps_error_set(err, PS_ERR_INVALID, "table %u '%s': initial_accumulator < 0", t->id,
                        t->name);
  return PS_OK;
}

bool ps_table_spec_rows_equal(const ps_table_spec *a, const ps_table_spec *b) {
  /* Bit for bit, as the store compared its encodings: a re-declaration with lr 0.1 vs 0.1f
   * rounding the same way is equal, one with another NaN payload is not (NaN is invalid). */
#define SAME(f) (memcmp(&a->f, &b->f, sizeof(a->f)) == 0)
  return SAME(id) && strncmp(a->name, b->name, sizeof(a->name)) == 0 && SAME(dim) &&
         SAME(optimizer) && SAME(lr) && SAME(beta1) && SAME(beta2) && SAME(eps) && SAME(l1) &&
         SAME(l2) && SAME(lr_power) && SAME(initial_accumulator) && SAME(init) && SAME(init_a) &&
         SAME(init_b) && SAME(seed) && SAME(admit_threshold) && SAME(ttl_steps) &&
         SAME(row_type);
#undef SAME
}

bool ps_table_spec_stepping_equal(const ps_table_spec *a, const ps_table_spec *b) {
  return a->consistency == b->consistency && a->staleness == b->staleness &&
         a->num_workers == b->num_workers;
}

static const char *name_of(const char *const *names, unsigned n, unsigned v) {
  return v < n ? names[v] : "?";
}

/* f with the fewest digits (up to 9, always enough) that read back as f: 0.01f is "0.01", and
 * two floats that differ never print the same. */
static const char *float_str(float f, char *buf, size_t n) {
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, n, "%.*g", p, (double)f);
    if (strtof(buf, NULL) == f) break;
  }
  return buf;
}

const char *ps_table_spec_diff(const ps_table_spec *a, const ps_table_spec *b, char *buf,
                               size_t n) {
  /* In the order of the struct, each compared as rows_equal / stepping_equal do (floats bit
   * for bit). */
  char fa[32], fb[32];
#define DIFF(cond, fmt, x, y)                \
  if (cond) {                                \
    snprintf(buf, n, fmt, x, y);             \
    return buf;                              \
  }
#define DIFF_U(f) DIFF(a->f != b->f, #f " %llu vs %llu", (unsigned long long)a->f, \
                       (unsigned long long)b->f)
#define DIFF_F(f) DIFF(memcmp(&a->f, &b->f, sizeof a->f) != 0, #f " %s vs %s", \
                       float_str(a->f, fa, sizeof fa), float_str(b->f, fb, sizeof fb))
  DIFF_U(id)
  DIFF(strncmp(a->name, b->name, sizeof a->name) != 0, "name '%s' vs '%s'", a->name, b->name)
  DIFF_U(dim)
  DIFF(a->optimizer != b->optimizer, "optimizer %s vs %s", ps_optimizer_name(a->optimizer),
       ps_optimizer_name(b->optimizer))
  DIFF_F(lr) DIFF_F(beta1) DIFF_F(beta2) DIFF_F(eps) DIFF_F(l1) DIFF_F(l2) DIFF_F(lr_power)
  DIFF_F(initial_accumulator)
  DIFF(a->init != b->init, "init %s vs %s", ps_init_name(a->init), ps_init_name(b->init))
  DIFF_F(init_a) DIFF_F(init_b)
  DIFF_U(seed) DIFF_U(admit_threshold) DIFF_U(ttl_steps)
  DIFF(a->row_type != b->row_type, "row_type %s vs %s", ps_row_type_name(a->row_type),
       ps_row_type_name(b->row_type))
  DIFF(a->consistency != b->consistency, "consistency %s vs %s",
       ps_consistency_name(a->consistency), ps_consistency_name(b->consistency))
  DIFF_U(staleness) DIFF_U(num_workers)
#undef DIFF_F
#undef DIFF_U
#undef DIFF
  if (n) buf[0] = '\0';
  return buf;
}

static ps_status parse_of(const char *const *names, unsigned n, const char *what, const char *s,
                          int *out, ps_error *err) {
  for (unsigned i = 0; s && i < n; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = (int)i;
      return PS_OK;
    }
  char known[128] = "";
  for (unsigned i = 0; i < n; i++)
    snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s", i ? ", " : "",
             names[i]);
  return ps_error_set(err, PS_ERR_INVALID, "unknown %s '%s' (known: %s)", what, s ? s : "",
                      known);
}

const char *ps_optimizer_name(ps_optimizer o) { return name_of(k_opt, PS_OPT_COUNT_, o); }
const char *ps_init_name(ps_init i) { return name_of(k_init, PS_INIT_COUNT_, i); }
const char *ps_consistency_name(ps_consistency c) { return name_of(k_cons, PS_CONS_COUNT_, c); }
const char *ps_row_type_name(ps_row_type r) { return name_of(k_row, PS_ROW_TYPE_COUNT_, r); }

/* The four public parsers: parse_of over the type's names, then the enum written back. */
#define PARSE_FN(fn, type, names, count, what)                         \
  ps_status fn(const char *s, type *out, ps_error *err) {              \
    int v = 0;                                                         \
    ps_status st = parse_of(names, count, what, s, &v, err);           \
    if (st == PS_OK) *out = (type)v;                                   \
    return st;                                                         \
  }
PARSE_FN(ps_optimizer_parse, ps_optimizer, k_opt, PS_OPT_COUNT_, "optimizer")
PARSE_FN(ps_init_parse, ps_init, k_init, PS_INIT_COUNT_, "init")
PARSE_FN(ps_consistency_parse, ps_consistency, k_cons, PS_CONS_COUNT_, "consistency")
PARSE_FN(ps_row_type_parse, ps_row_type, k_row, PS_ROW_TYPE_COUNT_, "row type")
#undef PARSE_FN

size_t ps_row_type_size(ps_row_type r) { return r == PS_ROW_F32 ? 4 : 2; }

/* bf16 is the top 16 bits of an f32: round to nearest even by adding 0x7fff plus the kept
 * part's lowest bit (a carry into the exponent is right: it rounds up to the next binade or
 * to inf); NaN is kept a quiet NaN instead, as the rounding could carry it into inf. The
 * loops are plain so the compiler vectorizes them. */
static void f32_to_bf16(const float *src, uint16_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t x;
    memcpy(&x, &src[i], 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) dst[i] = (uint16_t)((x >> 16) | 0x40u);
    else dst[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
}

static void bf16_to_f32(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t x = (uint32_t)src[i] << 16;
    memcpy(&dst[i], &x, 4);
  }
}

void ps_row_narrow(ps_row_type r, const float *src, void *dst, size_t n) {
  if (r == PS_ROW_F16) ps_wire_f32_to_f16(src, dst, n);
  else if (r == PS_ROW_BF16) f32_to_bf16(src, dst, n);
  else memcpy(dst, src, n * sizeof(float));
}

void ps_row_widen(ps_row_type r, const void *src, float *dst, size_t n) {
  if (r == PS_ROW_F16) ps_wire_f16_to_f32(src, dst, n);
  else if (r == PS_ROW_BF16) bf16_to_f32(src, dst, n);
  else memcpy(dst, src, n * sizeof(float));
}
