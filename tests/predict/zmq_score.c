/* zmq_score: one scoring request to ps-serve --listen (docs/PROTOCOL.md, "ps-serve over
 * ZeroMQ") for test_ps_serve_zmq.py, the way a client program makes it: a DEALER socket (CURVE
 * with a secret key file and the server's public key file when given), the frames "" (the
 * delimiter a REQ socket adds) and "CTYPE\nBODY" (or FILE's bytes as they are with raw).
 * Prints the reply frame ("STATUS\nJSON") on stdout and exits 0; 4 when no reply comes within
 * the timeout, 1 on a set-up failure.
 * Usage: zmq_score URL CTYPE|raw FILE [TIMEOUT_MS [SECRET_FILE SERVER_PUBLIC_FILE]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_curve.h"

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5 && argc != 7) {
    fprintf(stderr, "usage: zmq_score URL CTYPE|raw FILE [TIMEOUT_MS [SECRET SERVER_PUBLIC]]\n");
    return 1;
  }
  FILE *f = fopen(argv[3], "rb");
  if (!f) return perror(argv[3]), 1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  bool raw = strcmp(argv[2], "raw") == 0;
  size_t hl = raw ? 0 : strlen(argv[2]) + 1;
  char *buf = malloc(hl + (size_t)n + 1);
  if (!buf || fread(buf + hl, 1, (size_t)n, f) != (size_t)n) return fprintf(stderr, "cannot read %s\n", argv[3]), 1;
  fclose(f);
  if (!raw) memcpy(buf, argv[2], hl - 1), buf[hl - 1] = '\n';
  int timeout = argc >= 5 ? atoi(argv[4]) : 30000, zero = 0;
  void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
  if (argc == 7) {
    char sec[PS_CURVE_Z85_SIZE], srv[PS_CURVE_Z85_SIZE];
    ps_error err;
    if (ps_curve_load_client(argv[5], argv[6], sec, srv, &err) != PS_OK ||
        ps_curve_setup_client(sock, sec, srv, &err) != PS_OK)
      return fprintf(stderr, "%s\n", err.msg), 1;
  }
  if (zmq_connect(sock, argv[1]) != 0) return fprintf(stderr, "connect: %s\n", zmq_strerror(zmq_errno())), 1;
  zmq_send(sock, "", 0, ZMQ_SNDMORE);
  zmq_send(sock, buf, hl + (size_t)n, 0);
  free(buf);
  zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
  int rc = 4;
  if (zmq_poll(&it, 1, timeout) == 1) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    int frames = 0;
    bool more = true;
    while (more && zmq_msg_recv(&m, sock, 0) >= 0) { /* the delimiter, then the reply */
      more = zmq_msg_more(&m);
      if (!more) fwrite(zmq_msg_data(&m), 1, zmq_msg_size(&m), stdout);
      frames++;
    }
    zmq_msg_close(&m);
    rc = frames == 2 ? 0 : 1;
  }
  zmq_close(sock);
  zmq_ctx_term(ctx);
  return rc;
}
