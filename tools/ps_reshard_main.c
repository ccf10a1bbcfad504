/* ps-reshard: a checkpoint taken on N shards rewritten for M, offline (no server), so that
 * `ps-worker --resume --checkpoint-dir OUT` continues the run on M servers (ps_reshard.h; the
 * user's side in docs/CHECKPOINTS.md, "Resharding").
 *
 * Design decisions:
 * - A new directory, never the checkpoint in place: the source stays what it was (another
 *   job, a serving server, may be reading it), and OUT is a checkpoint directory of its own
 *   whose step-N/shards has ps-worker's layout, so servers started fresh pin OUT as their
 *   checkpoint root and the resumed job checkpoints into OUT (docs/DESIGN.md, "Confined
 *   paths").
 * - ps-worker --resume does not reshard by itself (it refuses, naming this command): ps-worker
 *   does not link the store, the move is offline work that a job's other ranks would wait on
 *   at their restore barrier, and a directory beside the checkpoint would not have the shape
 *   a fresh server pins as its root. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ps_ckpt.h"
#include "ps_cli.h"
#include "ps_log.h"
#include "ps_reshard.h"

#define PROG "ps-reshard"

int main(int argc, char **argv) {
  const char *ckpt = NULL, *out = NULL, *level = "info";
  int shards = 0;
  ps_cli_opt opts[] = {
      {"checkpoint", 'c', PS_CLI_STRING, &ckpt, "DIR", "a checkpoint directory (its latest) or one step-N in it", true, 0, 0},
      {"shards", 's', PS_CLI_INT, &shards, "M", "the shard count to write (the number of servers the run resumes on)", true, 1, PS_RESHARD_MAX_SHARDS},
      {"out", 'o', PS_CLI_STRING, &out, "DIR", "the new checkpoint directory (absent or empty): latest, step-N/ with M shards", true, 0, 0},
      PS_CLI_LOG_LEVEL_OPT(&level),
  };
  ps_cli cli = {PROG, "Rewrite a checkpoint for another number of shards: every row moves to the shard its key routes to, with its optimizer state (docs/CHECKPOINTS.md).",
                NULL, opts, sizeof opts / sizeof opts[0]};
  int rc = ps_cli_run_logged(&cli, argc, argv, NULL, &level);
  if (rc >= 0) return rc;
  ps_ckpt *ck = NULL;
  if ((rc = ps_ckpt_open_main(PROG, ckpt, NULL, &ck)) != 0) return rc;
  ps_error err;
  ps_status st;
  PS_INFO("step %" PRIu64 " of %s: %u shards to %d in %s", ps_ckpt_step(ck),
          ps_ckpt_dir(ck), ps_ckpt_nshards(ck), shards, out);
  ps_reshard_stats rs;
  st = ps_reshard(ck, (uint32_t)shards, out, &rs, &err);
  if (st != PS_OK)
    fprintf(stderr, PROG ": --out %s: %s\n", out, ps_error_str(&err));
  else
    PS_INFO("moved %" PRIu64 " rows of %u table(s) from %u to %d shards in %.2f s "
            "(%.0f rows/s; checked in %.2f s); resume with --checkpoint-dir %s and %d servers",
            rs.rows, rs.tables, ps_ckpt_nshards(ck), shards, rs.seconds,
            rs.seconds > 0 ? (double)rs.rows / rs.seconds : 0.0, rs.check_seconds, out, shards);
  ps_ckpt_close(&ck);
  return st == PS_OK ? 0 : st == PS_ERR_INVALID ? 2 : 1;
}
