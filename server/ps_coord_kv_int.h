/* ps_coord_kv_int: the coordinator's rendezvous store (KV_SET / KV_GET with a wait), a part of
 * ps_coord.c kept in its own file (ps_coord_kv.c). It answers through the coordinator's reply
 * interface and knows nothing of ranks: the coordinator tells it whether a sender is a member.
 * Not a public header. */
#ifndef PS_COORD_KV_INT_H
#define PS_COORD_KV_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_coord_int.h"
#include "ps_time.h"

#define COORD_MAX_NAME 1024u

/* The handle of a request a primary forwarded (srv_coord_apply): its state change is kept,
 * its answers go nowhere (the backup acked the forward already). */
extern char coord_noreq;
#define COORD_NOREQ ((void *)&coord_noreq)

/* Answers req with an error built from fmt (nothing for COORD_NOREQ). */
void coord_fail(const srv_coord_reply *io, void *req, ps_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline uint64_t coord_deadline(uint32_t timeout_ms) {
  return timeout_ms ? ps_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
}

typedef struct coord_kvs coord_kvs;

coord_kvs *coord_kvs_create(const srv_coord_reply *io);
/* Frees the store; parked getters are dropped unanswered (drain first). */
void coord_kvs_destroy(coord_kvs **k);
/* KV_SET from p (NULL = in-process); member: p holds a rank of the world, which keys under
 * "ember/" need (but SRV_COORD_CKPT_KEY, which the server checked). Each client address holds
 * at most COORD_CLIENT_KV_KEYS keys and COORD_CLIENT_KV_BYTES of keys and values. */
void coord_kvs_set(coord_kvs *k, void *req, const Ember__Header *h, const srv_coord_peer *p,
                   bool member);
/* KV_GET: answered now, or parked until the key is set or h->timeout_ms passes. */
void coord_kvs_get(coord_kvs *k, void *req, const Ember__Header *h, const srv_coord_peer *p);
/* The getters parked by the connection on fd are dropped (answered PS_ERR_UNAVAILABLE). */
void coord_kvs_peer_gone(coord_kvs *k, int fd);
/* Answers PS_ERR_TIMEOUT to getters whose deadline is <= now; the next deadline or 0. */
uint64_t coord_kvs_expire(coord_kvs *k, uint64_t now);
/* Answers every parked getter with PS_ERR_UNAVAILABLE. */
void coord_kvs_drain(coord_kvs *k);
/* kv_keys, kv_bytes (values) and kv_waiting of out. */
void coord_kvs_stats(const coord_kvs *k, ps_server_coord_stats *out);

#endif
