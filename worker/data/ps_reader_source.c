/* ps_reader_source.c: where the reader's rows come from: this rank's rows of the next round,
 * from a text file (TSV or TSV.gz) or from binary records (ps_criteo_bin.h).
 *
 * Text: read(2) for plain TSV, zlib's gzread for .gz, into one growing buffer; the W*B lines of
 * a round are located with memchr, and only lines that can be this rank's (index < (r+1)*B, see
 * the tail rule) are copied, the rest are only counted, so a rank never parses the other
 * ranks' lines. Binary: fixed-size records, so a rank preads exactly its slice. Also here: the
 * format detection and line counting of whole files (ps_data_detect, ps_data_count_lines). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_log.h"
#include "ps_reader_int.h"

#define SRC_TRY(x)       \
  do {                            \
    ps_status st_ = (x);          \
    if (st_ != PS_OK) return st_; \
  } while (0)

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
  if (r->o.stream || r->o.follow) return ps_reader_stream_read(r, dst, n);
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

/* To the input's start, or to start_byte (a plain file). A stream is never rewound: it has one
 * epoch, read from where its writer is. */
static ps_status src_rewind(ps_reader *r) {
  r->buf_pos = r->buf_len = 0;
  r->src_eof = 0;
  r->src_bytes = r->o.start_byte;
  if (r->o.stream) return PS_OK;
  if (r->fmt == PS_INPUT_TSV_GZ) {
    if (gzrewind(r->gz) != 0) {
      set_err(r, "%s: cannot rewind", r->path);
      return PS_ERR_IO;
    }
  } else if (r->fmt == PS_INPUT_TSV && lseek(r->fd, (off_t)r->o.start_byte, SEEK_SET) < 0) {
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
    r->src_bytes += (uint64_t)got;
  }
}

/* ---------- rows of this rank's next round ---------- */

/* The missing-separator warning (ps_schema.h) once, from the first SEP_SAMPLE data lines this
 * reader parses (or all of them, at the end of its first epoch): one WARN line, not an error,
 * since a column of such values may be meant as one category each. */
#define SEP_SAMPLE 1000
static void judge_separators(ps_reader *r) {
  char msg[512];
  if (ps_schema_sep_hint(r->schema, r->sep, msg, sizeof msg)) PS_WARN("%s: %s", r->path, msg);
  ps_schema_sep_free(&r->sep);
}

/* Parses data line ln (0-based) into the next record of s; applies the bad-line policy. */
static ps_status parse_one(ps_reader *r, const char *line, size_t len, uint64_t ln, staged *s) {
  ps_error why;
  size_t at = s->data.len;
  if (r->sep) {
    ps_schema_sep_scan(r->schema, r->sep, line, len);
    if (ps_schema_sep_lines(r->sep) >= SEP_SAMPLE) judge_separators(r);
  }
  ps_status st = ps_schema_parse_line(r->schema, line, len, &s->data, &why);
  if (st == PS_OK) {
    s->off[s->n++] = at;
    return PS_OK;
  }
  if (st == PS_ERR_NOMEM) return st;
  uint64_t nbad = __atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
  unsigned long long phys = (unsigned long long)(ln + 1 + (uint64_t)r->header);
  if (r->o.bad_lines == PS_BAD_LINES_FAIL) {
    set_err(r, "%s:%llu: %s", r->path, phys, why.msg);
    return PS_ERR_PARSE;
  }
  if (nbad <= (uint64_t)r->o.log_bad_lines)
    PS_WARN("%s:%llu: %s (skipped%s)", r->path, phys, why.msg,
            nbad == (uint64_t)r->o.log_bad_lines ? "; further bad lines are only counted" : "");
  return PS_OK;
}

ps_status ps_reader_start_epoch(ps_reader *r) {
  r->epoch_started = 1;
  r->epoch_done = 0;
  r->batch_idx = 0;
  r->round = 0;
  if (r->fmt == PS_INPUT_BIN) return PS_OK;
  ps_status st = src_rewind(r);
  if (st) return st;
  r->line_no = r->o.start_line;
  if (r->header && r->o.start_byte == 0) { /* not a data line: checked, not counted */
    const char *l;
    size_t len;
    int have;
    ps_error why;
    if ((st = next_line(r, &l, &len, &have))) return st;
    if (have && ps_schema_check_header(r->schema, l, len, &why) != PS_OK) {
      set_err(r, "%s:1: %s", r->path, why.msg);
      return PS_ERR_PARSE;
    }
  }
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

ps_status ps_reader_fetch_text(ps_reader *r, staged *s) {
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
  s->end_line = r->line_no;
  s->end_byte = r->src_bytes - (r->buf_len - r->buf_pos);
  if (n_round == 0 || (n_round < WB && r->o.tail == PS_TAIL_DROP)) {
    if (r->sep) judge_separators(r);
    s->kind = F_END_EPOCH;
    return PS_OK;
  }
  size_t a, b;
  own_slice(r, n_round, &a, &b);
  s->n = 0;
  s->data.len = 0;
  s->first_line = first;
  for (size_t i = a; i < b; i++)
    if ((st = parse_one(r, r->rtext + r->roff[i], r->rlen[i], first + i, s)))
      return st;
  if (r->epoch_done && r->sep) judge_separators(r);
  s->kind = F_BATCH;
  return PS_OK;
}

/* pread of exactly n bytes at off. */
static ps_status read_at(ps_reader *r, void *dst, size_t n, uint64_t off, uint64_t rec) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = pread(r->fd, (char *)dst + done, n - done, (off_t)(off + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      set_err(r, "%s: read failed at record %llu", r->path, (unsigned long long)rec);
      return PS_ERR_IO;
    }
    done += (size_t)got;
  }
  return PS_OK;
}

static ps_status corrupt(ps_reader *r, uint64_t rec) {
  set_err(r, "%s: record %llu is corrupt", r->path, (unsigned long long)rec);
  return PS_ERR_CORRUPT;
}

/* Version 1: cnt fixed records from record first, each turned into a sample record. */
static ps_status bin_v1(ps_reader *r, uint64_t first, size_t cnt, staged *s) {
  SRC_TRY(read_at(r, r->rec, cnt * PS_CRITEO_BIN_RECORD,
                           PS_CRITEO_BIN_HEADER + first * PS_CRITEO_BIN_RECORD, first));
  for (size_t i = 0; i < cnt; i++) {
    ps_criteo_row row;
    if (ps_criteo_bin_decode(r->rec + i * PS_CRITEO_BIN_RECORD, &row) != PS_OK)
      return corrupt(r, first + i);
    s->off[s->n++] = s->data.len;
    if (ps_sample_from_criteo(&row, &s->data)) return PS_ERR_NOMEM;
  }
  return PS_OK;
}

/* Version 2: the cnt + 1 index entries from record first, then the records between them. */
static ps_status bin_v2(ps_reader *r, uint64_t first, size_t cnt, staged *s) {
  uint64_t *ix = (uint64_t *)(void *)r->rec;
  SRC_TRY(read_at(r, ix, (cnt + 1) * 8, r->hdr.index_off + first * 8, first));
  uint64_t lo = ix[0], hi = ix[cnt];
  if (lo < PS_CRITEO_BIN_HEADER || hi < lo || hi > r->hdr.index_off || hi - lo > (1ull << 40))
    return corrupt(r, first);
  if (ps_sample_buf_reserve(&s->data, (size_t)(hi - lo))) return PS_ERR_NOMEM;
  SRC_TRY(read_at(r, s->data.p, (size_t)(hi - lo), lo, first));
  s->data.len = (size_t)(hi - lo);
  for (size_t i = 0; i < cnt; i++) {
    if (ix[i + 1] < ix[i] || ix[i + 1] > hi) return corrupt(r, first + i);
    size_t at = (size_t)(ix[i] - lo);
    if (ps_sample_check(s->data.p + at, (size_t)(ix[i + 1] - ix[i]), r->nd, r->nc) != PS_OK ||
        ps_sample_len(s->data.p + at) != ix[i + 1] - ix[i])
      return corrupt(r, first + i);
    s->off[s->n++] = at;
  }
  return PS_OK;
}

ps_status ps_reader_fetch_bin(ps_reader *r, staged *s) {
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
  s->first_line = start;
  s->end_line = start + n_round;
  s->end_byte = 0;
  s->n = 0;
  s->data.len = 0;
  ps_status st = r->hdr.version == PS_CRITEO_BIN_VERSION ? bin_v1(r, start + a, b - a, s)
                                                         : bin_v2(r, start + a, b - a, s);
  if (st) return st;
  s->kind = F_BATCH;
  return PS_OK;
}

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

ps_status ps_data_count_rows(const char *path, const ps_schema *schema, uint64_t *rows) {
  ps_input_format fmt;
  ps_status st = ps_data_count_lines(path, rows);
  if (st == PS_OK && schema && ps_schema_header(schema) && *rows > 0 &&
      ps_data_detect(path, &fmt) == PS_OK && fmt != PS_INPUT_BIN)
    (*rows)--;
  return st;
}

ps_status ps_data_check_header(const char *path, const ps_schema *schema, ps_error *err) {
  ps_input_format fmt;
  if (!schema || !ps_schema_header(schema)) return PS_OK;
  ps_status st = ps_data_detect(path, &fmt);
  if (st) return ps_error_set(err, st, "%s: cannot read it", path);
  if (fmt == PS_INPUT_BIN) return PS_OK;
  gzFile g = gzopen(path, "rb");
  if (!g) return ps_error_set(err, PS_ERR_IO, "%s: cannot read it", path);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  int got = 0;
  while (buf && (got = gzread(g, buf + len, (unsigned)(cap - len))) > 0) {
    len += (size_t)got;
    if (memchr(buf, '\n', len) || len == cap) break;
  }
  gzclose(g);
  if (!buf) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  char *nl = memchr(buf, '\n', len);
  ps_error why;
  st = got < 0 ? PS_ERR_IO
               : ps_schema_check_header(schema, buf, nl ? (size_t)(nl - buf) : len, &why);
  free(buf);
  if (st == PS_ERR_IO) return ps_error_set(err, st, "%s: read error", path);
  if (st) return ps_error_set(err, st, "%s:1: %s", path, why.msg);
  return PS_OK;
}
