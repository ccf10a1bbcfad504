/* Integration: ps-server's metrics endpoint against slow-header (slowloris) clients, and its
 * default address.
 *   bind       `--metrics-port P` alone listens on 127.0.0.1 only: /proc/net/tcp shows the
 *              listening socket at 127.0.0.1:P (none at 0.0.0.0:P), and a connection to
 *              127.0.0.2:P -- another local address -- is refused.
 *   slowloris  300 connections from 127.0.0.1 each trickle a request header one byte a second
 *              (reconnecting whenever the server drops them) for 12 s; meanwhile a scraper on
 *              127.0.0.2 gets /metrics every 2 s, each within 5 s, and one trickling
 *              connection is cut off by the header deadline (its headers never complete)
 *              although it never goes idle.
 *   addresses  8 trickling connections (the per-address limit) from each of 20 addresses,
 *              127.0.0.3 to 127.0.0.22, 160 in all over the 64 connections allowed; the
 *              scraper gets /metrics every second, 7 times, each within 5 s (it got 0 of 7:
 *              at the limit every new connection was refused). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
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

#include "pt_cluster.h"

static pt_server g_srv;
static int g_mport;
static char g_dir[512];

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* GET /metrics from 127.0.0.2: true on a 200 with Ember's series, in *ms the time it took. */
static bool scrape(uint64_t *ms) {
  uint64_t t0 = now_ms();
  int fd = pt_tcp_connect("127.0.0.2", "127.0.0.1", g_mport, 5000);
  if (fd < 0) return false;
  const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  bool ok = send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1);
  static char buf[1 << 20];
  size_t len = 0;
  for (ssize_t r; ok && len + 1 < sizeof buf && (r = recv(fd, buf + len, sizeof buf - len - 1, 0)) > 0;)
    len += (size_t)r;
  buf[len] = '\0';
  close(fd);
  *ms = now_ms() - t0;
  return ok && strncmp(buf, "HTTP/1.1 200", 12) == 0 && strstr(buf, "ember_server_") != NULL;
}

static int setup(void **st) {
  (void)st;
  pt_tmpdir("mguard", g_dir);
  g_mport = pt_free_port();
  char mp[16];
  snprintf(mp, sizeof mp, "%d", g_mport);
  const char *extra[] = {"--metrics-port", mp, NULL};
  if (!pt_start_args(&g_srv, 0, 1, g_dir, 0, 0, extra)) return -1;
  /* the endpoint comes up after the socket: wait (<= 10 s) for a scrape */
  for (int i = 0; i < 100; i++) {
    char *body = pt_http_get(g_mport, "/healthz");
    if (body) {
      free(body);
      return 0;
    }
    usleep(100000);
  }
  return -1;
}

static int teardown(void **st) {
  (void)st;
  pt_stop(&g_srv, SIGKILL, 5000);
  pt_rmrf(g_dir);
  return 0;
}

static void test_default_bind(void **st) {
  (void)st;
  FILE *f = fopen("/proc/net/tcp", "r");
  assert_non_null(f);
  char line[512], want_lo[32], want_any[32];
  snprintf(want_lo, sizeof want_lo, "0100007F:%04X", g_mport);
  snprintf(want_any, sizeof want_any, "00000000:%04X", g_mport);
  bool lo = false, any = false;
  while (fgets(line, sizeof line, f)) {
    char local[64], remote[64];
    unsigned state;
    if (sscanf(line, " %*d: %63s %63s %x", local, remote, &state) != 3 || state != 0x0A)
      continue; /* 0x0A: LISTEN */
    lo |= strcmp(local, want_lo) == 0;
    any |= strcmp(local, want_any) == 0;
  }
  fclose(f);
  printf("# metrics port %d: listening on 127.0.0.1 %s, on 0.0.0.0 %s\n", g_mport,
         lo ? "yes" : "no", any ? "yes" : "no");
  assert_true(lo);
  assert_false(any);
  int fd = pt_tcp_connect(NULL, "127.0.0.2", g_mport, 5000);
  if (fd >= 0) close(fd);
  assert_true(fd < 0 && errno == ECONNREFUSED);
}

/* What a trickling attack let the scraper do: scrapes, good ones, the slowest (ms), and when
 * the watched connection (0, never reconnected) was dropped (ms from the start; 0: never). */
typedef struct attack_result {
  int scrapes, good;
  uint64_t worst, cut_ms;
} attack_result;

/* nc connections trickle a request header one byte a second (reconnecting whenever the server
 * drops them) for `rounds` seconds, connection i from 127.0.0.1 (naddr 0) or from
 * 127.0.0.(3 + i % naddr); the scraper (127.0.0.2) gets /metrics every `every` rounds. */
static attack_result trickle(int nc, int naddr, int rounds, int every) {
  static const char hdr[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  static int fd[512];
  static size_t pos[512];
  static char src[512][16];
  assert_true(nc <= 512);
  for (int i = 0; i < nc; i++) {
    snprintf(src[i], sizeof src[i], "127.0.0.%d", naddr ? 3 + i % naddr : 1);
    fd[i] = pt_tcp_connect(src[i], "127.0.0.1", g_mport, 20), pos[i] = 0;
  }
  uint64_t t0 = now_ms();
  attack_result a = {0};
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < nc; i++) {
      if (fd[i] < 0 && i > 0) fd[i] = pt_tcp_connect(src[i], "127.0.0.1", g_mport, 20), pos[i] = 0;
      if (fd[i] < 0) continue;
      char c = hdr[pos[i] % (sizeof hdr - 1)];
      if (pos[i] >= sizeof hdr - 1) c = 'a'; /* the header line never ends */
      if (send(fd[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
        if (i == 0 && !a.cut_ms) a.cut_ms = now_ms() - t0;
        close(fd[i]);
        fd[i] = -1;
        continue;
      }
      pos[i]++;
    }
    if (round % every == every - 1) {
      uint64_t ms = 0;
      bool ok = scrape(&ms);
      a.scrapes++;
      a.good += ok;
      if (ms > a.worst) a.worst = ms;
      printf("# t=%2us scrape %s in %llu ms\n", (unsigned)((now_ms() - t0) / 1000),
             ok ? "ok" : "FAILED", (unsigned long long)ms);
    }
    usleep(1000000);
  }
  int open_now = 0;
  for (int i = 0; i < nc; i++)
    if (fd[i] >= 0) open_now++, close(fd[i]);
  printf("# %d trickling connections open at the end; the watched one cut after %llu ms\n",
         open_now, (unsigned long long)a.cut_ms);
  return a;
}

static void test_slowloris(void **st) {
  (void)st;
  attack_result a = trickle(300, 0, 12, 2);
  assert_int_equal(a.good, a.scrapes);
  assert_true(a.worst <= 5000);
  assert_true(a.cut_ms > 0); /* the header deadline, although it never went idle */
}

static void test_addresses(void **st) {
  (void)st;
  sleep(6); /* the previous test's connections gone (header deadline 5 s) */
  attack_result a = trickle(160, 20, 8, 1);
  assert_int_equal(a.scrapes, 8);
  assert_true(a.good >= a.scrapes - 1); /* the first may meet the full table before any cut */
  assert_true(a.worst <= 5000);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_bind),
      cmocka_unit_test(test_slowloris),
      cmocka_unit_test(test_addresses),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
