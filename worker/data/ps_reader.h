/* ps_reader: input for training and evaluation: reads a file (text as its schema says —
 * ps_schema.h, the built-in Criteo TSV by default —, gzipped text, or the binary format of
 * ps_criteo_bin.h, detected by its magic), shards it across W workers, parses, maps
 * categorical values to keys and hands out batches, on its own thread ahead of the consumer
 * (a bounded queue of reusable batches). A schema's header line is checked against its
 * column names at the start of every epoch and is not a data line (row numbers below count
 * data lines; messages give physical line numbers).
 *
 * Sharding (deterministic, the same for text and binary input). The data lines of one epoch
 * (physical lines in [row_begin, row_end), counting bad lines, so every rank agrees without
 * parsing the others' lines) are cut into rounds of W*B consecutive lines. In round k rank r
 * takes lines k*W*B + [r*B, (r+1)*B). So W workers with batch B see, per step, exactly the
 * rows one worker with batch W*B sees (the sync-mode equivalence). The last round, with
 * R < W*B lines:
 *   tail EVEN (default): rank r takes lines base + [floor(R*r/W), floor(R*(r+1)/W)); every
 *     row is used once, and when R < W some ranks get an empty batch (n = 0), which they
 *     must still take part in (allreduce of zeros).
 *   tail DROP: the round is dropped by every rank.
 * Either way every rank sees the same number of batches per epoch: ceil(L/(W*B)) (EVEN) or
 * floor(L/(W*B)) (DROP) for L lines. Bad lines (skip policy) are dropped from their batch,
 * which is then shorter; they are counted by the rank that owns them.
 *
 * Shuffle (off by default; it breaks the sync equivalence above): rows of `shuffle_window`
 * consecutive batches of this rank are permuted among themselves (seeded by seed, epoch,
 * rank, window) and re-cut into batches of the original sizes.
 *
 * Errors (the ps_error convention of ps_status.h): a bad line gives "FILE:LINE: reason".
 * Policy FAIL: ps_reader_next returns PS_ERR_PARSE with that message in err. Policy SKIP: the
 * line is counted (ps_reader_bad_lines) and the first `log_bad_lines` are logged as warnings.
 * A read or decompression error (a truncated .gz included) is PS_ERR_IO and a corrupt binary
 * record PS_ERR_CORRUPT, whatever the policy: errors of the file, not bad lines; the message
 * names the file. */
#ifndef PS_READER_H
#define PS_READER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_criteo.h"
#include "ps_schema.h"
#include "ps_status.h"

/* A batch of n samples, row-major, for a schema of ND dense inputs and NC categorical features.
 * Bag b = i*NC + f (sample i, feature f) holds keys[key_offsets[b] .. key_offsets[b+1]): one
 * key for a one-value column, 0 or more for a multi-hot one (CSR, n*NC + 1 offsets). */
typedef struct ps_batch {
  size_t n;                 /* samples */
  size_t nkeys;             /* keys in use */
  float *labels;            /* [n] 0.0 or 1.0 */
  float *dense;             /* [n*ND] transformed */
  uint64_t *keys;           /* [nkeys] */
  uint32_t *key_offsets;    /* [n*NC + 1] */
  int epoch;                /* 0-based */
  uint64_t index;           /* batch index within this rank's epoch, 0-based */
  int last_in_epoch;        /* 1 on this rank's last batch of the epoch */
  uint64_t first_line;      /* 0-based data line of the round's first line (for logs) */
  uint64_t end_line;        /* the input position after this batch's round (every rank reads
                             * every line, so all ranks agree): data lines read, and for text
                             * the byte offset of the next line (uncompressed for .gz); in file
                             * order only (0 with a shuffle window or buffer) */
  uint64_t end_byte;
  ps_criteo_row *rows;      /* [n] the parsed rows, only with opts.keep_rows and the built-in
                             * criteo schema, else NULL (a binary sample with strings or bags
                             * then reads as corrupt) */
  unsigned char *recs;      /* with opts.keep_rows: the n sample records (ps_sample.h) ... */
  size_t *rec_off;          /* ... sample i at recs + rec_off[i] */
  size_t cap;               /* capacity in samples (internal) */
  size_t keys_cap, recs_cap; /* (internal) */
} ps_batch;

typedef enum ps_bad_lines { PS_BAD_LINES_SKIP = 0, PS_BAD_LINES_FAIL = 1 } ps_bad_lines;
typedef enum ps_tail { PS_TAIL_EVEN = 0, PS_TAIL_DROP = 1 } ps_tail;
typedef enum ps_input_format { PS_INPUT_TSV = 0, PS_INPUT_TSV_GZ = 1, PS_INPUT_BIN = 2 } ps_input_format;

typedef struct ps_reader_opts {
  int batch;               /* samples per batch per rank (default 2048) */
  int rank, world;         /* default 0 of 1 */
  int epochs;              /* default 1 */
  ps_bad_lines bad_lines;  /* default SKIP */
  ps_tail tail;            /* default EVEN */
  uint64_t hash_buckets;   /* 0 (default) = open vocabulary; else keys f*N + v mod N */
  int prefetch;            /* batches queued ahead by the reader thread (default 4);
                            * 0 = no thread, ps_reader_next parses in the caller */
  int shuffle_window;      /* batches per shuffle window; 0 or 1 = off (default) */
  uint64_t seed;           /* for the shuffle */
  uint64_t row_begin;      /* first data line used (0-based, default 0) */
  uint64_t row_end;        /* one past the last line used; 0 = to the end of the file */
  int log_bad_lines;       /* bad lines logged in full (default 10) */
  int keep_rows;           /* also fill ps_batch.recs/rows (the converter needs raw values) */
  const ps_schema *schema; /* what a text line means; NULL = the built-in criteo. Borrowed:
                            * it must outlive the reader */
  size_t shuffle_buffer;   /* sample records held in the seeded shuffle buffer of
                            * ps_shuffle.h (seed, rank), any schema; 0 = off (default). Not
                            * with keep_rows or shuffle_window. */
  /* Streams (ps_reader_stream.c). `stream`: path is "-" (stdin) or a named pipe: read once, in
   * order, as plain text (epochs 1, no rewind, no shuffle). `follow`: a regular text file that
   * grows: at its end the reader waits for more lines. Either ends at the writer's end (a
   * stream), after idle_s seconds without a new byte (0: never), or once *stop is non-zero (a
   * signal handler's flag; NULL: never) and no data is waiting. Neither waits for a round of look-ahead: a batch
   * goes out once its lines are read (last_in_epoch stays 0). */
  int stream, follow;
  double idle_s;
  const volatile sig_atomic_t *stop;
  /* Start at this byte offset of a plain text file, counting data lines from start_line (a
   * position a checkpoint recorded: ps_batch.end_byte/end_line); the header is not checked
   * again. 0, 0: the start. */
  uint64_t start_byte, start_line;
} ps_reader_opts;

void ps_reader_opts_default(ps_reader_opts *o);

typedef struct ps_reader ps_reader;

/* Opens `path` and (prefetch > 0) starts the reader thread. Errors (missing file, bad
 * options, corrupt binary header) come back here, with a message in err when not NULL. */
ps_status ps_reader_create(const char *path, const ps_reader_opts *opts, ps_reader **out,
                           ps_error *err);
/* Next batch, or *out = NULL at the end of the last epoch. The batch stays valid until
 * ps_reader_release; at most `prefetch` (or 1) batches may be held at once. On failure err
 * (when not NULL) says why; an empty message (e.g. out of memory) reads as ps_error_str's
 * text for the code. After a failure or the end, further calls return PS_OK, *out = NULL. */
ps_status ps_reader_next(ps_reader *r, ps_batch **out, ps_error *err);
void ps_reader_release(ps_reader *r, ps_batch *b);
/* Stops the thread (also mid-file) and frees everything; *r = NULL. */
void ps_reader_destroy(ps_reader **r);

ps_input_format ps_reader_format(const ps_reader *r);
/* Bad lines counted so far (this rank's lines only; sum over ranks for a total). */
uint64_t ps_reader_bad_lines(const ps_reader *r);
/* Rows put into batches so far, all epochs (with prefetch, may run ahead of the consumer). */
uint64_t ps_reader_rows(const ps_reader *r);
/* Data lines in the file (after row_begin/row_end) when known: from the binary header, or
 * after the first epoch of a text file; -1 before that. */
int64_t ps_reader_lines_per_epoch(const ps_reader *r);

/* Detects the format of a file by its first bytes (binary magic, gzip magic, else TSV). */
ps_status ps_data_detect(const char *path, ps_input_format *fmt);
/* "-" or a named pipe: an input that can be read only once (ps_reader_opts.stream). */
int ps_data_is_stream(const char *path);
/* Counts data lines of a TSV/TSV.gz file (a trailing line without '\n' counts) or reads the
 * row count of a binary file. For progress/ETA. */
ps_status ps_data_count_lines(const char *path, uint64_t *lines);
/* The same less the header line of a text file when the schema has one (NULL: criteo). */
ps_status ps_data_count_rows(const char *path, const ps_schema *schema, uint64_t *rows);
/* With a schema that has a header: checks the first line of a text file against it (a binary
 * file has no header: PS_OK). One line in err naming the file and the mismatch. */
ps_status ps_data_check_header(const char *path, const ps_schema *schema, ps_error *err);

#endif
