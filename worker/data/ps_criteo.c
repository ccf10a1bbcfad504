/* ps_criteo.c: the Criteo line parser and key mapping (format in ps_criteo.h).
 *
 * One pass over the bytes, no strtol/strtoul (they accept spaces, '+', "0x" and locale
 * quirks that the format does not allow, and are several times slower). Each field is
 * scanned up to its TAB; the parser never reads past `len`. */
#include "ps_criteo.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Counts are mostly small: a table of the exact same values (float)log1p(x) for x < 4096
 * saves the libm call on most fields without changing a bit of the result. */
#define LOG_TABLE 4096
static float g_log_table[LOG_TABLE];
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static void log_table_init(void) {
  for (int i = 0; i < LOG_TABLE; i++) g_log_table[i] = (float)log1p((double)i);
}

float ps_criteo_dense_transform(int64_t x) {
  if (x <= 0) return 0.0f;
  if (x < LOG_TABLE) {
    pthread_once(&g_log_once, log_table_init);
    return g_log_table[x];
  }
  return (float)log1p((double)x);
}

/* Shows a field in an error message, shortened and with control bytes escaped. */
void ps_criteo_show_field(const char *p, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 5 < outlen; i++) {
    unsigned char c = (unsigned char)p[i];
    if (i == 16) {
      memcpy(out + o, "...", 3);
      o += 3;
      break;
    }
    if (c >= 0x20 && c < 0x7f) out[o++] = (char)c;
    else o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
  }
  out[o] = 0;
}

ps_status ps_criteo_parse_line(const char *line, size_t len, ps_criteo_row *row, ps_error *err) {
  if (len && line[len - 1] == '\r') len--;
  const char *p = line, *end = line + len;
  char shown[80];

  /* Label. */
  const char *f0 = p;
  while (p < end && *p != '\t') p++;
  if (p - f0 != 1 || (f0[0] != '0' && f0[0] != '1')) {
    if (p == end && len == 0) return ps_error_set(err, PS_ERR_PARSE, "empty line");
    ps_criteo_show_field(f0, (size_t)(p - f0), shown, sizeof shown);
    return ps_error_set(err, PS_ERR_PARSE, "label: want 0 or 1, got '%s'", shown);
  }
  row->label = (uint8_t)(f0[0] - '0');
  row->dense_missing = 0;
  row->cat_missing = 0;

  int field = 1;
  for (int i = 0; i < PS_CRITEO_NDENSE; i++, field++) {
    if (p == end)
      return ps_error_set(err, PS_ERR_PARSE, "too few fields (%d, want %d)", field,
                          PS_CRITEO_NFIELDS);
    p++; /* the TAB */
    const char *s = p;
    int neg = 0;
    if (p < end && *p == '-') neg = 1, p++;
    uint64_t v = 0;
    int digits = 0, overflow = 0;
    while (p < end && (unsigned)(*p - '0') < 10u) {
      uint64_t d = (uint64_t)(*p - '0');
      if (v > (UINT64_MAX - d) / 10) overflow = 1;
      v = v * 10 + d;
      p++, digits++;
    }
    if (p < end && *p != '\t') {
      const char *e = p;
      while (e < end && *e != '\t') e++;
      ps_criteo_show_field(s, (size_t)(e - s), shown, sizeof shown);
      return ps_error_set(err, PS_ERR_PARSE, "I%d: not an integer: '%s'", i + 1, shown);
    }
    if (!digits) {
      if (neg) return ps_error_set(err, PS_ERR_PARSE, "I%d: not an integer: '-'", i + 1);
      row->dense_missing |= (uint16_t)(1u << i);
      row->dense[i] = 0.0f;
      continue;
    }
    if (overflow || v > (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX)) {
      ps_criteo_show_field(s, (size_t)(p - s), shown, sizeof shown);
      return ps_error_set(err, PS_ERR_PARSE, "I%d: integer out of range: '%s'", i + 1, shown);
    }
    row->dense[i] = neg ? 0.0f : ps_criteo_dense_transform((int64_t)v);
  }

  for (int j = 0; j < PS_CRITEO_NCAT; j++, field++) {
    if (p == end)
      return ps_error_set(err, PS_ERR_PARSE, "too few fields (%d, want %d)", field,
                          PS_CRITEO_NFIELDS);
    p++;
    const char *s = p;
    if (end - p >= 8 && (p + 8 == end || p[8] == '\t')) {
      uint32_t v;
      if (ps_criteo_hex8(p, &v)) {
        row->cat[j] = v;
        p += 8;
        continue;
      }
    }
    while (p < end && *p != '\t') p++;
    if (p == s) {
      row->cat_missing |= 1u << j;
      row->cat[j] = 0;
      continue;
    }
    ps_criteo_show_field(s, (size_t)(p - s), shown, sizeof shown);
    return ps_error_set(err, PS_ERR_PARSE, "C%d: want 8 hex digits, got '%s'", j + 1, shown);
  }
  if (p != end) {
    int n = field;
    while (p < end) n += (*p++ == '\t');
    return ps_error_set(err, PS_ERR_PARSE, "too many fields (%d, want %d)", n, PS_CRITEO_NFIELDS);
  }
  return PS_OK;
}
