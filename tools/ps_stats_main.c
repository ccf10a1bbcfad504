/* ps-stats: prints the STATS document of every shard (or one), one JSON line each, so that a
 * shell script can read what a server says of itself (docs/PROTOCOL.md, "Other ops").
 *
 * bench/replica/run.sh polls it for a restarted replica's return to the live set (the catch-up
 * figure of issue 23): that is the servers' own word, where a row count or /healthz would only
 * be a proxy. It goes through the client library, so `--servers` takes what every client takes
 * (a shard's replicas as URL|URL|... where the library knows them) and STATS reaches whichever
 * replica the library talks to. Exit 0; 1 when a shard does not answer (its line names it, and
 * the other shards are still printed); 2 for bad arguments. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "ps_cli.h"
#include "ps_client.h"
#include "ps_log.h"

int main(int argc, char **argv) {
  const char *servers = NULL, *level = "warn";
  int shard = -1, timeout_ms = 5000;
  ps_cli_opt opts[] = {
      {"servers", 's', PS_CLI_STRING, &servers, "URL,...", "ps-server endpoints, shard order",
       true, 0, 0},
      {"shard", 0, PS_CLI_INT, &shard, "I", "only shard I (-1: every shard)", false, -1, 65535},
      {"timeout-ms", 0, PS_CLI_INT, &timeout_ms, "MS", "per-shard bound on the answer", false, 1,
       3600000},
      PS_CLI_LOG_LEVEL_OPT(&level),
  };
  ps_cli cli = {"ps-stats",
                "Prints each shard's STATS document (JSON, one line per shard, shard order).",
                NULL, opts, sizeof opts / sizeof *opts};
  int rc = ps_cli_run_logged(&cli, argc, argv, NULL, &level);
  if (rc >= 0) return rc;
  ps_client_options co;
  ps_client_options_default(&co);
  co.timeout_ms = (uint32_t)timeout_ms;
  ps_client *cl = NULL;
  ps_error err;
  if (ps_client_create_list(servers, &co, &cl, &err) != PS_OK) {
    fprintf(stderr, "ps-stats: --servers: %s\n", err.msg);
    return 2;
  }
  size_t n = ps_client_servers(cl);
  if (shard >= 0 && (size_t)shard >= n) {
    fprintf(stderr, "ps-stats: --shard %d: --servers names %zu shard(s)\n", shard, n);
    ps_client_destroy(&cl);
    return 2;
  }
  rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (shard >= 0 && (size_t)shard != i) continue;
    char *js = NULL;
    if (ps_client_stats(cl, i, &js, &err) != PS_OK) {
      fprintf(stderr, "ps-stats: %s\n", err.msg); /* names the URL and shard */
      rc = 1;
      continue;
    }
    /* One line whatever the server's layout: re-dumped compact (the text as sent if it does
     * not parse, which STATS always does). */
    json_t *doc = json_loads(js, 0, NULL);
    char *line = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    printf("%s\n", line ? line : js);
    free(line);
    json_decref(doc);
    free(js);
  }
  ps_client_destroy(&cl);
  return rc;
}
