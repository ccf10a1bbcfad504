/* ps_log: leveled, timestamped logging to stderr.
 *
 * One line per call, written with a single write(2) so lines from threads and processes
 * sharing a terminal do not interleave. The level is process-wide.
 *
 * The _RL macros rate-limit a call site (a static ps_log_site each): at most PS_LOG_RATE lines
 * per second, the rest counted, and the next line written there ends with "(suppressed N
 * similar lines)". For errors that repeat once per request (a full disk fails every write):
 * the log stays readable and the first lines of every second still say what goes on. */
#ifndef PS_LOG_H
#define PS_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_status.h"

typedef enum ps_log_level {
  PS_LOG_DEBUG = 0,
  PS_LOG_INFO = 1,
  PS_LOG_WARN = 2,
  PS_LOG_ERROR = 3,
  PS_LOG_OFF = 4
} ps_log_level;

void ps_log_set_level(ps_log_level level);
ps_log_level ps_log_get_level(void);
/* Parses "debug|info|warn|error|off"; PS_ERR_INVALID with "'S' is not debug|...|off" in err. */
ps_status ps_log_parse_level(const char *s, ps_log_level *out, ps_error *err);
/* A binary's --log-level: parses s and sets the level, or prints
 * "PROG: --log-level: 'S' is not debug|info|warn|error|off" to stderr and returns -1. */
int ps_log_apply_level(const char *prog, const char *s);
/* A tag printed on every line (e.g. "server/0", "worker/1"); copied. */
void ps_log_set_tag(const char *tag);

void ps_log_write(ps_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Lines per second and call site of the _RL macros. */
#define PS_LOG_RATE 5

/* A call site's rate limit, zero-initialised (a static in the macro); updated with atomics,
 * so threads may share a site. */
typedef struct ps_log_site {
  uint64_t window;     /* the (monotonic) second being counted */
  uint64_t count;      /* lines asked for in that second */
  uint64_t suppressed; /* lines left out since the last one written */
} ps_log_site;

/* Whether a line at site may be written at now_ns (monotonic); if so, *suppressed is the number
 * of lines left out since the previous one written. */
bool ps_log_site_admit(ps_log_site *site, uint64_t now_ns, uint64_t *suppressed);
/* ps_log_write through site's rate limit. */
void ps_log_write_rl(ps_log_site *site, ps_log_level level, const char *file, int line,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define PS_LOG(level, ...)                                                 \
  do {                                                                     \
    if ((level) >= ps_log_get_level()) ps_log_write((level), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define PS_DEBUG(...) PS_LOG(PS_LOG_DEBUG, __VA_ARGS__)
#define PS_INFO(...) PS_LOG(PS_LOG_INFO, __VA_ARGS__)
#define PS_WARN(...) PS_LOG(PS_LOG_WARN, __VA_ARGS__)
#define PS_ERROR(...) PS_LOG(PS_LOG_ERROR, __VA_ARGS__)
#define PS_LOG_RL(level, ...)                                                   \
  do {                                                                          \
    static ps_log_site ps_log_site_;                                            \
    if ((level) >= ps_log_get_level())                                          \
      ps_log_write_rl(&ps_log_site_, (level), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define PS_DEBUG_RL(...) PS_LOG_RL(PS_LOG_DEBUG, __VA_ARGS__)
#define PS_WARN_RL(...) PS_LOG_RL(PS_LOG_WARN, __VA_ARGS__)
#define PS_ERROR_RL(...) PS_LOG_RL(PS_LOG_ERROR, __VA_ARGS__)

#endif
