/* ps-exo-bench: what the exactly-once records (server/ps_server_exactly_once_int.h) cost a shard
 * per push, on its main thread: srv_once_check (a new push taken) plus srv_once_settle (its reply),
 * for C clients taking turns, each with Q pushes in flight (its floor Q - 1 behind), and the check
 * of a copy (a re-send of a settled push). Prints ns per push, the median of 5 runs.
 *
 * Design decision: the records are measured alone, in-process, because their cost is far below
 * what the loopback benchmark (ps-net-bench, one push = hundreds of microseconds) can resolve
 * on a shared machine; bench/RESULTS-net.md has both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_server_exactly_once_int.h"
#include "ps_time.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ns per push for n pushes spread over `clients` clients with `q` in flight each. */
static double run(uint64_t clients, uint64_t q, uint64_t n, bool copies) {
  srv_once *x = srv_once_create();
  if (!x) return -1;
  uint64_t rounds = n / clients ? n / clients : 1, t0 = 0;
  void *o;
  for (uint64_t r = 0; r <= rounds; r++) {
    if (r == 1) t0 = ps_now_ns(); /* round 0 creates the clients */
    uint64_t seq = r + q, floor = r + 1;
    for (uint64_t c = 1; c <= clients; c++) {
      uint64_t id = c * 0x9e3779b97f4a7c15ull;
      if (copies && r) {
        (void)srv_once_check(x, id, floor - 1, floor, true, t0, NULL, &o);
        continue;
      }
      if (srv_once_check(x, id, seq, floor, false, t0, NULL, &o) != SRV_ONCE_APPLY) abort();
      srv_once_settle(x, id, seq, true);
    }
  }
  double ns = (double)(ps_now_ns() - t0) / (double)(rounds * clients);
  srv_once_destroy(&x);
  return ns;
}

int main(int argc, char **argv) {
  int64_t n = 4000000;
  ps_cli_opt opts[] = {
      {"pushes", 'n', PS_CLI_I64, &n, "N", "pushes per run", false, 1000, 1e9},
  };
  ps_cli cli = {"ps-exo-bench", "The exactly-once records' cost per push on a shard (ns).", NULL,
                opts, sizeof opts / sizeof opts[0]};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  const uint64_t cl[] = {1, 64, 4096, 65536}, qs[] = {1, 8, 64};
  printf("%-9s %-9s %-8s %s\n", "clients", "inflight", "kind", "ns/push (median of 5)");
  for (int copies = 0; copies < 2; copies++)
    for (size_t i = 0; i < sizeof cl / sizeof cl[0]; i++)
      for (size_t j = 0; j < (copies ? 1 : sizeof qs / sizeof qs[0]); j++) {
        double v[5];
        for (int k = 0; k < 5; k++) v[k] = run(cl[i], qs[j], (uint64_t)n, copies);
        qsort(v, 5, sizeof v[0], cmp);
        printf("%-9llu %-9llu %-8s %.1f\n", (unsigned long long)cl[i],
               (unsigned long long)qs[j], copies ? "copy" : "new", v[2]);
      }
  return 0;
}
