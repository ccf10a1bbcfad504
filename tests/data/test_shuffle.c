/* test_shuffle: the reader's shuffle buffer (ps_shuffle.h). Every line of the test file names
 * itself (C1 = its line index, label = index % 3 == 0, I1 = index), so what a sample must look
 * like after shuffling is known from the file's construction: each epoch is a permutation of
 * the file with every sample intact, batch sizes and metadata are those of file order, the
 * order is seeded (same seed same order, other seed other order), no sample leaves before it
 * could have been read (capacity + 2 batches), each rank permutes only its own shard, and a
 * reader that drops its first k batches (ps-worker's resume) continues exactly as one that did
 * not stop. A direct source also checks multi-hot samples (bags of 0..3 keys) survive whole. */
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

#include "ps_fs.h"
#include "ps_reader.h"
#include "ps_shuffle.h"

#define N (1ull << 32) /* hash buckets: key of feature f with value v is f*N + v */

static char g_dir[256], g_path[512];

static void make_file(size_t lines) {
  snprintf(g_path, sizeof g_path, "%s/shuf.tsv", g_dir);
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
static trace *read_trace(const ps_reader_opts *o) {
  trace *t = calloc(1, sizeof *t);
  assert_non_null(t);
  ps_reader *r = NULL;
  ps_error err;
  assert_int_equal(ps_reader_create(g_path, o, &r, &err), PS_OK);
  for (;;) {
    ps_batch *b = NULL;
    assert_int_equal(ps_reader_next(r, &b, &err), PS_OK);
    if (!b) break;
    assert_true(t->nb < 512 && t->ns + b->n <= 8192);
    assert_null(b->key_offsets);
    assert_int_equal(b->nkeys, b->n * 26);
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
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
  return t;
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
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 64, o.epochs = 2, o.hash_buckets = N, o.seed = 5;
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
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 50, o.world = 2, o.hash_buckets = N, o.seed = 9;
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
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 64, o.epochs = 2, o.hash_buckets = N, o.seed = 3, o.shuffle_buffer = 256;
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

/* ---- multi-hot through a direct source: sample s has 3 bags; bag f holds (s + f) % 4 keys
 * (0..3, empty bags included), key j of bag f is s*1000 + f*10 + j; label s % 2; dense s. */
enum { MH_SAMPLES = 500, MH_BATCH = 32, MH_BAGS = 3 };

typedef struct mh_src {
  size_t next;
  ps_batch b;
  float labels[MH_BATCH], dense[MH_BATCH];
  uint64_t keys[MH_BATCH * MH_BAGS * 3];
  uint32_t offs[MH_BATCH * MH_BAGS + 1];
  uint64_t okeys[MH_BATCH * MH_BAGS * 3];
  uint32_t ooffs[MH_BATCH * MH_BAGS + 1];
} mh_src;

static ps_status mh_source(void *ctx, ps_batch **out, int *end) {
  mh_src *m = ctx;
  *end = m->next >= MH_SAMPLES;
  if (*end) return PS_OK;
  size_t n = MH_SAMPLES - m->next < MH_BATCH ? MH_SAMPLES - m->next : MH_BATCH, k = 0;
  m->b = (ps_batch){.n = n, .labels = m->labels, .dense = m->dense, .keys = m->keys,
                    .key_offsets = m->offs, .index = m->next / MH_BATCH,
                    .last_in_epoch = m->next + n == MH_SAMPLES};
  for (size_t i = 0; i < n; i++) {
    size_t s = m->next + i;
    m->labels[i] = (float)(s % 2), m->dense[i] = (float)s;
    for (size_t f = 0; f < MH_BAGS; f++) {
      m->offs[i * MH_BAGS + f] = (uint32_t)k;
      for (size_t j = 0; j < (s + f) % 4; j++) m->keys[k++] = s * 1000 + f * 10 + j;
    }
  }
  m->offs[n * MH_BAGS] = (uint32_t)k;
  m->b.nkeys = k;
  m->next += n;
  *out = &m->b;
  return PS_OK;
}

static int mh_reserve(void *ctx, ps_batch *b, size_t nkeys) {
  mh_src *m = ctx;
  if (nkeys > sizeof m->okeys / sizeof m->okeys[0]) return -1;
  b->keys = m->okeys, b->key_offsets = m->ooffs;
  return 0;
}

static void test_multi_hot_samples_stay_whole(void **st) {
  (void)st;
  mh_src *m = calloc(1, sizeof *m);
  ps_shuffle_opts so = {.capacity = 100, .seed = 1, .max_batch = MH_BATCH, .ndense = 1,
                        .nbags = MH_BAGS, .reserve_keys = mh_reserve};
  ps_shuffle *s = NULL;
  assert_int_equal(ps_shuffle_create(&so, mh_source, m, &s), PS_OK);
  float labels[MH_BATCH], dense[MH_BATCH];
  ps_batch out = {.labels = labels, .dense = dense};
  int seen[MH_SAMPLES] = {0}, moved = 0;
  size_t total = 0, batches = 0;
  for (;;) {
    int end = 0;
    assert_int_equal(ps_shuffle_next(s, &out, &end), PS_OK);
    if (end) break;
    assert_int_equal(out.index, batches++);
    assert_int_equal(out.key_offsets[0], 0);
    assert_int_equal(out.key_offsets[out.n * MH_BAGS], out.nkeys);
    for (size_t i = 0; i < out.n; i++) {
      size_t sid = (size_t)dense[i];
      assert_true(sid < MH_SAMPLES);
      seen[sid]++;
      moved += sid != total + i;
      assert_true(labels[i] == (float)(sid % 2));
      for (size_t f = 0; f < MH_BAGS; f++) {
        uint32_t a = out.key_offsets[i * MH_BAGS + f], b = out.key_offsets[i * MH_BAGS + f + 1];
        assert_int_equal(b - a, (sid + f) % 4);
        for (uint32_t j = a; j < b; j++) assert_int_equal(out.keys[j], sid * 1000 + f * 10 + (j - a));
      }
    }
    total += out.n;
    assert_int_equal(out.last_in_epoch, total == MH_SAMPLES);
  }
  assert_int_equal(total, MH_SAMPLES);
  for (size_t i = 0; i < MH_SAMPLES; i++) assert_int_equal(seen[i], 1);
  assert_true(moved > MH_SAMPLES * 9 / 10);
  assert_true(ps_shuffle_bytes(s) > (100 + 2 * MH_BATCH) * (4 + 8 * MH_BAGS));
  ps_shuffle_destroy(&s);
  assert_null(s);
  free(m);
}

static int setup(void **st) {
  (void)st;
  snprintf(g_dir, sizeof g_dir, "/tmp/ember-test-shuffle-XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  return ps_rm_rf(g_dir) == PS_OK ? 0 : -1;
}

PS_TEST_MAIN("shuffle", setup, teardown,
    cmocka_unit_test(test_permutation_per_epoch_seeded),
    cmocka_unit_test(test_ranks_shuffle_their_own_shard),
    cmocka_unit_test(test_resume_drops_batches_exactly),
    cmocka_unit_test(test_bad_options),
    cmocka_unit_test(test_multi_hot_samples_stay_whole))
