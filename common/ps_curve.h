/* ps_curve: ZeroMQ CURVE keys of Ember -- key files, the clients directory a server accepts,
 * and the socket options that turn CURVE on (docs/OPERATIONS.md, "Authentication").
 *
 * A key file holds one key as Z85 text (40 characters for 32 bytes), optionally followed by
 * one newline, and nothing else: what `ps-keygen --out PREFIX` writes (PREFIX.secret, mode
 * 0600, and PREFIX.public). Keys are checked when they are read, so a bad file is one line
 * naming it before anything connects: missing, not 40 Z85 characters, or -- for a secret --
 * accessible to others (any of the mode bits 0007). Group read is allowed, because Kubernetes
 * makes a Secret mounted into a pod with an fsGroup group-readable (0440) whatever its
 * defaultMode. A server's clients directory lists the clients it serves: every *.public file
 * in it is one client key; the file's name (without .public) names the client in logs.
 *
 * Keys travel in memory as NUL-terminated Z85 strings (char[PS_CURVE_Z85_SIZE]), the form
 * libzmq's socket options take, so a client's options are plain values with no lifetime.
 * Errors follow ps_status.h. Needs a libzmq built with CURVE (libsodium); ps_curve_available
 * says whether this one is. */
#ifndef PS_CURVE_H
#define PS_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

#define PS_CURVE_Z85_LEN 40                     /* Z85 characters of a 32-byte key */
#define PS_CURVE_Z85_SIZE (PS_CURVE_Z85_LEN + 1) /* with its NUL */
#define PS_CURVE_KEY_BYTES 32

/* Whether libzmq has CURVE (false: every call below that needs it is PS_ERR_UNSUPPORTED). */
bool ps_curve_available(void);

/* The public key of a secret key. */
ps_status ps_curve_public(const char *sec, char pub[PS_CURVE_Z85_SIZE], ps_error *err);

/* Writes a fresh pair to PREFIX.secret (mode 0600) and PREFIX.public (mode 0644) and returns
 * the public key in pub. An existing file is PS_ERR_CONFLICT unless force (then both are
 * replaced, each by a rename, so a reader never sees half a key). */
ps_status ps_curve_write_pair(const char *prefix, bool force, char pub[PS_CURVE_Z85_SIZE],
                              ps_error *err);

/* Reads the key in path; secret: also refuses a file others may access. PS_ERR_INVALID (a
 * file that is not a key), PS_ERR_IO (cannot be read), with the path in err. */
ps_status ps_curve_read_key(const char *path, bool secret, char key[PS_CURVE_Z85_SIZE],
                            ps_error *err);

/* A client's two key files (--curve-secret, --curve-server), both or neither: neither leaves
 * sec and srv empty (no CURVE); one without the other is PS_ERR_INVALID naming the flags. */
ps_status ps_curve_load_client(const char *secret_file, const char *server_file,
                               char sec[PS_CURVE_Z85_SIZE], char srv[PS_CURVE_Z85_SIZE],
                               ps_error *err);

/* ---------------------------------------------------------------- the clients a server serves */

typedef struct ps_curve_keyset ps_curve_keyset;

/* Every DIR/NAME.public; a bad one, or none at all, is PS_ERR_INVALID naming it. */
ps_status ps_curve_keyset_load(const char *dir, ps_curve_keyset **out, ps_error *err);
void ps_curve_keyset_destroy(ps_curve_keyset **ks);
size_t ps_curve_keyset_size(const ps_curve_keyset *ks);
/* The NAME of the file that lists the 32-byte key, or NULL when none does. */
const char *ps_curve_keyset_find(const ps_curve_keyset *ks, const uint8_t *key, size_t len);

/* ---------------------------------------------------------------- sockets */

/* Makes sock a CURVE server with secret key sec (before bind). Clients are then held to the
 * ZAP handler of the socket's context (ps_curve_auth_start below). */
ps_status ps_curve_setup_server(void *sock, const char *sec, ps_error *err);
/* Makes sock a CURVE client with its secret key sec and the server's public key srv (before
 * connect); its own public key is derived from sec. */
ps_status ps_curve_setup_client(void *sock, const char *sec, const char *srv, ps_error *err);

/* ---------------------------------------------------------------- the ZAP handler */

/* The ZAP handler of a CURVE server (ps_curve_auth.c): a thread answering libzmq's
 * authentication requests of one context with a clients directory's verdict. Shared by
 * ps-server and ps-serve. */
typedef struct ps_curve_auth ps_curve_auth;

/* Binds the ZAP endpoint of ctx (inproc://zeromq.zap.01) and starts the thread that answers
 * it: a CURVE client whose public key is in keys is accepted, every other one refused. Call
 * before any CURVE socket of ctx binds (a CURVE socket without a ZAP handler accepts every
 * key); keys must outlive the handler. */
ps_status ps_curve_auth_start(void *ctx, const ps_curve_keyset *keys, ps_curve_auth **out,
                              ps_error *err);
/* Also accepts the client key pub (Z85): a replicated shard's own server key, which its
 * replicas use to reach each other. Callable while the handler runs. */
void ps_curve_auth_allow_peer(ps_curve_auth *a, const char *pub);
/* Stops and joins the thread and closes its socket. Call after the CURVE sockets are closed
 * (until then a handshake would find no handler) and before zmq_ctx_term. */
void ps_curve_auth_stop(ps_curve_auth **a);

#endif
