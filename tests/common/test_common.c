/* Hashing, status strings, logging levels, the CLI helper's errors and mkdir -p. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_cli.h"
#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_log.h"
#include "ps_status.h"
#include "ps_time.h"

static void test_hash_stable_and_spread(void **st) {
  (void)st;
  /* XXH3-64 of "" with seed 0 is a published constant (xxhash's test vectors). */
  assert_true(ps_hash64("", 0, 0) == 0x2D06800538D394C2ull);
  assert_true(ps_hash_u64(1, 0) != ps_hash_u64(2, 0));
  assert_true(ps_hash_u64(1, 0) != ps_hash_u64(1, 1));
  uint8_t b[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  assert_true(ps_hash_u64(1, 9) == ps_hash64(b, 8, 9)); /* little-endian bytes of the value */
  /* The same for values whose 8 bytes all differ (a byte order or a dropped byte shows),
   * under both seeds the code uses and others. */
  for (uint64_t i = 0; i < 20000; i++) {
    uint64_t v = ps_mix64(i), seed = i % 3 == 0 ? PS_HASH_SEED_SHARD : ps_mix64(~i);
    for (int j = 0; j < 8; j++) b[j] = (uint8_t)(v >> (8 * j));
    assert_true(ps_hash_u64(v, seed) == ps_hash64(b, 8, seed));
  }
  /* shard spread: 3 shards over 300k sequential keys within 2% of a third each */
  uint64_t counts[3] = {0};
  for (uint64_t k = 0; k < 300000; k++) counts[ps_shard_of(k, 3)]++;
  for (int i = 0; i < 3; i++) assert_true(counts[i] > 98000 && counts[i] < 102000);
  assert_int_equal(ps_shard_of(12345, 1), 0);
}

static void test_status_strings(void **st) {
  (void)st;
  assert_string_equal(ps_status_str(PS_OK), "ok");
  for (int i = 0; i < PS_ERR_COUNT_; i++) assert_non_null(ps_status_str((ps_status)i));
  assert_string_equal(ps_status_str((ps_status)999), "unknown error");
}

static void test_log_levels(void **st) {
  (void)st;
  ps_log_level l;
  assert_int_equal(ps_log_parse_level("warn", &l, NULL), PS_OK);
  assert_int_equal(l, PS_LOG_WARN);
  ps_error e = {0};
  assert_int_equal(ps_log_parse_level("loud", &l, &e), PS_ERR_INVALID);
  assert_string_equal(e.msg, "'loud' is not debug|info|warn|error|off");
  ps_log_set_level(PS_LOG_ERROR);
  assert_int_equal(ps_log_get_level(), PS_LOG_ERROR);
  assert_int_equal(ps_log_apply_level("prog", "debug"), 0);
  assert_int_equal(ps_log_get_level(), PS_LOG_DEBUG);
  assert_int_equal(ps_log_apply_level("prog", "loud"), -1); /* refused, level unchanged */
  assert_int_equal(ps_log_get_level(), PS_LOG_DEBUG);
  ps_log_set_level(PS_LOG_INFO);
}

static void test_time_monotonic(void **st) {
  (void)st;
  uint64_t a = ps_now_ns();
  ps_sleep_ns(2000000);
  uint64_t b = ps_now_ns();
  assert_true(b - a >= 2000000);
}

typedef struct {
  const char *listen;
  int shard;
  double lr;
  bool verbose;
  int64_t rows;
} opts_t;

/* Parses argv against a test table; *help as ps_cli_parse sets it, err gets the reason. */
static ps_status run_cli(opts_t *o, ps_error *err, bool *help, int argc, const char **argv) {
  ps_cli_opt table[] = {
      {"listen", 'l', PS_CLI_STRING, &o->listen, "URL", "address", true, 0, 0},
      {"shard", 0, PS_CLI_INT, &o->shard, "I", "shard index", false, 0, 15},
      {"lr", 0, PS_CLI_DOUBLE, &o->lr, "LR", "learning rate", false, 0, 10},
      {"verbose", 'v', PS_CLI_FLAG, &o->verbose, NULL, "more output", false, 0, 0},
      {"rows", 0, PS_CLI_I64, &o->rows, "N", "rows", false, 0, 0},
  };
  ps_cli cli = {"prog", "test program", NULL, table, sizeof table / sizeof table[0]};
  ps_error_clear(err);
  return ps_cli_parse(&cli, argc, (char **)argv, NULL, help, err);
}

static void test_cli_ok(void **st) {
  (void)st;
  opts_t o = {NULL, 0, 0.1, false, 5};
  ps_error e;
  bool help = true;
  const char *argv[] = {"prog", "--listen", "tcp://x:1", "--shard=3", "-v", "--rows", "9000000000"};
  assert_int_equal(run_cli(&o, &e, &help, 7, argv), PS_OK);
  assert_false(help);
  assert_int_equal(e.code, PS_OK); /* success leaves err alone */
  assert_string_equal(o.listen, "tcp://x:1");
  assert_int_equal(o.shard, 3);
  assert_true(o.verbose);
  assert_true(o.rows == 9000000000ll);
  assert_true(o.lr == 0.1);
}

#define EXPECT_CLI_ERROR(substr, ...)                                        \
  do {                                                                       \
    opts_t o = {NULL, 0, 0.1, false, 5};                                     \
    ps_error e;                                                              \
    bool help;                                                               \
    const char *argv[] = {"prog", __VA_ARGS__};                              \
    int argc = (int)(sizeof argv / sizeof argv[0]);                          \
    assert_int_equal(run_cli(&o, &e, &help, argc, argv), PS_ERR_INVALID);    \
    assert_int_equal(e.code, PS_ERR_INVALID);                                \
    if (strncmp(e.msg, substr, strlen(substr)) != 0) /* no program name */   \
      fail_msg("error '%s' does not start with '%s'", e.msg, substr);        \
  } while (0)

static void test_cli_errors(void **st) {
  (void)st;
  EXPECT_CLI_ERROR("missing required option --listen", "--shard", "1");
  EXPECT_CLI_ERROR("unknown option '--bogus'", "--listen", "a", "--bogus");
  EXPECT_CLI_ERROR("--shard: 'x1' is not an integer", "--listen", "a", "--shard", "x1");
  EXPECT_CLI_ERROR("--shard: 16 is outside [0, 15]", "--listen", "a", "--shard", "16");
  EXPECT_CLI_ERROR("--lr: 'fast' is not a number", "--listen", "a", "--lr", "fast");
  EXPECT_CLI_ERROR("option '--listen' needs a value", "--listen");
  EXPECT_CLI_ERROR("unexpected argument 'extra'", "--listen", "a", "extra");
}

static void test_cli_help(void **st) {
  (void)st;
  opts_t o = {NULL, 0, 0.1, false, 5};
  ps_error e;
  bool help = false;
  const char *argv[] = {"prog", "--help"};
  FILE *saved = stdout;
  char out[4096] = "";
  stdout = fmemopen(out, sizeof out, "w");
  ps_status rc = run_cli(&o, &e, &help, 2, argv);
  fclose(stdout);
  stdout = saved;
  assert_int_equal(rc, PS_OK);
  assert_true(help);
  assert_non_null(strstr(out, "--listen URL"));
  assert_non_null(strstr(out, "(default: 0.1)"));
  assert_non_null(strstr(out, "(required)"));
}

/* ps_cli_run: -1 to go on, 0 after --help, 2 after a bad flag (its "prog: reason" line goes to
 * stderr; the binaries' exact text is checked by the shell tests of each binary). */
static void test_cli_run(void **st) {
  (void)st;
  int n = 1;
  ps_cli_opt table[] = {{"n", 0, PS_CLI_INT, &n, "N", "count", false, 1, 9}};
  ps_cli cli = {"prog", NULL, "FILE", table, 1};
  int first = 0;
  const char *ok[] = {"prog", "--n", "3", "file"};
  assert_int_equal(ps_cli_run(&cli, 4, (char **)ok, &first), -1);
  assert_int_equal(n, 3);
  assert_int_equal(first, 3);
  const char *bad[] = {"prog", "--n", "10"};
  assert_int_equal(ps_cli_run(&cli, 3, (char **)bad, &first), 2);
  FILE *saved = stdout;
  char out[1024] = "";
  stdout = fmemopen(out, sizeof out, "w");
  const char *help[] = {"prog", "--help"};
  int rc = ps_cli_run(&cli, 2, (char **)help, &first);
  fclose(stdout);
  stdout = saved;
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "Usage: prog [OPTIONS] FILE"));
}

/* ps_cli_run_logged: ps_cli_run, then the parsed --log-level applied; a bad level is exit 2
 * (before any work), a good one leaves -1 and the level set. */
static void test_cli_run_logged(void **st) {
  (void)st;
  const char *level = "info";
  ps_cli_opt table[] = {PS_CLI_LOG_LEVEL_OPT(&level)};
  ps_cli cli = {"prog", NULL, NULL, table, 1};
  const char *warn[] = {"prog", "--log-level", "warn"};
  assert_int_equal(ps_cli_run_logged(&cli, 3, (char **)warn, NULL, &level), -1);
  assert_int_equal(ps_log_get_level(), PS_LOG_WARN);
  const char *loud[] = {"prog", "--log-level", "loud"};
  assert_int_equal(ps_cli_run_logged(&cli, 3, (char **)loud, NULL, &level), 2);
  assert_int_equal(ps_log_get_level(), PS_LOG_WARN); /* unchanged */
  ps_log_set_level(PS_LOG_INFO);
}

/* ps_parse_i64 / _double: the whole string or PS_ERR_INVALID, with the value named in err. */
static void test_parse_numbers(void **st) {
  (void)st;
  int64_t v = 7;
  double d = 7;
  ps_error e = {0};
  assert_int_equal(ps_parse_i64("-42", &v, NULL), PS_OK);
  assert_int_equal(v, -42);
  assert_int_equal(ps_parse_i64("12x", &v, &e), PS_ERR_INVALID);
  assert_string_equal(e.msg, "'12x' is not an integer");
  assert_int_equal(ps_parse_i64("99999999999999999999", &v, NULL), PS_ERR_INVALID);
  assert_int_equal(ps_parse_i64("", &v, NULL), PS_ERR_INVALID);
  assert_int_equal(v, -42); /* untouched on failure */
  assert_int_equal(ps_parse_double("0.25", &d, NULL), PS_OK);
  assert_true(d == 0.25);
  assert_int_equal(ps_parse_double("inf", &d, &e), PS_ERR_INVALID);
  assert_string_equal(e.msg, "'inf' is not a number");
  assert_int_equal(ps_parse_double(NULL, &d, NULL), PS_ERR_INVALID);
}

static void test_split_list(void **st) {
  (void)st;
  char *items[4];
  assert_int_equal(ps_split_list("a,b,c", ',', items, 4), 3);
  assert_string_equal(items[2], "c");
  free(items[0]);
  assert_int_equal(ps_split_list("a,,c", ',', items, 4), -1);
  assert_int_equal(ps_split_list("a,b,c,d,e", ',', items, 4), -1);
  assert_int_equal(ps_split_list("", ',', items, 4), -1);
}

static void test_mkdir_p(void **st) {
  (void)st;
  char root[] = "/tmp/ember-test-mkdir-XXXXXX", deep[128], file[128], under[160];
  assert_non_null(mkdtemp(root));
  snprintf(deep, sizeof deep, "%s/a/b//c/", root);
  assert_int_equal(ps_mkdir_p(deep), PS_OK);
  struct stat sb;
  assert_int_equal(stat(deep, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(ps_mkdir_p(deep), PS_OK); /* existing: fine */
  /* a file in the way: an error, with mkdir's errno for the caller's message */
  snprintf(file, sizeof file, "%s/f", root);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(under, sizeof under, "%s/g", file);
  errno = 0;
  assert_int_equal(ps_mkdir_p(under), PS_ERR_IO);
  assert_int_equal(errno, ENOTDIR);
  char *lng = malloc(5000);
  assert_non_null(lng);
  memset(lng, 'x', 4999);
  lng[0] = '/', lng[4999] = '\0';
  assert_int_equal(ps_mkdir_p(lng), PS_ERR_IO);
  assert_int_equal(errno, ENAMETOOLONG);
  free(lng);
  unlink(file);
  char sub[160];
  const char *parts[] = {"/a/b/c", "/a/b", "/a", ""};
  for (int i = 0; i < 4; i++) {
    snprintf(sub, sizeof sub, "%s%s", root, parts[i]);
    assert_int_equal(rmdir(sub), 0);
  }
}

PS_TEST_MAIN("common", NULL, NULL,
    cmocka_unit_test(test_hash_stable_and_spread), cmocka_unit_test(test_status_strings),
    cmocka_unit_test(test_log_levels), cmocka_unit_test(test_time_monotonic),
    cmocka_unit_test(test_cli_ok), cmocka_unit_test(test_cli_errors),
    cmocka_unit_test(test_cli_help), cmocka_unit_test(test_cli_run),
    cmocka_unit_test(test_cli_run_logged), cmocka_unit_test(test_parse_numbers),
    cmocka_unit_test(test_split_list), cmocka_unit_test(test_mkdir_p))
