/* test_reader_stream: the reader over streams (ps_reader_stream.c) and its input positions.
 * Every line names itself (C1 = its index in hex, so with 2^32 hash buckets the key of feature
 * 0 is the index), so the order and completeness of what comes out is known:
 *   - each batch's end_line / end_byte is the round's end: data lines, and the byte offset of
 *     the next line; a reader started at such a position (start_line / start_byte) gives
 *     exactly the rest;
 *   - "-" over a pipe on fd 0, written in two bursts, gives the file's batches and positions;
 *   - --follow-input: lines appended later (one cut in the middle) are read, the input ends
 *     after idle_s, or on the caller's stop flag while no data comes;
 *   - a stream's bad options are refused. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ps_test_main.h"
#include "ps_test_reader.h"
#include "ps_test_scratch.h"

#include "ps_reader.h"

#define NB (1ull << 32) /* hash buckets: key of feature f with value v is f*NB + v */
#define LINES 10

static char g_text[LINES][512];
static size_t g_off[LINES + 1]; /* byte offset of each line; g_off[LINES]: the size */

static void make_lines(void) {
  for (size_t i = 0; i < LINES; i++) {
    int n = snprintf(g_text[i], sizeof g_text[i], "%d\t%zu", i % 2 == 0, i);
    for (int k = 2; k <= 13; k++) n += snprintf(g_text[i] + n, sizeof g_text[i] - (size_t)n, "\t%d", k);
    n += snprintf(g_text[i] + n, sizeof g_text[i] - (size_t)n, "\t%08zx", i);
    for (int j = 2; j <= 26; j++) n += snprintf(g_text[i] + n, sizeof g_text[i] - (size_t)n, "\t%08x", j);
    snprintf(g_text[i] + n, sizeof g_text[i] - (size_t)n, "\n");
    g_off[i + 1] = g_off[i] + strlen(g_text[i]);
  }
}

static void append(const char *path, size_t from, size_t to) {
  FILE *f = fopen(path, "ab");
  assert_non_null(f);
  for (size_t i = from; i < to; i++) fputs(g_text[i], f);
  fclose(f);
}

static void opts(ps_reader_opts *o) {
  ps_reader_opts_default(o);
  o->batch = 3;
  o->hash_buckets = NB;
}

/* Everything the reader gives: sample ids in order, and each batch's end position. */
typedef struct got {
  size_t n, nb;
  uint64_t id[64], end_line[16], end_byte[16];
} got;

static void note_batch(const ps_batch *b, void *ctx) {
  got *g = ctx;
  for (size_t i = 0; i < b->n; i++) g->id[g->n++] = b->keys[b->key_offsets[i * 26]] % NB;
  g->end_line[g->nb] = b->end_line;
  g->end_byte[g->nb++] = b->end_byte;
}

static void read_all(const char *path, const ps_reader_opts *o, got *g) {
  memset(g, 0, sizeof *g);
  ps_test_each_batch(path, o, note_batch, g);
}

static void assert_ids(const got *g, size_t from, size_t to) {
  assert_int_equal(g->n, to - from);
  for (size_t i = from; i < to; i++) assert_int_equal(g->id[i - from], i);
}

static void test_positions_and_start(void **st) {
  (void)st;
  const char *path = tmp_path("pos.tsv");
  append(path, 0, LINES);
  ps_reader_opts o;
  opts(&o);
  got g;
  read_all(path, &o, &g);
  assert_ids(&g, 0, LINES);
  const uint64_t ends[4] = {3, 6, 9, 10};
  assert_int_equal(g.nb, 4);
  for (size_t k = 0; k < 4; k++) {
    assert_int_equal(g.end_line[k], ends[k]);
    assert_int_equal(g.end_byte[k], g_off[ends[k]]);
  }
  o.start_line = 6; /* where the second batch ended */
  o.start_byte = g_off[6];
  read_all(path, &o, &g);
  assert_ids(&g, 6, LINES);
  assert_int_equal(g.nb, 2);
  assert_int_equal(g.end_line[0], 9);
  assert_int_equal(g.end_byte[1], g_off[LINES]);
}

typedef struct writer {
  int fd;            /* a pipe's write end, or -1: append to path */
  const char *path;
  volatile sig_atomic_t *stop;
} writer;

static void nap(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void *write_pipe(void *arg) {
  writer *w = arg;
  for (size_t i = 0; i < LINES; i++) {
    if (i == 5) nap(100); /* a pause: the reader must wait, not end */
    assert_true(write(w->fd, g_text[i], strlen(g_text[i])) == (ssize_t)strlen(g_text[i]));
  }
  close(w->fd);
  return NULL;
}

static void test_pipe_on_stdin(void **st) {
  (void)st;
  int p[2];
  assert_int_equal(pipe(p), 0);
  int saved = dup(0);
  assert_int_equal(dup2(p[0], 0), 0);
  close(p[0]);
  writer w = {p[1], NULL, NULL};
  pthread_t th;
  pthread_create(&th, NULL, write_pipe, &w);
  ps_reader_opts o;
  opts(&o);
  o.stream = 1;
  got g;
  read_all("-", &o, &g);
  pthread_join(th, NULL);
  dup2(saved, 0);
  close(saved);
  assert_ids(&g, 0, LINES);
  assert_int_equal(g.nb, 4);
  assert_int_equal(g.end_line[1], 6);
  assert_int_equal(g.end_byte[1], g_off[6]);
  assert_int_equal(g.end_byte[3], g_off[LINES]);
}

static void *grow(void *arg) {
  writer *w = arg;
  nap(150);
  FILE *f = fopen(w->path, "ab");
  fputs(g_text[4], f);
  fwrite(g_text[5], 1, 20, f); /* half a line: the reader must wait for its end */
  fflush(f);
  nap(100);
  fputs(g_text[5] + 20, f);
  fclose(f);
  append(w->path, 6, LINES);
  if (w->stop) {
    nap(150);
    *w->stop = 1;
  }
  return NULL;
}

static void follow_case(const char *name, double idle_s, volatile sig_atomic_t *stop) {
  const char *path = tmp_path(name);
  append(path, 0, 4);
  writer w = {-1, path, stop};
  pthread_t th;
  pthread_create(&th, NULL, grow, &w);
  ps_reader_opts o;
  opts(&o);
  o.follow = 1;
  o.idle_s = idle_s;
  o.stop = stop;
  got g;
  read_all(path, &o, &g);
  pthread_join(th, NULL);
  assert_ids(&g, 0, LINES);
  assert_int_equal(g.end_line[g.nb - 1], LINES);
  assert_int_equal(g.end_byte[g.nb - 1], g_off[LINES]);
}

static void test_follow_ends_when_idle(void **st) {
  (void)st;
  follow_case("idle.tsv", 0.5, NULL);
}

static void test_follow_ends_on_stop(void **st) {
  (void)st;
  static volatile sig_atomic_t stop;
  follow_case("stop.tsv", 0, &stop);
}

static void test_bad_stream_options(void **st) {
  (void)st;
  const char *path = tmp_path("bad.tsv");
  append(path, 0, 2);
  ps_reader_opts o;
  opts(&o);
  ps_reader *r = NULL;
  ps_error err;
  o.follow = 1;
  o.epochs = 2;
  assert_int_equal(ps_reader_create(path, &o, &r, &err), PS_ERR_INVALID);
  o.epochs = 1;
  o.shuffle_buffer = 10;
  assert_int_equal(ps_reader_create(path, &o, &r, &err), PS_ERR_INVALID);
  o.shuffle_buffer = 0;
  o.follow = 0;
  o.stream = 1;
  o.start_byte = 5;
  assert_int_equal(ps_reader_create("-", &o, &r, &err), PS_ERR_INVALID);
  const char *gz = tmp_path("bad.tsv.gz");
  write_file(gz, "\x1f\x8b\x08\x00");
  o.stream = 0;
  assert_int_equal(ps_reader_create(gz, &o, &r, &err), PS_ERR_INVALID); /* start_byte on gzip */
  o.start_byte = 0;
  o.follow = 1;
  assert_int_equal(ps_reader_create(gz, &o, &r, &err), PS_ERR_INVALID);
  assert_null(r);
}

static int setup(void **st) {
  (void)st;
  make_lines();
  return ps_scratch_setup("reader-stream");
}

static int teardown(void **st) {
  (void)st;
  return ps_scratch_teardown();
}

PS_TEST_MAIN("reader_stream", setup, teardown,
    cmocka_unit_test(test_positions_and_start),
    cmocka_unit_test(test_pipe_on_stdin),
    cmocka_unit_test(test_follow_ends_when_idle),
    cmocka_unit_test(test_follow_ends_on_stop),
    cmocka_unit_test(test_bad_stream_options))
