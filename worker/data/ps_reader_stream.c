/* ps_reader_stream.c: the reader's input when it is a stream (stdin, a named pipe) or a
 * regular file that grows (--follow-input): reads that wait for data instead of ending at the
 * first empty read.
 *
 * A pipe is polled in slices of POLL_MS, a followed file re-read after a sleep of POLL_MS at
 * its end, so that both see the stop flags (the caller's, e.g. a SIGTERM handler's, and
 * ps_reader_destroy's) within POLL_MS: a blocking read(2) would hold the reader thread until
 * the writer wrote again, and destroy would hang on its join. The input ends (read returns 0)
 * when a pipe's writer closes it, after idle_s without a byte, or on a stop flag; a partial
 * last line is then read as a line, as at a file's end.
 *
 * The caller's stop flag (a signal) ends the input only when no data is there to read: while
 * data flows, ps-worker's ranks agree on the step to stop at instead (ps_train_stream.c), since
 * each rank reading on to its own last line would give the ranks different step counts. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ps_reader_int.h"
#include "ps_time.h"

#define POLL_MS 50

int ps_data_is_stream(const char *path) {
  struct stat sb;
  return strcmp(path, "-") == 0 || (stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
}

static int destroying(const ps_reader *r) { return __atomic_load_n(&r->stop, __ATOMIC_RELAXED); }

/* A stream is text: a first chunk in gzip or Ember's binary format is refused, since neither
 * can be parsed as lines (a gzip stream: zcat it into the pipe). */
static int sniff_bad(ps_reader *r, const char *p, size_t n) {
  const char *what = NULL;
  if (n >= 2 && (unsigned char)p[0] == 0x1f && (unsigned char)p[1] == 0x8b)
    what = "gzip (decompress it into the stream: zcat FILE | ps-worker --train -)";
  else if (n >= 8 && memcmp(p, PS_CRITEO_BIN_MAGIC, 8) == 0)
    what = "Ember binary (train on the file itself)";
  if (what) snprintf(r->err, sizeof r->err, "%s: the stream is %s, not text lines", r->path, what);
  return what != NULL;
}

ssize_t ps_reader_stream_read(ps_reader *r, char *dst, size_t n) {
  uint64_t idle_from = ps_now_ns();
  for (;;) {
    if (destroying(r)) return 0;
    if (r->o.stream) {
      struct pollfd pf = {.fd = r->fd, .events = POLLIN};
      int k = poll(&pf, 1, POLL_MS);
      if (k < 0 && errno != EINTR) {
        snprintf(r->err, sizeof r->err, "%s: poll: %s", r->path, strerror(errno));
        return -1;
      }
      if (k <= 0) goto idle; /* nothing yet (a closed pipe reads as POLLHUP: k = 1) */
    }
    ssize_t got = read(r->fd, dst, n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) goto idle;
    if (got < 0) {
      snprintf(r->err, sizeof r->err, "%s: read: %s", r->path, strerror(errno));
      return -1;
    }
    if (got > 0) {
      if (r->src_bytes == 0 && sniff_bad(r, dst, (size_t)got)) return -1;
      return got;
    }
    if (r->o.stream) return 0; /* the writer closed the pipe */
    /* a followed file's current end: wait for its writer */
    struct timespec ts = {0, POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  idle: /* the caller's stop ends the input only while none comes: see the top of the file */
    if (r->o.stop && *r->o.stop) return 0;
    if (r->o.idle_s > 0 && ps_ns_to_s(ps_now_ns() - idle_from) >= r->o.idle_s) return 0;
  }
}
