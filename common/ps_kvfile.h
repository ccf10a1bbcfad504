/* ps_kvfile: the checksummed NAME=VALUE text files of a checkpoint -- ps-worker's `config`
 * and every store snapshot's manifest `EMBER-SNAPSHOT` (docs/CHECKPOINTS.md). One format,
 * written and read here only:
 *
 *   # a comment line (skipped, like any line without '=')
 *   NAME=VALUE                  as many as the writer has; a name may repeat
 *   checksum=<16 hex digits>    the last line: XXH3-64 (seed 0) of every byte before it
 *
 * Readable with cat, and a damaged file is refused. A file without the checksum line (a
 * config from an older ps-worker) reads unverified: ps_kvfile_checksummed says so, and a
 * reader that needs one (the manifest) refuses it. The file is written atomically
 * (ps_write_atomic), so a crash leaves the old file or the new one. */
#ifndef PS_KVFILE_H
#define PS_KVFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

/* The checksum of a file's bytes before its checksum line. */
uint64_t ps_kvfile_sum(const char *text, size_t len);

/* Writes text (the NAME=VALUE and comment lines, each ending in '\n') then its checksum line
 * to path, atomically. PS_ERR_INVALID when text does not end in a newline; PS_ERR_IO (errno
 * kept), err naming the file. */
ps_status ps_kvfile_write(const char *path, const char *text, size_t len, ps_error *err);

/* A file read and verified (opaque; ps_kvfile_free). */
typedef struct ps_kvfile ps_kvfile;

/* Reads path and verifies its checksum line when it has one. PS_ERR_NOT_FOUND (no file),
 * PS_ERR_CORRUPT (a checksum mismatch: "checksum mismatch: the file is damaged"; a checksum
 * line that is malformed or not the last: "a bad checksum line"), PS_ERR_IO, PS_ERR_NOMEM;
 * err names the file. */
ps_status ps_kvfile_read(const char *path, ps_kvfile **out, ps_error *err);
void ps_kvfile_free(ps_kvfile **kv);

/* Whether the file had a checksum line (then it matched). */
bool ps_kvfile_checksummed(const ps_kvfile *kv);
/* The NAME=VALUE lines in file order: their count, and line i's name and value. */
size_t ps_kvfile_count(const ps_kvfile *kv);
const char *ps_kvfile_name(const ps_kvfile *kv, size_t i);
const char *ps_kvfile_value(const ps_kvfile *kv, size_t i);
/* The value of the first line named name, or NULL. */
const char *ps_kvfile_get(const ps_kvfile *kv, const char *name);

#endif
