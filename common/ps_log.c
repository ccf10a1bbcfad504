/* ps_log: see ps_log.h. */
#include "ps_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int g_level = PS_LOG_INFO;
static char g_tag[32] = "";

static const char *const k_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void ps_log_set_level(ps_log_level level) { atomic_store(&g_level, (int)level); }
ps_log_level ps_log_get_level(void) { return (ps_log_level)atomic_load(&g_level); }

void ps_log_set_tag(const char *tag) {
  snprintf(g_tag, sizeof g_tag, "%s", tag ? tag : "");
}

ps_status ps_log_parse_level(const char *s, ps_log_level *out, ps_error *err) {
  static const char *const names[] = {"debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 5; i++) {
    if (s && strcmp(s, names[i]) == 0) {
      *out = (ps_log_level)i;
      return PS_OK;
    }
  }
  return ps_error_set(err, PS_ERR_INVALID, "'%s' is not debug|info|warn|error|off", s ? s : "");
}

int ps_log_apply_level(const char *prog, const char *s) {
  ps_log_level l;
  ps_error e = {0};
  if (ps_log_parse_level(s, &l, &e) != PS_OK) {
    fprintf(stderr, "%s: --log-level: %s\n", prog, e.msg);
    return -1;
  }
  ps_log_set_level(l);
  return 0;
}

/* One line: prefix, the formatted message, then suffix (may be ""). */
static void log_vwrite(ps_log_level level, const char *file, int line, const char *suffix,
                       const char *fmt, va_list ap) {
  if (level < PS_LOG_DEBUG || level > PS_LOG_ERROR) return;
  char buf[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  int n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s%s%s:%d ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, k_names[level], g_tag,
                   g_tag[0] ? " " : "", base, line);
  if (n < 0) return;
  if ((size_t)n < sizeof buf) {
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    if (m > 0) n += m;
  }
  if (suffix[0] && (size_t)n < sizeof buf) {
    int m = snprintf(buf + n, sizeof buf - (size_t)n, "%s", suffix);
    if (m > 0) n += m;
  }
  if ((size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
  (void)w;
}

void ps_log_write(ps_log_level level, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_vwrite(level, file, line, "", fmt, ap);
  va_end(ap);
}

bool ps_log_site_admit(ps_log_site *site, uint64_t now_ns, uint64_t *suppressed) {
  uint64_t sec = now_ns / 1000000000ull;
  uint64_t w = __atomic_load_n(&site->window, __ATOMIC_RELAXED);
  /* A new second: whoever moves the window restarts the count (a race at the boundary may let
   * a line or two more through, never fewer). */
  if (w != sec &&
      __atomic_compare_exchange_n(&site->window, &w, sec, false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED))
    __atomic_store_n(&site->count, 0, __ATOMIC_RELAXED);
  if (__atomic_add_fetch(&site->count, 1, __ATOMIC_RELAXED) > PS_LOG_RATE) {
    __atomic_add_fetch(&site->suppressed, 1, __ATOMIC_RELAXED);
    return false;
  }
  *suppressed = __atomic_exchange_n(&site->suppressed, 0, __ATOMIC_RELAXED);
  return true;
}

void ps_log_write_rl(ps_log_site *site, ps_log_level level, const char *file, int line,
                     const char *fmt, ...) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t left_out = 0;
  if (!ps_log_site_admit(site, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                         &left_out))
    return;
  char suffix[64] = "";
  if (left_out)
    snprintf(suffix, sizeof suffix, " (suppressed %llu similar lines)",
             (unsigned long long)left_out);
  va_list ap;
  va_start(ap, fmt);
  log_vwrite(level, file, line, suffix, fmt, ap);
  va_end(ap);
}
