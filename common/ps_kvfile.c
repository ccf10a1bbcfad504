/* ps_kvfile: checksummed NAME=VALUE files (ps_kvfile.h). The file is read whole, its checksum
 * line found (the first line that starts with "checksum=": it must be the last, exactly 16 hex
 * digits and a newline), the bytes before it hashed, and the lines before it split in place
 * into names and values (a '\r' before the newline dropped). */
#include "ps_kvfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_fs.h"
#include "ps_hash.h"

#define SUM_KEY "checksum="
#define SUM_KEY_LEN 9
#define SUM_HEX 16

struct ps_kvfile {
  char *text;            /* the lines before the checksum, split in place */
  const char **names, **values;
  size_t n;
  bool checksummed;
};

uint64_t ps_kvfile_sum(const char *text, size_t len) { return ps_hash64(text, len, 0); }

ps_status ps_kvfile_write(const char *path, const char *text, size_t len, ps_error *err) {
  if (len > 0 && text[len - 1] != '\n')
    return ps_error_set(err, PS_ERR_INVALID, "%s: the text does not end in a newline", path);
  char *all = malloc(len + SUM_KEY_LEN + SUM_HEX + 2);
  if (!all) return ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory", path);
  memcpy(all, text, len);
  int n = snprintf(all + len, SUM_KEY_LEN + SUM_HEX + 2, SUM_KEY "%016llx\n",
                   (unsigned long long)ps_kvfile_sum(text, len));
  ps_status st = ps_write_atomic(path, all, len + (size_t)n, 0644, false, err);
  free(all);
  return st;
}

void ps_kvfile_free(ps_kvfile **kv) {
  if (!kv || !*kv) return;
  free((*kv)->text);
  free((*kv)->names);
  free((*kv)->values);
  free(*kv);
  *kv = NULL;
}

/* Where the checksum line starts (NULL: none), and whether it is well formed and last. */
static const char *sum_line(const char *b, size_t len, bool *ok) {
  const char *at = NULL;
  for (size_t i = 0; i < len && !at; i++)
    if ((i == 0 || b[i - 1] == '\n') && len - i >= SUM_KEY_LEN &&
        memcmp(b + i, SUM_KEY, SUM_KEY_LEN) == 0)
      at = b + i;
  *ok = false;
  if (!at) return NULL;
  size_t rest = (size_t)(b + len - at);
  *ok = rest == SUM_KEY_LEN + SUM_HEX + 1 && at[SUM_KEY_LEN + SUM_HEX] == '\n';
  for (int i = 0; *ok && i < SUM_HEX; i++) *ok = isxdigit((unsigned char)at[SUM_KEY_LEN + i]);
  return at;
}

/* Splits text (NUL-terminated, owned by kv) into its NAME=VALUE lines. */
static ps_status split(ps_kvfile *kv) {
  size_t cap = 1;
  for (const char *c = kv->text; *c; c++) cap += *c == '\n';
  kv->names = malloc(cap * sizeof *kv->names);
  kv->values = malloc(cap * sizeof *kv->values);
  if (!kv->names || !kv->values) return PS_ERR_NOMEM;
  for (char *line = kv->text; *line;) {
    char *nl = strchr(line, '\n'), *next = nl ? nl + 1 : line + strlen(line);
    if (nl) *nl = '\0';
    size_t l = strlen(line);
    if (l && line[l - 1] == '\r') line[l - 1] = '\0';
    char *eq = strchr(line, '=');
    if (line[0] != '#' && eq) {
      *eq = '\0';
      kv->names[kv->n] = line;
      kv->values[kv->n++] = eq + 1;
    }
    line = next;
  }
  return PS_OK;
}

/* The text of a file in memory (len bytes; name: what err calls it). */
static ps_status kvfile_parse(const char *text, size_t len, const char *name, ps_kvfile **out,
                              ps_error *err) {
  *out = NULL;
  bool ok;
  const char *at = sum_line(text, len, &ok);
  if (at && !ok) return ps_error_set(err, PS_ERR_CORRUPT, "%s: a bad checksum line", name);
  if (at) {
    char hex[SUM_HEX + 1];
    memcpy(hex, at + SUM_KEY_LEN, SUM_HEX);
    hex[SUM_HEX] = '\0';
    if (strtoull(hex, NULL, 16) != ps_kvfile_sum(text, (size_t)(at - text)))
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: checksum mismatch: the file is damaged",
                          name);
  }
  size_t body = at ? (size_t)(at - text) : len;
  if (memchr(text, '\0', body))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: a NUL byte: not a text file", name);
  ps_kvfile *kv = calloc(1, sizeof *kv);
  if (kv) kv->text = malloc(body + 1);
  if (!kv || !kv->text) {
    ps_kvfile_free(&kv);
    return ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory", name);
  }
  memcpy(kv->text, text, body);
  kv->text[body] = '\0';
  kv->checksummed = at != NULL;
  if (split(kv) != PS_OK) {
    ps_kvfile_free(&kv);
    return ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory", name);
  }
  *out = kv;
  return PS_OK;
}

ps_status ps_kvfile_read(const char *path, ps_kvfile **out, ps_error *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return ps_error_set(err, errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO, "cannot open %s: %s",
                        path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0, n;
  char chunk[4096];
  ps_status st = PS_OK;
  while (st == PS_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n + 1 > cap) {
      char *b = realloc(buf, cap = 2 * (len + n + 1));
      if (!b) {
        st = ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory", path);
        break;
      }
      buf = b;
    }
    memcpy(buf + len, chunk, n);
    len += n;
  }
  if (st == PS_OK && ferror(f)) st = ps_error_set(err, PS_ERR_IO, "reading %s failed", path);
  fclose(f);
  if (st == PS_OK) st = kvfile_parse(buf ? buf : "", len, path, out, err);
  free(buf);
  return st;
}

bool ps_kvfile_checksummed(const ps_kvfile *kv) { return kv->checksummed; }
size_t ps_kvfile_count(const ps_kvfile *kv) { return kv->n; }
const char *ps_kvfile_name(const ps_kvfile *kv, size_t i) { return i < kv->n ? kv->names[i] : NULL; }
const char *ps_kvfile_value(const ps_kvfile *kv, size_t i) {
  return i < kv->n ? kv->values[i] : NULL;
}

const char *ps_kvfile_get(const ps_kvfile *kv, const char *name) {
  for (size_t i = 0; i < kv->n; i++)
    if (!strcmp(kv->names[i], name)) return kv->values[i];
  return NULL;
}
