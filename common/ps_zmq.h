/* ps_zmq: the few ZeroMQ steps every socket owner repeats.
 *
 * The client's shard sockets and a server's replica peers are the same kind of DEALER; the
 * client and the server both read connection events off a socket monitor; the ZAP handler and
 * the scoring bench both take in a whole multipart message. Written once here so that their
 * options and framing rules cannot drift apart. */
#ifndef PS_ZMQ_H
#define PS_ZMQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

/* A DEALER that drops what is unsent at close (linger 0), queues up to 100000 messages each
 * way, and reconnects after 100 ms, backing off to reconnect_max_ms. NULL if zmq_socket
 * failed (errno says why). */
void *ps_zmq_dealer(void *ctx, int reconnect_max_ms);

/* Receives every frame of one message from sock (blocking), keeps the first max in f
 * (initialised; the caller closes them) and drops the rest. Returns how many it kept; a
 * receive error ends the message early. */
int ps_zmq_recv_frames(void *sock, zmq_msg_t *f, int max);

/* The next event queued on a socket monitor's PAIR, without waiting: its event code, value
 * (the fd for ACCEPTED/DISCONNECTED, errno for failures) and endpoint (cut to ep_size - 1; ""
 * when it had none). false when none is queued. */
bool ps_zmq_monitor_next(void *mon, uint16_t *event, uint32_t *value, char *ep, size_t ep_size);

#endif
