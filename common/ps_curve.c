/* ps_curve: CURVE key files, the clients directory and the socket options (ps_curve.h).
 *
 * Z85 and the key arithmetic are libzmq's (zmq_z85_decode checks every character, and
 * zmq_curve_public derives a public key with libsodium), so Ember carries no crypto of its
 * own. A key file is read whole with a small bound (a key file is 40 or 41 bytes; anything
 * much longer is not one), and the mode of a secret is checked on the descriptor that was
 * read, not on the path, so the file checked is the file used. Files are written under a
 * temporary name in the same directory and renamed (with --force) or created exclusively
 * (without), with their mode set by fchmod so that the umask does not decide it. */
#include "ps_curve.h"
#include "ps_fs.h"
#include "ps_grow.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

bool ps_curve_available(void) { return zmq_has("curve") != 0; }

static ps_status need_curve(ps_error *err) {
  if (ps_curve_available()) return PS_OK;
  return ps_error_set(err, PS_ERR_UNSUPPORTED,
                      "this libzmq has no CURVE support (it must be built with libsodium)");
}

/* A fresh key pair. */
static ps_status curve_keypair(char pub[PS_CURVE_Z85_SIZE], char sec[PS_CURVE_Z85_SIZE],
                               ps_error *err) {
  if (need_curve(err) != PS_OK) return PS_ERR_UNSUPPORTED;
  if (zmq_curve_keypair(pub, sec) != 0)
    return ps_error_set(err, PS_ERR_INTERNAL, "cannot make a key pair: %s", zmq_strerror(errno));
  return PS_OK;
}

/* Whether s is 40 characters that decode as Z85 (into bin when not NULL). */
static bool z85_key(const char *s, uint8_t *bin) {
  uint8_t tmp[PS_CURVE_KEY_BYTES];
  return strlen(s) == PS_CURVE_Z85_LEN && zmq_z85_decode(bin ? bin : tmp, s) != NULL;
}

ps_status ps_curve_public(const char *sec, char pub[PS_CURVE_Z85_SIZE], ps_error *err) {
  if (need_curve(err) != PS_OK) return PS_ERR_UNSUPPORTED;
  if (!sec || !z85_key(sec, NULL) || zmq_curve_public(pub, sec) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "not a Z85 secret key");
  return PS_OK;
}

/* ---------------------------------------------------------------- reading */

ps_status ps_curve_read_key(const char *path, bool secret, char key[PS_CURVE_Z85_SIZE],
                            ps_error *err) {
  const char *what = secret ? "secret key" : "public key";
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return ps_error_set(err, errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO,
                        "%s file %s: %s", what, path, strerror(errno));
  struct stat st;
  char buf[PS_CURVE_Z85_LEN + 8];
  ssize_t n = -1;
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular) n = read(fd, buf, sizeof buf);
  int e = errno;
  close(fd);
  if (!regular)
    return ps_error_set(err, PS_ERR_INVALID, "%s file %s: not a regular file", what, path);
  if (n < 0) return ps_error_set(err, PS_ERR_IO, "%s file %s: %s", what, path, strerror(e));
  if (secret && (st.st_mode & 0007))
    return ps_error_set(err, PS_ERR_INVALID,
                        "secret key file %s: mode %04o lets others read it (chmod 600 %s)", path,
                        (unsigned)(st.st_mode & 07777), path);
  size_t len = (size_t)n;
  if (len > 0 && buf[len - 1] == '\n') len--;
  if (len != PS_CURVE_Z85_LEN)
    return ps_error_set(err, PS_ERR_INVALID,
                        "%s file %s: not a key (%zu bytes; a key is %d Z85 characters and a "
                        "newline, as ps-keygen writes it)",
                        what, path, (size_t)n, PS_CURVE_Z85_LEN);
  memcpy(key, buf, PS_CURVE_Z85_LEN);
  key[PS_CURVE_Z85_LEN] = '\0';
  if (!z85_key(key, NULL)) {
    key[0] = '\0';
    return ps_error_set(err, PS_ERR_INVALID, "%s file %s: not Z85 text", what, path);
  }
  if (secret && need_curve(err) != PS_OK) return PS_ERR_UNSUPPORTED;
  return PS_OK;
}

ps_status ps_curve_load_client(const char *secret_file, const char *server_file,
                               char sec[PS_CURVE_Z85_SIZE], char srv[PS_CURVE_Z85_SIZE],
                               ps_error *err) {
  sec[0] = srv[0] = '\0';
  if (!secret_file && !server_file) return PS_OK;
  if (!secret_file || !server_file)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--curve-secret and --curve-server go together (CURVE needs this "
                        "client's secret key and the servers' public key)");
  ps_status st = ps_curve_read_key(secret_file, true, sec, err);
  if (st == PS_OK) st = ps_curve_read_key(server_file, false, srv, err);
  if (st != PS_OK) sec[0] = srv[0] = '\0';
  return st;
}

/* ---------------------------------------------------------------- writing */

/* Writes key + "\n" to path with mode; exclusive: fail if path exists, else via a temporary
 * file renamed over it (ps_write_atomic). */
static ps_status write_key(const char *path, const char *key, mode_t mode, bool exclusive,
                           ps_error *err) {
  char line[PS_CURVE_Z85_SIZE + 1];
  int len = snprintf(line, sizeof line, "%s\n", key);
  return ps_write_atomic(path, line, (size_t)len, (unsigned)mode, exclusive, err);
}

ps_status ps_curve_write_pair(const char *prefix, bool force, char pub[PS_CURVE_Z85_SIZE],
                              ps_error *err) {
  char spath[4096], ppath[4096], sec[PS_CURVE_Z85_SIZE];
  if (!prefix || !*prefix || snprintf(spath, sizeof spath, "%s.secret", prefix) >= 4000)
    return ps_error_set(err, PS_ERR_INVALID, "the prefix is empty or too long");
  snprintf(ppath, sizeof ppath, "%s.public", prefix);
  if (!force) {
    struct stat st;
    const char *exists = lstat(spath, &st) == 0 ? spath : lstat(ppath, &st) == 0 ? ppath : NULL;
    if (exists)
      return ps_error_set(err, PS_ERR_CONFLICT, "%s exists (--force replaces it)", exists);
  }
  ps_status s = curve_keypair(pub, sec, err);
  if (s == PS_OK) s = write_key(spath, sec, 0600, !force, err);
  if (s == PS_OK && (s = write_key(ppath, pub, 0644, !force, err)) != PS_OK && !force)
    unlink(spath); /* the pair or nothing */
  memset(sec, 0, sizeof sec);
  return s;
}

/* ---------------------------------------------------------------- the clients directory */

typedef struct ks_entry {
  uint8_t key[PS_CURVE_KEY_BYTES];
  char *name;
} ks_entry;

struct ps_curve_keyset {
  ks_entry *e;
  size_t n, cap;
};

void ps_curve_keyset_destroy(ps_curve_keyset **ksp) {
  if (!ksp || !*ksp) return;
  ps_curve_keyset *ks = *ksp;
  *ksp = NULL;
  for (size_t i = 0; i < ks->n; i++) free(ks->e[i].name);
  free(ks->e);
  free(ks);
}

/* Adds DIR/NAME (a *.public file) to ks. */
static ps_status keyset_add(ps_curve_keyset *ks, const char *dir, const char *name,
                            ps_error *err) {
  char path[4096], key[PS_CURVE_Z85_SIZE];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
    return ps_error_set(err, PS_ERR_INVALID, "%s/%s: path too long", dir, name);
  ps_status st = ps_curve_read_key(path, false, key, err);
  if (st != PS_OK) return st;
  if (!ps_grow((void **)&ks->e, &ks->cap, ks->n + 1, sizeof *ks->e, 8))
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  ks_entry *e = &ks->e[ks->n];
  zmq_z85_decode(e->key, key);
  e->name = strndup(name, strlen(name) - strlen(".public"));
  if (!e->name) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  ks->n++;
  return PS_OK;
}

ps_status ps_curve_keyset_load(const char *dir, ps_curve_keyset **out, ps_error *err) {
  *out = NULL;
  if (need_curve(err) != PS_OK) return PS_ERR_UNSUPPORTED;
  DIR *d = dir ? opendir(dir) : NULL;
  if (!d)
    return ps_error_set(err, PS_ERR_INVALID, "clients directory %s: %s", dir ? dir : "(none)",
                        strerror(errno));
  ps_curve_keyset *ks = calloc(1, sizeof *ks);
  ps_status st = ks ? PS_OK : ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  struct dirent *de;
  while (st == PS_OK && (de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] == '.' || len <= strlen(".public") ||
        strcmp(de->d_name + len - strlen(".public"), ".public") != 0)
      continue;
    st = keyset_add(ks, dir, de->d_name, err);
  }
  closedir(d);
  if (st == PS_OK && ks->n == 0)
    st = ps_error_set(err, PS_ERR_INVALID,
                      "clients directory %s holds no NAME.public file: no client could connect",
                      dir);
  if (st != PS_OK) {
    ps_curve_keyset_destroy(&ks);
    return st;
  }
  *out = ks;
  return PS_OK;
}

size_t ps_curve_keyset_size(const ps_curve_keyset *ks) { return ks ? ks->n : 0; }

const char *ps_curve_keyset_find(const ps_curve_keyset *ks, const uint8_t *key, size_t len) {
  if (!ks || len != PS_CURVE_KEY_BYTES) return NULL;
  for (size_t i = 0; i < ks->n; i++)
    if (memcmp(ks->e[i].key, key, PS_CURVE_KEY_BYTES) == 0) return ks->e[i].name;
  return NULL;
}

/* ---------------------------------------------------------------- sockets */

static ps_status sockopt_fail(ps_error *err) {
  return ps_error_set(err, PS_ERR_INTERNAL, "cannot set the CURVE socket options: %s",
                      zmq_strerror(errno));
}

ps_status ps_curve_setup_server(void *sock, const char *sec, ps_error *err) {
  if (need_curve(err) != PS_OK) return PS_ERR_UNSUPPORTED;
  if (!sec || !z85_key(sec, NULL))
    return ps_error_set(err, PS_ERR_INVALID, "not a Z85 secret key");
  int one = 1;
  if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, PS_CURVE_Z85_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "ember", 5) != 0)
    return sockopt_fail(err);
  return PS_OK;
}

ps_status ps_curve_setup_client(void *sock, const char *sec, const char *srv, ps_error *err) {
  char pub[PS_CURVE_Z85_SIZE];
  ps_status st = ps_curve_public(sec, pub, err);
  if (st != PS_OK) return st;
  if (!srv || !z85_key(srv, NULL))
    return ps_error_set(err, PS_ERR_INVALID, "the server key is not a Z85 public key");
  if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, srv, PS_CURVE_Z85_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, PS_CURVE_Z85_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, PS_CURVE_Z85_LEN) != 0)
    return sockopt_fail(err);
  return PS_OK;
}
