#include "ps_status.h"

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
