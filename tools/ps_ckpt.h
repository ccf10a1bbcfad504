/* ps_ckpt: a ps-worker checkpoint opened read-only, for the tools that use a trained model
 * without a server (ps-predict, ps-export): its `latest` (or one step-N), the flags that give
 * the model its shape (config), the dense parameters (dense.bin, checksum verified), the schema
 * the model was trained on, and every shard's store snapshot, opened read-only (nothing in the
 * checkpoint is written). docs/CHECKPOINTS.md describes the layout.
 *
 * Design decisions:
 * - A key is routed to its shard exactly as the client routes it (ps_shard_of: the shard count
 *   is the number of shard-I snapshots), and looked up with the store's own pull: a key the
 *   checkpoint has no row for gets the store's deterministic initial row (ps_store_init_row,
 *   from the table's spec and the key), the value a training run would have pulled.
 * - Everything that gives a key or a row its meaning comes from the checkpoint; a --schema
 *   given by the user must have the checkpoint's signature (the same keys and inputs), so a
 *   file in another text format of the same columns is fine and another model is refused.
 * - The model's interaction is read from the config (absent: dot, what every checkpoint before
 *   the line existed used); one this build cannot run is refused with one line. */
#ifndef PS_CKPT_H
#define PS_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ps_dlrm.h"
#include "ps_schema.h"
#include "ps_status.h"
#include "ps_store.h"
#include "ps_table.h"

typedef struct ps_ckpt ps_ckpt;

/* dir: a checkpoint directory (its `latest` is opened) or one step-N directory in it. schema:
 * NULL (the checkpoint's own) or "criteo"/a JSON file whose signature must be the checkpoint's.
 * PS_ERR_INVALID (bad argument: no such checkpoint, another schema, an unsupported
 * interaction), PS_ERR_NOT_FOUND, PS_ERR_CORRUPT, PS_ERR_IO: one line in err. */
ps_status ps_ckpt_open(const char *dir, const char *schema, ps_ckpt **out, ps_error *err);
/* The same without the shards' snapshots: only config, dense.bin and the schema are read (for
 * ps-predict --servers, whose rows come from serving servers: a scoring host needs no
 * snapshot). ps_ckpt_nshards is 0, ps_ckpt_table all zero, ps_ckpt_pull PS_ERR_INVALID; the
 * table is found by ps_ckpt_table_name. */
ps_status ps_ckpt_open_model(const char *dir, const char *schema, ps_ckpt **out,
                             ps_error *err);
void ps_ckpt_close(ps_ckpt **c);
/* For the tools' main(): ps_ckpt_open, and on failure the one line "PROG: --checkpoint DIR:
 * reason" on stderr. Returns 0 when open, else the exit code: 2 for a bad argument (no such
 * checkpoint, another schema, an unsupported interaction), 1 for a damaged or unreadable one. */
int ps_ckpt_open_main(const char *prog, const char *dir, const char *schema, ps_ckpt **out);

const char *ps_ckpt_dir(const ps_ckpt *c);   /* the step-N directory opened */
uint64_t ps_ckpt_step(const ps_ckpt *c);
/* A line NAME=VALUE of the config (the first), or NULL. */
const char *ps_ckpt_config(const ps_ckpt *c, const char *name);
const ps_schema *ps_ckpt_schema(const ps_ckpt *c);
const char *ps_ckpt_schema_file(const ps_ckpt *c);  /* "criteo" or the JSON file read */
uint64_t ps_ckpt_hash_buckets(const ps_ckpt *c);
/* The embedding table (its spec as the shards store it). */
const ps_table_spec *ps_ckpt_table(const ps_ckpt *c);
/* The embedding table's name (the config's table-name; criteo_emb, every run's table before
 * the line existed, when it has none). */
const char *ps_ckpt_table_name(const ps_ckpt *c);
/* The dense parameters (ps_dlrm.h's flat layout) and their count. */
const float *ps_ckpt_params(const ps_ckpt *c, size_t *n);
uint32_t ps_ckpt_nshards(const ps_ckpt *c);
ps_store *ps_ckpt_shard(ps_ckpt *c, uint32_t i);
/* The model's shape (MLPs, emb dim, sparse features, pooling) for batches of max_batch. The
 * strings point into c. */
void ps_ckpt_model_config(const ps_ckpt *c, int max_batch, ps_dlrm_config *cfg);
/* out[i*dim ..] = the row of keys[i] (initial row for a key no shard stores). Safe from
 * several threads. PS_ERR_NOMEM, or a store's failure (PS_ERR_IO, PS_ERR_CORRUPT). */
ps_status ps_ckpt_pull(ps_ckpt *c, const uint64_t *keys, size_t n, float *out);

#endif
