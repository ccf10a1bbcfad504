/* ps_status: Ember's error codes, and the one error convention of its library APIs.
 *
 * Every call that can fail returns a ps_status (0 = PS_OK) and never aborts on bad input.
 * The codes are stable: they travel in error replies on the wire (proto/ember.proto).
 *
 * The convention (after RocksDB's C API, whose errptr the caller owns): a call that can fail
 * for a reason worth telling takes a `ps_error *err` as its last argument. On failure it
 * returns the status and, when err is not NULL, fills err with the same code and a one-line
 * message (no trailing newline, no program name); on success it leaves err untouched. Callers
 * that only branch on the status pass NULL. The message is the caller's to print or forward;
 * a library logs nothing it also returns. */
#ifndef PS_STATUS_H
#define PS_STATUS_H

typedef enum ps_status {
  PS_OK = 0,
  PS_ERR_INVALID = 1,       /* bad argument or option */
  PS_ERR_NOMEM = 2,         /* allocation failed or a budget is exhausted */
  PS_ERR_IO = 3,            /* file system or database failure */
  PS_ERR_CORRUPT = 4,       /* stored data does not have the expected shape */
  PS_ERR_NOT_FOUND = 5,     /* no such key, table, file */
  PS_ERR_CONFLICT = 6,      /* e.g. a table re-declared with another spec */
  PS_ERR_PROTO = 7,         /* malformed message */
  PS_ERR_VERSION = 8,       /* unsupported protocol version */
  PS_ERR_UNKNOWN_OP = 9,    /* message op not known */
  PS_ERR_UNKNOWN_TABLE = 10,/* table id not declared */
  PS_ERR_WRONG_SHARD = 11,  /* a key that this server does not own */
  PS_ERR_TIMEOUT = 12,      /* a peer did not answer in time */
  PS_ERR_UNAVAILABLE = 13,  /* peer unreachable or shutting down */
  PS_ERR_UNSUPPORTED = 14,  /* feature not built or not available (e.g. no GPU) */
  PS_ERR_PARSE = 15,        /* bad input data (Criteo line, number) */
  PS_ERR_INTERNAL = 16,     /* a bug: an invariant did not hold */
  PS_ERR_COUNT_
} ps_status;

/* A short constant message for a status ("invalid argument", ...). Never NULL. */
const char *ps_status_str(ps_status st);

#define PS_ERROR_MSG_MAX 512

typedef struct ps_error {
  ps_status code;              /* PS_OK while nothing failed */
  char msg[PS_ERROR_MSG_MAX];  /* "" while nothing failed */
} ps_error;

/* Clears err (code PS_OK, empty message); NULL is fine. */
void ps_error_clear(ps_error *err);
/* Fills err (when not NULL) with code and a printf-style message, truncated to fit, and
 * returns code, so a failing path reads `return ps_error_set(err, PS_ERR_IO, "...", ...);`. */
ps_status ps_error_set(ps_error *err, ps_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes err's message with context ("table 3: " + message); returns err's code. */
ps_status ps_error_prefix(ps_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message of err, or of its code when the message is empty (never NULL; "ok" when err
 * is NULL or holds no failure). */
const char *ps_error_str(const ps_error *err);

#endif
