/* ps_reader.c: sharded, prefetching Criteo batch reader (contract in ps_reader.h).
 *
 * Layers, bottom up:
 *  - byte source: read(2) for plain TSV, zlib's gzread for .gz, pread(2) for binary records;
 *  - text rounds: the W*B lines of a round are located with memchr; only lines that can be
 *    this rank's (index < (r+1)*B, see the tail rule) are copied, the rest are only counted,
 *    so a rank never parses the other ranks' lines;
 *  - fetch_raw: this rank's rows of the next round (or an end-of-epoch mark);
 *  - next_rows: one round of look-ahead, so a batch knows whether it ends the epoch;
 *  - optional shuffle window; rows -> ps_batch (labels, dense, keys);
 *  - a producer thread and a bounded pool of reusable batches (prefetch > 0).
 */
#include "ps_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ps_criteo_bin.h"
#include "ps_log.h"

#define READ_CHUNK (1u << 20)
#define MAX_LINE (16u << 20) /* a longer "line" is a corrupt file, not a sample */

void ps_reader_opts_default(ps_reader_opts *o) {
  memset(o, 0, sizeof *o);
  o->batch = 2048;
  o->world = 1;
  o->epochs = 1;
  o->bad_lines = PS_BAD_LINES_SKIP;
  o->tail = PS_TAIL_EVEN;
  o->prefetch = 4;
  o->log_bad_lines = 10;
}

enum fetch_kind { F_BATCH, F_END_EPOCH, F_END_ALL, F_ERROR };

typedef struct staged {
  ps_criteo_row *rows;
  size_t n;
  int kind;
  ps_status st;
  int epoch;
  uint64_t first_line;
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
  unsigned char *rec; /* binary read buffer, B records */

  /* text line splitter */
  char *buf;
  size_t buf_cap, buf_pos, buf_len;
  int src_eof;
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

  /* shuffle window */
  ps_criteo_row *win_rows;
  size_t *win_sizes;
  int *win_epoch;
  uint64_t *win_first;
  size_t win_count, win_pos, win_off;
  int win_last;

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

static void set_err(ps_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(ps_reader *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
}

/* ---------- format detection ---------- */

ps_status ps_data_detect(const char *path, ps_input_format *fmt) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO;
  unsigned char m[8] = {0};
  ssize_t n = read(fd, m, sizeof m);
  close(fd);
  if (n < 0) return PS_ERR_IO;
  if (n == 8 && memcmp(m, PS_CRITEO_BIN_MAGIC, 8) == 0) *fmt = PS_INPUT_BIN;
  else if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) *fmt = PS_INPUT_TSV_GZ;
  else *fmt = PS_INPUT_TSV;
  return PS_OK;
}

/* ---------- text source ---------- */

static ssize_t src_read(ps_reader *r, char *dst, size_t n) {
  if (r->fmt == PS_INPUT_TSV_GZ) {
    int got = gzread(r->gz, dst, (unsigned)n), zerr = Z_OK;
    /* zlib reports a truncated stream only through gzerror (Z_BUF_ERROR) once gzread has
     * returned everything before the cut: an I/O error of the run, not a short last line. */
    const char *why = got <= 0 ? gzerror(r->gz, &zerr) : NULL;
    if (got < 0 || zerr != Z_OK) {
      set_err(r, "%s: gzip read error: %s", r->path,
              zerr == Z_BUF_ERROR ? "the file is truncated (unexpected end of file)" : why);
      return -1;
    }
    return got;
  }
  for (;;) {
    ssize_t got = read(r->fd, dst, n);
    if (got >= 0) return got;
    if (errno == EINTR) continue;
    set_err(r, "%s: read: %s", r->path, strerror(errno));
    return -1;
  }
}

static ps_status src_rewind(ps_reader *r) {
  r->buf_pos = r->buf_len = 0;
  r->src_eof = 0;
  if (r->fmt == PS_INPUT_TSV_GZ) {
    if (gzrewind(r->gz) != 0) {
      set_err(r, "%s: cannot rewind", r->path);
      return PS_ERR_IO;
    }
  } else if (r->fmt == PS_INPUT_TSV && lseek(r->fd, 0, SEEK_SET) < 0) {
    set_err(r, "%s: cannot rewind: %s", r->path, strerror(errno));
    return PS_ERR_IO;
  }
  return PS_OK;
}

/* The next physical line into (*line, *len), without '\n'; *have = 0 at the end of the
 * input. The pointer is valid until the next call. */
static ps_status next_line(ps_reader *r, const char **line, size_t *len, int *have) {
  for (;;) {
    char *s = r->buf + r->buf_pos;
    size_t avail = r->buf_len - r->buf_pos;
    char *nl = avail ? memchr(s, '\n', avail) : NULL;
    if (nl) {
      *line = s;
      *len = (size_t)(nl - s);
      r->buf_pos += *len + 1;
      *have = 1;
      return PS_OK;
    }
    if (r->src_eof) {
      if (avail) { /* a last line without '\n' */
        *line = s;
        *len = avail;
        r->buf_pos = r->buf_len;
        *have = 1;
      } else {
        *have = 0;
      }
      return PS_OK;
    }
    /* Move the partial line to the front and read more. */
    if (r->buf_pos) {
      memmove(r->buf, s, avail);
      r->buf_pos = 0;
      r->buf_len = avail;
    }
    if (r->buf_cap - r->buf_len < READ_CHUNK / 2) {
      if (r->buf_cap >= MAX_LINE) {
        set_err(r, "%s:%llu: line longer than %u bytes", r->path,
                (unsigned long long)r->line_no + 1, MAX_LINE);
        return PS_ERR_PARSE;
      }
      char *nb = realloc(r->buf, r->buf_cap * 2);
      if (!nb) return PS_ERR_NOMEM;
      r->buf = nb;
      r->buf_cap *= 2;
    }
    ssize_t got = src_read(r, r->buf + r->buf_len, r->buf_cap - r->buf_len);
    if (got < 0) return PS_ERR_IO;
    if (got == 0) r->src_eof = 1;
    r->buf_len += (size_t)got;
  }
}

/* ---------- rows of this rank's next round ---------- */

static void own_slice(const ps_reader *r, size_t n_round, size_t *a, size_t *b) {
  if (n_round == r->W * r->B) {
    *a = r->r * r->B;
    *b = *a + r->B;
  } else { /* tail round, EVEN */
    *a = (size_t)(((unsigned __int128)n_round * r->r) / r->W);
    *b = (size_t)(((unsigned __int128)n_round * (r->r + 1)) / r->W);
  }
}

static uint64_t row_end_of(const ps_reader *r) { return r->o.row_end ? r->o.row_end : UINT64_MAX; }

/* Parses line (0-based number ln) into rows[*n]; applies the bad-line policy. */
static ps_status parse_one(ps_reader *r, const char *line, size_t len, uint64_t ln,
                           ps_criteo_row *rows, size_t *n) {
  char why[200];
  if (ps_criteo_parse_line(line, len, &rows[*n], why, sizeof why) == PS_OK) {
    (*n)++;
    return PS_OK;
  }
  uint64_t nbad = __atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
  if (r->o.bad_lines == PS_BAD_LINES_FAIL) {
    set_err(r, "%s:%llu: %s", r->path, (unsigned long long)ln + 1, why);
    return PS_ERR_PARSE;
  }
  if (nbad <= (uint64_t)r->o.log_bad_lines)
    PS_WARN("%s:%llu: %s (skipped%s)", r->path, (unsigned long long)ln + 1, why,
            nbad == (uint64_t)r->o.log_bad_lines ? "; further bad lines are only counted" : "");
  return PS_OK;
}

static ps_status start_epoch(ps_reader *r) {
  r->epoch_started = 1;
  r->epoch_done = 0;
  r->batch_idx = 0;
  r->round = 0;
  if (r->fmt == PS_INPUT_BIN) return PS_OK;
  ps_status st = src_rewind(r);
  if (st) return st;
  r->line_no = 0;
  while (r->line_no < r->o.row_begin) { /* lines before the range are not parsed */
    const char *l;
    size_t len;
    int have;
    if ((st = next_line(r, &l, &len, &have))) return st;
    if (!have) break;
    r->line_no++;
  }
  return PS_OK;
}

static ps_status fetch_text(ps_reader *r, staged *s) {
  size_t WB = r->W * r->B, keep = (r->r + 1) * r->B, n_round = 0, tlen = 0;
  uint64_t first = r->line_no, end = row_end_of(r);
  ps_status st;
  while (n_round < WB && r->line_no < end) {
    const char *l;
    size_t len;
    int have;
    if ((st = next_line(r, &l, &len, &have))) return st;
    if (!have) break;
    if (n_round < keep) {
      if (tlen + len > r->rtext_cap) {
        size_t cap = r->rtext_cap * 2;
        while (cap < tlen + len) cap *= 2;
        char *nt = realloc(r->rtext, cap);
        if (!nt) return PS_ERR_NOMEM;
        r->rtext = nt;
        r->rtext_cap = cap;
      }
      memcpy(r->rtext + tlen, l, len);
      r->roff[n_round] = tlen;
      r->rlen[n_round] = len;
      tlen += len;
    }
    n_round++;
    r->line_no++;
  }
  if (n_round < WB) r->epoch_done = 1; /* the input (or the range) ended in this round */
  if (n_round == 0 || (n_round < WB && r->o.tail == PS_TAIL_DROP)) {
    s->kind = F_END_EPOCH;
    return PS_OK;
  }
  size_t a, b;
  own_slice(r, n_round, &a, &b);
  s->n = 0;
  s->first_line = first;
  for (size_t i = a; i < b; i++)
    if ((st = parse_one(r, r->rtext + r->roff[i], r->rlen[i], first + i, s->rows, &s->n)))
      return st;
  s->kind = F_BATCH;
  return PS_OK;
}

static ps_status fetch_bin(ps_reader *r, staged *s) {
  uint64_t total = r->hdr.rows, begin = r->o.row_begin < total ? r->o.row_begin : total;
  uint64_t end = row_end_of(r) < total ? row_end_of(r) : total;
  uint64_t L = end > begin ? end - begin : 0, WB = (uint64_t)r->W * r->B;
  uint64_t start = begin + r->round * WB;
  if (start >= end) {
    r->epoch_done = 1;
    s->kind = F_END_EPOCH;
    return PS_OK;
  }
  size_t n_round = (size_t)(end - start < WB ? end - start : WB);
  r->round++;
  if (n_round < WB || start + WB == end || L == 0) r->epoch_done = 1;
  if (n_round < WB && r->o.tail == PS_TAIL_DROP) {
    s->kind = F_END_EPOCH;
    return PS_OK;
  }
  size_t a, b;
  own_slice(r, n_round, &a, &b);
  size_t cnt = b - a, bytes = cnt * PS_CRITEO_BIN_RECORD;
  off_t off = (off_t)(PS_CRITEO_BIN_HEADER + (start + a) * PS_CRITEO_BIN_RECORD);
  size_t done = 0;
  while (done < bytes) {
    ssize_t got = pread(r->fd, r->rec + done, bytes - done, off + (off_t)done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      set_err(r, "%s: read failed at record %llu", r->path, (unsigned long long)(start + a));
      return PS_ERR_IO;
    }
    done += (size_t)got;
  }
  s->first_line = start;
  for (size_t i = 0; i < cnt; i++) {
    if (ps_criteo_bin_decode(r->rec + i * PS_CRITEO_BIN_RECORD, &s->rows[i]) != PS_OK) {
      set_err(r, "%s: record %llu is corrupt", r->path, (unsigned long long)(start + a + i));
      return PS_ERR_CORRUPT;
    }
  }
  s->n = cnt;
  s->kind = F_BATCH;
  return PS_OK;
}

/* This rank's next round, an end-of-epoch mark, or the end of all epochs. */
static void fetch_raw(ps_reader *r, staged *s) {
  s->st = PS_OK;
  s->n = 0;
  if (r->all_done) {
    s->kind = F_END_ALL;
    return;
  }
  if (r->epoch_done) { /* the previous round ended the epoch */
    if (r->lines_epoch < 0) {
      int64_t n = r->fmt == PS_INPUT_BIN ? r->lines_epoch
                                         : (int64_t)(r->line_no - (r->o.row_begin < r->line_no
                                                                       ? r->o.row_begin
                                                                       : r->line_no));
      __atomic_store_n(&r->lines_epoch, n, __ATOMIC_RELAXED);
    }
    s->kind = F_END_EPOCH;
    s->epoch = r->epoch;
    r->epoch_started = 0;
    r->epoch_done = 0;
    if (++r->epoch >= r->o.epochs) r->all_done = 1;
    return;
  }
  if (!r->epoch_started) {
    if ((s->st = start_epoch(r))) {
      s->kind = F_ERROR;
      return;
    }
  }
  s->epoch = r->epoch;
  s->st = r->fmt == PS_INPUT_BIN ? fetch_bin(r, s) : fetch_text(r, s);
  if (s->st) {
    s->kind = F_ERROR;
    r->all_done = 1;
    return;
  }
  if (s->kind == F_END_EPOCH) { /* no batch in this round: close the epoch now */
    r->epoch_done = 1;
    fetch_raw(r, s);
  }
}

/* The next batch's rows in r->cur with one round of look-ahead. Returns F_BATCH (sets
 * *last), F_END_ALL or F_ERROR. Epochs without any batch are passed over. */
static int next_rows(ps_reader *r, int *last) {
  if (!r->la_valid) {
    fetch_raw(r, &r->la);
    r->la_valid = 1;
  }
  for (;;) {
    staged t = r->cur;
    r->cur = r->la;
    r->la = t;
    if (r->cur.kind == F_END_EPOCH) {
      fetch_raw(r, &r->la);
      continue;
    }
    if (r->cur.kind != F_BATCH) return r->cur.kind;
    fetch_raw(r, &r->la);
    *last = r->la.kind == F_END_EPOCH || r->la.kind == F_END_ALL;
    return F_BATCH;
  }
}

/* ---------- rows -> batch ---------- */

static void fill_batch(ps_reader *r, ps_batch *b, const ps_criteo_row *rows, size_t n) {
  b->n = n;
  b->nkeys = n * PS_CRITEO_NCAT;
  b->key_offsets = NULL;
  if (b->rows) memcpy(b->rows, rows, n * sizeof *rows);
  for (size_t i = 0; i < n; i++) {
    b->labels[i] = rows[i].label ? 1.0f : 0.0f;
    memcpy(b->dense + i * PS_CRITEO_NDENSE, rows[i].dense, sizeof rows[i].dense);
    ps_criteo_row_keys(&rows[i], r->o.hash_buckets, b->keys + i * PS_CRITEO_NCAT);
  }
  __atomic_add_fetch(&r->rows_out, n, __ATOMIC_RELAXED);
}

static uint64_t rng_next(uint64_t *s) { return ps_mix64(*s += 0x9e3779b97f4a7c15ull); }

/* Fills b with the next batch. *end = 1 when nothing is left. */
static ps_status produce(ps_reader *r, ps_batch *b, int *end) {
  *end = 0;
  int last = 0;
  if (r->o.shuffle_window <= 1) {
    int k = next_rows(r, &last);
    if (k == F_END_ALL) {
      *end = 1;
      return PS_OK;
    }
    if (k == F_ERROR) return r->cur.st;
    fill_batch(r, b, r->cur.rows, r->cur.n);
    b->epoch = r->cur.epoch;
    b->first_line = r->cur.first_line;
    b->last_in_epoch = last;
    b->index = r->batch_idx++;
    if (last) r->batch_idx = 0;
    return PS_OK;
  }
  if (r->win_pos == r->win_count) { /* refill and shuffle a window */
    r->win_count = r->win_pos = r->win_off = 0;
    size_t total = 0;
    r->win_last = 0;
    while (r->win_count < (size_t)r->o.shuffle_window) {
      int k = next_rows(r, &last);
      if (k == F_ERROR && r->win_count == 0) return r->cur.st;
      if (k != F_BATCH) break;
      memcpy(r->win_rows + total, r->cur.rows, r->cur.n * sizeof(ps_criteo_row));
      r->win_sizes[r->win_count] = r->cur.n;
      r->win_epoch[r->win_count] = r->cur.epoch;
      r->win_first[r->win_count] = r->cur.first_line;
      r->win_count++;
      total += r->cur.n;
      if (last) {
        r->win_last = 1;
        break;
      }
    }
    if (r->win_count == 0) {
      *end = 1;
      return PS_OK;
    }
    uint64_t s = ps_mix64(r->o.seed ^ ps_mix64(((uint64_t)r->win_epoch[0] << 40) ^
                                               ((uint64_t)r->r << 20) ^ r->win_first[0]));
    for (size_t i = total; i > 1; i--) {
      size_t j = (size_t)(((unsigned __int128)rng_next(&s) * i) >> 64);
      ps_criteo_row t = r->win_rows[i - 1];
      r->win_rows[i - 1] = r->win_rows[j];
      r->win_rows[j] = t;
    }
  }
  size_t n = r->win_sizes[r->win_pos];
  fill_batch(r, b, r->win_rows + r->win_off, n);
  b->epoch = r->win_epoch[r->win_pos];
  b->first_line = r->win_first[r->win_pos];
  r->win_off += n;
  r->win_pos++;
  b->last_in_epoch = r->win_last && r->win_pos == r->win_count;
  b->index = r->batch_idx++;
  if (b->last_in_epoch) r->batch_idx = 0;
  return PS_OK;
}

/* ---------- pool and thread ---------- */

static void batch_free(ps_batch *b);
static ps_batch *batch_new(size_t cap, int keep_rows) {
  ps_batch *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  if (keep_rows && !(b->rows = malloc(cap * sizeof(ps_criteo_row)))) {
    free(b);
    return NULL;
  }
  b->cap = cap;
  b->labels = malloc(cap * sizeof(float));
  b->dense = malloc(cap * PS_CRITEO_NDENSE * sizeof(float));
  b->keys = malloc(cap * PS_CRITEO_NCAT * sizeof(uint64_t));
  if (!b->labels || !b->dense || !b->keys) {
    batch_free(b);
    return NULL;
  }
  return b;
}

static void batch_free(ps_batch *b) {
  if (!b) return;
  free(b->labels), free(b->dense), free(b->keys), free(b->rows), free(b);
}

static void *reader_thread(void *arg) {
  ps_reader *r = arg;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    while (!r->stop && r->nfree == 0) pthread_cond_wait(&r->cv_free, &r->mu);
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      return NULL;
    }
    ps_batch *b = r->free_list[--r->nfree];
    pthread_mutex_unlock(&r->mu);

    int end = 0;
    ps_status st = produce(r, b, &end);

    pthread_mutex_lock(&r->mu);
    ready_item it = {b, st};
    if (end || st) {
      r->free_list[r->nfree++] = b;
      it.b = NULL;
    }
    r->ready[(r->rq_head + r->rq_len++) % (r->npool + 1)] = it;
    pthread_cond_signal(&r->cv_ready);
    pthread_mutex_unlock(&r->mu);
    if (end || st) return NULL;
  }
}

ps_status ps_reader_create(const char *path, const ps_reader_opts *opts, ps_reader **out,
                           char *err, size_t errlen) {
  *out = NULL;
  ps_reader_opts o;
  if (opts) o = *opts;
  else ps_reader_opts_default(&o);
  if (o.batch <= 0 || o.world <= 0 || o.rank < 0 || o.rank >= o.world || o.epochs < 0 ||
      o.prefetch < 0 || o.shuffle_window < 0 || (o.row_end && o.row_end < o.row_begin) ||
      (o.hash_buckets && o.hash_buckets > UINT64_MAX / PS_CRITEO_NCAT)) {
    if (err) snprintf(err, errlen, "reader: bad options (batch %d, rank %d of %d)", o.batch, o.rank, o.world);
    return PS_ERR_INVALID;
  }
  ps_input_format fmt;
  ps_status st = ps_data_detect(path, &fmt);
  if (st) {
    if (err) snprintf(err, errlen, "%s: %s", path, st == PS_ERR_NOT_FOUND ? "no such file" : strerror(errno));
    return st;
  }
  ps_reader *r = calloc(1, sizeof *r);
  if (!r) return PS_ERR_NOMEM;
  r->o = o;
  r->fmt = fmt;
  r->B = (size_t)o.batch;
  r->W = (size_t)o.world;
  r->r = (size_t)o.rank;
  r->fd = -1;
  r->lines_epoch = -1;
  r->path = strdup(path);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv_ready, NULL);
  pthread_cond_init(&r->cv_free, NULL);
  st = PS_ERR_NOMEM;
  if (!r->path) goto fail;

  r->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (r->fd < 0) {
    if (err) snprintf(err, errlen, "%s: %s", path, strerror(errno));
    st = PS_ERR_IO;
    goto fail;
  }
  if (fmt == PS_INPUT_BIN) {
    unsigned char hb[PS_CRITEO_BIN_HEADER];
    struct stat sb;
    if (pread(r->fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb ||
        ps_criteo_bin_decode_header(hb, &r->hdr) != PS_OK || fstat(r->fd, &sb) != 0 ||
        (uint64_t)sb.st_size != PS_CRITEO_BIN_HEADER + r->hdr.rows * PS_CRITEO_BIN_RECORD) {
      if (err) snprintf(err, errlen, "%s: not a valid Ember binary file (bad header or size)", path);
      st = PS_ERR_CORRUPT;
      goto fail;
    }
    uint64_t total = r->hdr.rows, b0 = o.row_begin < total ? o.row_begin : total;
    uint64_t e0 = (o.row_end && o.row_end < total) ? o.row_end : total;
    r->lines_epoch = (int64_t)(e0 - b0);
    if (!(r->rec = malloc(r->B * PS_CRITEO_BIN_RECORD))) goto fail;
  } else {
    if (fmt == PS_INPUT_TSV_GZ) {
      r->gz = gzdopen(dup(r->fd), "rb");
      if (!r->gz) goto fail;
      gzbuffer(r->gz, 1 << 18);
    }
    r->buf_cap = READ_CHUNK;
    r->rtext_cap = 1u << 16;
    size_t keep = (r->r + 1) * r->B;
    r->buf = malloc(r->buf_cap);
    r->rtext = malloc(r->rtext_cap);
    r->roff = malloc(keep * sizeof(size_t));
    r->rlen = malloc(keep * sizeof(size_t));
    if (!r->buf || !r->rtext || !r->roff || !r->rlen) goto fail;
  }
  r->cur.rows = malloc(r->B * sizeof(ps_criteo_row));
  r->la.rows = malloc(r->B * sizeof(ps_criteo_row));
  if (!r->cur.rows || !r->la.rows) goto fail;
  if (o.shuffle_window > 1) {
    size_t S = (size_t)o.shuffle_window;
    r->win_rows = malloc(S * r->B * sizeof(ps_criteo_row));
    r->win_sizes = malloc(S * sizeof(size_t));
    r->win_epoch = malloc(S * sizeof(int));
    r->win_first = malloc(S * sizeof(uint64_t));
    if (!r->win_rows || !r->win_sizes || !r->win_epoch || !r->win_first) goto fail;
  }
  if (o.epochs == 0) r->all_done = 1;

  r->npool = o.prefetch > 0 ? (size_t)o.prefetch : 1;
  r->pool = calloc(r->npool, sizeof *r->pool);
  r->free_list = calloc(r->npool, sizeof *r->free_list);
  r->ready = calloc(r->npool + 1, sizeof *r->ready);
  if (!r->pool || !r->free_list || !r->ready) goto fail;
  for (size_t i = 0; i < r->npool; i++) {
    if (!(r->pool[i] = batch_new(r->B, o.keep_rows))) goto fail;
    r->free_list[r->nfree++] = r->pool[i];
  }
  if (o.prefetch > 0) {
    if (pthread_create(&r->th, NULL, reader_thread, r) != 0) {
      st = PS_ERR_INTERNAL;
      goto fail;
    }
    r->threaded = 1;
  }
  *out = r;
  return PS_OK;
fail:
  if (err && st == PS_ERR_NOMEM) snprintf(err, errlen, "%s: out of memory", path);
  ps_reader_destroy(&r);
  return st;
}

ps_status ps_reader_next(ps_reader *r, ps_batch **out) {
  *out = NULL;
  if (!r->threaded) {
    if (r->finished) return PS_OK;
    if (r->nfree == 0) {
      set_err(r, "reader: ps_reader_next called while a batch is still held (prefetch 0)");
      return PS_ERR_INVALID;
    }
    ps_batch *b = r->free_list[--r->nfree];
    int end = 0;
    ps_status st = produce(r, b, &end);
    if (st || end) {
      r->free_list[r->nfree++] = b;
      r->finished = 1;
      return st;
    }
    *out = b;
    return PS_OK;
  }
  pthread_mutex_lock(&r->mu);
  if (r->finished) {
    pthread_mutex_unlock(&r->mu);
    return PS_OK;
  }
  while (r->rq_len == 0) pthread_cond_wait(&r->cv_ready, &r->mu);
  ready_item it = r->ready[r->rq_head];
  r->rq_head = (r->rq_head + 1) % (r->npool + 1);
  r->rq_len--;
  if (!it.b) r->finished = 1;
  pthread_mutex_unlock(&r->mu);
  *out = it.b;
  return it.st;
}

void ps_reader_release(ps_reader *r, ps_batch *b) {
  if (!b) return;
  pthread_mutex_lock(&r->mu);
  r->free_list[r->nfree++] = b;
  pthread_cond_signal(&r->cv_free);
  pthread_mutex_unlock(&r->mu);
}

void ps_reader_destroy(ps_reader **rp) {
  if (!rp || !*rp) return;
  ps_reader *r = *rp;
  *rp = NULL;
  if (r->threaded) {
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv_free);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
  }
  if (r->pool)
    for (size_t i = 0; i < r->npool; i++) batch_free(r->pool[i]);
  free(r->pool), free(r->free_list), free(r->ready);
  if (r->gz) gzclose(r->gz);
  if (r->fd >= 0) close(r->fd);
  free(r->rec), free(r->buf), free(r->rtext), free(r->roff), free(r->rlen);
  free(r->cur.rows), free(r->la.rows);
  free(r->win_rows), free(r->win_sizes), free(r->win_epoch), free(r->win_first);
  free(r->path);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv_ready);
  pthread_cond_destroy(&r->cv_free);
  free(r);
}

ps_input_format ps_reader_format(const ps_reader *r) { return r->fmt; }
uint64_t ps_reader_bad_lines(const ps_reader *r) { return __atomic_load_n(&r->bad, __ATOMIC_RELAXED); }
uint64_t ps_reader_rows(const ps_reader *r) { return __atomic_load_n(&r->rows_out, __ATOMIC_RELAXED); }
int64_t ps_reader_lines_per_epoch(const ps_reader *r) {
  return __atomic_load_n(&r->lines_epoch, __ATOMIC_RELAXED);
}
const char *ps_reader_error(const ps_reader *r) { return r->err; }

ps_status ps_data_count_lines(const char *path, uint64_t *lines) {
  ps_input_format fmt;
  ps_status st = ps_data_detect(path, &fmt);
  if (st) return st;
  if (fmt == PS_INPUT_BIN) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PS_ERR_IO;
    unsigned char hb[PS_CRITEO_BIN_HEADER];
    ps_criteo_bin_header h;
    ssize_t n = pread(fd, hb, sizeof hb, 0);
    close(fd);
    if (n != (ssize_t)sizeof hb || ps_criteo_bin_decode_header(hb, &h)) return PS_ERR_CORRUPT;
    *lines = h.rows;
    return PS_OK;
  }
  gzFile g = gzopen(path, "rb");
  if (!g) return PS_ERR_IO;
  char *buf = malloc(READ_CHUNK);
  if (!buf) {
    gzclose(g);
    return PS_ERR_NOMEM;
  }
  uint64_t n = 0;
  int got, lastc = '\n';
  while ((got = gzread(g, buf, READ_CHUNK)) > 0) {
    for (char *p = buf, *e = buf + got; (p = memchr(p, '\n', (size_t)(e - p))); p++) n++;
    lastc = (unsigned char)buf[got - 1];
  }
  int zerr = Z_OK;
  if (got == 0) (void)gzerror(g, &zerr); /* a truncated .gz: Z_BUF_ERROR */
  gzclose(g);
  free(buf);
  if (got < 0 || zerr != Z_OK) return PS_ERR_IO;
  if (lastc != '\n') n++;
  *lines = n;
  return PS_OK;
}
