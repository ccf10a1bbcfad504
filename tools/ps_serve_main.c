/* ps-serve: an online scorer -- a trained model (a checkpoint or an export, rows from its
 * snapshots or from ps-server --serve shards, as ps-predict) answering POST /v1/score over HTTP
 * and the same requests over ZeroMQ (--listen, ps_serve_zmq.c; both through serve_score).
 *
 * Design decisions:
 * - Scoring is ps-predict's (ps_score.h): a request's lines are parsed by the schema's own
 *   parser and scored as one batch (several batches of --batch when longer), so its scores are
 *   ps-predict's for the same lines, written with the same "%.9g". A text/plain body holds
 *   lines exactly as ps-predict reads them (the label column present, its value ignored); an
 *   application/json body holds {"rows": [{column: value, ...}]}, each object turned into
 *   such a line (a missing column is empty, a missing label 0). The first bad line or row
 *   answers 400 with one line naming it; nothing of that request is scored.
 * - A loaded model is a version: its own ps_predictor, the step, a reference count. A request
 *   takes a reference to the current version when it starts scoring and drops it when done,
 *   so it sees one version from start to end; --follow loads a new checkpoint off to the side
 *   (the old one keeps serving) and swaps the pointer under a mutex; the old version is freed
 *   by the last request that held it. A checkpoint that fails to load is logged and retried
 *   at the next look. With --servers, --follow follows the shards' step and every pull is
 *   checked against the model's step (ps_serve_version.c): no reply mixes two versions.
 * - One ps_predictor scores one batch at a time and the CPU backend's OpenBLAS has global state,
 *   so scoring is serialized by one lock (see serve.compute); parsing and I/O are not.
 *   Concurrent requests are not merged into one batch: a score's last bits depend on its
 *   batch's size (the GEMMs block differently), and a request's scores are to be ps-predict's
 *   for the same lines; merging is left for a flag of its own.
 * - HTTP is libmicrohttpd with a pool of --threads threads. Untrusted clients are bounded as
 *   the metrics endpoint bounds them (ps_http.h): a connection limit, a per-connection memory
 *   limit, an idle timeout (--timeout-s: a client that stops sending is cut while others are
 *   served), a request deadline (--request-timeout-s: one that trickles bytes is cut too,
 *   see cut_late) and a body limit (--max-body-kb: 413, refused from Content-Length before the body
 *   is read). GET /metrics and /healthz are served by the same daemon.
 * - It binds 127.0.0.1 unless --http names another address, as the servers do; --listen
 *   binds loopback only unless --allow-remote (ps_serve_zmq.c).
 * - /metrics counts both transports apart (the label transport="http" or "zmq"). */
#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ps_ckpt_layout.h"
#include "ps_cli.h"
#include "ps_log.h"
#include "ps_score.h"
#include "ps_serve_int.h"
#include "ps_time.h"

#define PROG "ps-serve"

/* A connection, from its accept: when it began waiting for a request (its accept, or its last
 * reply when kept alive) and whether that request is still incomplete. */
typedef struct conn_slot {
  int fd;
  uint64_t t0;
  bool waiting;
  struct conn_slot *prev, *next;
} conn_slot;

/* One request's body, gathered across libmicrohttpd's calls. */
typedef struct req {
  char *buf;
  size_t len;
  bool too_big;
  uint64_t t0;
} req;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

#define fail(rc, ...) ps_tool_fail(PROG, rc, __VA_ARGS__)

/* ---- scoring ---- */

/* Scores the lines parsed into v->p so far and appends their scores to out (a memstream). */
static ps_status flush(version *v, FILE *out, size_t *nout) {
  ps_predictor *p = &v->p;
  int n = 0;
  ps_status st = ps_predictor_score(p, &n);
  for (int i = 0; st == PS_OK && i < n; i++)
    fprintf(out, "%s%.9g", (*nout)++ ? "," : "", (double)p->probs[i]);
  p->nlines = 0;
  p->recs.len = 0;
  return st;
}

/* 503 with why a batch could not be scored (a pull from --servers failed). */
static int scoring_failed(const ps_predictor *p, ps_status st, char *msg, size_t msglen) {
  snprintf(msg, msglen, "scoring failed: %.400s", p->pull_err.msg[0] ? p->pull_err.msg : ps_status_str(st));
  return 503;
}

/* A JSON row as a line of the schema's format (columns in order, CSV-quoted as needed) on
 * out. HTTP status: 200, or 400 with msg. */
static int row_line(const ps_schema *sc, json_t *row, size_t no, FILE *out, char *msg, size_t msglen) {
  if (!json_is_object(row)) return snprintf(msg, msglen, "row %zu: not an object keyed by column name", no), 400;
  const char *key;
  json_t *val;
  int nc = ps_schema_ncolumns(sc);
  json_object_foreach(row, key, val) {
    int c = 0;
    while (c < nc && strcmp(ps_schema_column_at(sc, c)->name, key) != 0) c++;
    if (c == nc) return snprintf(msg, msglen, "row %zu: the schema has no column '%s'", no, key), 400;
  }
  bool csv = ps_schema_fmt(sc) == PS_SCHEMA_CSV;
  for (int c = 0; c < nc; c++) {
    const ps_schema_column *col = ps_schema_column_at(sc, c);
    if (c) fputc(csv ? ',' : '\t', out);
    val = json_object_get(row, col->name);
    if (!val || json_is_null(val)) {
      if (col->type == PS_COL_LABEL) fputc('0', out);
    } else if (json_is_integer(val)) {
      fprintf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(val));
    } else if (json_is_real(val)) {
      fprintf(out, "%.17g", json_real_value(val));
    } else if (json_is_string(val)) {
      const char *s = json_string_value(val);
      size_t n = json_string_length(val);
      if (memchr(s, '\n', n) || memchr(s, '\r', n) || (!csv && memchr(s, '\t', n)))
        return snprintf(msg, msglen, "row %zu: column '%s' holds a %s", no, col->name,
                        csv ? "line break" : "tab or line break"), 400;
      bool quote = csv && (memchr(s, ',', n) || memchr(s, '"', n));
      if (quote) fputc('"', out);
      for (size_t i = 0; i < n; i++) { /* CSV doubles a quote inside quotes */
        if (quote && s[i] == '"') fputc('"', out);
        fputc(s[i], out);
      }
      if (quote) fputc('"', out);
    } else {
      return snprintf(msg, msglen, "row %zu: column '%s' is not a string, number or null", no, col->name), 400;
    }
  }
  fputc('\n', out);
  return 200;
}

/* A JSON body's rows as lines of the schema's format (*text, malloc'ed). */
static int json_lines(const ps_schema *sc, const char *body, size_t len, char **text,
                      size_t *tlen, char *msg, size_t msglen) {
  json_error_t je;
  json_t *j = json_loadb(body, len, 0, &je);
  json_t *arr = j ? json_object_get(j, "rows") : NULL;
  int code = 200;
  if (!j) code = 400, snprintf(msg, msglen, "JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
  else if (!json_is_array(arr) || json_array_size(arr) == 0)
    code = 400, snprintf(msg, msglen, "JSON body: want {\"rows\": [ {column: value, ...}, ... ]} with 1 or more rows");
  FILE *out = open_memstream(text, tlen);
  if (!out) code = 500, snprintf(msg, msglen, "out of memory");
  for (size_t i = 0; code == 200 && i < json_array_size(arr); i++)
    code = row_line(sc, json_array_get(arr, i), i + 1, out, msg, msglen);
  if (out && fclose(out) != 0 && code == 200) code = 500, snprintf(msg, msglen, "out of memory");
  json_decref(j);
  return code;
}

/* The scores of lines (a text body, or a JSON body's rows as lines when json) into out as
 * {"step":..,"scores":[..]}; HTTP status, msg when not 200. */
static int score_lines(version *v, const char *body, size_t len, bool json, FILE *out,
                       size_t *nout, char *msg, size_t msglen) {
  ps_predictor *p = &v->p;
  const ps_schema *sc = ps_predictor_schema(p);
  fprintf(out, "{\"step\":%" PRIu64 ",\"scores\":[", v->step);
  size_t no = 0, rows = 0;
  int code = 200;
  ps_status st = PS_OK;
  p->nlines = 0;
  p->recs.len = 0;
  for (size_t at = 0; code == 200 && at < len;) {
    const char *nl = memchr(body + at, '\n', len - at);
    size_t end = nl ? (size_t)(nl - body) : len;
    const char *line = body + at;
    at = end + 1;
    no++;
    /* A header line first, when the schema has one, is skipped as ps-predict skips it (text
     * bodies only: a JSON row is never a header). */
    if (no == 1 && !json && ps_schema_header(sc) && ps_schema_check_header(sc, line, (size_t)(body + end - line), NULL) == PS_OK)
      continue;
    rows++;
    ps_error why;
    size_t rec = p->recs.len;
    if ((st = ps_schema_parse_line(sc, line, (size_t)(body + end - line), &p->recs, &why)) != PS_OK) {
      snprintf(msg, msglen, "%s %zu: %s", json ? "row" : "line", no, st == PS_ERR_NOMEM ? "out of memory" : ps_error_str(&why));
      code = st == PS_ERR_NOMEM ? 500 : 400;
      break;
    }
    p->good[p->nlines] = 1;
    p->rec_off[p->nlines++] = rec;
    if (p->nlines == p->batch && (st = flush(v, out, nout)) != PS_OK) code = scoring_failed(p, st, msg, msglen);
  }
  if (code == 200 && rows == 0) code = 400, snprintf(msg, msglen, "empty body: give 1 or more lines of the schema's format");
  if (code == 200 && p->nlines && (st = flush(v, out, nout)) != PS_OK) code = scoring_failed(p, st, msg, msglen);
  p->nlines = 0;
  p->recs.len = 0;
  fputs("]}", out);
  return code;
}

int serve_score(serve *s, const char *body, size_t len, bool json, char **text, size_t *tlen,
                char *msg, size_t msglen) {
  size_t nrows;
  int code;
  uint64_t t0 = ps_now_ns();
  for (;;) {
    char *lines = NULL;
    size_t llen = 0;
    nrows = 0, code = 200;
    *text = NULL, *tlen = 0;
    version *v = version_get(s); /* one version from the rows' parsing to the reply */
    if (json) code = json_lines(ps_predictor_schema(&v->p), body, len, &lines, &llen, msg, msglen);
    FILE *out = code == 200 ? open_memstream(text, tlen) : NULL;
    if (code == 200 && !out) code = 500, snprintf(msg, msglen, "out of memory");
    bool other_step = false;
    if (code == 200) {
      pthread_mutex_lock(&s->compute);
      code = json ? score_lines(v, lines, llen, true, out, &nrows, msg, msglen)
                  : score_lines(v, body, len, false, out, &nrows, msg, msglen);
      /* rows of another step than v's model: scored again by the version of the shards' step */
      other_step = code == 503 && v->p.pull_err.code == PS_ERR_CONFLICT;
      pthread_mutex_unlock(&s->compute);
    }
    if (out && fclose(out) != 0 && code == 200) code = 500, snprintf(msg, msglen, "out of memory");
    if (free(lines), code != 200) free(*text), *text = NULL, *tlen = 0;
    bool again = other_step && serve_wait_swap(s, v, t0);
    version_put(s, v);
    if (!again) break;
  }
  if (code == 200) ps_counter_add(s->rows, nrows);
  return code;
}

/* ---- HTTP ---- */

void serve_count(serve *s, int t, int code) {
  char c[8];
  snprintf(c, sizeof c, "%d", code);
  const char *lv[] = {t == SERVE_ZMQ ? "zmq" : "http", c};
  ps_series *se;
  if (ps_metric_series(s->reqs, lv, &se) == PS_OK) ps_counter_inc(se);
}

static enum MHD_Result reply(serve *s, struct MHD_Connection *conn, unsigned code,
                             const char *ctype, char *body, size_t len, enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (!r) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  enum MHD_Result ret = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  serve_count(s, SERVE_HTTP, (int)code);
  return ret;
}

static enum MHD_Result reply_error(serve *s, struct MHD_Connection *conn, unsigned code,
                                   const char *msg) {
  json_t *j = json_pack("{s:s}", "error", msg);
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!text) return MHD_NO;
  return reply(s, conn, code, "application/json", text, strlen(text), MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result get(serve *s, struct MHD_Connection *conn, const char *url) {
  if (strcmp(url, "/metrics") == 0) {
    char *body = NULL;
    size_t len = 0;
    if (ps_metrics_render(s->m, &body, &len) != PS_OK) return reply_error(s, conn, 500, "rendering the metrics failed");
    return reply(s, conn, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, MHD_RESPMEM_MUST_FREE);
  }
  static char ok[] = "ok\n";
  return reply(s, conn, 200, "text/plain", ok, sizeof ok - 1, MHD_RESPMEM_PERSISTENT);
}

/* ---- the request deadline: libmicrohttpd's timeout is an idle one, which a client that
 * trickles a byte at a time (slowloris) resets forever; a connection whose request is not
 * complete within --request-timeout-s of its accept (or of its last reply, kept alive) is
 * shut down by the main thread's look (as ps_http cuts a slow scraper). ---- */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  serve *s = cls;
  conn_slot *c = *socket_context;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || !(c = calloc(1, sizeof *c))) return; /* no deadline then: the idle timeout stays */
    c->fd = ci->connect_fd, c->t0 = ps_now_ns(), c->waiting = true;
    pthread_mutex_lock(&s->cmu);
    if ((c->next = s->conns)) c->next->prev = c;
    s->conns = c;
    pthread_mutex_unlock(&s->cmu);
    *socket_context = c;
  } else if (c) {
    pthread_mutex_lock(&s->cmu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&s->cmu);
    free(c);
    *socket_context = NULL;
  }
}

/* waiting: a request of conn is awaited (true after a reply), or is complete (false). */
static void conn_waiting(serve *s, struct MHD_Connection *conn, bool waiting) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  conn_slot *c = ci ? ci->socket_context : NULL;
  if (!c) return;
  pthread_mutex_lock(&s->cmu);
  c->waiting = waiting;
  c->t0 = ps_now_ns();
  pthread_mutex_unlock(&s->cmu);
}

/* The main thread's look: every connection past its request deadline is shut down
 * (libmicrohttpd then closes it as a peer's close). */
static void cut_late(serve *s) {
  uint64_t now = ps_now_ns(), limit = (uint64_t)s->o.request_timeout_s * 1000000000ull;
  pthread_mutex_lock(&s->cmu);
  for (conn_slot *c = s->conns; c; c = c->next)
    if (c->waiting && now - c->t0 > limit) {
      shutdown(c->fd, SHUT_RDWR);
      c->waiting = false;
    }
  pthread_mutex_unlock(&s->cmu);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version_, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version_;
  serve *s = cls;
  bool is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  /* The request is complete (a POST's whole body is in): its deadline is met. */
  if (!*upload_size && (*con_cls || strcmp(method, MHD_HTTP_METHOD_POST) != 0)) conn_waiting(s, conn, false);
  if (is_get && (strcmp(url, "/metrics") == 0 || strcmp(url, "/healthz") == 0)) return get(s, conn, url);
  if (strcmp(url, "/v1/score") != 0) return reply_error(s, conn, 404, "no such path: POST /v1/score, GET /metrics, GET /healthz");
  if (strcmp(method, MHD_HTTP_METHOD_POST) != 0) return reply_error(s, conn, 405, "/v1/score takes POST");
  req *r = *con_cls;
  size_t max = (size_t)s->o.max_body_kb * 1024;
  if (!r) {
    if (!(r = calloc(1, sizeof *r))) return MHD_NO;
    r->t0 = ps_now_ns();
    *con_cls = r;
    /* Refused before its body is read: libmicrohttpd closes the connection after the reply. */
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > max) r->too_big = true;
    if (r->too_big) goto too_big;
    return MHD_YES;
  }
  if (*upload_size) {
    if (r->len + *upload_size > max) r->too_big = true;
    if (!r->too_big) {
      char *b = realloc(r->buf, r->len + *upload_size + 1);
      if (!b) return MHD_NO;
      memcpy(b + r->len, upload, *upload_size);
      r->buf = b;
      r->len += *upload_size;
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (r->too_big) goto too_big;
  const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  bool json = ct && strncmp(ct, "application/json", 16) == 0;
  if (ct && !json && strncmp(ct, "text/plain", 10) != 0)
    return reply_error(s, conn, 415, "Content-Type: give text/plain (lines) or application/json ({\"rows\": [...]})");
  char msg[1024] = "", *text = NULL;
  size_t tlen = 0;
  int code = serve_score(s, r->buf ? r->buf : "", r->len, json, &text, &tlen, msg, sizeof msg);
  enum MHD_Result ret;
  if (code == 200) ret = reply(s, conn, 200, "application/json", text, tlen, MHD_RESPMEM_MUST_FREE);
  else ret = reply_error(s, conn, (unsigned)code, msg);
  ps_hist_series_observe_ns(s->lat[SERVE_HTTP], ps_now_ns() - r->t0);
  return ret;
too_big:;
  char m[96];
  snprintf(m, sizeof m, "body over --max-body-kb %d", s->o.max_body_kb);
  return reply_error(s, conn, 413, m);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)toe;
  conn_waiting(cls, conn, true); /* the next request on a kept-alive connection */
  req *r = *con_cls;
  if (r) free(r->buf);
  free(r);
  *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[256];
  vsnprintf(msg, sizeof msg, fmt, ap);
  PS_DEBUG("http: %s", msg);
}

/* --http HOST:PORT ([v6]:PORT) into a socket address; -1 with one line when bad. */
static int http_addr(const char *spec, struct sockaddr_storage *ss, bool *v6) {
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec || !colon[1]) return fail(2, "--http %s: give HOST:PORT", spec), -1;
  char host[64];
  size_t hl = (size_t)(colon - spec);
  if (spec[0] == '[' && hl > 2 && spec[hl - 1] == ']') spec++, hl -= 2;
  if (hl >= sizeof host) return fail(2, "--http %s: the host is too long", spec), -1;
  memcpy(host, spec, hl);
  host[hl] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535) return fail(2, "--http: bad port '%s'", colon + 1), -1;
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET, a4->sin_port = htons((uint16_t)port), *v6 = false;
  } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6, a6->sin6_port = htons((uint16_t)port), *v6 = true;
  } else {
    return fail(2, "--http %s: the host must be an IPv4 or IPv6 address", spec), -1;
  }
  return 0;
}

static int start_http(serve *s) {
  struct sockaddr_storage ss;
  bool v6 = false;
  if (http_addr(s->o.http, &ss, &v6) < 0) return 2;
  unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
  s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                          MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                          MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->o.threads,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_conn,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.timeout_s,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
                          MHD_OPTION_LISTEN_BACKLOG_SIZE, 256u, MHD_OPTION_END);
  if (!s->d) return fail(1, "--http %s: cannot listen there (in use?)", s->o.http);
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  char host[64];
  snprintf(host, sizeof host, "%.*s", (int)(strrchr(s->o.http, ':') - s->o.http), s->o.http);
  printf("ps-serve: listening on http://%s:%u\n", host, info ? (unsigned)info->port : 0);
  fflush(stdout);
  return 0;
}

/* ---- metrics, follow, main ---- */

static int make_metrics(serve *s) {
  ps_metric *lat, *rows, *step, *swaps;
  const char *code[] = {"transport", "code"}, *tl[] = {"transport"};
  if (ps_metrics_create(&s->m) != PS_OK ||
      ps_metrics_histogram(s->m, "ember_serve_request_seconds", "score request latency by transport: "
                           "HTTP from its headers to its reply, ZeroMQ from its receipt to its reply",
                           tl, 1, ps_metrics_fine_edges_ns, ps_metrics_fine_nedges, &lat) != PS_OK ||
      ps_metrics_counter(s->m, "ember_serve_requests_total", "requests answered, by transport (http, zmq) and status code", code, 2, &s->reqs) != PS_OK ||
      ps_metrics_counter(s->m, "ember_serve_rows_total", "candidate rows scored", NULL, 0, &rows) != PS_OK ||
      ps_metrics_counter(s->m, "ember_serve_swaps_total", "models swapped in by --follow", NULL, 0, &swaps) != PS_OK ||
      ps_metrics_gauge(s->m, "ember_serve_step", "the checkpoint step being served", NULL, 0, &step) != PS_OK)
    return fail(1, "creating the metrics failed");
  const char *http[] = {"http"}, *zmq[] = {"zmq"};
  if (ps_metric_series(lat, http, &s->lat[SERVE_HTTP]) != PS_OK || ps_metric_series(lat, zmq, &s->lat[SERVE_ZMQ]) != PS_OK)
    return fail(1, "creating the metrics failed");
  s->rows = ps_metric_single(rows);
  s->step_g = ps_metric_single(step), s->swaps = ps_metric_single(swaps);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  serve s;
  memset(&s, 0, sizeof s);
  serve_opts *o = &s.o;
  const char *level = "info";
  o->device = "cpu";
  o->precision = "fp32";
  o->http = "127.0.0.1:8080";
  o->threads = 4, o->compute_threads = 1, o->batch = 4096, o->max_body_kb = 1024;
  o->timeout_s = 5, o->request_timeout_s = 10, o->max_conn = 256, o->poll_ms = 200;
  ps_cli_opt opts[] = {
      {"checkpoint", 'c', PS_CLI_STRING, &o->ckpt, "DIR", "a checkpoint directory (its latest) or one step-N in it (or give --export)", false, 0, 0},
      {"export", 0, PS_CLI_STRING, &o->export, "DIR", "score from a ps-export directory instead (float32 or int8 rows)", false, 0, 0},
      {"servers", 0, PS_CLI_STRING, &o->servers, "URL,...", "look rows up on ps-server --serve servers (one per shard, in order) instead of the snapshots", false, 0, 0},
      {"schema", 0, PS_CLI_STRING, &o->schema, "criteo|FILE", "what a line means (default: the checkpoint's; must have its signature)", false, 0, 0},
      {"http", 0, PS_CLI_STRING, &o->http, "HOST:PORT", "answer POST /v1/score, GET /metrics and /healthz here (default 127.0.0.1:8080; port 0: any free one, printed; off: no HTTP, with --listen)", false, 0, 0},
      {"listen", 'l', PS_CLI_STRING, &o->listen, "URL", "also answer scoring requests over ZeroMQ here, tcp://HOST:PORT (port 0: any free one, printed) or ipc://PATH (docs/PROTOCOL.md, \"ps-serve over ZeroMQ\"); loopback only unless --allow-remote", false, 0, 0},
      {"curve-secret", 0, PS_CLI_STRING, &o->curve_secret, "FILE", "CURVE on --listen: this server's secret key (ps-keygen); with --curve-clients", false, 0, 0},
      {"curve-clients", 0, PS_CLI_STRING, &o->curve_clients, "DIR", "CURVE on --listen: serve only the clients whose NAME.public is in DIR (default: anyone on loopback, unencrypted)", false, 0, 0},
      {"allow-remote", 0, PS_CLI_FLAG, &o->allow_remote, NULL, "let --listen bind an address other than loopback (give --curve-secret/--curve-clients there too)", false, 0, 0},
      {"threads", 0, PS_CLI_INT, &o->threads, "N", "HTTP threads, and as many ZeroMQ request threads with --listen (default 4)", false, 1, 256},
      {"compute-threads", 0, PS_CLI_INT, &o->compute_threads, "T", "compute threads of the model (default 1; 0: all cores)", false, 0, 1024},
      {"batch", 0, PS_CLI_INT, &o->batch, "N", "rows scored together (a longer request is scored in pieces)", false, 1, 1 << 20},
      {"max-body-kb", 0, PS_CLI_INT, &o->max_body_kb, "KB", "a larger request body is refused with 413, over HTTP and ZeroMQ (default 1024)", false, 1, 1 << 20},
      {"timeout-s", 0, PS_CLI_INT, &o->timeout_s, "S", "a connection idle this long is closed (a stalled client; default 5)", false, 1, 3600},
      {"request-timeout-s", 0, PS_CLI_INT, &o->request_timeout_s, "S", "a request not complete (headers and body) this long after its connection's accept or last reply is cut (a client trickling bytes; default 10)", false, 1, 3600},
      {"max-connections", 0, PS_CLI_INT, &o->max_conn, "N", "connections at once (default 256)", false, 1, 65536},
      {"follow", 0, PS_CLI_FLAG, &o->follow, NULL, "watch --checkpoint DIR's latest (with --servers: the step every shard serves) and swap each new checkpoint in atomically; every reply one step's model and rows", false, 0, 0},
      {"poll-ms", 0, PS_CLI_INT, &o->poll_ms, "MS", "--follow: milliseconds between looks at latest (default 200)", false, 10, 60000},
      {"device", 0, PS_CLI_STRING, &o->device, "D", "cpu | cuda | cuda:N", false, 0, 0},
      {"precision", 0, PS_CLI_STRING, &o->precision, "fp32|bf16", "the MLPs' GEMMs in FP32, or with bf16 inputs and FP32 accumulation (FP32, with a warning, where the device has no bf16)", false, 0, 0},
      PS_CLI_LOG_LEVEL_OPT(&level),
  };
  ps_cli cli = {PROG, "Serve scores of a trained model over HTTP (POST /v1/score) and ZeroMQ (--listen), following new checkpoints.",
                NULL, opts, sizeof opts / sizeof opts[0]};
  int rc = ps_cli_run(&cli, argc, argv, NULL);
  if (rc >= 0) return rc;
  if (ps_log_apply_level(PROG, level) != 0) return 2;
  if (ps_dlrm_precision_parse(o->precision, &o->prec) != PS_OK)
    return fail(2, "--precision: '%s' is not fp32 or bf16", o->precision);
  if (!o->ckpt == !o->export) return fail(2, "give one of --checkpoint DIR and --export DIR");
  if (o->follow && !o->ckpt) return fail(2, "--follow watches a --checkpoint DIR's latest: give --checkpoint");
  bool http = strcmp(o->http, "off") != 0;
  if (!http && !o->listen) return fail(2, "--http off leaves no way in: give --listen URL");
  if ((rc = serve_zmq_check(&s)) != 0) return serve_zmq_stop(&s), rc;
  char seen[256] = "", failed[256] = "", dir[4096];
  snprintf(dir, sizeof dir, "%s", o->ckpt ? o->ckpt : o->export);
  ps_error err;
  if (o->follow && (rc = serve_follow_start(&s, seen, sizeof seen)) != 0) return rc;
  if (o->follow) snprintf(dir, sizeof dir, "%s/%s", o->ckpt, seen);
  pthread_mutex_init(&s.vmu, NULL);
  pthread_cond_init(&s.vcv, NULL);
  pthread_mutex_init(&s.cmu, NULL);
  pthread_mutex_init(&s.compute, NULL);
  version *v;
  ps_status st = version_load(&s, dir, false, &v, &err);
  if (st != PS_OK)
    return fail(st == PS_ERR_INVALID || st == PS_ERR_NOT_FOUND || st == PS_ERR_UNKNOWN_TABLE ? 2 : 1, "%s", ps_error_str(&err));
  if ((rc = make_metrics(&s)) != 0) return rc;
  version_swap(&s, v);
  PS_INFO("model of step %" PRIu64 " from %s%s", v->step, ps_predictor_dir(&v->p), o->servers ? " (rows from --servers)" : "");
  if ((!http || (rc = start_http(&s)) == 0) && (rc = serve_zmq_start(&s)) == 0) {
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (!g_stop) {
      serve_follow_wait(&s);
      if (s.d) cut_late(&s);
      if (o->follow && !g_stop) serve_follow_look(&s, seen, failed);
    }
  }
  serve_zmq_stop(&s);
  if (s.d) MHD_stop_daemon(s.d);
  version_put(&s, s.cur);
  if (s.next) version_put(&s, s.next);
  ps_client_destroy(&s.probe);
  ps_metrics_destroy(&s.m);
  return rc;
}
