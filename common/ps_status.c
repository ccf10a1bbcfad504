/* ps_status: the messages of the status codes and the ps_error helpers (convention in
 * ps_status.h). */
#include "ps_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const k_messages[PS_ERR_COUNT_] = {
    [PS_OK] = "ok",
    [PS_ERR_INVALID] = "invalid argument",
    [PS_ERR_NOMEM] = "out of memory",
    [PS_ERR_IO] = "I/O error",
    [PS_ERR_CORRUPT] = "corrupt data",
    [PS_ERR_NOT_FOUND] = "not found",
    [PS_ERR_CONFLICT] = "conflict",
    [PS_ERR_PROTO] = "malformed message",
    [PS_ERR_VERSION] = "unsupported protocol version",
    [PS_ERR_UNKNOWN_OP] = "unknown operation",
    [PS_ERR_UNKNOWN_TABLE] = "unknown table",
    [PS_ERR_WRONG_SHARD] = "key does not belong to this shard",
    [PS_ERR_TIMEOUT] = "timed out",
    [PS_ERR_UNAVAILABLE] = "unavailable",
    [PS_ERR_UNSUPPORTED] = "unsupported",
    [PS_ERR_PARSE] = "parse error",
    [PS_ERR_INTERNAL] = "internal error",
};

const char *ps_status_str(ps_status st) {
  if ((unsigned)st >= PS_ERR_COUNT_ || !k_messages[st]) return "unknown error";
  return k_messages[st];
}

void ps_error_clear(ps_error *err) {
  if (!err) return;
  err->code = PS_OK;
  err->msg[0] = 0;
}

ps_status ps_error_set(ps_error *err, ps_status code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
  va_end(ap);
  return code;
}

ps_status ps_error_prefix(ps_error *err, const char *fmt, ...) {
  if (!err) return PS_OK;
  char pre[PS_ERROR_MSG_MAX], old[PS_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof(pre), fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof(old));
  const char *rest = old[0] ? old : ps_status_str(err->code);
  size_t np = strlen(pre), nr = strlen(rest), cap = sizeof(err->msg) - 1;
  if (np > cap) np = cap;
  if (nr > cap - np) nr = cap - np;
  memcpy(err->msg, pre, np);
  memcpy(err->msg + np, rest, nr);
  err->msg[np + nr] = 0;
  return err->code;
}

const char *ps_error_str(const ps_error *err) {
  if (!err) return "ok";
  return err->msg[0] ? err->msg : ps_status_str(err->code);
}
