/* ps_ckpt_layout: where everything of a checkpoint lies -- the one place its paths are built
 * and parsed (docs/CHECKPOINTS.md, "Layout"). ps-worker, ps-server, ps-predict, ps-export and
 * ps-reshard name no checkpoint file themselves:
 *
 *   DIR/latest                    "step-N\n": the newest committed checkpoint (written
 *                                 atomically, last)
 *   DIR/step-N/                   one checkpoint (its step directory)
 *     config                      the flags that fix the model (a ps_kvfile)
 *     dense.bin                   the dense state (worker/model/ps_dense_file.h)
 *     schema.json                 the run's JSON schema, copied
 *     input                       how far into --train it trained (lines, bytes; a ps_kvfile;
 *                                 only for a run in file order)
 *     shards/                     the shards' directory: the root a server checkpoints into
 *       shard-I/, shard-I.json    shard I's committed snapshot and its metadata
 *       shard-I.staging/, .json   the same, prepared and not yet committed (ps-server)
 *       shard-I.build/            a store being filled (ps-reshard; removed once snapshotted)
 *   DATA/checkpoints/step-N/      a server's own root when a CHECKPOINT names none
 *
 * Path builders return PS_ERR_INVALID when the path does not fit in out (out is then "");
 * the parsers take a name or path and say whether it is of the layout. */
#ifndef PS_CKPT_LAYOUT_H
#define PS_CKPT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

/* The files and directories of a step directory. */
typedef enum ps_ckpt_file {
  PS_CKPT_CONFIG,
  PS_CKPT_DENSE,
  PS_CKPT_SCHEMA,
  PS_CKPT_SHARDS,
  PS_CKPT_INPUT, /* the --train position the checkpoint trained up to (ps-worker, a ps_kvfile) */
} ps_ckpt_file;

/* What of one shard under the shards' directory. */
typedef enum ps_ckpt_shard_part {
  PS_CKPT_SHARD_DIR,          /* shard-I */
  PS_CKPT_SHARD_META,         /* shard-I.json */
  PS_CKPT_SHARD_STAGING,      /* shard-I.staging */
  PS_CKPT_SHARD_STAGING_META, /* shard-I.staging.json */
  PS_CKPT_SHARD_BUILD,        /* shard-I.build */
} ps_ckpt_shard_part;

/* The name of file f in a step directory ("config", "dense.bin", "schema.json", "shards",
 * "input"). */
const char *ps_ckpt_file_name(ps_ckpt_file f);

/* "step-N" into out. */
ps_status ps_ckpt_step_name(char *out, size_t len, uint64_t step);
/* Whether name is "step-N" as ps_ckpt_step_name writes it (N: decimal, no sign, no leading
 * zero, at most INT64_MAX; nothing else), and then N into *step (when not NULL). */
bool ps_ckpt_step_parse(const char *name, uint64_t *step);
/* Whether path is ROOT/step-N or ROOT/step-N/shards (trailing slashes ignored): then ROOT into
 * root (when not NULL; "/" for /step-N) and N into *step (when not NULL). */
bool ps_ckpt_path_split(const char *path, char *root, size_t len, uint64_t *step);

/* dir/step-N. */
ps_status ps_ckpt_step_path(char *out, size_t len, const char *dir, uint64_t step);
/* step_dir/<f's name>. */
ps_status ps_ckpt_file_path(char *out, size_t len, const char *step_dir, ps_ckpt_file f);
/* shards_dir/shard-I[.staging][.json|.build]. */
ps_status ps_ckpt_shard_path(char *out, size_t len, const char *shards_dir, uint32_t shard,
                             ps_ckpt_shard_part part);
/* step_dir/shards/shard-I... (ps_ckpt_shard_path under step_dir's shards directory). */
ps_status ps_ckpt_step_shard_path(char *out, size_t len, const char *step_dir, uint32_t shard,
                                  ps_ckpt_shard_part part);
/* The shards of step_dir: how many shard-I directories there are from shard-0 on (at most
 * max). */
uint32_t ps_ckpt_count_shards(const char *step_dir, uint32_t max);
/* data_dir/checkpoints/step-N: a server's root for a checkpoint that names none. */
ps_status ps_ckpt_server_root(char *out, size_t len, const char *data_dir, uint64_t step);

/* dir/latest. */
ps_status ps_ckpt_latest_path(char *out, size_t len, const char *dir);
/* The name dir/latest holds (its first line) into name. PS_ERR_NOT_FOUND when there is no
 * readable latest (name ""); PS_ERR_CORRUPT when what it holds names no step directory (empty,
 * "." or "..", or with a '/': name keeps it, for the message); err says which. */
ps_status ps_ckpt_latest_read(const char *dir, char *name, size_t len, ps_error *err);
/* dir/NAME, the step directory dir/latest names (ps_ckpt_latest_read's errors; PS_ERR_INVALID
 * when out is too short). */
ps_status ps_ckpt_latest_dir(const char *dir, char *out, size_t len, ps_error *err);
/* dir/latest := "step-N\n", atomically (ps_write_atomic). */
ps_status ps_ckpt_latest_write(const char *dir, uint64_t step, ps_error *err);
/* The step directory of a checkpoint directory dir: "dir/NAME" as dir/latest names it (PS_OK),
 * or dir itself when marker is in it (PS_OK: dir is one step-N). PS_ERR_CORRUPT when latest
 * names no step directory, PS_ERR_INVALID when dir is neither or out is too short; err says
 * which. */
ps_status ps_ckpt_resolve(const char *dir, ps_ckpt_file marker, char *out, size_t len,
                          ps_error *err);

#endif
