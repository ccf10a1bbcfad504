/* ps_train_plan: ps-worker's flags (ps_train_config, text) resolved once into the run's plan
 * (ps_train_plan, typed): each named choice into its enum, the schema loaded, the model's
 * widths parsed, --train classified and, for --holdout, counted; with it, what ps-worker can
 * know is wrong before it connects — the server URLs, every input path, the directory of
 * --summary, the checkpoint directory (and for --resume, the checkpoint's key flags), the
 * model's shape, --holdout against the length of --train. Each refusal is one line naming the
 * flag (and the path), which ps-worker's main prints before exiting 2.
 *
 * Why here and not where the run would fail: a run that meets a bad path or shape only after
 * joining keeps its peers waiting in a barrier or a collective and fails with the wrong exit
 * status (1), after minutes of training for --test. The model's shape rules are DLRM's
 * (ps_dlrm.h): the bottom MLP starts at the dense inputs of the --schema (13 for Criteo; 1, a
 * constant, for a schema without dense columns) and ends at --emb-dim, because the dot
 * interaction multiplies its output with the embedding rows. A schema's header is checked
 * against the first line of --train and --test here too. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_cli.h"
#include "ps_client.h"
#include "ps_criteo.h"
#include "ps_fs.h"
#include "ps_train_int.h"

/* A file ps-worker will read: exists, is a regular file, opens for reading. A FIFO, a device
 * or a socket is refused: the worker reads these inputs more than once (counting the lines,
 * each epoch, the evaluation), and opening a FIFO waits for a writer while /dev/zero never
 * ends a line, so either hung with no output. --train alone may be a stream ("-" or a FIFO,
 * check_train): it is read once, and not opened here, since that would wait for its writer. */
static ps_status check_input(const char *flag, const char *path, ps_error *err) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "%s %s: %s", flag, path, strerror(errno));
  if (S_ISDIR(sb.st_mode))
    return ps_error_set(err, PS_ERR_INVALID, "%s %s: is a directory, not a file", flag, path);
  if (!S_ISREG(sb.st_mode)) {
    const char *kind = S_ISFIFO(sb.st_mode)  ? "a named pipe (FIFO)"
                       : S_ISCHR(sb.st_mode) ? "a character device"
                       : S_ISBLK(sb.st_mode) ? "a block device"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                                              : "not a regular file";
    return ps_error_set(err, PS_ERR_INVALID,
                        "%s %s: is %s; ps-worker reads a regular file here (several times; "
                        "only --train may be a stream: '-' or a named pipe)",
                        flag, path, kind);
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ps_error_set(err, PS_ERR_INVALID, "%s %s: %s", flag, path, strerror(errno));
  close(fd);
  return PS_OK;
}

/* --servers: ZeroMQ endpoints as ps-server --listen takes them (a bare HOST:PORT used to wait
 * out --timeout-ms and exit 1 with no word). */
static ps_status check_servers(const char *servers, ps_error *err) {
  char *items[1024];
  int n = ps_split_list(servers, ',', items, 1024);
  if (n <= 0)
    return ps_error_set(err, PS_ERR_INVALID, "--servers %s: want URL,URL,... (no empty ones)",
                        servers);
  ps_status st = PS_OK;
  ps_error e;
  for (int i = 0; i < n && st == PS_OK; i++) /* the client's own URL check, before connecting */
    if ((st = ps_client_check_url(items[i], &e)) != PS_OK)
      ps_error_set(err, st, "--servers: %s", e.msg);
  free(items[0]);
  return st;
}

/* --summary is written at the end: its directory must be there and writable now. */
static ps_status check_output(const char *flag, const char *path, ps_error *err) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (access(dir, W_OK | X_OK) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "%s %s: cannot write in %s (%s)", flag, path, dir,
                        strerror(errno));
  return PS_OK;
}

/* --checkpoint-dir: made as mkdir -p would for a new run; it must exist for --resume. */
static ps_status check_checkpoint_dir(const ps_train_config *c, ps_error *err) {
  const char *d = c->checkpoint_dir;
  struct stat sb;
  if (c->resume) {
    if (stat(d, &sb) != 0)
      return ps_error_set(err, PS_ERR_INVALID, "--resume: --checkpoint-dir %s: %s", d,
                          strerror(errno));
    if (!S_ISDIR(sb.st_mode))
      return ps_error_set(err, PS_ERR_INVALID, "--resume: --checkpoint-dir %s: not a directory",
                          d);
    return PS_OK;
  }
  if (ps_mkdir_p(d) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--checkpoint-dir %s: cannot create it (%s)", d,
                        strerror(errno));
  if (access(d, W_OK | X_OK) != 0)
    return ps_error_set(err, PS_ERR_INVALID, "--checkpoint-dir %s: not writable (%s)", d,
                        strerror(errno));
  return PS_OK;
}

/* --mlp-bot, --mlp-top and --emb-dim as the model will take them (ps_dlrm.h's rules), from
 * the widths load_schema parsed. */
static ps_status check_model(const ps_train_config *c, const ps_train_plan *p, ps_error *err) {
  const int *bot = p->mlp_bot, *top = p->mlp_top, nb = p->nbot, nt = p->ntop;
  const char *mlp_bot = p->mlp_bot_text;
  if (nb < 2)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--mlp-bot %s: need at least two positive widths like 13-512-256-64-16",
                        mlp_bot);
  int nd = ps_schema_ndense(p->schema), want = ps_train_dense_inputs(nd);
  if (bot[0] != want)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--mlp-bot %s: the first width must be %d, %s%s (--schema %s)",
                        mlp_bot, want, nd ? "the dense columns of the schema" : "a constant "
                        "input, as the schema has no dense column",
                        ps_schema_nindicators(p->schema) ? " and their missing indicators" : "",
                        ps_schema_name(p->schema));
  if (bot[nb - 1] != c->emb_dim)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--mlp-bot %s ends in %d but --emb-dim is %d: the dot interaction needs "
                        "them equal", mlp_bot, bot[nb - 1], c->emb_dim);
  if (nt < 1)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--mlp-top %s: need positive widths like 512-256-1", c->mlp_top);
  if (top[nt - 1] != 1)
    return ps_error_set(err, PS_ERR_INVALID, "--mlp-top %s: the last width must be 1 (the logit)",
                        c->mlp_top);
  if (nb - 1 + nt > PS_DLRM_MAX_LAYERS)
    return ps_error_set(err, PS_ERR_INVALID, "--mlp-bot %s --mlp-top %s: more than %d layers",
                        mlp_bot, c->mlp_top, PS_DLRM_MAX_LAYERS);
  ps_error e;
  if (p->interaction == PS_DLRM_DCN &&
      ps_dlrm_check_cross(ps_schema_ncat(p->schema), c->emb_dim, c->dcn_layers, c->dcn_rank, &e) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--%s", e.msg); /* "--dcn-rank 500: want ..." */
  return PS_OK;
}

/* --schema loaded, and the model's widths parsed once, here. Without --mlp-bot, the default's
 * first width becomes the schema's inputs (its text then derived from the widths). A width
 * list that does not parse keeps n < 2 (or < 1) for check_model to refuse in its turn. */
static ps_status load_schema(const ps_train_config *c, ps_train_plan *p, ps_error *err) {
  ps_error e;
  if (ps_schema_load(c->schema, &p->schema, &e) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--schema %s", e.msg);
  p->nbot = ps_dlrm_parse_mlp(c->mlp_bot, p->mlp_bot, PS_DLRM_MAX_LAYERS + 1);
  p->ntop = ps_dlrm_parse_mlp(c->mlp_top, p->mlp_top, PS_DLRM_MAX_LAYERS);
  snprintf(p->mlp_bot_text, sizeof p->mlp_bot_text, "%s", c->mlp_bot);
  if (!c->mlp_bot_given && p->nbot >= 2) {
    p->mlp_bot[0] = ps_train_dense_inputs(ps_schema_ndense(p->schema));
    size_t at = 0;
    for (int i = 0; i < p->nbot && at < sizeof p->mlp_bot_text; i++)
      at += (size_t)snprintf(p->mlp_bot_text + at, sizeof p->mlp_bot_text - at, "%s%d",
                             i ? "-" : "", p->mlp_bot[i]);
  }
  return PS_OK;
}

/* An input as the schema reads it: a text file's header line matches it; a binary file's
 * header is sound and holds the schema's dense and categorical counts (a reader is opened and
 * closed: it reads the header only). Why not keep that reader for the run: the trainer's
 * reader takes this worker's rank and world (its share of the lines), a resumed position and
 * the deep lookahead's depth, known only after joining, and these checks must be done before
 * connecting (a bad input would keep the peers waiting). So the check reads the first bytes
 * here and the run opens its own reader; neither reads the file to its end: only
 * ps_train_count_rows does, once a run (for --holdout in check_all, else for the ETA). */
static ps_status check_header(const char *flag, const char *path, const ps_schema *s,
                              ps_error *err) {
  ps_error e;
  if (ps_data_check_header(path, s, &e) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "%s %s", flag, e.msg);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.schema = s;
  o.batch = 1;
  o.prefetch = 0;
  ps_reader *r = NULL;
  ps_status st = ps_reader_create(path, &o, &r, &e);
  ps_reader_destroy(&r);
  if (st != PS_OK) return ps_error_set(err, PS_ERR_INVALID, "%s %s", flag, e.msg);
  return PS_OK;
}

/* --train as a stream ("-" or a named pipe) or a growing file (--follow-input): read once, so
 * nothing that reads it twice or to its end: one epoch, no --holdout (the tail of a stream is
 * not there yet), no --prefetch; --follow-input follows a plain text file. */
static ps_status check_stream(const ps_train_config *c, ps_train_plan *p, ps_error *err) {
  const char *what = p->train_stream ? "a stream" : "followed (--follow-input)";
  if (c->epochs > 1)
    return ps_error_set(err, PS_ERR_INVALID, "--epochs %d: --train %s is %s, read once: one "
                        "epoch only", c->epochs, c->train, what);
  if (!c->test && c->holdout > 0)
    return ps_error_set(err, PS_ERR_INVALID, "--holdout: --train %s is %s, whose end is not "
                        "there yet: evaluate with --test FILE (progressive validation needs "
                        "neither)", c->train, what);
  /* The loop reads --prefetch batches ahead of the one it trains: on a stream that holds the
   * N batches that came last until N more come. Off: a batch waits for one more only. */
  p->prefetch = 0;
  if (p->train_stream) return PS_OK;
  if (check_input("--train", c->train, err) != PS_OK) return PS_ERR_INVALID;
  ps_input_format fmt;
  if (ps_data_detect(c->train, &fmt) != PS_OK || fmt != PS_INPUT_TSV)
    return ps_error_set(err, PS_ERR_INVALID, "--follow-input: --train %s is not a plain text "
                        "file (gzip and binary files do not grow line by line)", c->train);
  return PS_OK;
}

void ps_train_plan_free(ps_train_plan *p) { ps_schema_destroy(&p->schema); }

/* --dcn-rank -1 (auto) as the model resolves it, so that the checkpoint's config, the summary
 * and the logs name the rank the run trains with. */
static void resolve_rank(const ps_train_config *c, ps_train_plan *p) {
  p->dcn_rank = c->dcn_rank;
  if (p->interaction == PS_DLRM_DCN)
    p->dcn_rank = ps_dlrm_cross_rank(ps_schema_ncat(p->schema), c->emb_dim, c->dcn_rank);
}

/* "ssp:K" with K in 0..1000000. */
static int parse_ssp(const char *s, uint32_t *k) {
  char *end = NULL;
  long v = strtol(s + 4, &end, 10);
  if (!*(s + 4) || *end || v < 0 || v > 1000000) return -1;
  *k = (uint32_t)v;
  return 0;
}

/* A two-way choice: *on = (name == yes); PS_ERR_INVALID unless it is `no` or `yes`. */
static ps_status parse_pair(const char *flag, const char *name, const char *no, const char *yes,
                            bool *on, ps_error *err) {
  *on = !strcmp(name, yes);
  if (*on || !strcmp(name, no)) return PS_OK;
  return ps_error_set(err, PS_ERR_INVALID, "%s: '%s' is not %s or %s", flag, name, no, yes);
}

/* The named choices into the plan's enums. Sparse optimizer names are the flag's
 * (rowwise-adagrad), in ps_optimizer order. */
static ps_status parse_names(const ps_train_config *c, ps_train_plan *p, ps_error *err) {
  bool fail;
  if (parse_pair("--bad-lines", c->bad_lines, "skip", "fail", &fail, err) != PS_OK)
    return PS_ERR_INVALID;
  p->bad_lines = fail ? PS_BAD_LINES_FAIL : PS_BAD_LINES_SKIP;
  p->staleness = 0;
  if (!strcmp(c->consistency, "sync")) p->consistency = PS_CONS_SYNC;
  else if (!strcmp(c->consistency, "async")) p->consistency = PS_CONS_ASYNC;
  else if (!strncmp(c->consistency, "ssp:", 4) && parse_ssp(c->consistency, &p->staleness) == 0)
    p->consistency = PS_CONS_SSP;
  else
    return ps_error_set(err, PS_ERR_INVALID, "--consistency: '%s' is not sync, async or ssp:K",
                        c->consistency);
  static const char *const sparse[PS_OPT_COUNT_] = {"sgd", "adagrad", "rowwise-adagrad", "adam",
                                                    "ftrl"};
  int opt = -1;
  for (int i = 0; i < (int)PS_OPT_COUNT_; i++)
    if (!strcmp(c->sparse_opt, sparse[i])) opt = i;
  if (opt < 0)
    return ps_error_set(err, PS_ERR_INVALID, "--sparse-opt: '%s' is not sgd, adagrad, "
                        "rowwise-adagrad, adam or ftrl", c->sparse_opt);
  p->sparse_opt = (ps_optimizer)opt;
  if (ps_dlrm_opt_parse(c->dense_opt, &p->dense_opt) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--dense-opt: '%s' is not sgd, adagrad or adam",
                        c->dense_opt);
  const char *prec = c->precision ? c->precision : "fp32";
  if (ps_dlrm_precision_parse(prec, &p->precision) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--precision: '%s' is not fp32 or bf16", prec);
  if (ps_dlrm_interaction_parse(c->interaction, &p->interaction) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--interaction: '%s' is not dot or dcn",
                        c->interaction);
  if (parse_pair("--out-bias-init", c->out_bias_init, "draw", "zero", &p->out_bias_zero, err) !=
          PS_OK ||
      parse_pair("--wire", c->wire, "f32", "f16", &p->wire_f16, err) != PS_OK)
    return PS_ERR_INVALID;
  p->lookahead_refresh = !strcmp(c->lookahead, "refresh");
  p->lookahead_stale = !strcmp(c->lookahead, "stale");
  p->lookahead_on = !strcmp(c->lookahead, "on") || p->lookahead_stale || p->lookahead_refresh;
  if (!p->lookahead_on && strcmp(c->lookahead, "off") != 0)
    return ps_error_set(err, PS_ERR_INVALID, "--lookahead: '%s' is not off, on, refresh or "
                        "stale", c->lookahead);
  if (ps_row_type_parse(c->row_type, &p->row_type, NULL) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--row-type: '%s' is not f32, f16 or bf16",
                        c->row_type);
  /* The row cache is exact in sync only through the lookahead's refresh; async has no bound. */
  if (c->row_cache_mb > 0 && (p->consistency == PS_CONS_ASYNC ||
                              (p->consistency == PS_CONS_SYNC && !p->lookahead_on)))
    return ps_error_set(err, PS_ERR_INVALID,
                        "--row-cache-mb needs sync with --lookahead on, or ssp:K");
  return PS_OK;
}

/* The checks after the names, in the order a run would meet their subjects. */
static ps_status check_all(const ps_train_config *c, ps_train_plan *p, ps_error *err) {
  if (check_servers(c->servers, err) != PS_OK) return PS_ERR_INVALID;
  if (load_schema(c, p, err) != PS_OK) return PS_ERR_INVALID;
  p->train_stream = ps_data_is_stream(c->train);
  p->prefetch = c->prefetch;
  if (p->train_stream || c->follow_input) {
    if (check_stream(c, p, err) != PS_OK) return PS_ERR_INVALID;
  } else if (check_input("--train", c->train, err) != PS_OK) {
    return PS_ERR_INVALID;
  }
  if (c->test && check_input("--test", c->test, err) != PS_OK) return PS_ERR_INVALID;
  if (!p->train_stream && check_header("--train", c->train, p->schema, err) != PS_OK)
    return PS_ERR_INVALID;
  if (c->test && check_header("--test", c->test, p->schema, err) != PS_OK)
    return PS_ERR_INVALID;
  if (c->summary && check_output("--summary", c->summary, err) != PS_OK) return PS_ERR_INVALID;
  if (check_model(c, p, err) != PS_OK) return PS_ERR_INVALID;
  resolve_rank(c, p);
  if (c->checkpoint_dir && check_checkpoint_dir(c, err) != PS_OK) return PS_ERR_INVALID;
  if (c->resume && ps_train_ckpt_check_flags(c, p, err) != PS_OK) return PS_ERR_INVALID;
  if (!c->test && c->holdout > 0) {
    uint64_t lines = 0;
    ps_status st = ps_train_count_rows(c, p, &lines); /* kept: the trainer counts no more */
    if (st != PS_OK)
      return ps_error_set(err, PS_ERR_INVALID, "--holdout: cannot count the lines of --train %s "
                          "(%s)", c->train, ps_status_str(st));
    if ((uint64_t)c->holdout >= lines)
      return ps_error_set(err, PS_ERR_INVALID, "--holdout %" PRId64 " leaves no training lines "
                          "(--train %s has %" PRIu64 ")", c->holdout, c->train, lines);
    p->train_lines = lines;
  }
  return PS_OK;
}

ps_status ps_train_plan_resolve(const ps_train_config *c, ps_train_plan *p, ps_error *err) {
  memset(p, 0, sizeof *p);
  if (parse_names(c, p, err) != PS_OK) return PS_ERR_INVALID;
  return check_all(c, p, err);
}
