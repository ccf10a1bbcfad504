/* test_shuffle: the reader's shuffle buffer (ps_shuffle.h). Every line of the test file names
 * itself (C1 = its line index, label = index % 3 == 0, I1 = index), so what a sample must look
 * like after shuffling is known from the file's construction: each epoch is a permutation of
 * the file with every sample intact, batch sizes and metadata are those of file order, the
 * order is seeded (same seed same order, other seed other order), no sample leaves before it
 * could have been read (capacity + 2 batches), each rank permutes only its own shard, and a
 * reader that drops its first k batches (ps-worker's resume) continues exactly as one that did
 * not stop. A file of another schema (2 dense inputs, a one-value feature and two multi-hot
 * ones with bags of 0..3 values, a skipped column) checks that samples of any shape, records
 * longer than a one-value record included, come out whole and shuffled. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ps_test_main.h"
#include "ps_test_reader.h"
#include "ps_test_scratch.h"

#include "ps_reader.h"
#include "ps_schema.h"

#define N (1ull << 32) /* hash buckets: key of feature f with value v is f*N + v */

static char g_path[512];

static void make_file(size_t lines) {
  snprintf(g_path, sizeof g_path, "%s", tmp_path("shuf.tsv"));
  FILE *f = fopen(g_path, "wb");
  assert_non_null(f);
  for (size_t i = 0; i < lines; i++) {
    fprintf(f, "%d\t%zu", i % 3 == 0, i);
    for (int k = 2; k <= 13; k++) fprintf(f, "\t%d", k);
    fprintf(f, "\t%08zx", i);
    for (int j = 2; j <= 26; j++) fprintf(f, "\t%08x", j);
    fputc('\n', f);
  }
  fclose(f);
}

typedef struct trace {
  size_t nb, ns;
  size_t n[512];
  int epoch[512], last[512];
  uint64_t index[512];
  uint64_t id[8192]; /* C1 of every sample, in order */
} trace;

/* Reads everything; checks each sample is whole (label, I1 and C2..C26 follow from C1). */
static void trace_batch(const ps_batch *b, void *ctx) {
  trace *t = ctx;
  assert_true(t->nb < 512 && t->ns + b->n <= 8192);
    assert_int_equal(b->nkeys, b->n * 26);
    for (size_t j = 0; j <= b->n * 26; j++) assert_int_equal(b->key_offsets[j], j); /* one key a bag */
    t->n[t->nb] = b->n, t->epoch[t->nb] = b->epoch, t->last[t->nb] = b->last_in_epoch;
    t->index[t->nb++] = b->index;
    for (size_t i = 0; i < b->n; i++) {
      uint64_t id = b->keys[i * 26];
      assert_true(id < N);
      assert_true(b->labels[i] == (id % 3 == 0 ? 1.0f : 0.0f));
      assert_true(fabsf(b->dense[i * 13] - (float)log1p((double)id)) < 1e-4f * (1 + (float)id));
      for (uint64_t f = 1; f < 26; f++) assert_true(b->keys[i * 26 + f] == f * N + f + 1);
      t->id[t->ns++] = id;
  }
}

static trace *read_trace(const ps_reader_opts *o) {
  trace *t = calloc(1, sizeof *t);
  assert_non_null(t);
  ps_test_each_batch(g_path, o, trace_batch, t);
  return t;
}

/* The reader's defaults with batch and seed, over this file's N hash buckets. */
static ps_reader_opts opts(int batch, uint64_t seed) {
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = batch, o.hash_buckets = N, o.seed = seed;
  return o;
}

static void assert_same_batches(const trace *a, const trace *b) {
  assert_int_equal(a->nb, b->nb);
  assert_int_equal(a->ns, b->ns);
  for (size_t i = 0; i < a->nb; i++) {
    assert_int_equal(a->n[i], b->n[i]);
    assert_int_equal(a->epoch[i], b->epoch[i]);
    assert_int_equal(a->last[i], b->last[i]);
    assert_int_equal(a->index[i], b->index[i]);
  }
}

static int same_order(const trace *a, const trace *b) {
  return a->ns == b->ns && memcmp(a->id, b->id, a->ns * sizeof(uint64_t)) == 0;
}

/* ids[0..n) as a sorted copy, compared with the sorted copy of want[0..n). */
static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}
static void assert_permutation(const uint64_t *ids, const uint64_t *want, size_t n) {
  uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  memcpy(a, ids, n * sizeof *a), memcpy(b, want, n * sizeof *b);
  qsort(a, n, sizeof *a, cmp_u64), qsort(b, n, sizeof *b, cmp_u64);
  assert_memory_equal(a, b, n * sizeof *a);
  free(a), free(b);
}

static void test_permutation_per_epoch_seeded(void **st) {
  (void)st;
  make_file(1000);
  ps_reader_opts o = opts(64, 5);
  o.epochs = 2;
  trace *plain = read_trace(&o);
  assert_int_equal(plain->ns, 2000);
  for (size_t i = 0; i < 2000; i++) assert_int_equal(plain->id[i], i % 1000); /* file order */
  o.shuffle_buffer = 300;
  trace *a = read_trace(&o);
  assert_same_batches(plain, a); /* same steps, sizes, epochs, indices, last flags */
  size_t moved = 0;
  for (int e = 0; e < 2; e++) {
    assert_permutation(a->id + e * 1000, plain->id, 1000); /* each epoch: the whole file once */
    for (size_t p = 0; p < 1000; p++) {
      uint64_t id = a->id[e * 1000 + p];
      moved += id != p;
      /* not out before it was read: the pool reads at most capacity + 2 batches ahead */
      assert_true(id <= p + 300 + 2 * 64);
    }
  }
  assert_true(moved > 1900);
  assert_false(memcmp(a->id, a->id + 1000, 1000 * sizeof(uint64_t)) == 0); /* epochs differ */
  o.prefetch = 0; /* same seed, other threading: the same order */
  trace *b = read_trace(&o);
  assert_true(same_order(a, b));
  o.seed = 6;
  trace *c = read_trace(&o);
  assert_false(same_order(a, c));
  /* a buffer as large as the file shuffles it uniformly: the first batch draws from it all */
  o.shuffle_buffer = 5000;
  trace *d = read_trace(&o);
  assert_same_batches(plain, d);
  uint64_t mx = 0;
  for (size_t i = 0; i < 64; i++) mx = d->id[i] > mx ? d->id[i] : mx;
  assert_true(mx > 900);
  free(plain), free(a), free(b), free(c), free(d);
}

static void test_ranks_shuffle_their_own_shard(void **st) {
  (void)st;
  make_file(1003);
  ps_reader_opts o = opts(50, 9);
  o.world = 2;
  trace *plain[2], *sh[2];
  for (int r = 0; r < 2; r++) {
    o.rank = r;
    o.shuffle_buffer = 0;
    plain[r] = read_trace(&o);
    o.shuffle_buffer = 120;
    sh[r] = read_trace(&o);
    assert_same_batches(plain[r], sh[r]);
    assert_permutation(sh[r]->id, plain[r]->id, plain[r]->ns);
    assert_false(same_order(plain[r], sh[r]));
  }
  assert_int_equal(plain[0]->ns + plain[1]->ns, 1003);
  for (int r = 0; r < 2; r++) free(plain[r]), free(sh[r]);
}

static void test_resume_drops_batches_exactly(void **st) {
  (void)st;
  make_file(1000);
  ps_reader_opts o = opts(64, 3);
  o.epochs = 2, o.shuffle_buffer = 256;
  trace *full = read_trace(&o);
  /* a resumed run: a new reader, the first 11 batches (into epoch 0's tail) read and dropped */
  ps_reader *r = NULL;
  ps_error err;
  assert_int_equal(ps_reader_create(g_path, &o, &r, &err), PS_OK);
  size_t pos = 0, k = 0;
  for (;;) {
    ps_batch *b = NULL;
    assert_int_equal(ps_reader_next(r, &b, &err), PS_OK);
    if (!b) break;
    if (k++ >= 11)
      for (size_t i = 0; i < b->n; i++) assert_int_equal(b->keys[i * 26], full->id[pos + i]);
    pos += b->n;
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
  assert_int_equal(pos, full->ns);
  free(full);
}

static void test_bad_options(void **st) {
  (void)st;
  make_file(10);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.shuffle_buffer = 10, o.keep_rows = 1;
  ps_reader *r = NULL;
  ps_error err;
  assert_int_equal(ps_reader_create(g_path, &o, &r, &err), PS_ERR_INVALID);
  o.keep_rows = 0, o.shuffle_window = 4;
  assert_int_equal(ps_reader_create(g_path, &o, &r, &err), PS_ERR_INVALID);
  assert_null(r);
}

/* ---- another schema: sample s has label s % 2, dense id = s and x = 2s (no transform), a
 * skipped column, feature 0 one value (s), features 1 and 2 bags of (s + f) % 4 values
 * (empty bags included), value j of bag f being s*1000 + f*10 + j; all 8 hex digits, so with
 * N hash buckets the key of value v of feature f is f*N + v. */
enum { MH_SAMPLES = 500, MH_BATCH = 32 };

static const char MH_SCHEMA[] =
    "{\"format\": \"tsv\", \"columns\": ["
    "{\"name\": \"y\", \"type\": \"label\"},"
    "{\"name\": \"id\", \"type\": \"dense\", \"transform\": \"none\"},"
    "{\"name\": \"note\", \"type\": \"skip\"},"
    "{\"name\": \"x\", \"type\": \"dense\", \"transform\": \"none\"},"
    "{\"name\": \"one\", \"type\": \"categorical\"},"
    "{\"name\": \"b1\", \"type\": \"categorical\", \"separator\": \"|\"},"
    "{\"name\": \"b2\", \"type\": \"categorical\", \"separator\": \"|\"}]}";

static void make_mh_file(void) {
  snprintf(g_path, sizeof g_path, "%s", tmp_path("mh.tsv"));
  FILE *f = fopen(g_path, "wb");
  assert_non_null(f);
  for (size_t s = 0; s < MH_SAMPLES; s++) {
    fprintf(f, "%zu\t%zu\tn%zu\t%zu\t%08zx", s % 2, s, s, 2 * s, s);
    for (size_t b = 1; b <= 2; b++) {
      fputc('\t', f);
      for (size_t j = 0; j < (s + b) % 4; j++) fprintf(f, "%s%08zx", j ? "|" : "", s * 1000 + b * 10 + j);
    }
    fputc('\n', f);
  }
  fclose(f);
}

/* Reads the file with the schema; checks every sample is whole, returns the ids in order. */
static size_t read_mh(const ps_reader_opts *o, uint64_t *ids, size_t *nbatches) {
  ps_reader *r = NULL;
  ps_error err;
  assert_int_equal(ps_reader_create(g_path, o, &r, &err), PS_OK);
  size_t ns = 0;
  *nbatches = 0;
  for (;;) {
    ps_batch *b = NULL;
    assert_int_equal(ps_reader_next(r, &b, &err), PS_OK);
    if (!b) break;
    assert_int_equal(b->index, (*nbatches)++);
    assert_int_equal(b->key_offsets[0], 0);
    assert_int_equal(b->key_offsets[b->n * 3], b->nkeys);
    for (size_t i = 0; i < b->n; i++) {
      uint64_t sid = (uint64_t)b->dense[i * 2];
      assert_true(sid < MH_SAMPLES);
      assert_true(b->dense[i * 2 + 1] == 2.0f * (float)sid);
      assert_true(b->labels[i] == (float)(sid % 2));
      const uint32_t *off = b->key_offsets + i * 3;
      assert_int_equal(off[1] - off[0], 1);
      assert_int_equal(b->keys[off[0]], sid);
      for (uint64_t f = 1; f <= 2; f++) {
        assert_int_equal(off[f + 1] - off[f], (sid + f) % 4);
        for (uint32_t j = off[f]; j < off[f + 1]; j++)
          assert_int_equal(b->keys[j], f * N + sid * 1000 + f * 10 + (j - off[f]));
      }
      ids[ns++] = sid;
    }
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
  return ns;
}

static void test_any_schema_samples_stay_whole(void **st) {
  (void)st;
  make_mh_file();
  ps_schema *sc = NULL;
  ps_error err;
  assert_int_equal(ps_schema_parse_json(MH_SCHEMA, "mh.json", &sc, &err), PS_OK);
  assert_int_equal(ps_schema_ndense(sc), 2);
  assert_int_equal(ps_schema_ncat(sc), 3);
  ps_reader_opts o = opts(MH_BATCH, 1);
  o.schema = sc;
  static uint64_t plain[MH_SAMPLES], a[MH_SAMPLES], b[MH_SAMPLES];
  size_t nb_plain, nb_a, nb_b;
  assert_int_equal(read_mh(&o, plain, &nb_plain), MH_SAMPLES);
  for (size_t i = 0; i < MH_SAMPLES; i++) assert_int_equal(plain[i], i);
  o.shuffle_buffer = 100;
  assert_int_equal(read_mh(&o, a, &nb_a), MH_SAMPLES);
  assert_int_equal(nb_a, nb_plain);
  assert_permutation(a, plain, MH_SAMPLES);
  size_t moved = 0;
  for (size_t i = 0; i < MH_SAMPLES; i++) moved += a[i] != i;
  assert_true(moved > MH_SAMPLES * 9 / 10);
  o.prefetch = 0; /* same seed, no thread: the same order */
  assert_int_equal(read_mh(&o, b, &nb_b), MH_SAMPLES);
  assert_memory_equal(a, b, sizeof a);
  ps_schema_destroy(&sc);
}

PS_SCRATCH_FIXTURES("shuffle")

PS_TEST_MAIN("shuffle", setup, teardown,
    cmocka_unit_test(test_permutation_per_epoch_seeded),
    cmocka_unit_test(test_ranks_shuffle_their_own_shard),
    cmocka_unit_test(test_resume_drops_batches_exactly),
    cmocka_unit_test(test_bad_options),
    cmocka_unit_test(test_any_schema_samples_stay_whole))
