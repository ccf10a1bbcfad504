/* Unit: the exactly-once records of a shard (server/ps_server_exactly_once_int.h),
 * in-process, no sockets. Each verdict on its own (a copy in flight, done, failed; a re-send the shard has no record
 * of; the window bound; forgetting idle clients and everything at a restore), then 200,000
 * random pushes, re-sends, floors and settlements of 8 clients checked against a naive model
 * that keeps every seq ever taken in a plain array (no window, no shifting bitmaps). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_server_exactly_once_int.h"

#define SEC 1000000000ull

static srv_once_verdict chk(srv_once *x, uint64_t cl, uint64_t seq, uint64_t floor, bool retry,
                           uint64_t now, void **orig) {
  void *o = NULL;
  srv_once_verdict v = srv_once_check(x, cl, seq, floor, retry, now, (void *)(uintptr_t)seq, &o);
  if (orig) *orig = o;
  return v;
}

static void test_verdicts(void **st) {
  (void)st;
  srv_once *x = srv_once_create();
  assert_non_null(x);
  void *o = NULL;
  assert_int_equal(chk(x, 7, 1, 1, false, SEC, NULL), SRV_ONCE_APPLY);
  assert_int_equal(chk(x, 7, 1, 1, true, SEC, &o), SRV_ONCE_INFLIGHT); /* reply not sent yet */
  assert_ptr_equal(o, (void *)(uintptr_t)1);
  srv_once_settle(x, 7, 1, true);
  assert_int_equal(chk(x, 7, 1, 1, true, SEC, NULL), SRV_ONCE_DONE);
  assert_int_equal(chk(x, 7, 2, 1, false, SEC, NULL), SRV_ONCE_APPLY);
  srv_once_settle(x, 7, 2, false);
  assert_int_equal(chk(x, 7, 2, 2, true, SEC, NULL), SRV_ONCE_FAILED);
  /* A re-send of a seq never seen is the first copy that arrives: applied. */
  assert_int_equal(chk(x, 7, 4, 3, true, SEC, NULL), SRV_ONCE_APPLY);
  srv_once_settle(x, 7, 4, true);
  /* Floor 5: seqs 3 (never arrived, given up) and 4 are settled. */
  assert_int_equal(chk(x, 7, 5, 5, false, SEC, NULL), SRV_ONCE_APPLY);
  assert_int_equal(chk(x, 7, 3, 3, true, SEC, NULL), SRV_ONCE_DONE);
  /* The window: floor + WINDOW - 1 is taken, floor + WINDOW refused. */
  assert_int_equal(chk(x, 7, 5 + SRV_ONCE_WINDOW - 1, 5, false, SEC, NULL), SRV_ONCE_APPLY);
  assert_int_equal(chk(x, 7, 5 + SRV_ONCE_WINDOW, 5, false, SEC, NULL), SRV_ONCE_TOO_MANY);
  /* Unknown: a re-send from a client never seen (a restarted shard), and one below the first
   * seq the shard saw of a client (sent to its earlier life). */
  assert_int_equal(chk(x, 8, 3, 3, true, SEC, NULL), SRV_ONCE_UNKNOWN);
  assert_int_equal(chk(x, 9, 10, 6, false, SEC, NULL), SRV_ONCE_APPLY);
  assert_int_equal(chk(x, 9, 7, 6, true, SEC, NULL), SRV_ONCE_UNKNOWN);
  uint64_t n, d, u;
  srv_once_counts(x, &n, &d, &u);
  assert_int_equal(n, 2); /* 7 and 9 */
  assert_int_equal(d, 4); /* INFLIGHT, DONE, FAILED, DONE (seq 3) */
  assert_int_equal(u, 2);
  srv_once_settle(x, 7, 5, true);
  srv_once_settle(x, 7, 5 + SRV_ONCE_WINDOW - 1, true);
  srv_once_settle(x, 9, 10, true);
  /* Silent for longer than the idle bound with nothing in flight: forgotten. */
  uint64_t later = SEC + SRV_ONCE_IDLE_NS + 11 * SEC;
  assert_int_equal(chk(x, 7, 6, 6, true, later, NULL), SRV_ONCE_UNKNOWN);
  srv_once_counts(x, &n, &d, &u);
  assert_int_equal(n, 0);
  assert_int_equal(u, 3);
  /* A restore forgets everything. */
  assert_int_equal(chk(x, 7, 6, 6, false, later, NULL), SRV_ONCE_APPLY);
  srv_once_settle(x, 7, 6, true);
  srv_once_clear(x);
  assert_int_equal(chk(x, 7, 6, 6, true, later, NULL), SRV_ONCE_UNKNOWN);
  srv_once_destroy(&x);
  assert_null(x);
}

/* A client still in flight is never forgotten; at the client cap the least recently heard of
 * idle one makes room. */
static void test_bounds(void **st) {
  (void)st;
  srv_once *x = srv_once_create();
  assert_int_equal(chk(x, 1, 1, 1, false, SEC, NULL), SRV_ONCE_APPLY); /* stays in flight */
  uint64_t later = SEC + SRV_ONCE_IDLE_NS + 11 * SEC;
  assert_int_equal(chk(x, 2, 1, 1, false, later, NULL), SRV_ONCE_APPLY);
  assert_int_equal(chk(x, 1, 1, 1, true, later, NULL), SRV_ONCE_INFLIGHT);
  srv_once_settle(x, 2, 1, true);
  for (uint64_t c = 3; c <= SRV_ONCE_MAX_CLIENTS; c++) {
    assert_int_equal(chk(x, c, 1, 1, false, later + c, NULL), SRV_ONCE_APPLY);
    srv_once_settle(x, c, 1, true);
  }
  uint64_t n, d, u;
  srv_once_counts(x, &n, &d, &u);
  assert_int_equal(n, SRV_ONCE_MAX_CLIENTS);
  /* Full: client 2 (heard of at `later`, before every other idle one) makes room. */
  assert_int_equal(chk(x, 99999999, 1, 1, false, later + SRV_ONCE_MAX_CLIENTS + 5, NULL),
                   SRV_ONCE_APPLY);
  assert_int_equal(chk(x, 2, 1, 1, true, later + SRV_ONCE_MAX_CLIENTS + 6, NULL),
                   SRV_ONCE_UNKNOWN);
  assert_int_equal(chk(x, 3, 1, 1, true, later + SRV_ONCE_MAX_CLIENTS + 7, NULL), SRV_ONCE_DONE);
  assert_int_equal(chk(x, 1, 1, 1, true, later + SRV_ONCE_MAX_CLIENTS + 8, NULL),
                   SRV_ONCE_INFLIGHT);
  srv_once_destroy(&x);
}

/* The naive model: every seq ever taken of a client, with its state. */
enum { M_NONE = 0, M_FLIGHT, M_OK, M_FAIL };
#define MAXSEQ 20000
typedef struct model {
  uint8_t st[MAXSEQ];
  uint64_t first, base, next; /* next: the client's next new seq */
  bool known;
} model;

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return rnd_state;
}

static srv_once_verdict expect(model *m, uint64_t seq, uint64_t floor, bool retry) {
  if (!m->known) {
    if (retry) return SRV_ONCE_UNKNOWN;
    m->known = true;
    m->first = m->base = seq;
  }
  if (m->st[seq] == M_FLIGHT) return SRV_ONCE_INFLIGHT;
  if (seq < m->first) return SRV_ONCE_UNKNOWN;
  if (floor > m->base) m->base = floor;
  if (seq < m->base) return SRV_ONCE_DONE;
  if (seq - m->base >= SRV_ONCE_WINDOW) return SRV_ONCE_TOO_MANY;
  if (m->st[seq] == M_OK) return SRV_ONCE_DONE;
  if (m->st[seq] == M_FAIL) return SRV_ONCE_FAILED;
  m->st[seq] = M_FLIGHT;
  return SRV_ONCE_APPLY;
}

static void test_against_model(void **st) {
  (void)st;
  enum { C = 8 };
  model *m = calloc(C, sizeof *m);
  srv_once *x = srv_once_create();
  uint64_t floor[C];
  for (int c = 0; c < C; c++) m[c].next = floor[c] = 1;
  size_t napply = 0, ndup = 0, nunknown = 0;
  for (int it = 0; it < 200000; it++) {
    int c = (int)(rnd() % C);
    model *mc = &m[c];
    uint64_t r = rnd() % 100, seq;
    bool retry = false;
    if (r < 45 && mc->next < MAXSEQ - 1) {
      seq = mc->next++; /* a new push */
    } else if (r < 75 && mc->next > floor[c]) {
      /* a re-send of one the client still waits for (seq in [floor, next)) */
      seq = floor[c] + rnd() % (mc->next - floor[c]);
      retry = true;
    } else if (r < 90) {
      /* the shard answers one of its recent pushes in flight */
      uint64_t span = mc->next - 1 < 300 ? mc->next - 1 : 300;
      for (int t = 0; t < 4 && span; t++) {
        uint64_t s = mc->next - 1 - rnd() % span;
        if (mc->st[s] != M_FLIGHT) continue;
        bool ok = rnd() % 8 != 0;
        mc->st[s] = ok ? M_OK : M_FAIL;
        srv_once_settle(x, (uint64_t)c + 1, s, ok);
        break;
      }
      continue;
    } else {
      /* the client settles: the floor jumps to a point up to next. Every other 4000 iterations
       * it stands still, so windows of several bitmap words build up and then shift by
       * arbitrary word and bit offsets. */
      if ((it / 4000) % 2) continue;
      floor[c] += rnd() % (mc->next - floor[c] + 1);
      continue;
    }
    if (seq < floor[c]) continue;
    srv_once_verdict want = expect(mc, seq, floor[c], retry);
    void *o = NULL;
    srv_once_verdict got =
        srv_once_check(x, (uint64_t)c + 1, seq, floor[c], retry, SEC, (void *)(uintptr_t)seq, &o);
    if (got != want) fail_msg("iteration %d client %d seq %llu floor %llu retry %d: got %d, "
                              "want %d", it, c, (unsigned long long)seq,
                              (unsigned long long)floor[c], retry, got, want);
    if (got == SRV_ONCE_INFLIGHT) assert_ptr_equal(o, (void *)(uintptr_t)seq);
    napply += got == SRV_ONCE_APPLY;
    ndup += got == SRV_ONCE_DONE || got == SRV_ONCE_FAILED || got == SRV_ONCE_INFLIGHT;
    nunknown += got == SRV_ONCE_UNKNOWN;
  }
  /* The mix really exercised every path. */
  assert_true(napply > 10000);
  assert_true(ndup > 10000);
  uint64_t n, d, u;
  srv_once_counts(x, &n, &d, &u);
  assert_int_equal(n, C);
  assert_int_equal(d, ndup);
  assert_int_equal(u, nunknown);
  srv_once_destroy(&x);
  free(m);
}

PS_TEST_MAIN("exo_unit", NULL, NULL,
  cmocka_unit_test(test_verdicts),
  cmocka_unit_test(test_bounds),
  cmocka_unit_test(test_against_model))
