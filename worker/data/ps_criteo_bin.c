/* ps_criteo_bin.c: encode/decode of the binary record and header, and the writer (layout in
 * ps_criteo_bin.h). Fields are copied byte-wise with explicit little-endian order, so the
 * format does not depend on struct padding or the host. */
#include "ps_criteo_bin.h"

#include "ps_sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32); }

/* A record into buf (PS_CRITEO_BIN_RECORD bytes). */
static void criteo_bin_encode(const ps_criteo_row *row, unsigned char *buf) {
  buf[0] = row->label;
  buf[1] = 0;
  put16(buf + 2, row->dense_missing);
  put32(buf + 4, row->cat_missing);
  for (int i = 0; i < PS_CRITEO_NDENSE; i++) {
    uint32_t u;
    memcpy(&u, &row->dense[i], 4);
    put32(buf + 8 + 4 * i, u);
  }
  for (int j = 0; j < PS_CRITEO_NCAT; j++) put32(buf + 60 + 4 * j, row->cat[j]);
}

ps_status ps_criteo_bin_decode(const unsigned char *buf, ps_criteo_row *row) {
  if (buf[0] > 1 || buf[1] != 0) return PS_ERR_CORRUPT;
  row->label = buf[0];
  row->dense_missing = get16(buf + 2);
  row->cat_missing = get32(buf + 4);
  if (row->dense_missing >> PS_CRITEO_NDENSE || row->cat_missing >> PS_CRITEO_NCAT)
    return PS_ERR_CORRUPT;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(row->dense, buf + 8, 4 * PS_CRITEO_NDENSE); /* the hot path: two copies */
  memcpy(row->cat, buf + 60, 4 * PS_CRITEO_NCAT);
#else
  for (int i = 0; i < PS_CRITEO_NDENSE; i++) {
    uint32_t u = get32(buf + 8 + 4 * i);
    memcpy(&row->dense[i], &u, 4);
  }
  for (int j = 0; j < PS_CRITEO_NCAT; j++) row->cat[j] = get32(buf + 60 + 4 * j);
#endif
  return PS_OK;
}

/* A header into buf (PS_CRITEO_BIN_HEADER bytes). */
static void criteo_bin_encode_header(const ps_criteo_bin_header *h, unsigned char *buf) {
  memset(buf, 0, PS_CRITEO_BIN_HEADER);
  memcpy(buf, PS_CRITEO_BIN_MAGIC, 8);
  put32(buf + 8, h->version);
  put32(buf + 12, h->record_bytes);
  put64(buf + 16, h->rows);
  put32(buf + 24, h->ndense);
  put32(buf + 28, h->ncat);
  put32(buf + 32, h->dense_kind);
  put32(buf + 36, h->flags);
  put64(buf + 40, h->bad_lines);
  put64(buf + 48, h->index_off);
}

ps_status ps_criteo_bin_decode_header(const unsigned char *buf, ps_criteo_bin_header *h) {
  if (memcmp(buf, PS_CRITEO_BIN_MAGIC, 8) != 0) return PS_ERR_NOT_FOUND;
  h->version = get32(buf + 8);
  h->record_bytes = get32(buf + 12);
  h->rows = get64(buf + 16);
  h->ndense = get32(buf + 24);
  h->ncat = get32(buf + 28);
  h->dense_kind = get32(buf + 32);
  h->bad_lines = get64(buf + 40);
  h->flags = get32(buf + 36);
  h->index_off = get64(buf + 48);
  if (h->version == PS_CRITEO_BIN_VERSION2)
    return h->record_bytes == 0 && h->ndense <= 4096 && h->ncat <= 4096 && h->dense_kind == 1 &&
                   h->flags <= 1 && h->index_off >= PS_CRITEO_BIN_HEADER
               ? PS_OK
               : PS_ERR_CORRUPT;
  h->flags = 0;
  h->index_off = 0;
  if (h->version != PS_CRITEO_BIN_VERSION || h->record_bytes != PS_CRITEO_BIN_RECORD ||
      h->ndense != PS_CRITEO_NDENSE || h->ncat != PS_CRITEO_NCAT || h->dense_kind != 1)
    return PS_ERR_CORRUPT;
  return PS_OK;
}

struct ps_criteo_bin_writer {
  FILE *f;
  FILE *idx;      /* version 2: the index, spooled */
  uint64_t rows, at;
  uint32_t ndense, ncat, flags;
  int failed;
};

static ps_criteo_bin_header header_of(const ps_criteo_bin_writer *w, uint64_t bad_lines) {
  ps_criteo_bin_header h = {PS_CRITEO_BIN_VERSION, PS_CRITEO_BIN_RECORD, PS_CRITEO_NDENSE,
                            PS_CRITEO_NCAT, 1, w->rows, bad_lines, 0, 0};
  if (w->idx) {
    h.version = PS_CRITEO_BIN_VERSION2;
    h.record_bytes = 0;
    h.ndense = w->ndense;
    h.ncat = w->ncat;
    h.flags = w->flags;
    h.index_off = w->at;
  }
  return h;
}

static int write_header(ps_criteo_bin_writer *w, uint64_t bad_lines) {
  unsigned char hb[PS_CRITEO_BIN_HEADER];
  ps_criteo_bin_header h = header_of(w, bad_lines);
  criteo_bin_encode_header(&h, hb);
  return fwrite(hb, 1, sizeof hb, w->f) == sizeof hb ? 0 : -1;
}

ps_status ps_criteo_bin_writer_create(const char *path, ps_criteo_bin_writer **out) {
  *out = NULL;
  ps_criteo_bin_writer *w = calloc(1, sizeof *w);
  if (!w) return PS_ERR_NOMEM;
  w->f = fopen(path, "wb");
  if (!w->f) {
    free(w);
    return PS_ERR_IO;
  }
  setvbuf(w->f, NULL, _IOFBF, 1 << 20);
  /* Row count 0 until close: a half-written file is refused by the size check. */
  if (write_header(w, 0) != 0) w->failed = 1;
  w->at = PS_CRITEO_BIN_HEADER;
  *out = w;
  return PS_OK;
}

ps_status ps_criteo_bin_writer_create_v2(const char *path, int ndense, int ncat, int multi_hot,
                                         ps_criteo_bin_writer **out) {
  *out = NULL;
  FILE *idx = tmpfile();
  if (!idx) return PS_ERR_IO;
  ps_criteo_bin_writer *w = NULL;
  ps_status st = ps_criteo_bin_writer_create(path, &w);
  if (st) {
    fclose(idx);
    return st;
  }
  w->idx = idx;
  w->ndense = (uint32_t)ndense;
  w->ncat = (uint32_t)ncat;
  w->flags = multi_hot ? PS_CRITEO_BIN_MULTI_HOT : 0;
  *out = w;
  return PS_OK;
}

ps_status ps_criteo_bin_write_sample(ps_criteo_bin_writer *w, const unsigned char *rec) {
  unsigned char ib[8];
  uint32_t len = ps_sample_len(rec);
  put64(ib, w->at);
  if (fwrite(ib, 1, 8, w->idx) != 8 || fwrite(rec, 1, len, w->f) != len) {
    w->failed = 1;
    return PS_ERR_IO;
  }
  w->at += len;
  w->rows++;
  return PS_OK;
}

/* Version 2: the last index entry, then the spooled index after the records. */
static int append_index(ps_criteo_bin_writer *w) {
  unsigned char ib[8], buf[1 << 16];
  put64(ib, w->at);
  if (fwrite(ib, 1, 8, w->idx) != 8 || fflush(w->idx) != 0 || fseek(w->idx, 0, SEEK_SET) != 0)
    return -1;
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, w->idx)) > 0)
    if (fwrite(buf, 1, got, w->f) != got) return -1;
  return ferror(w->idx) ? -1 : 0;
}

ps_status ps_criteo_bin_write(ps_criteo_bin_writer *w, const ps_criteo_row *row) {
  unsigned char rb[PS_CRITEO_BIN_RECORD];
  criteo_bin_encode(row, rb);
  if (fwrite(rb, 1, sizeof rb, w->f) != sizeof rb) {
    w->failed = 1;
    return PS_ERR_IO;
  }
  w->rows++;
  return PS_OK;
}

ps_status ps_criteo_bin_writer_close(ps_criteo_bin_writer **wp, uint64_t bad_lines) {
  if (!wp || !*wp) return PS_OK;
  ps_criteo_bin_writer *w = *wp;
  *wp = NULL;
  int bad = w->failed;
  if (!bad && w->idx && append_index(w) != 0) bad = 1;
  if (!bad && (fflush(w->f) != 0 || fseek(w->f, 0, SEEK_SET) != 0 || write_header(w, bad_lines)))
    bad = 1;
  if (fclose(w->f) != 0) bad = 1;
  if (w->idx) fclose(w->idx);
  free(w);
  return bad ? PS_ERR_IO : PS_OK;
}
