/* What a client tells its user off the happy path (issue 17): a server URL that is not
 * tcp://HOST:PORT or ipc://PATH is refused at create with a message naming it (in the
 * caller's ps_error, since no client survives to hold it), and a server
 * that does not answer (a wrong port) is named in a WARN line within a few seconds while the
 * request still waits out its bound.
 *
 * The warning is read from stderr, redirected to a file for the test, while the waiting call
 * runs in a second thread: the line must appear long before the call returns. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_client.h"

/* A replicated shard's 'URL|URL|...': each URL checked, the bad one named; an empty replica or
 * more than 8 refused. */
static void test_url_check_replicas(void **state) {
  (void)state;
  ps_error e;
  assert_int_equal(ps_client_check_url("tcp://a:1|tcp://b:99999", &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "'tcp://b:99999'"));
  assert_int_equal(ps_client_check_url("tcp://a:1|", &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "URL|URL"));
  assert_int_equal(ps_client_check_url("tcp://a:1|tcp://a:2|tcp://a:3|tcp://a:4|tcp://a:5|"
                                       "tcp://a:6|tcp://a:7|tcp://a:8|tcp://a:9", &e),
                   PS_ERR_INVALID);
}

static void test_url_check(void **state) {
  (void)state;
  const char *good[] = {"tcp://127.0.0.1:5555", "tcp://host:1", "tcp://h:65535",
                        "tcp://[::1]:7000", "ipc:///tmp/ember.sock",
                        "tcp://a:1|tcp://b:2" /* a replicated shard */};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    assert_int_equal(ps_client_check_url(good[i], NULL), PS_OK);
  const char *bad[] = {"127.0.0.1:5555", "tcp://127.0.0.1", "tcp://127.0.0.1:0",
                       "tcp://127.0.0.1:99999", "tcp://:5555", "tcp://h:55x", "tcp://h:",
                       "ipc://", "udp://h:1", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ps_error e;
    ps_error_clear(&e);
    assert_int_equal(ps_client_check_url(bad[i], &e), PS_ERR_INVALID);
    char want[128];
    snprintf(want, sizeof want, "server URL '%s' is not tcp://HOST:PORT or ipc://PATH (", bad[i]);
    if (strncmp(e.msg, want, strlen(want)) != 0) fail_msg("'%s': message '%s'", bad[i], e.msg);
    /* create refuses it too, whatever its position in the list, with the same message */
    const char *urls[2] = {"tcp://127.0.0.1:5555", bad[i]};
    ps_client *c = (ps_client *)1;
    ps_error_clear(&e);
    assert_int_equal(ps_client_create(urls, 2, NULL, &c, &e), PS_ERR_INVALID);
    assert_null(c);
    assert_int_equal(e.code, PS_ERR_INVALID);
    if (strncmp(e.msg, want, strlen(want)) != 0) fail_msg("create '%s': '%s'", bad[i], e.msg);
    c = (ps_client *)1;
    assert_int_equal(ps_client_create(urls, 2, NULL, &c, NULL), PS_ERR_INVALID); /* NULL ok */
    assert_null(c);
  }
  ps_client *c = NULL;
  ps_error e;
  ps_error_clear(&e);
  assert_int_equal(ps_client_create_list("tcp://127.0.0.1:5555,127.0.0.1:5556", NULL, &c, &e),
                   PS_ERR_INVALID);
  assert_null(c);
  assert_non_null(strstr(e.msg, "server URL '127.0.0.1:5556' is not tcp://HOST:PORT"));
  assert_int_equal(ps_client_create_list("", NULL, &c, &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "server list '' is empty"));
  /* Success leaves err untouched. */
  ps_error_set(&e, PS_ERR_IO, "before");
  assert_int_equal(ps_client_create_list("tcp://127.0.0.1:5555,ipc:///tmp/x", NULL, &c, &e),
                   PS_OK);
  assert_non_null(c);
  assert_int_equal(e.code, PS_ERR_IO);
  assert_string_equal(e.msg, "before");
  ps_client_destroy(&c);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
  ps_client *c;
  ps_status st;
  ps_error err;
  double took;
} ping_job;

static void *ping(void *arg) {
  ping_job *j = arg;
  double t0 = now_s();
  j->st = ps_client_ping(j->c, 0, &j->err);
  j->took = now_s() - t0;
  return NULL;
}

static bool file_has(const char *path, const char *what) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, what) != NULL;
}

static void test_silent_server(void **state) {
  (void)state;
  int port = free_port();
  assert_true(port > 0);
  char url[64], want[160];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  snprintf(want, sizeof want, "server %s (shard 0) does not answer yet; waiting up to 6 s", url);
  char path[] = "/tmp/ember-client-ops-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 6000;
  ping_job j = {0};
  assert_int_equal(ps_client_create_list(url, &o, &j.c, NULL), PS_OK);
  double t0 = now_s(), seen = -1;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ping, &j), 0);
  while (now_s() - t0 < 5.5 && seen < 0) {
    if (file_has(path, want)) seen = now_s() - t0;
    else usleep(50000);
  }
  pthread_join(th, NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  bool once = file_has(path, want);
  char again[8192] = "";
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(again, 1, sizeof again - 1, f) : 0;
  if (f) fclose(f);
  again[n] = '\0';
  unlink(path);
  print_message("warning after %.2f s, call failed after %.2f s: %s\n", seen, j.took,
                j.err.msg);
  if (seen < 0) fail_msg("no '%s' within 5.5 s; stderr: %s", want, again);
  assert_true(once);
  assert_true(seen >= 2.5);
  char *first = strstr(again, "does not answer yet");
  assert_null(strstr(first + 1, "does not answer yet")); /* once */
  /* ... and the call still fails only at its bound. */
  assert_int_equal(j.st, PS_ERR_TIMEOUT);
  assert_int_equal(j.err.code, PS_ERR_TIMEOUT);
  assert_true(j.took >= 5.9);
  assert_non_null(strstr(j.err.msg, url));
  ps_client_destroy(&j.c);
}

PS_TEST_MAIN("client_ops", NULL, NULL,
  cmocka_unit_test(test_url_check),
  cmocka_unit_test(test_url_check_replicas),
  cmocka_unit_test(test_silent_server))
