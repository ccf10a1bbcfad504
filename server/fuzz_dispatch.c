/* libFuzzer target for the server's dispatch: the wire fuzz target (proto/fuzz_wire.c) carried
 * one level further, through ps_server_feed into the real handlers (declare, pull, push, step,
 * consistency bookkeeping, coordinator, stats) of an in-process server with an inline store.
 * The input is split into up to three frames as in fuzz_wire.c. Two tables (async and sync)
 * are declared first so that data ops reach the store. CHECKPOINT/RESTORE inputs are skipped
 * (they write snapshots to disk). Build with -DEMBER_FUZZ=ON (clang); run as
 *   ASAN_OPTIONS=detect_leaks=0 build-fuzz/server/fuzz_server_dispatch -max_total_time=60 \
 *       -detect_leaks=0 CORPUS
 * (leak detection off: requests parked by design, e.g. a KV_GET waiting for its key, outlive
 * the input that sent them, which libFuzzer would report as a per-input leak). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_log.h"
#include "ps_server.h"
#include "ps_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ps_server *g_srv;

static void sink(void *ctx, const void *const *frames, const size_t *sizes, size_t n) {
  (void)ctx;
  volatile uint8_t acc = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < sizes[i]; j++) acc ^= ((const uint8_t *)frames[i])[j];
  (void)acc;
}

static void declare(uint32_t id, Ember__Consistency cons) {
  Ember__TableSpec sp;
  ember__table_spec__init(&sp);
  sp.id = id;
  sp.name = id == 1 ? "async" : "sync";
  sp.dim = 4;
  sp.lr = 0.1f;
  sp.consistency = cons;
  sp.num_workers = 2;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_DECLARE);
  h.table = &sp;
  size_t n = 0;
  uint8_t *b = ps_wire_header_pack(&h, &n);
  const void *f[1] = {b};
  size_t z[1] = {n};
  ps_server_feed(g_srv, f, z, 1, sink, NULL);
  free(b);
}

static void init_server(void) {
  char dir[128];
  snprintf(dir, sizeof dir, "/tmp/ember-fuzz-dispatch-%d", (int)getpid());
  ps_log_set_level(PS_LOG_OFF);
  ps_server_options o = {.listen = NULL, .shard = 0, .shards = 2, .data_dir = dir,
                         .cache_bytes = 32 << 20, .threads = 0};
  if (ps_server_create(&o, &g_srv, NULL) != PS_OK) abort();
  declare(1, EMBER__CONSISTENCY__CONS_ASYNC);
  declare(2, EMBER__CONSISTENCY__CONS_SYNC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_srv) init_server();
  if (size < 2) return 0;
  size_t a = data[0], b = data[1];
  data += 2;
  size -= 2;
  const void *f[3];
  size_t z[3], nf = 0;
  size_t la = a < size ? a : size;
  f[nf] = data;
  z[nf++] = la;
  size_t rest = size - la;
  if (rest) {
    size_t lb = (b * 8) < rest ? (b * 8) : rest;
    f[nf] = data + la;
    z[nf++] = lb;
    if (rest - lb) {
      f[nf] = data + la + lb;
      z[nf++] = rest - lb;
    }
  }
  Ember__Header *h = ember__header__unpack(NULL, z[0], f[0]);
  if (h) {
    bool skip = h->op == EMBER__OP__OP_CHECKPOINT || h->op == EMBER__OP__OP_RESTORE;
    ember__header__free_unpacked(h, NULL);
    if (skip) return 0;
  }
  ps_server_feed(g_srv, f, z, nf, sink, NULL);
  return 0;
}
