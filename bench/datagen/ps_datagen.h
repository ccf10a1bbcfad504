/* ps_datagen: synthetic Criteo-format click data with a planted model, so a trained model's
 * AUC can be put next to the best any model can reach on the same rows (the planted
 * model's own AUC, "the ceiling").
 *
 * Every value is a pure function of (seed, stream, row index): rows can be generated in any
 * order or in parallel and the same seed always gives byte-identical output. Train rows use
 * stream 0, test rows stream 1, both drawn from the same planted model (a function of the
 * seed only).
 *
 * The planted model (logit -> p = sigmoid, label ~ Bernoulli(p)):
 *   logit = bias + sum_f w_f(value_f) + sum_k dense_k(x_k) + sum_(a,b) <u_a(v_a), u_b(v_b)>
 *  - categoricals C1..C26: value rank k ~ Zipf-like power law (density ~ x^-s on [1, V+1])
 *    over a per-feature vocabulary V (3 .. 1e6), some features often missing; the raw 32-bit
 *    token is a seeded bijection of k. w_f is Gaussian with a per-feature scale for the
 *    most frequent values (rank < head_f) and 0 beyond (rare ids carry no signal, as in real
 *    logs, so a good model can approach the ceiling); a missing value has its own weight;
 *    the six largest vocabularies and two others have scale 0 (pure noise, a long tail
 *    of keys for the embedding store).
 *  - dense I1..I13: count-like integers (rounded log-normal, some negative in I2, some
 *    missing); linear and quadratic terms in log(1 + max(x, 0)).
 *  - pairwise interactions between five field pairs of small vocabularies, as dot products
 *    of rank-2 vectors per value (what DLRM's dot interaction can represent), among the 12
 *    most frequent values of each side.
 * Learnability (measured, bench/RESULTS-data.md): a one-hot logistic regression with the
 * planted field crosses, trained on 200k rows, reaches test AUC 0.857 against the planted
 * 0.864 (seed 1). On an earlier, denser variant tripling the rows (600k) cut the gap from
 * 0.009 to 0.006: the gap is estimation error, not structure a model cannot represent.
 *  - bias solved by bisection so the mean CTR is 0.25 on a calibration sample.
 *
 * Options (ps_datagen_opts; the defaults give the one-hot data above, byte for byte):
 *  - multi_hot M > 1: each present categorical is a bag of 1..M ids (uniform size), each id
 *    drawn from the feature's Zipf law (repeats possible), written '|'-separated in its
 *    column. The planted model pools by sum: the bag's weights and interaction vectors are
 *    summed, times 1/sqrt((M + 1) / 2) so the logit's spread stays near the one-hot one. An
 *    absent feature (the missing rate) is an empty column, with the missing value's weight.
 *  - vocab_scale X: every vocabulary times X (at least 2 values; head ranks capped by it);
 *    zipf_shift D: every Zipf exponent plus D (larger: a shorter tail). Other shapes of data
 *    from the same model family, for tuning on data the defaults were not tuned on.
 *  - schema (ps_schema.h): lines in the schema's layout (tsv or csv, its column order, empty
 *    skipped columns; the header line is the caller's) with its counts: dense input k follows
 *    I(k mod 13)'s law, feature f C(f mod 26)'s (vocabulary, tail, missing rate, weight scale;
 *    its own weights, as they hash f), the planted pairs repeat in every block of 26 features
 *    (those whose both sides exist), a column with a separator is a bag of 1..multi_hot ids
 *    joined by it, the others one id. Criteo's own
 *    schema (docs/schemas/criteo.json) gives the default files byte for byte, and the schema
 *    that --multi-hot M writes gives the --multi-hot M files: the draws are the same. Values
 *    are 8 hex digits, so per-column hash_buckets and transforms only change how a reader
 *    maps them; the planted model pools bags by sum whatever the column's pooling says. */
#ifndef PS_DATAGEN_H
#define PS_DATAGEN_H

#include <stddef.h>
#include <stdint.h>

#include "ps_criteo.h"
#include "ps_schema.h"

typedef struct ps_datagen ps_datagen;

#define PS_DATAGEN_MAX_BAG 100
#define PS_DATAGEN_SEPARATOR '|'
#define PS_DATAGEN_MAX_DENSE 64  /* a schema's dense columns */
#define PS_DATAGEN_MAX_CAT 64    /* a schema's categorical columns */
#define PS_DATAGEN_MAX_COLS 256  /* a schema's columns, skipped ones included */

typedef struct ps_datagen_opts {
  uint64_t seed;
  int multi_hot;      /* 0 or 1: one-hot; 2..PS_DATAGEN_MAX_BAG: bags of 1..multi_hot ids
                       * (with a schema: its multi-hot columns' bags; 0 there means 4) */
  double vocab_scale; /* 1: the built-in vocabularies */
  double zipf_shift;  /* 0: the built-in exponents */
  const ps_schema *schema; /* NULL: Criteo's TSV layout; else the schema's (borrowed) */
} ps_datagen_opts;

void ps_datagen_opts_default(ps_datagen_opts *o);
/* PS_ERR_INVALID for options out of range (multi_hot > PS_DATAGEN_MAX_BAG, vocab_scale <= 0,
 * an exponent that would fall to 0.5 or below, a schema without a categorical column or with
 * more columns than the PS_DATAGEN_MAX_* above). */
ps_status ps_datagen_create_opts(const ps_datagen_opts *o, ps_datagen **out);
/* The longest line ps_datagen_line can write (with its '\n'). */
size_t ps_datagen_line_max(const ps_datagen *g);
void ps_datagen_destroy(ps_datagen **g);

/* Row `i` of `stream` (0 train, 1 test): the text line (with '\n') written to buf (at
 * least ps_datagen_line_max bytes), its length returned; *p = the planted click probability, *label. */
size_t ps_datagen_line(const ps_datagen *g, int stream, uint64_t i, char *buf, float *p,
                       int *label);
double ps_datagen_bias(const ps_datagen *g);

#endif
