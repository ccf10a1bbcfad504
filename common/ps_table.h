/* ps_table: the one vocabulary of an embedding table — its spec, the named enums for its
 * optimizer, initializer and consistency mode, and their validation.
 *
 * Every layer speaks this struct: the client declares it, the wire carries it (proto/
 * ps_wire_table converts to and from ember.proto's TableSpec), the server keeps it, and the
 * store persists the row-defining part of it. Enum values equal ember.proto's numbering, so a
 * conversion is a range check, not a table.
 *
 * Two parts: the row fields (id .. ttl_steps) define what a stored row is and how pushes
 * change it — the store persists and compares them (ps_table_spec_rows_equal). The stepping
 * fields (consistency, staleness, num_workers) tell the server how workers step the table;
 * the store ignores them. */
#ifndef PS_TABLE_H
#define PS_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

#define PS_TABLE_MAX_ID 65535u       /* table ids are 1..PS_TABLE_MAX_ID (0 = none) */
#define PS_TABLE_MAX_DIM 4096u       /* values per row */
#define PS_TABLE_NAME_MAX 64u        /* name buffer, NUL included: 1..63 characters */
#define PS_TABLE_MAX_WORKERS 65536u  /* workers that step one table */

typedef enum ps_optimizer {
  PS_OPT_SGD = 0,
  PS_OPT_ADAGRAD = 1,
  PS_OPT_ROWWISE_ADAGRAD = 2,
  PS_OPT_ADAM = 3,
  PS_OPT_FTRL = 4
} ps_optimizer;
#define PS_OPT_COUNT_ 5u

typedef enum ps_init {
  PS_INIT_UNIFORM = 0, /* U(init_a, init_b) */
  PS_INIT_NORMAL = 1,  /* N(0, init_a) */
  PS_INIT_ZERO = 2
} ps_init;
#define PS_INIT_COUNT_ 3u

typedef enum ps_consistency {
  PS_CONS_SYNC = 0,  /* step t's pushes of all workers summed and applied once */
  PS_CONS_ASYNC = 1, /* pushes applied on arrival; pulls never wait */
  PS_CONS_SSP = 2    /* bounded staleness `staleness` */
} ps_consistency;
#define PS_CONS_COUNT_ 3u

/* How a table stores its row values (issue 33): f32, or 16 bits each: IEEE half (f16) or
 * bfloat16 (bf16, the top half of an f32). Optimizer state stays f32 whatever the row type;
 * an update computes in f32 and rounds the new values once (round to nearest even). */
typedef enum ps_row_type {
  PS_ROW_F32 = 0,
  PS_ROW_F16 = 1,
  PS_ROW_BF16 = 2
} ps_row_type;
#define PS_ROW_TYPE_COUNT_ 3u

typedef struct ps_table_spec {
  /* Row fields: persisted by the store. */
  uint32_t id;            /* 1..PS_TABLE_MAX_ID */
  char name[PS_TABLE_NAME_MAX];
  uint32_t dim;           /* 1..PS_TABLE_MAX_DIM */
  ps_optimizer optimizer;
  float lr;
  float beta1, beta2;     /* Adam */
  float eps;              /* Adagrad, row-wise Adagrad, Adam */
  float l1, l2, lr_power; /* FTRL-Proximal (lr_power usually -0.5) */
  float initial_accumulator; /* Adagrad / row-wise Adagrad / FTRL accumulator start */
  ps_init init;
  float init_a, init_b;
  uint64_t seed;
  uint32_t admit_threshold; /* 0 or 1: every key is stored on first push. N > 1: a key
                             * without a stored row is counted once per push call that
                             * carries it (count-min sketch, conservative update); the first
                             * N-1 such pushes are dropped, the N-th creates the row and
                             * applies its gradient. Pulls do not count. */
  uint64_t ttl_steps;       /* 0: rows never expire */
  ps_row_type row_type;     /* how the values are stored (0 = f32) */
  /* Stepping fields: the server's bookkeeping, ignored by the store. */
  ps_consistency consistency;
  uint32_t staleness;       /* PS_CONS_SSP only (0 otherwise) */
  uint32_t num_workers;     /* workers that step this table (sync/ssp); 1..PS_TABLE_MAX_WORKERS */
} ps_table_spec;

/* SGD, lr 0.01, uniform(-0.05, 0.05), Adam betas 0.9/0.999, eps 1e-8, FTRL lr_power -0.5,
 * f32 rows,
 * seed 0, async, one worker; name truncated to fit. */
void ps_table_spec_default(ps_table_spec *t, uint32_t id, const char *name, uint32_t dim);
/* PS_OK, or PS_ERR_INVALID with a message naming the first bad field. */
ps_status ps_table_spec_validate(const ps_table_spec *t, ps_error *err);
/* Whether two specs define the same rows (every row field equal, bit for bit). */
bool ps_table_spec_rows_equal(const ps_table_spec *a, const ps_table_spec *b);
/* Whether two specs step the same way (consistency, staleness, workers). */
bool ps_table_spec_stepping_equal(const ps_table_spec *a, const ps_table_spec *b);
/* The first field (row fields first, then stepping) where a and b differ, as "FIELD A vs B"
 * (e.g. "lr 0.01 vs 0.05", "optimizer sgd vs adagrad") into buf; "" when they are equal as
 * rows_equal and stepping_equal compare them. A refusal names it: two specs that print the
 * same name and dim may differ anywhere else. Returns buf. */
const char *ps_table_spec_diff(const ps_table_spec *a, const ps_table_spec *b, char *buf,
                               size_t n);

/* Lower-case names ("sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl"; "uniform", "normal",
 * "zero"; "sync", "async", "ssp"); "?" for a value out of range. */
const char *ps_optimizer_name(ps_optimizer o);
const char *ps_init_name(ps_init i);
const char *ps_consistency_name(ps_consistency c);
const char *ps_row_type_name(ps_row_type r); /* "f32", "f16", "bf16" */
/* The inverse: PS_OK, or PS_ERR_INVALID with a message listing the known names. */
ps_status ps_optimizer_parse(const char *s, ps_optimizer *out, ps_error *err);
ps_status ps_init_parse(const char *s, ps_init *out, ps_error *err);
ps_status ps_consistency_parse(const char *s, ps_consistency *out, ps_error *err);
ps_status ps_row_type_parse(const char *s, ps_row_type *out, ps_error *err);

/* Bytes of one stored value of a row type (4 or 2). */
size_t ps_row_type_size(ps_row_type r);
/* n f32 values to a row type, each rounded once to nearest even (f16 as ps_wire_f32_to_f16;
 * bf16 keeps NaN a quiet NaN); for PS_ROW_F32 a copy. dst holds n * ps_row_type_size bytes. */
void ps_row_narrow(ps_row_type r, const float *src, void *dst, size_t n);
/* The inverse: exact (every f16 and bf16 is an f32). */
void ps_row_widen(ps_row_type r, const void *src, float *dst, size_t n);

#endif
