/* test_schema: user schemas (ps_schema.h) — the JSON loader (every type and option, every
 * refusal as one line naming the column), csv quoting (RFC 4180 edge cases), header checks,
 * line errors naming the column and the line, the built-in Criteo layout vs its JSON twin
 * (docs/schemas/criteo.json: the same keys bit for bit), and multi-hot data through the reader
 * and the binary format version 2 (round trip, sharding, empty bags), with version 1 still
 * read. Expected values are written out by hand (bag sizes, dense values as log1p of the
 * literal) or come from the Criteo key function of ps_criteo.h, which predates schemas. */
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
#include "ps_test_scratch.h"

#include "ps_criteo.h"
#include "ps_criteo_bin.h"
#include "ps_hash.h"
#include "ps_reader.h"
#include "ps_sample.h"
#include "ps_schema.h"

static ps_schema *schema_of(const char *json) {
  ps_schema *s = NULL;
  ps_error err;
  ps_status st = ps_schema_parse_json(json, "t.json", &s, &err);
  if (st) fprintf(stderr, "unexpected: %s\n", err.msg);
  assert_int_equal(st, PS_OK);
  return s;
}

/* One decoded sample of a line. */
typedef struct decoded {
  float label, dense[8];
  uint64_t keys[64];
  uint32_t off[17];
  size_t nkeys;
} decoded;

static ps_status parse_decode(const ps_schema *s, uint64_t buckets, const char *line, decoded *d,
                              char *msg) {
  ps_sample_buf b = {0};
  ps_error err;
  ps_status st = ps_schema_parse_line(s, line, strlen(line), &b, &err);
  if (st) {
    assert_int_equal(b.len, 0);
    snprintf(msg, 256, "%.255s", err.msg);
    assert_null(strchr(err.msg, '\n'));
    ps_sample_buf_free(&b);
    return st;
  }
  assert_int_equal(ps_sample_len(b.p), b.len);
  assert_int_equal(ps_sample_check(b.p, b.len, ps_schema_ndense(s), ps_schema_ncat(s)), PS_OK);
  ps_sample_keymap km;
  assert_int_equal(ps_sample_keymap_init(&km, s, buckets, NULL), PS_OK);
  memset(d, 0, sizeof *d);
  ps_sample_decode(b.p, ps_schema_ndense(s), &km, &d->label, d->dense, d->keys, &d->nkeys, d->off);
  ps_sample_keymap_free(&km);
  ps_sample_buf_free(&b);
  return PS_OK;
}

static uint64_t str_key(int f, const char *v) { /* the documented key of a string value */
  uint64_t tok = ps_hash64(v, strlen(v), PS_SAMPLE_TOKEN_SEED) | PS_SAMPLE_TOK_STRING;
  return ps_hash_u64(((uint64_t)f << 33) ^ tok, PS_CRITEO_KEY_SEED);
}

/* The first read of path fails with st and a message containing want. */
static void expect_read_error_st(const char *path, const ps_reader_opts *o, ps_status st,
                                 const char *want) {
  ps_reader *r;
  ps_batch *b;
  ps_error err;
  assert_int_equal(ps_reader_create(path, o, &r, &err), PS_OK);
  assert_int_equal(ps_reader_next(r, &b, &err), st);
  if (!strstr(err.msg, want)) fail_msg("got '%s', want '%s'", err.msg, want);
  ps_reader_destroy(&r);
}

static void expect_read_error(const char *path, const ps_reader_opts *o, const char *want) {
  expect_read_error_st(path, o, PS_ERR_PARSE, want);
}

/* Default reader options reading with schema s. */
static ps_reader_opts opts_of(const ps_schema *s) {
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.schema = s;
  return o;
}

typedef struct str_case { /* an input and what its message must contain */
  const char *in, *want;
} str_case;

/* Opens path with o and returns its first batch (not NULL); *r is the reader. */
static ps_batch *first_batch(const char *path, const ps_reader_opts *o, ps_reader **r) {
  ps_error err;
  ps_batch *b = NULL;
  assert_int_equal(ps_reader_create(path, o, r, &err), PS_OK);
  assert_int_equal(ps_reader_next(*r, &b, &err), PS_OK);
  assert_non_null(b);
  return b;
}

/* docs/schemas/NAME.json (the documented examples). */
static ps_schema *doc_schema(const char *name) {
  const char *src = getenv("EMBER_SRC");
  char path[512];
  snprintf(path, sizeof path, "%s/docs/schemas/%s.json", src ? src : ".", name);
  ps_schema *s = NULL;
  ps_error err;
  ps_status st = ps_schema_load(path, &s, &err);
  if (st) fail_msg("%s", err.msg);
  return s;
}

/* docs/schemas/criteo.json, the built-in layout written out. */
static ps_schema *criteo_twin(void) { return doc_schema("criteo"); }

/* The documented examples load and say what docs/SCHEMA.md says they do. */
static void test_doc_examples(void **st) {
  (void)st;
  ps_schema *a = doc_schema("avazu"), *d = doc_schema("dlrmv2");
  assert_int_equal(ps_schema_fmt(a), PS_SCHEMA_CSV);
  assert_true(ps_schema_header(a) && !ps_schema_multi_hot(a));
  assert_int_equal(ps_schema_ndense(a), 0);
  assert_int_equal(ps_schema_ncat(a), 22);
  assert_int_equal(ps_schema_column_at(a, 0)->type, PS_COL_SKIP);
  assert_int_equal(ps_schema_column_at(a, 1)->type, PS_COL_LABEL);
  assert_int_equal(ps_schema_ndense(d), 13);
  assert_int_equal(ps_schema_ncat(d), 26);
  assert_true(ps_schema_multi_hot(d));
  assert_int_equal(ps_schema_pooling(d), PS_SCHEMA_POOL_SUM);
  assert_int_equal(ps_schema_cat(d, 0)->hash_buckets, 40000000);
  assert_int_equal(ps_schema_cat(d, 25)->hash_buckets, 36);
  for (int f = 0; f < 26; f++) assert_int_equal(ps_schema_cat(d, f)->separator, ',');
  ps_schema_destroy(&a);
  ps_schema_destroy(&d);
}

static const char *EVERY =
    "{\"format\": \"csv\", \"header\": true, \"columns\": ["
    "{\"name\": \"id\", \"type\": \"skip\"},"
    "{\"name\": \"price\", \"type\": \"dense\"},"
    "{\"name\": \"click\", \"type\": \"label\"},"
    "{\"name\": \"site\", \"type\": \"categorical\"},"
    "{\"name\": \"delta\", \"type\": \"dense\", \"transform\": \"none\"},"
    "{\"name\": \"tags\", \"type\": \"categorical\", \"separator\": \"|\", \"pooling\": \"mean\"},"
    "{\"name\": \"hour\", \"type\": \"categorical\", \"hash_buckets\": 100}]}";

static void test_every_type(void **st) {
  (void)st;
  ps_schema *s = schema_of(EVERY);
  assert_int_equal(ps_schema_ncolumns(s), 7);
  assert_int_equal(ps_schema_ndense(s), 2);
  assert_int_equal(ps_schema_ncat(s), 3);
  assert_int_equal(ps_schema_fmt(s), PS_SCHEMA_CSV);
  assert_true(ps_schema_header(s));
  assert_true(ps_schema_multi_hot(s));
  assert_false(ps_schema_is_criteo(s));
  assert_int_equal(ps_schema_pooling(s), PS_SCHEMA_POOL_MEAN);
  assert_string_equal(ps_schema_cat(s, 1)->name, "tags");
  assert_int_equal(ps_schema_cat(s, 1)->separator, '|');
  assert_int_equal(ps_schema_cat(s, 2)->hash_buckets, 100);
  assert_int_equal(ps_schema_column_at(s, 4)->index, 1);
  decoded d;
  char msg[256];
  /* hour "0000000b" is hex 11: bucket 11 of feature 2, whose base is 0 (the others are open). */
  assert_int_equal(parse_decode(s, 0, "x1,2.5,1,abc,-1.5,a|b||c,0000000b", &d, msg), PS_OK);
  assert_true(d.label == 1.0f);
  assert_true(d.dense[0] == (float)log1p(2.5));
  assert_true(d.dense[1] == -1.5f);
  uint32_t off[] = {0, 1, 4, 5};
  assert_memory_equal(d.off, off, sizeof off);
  assert_true(d.keys[0] == str_key(0, "abc"));
  assert_true(d.keys[1] == str_key(1, "a") && d.keys[2] == str_key(1, "b") &&
              d.keys[3] == str_key(1, "c"));
  assert_true(d.keys[4] == 11);
  /* empty: dense 0, one-value missing key, multi-hot empty bag, bucketed missing -> base */
  assert_int_equal(parse_decode(s, 0, ",,0,,,,", &d, msg), PS_OK);
  assert_true(d.label == 0.0f && d.dense[0] == 0.0f && d.dense[1] == 0.0f);
  uint32_t off2[] = {0, 1, 1, 2};
  assert_memory_equal(d.off, off2, sizeof off2);
  assert_true(d.keys[0] == ps_criteo_key(0, 0, 1, 0));
  assert_true(d.keys[1] == 0);
  /* log1p of max(x, 0); "|" alone is an empty bag; exponents */
  assert_int_equal(parse_decode(s, 0, "x,-3,0,q,1e2,|,zz", &d, msg), PS_OK);
  assert_true(d.dense[0] == 0.0f && d.dense[1] == 100.0f);
  assert_int_equal(d.off[2] - d.off[1], 0);
  ps_schema_destroy(&s);
  assert_null(s);
}

static void test_schema_errors(void **st) {
  (void)st;
  static const str_case cases[] = {
      {"{\"columns\": [", "t.json:1: not valid JSON"},
      {"[1]", "want a JSON object"},
      {"{\"colums\": []}", "\"colums\" is not a schema key"},
      {"{\"format\": \"xls\", \"columns\": []}", "\"format\": want tsv or csv"},
      {"{\"header\": 1, \"columns\": []}", "\"header\": want true or false"},
      {"{\"columns\": []}", "\"columns\": want an array"},
      {"{\"columns\": [{\"type\": \"label\"}]}", "column 1: want a non-empty \"name\""},
      {"{\"columns\": [{\"name\": \"a\", \"type\": \"int\"}]}",
       "column 1 'a': \"type\": want label, dense, categorical or skip, got int"},
      {"{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": \"p\", \"type\": "
       "\"dense\", \"transform\": \"sqrt\"}]}",
       "column 2 'p': \"transform\": want log1p or none, got sqrt"},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"transform\": \"none\"}]}",
       "column 1 'c': \"transform\" is not a key of a categorical column"},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"separator\": \"\\t\"}]}",
       "column 1 'c': \"separator\": want one character"},
      {"{\"format\": \"csv\", \"columns\": [{\"name\": \"c\", \"type\": \"categorical\", "
       "\"separator\": \",\"}]}", "column 1 'c': \"separator\""},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"separator\": \"ab\"}]}",
       "column 1 'c': \"separator\""},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"pooling\": \"mean\"}]}",
       "column 1 'c': \"pooling\" needs a \"separator\""},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"separator\": \"|\", "
       "\"pooling\": \"max\"}]}", "column 1 'c': \"pooling\": want sum or mean, got max"},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"hash_buckets\": 0}]}",
       "column 1 'c': \"hash_buckets\": want a positive integer"},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\"}, {\"name\": \"c\", \"type\": "
       "\"skip\"}]}", "column 2 'c': the name of column 1 too"},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\"}]}",
       "want exactly one column of type label, found 0"},
      {"{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": \"z\", \"type\": "
       "\"label\"}, {\"name\": \"c\", \"type\": \"categorical\"}]}",
       "want exactly one column of type label, found 2"},
      {"{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": \"d\", \"type\": "
       "\"dense\"}]}", "no categorical column"},
      {"{\"table\": \"a b\", \"columns\": []}", "\"table\": want a name of 1 to 63"},
      {"{\"columns\": [{\"name\": \"c\", \"type\": \"categorical\", \"missing\": \"zero\"}]}",
       "column 1 'c': \"missing\" is not a key of a categorical column"},
      {"{\"table\": \"\", \"columns\": []}", "\"table\": want a name of 1 to 63"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ps_schema *s = (ps_schema *)1;
    ps_error err;
    assert_int_equal(ps_schema_parse_json(cases[i].in, "t.json", &s, &err), PS_ERR_INVALID);
    assert_null(s);
    if (!strstr(err.msg, cases[i].want) || strchr(err.msg, '\n'))
      fail_msg("case %zu: got '%s', want '%s'", i, err.msg, cases[i].want);
    assert_true(strncmp(err.msg, "t.json", 6) == 0);
  }
  ps_schema *s;
  ps_error err;
  assert_int_equal(ps_schema_load(tmp_path("missing.json"), &s, &err), PS_ERR_INVALID);
  assert_non_null(strstr(err.msg, "missing.json: cannot read it"));
}

/* "missing": "indicator": the column's value and right after it a 0/1 input saying it was
 * empty (the other dense columns move up by one); the signature changes only with it. */
static void test_missing_indicator(void **st) {
  (void)st;
  static const char fmt[] =
      "{\"format\": \"csv\", \"columns\": [{\"name\": \"y\", \"type\": \"label\"}, "
      "{\"name\": \"a\", \"type\": \"dense\", \"transform\": \"none\"%s}, "
      "{\"name\": \"b\", \"type\": \"dense\", \"transform\": \"none\"}, "
      "{\"name\": \"c\", \"type\": \"categorical\"}]}";
  char json[512];
  snprintf(json, sizeof json, fmt, ", \"missing\": \"indicator\"");
  ps_schema *s = schema_of(json);
  assert_int_equal(ps_schema_ndense(s), 3);
  assert_int_equal(ps_schema_nindicators(s), 1);
  assert_int_equal(ps_schema_column_at(s, 2)->index, 2); /* b after a's indicator */
  decoded d;
  char msg[256];
  assert_int_equal(parse_decode(s, 0, "1,2.5,4,x", &d, msg), PS_OK);
  assert_true(d.dense[0] == 2.5f && d.dense[1] == 0.0f && d.dense[2] == 4.0f);
  assert_int_equal(parse_decode(s, 0, "0,,,x", &d, msg), PS_OK);
  assert_true(d.dense[0] == 0.0f && d.dense[1] == 1.0f && d.dense[2] == 0.0f);
  assert_int_equal(parse_decode(s, 0, "0,0,,x", &d, msg), PS_OK); /* 0 is not missing */
  assert_true(d.dense[0] == 0.0f && d.dense[1] == 0.0f);
  char with[128], zero[128], without[128];
  ps_schema_signature(s, with, sizeof with);
  ps_schema_destroy(&s);
  snprintf(json, sizeof json, fmt, ", \"missing\": \"zero\"");
  s = schema_of(json);
  assert_int_equal(ps_schema_ndense(s), 2);
  ps_schema_signature(s, zero, sizeof zero);
  ps_schema_destroy(&s);
  snprintf(json, sizeof json, fmt, "");
  s = schema_of(json);
  ps_schema_signature(s, without, sizeof without);
  ps_schema_destroy(&s);
  assert_string_equal(zero, without); /* "zero" is the default: the same model */
  assert_string_not_equal(with, without);
  static const str_case bad[] = {
      {", \"missing\": \"mean\"", "column 2 'a': \"missing\": want zero or indicator, got mean"},
      {", \"missing\": 1", "column 2 'a': \"missing\": want zero or indicator"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ps_error err;
    snprintf(json, sizeof json, fmt, bad[i].in);
    assert_int_equal(ps_schema_parse_json(json, "t.json", &s, &err), PS_ERR_INVALID);
    if (!strstr(err.msg, bad[i].want)) fail_msg("got '%s', want '%s'", err.msg, bad[i].want);
  }
}

/* The table's name: the built-in layout's criteo_emb, a file's "table", else its base name
 * without .json and "_emb" (other characters as '_', cut to fit 63). */
static void test_table_name(void **st) {
  (void)st;
  static const char cols[] = "\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, "
                             "{\"name\": \"c\", \"type\": \"categorical\"}]}";
  static const struct { const char *origin, *table, *want; } cases[] = {
      {"/data/clicks.json", NULL, "clicks_emb"},
      {"docs/schemas/criteo.json", NULL, "criteo_emb"},
      {"my schema+v2.JSON", NULL, "my_schema_v2.JSON_emb"},
      {"/x/clicks.json", "ads", "ads"},
      {"0123456789012345678901234567890123456789012345678901234567890123456789.json", NULL,
       "01234567890123456789012345678901234567890123456789012345678_emb"},
  };
  char text[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ps_schema *s = NULL;
    ps_error err;
    snprintf(text, sizeof text, "{%s%s%s%s", cases[i].table ? "\"table\": \"" : "",
             cases[i].table ? cases[i].table : "", cases[i].table ? "\", " : "", cols);
    assert_int_equal(ps_schema_parse_json(text, cases[i].origin, &s, &err), PS_OK);
    assert_string_equal(ps_schema_table(s), cases[i].want);
    ps_schema_destroy(&s);
  }
  ps_schema *s = NULL;
  ps_error err;
  assert_int_equal(ps_schema_load("criteo", &s, &err), PS_OK);
  assert_string_equal(ps_schema_table(s), "criteo_emb");
  ps_schema_destroy(&s);
}

/* Multi-hot columns may pool differently: the model gets a mask over the features (one-value
 * and sum columns 0, mean columns 1), up to 64 categorical columns. */
static void test_mixed_pooling(void **st) {
  (void)st;
  ps_schema *s = schema_of(
      "{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": \"a\", \"type\": "
      "\"categorical\", \"separator\": \"|\"}, {\"name\": \"one\", \"type\": \"categorical\"}, "
      "{\"name\": \"b\", \"type\": \"categorical\", \"separator\": \"|\", \"pooling\": \"mean\"}]}");
  uint64_t mean = 0;
  unsigned period = 0;
  assert_int_equal(ps_schema_pooling(s), PS_SCHEMA_POOL_MIXED);
  ps_schema_pool_mask(s, &mean, &period);
  assert_int_equal(period, 3);
  assert_int_equal(mean, 4); /* feature 2 ('b') only */
  char sig_mixed[96], sig_sum[96];
  ps_schema_signature(s, sig_mixed, sizeof sig_mixed);
  ps_schema_destroy(&s);
  s = schema_of("{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": \"a\", "
                "\"type\": \"categorical\", \"separator\": \"|\"}, {\"name\": \"one\", \"type\": "
                "\"categorical\"}, {\"name\": \"b\", \"type\": \"categorical\", \"separator\": \"|\"}]}");
  ps_schema_pool_mask(s, &mean, &period);
  assert_true(mean == 0 && period == 1);
  ps_schema_signature(s, sig_sum, sizeof sig_sum);
  assert_string_not_equal(sig_mixed, sig_sum); /* a checkpoint knows which it was trained with */
  ps_schema_destroy(&s);
  /* all mean: one mode, any number of columns */
  char json[16384];
  int n = snprintf(json, sizeof json, "{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}");
  for (int i = 0; i < 70; i++)
    n += snprintf(json + n, sizeof json - (size_t)n, ", {\"name\": \"c%d\", \"type\": "
                  "\"categorical\", \"separator\": \"|\", \"pooling\": \"mean\"}", i);
  snprintf(json + n, sizeof json - (size_t)n, "]}");
  s = schema_of(json);
  ps_schema_pool_mask(s, &mean, &period);
  assert_true(mean == 1 && period == 1);
  ps_schema_destroy(&s);
  /* mixed beyond 64 columns does not fit the mask: refused in one line */
  char *sum = strstr(json, "\"c69\"");
  memcpy(strstr(sum, "\"mean\""), "\"sum\" ", 6);
  ps_error err;
  assert_int_equal(ps_schema_parse_json(json, "t.json", &s, &err), PS_ERR_INVALID);
  assert_non_null(strstr(err.msg, "t.json: 69 multi-hot columns pool by mean and 1 by sum: mixing "
                                  "them works for at most 64 categorical columns, this schema has 70"));
}

static const char *CSV3 = "{\"format\": \"csv\", \"columns\": [{\"name\": \"y\", \"type\": "
                          "\"label\"}, {\"name\": \"a\", \"type\": \"categorical\"}, {\"name\": "
                          "\"b\", \"type\": \"categorical\"}]}";

static void test_csv_quoting(void **st) {
  (void)st;
  ps_schema *s = schema_of(CSV3);
  decoded d;
  char msg[256];
  /* a quoted field may hold the delimiter and doubled quotes; quotes are not part of it */
  assert_int_equal(parse_decode(s, 0, "1,\"x,y\",\"say \"\"hi\"\"\"", &d, msg), PS_OK);
  assert_true(d.keys[0] == str_key(0, "x,y"));
  assert_true(d.keys[1] == str_key(1, "say \"hi\""));
  assert_int_equal(parse_decode(s, 0, "\"1\",\"plain\",b\r", &d, msg), PS_OK);
  assert_true(d.keys[0] == str_key(0, "plain") && d.keys[1] == str_key(1, "b"));
  /* "" is an empty (missing) value; a lone quoted "" at the end too */
  assert_int_equal(parse_decode(s, 0, "0,\"\",\"\"", &d, msg), PS_OK);
  assert_true(d.keys[0] == ps_criteo_key(0, 0, 1, 0) && d.keys[1] == ps_criteo_key(1, 0, 1, 0));
  /* a tab is just a byte in csv */
  assert_int_equal(parse_decode(s, 0, "0,a\tb,c", &d, msg), PS_OK);
  assert_true(d.keys[0] == str_key(0, "a\tb"));
  static const str_case bad[] = {
      {"1,\"open,b", "column 'a' (2): unterminated quoted field"},
      {"1,\"x\"y,b", "column 'a' (2): text after a closing quote"},
      {"1,x\"y,b", "column 'a' (2): a '\"' inside an unquoted field"},
      {"1,a", "too few fields (2, want 3; 'b' is missing)"},
      {"1,a,b,c,d", "too many fields (5, want 3)"},
      {"2,a,b", "column 'y' (1): label: want 0 or 1, got '2'"},
      {",a,b", "column 'y' (1): label: want 0 or 1, got ''"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(parse_decode(s, 0, bad[i].in, &d, msg), PS_ERR_PARSE);
    if (!strstr(msg, bad[i].want)) fail_msg("line %zu: got '%s', want '%s'", i, msg, bad[i].want);
  }
  ps_schema_destroy(&s);
}

static void test_dense_errors(void **st) {
  (void)st;
  ps_schema *s = schema_of("{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": "
                           "\"n\", \"type\": \"dense\"}, {\"name\": \"c\", \"type\": "
                           "\"categorical\"}]}");
  decoded d;
  char msg[256];
  const char *bad[] = {"1\tabc\tx", "1\tnan\tx", "1\tinf\tx", "1\t1e\tx", "1\t.\tx", "1\t 1\tx",
                       "1\t1e999\tx", "1\t0x10\tx"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(parse_decode(s, 0, bad[i], &d, msg), PS_ERR_PARSE);
    if (!strstr(msg, "column 'n' (2): not a number")) fail_msg("%zu: %s", i, msg);
  }
  assert_int_equal(parse_decode(s, 0, "1\t+.5\tx", &d, msg), PS_OK);
  assert_true(d.dense[0] == (float)log1p(0.5));
  assert_int_equal(parse_decode(s, 0, "1\t7\tx,y", &d, msg), PS_OK); /* ',' is a byte in tsv */
  assert_true(d.keys[0] == str_key(0, "x,y"));
  ps_schema_destroy(&s);
}

static void test_header(void **st) {
  (void)st;
  ps_schema *s = schema_of(EVERY);
  ps_error err;
  const char *good = "id,price,click,site,delta,tags,hour";
  assert_int_equal(ps_schema_check_header(s, good, strlen(good), &err), PS_OK);
  static const str_case bad[] = {
      {"id,price,click,site,delta,tags,hours", "header column 7 is 'hours', the schema says 'hour'"},
      {"id,cost,click,site,delta,tags,hour", "header column 2 is 'cost', the schema says 'price'"},
      {"id,price,click", "header has 3 columns, the schema 7 (first missing: 'site')"},
      {"id,price,click,site,delta,tags,hour,x", "header has more columns than the schema's 7"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(ps_schema_check_header(s, bad[i].in, strlen(bad[i].in), &err),
                     PS_ERR_PARSE);
    if (!strstr(err.msg, bad[i].want)) fail_msg("%zu: got '%s'", i, err.msg);
  }
  /* the reader: the header is not a data line; a wrong header stops the epoch */
  const char *p = tmp_path("h.csv");
  write_file(p, "id,price,click,site,delta,tags,hour\nx,1,1,a,0,b,c\nx,2,0,a,0,b|c,d\n");
  uint64_t rows = 0;
  assert_int_equal(ps_data_count_rows(p, s, &rows), PS_OK);
  assert_int_equal(rows, 2);
  assert_int_equal(ps_data_check_header(p, s, &err), PS_OK);
  ps_reader_opts o = opts_of(s);
  o.batch = 10;
  ps_reader *r;
  ps_batch *b = first_batch(p, &o, &r);
  assert_int_equal(b->n, 2);
  assert_int_equal(b->nkeys, 7);
  assert_true(b->labels[0] == 1.0f && b->labels[1] == 0.0f);
  ps_reader_release(r, b);
  assert_int_equal(ps_reader_bad_lines(r), 0);
  ps_reader_destroy(&r);
  const char *q = tmp_path("h2.csv");
  write_file(q, "id,price,click,site,delta,tag,hour\nx,1,1,a,0,b,c\n");
  assert_int_equal(ps_data_check_header(q, s, &err), PS_ERR_PARSE);
  assert_non_null(strstr(err.msg, "h2.csv:1: header column 6 is 'tag', the schema says 'tags'"));
  expect_read_error(q, &o, "h2.csv:1: header column 6");
  ps_schema_destroy(&s);
}

/* A bad line under --bad-lines fail: FILE:LINE (physical, the header counted) and the column. */
static void test_line_numbers(void **st) {
  (void)st;
  ps_schema *s = schema_of(EVERY);
  const char *p = tmp_path("bad.csv");
  write_file(p, "id,price,click,site,delta,tags,hour\nx,1,1,a,0,b,c\nx,1,1,a,zz,b,c\n");
  ps_reader_opts o = opts_of(s);
  o.bad_lines = PS_BAD_LINES_FAIL;
  expect_read_error(p, &o, "bad.csv:3: column 'delta' (5): not a number: 'zz'");
  ps_schema_destroy(&s);
}

/* docs/schemas/criteo.json reads Criteo lines into exactly the built-in schema's batches. */
static void test_criteo_json_twin(void **st) {
  (void)st;
  ps_schema *twin = criteo_twin(), *builtin = NULL;
  ps_error err;
  assert_int_equal(ps_schema_load("criteo", &builtin, &err), PS_OK);
  assert_true(ps_schema_is_criteo(builtin) && !ps_schema_is_criteo(twin));
  const char *p = tmp_path("c.tsv");
  FILE *f = fopen(p, "wb");
  for (int i = 0; i < 300; i++) {
    fprintf(f, "%d", i % 2);
    for (int k = 0; k < 13; k++) {
      if ((i + k) % 7 == 0) fprintf(f, "\t");
      else fprintf(f, "\t%d", (i * 31 + k * 977) % 5000 - 3);
    }
    for (int j = 0; j < 26; j++) {
      if ((i + j) % 11 == 0) fprintf(f, "\t");
      else fprintf(f, (i + j) % 2 ? "\t%08x" : "\t%08X", (unsigned)(i * 2654435761u + j));
    }
    fprintf(f, "\n");
  }
  fclose(f);
  for (int mode = 0; mode < 2; mode++) {
    ps_reader_opts o;
    ps_reader_opts_default(&o);
    o.batch = 64;
    o.prefetch = 0;
    o.hash_buckets = mode ? 1000 : 0;
    ps_reader *ra, *rb;
    o.schema = builtin;
    assert_int_equal(ps_reader_create(p, &o, &ra, &err), PS_OK);
    o.schema = twin;
    assert_int_equal(ps_reader_create(p, &o, &rb, &err), PS_OK);
    size_t total = 0;
    for (;;) {
      ps_batch *a, *b;
      assert_int_equal(ps_reader_next(ra, &a, &err), PS_OK);
      assert_int_equal(ps_reader_next(rb, &b, &err), PS_OK);
      if (!a) {
        assert_null(b);
        break;
      }
      assert_int_equal(a->n, b->n);
      assert_int_equal(a->nkeys, a->n * 26);
      assert_int_equal(a->nkeys, b->nkeys);
      assert_memory_equal(a->labels, b->labels, a->n * sizeof(float));
      assert_memory_equal(a->dense, b->dense, a->n * 13 * sizeof(float));
      assert_memory_equal(a->keys, b->keys, a->nkeys * sizeof(uint64_t));
      assert_memory_equal(a->key_offsets, b->key_offsets, (a->n * 26 + 1) * sizeof(uint32_t));
      /* and the keys are Criteo's, as ps_criteo_key gives them */
      ps_criteo_row row;
      for (size_t i = 0; i < a->n; i++)
        for (int j = 0; j < 26; j++) {
          size_t g = total + i;
          int miss = (int)((g + (size_t)j) % 11 == 0);
          row.cat[j] = miss ? 0 : (uint32_t)(g * 2654435761u + (unsigned)j);
          assert_true(a->keys[i * 26 + (size_t)j] ==
                      ps_criteo_key(j, row.cat[j], miss, o.hash_buckets));
        }
      total += a->n;
      ps_reader_release(ra, a);
      ps_reader_release(rb, b);
    }
    assert_int_equal(total, 300);
    ps_reader_destroy(&ra);
    ps_reader_destroy(&rb);
  }
  ps_schema_destroy(&twin);
  ps_schema_destroy(&builtin);
}

static const char *MH = "{\"columns\": [{\"name\": \"y\", \"type\": \"label\"}, {\"name\": \"d\", "
                        "\"type\": \"dense\", \"transform\": \"none\"}, {\"name\": \"one\", "
                        "\"type\": \"categorical\"}, {\"name\": \"bag\", \"type\": "
                        "\"categorical\", \"separator\": \",\"}]}";

/* Row i: label i%2, dense i, one = "u<i%5>", bag = i%4 values "t<i>-<k>" (0..3; 0 = empty). */
static void write_mh(const char *p, int n) {
  FILE *f = fopen(p, "wb");
  for (int i = 0; i < n; i++) {
    fprintf(f, "%d\t%d\tu%d\t", i % 2, i, i % 5);
    for (int k = 0; k < i % 4; k++) fprintf(f, "%st%d-%d", k ? "," : "", i, k);
    fprintf(f, "\n");
  }
  fclose(f);
}

/* Reads path (rank r of w) and checks every row against write_mh's construction; returns rows. */
static size_t check_mh(const char *path, const ps_schema *s, int rank, int world, int *seen) {
  ps_reader_opts o = opts_of(s);
  o.batch = 7;
  o.rank = rank;
  o.world = world;
  o.shuffle_window = rank == 1 ? 3 : 0; /* the window moves whole records */
  ps_reader *r;
  ps_error err;
  assert_int_equal(ps_reader_create(path, &o, &r, &err), PS_OK);
  ps_batch *b;
  size_t rows = 0;
  while (ps_reader_next(r, &b, &err) == PS_OK && b) {
    for (size_t i = 0; i < b->n; i++) {
      int row = (int)b->dense[i];
      seen[row]++;
      assert_true(b->labels[i] == (float)(row % 2));
      const uint32_t *off = b->key_offsets + i * 2;
      char v[32];
      snprintf(v, sizeof v, "u%d", row % 5);
      assert_int_equal(off[1] - off[0], 1);
      assert_true(b->keys[off[0]] == str_key(0, v));
      assert_int_equal(off[2] - off[1], row % 4); /* empty bags included */
      for (int k = 0; k < row % 4; k++) {
        snprintf(v, sizeof v, "t%d-%d", row, k);
        assert_true(b->keys[off[1] + (uint32_t)k] == str_key(1, v));
      }
    }
    assert_int_equal(b->key_offsets[b->n * 2], b->nkeys);
    rows += b->n;
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
  return rows;
}

static void test_multi_hot_reader_and_binary(void **st) {
  (void)st;
  ps_schema *s = schema_of(MH);
  const char *txt = tmp_path("mh.tsv"), *bin = tmp_path("mh.bin");
  write_mh(txt, 101);
  int seen[101] = {0};
  assert_int_equal(check_mh(txt, s, 0, 1, seen), 101);
  /* version 2 round trip through the writer (as ps-convert does) */
  ps_reader_opts o = opts_of(s);
  o.keep_rows = 1;
  o.batch = 16;
  ps_reader *r;
  ps_error err;
  assert_int_equal(ps_reader_create(txt, &o, &r, &err), PS_OK);
  ps_criteo_bin_writer *w;
  assert_int_equal(ps_criteo_bin_writer_create_v2(bin, 1, 2, 1, &w), PS_OK);
  ps_batch *b;
  while (ps_reader_next(r, &b, &err) == PS_OK && b) {
    assert_null(b->rows); /* not Criteo's shape */
    for (size_t i = 0; i < b->n; i++)
      assert_int_equal(ps_criteo_bin_write_sample(w, b->recs + b->rec_off[i]), PS_OK);
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
  assert_int_equal(ps_criteo_bin_writer_close(&w, 3), PS_OK);
  ps_input_format fmt;
  assert_int_equal(ps_data_detect(bin, &fmt), PS_OK);
  assert_int_equal(fmt, PS_INPUT_BIN);
  uint64_t rows;
  assert_int_equal(ps_data_count_rows(bin, s, &rows), PS_OK);
  assert_int_equal(rows, 101);
  /* two ranks (one with the shuffle window) see every row exactly once, all bags intact */
  memset(seen, 0, sizeof seen);
  size_t n = check_mh(bin, s, 0, 2, seen) + check_mh(bin, s, 1, 2, seen);
  assert_int_equal(n, 101);
  for (int i = 0; i < 101; i++) assert_int_equal(seen[i], 1);
  /* the same with the text file */
  memset(seen, 0, sizeof seen);
  assert_int_equal(check_mh(txt, s, 0, 2, seen) + check_mh(txt, s, 1, 2, seen), 101);
  for (int i = 0; i < 101; i++) assert_int_equal(seen[i], 1);
  /* a schema of other counts is refused by name; a cut file is corrupt */
  ps_schema *crit;
  assert_int_equal(ps_schema_load("criteo", &crit, &err), PS_OK);
  o.schema = crit;
  o.keep_rows = 0;
  assert_int_equal(ps_reader_create(bin, &o, &r, &err), PS_ERR_INVALID);
  assert_non_null(strstr(err.msg, "holds 1 dense and 2 categorical features, the schema criteo "
                                  "has 13 and 26"));
  FILE *f = fopen(bin, "r+b");
  assert_int_equal(ftruncate(fileno(f), 200), 0);
  fclose(f);
  o.schema = s;
  assert_int_equal(ps_reader_create(bin, &o, &r, &err), PS_ERR_CORRUPT);
  ps_schema_destroy(&crit);
  ps_schema_destroy(&s);
}

/* Version 1 files still read, also through a user schema of Criteo's counts (keys by its
 * per-column buckets); a multi-hot schema of other counts is refused. */
static void test_version1_still_read(void **st) {
  (void)st;
  const char *bin = tmp_path("v1.bin");
  ps_criteo_bin_writer *w;
  assert_int_equal(ps_criteo_bin_writer_create(bin, &w), PS_OK);
  ps_criteo_row row;
  memset(&row, 0, sizeof row);
  for (int i = 0; i < 10; i++) {
    row.label = (uint8_t)(i % 2);
    row.dense[0] = (float)i;
    for (int j = 0; j < 26; j++) row.cat[j] = (uint32_t)(i * 100 + j);
    row.cat_missing = i == 3 ? 1u << 5 : 0;
    assert_int_equal(ps_criteo_bin_write(w, &row), PS_OK);
  }
  assert_int_equal(ps_criteo_bin_writer_close(&w, 0), PS_OK);
  ps_schema *twin = criteo_twin();
  ps_reader_opts o = opts_of(twin);
  o.hash_buckets = 50;
  ps_reader *r;
  ps_batch *b = first_batch(bin, &o, &r);
  assert_int_equal(b->n, 10);
  for (size_t i = 0; i < 10; i++)
    for (int j = 0; j < 26; j++) {
      int miss = i == 3 && j == 5;
      assert_true(b->keys[i * 26 + (size_t)j] ==
                  ps_criteo_key(j, miss ? 0 : (uint32_t)(i * 100 + (size_t)j), miss, 50));
    }
  assert_true(b->dense[13 * 7] == 7.0f);
  ps_reader_release(r, b);
  ps_reader_destroy(&r);
  ps_schema_destroy(&twin);
}

/* A version 2 file of Criteo's counts with string values: read with its schema, its keys are
 * the strings'; converting it to version 1 (built-in criteo, keep_rows) is refused by name. */
static void test_version2_criteo_counts(void **st) {
  (void)st;
  ps_schema *twin = criteo_twin();
  char line[1024];
  size_t o = (size_t)snprintf(line, sizeof line, "1");
  for (int i = 0; i < 13; i++) o += (size_t)snprintf(line + o, sizeof line - o, "\t%d", i);
  for (int j = 0; j < 26; j++)
    o += (size_t)snprintf(line + o, sizeof line - o, j == 4 ? "\tnot-hex" : "\t%08x", j);
  ps_sample_buf rec = {0};
  assert_int_equal(ps_schema_parse_line(twin, line, strlen(line), &rec, NULL), PS_OK);
  const char *bin = tmp_path("v2c.bin");
  ps_criteo_bin_writer *w;
  assert_int_equal(ps_criteo_bin_writer_create_v2(bin, 13, 26, 0, &w), PS_OK);
  assert_int_equal(ps_criteo_bin_write_sample(w, rec.p), PS_OK);
  assert_int_equal(ps_criteo_bin_writer_close(&w, 0), PS_OK);
  ps_sample_buf_free(&rec);
  ps_reader_opts opt = opts_of(twin);
  ps_reader *r;
  ps_batch *b = first_batch(bin, &opt, &r);
  assert_true(b->keys[4] == str_key(4, "not-hex"));
  assert_true(b->keys[5] == ps_criteo_key(5, 5, 0, 0));
  ps_reader_release(r, b);
  ps_reader_destroy(&r);
  opt.schema = NULL; /* the built-in criteo */
  opt.keep_rows = 1;
  expect_read_error_st(bin, &opt, PS_ERR_CORRUPT, "v2c.bin: a sample holds strings or bags");
  ps_schema_destroy(&twin);
}

PS_SCRATCH_FIXTURES("schema")

PS_TEST_MAIN("schema", setup, teardown,
    cmocka_unit_test(test_every_type),
    cmocka_unit_test(test_schema_errors),
    cmocka_unit_test(test_table_name),
    cmocka_unit_test(test_missing_indicator),
    cmocka_unit_test(test_csv_quoting),
    cmocka_unit_test(test_dense_errors),
    cmocka_unit_test(test_header),
    cmocka_unit_test(test_line_numbers),
    cmocka_unit_test(test_criteo_json_twin),
    cmocka_unit_test(test_multi_hot_reader_and_binary),
    cmocka_unit_test(test_version1_still_read),
    cmocka_unit_test(test_version2_criteo_counts),
    cmocka_unit_test(test_doc_examples), cmocka_unit_test(test_mixed_pooling))
