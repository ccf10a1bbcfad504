/* ps_status: Ember's error codes.
 *
 * Every call that can fail returns a ps_status (0 = PS_OK) and never aborts on bad input.
 * The codes are stable: they travel in error replies on the wire (proto/ember.proto). */
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

#endif
