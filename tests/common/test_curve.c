/* ps_curve: key derivation against the test vectors of zmq_curve(7) (the keys of ZeroMQ's own
 * CURVE tests), key files (written 0600/0644 whatever the umask, never overwritten without
 * force, read back), every way a key file can be bad (missing, a directory, short, long,
 * not Z85, a secret others may read), the clients directory (only NAME.public counts, a bad
 * one or none at all is refused) and the both-or-neither rule of a client's two files. */
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

#include "ps_curve.h"
#include "ps_fs.h"

/* zmq_curve(7), "TEST VECTORS": the client's and the server's pair. */
#define CLIENT_PUB "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
#define CLIENT_SEC "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"
#define SERVER_PUB "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
#define SERVER_SEC "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"

static char g_root[128];

static int setup(void **st) {
  (void)st;
  if (!ps_curve_available()) {
    print_message("libzmq without CURVE: skipped\n");
    exit(77);
  }
  snprintf(g_root, sizeof g_root, "/tmp/ember-test-curve-%d", (int)getpid());
  ps_rm_rf(g_root);
  return ps_mkdir_p(g_root) == PS_OK ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  ps_rm_rf(g_root);
  return 0;
}

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
}

static void test_public_of_secret_matches_zmq_vectors(void **st) {
  (void)st;
  char pub[PS_CURVE_Z85_SIZE];
  assert_int_equal(ps_curve_public(CLIENT_SEC, pub, NULL), PS_OK);
  assert_string_equal(pub, CLIENT_PUB);
  assert_int_equal(ps_curve_public(SERVER_SEC, pub, NULL), PS_OK);
  assert_string_equal(pub, SERVER_PUB);
  assert_int_equal(ps_curve_public("short", pub, NULL), PS_ERR_INVALID);
}

static void test_write_pair_modes_and_round_trip(void **st) {
  (void)st;
  mode_t old = umask(0); /* the modes must not come from the umask */
  char prefix[256], path[300], pub[PS_CURVE_Z85_SIZE], sec[PS_CURVE_Z85_SIZE],
      again[PS_CURVE_Z85_SIZE], derived[PS_CURVE_Z85_SIZE];
  snprintf(prefix, sizeof prefix, "%s/node", g_root);
  assert_int_equal(ps_curve_write_pair(prefix, false, pub, NULL), PS_OK);
  umask(old);
  struct stat s;
  snprintf(path, sizeof path, "%s.secret", prefix);
  assert_int_equal(stat(path, &s), 0);
  assert_int_equal(s.st_mode & 0777, 0600);
  assert_int_equal(s.st_size, PS_CURVE_Z85_LEN + 1);
  assert_int_equal(ps_curve_read_key(path, true, sec, NULL), PS_OK);
  snprintf(path, sizeof path, "%s.public", prefix);
  assert_int_equal(stat(path, &s), 0);
  assert_int_equal(s.st_mode & 0777, 0644);
  assert_int_equal(ps_curve_read_key(path, false, again, NULL), PS_OK);
  assert_string_equal(again, pub);
  assert_int_equal(ps_curve_public(sec, derived, NULL), PS_OK);
  assert_string_equal(derived, pub);

  /* No overwrite without force: both files stay as they were. */
  ps_error err;
  char other[PS_CURVE_Z85_SIZE];
  assert_int_equal(ps_curve_write_pair(prefix, false, other, &err), PS_ERR_CONFLICT);
  assert_non_null(strstr(err.msg, "exists"));
  assert_int_equal(ps_curve_read_key(path, false, again, NULL), PS_OK);
  assert_string_equal(again, pub);
  /* force: a new pair, still 0600. */
  assert_int_equal(ps_curve_write_pair(prefix, true, other, NULL), PS_OK);
  assert_string_not_equal(other, pub);
  assert_int_equal(ps_curve_read_key(path, false, again, NULL), PS_OK);
  assert_string_equal(again, other);
  snprintf(path, sizeof path, "%s.secret", prefix);
  assert_int_equal(stat(path, &s), 0);
  assert_int_equal(s.st_mode & 0777, 0600);
}

/* path holding text with mode must be refused with code, err naming the path and `why`. */
static void bad(const char *name, const char *text, mode_t mode, bool secret, ps_status code,
                const char *why) {
  char path[256], key[PS_CURVE_Z85_SIZE];
  snprintf(path, sizeof path, "%s/%s", g_root, name);
  if (text) write_file(path, text, mode);
  ps_error err;
  assert_int_equal(ps_curve_read_key(path, secret, key, &err), code);
  assert_non_null(strstr(err.msg, path));
  if (!strstr(err.msg, why)) fail_msg("'%s' does not say '%s'", err.msg, why);
  assert_null(strchr(err.msg, '\n'));
}

static void test_bad_key_files(void **st) {
  (void)st;
  bad("missing", NULL, 0, true, PS_ERR_NOT_FOUND, "No such file");
  bad("short", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hI\n", 0600, false, PS_ERR_INVALID,
      "not a key");
  bad("long", CLIENT_PUB "A\n", 0600, false, PS_ERR_INVALID, "not a key");
  bad("twolines", CLIENT_PUB "\n\n", 0600, false, PS_ERR_INVALID, "not a key");
  bad("notz85", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hI~\n", 0600, false, PS_ERR_INVALID,
      "not Z85");
  bad("open.secret", CLIENT_SEC "\n", 0644, true, PS_ERR_INVALID, "chmod 600");
  bad("other.secret", CLIENT_SEC "\n", 0604, true, PS_ERR_INVALID, "lets others read");
  char dir[200], key[PS_CURVE_Z85_SIZE];
  snprintf(dir, sizeof dir, "%s/adir", g_root);
  assert_int_equal(ps_mkdir_p(dir), PS_OK);
  bad("adir", NULL, 0, false, PS_ERR_INVALID, "not a regular file");
  /* Accepted: no newline; a public key of mode 0644; a secret the group may read (what a
   * Kubernetes Secret with an fsGroup looks like). */
  char path[256];
  snprintf(path, sizeof path, "%s/nonl", g_root);
  write_file(path, CLIENT_PUB, 0644);
  assert_int_equal(ps_curve_read_key(path, false, key, NULL), PS_OK);
  assert_string_equal(key, CLIENT_PUB);
  snprintf(path, sizeof path, "%s/group.secret", g_root);
  write_file(path, CLIENT_SEC "\n", 0440);
  assert_int_equal(ps_curve_read_key(path, true, key, NULL), PS_OK);
  assert_string_equal(key, CLIENT_SEC);
}

static void test_clients_dir(void **st) {
  (void)st;
  char dir[200], path[300];
  snprintf(dir, sizeof dir, "%s/clients", g_root);
  assert_int_equal(ps_mkdir_p(dir), PS_OK);
  ps_curve_keyset *ks = NULL;
  ps_error err;
  assert_int_equal(ps_curve_keyset_load(dir, &ks, &err), PS_ERR_INVALID); /* empty */
  assert_non_null(strstr(err.msg, "no NAME.public"));
  assert_null(ks);
  snprintf(path, sizeof path, "%s/alice.public", dir);
  write_file(path, CLIENT_PUB "\n", 0644);
  snprintf(path, sizeof path, "%s/server.secret", dir); /* not a .public: ignored */
  write_file(path, SERVER_SEC "\n", 0600);
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  write_file(path, "hello\n", 0644);
  snprintf(path, sizeof path, "%s/.hidden.public", dir);
  write_file(path, "garbage\n", 0644);
  assert_int_equal(ps_curve_keyset_load(dir, &ks, NULL), PS_OK);
  assert_int_equal(ps_curve_keyset_size(ks), 1);
  uint8_t bin[32];
  /* The 32 bytes of CLIENT_PUB (an RFC 32 Z85 decoder in Python gives the same). */
  static const uint8_t client_pub_bin[32] = {
      0xBB, 0x88, 0x47, 0x1D, 0x65, 0xE2, 0x65, 0x9B, 0x30, 0xC5, 0x5A, 0x53, 0x21, 0xCE, 0xBB, 0x5A,
      0xAB, 0x2B, 0x70, 0xA3, 0x98, 0x64, 0x5C, 0x26, 0xDC, 0xA2, 0xB2, 0xFC, 0xB4, 0x3F, 0xC5, 0x18};
  memcpy(bin, client_pub_bin, 32);
  const char *name = ps_curve_keyset_find(ks, bin, 32);
  assert_non_null(name);
  assert_string_equal(name, "alice");
  bin[0] ^= 1;
  assert_null(ps_curve_keyset_find(ks, bin, 32));
  assert_null(ps_curve_keyset_find(ks, client_pub_bin, 31));
  ps_curve_keyset_destroy(&ks);
  assert_null(ks);
  /* One bad .public refuses the whole directory, naming the file. */
  snprintf(path, sizeof path, "%s/bob.public", dir);
  write_file(path, "not a key\n", 0644);
  assert_int_equal(ps_curve_keyset_load(dir, &ks, &err), PS_ERR_INVALID);
  assert_non_null(strstr(err.msg, "bob.public"));
  assert_int_equal(ps_curve_keyset_load("/nonexistent-ember-dir", &ks, &err), PS_ERR_INVALID);
}

static void test_client_files_both_or_neither(void **st) {
  (void)st;
  char sec[PS_CURVE_Z85_SIZE] = "x", srv[PS_CURVE_Z85_SIZE] = "y", s[256], p[256];
  assert_int_equal(ps_curve_load_client(NULL, NULL, sec, srv, NULL), PS_OK);
  assert_string_equal(sec, "");
  assert_string_equal(srv, "");
  snprintf(s, sizeof s, "%s/c.secret", g_root);
  write_file(s, CLIENT_SEC "\n", 0600);
  snprintf(p, sizeof p, "%s/s.public", g_root);
  write_file(p, SERVER_PUB "\n", 0644);
  ps_error err;
  assert_int_equal(ps_curve_load_client(s, NULL, sec, srv, &err), PS_ERR_INVALID);
  assert_non_null(strstr(err.msg, "--curve-server"));
  assert_int_equal(ps_curve_load_client(NULL, p, sec, srv, &err), PS_ERR_INVALID);
  assert_int_equal(ps_curve_load_client(s, p, sec, srv, NULL), PS_OK);
  assert_string_equal(sec, CLIENT_SEC);
  assert_string_equal(srv, SERVER_PUB);
  /* The secret where the server key goes: a public key file is not checked for its mode,
   * but a secret given as --curve-secret is. */
  chmod(s, 0644);
  assert_int_equal(ps_curve_load_client(s, p, sec, srv, &err), PS_ERR_INVALID);
  assert_string_equal(sec, "");
}

PS_TEST_MAIN("curve", setup, teardown, cmocka_unit_test(test_public_of_secret_matches_zmq_vectors),
             cmocka_unit_test(test_write_pair_modes_and_round_trip),
             cmocka_unit_test(test_bad_key_files), cmocka_unit_test(test_clients_dir),
             cmocka_unit_test(test_client_files_both_or_neither))
