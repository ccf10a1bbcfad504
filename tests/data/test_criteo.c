/* test_criteo: the Criteo line parser (every edge case with its expected value or error),
 * key mapping, the binary round trip, gzip input, bad-line policies with line numbers, and
 * the reader's sharding (every row exactly once, equal batch counts), epochs, prefetch and
 * shuffle. Expected values are written out by hand or derived from the file's construction,
 * not from the code under test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "ps_test_main.h"
#include "ps_test_scratch.h"

#include "ps_criteo.h"
#include "ps_criteo_bin.h"
#include "ps_reader.h"

/* A well-formed line: label, I1..I13 = 1..13, C1..C26 = 00000001..0000001a (hex). */
static void good_line(char *out, size_t cap, int label) {
  size_t o = (size_t)snprintf(out, cap, "%d", label);
  for (int i = 1; i <= 13; i++) o += (size_t)snprintf(out + o, cap - o, "\t%d", i);
  for (int j = 1; j <= 26; j++) o += (size_t)snprintf(out + o, cap - o, "\t%08x", j);
}

/* Parses s; on failure checks err carries the status and copies its message to err_out. */
static ps_status parse(const char *s, ps_criteo_row *row, char *err_out) {
  ps_error err;
  ps_status st = ps_criteo_parse_line(s, strlen(s), row, &err);
  if (st != PS_OK) {
    assert_int_equal(err.code, st);
    snprintf(err_out, 200, "%.199s", err.msg);
  }
  return st;
}

static void test_good_line(void **st) {
  (void)st;
  char line[512], err[200];
  ps_criteo_row row;
  good_line(line, sizeof line, 1);
  assert_int_equal(parse(line, &row, err), PS_OK);
  assert_int_equal(row.label, 1);
  assert_int_equal(row.dense_missing, 0);
  assert_int_equal(row.cat_missing, 0);
  for (int i = 0; i < 13; i++) assert_true(row.dense[i] == (float)log(2.0 + i)); /* log(1+x) */
  for (int j = 0; j < 26; j++) assert_int_equal(row.cat[j], j + 1);
}

static void test_real_first_line(void **st) {
  (void)st;
  /* The first line of Criteo Kaggle's train.txt (DESIGN/SOURCE), I12 empty. */
  const char *l =
      "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t"
      "25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t"
      "1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\t"
      "c5c50484\te8b83407\t9727dd16";
  ps_criteo_row row;
  char err[200];
  assert_int_equal(parse(l, &row, err), PS_OK);
  assert_int_equal(row.label, 0);
  assert_int_equal(row.dense_missing, 1u << 11); /* I12 */
  assert_true(row.dense[4] == (float)log(1383.0));
  assert_true(row.dense[3] == 0.0f);
  assert_int_equal(row.cat[0], 0x68fd1e64u);
  assert_int_equal(row.cat[25], 0x9727dd16u);
  assert_int_equal(row.cat_missing, 1u << 21); /* C22 */
}

static void test_empty_fields_and_trailing_tab(void **st) {
  (void)st;
  char line[64], err[200];
  ps_criteo_row row;
  /* label + 39 empty fields: 40 fields, the last one empty (the line ends in a TAB). */
  size_t o = (size_t)snprintf(line, sizeof line, "1");
  for (int i = 0; i < 39; i++) line[o++] = '\t';
  line[o] = 0;
  assert_int_equal(parse(line, &row, err), PS_OK);
  assert_int_equal(row.dense_missing, 0x1fff);
  assert_int_equal(row.cat_missing, 0x3ffffff);
  for (int i = 0; i < 13; i++) assert_true(row.dense[i] == 0.0f);
  for (int j = 0; j < 26; j++) assert_int_equal(row.cat[j], 0);

  /* Only C26 empty: a trailing TAB. */
  char full[512];
  good_line(full, sizeof full, 0);
  full[strlen(full) - 8] = 0;
  assert_int_equal(parse(full, &row, err), PS_OK);
  assert_int_equal(row.cat_missing, 1u << 25);
  assert_int_equal(row.cat[24], 25);
}

static void test_crlf(void **st) {
  (void)st;
  char a[512], b[520], err[200];
  ps_criteo_row ra, rb;
  good_line(a, sizeof a, 1);
  snprintf(b, sizeof b, "%s\r", a);
  assert_int_equal(parse(a, &ra, err), PS_OK);
  assert_int_equal(parse(b, &rb, err), PS_OK);
  assert_memory_equal(&ra.dense, &rb.dense, sizeof ra.dense);
  assert_memory_equal(&ra.cat, &rb.cat, sizeof ra.cat);
  /* CR with a trailing empty field. */
  a[strlen(a) - 8] = 0;
  snprintf(b, sizeof b, "%s\r", a);
  assert_int_equal(parse(b, &rb, err), PS_OK);
  assert_int_equal(rb.cat_missing, 1u << 25);
  /* A CR inside a field is not a line ending. */
  good_line(a, sizeof a, 1);
  char *c = strstr(a, "\t3\t");
  c[1] = '\r';
  assert_int_equal(parse(a, &rb, err), PS_ERR_PARSE);
  assert_string_equal(err, "I3: not an integer: '\\x0d'");
}

static void expect_err(const char *line, const char *msg) {
  ps_criteo_row row;
  char err[200] = "";
  assert_int_equal(parse(line, &row, err), PS_ERR_PARSE);
  assert_string_equal(err, msg);
}

/* Replaces field k (0 = label) of a good line by `val`. */
static void with_field(char *out, size_t cap, int k, const char *val) {
  char line[512];
  good_line(line, sizeof line, 1);
  char *p = line;
  for (int i = 0; i < k; i++) p = strchr(p, '\t') + 1;
  char *e = strchr(p, '\t');
  snprintf(out, cap, "%.*s%s%s", (int)(p - line), line, val, e ? e : "");
}

static void test_field_count_errors(void **st) {
  (void)st;
  char line[600];
  good_line(line, sizeof line, 1);
  char *last = strrchr(line, '\t');
  *last = 0;
  expect_err(line, "too few fields (39, want 40)");
  good_line(line, sizeof line, 1);
  strcat(line, "\t");
  expect_err(line, "too many fields (41, want 40)");
  good_line(line, sizeof line, 1);
  strcat(line, "\t00000001\t00000002");
  expect_err(line, "too many fields (42, want 40)");
  expect_err("", "empty line");
  expect_err("\r", "empty line");
  expect_err("1", "too few fields (1, want 40)");
  expect_err("1\t2\t3", "too few fields (3, want 40)");
}

static void test_value_errors(void **st) {
  (void)st;
  char line[600];
  ps_criteo_row row;
  char err[200];
  with_field(line, sizeof line, 14, "68fd1e6g");
  expect_err(line, "C1: want 8 hex digits, got '68fd1e6g'");
  with_field(line, sizeof line, 20, "68fd1e6");
  expect_err(line, "C7: want 8 hex digits, got '68fd1e6'");
  with_field(line, sizeof line, 39, "68fd1e640");
  expect_err(line, "C26: want 8 hex digits, got '68fd1e640'");
  with_field(line, sizeof line, 15, "0x12345");
  expect_err(line, "C2: want 8 hex digits, got '0x12345'");
  with_field(line, sizeof line, 15, " 1234567");
  expect_err(line, "C2: want 8 hex digits, got ' 1234567'");
  with_field(line, sizeof line, 3, "12a");
  expect_err(line, "I3: not an integer: '12a'");
  with_field(line, sizeof line, 1, "1.0");
  expect_err(line, "I1: not an integer: '1.0'");
  with_field(line, sizeof line, 2, "+5");
  expect_err(line, "I2: not an integer: '+5'");
  with_field(line, sizeof line, 13, "-");
  expect_err(line, "I13: not an integer: '-'");
  with_field(line, sizeof line, 5, " 5");
  expect_err(line, "I5: not an integer: ' 5'");
  with_field(line, sizeof line, 6, "99999999999999999999");
  expect_err(line, "I6: integer out of range: '9999999999999999...'");
  with_field(line, sizeof line, 0, "2");
  expect_err(line, "label: want 0 or 1, got '2'");
  with_field(line, sizeof line, 0, "");
  expect_err(line, "label: want 0 or 1, got ''");
  with_field(line, sizeof line, 0, "0.0");
  expect_err(line, "label: want 0 or 1, got '0.0'");
  /* Accepted: negative integers (-> 0 after the transform), int64 extremes, upper-case hex. */
  with_field(line, sizeof line, 2, "-2");
  assert_int_equal(parse(line, &row, err), PS_OK);
  assert_true(row.dense[1] == 0.0f);
  assert_int_equal(row.dense_missing, 0);
  with_field(line, sizeof line, 2, "9223372036854775807");
  assert_int_equal(parse(line, &row, err), PS_OK);
  assert_true(row.dense[1] == (float)log1p(9223372036854775807.0));
  with_field(line, sizeof line, 2, "-9223372036854775808");
  assert_int_equal(parse(line, &row, err), PS_OK);
  with_field(line, sizeof line, 2, "9223372036854775808");
  expect_err(line, "I2: integer out of range: '9223372036854775...'");
  with_field(line, sizeof line, 14, "68FD1E64");
  assert_int_equal(parse(line, &row, err), PS_OK);
  assert_int_equal(row.cat[0], 0x68fd1e64u);
  with_field(line, sizeof line, 1, "007");
  assert_int_equal(parse(line, &row, err), PS_OK);
  assert_true(row.dense[0] == (float)log(8.0));
}

/* Every byte value at every position of a C1 token: accepted iff it is a hex digit (either
 * case), with the value a per-character reference computes. */
static void test_hex_every_byte(void **st) {
  (void)st;
  char line[600], tok[9];
  ps_criteo_row row;
  ps_error err;
  for (int pos = 0; pos < 8; pos++)
    for (int c = 1; c < 256; c++) {
      if (c == '\t' || c == '\n') continue;
      memcpy(tok, "9a0B3cF7", 9);
      tok[pos] = (char)c;
      with_field(line, sizeof line, 14, tok);
      int hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      ps_status s = ps_criteo_parse_line(line, strlen(line), &row, &err);
      if (!hex) {
        assert_int_equal(s, PS_ERR_PARSE);
        assert_non_null(strstr(err.msg, "C1: want 8 hex digits"));
        continue;
      }
      assert_int_equal(s, PS_OK);
      uint32_t want = 0;
      for (int k = 0; k < 8; k++) {
        int ch = (unsigned char)tok[k];
        int d = ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
        want = want * 16 + (uint32_t)d;
      }
      assert_int_equal(row.cat[0], want);
    }
  /* and the dense transform's table agrees with libm at its edge */
  for (int64_t x = 4090; x < 4100; x++) assert_true(ps_criteo_dense_transform(x) == (float)log1p((double)x));
}

/* Random mutations of good lines (replace, insert, delete bytes; truncate): the parser
 * answers OK or PARSE and never reads outside the line (ASan build checks the bounds: the
 * line is copied into an exactly-sized heap buffer). */
static void test_mutations(void **st) {
  (void)st;
  uint64_t s = 12345;
  char base[600], line[700];
  int ok = 0, bad = 0;
  for (int it = 0; it < 20000; it++) {
    good_line(base, sizeof base, it & 1);
    size_t n = strlen(base);
    memcpy(line, base, n);
    int muts = 1 + (int)(ps_mix64(++s) % 3);
    for (int m = 0; m < muts; m++) {
      uint64_t r = ps_mix64(++s);
      size_t pos = n ? (size_t)(r % n) : 0;
      static const char alphabet[] = "\t\r\n-0129afAFgxz \x80\xff";
      char c = alphabet[(r >> 32) % (sizeof alphabet - 1)];
      switch ((r >> 48) % 4) {
        case 0: if (n) line[pos] = c; break;
        case 1: if (n < 690) { memmove(line + pos + 1, line + pos, n - pos); line[pos] = c; n++; } break;
        case 2: if (n) { memmove(line + pos, line + pos + 1, n - pos - 1); n--; } break;
        default: n = pos; break;
      }
    }
    char *heap = malloc(n ? n : 1);
    memcpy(heap, line, n);
    ps_criteo_row row;
    ps_error err;
    ps_status r = ps_criteo_parse_line(heap, n, &row, &err);
    assert_true(r == PS_OK || r == PS_ERR_PARSE);
    if (r == PS_OK) ok++;
    else bad++, assert_true(strlen(err.msg) > 0);
    free(heap);
  }
  assert_true(ok > 100 && bad > 10000);
}

static void test_keys(void **st) {
  (void)st;
  /* Buckets: f*N + v mod N, missing -> v = 0. */
  assert_true(ps_criteo_key(0, 0x68fd1e64u, 0, 1000) == 0x68fd1e64u % 1000);
  assert_true(ps_criteo_key(3, 12345, 0, 1000) == 3 * 1000 + 345);
  assert_true(ps_criteo_key(3, 777, 1, 1000) == 3000);
  /* Open vocabulary: hash of (f << 33 | missing << 32 | v). */
  assert_true(ps_criteo_key(2, 5, 0, 0) == ps_hash_u64((2ull << 33) | 5, PS_CRITEO_KEY_SEED));
  assert_true(ps_criteo_key(2, 0, 1, 0) == ps_hash_u64((2ull << 33) | (1ull << 32), PS_CRITEO_KEY_SEED));
  /* Missing is distinct from token 00000000 and from other features' missing. */
  assert_true(ps_criteo_key(2, 0, 1, 0) != ps_criteo_key(2, 0, 0, 0));
  assert_true(ps_criteo_key(2, 0, 1, 0) != ps_criteo_key(3, 0, 1, 0));
  assert_true(ps_criteo_key(0, 7, 0, 0) != ps_criteo_key(1, 7, 0, 0));
}

/* ---------- files and the reader ---------- */

/* Line i: label i%2 (or i%3==0 -> 1), I1 = i, C1 = i as hex, other fields varied, some
 * empty; every 7th line ends in a TAB (C26 empty); optional CRLF. */
static void make_line(char *out, size_t cap, uint64_t i, int crlf) {
  size_t o = (size_t)snprintf(out, cap, "%d\t%llu", (int)(i % 3 == 0), (unsigned long long)i);
  for (int k = 2; k <= 13; k++) {
    if ((i + (uint64_t)k) % 5 == 0) o += (size_t)snprintf(out + o, cap - o, "\t");
    else o += (size_t)snprintf(out + o, cap - o, "\t%llu", (unsigned long long)((i * k) % 1000));
  }
  o += (size_t)snprintf(out + o, cap - o, "\t%08llx", (unsigned long long)i);
  for (int j = 2; j <= 26; j++) {
    if (j == 26 && i % 7 == 0) o += (size_t)snprintf(out + o, cap - o, "\t");
    else if ((i + (uint64_t)j) % 4 == 0) o += (size_t)snprintf(out + o, cap - o, "\t");
    else o += (size_t)snprintf(out + o, cap - o, "\t%08llx", (unsigned long long)((i * 2654435761u + (uint64_t)j) & 0xffffffffu));
  }
  snprintf(out + o, cap - o, crlf ? "\r\n" : "\n");
}

static const char *make_tsv(const char *name, uint64_t n, int crlf) {
  const char *p = tmp_path(name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  char line[600];
  for (uint64_t i = 0; i < n; i++) {
    make_line(line, sizeof line, i, crlf);
    fputs(line, f);
  }
  fclose(f);
  return p;
}

/* The binary file of make_line's first n rows, through the writer from rows parsed directly. */
static const char *make_bin(const char *name, uint64_t n) {
  const char *p = tmp_path(name);
  ps_criteo_bin_writer *w;
  assert_int_equal(ps_criteo_bin_writer_create(p, &w), PS_OK);
  char line[600];
  for (uint64_t i = 0; i < n; i++) {
    ps_criteo_row row;
    make_line(line, sizeof line, i, 0);
    assert_int_equal(ps_criteo_parse_line(line, strlen(line) - 1, &row, NULL), PS_OK);
    assert_int_equal(ps_criteo_bin_write(w, &row), PS_OK);
  }
  assert_int_equal(ps_criteo_bin_writer_close(&w, 0), PS_OK);
  assert_null(w);
  return p;
}

typedef struct seen {
  size_t nbatches, nrows;
  float *labels, *dense;
  uint64_t *keys;
} seen;

static void seen_free(seen *s) { free(s->labels), free(s->dense), free(s->keys); }

static ps_status read_all(const char *path, const ps_reader_opts *o, seen *s) {
  memset(s, 0, sizeof *s);
  ps_reader *r;
  ps_error err;
  ps_status st = ps_reader_create(path, o, &r, &err);
  if (st) return st;
  ps_batch *b;
  while ((st = ps_reader_next(r, &b, NULL)) == PS_OK && b) {
    s->labels = realloc(s->labels, (s->nrows + b->n) * sizeof(float));
    s->dense = realloc(s->dense, (s->nrows + b->n) * 13 * sizeof(float));
    s->keys = realloc(s->keys, (s->nrows + b->n) * 26 * sizeof(uint64_t) + 8);
    memcpy(s->labels + s->nrows, b->labels, b->n * sizeof(float));
    memcpy(s->dense + s->nrows * 13, b->dense, b->n * 13 * sizeof(float));
    memcpy(s->keys + s->nrows * 26, b->keys, b->n * 26 * sizeof(uint64_t));
    s->nrows += b->n;
    s->nbatches++;
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
  return st;
}

static void assert_seen_equal(const seen *a, const seen *b) {
  assert_int_equal(a->nrows, b->nrows);
  assert_int_equal(a->nbatches, b->nbatches);
  assert_memory_equal(a->labels, b->labels, a->nrows * sizeof(float));
  assert_memory_equal(a->dense, b->dense, a->nrows * 13 * sizeof(float));
  assert_memory_equal(a->keys, b->keys, a->nrows * 26 * sizeof(uint64_t));
}

static void test_reader_values(void **st) {
  (void)st;
  const char *p = make_tsv("vals.tsv", 100, 0);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 32;
  o.hash_buckets = 1ull << 32;
  seen s;
  assert_int_equal(read_all(p, &o, &s), PS_OK);
  assert_int_equal(s.nrows, 100);
  assert_int_equal(s.nbatches, 4);
  for (size_t i = 0; i < 100; i++) {
    assert_true(s.labels[i] == (i % 3 == 0 ? 1.0f : 0.0f));
    assert_true(s.dense[i * 13] == (float)log1p((double)i));
    assert_true(s.keys[i * 26] == i);                          /* C1 = i, feature 0 */
    uint64_t k25 = s.keys[i * 26 + 25];
    if (i % 7 == 0) assert_true(k25 == 25ull << 32);           /* C26 missing -> bucket 0 */
    else assert_true(k25 >> 32 == 25);
  }
  seen_free(&s);
}

static void test_binary_and_gzip_round_trip(void **st) {
  (void)st;
  const char *tsv = make_tsv("rt.tsv", 1000, 1); /* CRLF */
  const char *bin = make_bin("rt.bin", 1000);
  char line[600];
  /* gzip of the same text */
  const char *gz = tmp_path("rt.tsv.gz");
  gzFile g = gzopen(gz, "wb6");
  for (uint64_t i = 0; i < 1000; i++) {
    make_line(line, sizeof line, i, 1);
    gzputs(g, line);
  }
  gzclose(g);

  ps_input_format f;
  assert_int_equal(ps_data_detect(tsv, &f), PS_OK);
  assert_int_equal(f, PS_INPUT_TSV);
  assert_int_equal(ps_data_detect(bin, &f), PS_OK);
  assert_int_equal(f, PS_INPUT_BIN);
  assert_int_equal(ps_data_detect(gz, &f), PS_OK);
  assert_int_equal(f, PS_INPUT_TSV_GZ);
  uint64_t n;
  assert_int_equal(ps_data_count_lines(tsv, &n), PS_OK);
  assert_int_equal(n, 1000);
  assert_int_equal(ps_data_count_lines(gz, &n), PS_OK);
  assert_int_equal(n, 1000);
  assert_int_equal(ps_data_count_lines(bin, &n), PS_OK);
  assert_int_equal(n, 1000);

  for (int mode = 0; mode < 2; mode++) {
    ps_reader_opts o;
    ps_reader_opts_default(&o);
    o.batch = 64;
    o.hash_buckets = mode ? 100003 : 0;
    seen a, b, c;
    assert_int_equal(read_all(tsv, &o, &a), PS_OK);
    assert_int_equal(read_all(bin, &o, &b), PS_OK);
    assert_int_equal(read_all(gz, &o, &c), PS_OK);
    assert_int_equal(a.nrows, 1000);
    assert_seen_equal(&a, &b);
    assert_seen_equal(&a, &c);
    seen_free(&a), seen_free(&b), seen_free(&c);
  }
  /* A truncated binary file is refused at open. */
  const char *bad = tmp_path("trunc.bin");
  FILE *in = fopen(bin, "rb"), *out = fopen(bad, "wb");
  char buf[4096];
  size_t got = fread(buf, 1, sizeof buf, in);
  fwrite(buf, 1, got - 10, out);
  fclose(in), fclose(out);
  ps_reader *r;
  ps_error err;
  assert_int_equal(ps_reader_create(bad, NULL, &r, &err), PS_ERR_CORRUPT);
  assert_int_equal(err.code, PS_ERR_CORRUPT);
  assert_non_null(strstr(err.msg, "not a valid Ember binary file"));
  assert_int_equal(ps_reader_create(tmp_path("nonexistent.tsv"), NULL, &r, &err),
                   PS_ERR_NOT_FOUND);
}

/* The reader's next error for path (after any batches), its message into msg. */
static ps_status read_error(const char *path, ps_bad_lines policy, char *msg, size_t n,
                            uint64_t *bad) {
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 64;
  o.bad_lines = policy;
  ps_reader *r;
  ps_error err;
  ps_status st = ps_reader_create(path, &o, &r, &err);
  if (st) {
    snprintf(msg, n, "%s", err.msg);
    return st;
  }
  ps_batch *b;
  while ((st = ps_reader_next(r, &b, &err)) == PS_OK && b) ps_reader_release(r, b);
  if (st) assert_int_equal(err.code, st);
  snprintf(msg, n, "%s", st ? err.msg : "");
  *bad = ps_reader_bad_lines(r);
  ps_reader_destroy(&r);
  return st;
}

/* Errors of the file, not of a line (issue 17): a truncated .gz is PS_ERR_IO naming the file
 * under either bad-line policy (it was one bad line), and so is counting its lines; a corrupt
 * binary record is PS_ERR_CORRUPT with its number. */
static void test_file_errors(void **st) {
  (void)st;
  const char *gz = tmp_path("cut.tsv.gz");
  gzFile g = gzopen(gz, "wb6");
  char line[600];
  for (uint64_t i = 0; i < 2000; i++) {
    make_line(line, sizeof line, i, 0);
    gzputs(g, line);
  }
  gzclose(g);
  FILE *f = fopen(gz, "r+b");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  assert_int_equal(ftruncate(fileno(f), ftell(f) / 2), 0);
  fclose(f);
  char msg[512];
  uint64_t bad = 0, n = 0;
  for (int policy = 0; policy < 2; policy++) {
    assert_int_equal(read_error(gz, (ps_bad_lines)policy, msg, sizeof msg, &bad), PS_ERR_IO);
    assert_non_null(strstr(msg, gz));
    assert_non_null(strstr(msg, "truncated"));
    assert_int_equal(bad, 0);
  }
  assert_int_equal(ps_data_count_lines(gz, &n), PS_ERR_IO);

  const char *bin = make_bin("corrupt.bin", 300);
  f = fopen(bin, "r+b");
  assert_non_null(f);
  fseek(f, PS_CRITEO_BIN_HEADER + 183 * PS_CRITEO_BIN_RECORD, SEEK_SET);
  fputc(7, f); /* a label of 7 */
  fclose(f);
  assert_int_equal(read_error(bin, PS_BAD_LINES_SKIP, msg, sizeof msg, &bad), PS_ERR_CORRUPT);
  assert_non_null(strstr(msg, "record 183 is corrupt"));
}

static void test_bad_lines_policy(void **st) {
  (void)st;
  char good[600], text[8192] = "";
  for (int i = 0; i < 10; i++) {
    if (i == 3) strcat(text, "1\t2\t3\n");                      /* line 4: too few */
    else if (i == 6) {                                           /* line 7: non-hex */
      with_field(good, sizeof good, 16, "zzzzzzzz");
      strcat(text, good), strcat(text, "\n");
    } else if (i == 8) strcat(text, "\n");                     /* line 9: empty */
    else {
      good_line(good, sizeof good, i % 2);
      strcat(text, good), strcat(text, i % 2 ? "\r\n" : "\n");
    }
  }
  good_line(good, sizeof good, 1);
  strcat(text, good); /* line 11, no final newline */
  const char *p = tmp_path("bad.tsv");
  write_file(p, text);

  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 4;
  o.log_bad_lines = 0;
  for (int pf = 0; pf <= 2; pf += 2) {
    o.prefetch = pf;
    o.bad_lines = PS_BAD_LINES_SKIP;
    ps_reader *r;
    ps_error err;
    assert_int_equal(ps_reader_create(p, &o, &r, &err), PS_OK);
    ps_batch *b;
    size_t rows = 0, sizes[8], nb = 0;
    while (ps_reader_next(r, &b, NULL) == PS_OK && b) {
      sizes[nb++] = b->n;
      rows += b->n;
      ps_reader_release(r, b);
    }
    assert_int_equal(rows, 8);
    assert_int_equal(ps_reader_bad_lines(r), 3);
    /* batches are line ranges: [1-4] lost line 4, [5-8] lost 7, [9-11] lost 9 */
    assert_int_equal(nb, 3);
    assert_int_equal(sizes[0], 3);
    assert_int_equal(sizes[1], 3);
    assert_int_equal(sizes[2], 2);
    assert_int_equal(ps_reader_lines_per_epoch(r), 11);
    ps_reader_destroy(&r);

    o.bad_lines = PS_BAD_LINES_FAIL;
    assert_int_equal(ps_reader_create(p, &o, &r, &err), PS_OK);
    ps_status s = ps_reader_next(r, &b, &err);
    assert_int_equal(s, PS_ERR_PARSE);
    assert_int_equal(err.code, PS_ERR_PARSE);
    assert_null(b);
    char want[600];
    snprintf(want, sizeof want, "%s:4: too few fields (3, want 40)", p);
    assert_string_equal(err.msg, want);
    assert_int_equal(ps_reader_next(r, &b, NULL), PS_OK); /* stays finished */
    assert_null(b);
    ps_reader_destroy(&r);

    /* Starting after line 4, the first bad line is 7. */
    o.row_begin = 4;
    assert_int_equal(ps_reader_create(p, &o, &r, &err), PS_OK);
    assert_int_equal(ps_reader_next(r, &b, &err), PS_ERR_PARSE);
    snprintf(want, sizeof want, "%s:7: C3: want 8 hex digits, got 'zzzzzzzz'", p);
    assert_string_equal(err.msg, want);
    ps_reader_destroy(&r);
    o.row_begin = 0;
  }
}

/* Every row exactly once over the ranks (tail EVEN), or exactly the complete rounds (DROP);
 * every rank the same number of batches per epoch; text and binary agree. */
static void test_sharding(void **st) {
  (void)st;
  static const uint64_t Ls[] = {0, 1, 2, 5, 23, 96, 97, 250};
  for (size_t li = 0; li < sizeof Ls / sizeof Ls[0]; li++) {
    uint64_t L = Ls[li];
    const char *tsv = make_tsv("shard.tsv", L, 0);
    const char *bin = make_bin("shard.bin", L);
    for (int W = 1; W <= 3; W++)
      for (int B = 1; B <= 16; B += 5)
        for (int tail = 0; tail < 2; tail++)
          for (int fmt = 0; fmt < 2; fmt++) {
            int *count = calloc(L + 1, sizeof(int));
            size_t nb0 = 0;
            for (int r = 0; r < W; r++) {
              ps_reader_opts o;
              ps_reader_opts_default(&o);
              o.batch = B, o.world = W, o.rank = r, o.tail = (ps_tail)tail;
              o.hash_buckets = 1ull << 32, o.epochs = 2, o.prefetch = (r % 2) * 3;
              ps_reader *rd;
              ps_error err;
              assert_int_equal(ps_reader_create(fmt ? bin : tsv, &o, &rd, &err), PS_OK);
              ps_batch *b;
              size_t nb[2] = {0, 0};
              int last_seen[2] = {0, 0};
              while (ps_reader_next(rd, &b, NULL) == PS_OK && b) {
                assert_true(b->epoch == 0 || b->epoch == 1);
                assert_int_equal(b->index, nb[b->epoch]);
                assert_false(last_seen[b->epoch]);
                nb[b->epoch]++;
                last_seen[b->epoch] = b->last_in_epoch;
                assert_true(b->n <= (size_t)B);
                for (size_t i = 0; i < b->n; i++) {
                  uint64_t id = b->keys[i * 26];
                  assert_true(id < L);
                  if (b->epoch == 0) count[id]++;
                }
                ps_reader_release(rd, b);
              }
              assert_int_equal(nb[0], nb[1]);
              uint64_t WB = (uint64_t)W * B;
              uint64_t want = tail == 0 ? (L + WB - 1) / WB : L / WB;
              assert_int_equal(nb[0], want);
              if (want) assert_true(last_seen[0] && last_seen[1]);
              if (r == 0) nb0 = nb[0];
              assert_int_equal(nb[0], nb0);
              assert_int_equal(ps_reader_rows(rd) % 2, 0);
              ps_reader_destroy(&rd);
            }
            uint64_t WB = (uint64_t)W * B, kept = tail == 0 ? L : (L / WB) * WB;
            for (uint64_t i = 0; i < L; i++) assert_int_equal(count[i], i < kept ? 1 : 0);
            free(count);
          }
  }
}

/* Round structure: W ranks with batch B step k together cover exactly the rows of a single
 * worker's batch k with batch W*B (the sync-mode equivalence), also in the tail. */
static void test_sync_equivalence_of_rounds(void **st) {
  (void)st;
  const char *tsv = make_tsv("eq.tsv", 103, 0);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.hash_buckets = 1ull << 32;
  o.batch = 20;
  seen one;
  assert_int_equal(read_all(tsv, &o, &one), PS_OK); /* batches of 20: 6 batches */
  assert_int_equal(one.nbatches, 6);
  seen part[2];
  for (int r = 0; r < 2; r++) {
    o.batch = 10, o.world = 2, o.rank = r;
    assert_int_equal(read_all(tsv, &o, &part[r]), PS_OK);
    assert_int_equal(part[r].nbatches, 6);
  }
  /* rank 0 then rank 1 per step == the single worker's step; step 5 is the tail of 3 rows
   * split 1 + 2. */
  size_t off[2] = {0, 0}, o1 = 0;
  for (int k = 0; k < 6; k++) {
    size_t n0 = k < 5 ? 10 : 1, n1 = k < 5 ? 10 : 2;
    for (size_t i = 0; i < n0; i++) assert_true(part[0].keys[(off[0] + i) * 26] == one.keys[(o1 + i) * 26]);
    for (size_t i = 0; i < n1; i++) assert_true(part[1].keys[(off[1] + i) * 26] == one.keys[(o1 + n0 + i) * 26]);
    off[0] += n0, off[1] += n1, o1 += n0 + n1;
  }
  assert_int_equal(o1, 103);
  seen_free(&one), seen_free(&part[0]), seen_free(&part[1]);
}

static void test_prefetch_equals_sync_and_shuffle(void **st) {
  (void)st;
  const char *tsv = make_tsv("pf.tsv", 777, 0);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 50, o.epochs = 3, o.hash_buckets = 1ull << 32;
  seen a, b, c, d;
  o.prefetch = 0;
  assert_int_equal(read_all(tsv, &o, &a), PS_OK);
  o.prefetch = 2;
  assert_int_equal(read_all(tsv, &o, &b), PS_OK);
  assert_seen_equal(&a, &b);
  assert_int_equal(a.nrows, 3 * 777);
  o.shuffle_window = 4, o.seed = 7;
  assert_int_equal(read_all(tsv, &o, &c), PS_OK);
  assert_int_equal(c.nrows, a.nrows);
  assert_int_equal(c.nbatches, a.nbatches);
  /* same multiset of rows inside each window of 4 batches (200 rows), and reordered */
  int moved = 0;
  /* 16 batches per epoch (15 x 50 + 27): windows of 4 batches = rows [200w, 200w + 200)
   * of each epoch, the last one 177 rows. */
  for (size_t e = 0; e < 3; e++)
    for (size_t w = 0; w < 4; w++) {
      size_t w0 = e * 777 + w * 200, wend = w0 + 200 < (e + 1) * 777 ? w0 + 200 : (e + 1) * 777;
      uint64_t sa = 0, sc = 0, xa = 0, xc = 0;
      for (size_t i = w0; i < wend; i++) {
        sa += a.keys[i * 26], sc += c.keys[i * 26];
        xa ^= ps_mix64(a.keys[i * 26]), xc ^= ps_mix64(c.keys[i * 26]);
        moved += a.keys[i * 26] != c.keys[i * 26];
      }
      assert_true(sa == sc && xa == xc);
    }
  assert_true(moved > 1000);
  o.prefetch = 0;
  assert_int_equal(read_all(tsv, &o, &d), PS_OK); /* seeded: reproducible */
  assert_seen_equal(&c, &d);
  seen_free(&a), seen_free(&b), seen_free(&c), seen_free(&d);
}

static void test_row_range_and_early_destroy(void **st) {
  (void)st;
  const char *tsv = make_tsv("range.tsv", 500, 0);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.batch = 64, o.hash_buckets = 1ull << 32, o.row_begin = 100, o.row_end = 450;
  seen s;
  assert_int_equal(read_all(tsv, &o, &s), PS_OK);
  assert_int_equal(s.nrows, 350);
  for (size_t i = 0; i < 350; i++) assert_true(s.keys[i * 26] == 100 + i);
  seen_free(&s);
  /* destroy while the thread is blocked on a full queue */
  o.row_begin = 0, o.row_end = 0, o.batch = 8, o.prefetch = 2;
  ps_reader *r;
  ps_error err;
  assert_int_equal(ps_reader_create(tsv, &o, &r, &err), PS_OK);
  ps_batch *b;
  assert_int_equal(ps_reader_next(r, &b, NULL), PS_OK);
  assert_non_null(b);
  usleep(20000);
  ps_reader_destroy(&r);
  assert_null(r);
}

PS_SCRATCH_FIXTURES("criteo")

PS_TEST_MAIN("criteo", setup, teardown,
    cmocka_unit_test(test_good_line),
    cmocka_unit_test(test_real_first_line),
    cmocka_unit_test(test_empty_fields_and_trailing_tab),
    cmocka_unit_test(test_crlf),
    cmocka_unit_test(test_field_count_errors),
    cmocka_unit_test(test_value_errors),
    cmocka_unit_test(test_hex_every_byte),
    cmocka_unit_test(test_mutations),
    cmocka_unit_test(test_keys),
    cmocka_unit_test(test_reader_values),
    cmocka_unit_test(test_binary_and_gzip_round_trip),
    cmocka_unit_test(test_bad_lines_policy),
    cmocka_unit_test(test_file_errors),
    cmocka_unit_test(test_sharding),
    cmocka_unit_test(test_sync_equivalence_of_rounds),
    cmocka_unit_test(test_prefetch_equals_sync_and_shuffle),
    cmocka_unit_test(test_row_range_and_early_destroy))
