/* ps_reader.c: the sharded, prefetching Criteo batch reader's public face (contract in
 * ps_reader.h): options, create/destroy, and the producer thread with its bounded pool of
 * reusable batches (prefetch > 0; with prefetch 0 ps_reader_next produces in the caller).
 *
 * The layers below are in ps_reader_source.c (bytes -> this rank's rows of a round) and
 * ps_reader_batch.c (rounds -> batches); ps_reader_int.h maps them. An error of the producer
 * leaves its message in r->err before it is queued, so the consumer reads it under the queue's
 * mutex and hands it out in err. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_reader_int.h"
#include "ps_shuffle.h"

void ps_reader_opts_default(ps_reader_opts *o) {
  memset(o, 0, sizeof *o);
  o->batch = 2048;
  o->world = 1;
  o->epochs = 1;
  o->bad_lines = PS_BAD_LINES_SKIP;
  o->tail = PS_TAIL_EVEN;
  o->prefetch = 4;
  o->log_bad_lines = 10;
}

/* A binary file's header: version 1 (Criteo records: the schema must have Criteo's shape) or
 * 2 (the schema's counts); its size must be exactly what the header says. */
static ps_status open_bin(ps_reader *r, ps_error *err) {
  unsigned char hb[PS_CRITEO_BIN_HEADER];
  struct stat sb;
  ps_criteo_bin_header *h = &r->hdr;
  if (pread(r->fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb ||
      ps_criteo_bin_decode_header(hb, h) != PS_OK || fstat(r->fd, &sb) != 0 ||
      (h->version == PS_CRITEO_BIN_VERSION &&
       (uint64_t)sb.st_size != PS_CRITEO_BIN_HEADER + h->rows * PS_CRITEO_BIN_RECORD) ||
      (h->version == PS_CRITEO_BIN_VERSION2 &&
       (h->index_off > (uint64_t)sb.st_size || h->rows > ((uint64_t)sb.st_size - h->index_off) / 8 ||
        (uint64_t)sb.st_size != h->index_off + 8 * (h->rows + 1))))
    return ps_error_set(err, PS_ERR_CORRUPT,
                        "%s: not a valid Ember binary file (bad header or size)", r->path);
  if ((int)h->ndense != r->nd || (int)h->ncat != r->nc)
    return ps_error_set(err, PS_ERR_INVALID,
                        "%s: holds %u dense and %u categorical features, the schema %s has %d "
                        "and %d", r->path, h->ndense, h->ncat, ps_schema_name(r->schema), r->nd,
                        r->nc);
  return PS_OK;
}

/* ---------- pool and thread ---------- */

static void *reader_thread(void *arg) {
  ps_reader *r = arg;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    while (!r->stop && r->nfree == 0) pthread_cond_wait(&r->cv_free, &r->mu);
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      return NULL;
    }
    ps_batch *b = r->free_list[--r->nfree];
    pthread_mutex_unlock(&r->mu);

    int end = 0;
    ps_status st = ps_reader_produce(r, b, &end);

    pthread_mutex_lock(&r->mu);
    ready_item it = {b, st};
    if (end || st) {
      r->free_list[r->nfree++] = b;
      it.b = NULL;
    }
    r->ready[(r->rq_head + r->rq_len++) % (r->npool + 1)] = it;
    pthread_cond_signal(&r->cv_ready);
    pthread_mutex_unlock(&r->mu);
    if (end || st) return NULL;
  }
}

ps_status ps_reader_create(const char *path, const ps_reader_opts *opts, ps_reader **out,
                           ps_error *err) {
  *out = NULL;
  ps_reader_opts o;
  if (opts) o = *opts;
  else ps_reader_opts_default(&o);
  if (o.batch <= 0 || o.world <= 0 || o.rank < 0 || o.rank >= o.world || o.epochs < 0 ||
      o.prefetch < 0 || o.shuffle_window < 0 || (o.row_end && o.row_end < o.row_begin) ||
      (o.shuffle_buffer && (o.keep_rows || o.shuffle_window > 1))) {
    return ps_error_set(err, PS_ERR_INVALID, "reader: bad options (batch %d, rank %d of %d)",
                        o.batch, o.rank, o.world);
  }
  if ((o.stream || o.follow) && (o.epochs > 1 || o.shuffle_buffer || o.shuffle_window > 1))
    return ps_error_set(err, PS_ERR_INVALID, "%s: a stream is read once, in order: one epoch, "
                        "no shuffle", path);
  if (o.stream && o.start_byte)
    return ps_error_set(err, PS_ERR_INVALID, "%s: a stream cannot start at a byte offset", path);
  ps_input_format fmt = PS_INPUT_TSV; /* a stream's first bytes are checked as they come */
  ps_status st = o.stream ? PS_OK : ps_data_detect(path, &fmt);
  if (st)
    return ps_error_set(err, st, "%s: %s", path,
                        st == PS_ERR_NOT_FOUND ? "no such file" : strerror(errno));
  if ((o.follow || o.start_byte) && fmt != PS_INPUT_TSV)
    return ps_error_set(err, PS_ERR_INVALID, "%s: %s a plain text file (not gzip or binary)",
                        path, o.follow ? "following a growing input reads" : "a start offset needs");
  ps_reader *r = calloc(1, sizeof *r);
  if (!r) return ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory", path);
  r->o = o;
  r->fmt = fmt;
  r->B = (size_t)o.batch;
  r->W = (size_t)o.world;
  r->r = (size_t)o.rank;
  r->fd = -1;
  r->lines_epoch = -1;
  r->path = strdup(path);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv_ready, NULL);
  pthread_cond_init(&r->cv_free, NULL);
  st = PS_ERR_NOMEM;
  if (!r->path) goto fail;
  r->schema = o.schema;
  if (!r->schema) {
    if ((st = ps_schema_load(NULL, &r->own_schema, err))) goto fail;
    r->schema = r->own_schema;
  }
  r->nd = ps_schema_ndense(r->schema);
  r->nc = ps_schema_ncat(r->schema);
  r->header = fmt != PS_INPUT_BIN && ps_schema_header(r->schema);
  if ((st = ps_sample_keymap_init(&r->km, r->schema, o.hash_buckets, err))) goto fail;
  st = PS_ERR_NOMEM;

  /* stdin is duplicated so destroy closes only the reader's own descriptor */
  r->fd = strcmp(path, "-") == 0 ? fcntl(0, F_DUPFD_CLOEXEC, 0) : open(path, O_RDONLY | O_CLOEXEC);
  if (r->fd < 0) {
    st = ps_error_set(err, PS_ERR_IO, "%s: %s", path, strerror(errno));
    goto fail;
  }
  if (fmt == PS_INPUT_BIN) {
    if ((st = open_bin(r, err))) goto fail;
    st = PS_ERR_NOMEM;
    uint64_t total = r->hdr.rows, b0 = o.row_begin < total ? o.row_begin : total;
    uint64_t e0 = (o.row_end && o.row_end < total) ? o.row_end : total;
    r->lines_epoch = (int64_t)(e0 - b0);
    if (!(r->rec = malloc(r->B * PS_CRITEO_BIN_RECORD + 8))) goto fail;
  } else {
    if (fmt == PS_INPUT_TSV_GZ) {
      r->gz = gzdopen(dup(r->fd), "rb");
      if (!r->gz) goto fail;
      gzbuffer(r->gz, 1 << 18);
    }
    r->buf_cap = READ_CHUNK;
    r->rtext_cap = 1u << 16;
    size_t keep = (r->r + 1) * r->B;
    if (!ps_schema_is_criteo(r->schema) && !(r->sep = ps_schema_sep_new(r->schema))) goto fail;
    r->buf = malloc(r->buf_cap);
    r->rtext = malloc(r->rtext_cap);
    r->roff = malloc(keep * sizeof(size_t));
    r->rlen = malloc(keep * sizeof(size_t));
    if (!r->buf || !r->rtext || !r->roff || !r->rlen) goto fail;
  }
  r->cur.off = malloc(r->B * sizeof(size_t));
  r->la.off = malloc(r->B * sizeof(size_t));
  if (!r->cur.off || !r->la.off) goto fail;
  if (o.shuffle_window > 1) {
    size_t S = (size_t)o.shuffle_window;
    r->win_off = malloc(S * r->B * sizeof(size_t));
    r->win_sizes = malloc(S * sizeof(size_t));
    r->win_epoch = malloc(S * sizeof(int));
    r->win_first = malloc(S * sizeof(uint64_t));
    if (!r->win_off || !r->win_sizes || !r->win_epoch || !r->win_first) goto fail;
  }
  if (o.epochs == 0) r->all_done = 1;

  int criteo_rows = o.keep_rows && ps_schema_is_criteo(r->schema); /* ps_batch.rows */
  r->npool = o.prefetch > 0 ? (size_t)o.prefetch : 1;
  r->pool = calloc(r->npool, sizeof *r->pool);
  r->free_list = calloc(r->npool, sizeof *r->free_list);
  r->ready = calloc(r->npool + 1, sizeof *r->ready);
  if (!r->pool || !r->free_list || !r->ready) goto fail;
  for (size_t i = 0; i < r->npool; i++) {
    if (!(r->pool[i] = ps_reader_batch_new(r->B, r->nd, r->nc, o.keep_rows, criteo_rows)))
      goto fail;
    r->free_list[r->nfree++] = r->pool[i];
  }
  if (o.prefetch > 0) {
    if (pthread_create(&r->th, NULL, reader_thread, r) != 0) {
      st = ps_error_set(err, PS_ERR_INTERNAL, "%s: cannot start the reader thread", path);
      goto fail;
    }
    r->threaded = 1;
  }
  *out = r;
  return PS_OK;
fail:
  if (st == PS_ERR_NOMEM) ps_error_set(err, st, "%s: out of memory", path);
  ps_reader_destroy(&r);
  return st;
}

/* A failed next: err gets st and the message the producer left in r->err (written before the
 * failure was queued, so it is visible here); an empty message reads as the status's text. */
static ps_status next_failed(const ps_reader *r, ps_status st, ps_error *err) {
  return ps_error_set(err, st, "%s", r->err);
}

ps_status ps_reader_next(ps_reader *r, ps_batch **out, ps_error *err) {
  *out = NULL;
  if (!r->threaded) {
    if (r->finished) return PS_OK;
    if (r->nfree == 0)
      return ps_error_set(err, PS_ERR_INVALID,
                          "reader: ps_reader_next called while a batch is still held (prefetch 0)");
    ps_batch *b = r->free_list[--r->nfree];
    int end = 0;
    ps_status st = ps_reader_produce(r, b, &end);
    if (st || end) {
      r->free_list[r->nfree++] = b;
      r->finished = 1;
      return st ? next_failed(r, st, err) : PS_OK;
    }
    *out = b;
    return PS_OK;
  }
  pthread_mutex_lock(&r->mu);
  if (r->finished) {
    pthread_mutex_unlock(&r->mu);
    return PS_OK;
  }
  while (r->rq_len == 0) pthread_cond_wait(&r->cv_ready, &r->mu);
  ready_item it = r->ready[r->rq_head];
  r->rq_head = (r->rq_head + 1) % (r->npool + 1);
  r->rq_len--;
  if (!it.b) r->finished = 1;
  pthread_mutex_unlock(&r->mu);
  *out = it.b;
  return it.st ? next_failed(r, it.st, err) : PS_OK;
}

void ps_reader_release(ps_reader *r, ps_batch *b) {
  if (!b) return;
  pthread_mutex_lock(&r->mu);
  r->free_list[r->nfree++] = b;
  pthread_cond_signal(&r->cv_free);
  pthread_mutex_unlock(&r->mu);
}

void ps_reader_destroy(ps_reader **rp) {
  if (!rp || !*rp) return;
  ps_reader *r = *rp;
  *rp = NULL;
  if (r->threaded) {
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv_free);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
  }
  if (r->pool)
    for (size_t i = 0; i < r->npool; i++) ps_reader_batch_free(r->pool[i]);
  free(r->pool), free(r->free_list), free(r->ready);
  if (r->gz) gzclose(r->gz);
  if (r->fd >= 0) close(r->fd);
  free(r->rec), free(r->buf), free(r->rtext), free(r->roff), free(r->rlen);
  free(r->cur.off), free(r->la.off);
  ps_sample_buf_free(&r->cur.data), ps_sample_buf_free(&r->la.data);
  ps_sample_buf_free(&r->win_data);
  free(r->win_off), free(r->win_sizes), free(r->win_epoch), free(r->win_first);
  ps_sample_keymap_free(&r->km);
  ps_schema_sep_free(&r->sep);
  ps_schema_destroy(&r->own_schema);
  ps_shuffle_destroy(&r->shuf);
  free(r->path);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv_ready);
  pthread_cond_destroy(&r->cv_free);
  free(r);
}

ps_input_format ps_reader_format(const ps_reader *r) { return r->fmt; }
uint64_t ps_reader_bad_lines(const ps_reader *r) { return __atomic_load_n(&r->bad, __ATOMIC_RELAXED); }
uint64_t ps_reader_rows(const ps_reader *r) { return __atomic_load_n(&r->rows_out, __ATOMIC_RELAXED); }
int64_t ps_reader_lines_per_epoch(const ps_reader *r) {
  return __atomic_load_n(&r->lines_epoch, __ATOMIC_RELAXED);
}
