/* ps_curve_auth: the ZAP handler of a CURVE server (ps-server, ps-serve; ps_curve.h) -- one
 * thread that answers libzmq's authentication requests (ZeroMQ RFC 27) with the clients
 * directory's verdict.
 *
 * With CURVE on the ROUTER socket, libzmq completes the key exchange itself and then asks
 * inproc://zeromq.zap.01 of the socket's context whether the client's long-term public key
 * may connect; a refused client gets an ERROR command and its connection is closed before
 * any message of it reaches the main loop, so the main loop needs no check of its own and a
 * refused client costs the server one handshake. The keys are read once at start
 * (ps_curve_keyset), so a handshake never touches the file system. The thread polls with a
 * 100 ms tick to see the stop flag; handshakes are rare (one per connection, and reconnects)
 * and take microseconds here, so one thread is plenty. Refusals are logged at WARN, rate
 * limited (anyone who reaches the port can cause them); accepted clients at DEBUG, with the
 * name of the file that lists their key. The replicas of a shard share its server key pair
 * (clients hold one --curve-server key for all of them) and reach each other as CURVE clients
 * with it, so the server's own public key is accepted too (ps_curve_auth_allow_peer): whoever holds
 * the server's secret could serve its clients anyway. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_log.h"
#include "ps_curve.h"
#include "ps_zmq.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 7 /* version, request id, domain, address, identity, mechanism, key */

struct ps_curve_auth {
  void *sock;
  const ps_curve_keyset *keys;
  uint8_t peer_key[PS_CURVE_KEY_BYTES]; /* the replicas' own (server) public key */
  atomic_bool has_peer;                 /* peer_key is set (published after it is written) */
  pthread_t thread;
  bool started;
  atomic_int stop;
};

/* Sends the reply to request frames f (f[1] is the request id). */
static void reply(void *sock, zmq_msg_t *f, const char *code, const char *text,
                  const char *user) {
  zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
  zmq_send(sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
  zmq_send(sock, code, strlen(code), ZMQ_SNDMORE);
  zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
  zmq_send(sock, user, strlen(user), ZMQ_SNDMORE);
  zmq_send(sock, "", 0, 0);
}

/* Receives one request (every frame; ZAP_FRAMES kept) and answers it. */
static void serve_one(ps_curve_auth *a) {
  zmq_msg_t f[ZAP_FRAMES];
  int n = ps_zmq_recv_frames(a->sock, f, ZAP_FRAMES);
  if (n < 2) { /* nothing to answer to; REP needs a reply all the same */
    zmq_send(a->sock, "", 0, 0);
  } else if (n != ZAP_FRAMES || zmq_msg_size(&f[0]) != 3 ||
             memcmp(zmq_msg_data(&f[0]), "1.0", 3) != 0) {
    reply(a->sock, f, "500", "malformed ZAP request", "");
  } else {
    char addr[128], mech[16];
    snprintf(addr, sizeof addr, "%.*s", (int)zmq_msg_size(&f[3]), (char *)zmq_msg_data(&f[3]));
    snprintf(mech, sizeof mech, "%.*s", (int)zmq_msg_size(&f[5]), (char *)zmq_msg_data(&f[5]));
    const bool curve = strcmp(mech, "CURVE") == 0;
    const char *name = curve ? ps_curve_keyset_find(a->keys, zmq_msg_data(&f[6]),
                                                    zmq_msg_size(&f[6]))
                             : NULL;
    if (!name && curve && atomic_load_explicit(&a->has_peer, memory_order_acquire) &&
        zmq_msg_size(&f[6]) == PS_CURVE_KEY_BYTES &&
        memcmp(zmq_msg_data(&f[6]), a->peer_key, PS_CURVE_KEY_BYTES) == 0)
      name = "replica peer";
    if (name) {
      PS_DEBUG("CURVE client '%s' accepted from %s", name, addr);
      reply(a->sock, f, "200", "OK", name);
    } else {
      char key[PS_CURVE_Z85_SIZE] = "?";
      if (zmq_msg_size(&f[6]) == PS_CURVE_KEY_BYTES) zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
      PS_WARN_RL("refused a %s client from %s: its public key %s is not in --curve-clients",
                 mech, addr, key);
      reply(a->sock, f, "400", "key not authorized", "");
    }
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

static void *auth_main(void *arg) {
  ps_curve_auth *a = arg;
  while (!atomic_load(&a->stop)) {
    zmq_pollitem_t it = {.socket = a->sock, .events = ZMQ_POLLIN};
    int rc = zmq_poll(&it, 1, 100);
    if (rc < 0 && zmq_errno() == ETERM) break;
    if (rc > 0) serve_one(a);
  }
  return NULL;
}

ps_status ps_curve_auth_start(void *ctx, const ps_curve_keyset *keys, ps_curve_auth **out, ps_error *err) {
  *out = NULL;
  ps_curve_auth *a = calloc(1, sizeof *a);
  if (!a) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  a->keys = keys;
  int zero = 0;
  a->sock = zmq_socket(ctx, ZMQ_REP);
  if (!a->sock || zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
      zmq_bind(a->sock, ZAP_ENDPOINT) != 0) {
    ps_error_set(err, PS_ERR_INTERNAL, "cannot bind the ZAP handler %s: %s", ZAP_ENDPOINT,
                 zmq_strerror(zmq_errno()));
    ps_curve_auth_stop(&a);
    return PS_ERR_INTERNAL;
  }
  if (pthread_create(&a->thread, NULL, auth_main, a) != 0) {
    ps_curve_auth_stop(&a);
    return ps_error_set(err, PS_ERR_INTERNAL, "cannot start the ZAP handler thread");
  }
  a->started = true;
  *out = a;
  return PS_OK;
}

void ps_curve_auth_allow_peer(ps_curve_auth *a, const char *pub) {
  if (!a || !zmq_z85_decode(a->peer_key, pub)) return;
  atomic_store_explicit(&a->has_peer, true, memory_order_release);
}

void ps_curve_auth_stop(ps_curve_auth **ap) {
  if (!ap || !*ap) return;
  ps_curve_auth *a = *ap;
  *ap = NULL;
  atomic_store(&a->stop, 1);
  if (a->started) pthread_join(a->thread, NULL);
  if (a->sock) zmq_close(a->sock);
  free(a);
}
