/* ps_log: leveled, timestamped logging to stderr.
 *
 * One line per call, written with a single write(2) so lines from threads and processes
 * sharing a terminal do not interleave. The level is process-wide. */
#ifndef PS_LOG_H
#define PS_LOG_H

typedef enum ps_log_level {
  PS_LOG_DEBUG = 0,
  PS_LOG_INFO = 1,
  PS_LOG_WARN = 2,
  PS_LOG_ERROR = 3,
  PS_LOG_OFF = 4
} ps_log_level;

void ps_log_set_level(ps_log_level level);
ps_log_level ps_log_get_level(void);
/* Parses "debug|info|warn|error|off"; returns 0 on success, -1 if unknown. */
int ps_log_parse_level(const char *s, ps_log_level *out);
/* A binary's --log-level: parses s and sets the level, or prints
 * "PROG: --log-level: 'S' is not debug|info|warn|error|off" to stderr and returns -1. */
int ps_log_apply_level(const char *prog, const char *s);
/* A tag printed on every line (e.g. "server/0", "worker/1"); copied. */
void ps_log_set_tag(const char *tag);

void ps_log_write(ps_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define PS_LOG(level, ...)                                                 \
  do {                                                                     \
    if ((level) >= ps_log_get_level()) ps_log_write((level), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define PS_DEBUG(...) PS_LOG(PS_LOG_DEBUG, __VA_ARGS__)
#define PS_INFO(...) PS_LOG(PS_LOG_INFO, __VA_ARGS__)
#define PS_WARN(...) PS_LOG(PS_LOG_WARN, __VA_ARGS__)
#define PS_ERROR(...) PS_LOG(PS_LOG_ERROR, __VA_ARGS__)

#endif
