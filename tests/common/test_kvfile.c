/* ps_kvfile: a file written is read back line for line (comments and lines without '=' skipped,
 * a name may repeat, '\r' dropped) with its checksum verified; a file without the checksum
 * line reads unverified; a flipped byte, a malformed checksum line or one that is not the last
 * is refused (PS_ERR_CORRUPT), a missing file is PS_ERR_NOT_FOUND, and the writer wants whole
 * lines. */
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
#include "ps_test_tmpdir.h"

#include "ps_fs.h"
#include "ps_kvfile.h"

PS_TEST_TMPDIR("kvfile", "config")

static void put(const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* The file at path, whole, into buf. */
static void slurp(char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = '\0';
}

static const char body[] = "# a comment\nemb-dim=16\nno equals sign\ntable=1 rows=3\n"
                           "table=2 rows=4\nempty=\nwin=dos\r\n";

static void test_round_trip(void **st) {
  (void)st;
  assert_int_equal(ps_kvfile_write(path, body, strlen(body), NULL), PS_OK);
  ps_kvfile *kv = NULL;
  assert_int_equal(ps_kvfile_read(path, &kv, NULL), PS_OK);
  assert_true(ps_kvfile_checksummed(kv));
  assert_int_equal(ps_kvfile_count(kv), 5);
  assert_string_equal(ps_kvfile_get(kv, "emb-dim"), "16");
  assert_string_equal(ps_kvfile_get(kv, "table"), "1 rows=3");
  assert_string_equal(ps_kvfile_name(kv, 2), "table");
  assert_string_equal(ps_kvfile_value(kv, 2), "2 rows=4");
  assert_string_equal(ps_kvfile_get(kv, "empty"), "");
  assert_string_equal(ps_kvfile_get(kv, "win"), "dos");
  assert_null(ps_kvfile_get(kv, "checksum"));
  assert_null(ps_kvfile_get(kv, "no equals sign"));
  assert_null(ps_kvfile_name(kv, 5));
  ps_kvfile_free(&kv);
  assert_null(kv);
  /* the checksum line is XXH3-64 of the bytes before it, 16 hex digits */
  char all[512];
  slurp(all, sizeof all);
  char want[64];
  snprintf(want, sizeof want, "checksum=%016llx\n",
           (unsigned long long)ps_kvfile_sum(body, strlen(body)));
  assert_string_equal(all + strlen(body), want);
}

static void test_unverified(void **st) {
  (void)st;
  put("emb-dim=8\n");
  ps_kvfile *kv = NULL;
  assert_int_equal(ps_kvfile_read(path, &kv, NULL), PS_OK);
  assert_false(ps_kvfile_checksummed(kv));
  assert_string_equal(ps_kvfile_get(kv, "emb-dim"), "8");
  ps_kvfile_free(&kv);
}

static void refused(const char *text, const char *why) {
  put(text);
  ps_kvfile *kv = NULL;
  ps_error err;
  assert_int_equal(ps_kvfile_read(path, &kv, &err), PS_ERR_CORRUPT);
  assert_null(kv);
  assert_non_null(strstr(err.msg, why));
  assert_non_null(strstr(err.msg, path));
}

static void test_malformed(void **st) {
  (void)st;
  assert_int_equal(ps_kvfile_write(path, body, strlen(body), NULL), PS_OK);
  char good[512];
  slurp(good, sizeof good);
  char bad[600];
  snprintf(bad, sizeof bad, "%s", good);
  bad[strlen("# a comment\nemb-dim=1")] = '7'; /* a flipped byte */
  refused(bad, "checksum mismatch");
  snprintf(bad, sizeof bad, "%sextra=1\n", good); /* the checksum is not the last line */
  refused(bad, "a bad checksum line");
  refused("emb-dim=16\nchecksum=12345\n", "a bad checksum line");   /* too short */
  refused("emb-dim=16\nchecksum=zz3456789abcdef0\n", "a bad checksum line");
  refused("emb-dim=16\nchecksum=0123456789abcdef", "a bad checksum line"); /* no newline */
  refused("emb-dim=16\nchecksum=0123456789abcdef\n", "checksum mismatch");
  ps_error err;
  assert_int_equal(ps_kvfile_write(path, "no newline", 10, &err), PS_ERR_INVALID);
  ps_kvfile *kv = NULL;
  unlink(path);
  assert_int_equal(ps_kvfile_read(path, &kv, &err), PS_ERR_NOT_FOUND);
}

PS_TEST_MAIN("kvfile", setup, teardown,
    cmocka_unit_test(test_round_trip),
    cmocka_unit_test(test_unverified),
    cmocka_unit_test(test_malformed))
