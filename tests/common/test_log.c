/* Unit: ps_log's per-call-site rate limit. ps_log_site_admit on a given clock (PS_LOG_RATE lines
 * a second, the count of the rest handed to the next line written), and PS_ERROR_RL end to
 * end: a flood from one call site, with stderr sent to a file, writes at most the rate and then
 * a line that says how many were suppressed, while another call site is not held back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_log.h"

static void test_admit(void **state) {
  (void)state;
  ps_log_site site = {0};
  uint64_t sup = 99, sec = 1000000000ull;
  for (int i = 0; i < PS_LOG_RATE; i++) {
    assert_true(ps_log_site_admit(&site, 100 * sec + (uint64_t)i, &sup));
    assert_int_equal(sup, 0);
  }
  for (int i = 0; i < 10; i++) assert_false(ps_log_site_admit(&site, 100 * sec + 500, &sup));
  /* The next second: written again, with the count of what was left out. */
  assert_true(ps_log_site_admit(&site, 101 * sec, &sup));
  assert_int_equal(sup, 10);
  assert_true(ps_log_site_admit(&site, 101 * sec + 1, &sup));
  assert_int_equal(sup, 0);
}

static void flood(int i) { PS_ERROR_RL("disk full writing row %d", i); }
static void other(void) { PS_ERROR_RL("another error"); }

static int count_lines(const char *path, const char *needle, char *last, size_t len) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) {
      n++;
      snprintf(last, len, "%s", line);
    }
  fclose(f);
  return n;
}

static void test_flood(void **state) {
  (void)state;
  char path[] = "/tmp/ember-test-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  for (int i = 0; i < 10000; i++) flood(i);
  other();
  struct timespec ts = {1, 100000000L}; /* into the next second */
  nanosleep(&ts, NULL);
  flood(-1);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  char last[4096] = "";
  int n = count_lines(path, "disk full", last, sizeof last);
  /* The flood may straddle a second boundary: at most two seconds' worth, plus the last. */
  assert_true(n >= PS_LOG_RATE + 1);
  assert_true(n <= 2 * PS_LOG_RATE + 1);
  assert_non_null(strstr(last, "disk full writing row -1 (suppressed "));
  assert_non_null(strstr(last, " similar lines)"));
  unsigned long sup = strtoul(strstr(last, "(suppressed ") + 12, NULL, 10);
  assert_true(sup >= 10000 - 2 * PS_LOG_RATE);
  assert_int_equal(count_lines(path, "another error", last, sizeof last), 1);
  unlink(path);
}

PS_TEST_MAIN("log", NULL, NULL,
    cmocka_unit_test(test_admit), cmocka_unit_test(test_flood))
