/* ps_ckpt_layout: the checkpoint layout's names, paths built and parsed (ps_ckpt_layout.h). */
#include "ps_ckpt_layout.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ps_fs.h"

#define STEP_PREFIX "step-"
#define STEP_PREFIX_LEN 5
#define LATEST "latest"

static const char *const file_names[] = {
    [PS_CKPT_CONFIG] = "config",
    [PS_CKPT_DENSE] = "dense.bin",
    [PS_CKPT_SCHEMA] = "schema.json",
    [PS_CKPT_SHARDS] = "shards",
    [PS_CKPT_INPUT] = "input",
};

static const char *const shard_suffix[] = {
    [PS_CKPT_SHARD_DIR] = "",
    [PS_CKPT_SHARD_META] = ".json",
    [PS_CKPT_SHARD_STAGING] = ".staging",
    [PS_CKPT_SHARD_STAGING_META] = ".staging.json",
    [PS_CKPT_SHARD_BUILD] = ".build",
};

/* snprintf into out; PS_ERR_INVALID (out "") when it does not fit. */
static ps_status pathf(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ps_status pathf(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < len) return PS_OK;
  if (len) out[0] = '\0';
  return PS_ERR_INVALID;
}

const char *ps_ckpt_file_name(ps_ckpt_file f) { return file_names[f]; }

ps_status ps_ckpt_step_name(char *out, size_t len, uint64_t step) {
  return pathf(out, len, STEP_PREFIX "%" PRIu64, step);
}

bool ps_ckpt_step_parse(const char *name, uint64_t *step) {
  if (strncmp(name, STEP_PREFIX, STEP_PREFIX_LEN) != 0) return false;
  const char *d = name + STEP_PREFIX_LEN;
  size_t n = strlen(d);
  if (n == 0 || n > 19 || strspn(d, "0123456789") != n || (d[0] == '0' && n > 1)) return false;
  uint64_t v = 0;
  for (const char *c = d; *c; c++) v = v * 10 + (uint64_t)(*c - '0'); /* 19 digits fit */
  if (v > (uint64_t)INT64_MAX) return false;
  if (step) *step = v;
  return true;
}

bool ps_ckpt_path_split(const char *path, char *root, size_t len, uint64_t *step) {
  char buf[PATH_MAX];
  if (pathf(buf, sizeof buf, "%s", path) != PS_OK) return false;
  for (int up = 0; up < 2; up++) {
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    char *slash = strrchr(buf, '/'), *base = slash ? slash + 1 : buf;
    if (ps_ckpt_step_parse(base, step)) {
      if (!slash) return false; /* no directory holds it */
      if (root && pathf(root, len, "%.*s", slash == buf ? 1 : (int)(slash - buf), buf) != PS_OK)
        return false;
      return true;
    }
    if (strcmp(base, file_names[PS_CKPT_SHARDS]) != 0 || !slash) return false;
    *slash = '\0';
  }
  return false;
}

ps_status ps_ckpt_step_path(char *out, size_t len, const char *dir, uint64_t step) {
  return pathf(out, len, "%s/" STEP_PREFIX "%" PRIu64, dir, step);
}

ps_status ps_ckpt_file_path(char *out, size_t len, const char *step_dir, ps_ckpt_file f) {
  return pathf(out, len, "%s/%s", step_dir, file_names[f]);
}

ps_status ps_ckpt_shard_path(char *out, size_t len, const char *shards_dir, uint32_t shard,
                             ps_ckpt_shard_part part) {
  return pathf(out, len, "%s/shard-%" PRIu32 "%s", shards_dir, shard, shard_suffix[part]);
}

ps_status ps_ckpt_step_shard_path(char *out, size_t len, const char *step_dir, uint32_t shard,
                                  ps_ckpt_shard_part part) {
  return pathf(out, len, "%s/%s/shard-%" PRIu32 "%s", step_dir, file_names[PS_CKPT_SHARDS],
               shard, shard_suffix[part]);
}

uint32_t ps_ckpt_count_shards(const char *step_dir, uint32_t max) {
  uint32_t n = 0;
  char p[PATH_MAX];
  struct stat sb;
  while (n < max && ps_ckpt_step_shard_path(p, sizeof p, step_dir, n, PS_CKPT_SHARD_DIR) == PS_OK &&
         stat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
    n++;
  return n;
}

ps_status ps_ckpt_server_root(char *out, size_t len, const char *data_dir, uint64_t step) {
  return pathf(out, len, "%s/checkpoints/" STEP_PREFIX "%" PRIu64, data_dir, step);
}

ps_status ps_ckpt_latest_path(char *out, size_t len, const char *dir) {
  return pathf(out, len, "%s/" LATEST, dir);
}

ps_status ps_ckpt_latest_read(const char *dir, char *name, size_t len, ps_error *err) {
  char p[PATH_MAX];
  if (len) name[0] = '\0';
  if (ps_ckpt_latest_path(p, sizeof p, dir) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "%s: path too long", dir);
  FILE *f = fopen(p, "r");
  if (!f) return ps_error_set(err, PS_ERR_NOT_FOUND, "cannot open %s: %s", p, strerror(errno));
  bool got = len > 1 && fgets(name, (int)len, f) != NULL;
  fclose(f);
  if (!got && len) name[0] = '\0';
  name[strcspn(name, "\r\n")] = '\0';
  if (!got || !name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: does not name a checkpoint", p);
  return PS_OK;
}

ps_status ps_ckpt_latest_dir(const char *dir, char *out, size_t len, ps_error *err) {
  char name[256];
  ps_status st = ps_ckpt_latest_read(dir, name, sizeof name, err);
  if (st != PS_OK) return st;
  if (pathf(out, len, "%s/%s", dir, name) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "%s: path too long", dir);
  return PS_OK;
}

ps_status ps_ckpt_latest_write(const char *dir, uint64_t step, ps_error *err) {
  char p[PATH_MAX], text[64];
  if (ps_ckpt_latest_path(p, sizeof p, dir) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "%s: path too long", dir);
  int n = snprintf(text, sizeof text, STEP_PREFIX "%" PRIu64 "\n", step);
  return ps_write_atomic(p, text, (size_t)n, 0644, false, err);
}

ps_status ps_ckpt_resolve(const char *dir, ps_ckpt_file marker, char *out, size_t len,
                          ps_error *err) {
  char p[PATH_MAX];
  struct stat sb;
  ps_status st = ps_ckpt_latest_dir(dir, out, len, err);
  if (st != PS_ERR_NOT_FOUND) return st;
  if (ps_ckpt_file_path(p, sizeof p, dir, marker) != PS_OK || stat(p, &sb) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "%s is not a checkpoint (no %s, no %s)", dir, LATEST,
                        file_names[marker]);
  if (pathf(out, len, "%s", dir) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "%s: path too long", dir);
  return PS_OK;
}
