/* ps_criteo_bin.c: encode/decode of the binary record and header, and the writer (layout in
 * ps_criteo_bin.h). Fields are copied byte-wise with explicit little-endian order, so the
 * format does not depend on struct padding or the host. */
#include "ps_criteo_bin.h"

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

void ps_criteo_bin_encode(const ps_criteo_row *row, unsigned char *buf) {
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

void ps_criteo_bin_encode_header(const ps_criteo_bin_header *h, unsigned char *buf) {
  memset(buf, 0, PS_CRITEO_BIN_HEADER);
  memcpy(buf, PS_CRITEO_BIN_MAGIC, 8);
  put32(buf + 8, h->version);
  put32(buf + 12, h->record_bytes);
  put64(buf + 16, h->rows);
  put32(buf + 24, h->ndense);
  put32(buf + 28, h->ncat);
  put32(buf + 32, h->dense_kind);
  put64(buf + 40, h->bad_lines);
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
  if (h->version != PS_CRITEO_BIN_VERSION || h->record_bytes != PS_CRITEO_BIN_RECORD ||
      h->ndense != PS_CRITEO_NDENSE || h->ncat != PS_CRITEO_NCAT || h->dense_kind != 1)
    return PS_ERR_CORRUPT;
  return PS_OK;
}

struct ps_criteo_bin_writer {
  FILE *f;
  uint64_t rows;
  int failed;
};

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
  ps_criteo_bin_header h = {PS_CRITEO_BIN_VERSION, PS_CRITEO_BIN_RECORD, PS_CRITEO_NDENSE,
                            PS_CRITEO_NCAT, 1, 0, 0};
  unsigned char hb[PS_CRITEO_BIN_HEADER];
  ps_criteo_bin_encode_header(&h, hb);
  if (fwrite(hb, 1, sizeof hb, w->f) != sizeof hb) w->failed = 1;
  *out = w;
  return PS_OK;
}

ps_status ps_criteo_bin_write(ps_criteo_bin_writer *w, const ps_criteo_row *row) {
  unsigned char rb[PS_CRITEO_BIN_RECORD];
  ps_criteo_bin_encode(row, rb);
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
  ps_criteo_bin_header h = {PS_CRITEO_BIN_VERSION, PS_CRITEO_BIN_RECORD, PS_CRITEO_NDENSE,
                            PS_CRITEO_NCAT, 1, w->rows, bad_lines};
  unsigned char hb[PS_CRITEO_BIN_HEADER];
  ps_criteo_bin_encode_header(&h, hb);
  int bad = w->failed;
  if (!bad && (fflush(w->f) != 0 || fseek(w->f, 0, SEEK_SET) != 0 ||
               fwrite(hb, 1, sizeof hb, w->f) != sizeof hb))
    bad = 1;
  if (fclose(w->f) != 0) bad = 1;
  free(w);
  return bad ? PS_ERR_IO : PS_OK;
}
