/* ps_reader_int.h: the reader's state and the seams between its files (private to worker/data).
 *
 *   ps_reader_source.c  bytes -> this rank's rows of one round: the text source (TSV and TSV.gz
 *                       lines, located with memchr; only this rank's lines are parsed) and the
 *                       binary source (pread of this rank's records);
 *   ps_reader_batch.c   rounds -> batches: epoch sequencing, one round of look-ahead (so a
 *                       batch knows it ends the epoch), the shuffle window or the shuffle
 *                       buffer (ps_shuffle.c) over the staged records, records -> ps_batch;
 *   ps_reader.c         the public API: options, create/destroy, the producer thread and the
 *                       bounded pool of reusable batches.
 * The per-line loop stays inside ps_reader_source.c; calls across files are per round or per
 * batch, so the split costs nothing measurable. */
#ifndef PS_READER_INT_H
#define PS_READER_INT_H

#include <pthread.h>
#include <stdint.h>
#include <zlib.h>

#include "ps_criteo_bin.h"
#include "ps_reader.h"
#include "ps_sample.h"
#include "ps_schema.h"

#define READ_CHUNK (1u << 20)
#define MAX_LINE (16u << 20) /* a longer "line" is a corrupt file, not a sample */

enum fetch_kind { F_BATCH, F_END_EPOCH, F_END_ALL, F_ERROR };

typedef struct staged { /* this rank's rows of one round, as sample records */
  ps_sample_buf data;
  size_t *off;  /* [B] where each record starts in data */
  size_t n;
  int kind;
  ps_status st;
  int epoch;
  uint64_t first_line;
  uint64_t end_line, end_byte; /* the input position after the round */
} staged;

typedef struct ready_item {
  ps_batch *b;
  ps_status st;
} ready_item;

struct ps_reader {
  char *path;
  ps_reader_opts o;
  ps_input_format fmt;
  size_t B, W, r;

  /* source */
  int fd;
  gzFile gz;
  ps_criteo_bin_header hdr;
  unsigned char *rec; /* binary read buffer: B version 1 records, or B + 1 index entries */

  /* what a line means, and how values become keys */
  ps_schema *own_schema; /* the built-in one, when opts.schema is NULL */
  const ps_schema *schema;
  ps_sample_keymap km;
  int nd, nc, header;
  /* a text input's first data lines, for the missing-separator warning (ps_schema_sep_*);
   * NULL once judged, for the built-in Criteo layout and for binary files */
  ps_schema_sep_stats *sep;

  /* text line splitter */
  char *buf;
  size_t buf_cap, buf_pos, buf_len;
  int src_eof;
  uint64_t src_bytes; /* text bytes read from the input's start (start_byte included) */
  /* text round: copied lines */
  char *rtext;
  size_t rtext_cap;
  size_t *roff, *rlen;

  /* epoch state */
  int epoch;
  int epoch_started, epoch_done, all_done;
  uint64_t line_no;   /* next physical line (0-based) */
  uint64_t round;     /* binary: next round */
  uint64_t batch_idx; /* this rank's batch index in the epoch */

  /* look-ahead */
  staged cur, la;
  int la_valid;

  /* shuffle window: the records of its batches, permuted through win_off */
  ps_sample_buf win_data;
  size_t *win_off;
  size_t *win_sizes;
  int *win_epoch;
  uint64_t *win_first;
  size_t win_count, win_pos, win_at;
  int win_last;

  /* shuffle buffer of sample records (ps_shuffle.h), made on the first batch */
  struct ps_shuffle *shuf;

  /* counters (read by other threads) */
  uint64_t bad, rows_out;
  int64_t lines_epoch;
  char err[512];

  /* pool and thread */
  ps_batch **pool;
  size_t npool;
  ps_batch **free_list;
  size_t nfree;
  ready_item *ready;
  size_t rq_head, rq_len;
  int threaded, stop, finished;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv_ready, cv_free;
};

/* This rank's slice [*a, *b) of a round of n_round lines (the tail rule of ps_reader.h). */
static inline void own_slice(const ps_reader *r, size_t n_round, size_t *a, size_t *b) {
  if (n_round == r->W * r->B) {
    *a = r->r * r->B;
    *b = *a + r->B;
  } else { /* tail round, EVEN */
    *a = (size_t)(((unsigned __int128)n_round * r->r) / r->W);
    *b = (size_t)(((unsigned __int128)n_round * (r->r + 1)) / r->W);
  }
}

/* One past the last data line used (row_end, or no bound). */
static inline uint64_t row_end_of(const ps_reader *r) {
  return r->o.row_end ? r->o.row_end : UINT64_MAX;
}

/* ps_reader_source.c. start_epoch rewinds a text source and skips to row_begin; fetch_text /
 * fetch_bin read the next round into s (F_BATCH with this rank's rows, or F_END_EPOCH) and on
 * failure leave the message in r->err. */
ps_status ps_reader_start_epoch(ps_reader *r);
ps_status ps_reader_fetch_text(ps_reader *r, staged *s);
ps_status ps_reader_fetch_bin(ps_reader *r, staged *s);

/* ps_reader_stream.c: read(2) of a stream or a followed file: waits for data (poll on a pipe,
 * a short sleep at a growing file's end) and returns 0 only at the input's end: the writer
 * closed a pipe, idle_s passed without a byte, or a stop flag (the caller's or destroy's). A
 * first chunk that is gzip or Ember binary is refused (one line in r->err): a stream is text. */
ssize_t ps_reader_stream_read(ps_reader *r, char *dst, size_t n);

/* ps_reader_batch.c. produce fills b with the next batch (*end = 1 when nothing is left). */
ps_status ps_reader_produce(ps_reader *r, ps_batch *b, int *end);
/* criteo_rows: also ps_batch.rows (keep_rows with the built-in criteo schema). */
ps_batch *ps_reader_batch_new(size_t cap, int ndense, int ncat, int keep_rows, int criteo_rows);
void ps_reader_batch_free(ps_batch *b);

#endif
