/* ps_http: /metrics, /healthz, 404 and 405 over a real loopback socket, then hostile input
 * (garbage, truncated request lines, oversized headers, NUL bytes, a flood of idle
 * connections beyond the limit, a half-sent request held open) after each of which a valid
 * scrape must still succeed; exact request counters; port-in-use and bad-address errors. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>

#include "prom_check.h"
#include "ps_http.h"
#include "ps_metrics.h"

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct timeval tv = {5, 0}; /* bounds every read and write below */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return; /* the server may close on us mid-way: that is allowed */
    c += w;
    n -= (size_t)w;
  }
}

/* Reads until EOF (or the 5 s timeout); returns a malloc'd NUL-terminated buffer. */
static char *read_all(int fd) {
  size_t cap = 1 << 16, len = 0;
  char *b = malloc(cap);
  assert_non_null(b);
  for (;;) {
    if (len + 4096 > cap) {
      cap *= 2;
      b = realloc(b, cap);
      assert_non_null(b);
    }
    ssize_t r = recv(fd, b + len, cap - len - 1, 0);
    if (r <= 0) break;
    len += (size_t)r;
  }
  b[len] = '\0';
  return b;
}

typedef struct resp {
  int status;
  char *raw;
  const char *body;
} resp;

/* half_close: signal end of input after the request (for garbage that the server would
 * otherwise wait on until its idle timeout). */
static resp request_ex(int port, const char *req, size_t n, bool half_close) {
  resp r = {0};
  int fd = connect_to(port);
  assert_true(fd >= 0);
  send_all(fd, req, n);
  if (half_close) shutdown(fd, SHUT_WR);
  r.raw = read_all(fd);
  close(fd);
  if (sscanf(r.raw, "HTTP/1.%*d %d", &r.status) != 1) r.status = 0;
  const char *sep = strstr(r.raw, "\r\n\r\n");
  r.body = sep ? sep + 4 : "";
  return r;
}

static resp request(int port, const char *req, size_t n) { return request_ex(port, req, n, false); }

static resp get(int port, const char *method, const char *path) {
  char req[256];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", method, path);
  return request(port, req, (size_t)n);
}

static void expect_scrape(int port, ps_series *marker, double want) {
  resp r = get(port, "GET", "/metrics");
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.raw, "Content-Type: text/plain; version=0.0.4"));
  char err[300];
  if (!prom_check(r.body, err, sizeof err)) fail_msg("checker: %s\n%s", err, r.body);
  double v = -1;
  assert_true(prom_value(r.body, "ember_test_marker_total", "", &v));
  assert_true(v == want);
  (void)marker;
  free(r.raw);
}

typedef struct health {
  atomic_int ok;
} health;

static bool health_fn(void *ud, char *reason, size_t n) {
  health *h = ud;
  if (atomic_load(&h->ok)) return true;
  snprintf(reason, n, "shard 3 is loading its data dir");
  return false;
}

typedef struct fixture {
  ps_metrics *m;
  ps_http *http;
  ps_series *marker;
  health h;
  int port;
} fixture;

static int setup(void **st) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  atomic_store(&f->h.ok, 1);
  if (ps_metrics_create(&f->m) != PS_OK) return -1;
  ps_metric *c = NULL;
  if (ps_metrics_counter(f->m, "ember_test_marker_total", "A marker.", NULL, 0, &c) != PS_OK) return -1;
  f->marker = ps_metric_single(c);
  ps_counter_add(f->marker, 7);
  ps_http_opts o = {.bind_addr = "127.0.0.1", .port = 0, .metrics = f->m, .health = health_fn,
                    .health_ud = &f->h, .max_connections = 16, .timeout_s = 2};
  if (ps_http_start(&o, &f->http, NULL) != PS_OK) return -1;
  f->port = ps_http_port(f->http);
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fixture *f = *st;
  ps_http_destroy(&f->http);
  ps_metrics_destroy(&f->m);
  free(f);
  return 0;
}

static void test_routes(void **st) {
  fixture *f = *st;
  assert_true(f->port > 0 && f->port < 65536);
  expect_scrape(f->port, f->marker, 7);
  ps_counter_inc(f->marker);
  expect_scrape(f->port, f->marker, 8);

  resp r = get(f->port, "GET", "/healthz");
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "ok\n");
  free(r.raw);
  atomic_store(&f->h.ok, 0);
  r = get(f->port, "GET", "/healthz");
  assert_int_equal(r.status, 503);
  assert_non_null(strstr(r.body, "shard 3 is loading its data dir"));
  free(r.raw);
  atomic_store(&f->h.ok, 1);

  r = get(f->port, "GET", "/nope");
  assert_int_equal(r.status, 404);
  free(r.raw);
  r = get(f->port, "GET", "/metrics/extra");
  assert_int_equal(r.status, 404);
  free(r.raw);
  r = get(f->port, "DELETE", "/metrics");
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.raw, "Allow: GET, HEAD"));
  free(r.raw);
  const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello";
  r = request(f->port, post, sizeof post - 1);
  assert_int_equal(r.status, 405);
  free(r.raw);
  r = get(f->port, "HEAD", "/metrics");
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, ""); /* HEAD: headers only */
  free(r.raw);

  /* exact request counters: 3 metrics scrapes so far (2 GET, 1 HEAD) are counted after their
   * reply, so this 4th scrape sees 3 */
  r = get(f->port, "GET", "/metrics");
  double v = 0;
  assert_true(prom_value(r.body, "ember_http_requests_total", "handler=\"metrics\",code=\"200\"", &v));
  assert_true(v == 3);
  assert_true(prom_value(r.body, "ember_http_requests_total", "handler=\"healthz\",code=\"200\"", &v) && v == 1);
  assert_true(prom_value(r.body, "ember_http_requests_total", "handler=\"healthz\",code=\"503\"", &v) && v == 1);
  assert_true(prom_value(r.body, "ember_http_requests_total", "handler=\"other\",code=\"404\"", &v) && v == 2);
  assert_true(prom_value(r.body, "ember_http_requests_total", "handler=\"metrics\",code=\"404\"", &v) == false);
  assert_true(prom_value(r.body, "ember_http_requests_total", "handler=\"metrics\",code=\"405\"", &v) && v == 2);
  free(r.raw);
}

static void test_malformed(void **st) {
  fixture *f = *st;
  /* 1. garbage, with and without line ends */
  static const char *const junk[] = {
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", /* a TLS ClientHello's first bytes */
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics\r\n\r\n",          /* HTTP/0.9 style */
      "GET /metrics HTTP/9.9\r\n\r\n", /* unknown version */
      "GET /metrics HTTP/1.1\r\nNoColonHeader\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET /metr",                     /* truncated request line, then close */
      "\r\n\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    resp r = request_ex(f->port, junk[i], strlen(junk[i]), true);
    /* Any answer (or none) is fine, as long as it is not a crash and not a 200 with data
     * for the garbage; then a real scrape works. */
    free(r.raw);
    expect_scrape(f->port, f->marker, 7);
  }
  /* 2. NUL bytes inside the request line */
  const char nul[] = "GET /met\0rics HTTP/1.1\r\nHost: x\r\n\r\n";
  resp r = request(f->port, nul, sizeof nul - 1);
  assert_true(r.status != 200);
  free(r.raw);
  /* 3. a 1 MB header: refused (431/413/400 or a closed connection), never buffered */
  size_t big = 1 << 20;
  char *huge = malloc(big + 128);
  assert_non_null(huge);
  int n = snprintf(huge, 128, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ");
  memset(huge + n, 'a', big);
  memcpy(huge + n + big, "\r\n\r\n", 5);
  r = request(f->port, huge, (size_t)n + big + 4);
  assert_true(r.status != 200);
  free(r.raw);
  free(huge);
  /* 4. a URL of 100 KB */
  size_t ul = 100000;
  char *url = malloc(ul + 64);
  assert_non_null(url);
  memcpy(url, "GET /", 5);
  memset(url + 5, 'm', ul);
  memcpy(url + 5 + ul, " HTTP/1.1\r\nHost: x\r\n\r\n", 23);
  r = request(f->port, url, 5 + ul + 22);
  assert_true(r.status != 200);
  free(r.raw);
  free(url);
  expect_scrape(f->port, f->marker, 7);
  /* 5. a half-sent request held open while others are served */
  int slow = connect_to(f->port);
  assert_true(slow >= 0);
  send_all(slow, "GET /metrics HTTP/1.1\r\nHos", 26);
  expect_scrape(f->port, f->marker, 7);
  close(slow);
  /* 6. more idle connections than the limit (16), held open: the server must not die; once
   * they close (or time out, 2 s), scrapes work again */
  enum { FLOOD = 100 };
  int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) fds[i] = connect_to(f->port);
  for (int i = 0; i < FLOOD; i++)
    if (fds[i] >= 0) close(fds[i]);
  for (int attempt = 0;; attempt++) {
    int fd = connect_to(f->port);
    assert_true(fd >= 0);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    send_all(fd, req, strlen(req));
    char *raw = read_all(fd);
    close(fd);
    int ok = strncmp(raw, "HTTP/1.1 200", 12) == 0;
    free(raw);
    if (ok) break;
    assert_true(attempt < 20); /* bounded: the closed flood drains within seconds */
    usleep(200000);
  }
  expect_scrape(f->port, f->marker, 7);
  /* 7. many sequential keep-alive requests on one connection */
  int fd = connect_to(f->port);
  assert_true(fd >= 0);
  const char ka[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 50; i++) send_all(fd, ka, sizeof ka - 1);
  const char last[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  send_all(fd, last, sizeof last - 1);
  char *raw = read_all(fd);
  close(fd);
  int oks = 0;
  for (const char *p = raw; (p = strstr(p, "HTTP/1.1 200")) != NULL; p++) oks++;
  assert_int_equal(oks, 51);
  free(raw);
  expect_scrape(f->port, f->marker, 7);
}

static void test_bind_errors(void **st) {
  fixture *f = *st;
  ps_http *h = NULL;
  /* the fixture's port is taken */
  ps_error err;
  assert_int_equal(ps_http_create("127.0.0.1", f->port, NULL, NULL, NULL, &h, &err), PS_ERR_IO);
  assert_null(h);
  /* the reason comes back in err, not in the log */
  assert_int_equal(err.code, PS_ERR_IO);
  char want[64];
  snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%d", f->port);
  assert_non_null(strstr(err.msg, want));
  assert_int_equal(ps_http_create("not-an-address", 0, NULL, NULL, NULL, &h, &err), PS_ERR_INVALID);
  assert_non_null(strstr(err.msg, "not-an-address"));
  assert_int_equal(ps_http_create("127.0.0.1", 70000, NULL, NULL, NULL, &h, NULL), PS_ERR_INVALID);
  assert_int_equal(ps_http_create("127.0.0.1", -1, NULL, NULL, NULL, &h, NULL), PS_ERR_INVALID);
  /* no registry, no health callback: empty /metrics, healthy */
  assert_int_equal(ps_http_create("127.0.0.1", 0, NULL, NULL, NULL, &h, NULL), PS_OK);
  resp r = get(ps_http_port(h), "GET", "/metrics");
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "");
  free(r.raw);
  r = get(ps_http_port(h), "GET", "/healthz");
  assert_int_equal(r.status, 200);
  free(r.raw);
  ps_http_destroy(&h);
  assert_null(h);
  ps_http_destroy(&h); /* idempotent */
  /* destroyed before its registry: the registry still renders (the callback is gone) */
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  assert_int_equal(ps_http_create("127.0.0.1", 0, m, NULL, NULL, &h, NULL), PS_OK);
  ps_http_destroy(&h);
  char *text = NULL;
  size_t len;
  assert_int_equal(ps_metrics_render(m, &text, &len), PS_OK);
  assert_true(prom_check(text, NULL, 0));
  free(text);
  ps_metrics_destroy(&m);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bind_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
