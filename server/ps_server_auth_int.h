/* ps_server_auth_int.h: the ZAP handler of a CURVE server (ps_server_auth.c), private to
 * server/. */
#ifndef PS_SERVER_AUTH_INT_H
#define PS_SERVER_AUTH_INT_H

#include "ps_curve.h"
#include "ps_status.h"

typedef struct srv_auth srv_auth;

/* Binds the ZAP endpoint of ctx (inproc://zeromq.zap.01) and starts the thread that answers
 * it: a CURVE client whose public key is in keys is accepted, every other one refused. Call
 * before any CURVE socket of ctx binds (a CURVE socket without a ZAP handler accepts every
 * key); keys must outlive the handler. */
ps_status srv_auth_start(void *ctx, const ps_curve_keyset *keys, srv_auth **out, ps_error *err);
/* Also accepts the client key pub (Z85): the shard's own server key, which its replicas use to
 * reach each other (ps_server_replication_setup.c). Callable while the handler runs. */
void srv_auth_allow_peer(srv_auth *a, const char *pub);
/* Stops and joins the thread and closes its socket. Call after the CURVE sockets are closed
 * (until then a handshake would find no handler) and before zmq_ctx_term. */
void srv_auth_stop(srv_auth **a);

#endif
