/* ps_zmq: a peer DEALER's options, whole multipart receives, socket monitor events. */
#include "ps_zmq.h"

#include <string.h>

void *ps_zmq_dealer(void *ctx, int reconnect_max_ms) {
  void *sock = zmq_socket(ctx, ZMQ_DEALER);
  if (!sock) return NULL;
  int zero = 0, hwm = 100000, ivl = 100;
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  zmq_setsockopt(sock, ZMQ_RECONNECT_IVL_MAX, &reconnect_max_ms, sizeof reconnect_max_ms);
  return sock;
}

int ps_zmq_recv_frames(void *sock, zmq_msg_t *f, int max) {
  int n = 0;
  bool more = true;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (n < max) f[n++] = m;
    else zmq_msg_close(&m);
  }
  return n;
}

bool ps_zmq_monitor_next(void *mon, uint16_t *event, uint32_t *value, char *ep, size_t ep_size) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return false;
  }
  /* First frame: the event (16 bits) and its value (32 bits); then the endpoint. */
  *event = 0;
  *value = 0;
  if (zmq_msg_size(&m) >= 6) {
    memcpy(event, zmq_msg_data(&m), 2);
    memcpy(value, (const char *)zmq_msg_data(&m) + 2, 4);
  }
  bool more = zmq_msg_more(&m);
  zmq_msg_close(&m);
  if (ep_size) ep[0] = '\0';
  while (more) {
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, 0) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (ep_size) {
      size_t n = zmq_msg_size(&m) < ep_size - 1 ? zmq_msg_size(&m) : ep_size - 1;
      memcpy(ep, zmq_msg_data(&m), n);
      ep[n] = '\0';
    }
    zmq_msg_close(&m);
  }
  return true;
}
