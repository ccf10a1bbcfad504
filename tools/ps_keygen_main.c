/* ps-keygen: writes a CURVE key pair for a ps-server or a client (ps_curve.h).
 *
 * PREFIX.secret (mode 0600) stays with its owner; PREFIX.public is what the other side gets:
 * a server's goes to its clients (--curve-server), a client's into the server's
 * --curve-clients directory. An existing file is kept unless --force, so a key in use is
 * never replaced by accident. Exit 0, 2 for bad arguments (an existing file included), 1 when
 * the files cannot be written. */
#include <stdbool.h>
#include <stdio.h>

#include "ps_cli.h"
#include "ps_curve.h"

int main(int argc, char **argv) {
  const char *out = NULL;
  bool force = false;
  ps_cli_opt opts[] = {
      {"out", 'o', PS_CLI_STRING, &out, "PREFIX",
       "write PREFIX.secret (mode 0600) and PREFIX.public", true, 0, 0},
      {"force", 0, PS_CLI_FLAG, &force, NULL, "replace existing key files", false, 0, 0},
  };
  ps_cli cli = {"ps-keygen",
                "Writes a CURVE key pair (Z85 text) for ps-server --curve-secret/--curve-clients "
                "and the clients' --curve-secret/--curve-server.",
                NULL, opts, sizeof opts / sizeof *opts};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  char pub[PS_CURVE_Z85_SIZE];
  ps_error err;
  ps_status st = ps_curve_write_pair(out, force, pub, &err);
  if (st != PS_OK) {
    fprintf(stderr, "ps-keygen: %s\n", err.msg);
    return st == PS_ERR_CONFLICT || st == PS_ERR_INVALID ? 2 : 1;
  }
  printf("wrote %s.secret and %s.public (public key %s)\n", out, out, pub);
  return 0;
}
