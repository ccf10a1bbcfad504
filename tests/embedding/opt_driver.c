/* opt_driver: replays a gradient file through ps_store for opt_ref.py (the PyTorch / numpy
 * reference comparison). Reads the spec, keys and per-step (key index, gradient) lists that the
 * script wrote, pulls the initial rows, pushes every step (ps_store_set_step per step), pulls
 * the final rows, and writes initial + final rows (float32, little-endian) to --out.
 * A small --cache-kb puts most rows through the RocksDB round trip while training. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_log.h"
#include "ps_store.h"

#pragma pack(push, 1)
typedef struct file_hdr {
  char magic[4]; /* "EMBO" */
  uint32_t optimizer, dim;
  float lr, beta1, beta2, eps, l1, l2, lr_power, initial_accumulator;
  uint32_t init;
  float init_a, init_b;
  uint64_t seed;
  uint32_t nkeys, nsteps;
} file_hdr;
#pragma pack(pop)

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n ? 0 : -1; }

int main(int argc, char **argv) {
  const char *in = NULL, *outp = NULL, *dir = NULL;
  int parts = 4;
  int64_t cache_kb = 64;
  ps_cli_opt opts[] = {
      {"in", 0, PS_CLI_STRING, &in, "FILE", "gradient file written by opt_ref.py", true, 0, 0},
      {"out", 0, PS_CLI_STRING, &outp, "FILE", "rows out (initial then final)", true, 0, 0},
      {"dir", 0, PS_CLI_STRING, &dir, "DIR", "store directory (created)", true, 0, 0},
      {"partitions", 0, PS_CLI_INT, &parts, "P", "store partitions", false, 1, 64},
      {"cache-kb", 0, PS_CLI_I64, &cache_kb, "KB", "hot-tier budget", false, 1, 1 << 24},
  };
  ps_cli cli = {"opt_driver", "Replays gradients through ps_store for a reference test.", NULL,
                opts, sizeof opts / sizeof *opts};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  ps_log_set_level(PS_LOG_WARN);
  FILE *f = fopen(in, "rb");
  if (!f) {
    fprintf(stderr, "opt_driver: cannot open %s\n", in);
    return 1;
  }
  file_hdr h;
  if (rd(f, &h, sizeof(h)) || memcmp(h.magic, "EMBO", 4) != 0 || h.dim == 0 || h.dim > 4096) {
    fprintf(stderr, "opt_driver: %s: bad header\n", in);
    return 1;
  }
  ps_table_spec sp;
  memset(&sp, 0, sizeof(sp));
  sp.id = 1;
  snprintf(sp.name, sizeof(sp.name), "ref");
  sp.dim = h.dim;
  sp.optimizer = (ps_optimizer)h.optimizer;
  sp.lr = h.lr;
  sp.beta1 = h.beta1;
  sp.beta2 = h.beta2;
  sp.eps = h.eps;
  sp.l1 = h.l1;
  sp.l2 = h.l2;
  sp.lr_power = h.lr_power;
  sp.initial_accumulator = h.initial_accumulator;
  sp.init = (ps_init)h.init;
  sp.init_a = h.init_a;
  sp.init_b = h.init_b;
  sp.seed = h.seed;
  ps_store_options o = {.path = dir, .cache_bytes = (size_t)cache_kb << 10,
                        .partitions = (uint32_t)parts, .write_buffer_bytes = 4 << 20};
  ps_store *s = NULL;
  ps_error err;
  ps_status st = ps_store_open(&o, &s, &err);
  if (st == PS_OK) st = ps_store_declare(s, &sp, &err);
  if (st != PS_OK) {
    fprintf(stderr, "opt_driver: store: %s\n", err.msg);
    return 1;
  }
  const size_t K = h.nkeys, D = h.dim;
  uint64_t *keys = malloc(K * 8), *sk = malloc(K * 8 + 8);
  float *rows = malloc(K * D * 4), *g = malloc(K * D * 4 + 4);
  uint32_t *idx = malloc(K * 4 + 4);
  FILE *out = fopen(outp, "wb");
  if (!keys || !sk || !rows || !g || !idx || !out || rd(f, keys, K * 8)) {
    fprintf(stderr, "opt_driver: bad input or no memory\n");
    return 1;
  }
  if (ps_store_pull(s, 1, keys, K, rows) != PS_OK) return 1;
  fwrite(rows, 4, K * D, out);
  for (uint32_t t = 0; t < h.nsteps; t++) {
    uint32_t n;
    if (rd(f, &n, 4) || n > (1u << 20)) return 1;
    uint64_t *nsk = realloc(sk, (size_t)n * 8 + 8);
    float *ng = realloc(g, (size_t)n * D * 4 + 4);
    uint32_t *nidx = realloc(idx, (size_t)n * 4 + 4);
    if (!nsk || !ng || !nidx) return 1;
    sk = nsk, g = ng, idx = nidx;
    if (rd(f, idx, (size_t)n * 4) || rd(f, g, (size_t)n * D * 4)) {
      fprintf(stderr, "opt_driver: truncated step %u\n", t);
      return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
      if (idx[i] >= K) return 1;
      sk[i] = keys[idx[i]];
    }
    ps_store_set_step(s, t + 1);
    st = ps_store_push(s, 1, sk, n, g);
    if (st != PS_OK) {
      fprintf(stderr, "opt_driver: push step %u: %s\n", t, ps_status_str(st));
      return 1;
    }
  }
  ps_store_stats stats;
  ps_store_get_stats(s, &stats);
  if (ps_store_pull(s, 1, keys, K, rows) != PS_OK) return 1;
  fwrite(rows, 4, K * D, out);
  fclose(out);
  fclose(f);
  fprintf(stderr, "opt_driver: %u steps, evictions %llu, misses %llu\n", h.nsteps,
          (unsigned long long)stats.evictions, (unsigned long long)stats.misses);
  ps_store_close(&s);
  free(keys);
  free(sk);
  free(rows);
  free(g);
  free(idx);
  return 0;
}
