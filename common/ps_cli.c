/* ps_cli: the option table of ps_cli.h turned into getopt_long's, strict number parsing, and
 * --help generated from the same table, so the reference in docs/CLI.md
 * (deploy/gen-cli-ref.sh) never drifts from the code. */
#include "ps_cli.h"
#include "ps_log.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

ps_status ps_parse_i64(const char *s, int64_t *out, ps_error *err) {
  errno = 0;
  char *end = NULL;
  long long v = s ? strtoll(s, &end, 10) : 0;
  if (!s || !*s || errno || *end != '\0')
    return ps_error_set(err, PS_ERR_INVALID, "'%s' is not an integer", s ? s : "");
  *out = (int64_t)v;
  return PS_OK;
}

ps_status ps_parse_double(const char *s, double *out, ps_error *err) {
  errno = 0;
  char *end = NULL;
  double v = s ? strtod(s, &end) : 0;
  if (!s || !*s || errno || *end != '\0' || !isfinite(v))
    return ps_error_set(err, PS_ERR_INVALID, "'%s' is not a number", s ? s : "");
  *out = v;
  return PS_OK;
}

int ps_split_list(const char *s, char sep, char **items, int max) {
  if (!s || !*s) return -1;
  char *copy = strdup(s);
  if (!copy) return -1;
  int n = 0;
  char *p = copy;
  for (;;) {
    char *q = strchr(p, sep);
    if (q) *q = '\0';
    if (!*p || n >= max) {
      free(copy);
      return -1;
    }
    items[n++] = p;
    if (!q) break;
    p = q + 1;
  }
  return n;
}

static bool bounded(const ps_cli_opt *o) { return !(o->min == 0 && o->max == 0); }

static void print_default(const ps_cli_opt *o, FILE *out) {
  switch (o->type) {
    case PS_CLI_STRING: {
      const char *v = *(const char **)o->dest;
      if (v) fprintf(out, " (default: %s)", v);
      break;
    }
    case PS_CLI_INT: fprintf(out, " (default: %d)", *(int *)o->dest); break;
    case PS_CLI_I64: fprintf(out, " (default: %" PRId64 ")", *(int64_t *)o->dest); break;
    case PS_CLI_DOUBLE: fprintf(out, " (default: %g)", *(double *)o->dest); break;
    case PS_CLI_FLAG: break;
  }
}

static void cli_usage(const ps_cli *cli, FILE *out) {
  fprintf(out, "Usage: %s [OPTIONS]%s%s\n", cli->prog, cli->args ? " " : "",
          cli->args ? cli->args : "");
  if (cli->summary) fprintf(out, "%s\n", cli->summary);
  fprintf(out, "\nOptions:\n");
  for (size_t i = 0; i < cli->nopts; i++) {
    const ps_cli_opt *o = &cli->opts[i];
    char lhs[96];
    int n = 0;
    if (o->short_name) n = snprintf(lhs, sizeof lhs, "-%c, ", o->short_name);
    else n = snprintf(lhs, sizeof lhs, "    ");
    snprintf(lhs + n, sizeof lhs - (size_t)n, "--%s%s%s", o->name,
             o->type == PS_CLI_FLAG ? "" : " ",
             o->type == PS_CLI_FLAG ? "" : (o->metavar ? o->metavar : "VALUE"));
    fprintf(out, "  %-34s %s%s", lhs, o->help ? o->help : "", o->required ? " (required)" : "");
    print_default(o, out);
    fputc('\n', out);
  }
  fprintf(out, "  %-34s %s\n", "-h, --help", "show this help and exit");
}

static ps_status set_value(const ps_cli_opt *o, const char *arg, ps_error *err) {
  switch (o->type) {
    case PS_CLI_FLAG: *(bool *)o->dest = true; return PS_OK;
    case PS_CLI_STRING: *(const char **)o->dest = arg; return PS_OK;
    case PS_CLI_INT:
    case PS_CLI_I64: {
      int64_t v;
      if (ps_parse_i64(arg, &v, NULL) != PS_OK)
        return ps_error_set(err, PS_ERR_INVALID, "--%s: '%s' is not an integer", o->name, arg);
      if (o->type == PS_CLI_INT && (v < -2147483647 - 1 || v > 2147483647))
        return ps_error_set(err, PS_ERR_INVALID, "--%s: '%s' is out of range", o->name, arg);
      if (bounded(o) && ((double)v < o->min || (double)v > o->max))
        return ps_error_set(err, PS_ERR_INVALID, "--%s: %s is outside [%.0f, %.0f]", o->name,
                            arg, o->min, o->max);
      if (o->type == PS_CLI_INT) *(int *)o->dest = (int)v;
      else *(int64_t *)o->dest = v;
      return PS_OK;
    }
    case PS_CLI_DOUBLE: {
      double v;
      if (ps_parse_double(arg, &v, NULL) != PS_OK)
        return ps_error_set(err, PS_ERR_INVALID, "--%s: '%s' is not a number", o->name, arg);
      if (bounded(o) && (v < o->min || v > o->max))
        return ps_error_set(err, PS_ERR_INVALID, "--%s: %s is outside [%g, %g]", o->name, arg,
                            o->min, o->max);
      *(double *)o->dest = v;
      return PS_OK;
    }
  }
  return ps_error_set(err, PS_ERR_INTERNAL, "--%s: unknown option type", o->name);
}

ps_status ps_cli_parse(const ps_cli *cli, int argc, char **argv, int *first_arg, bool *help,
                       ps_error *err) {
  *help = false;
  size_t n = cli->nopts;
  struct option *longs = calloc(n + 2, sizeof *longs);
  bool *seen = calloc(n + 1, sizeof *seen);
  char shorts[256];
  size_t sp = 0;
  ps_status st = PS_OK;
  if (!longs || !seen) {
    st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
    goto out;
  }
  shorts[sp++] = ':'; /* report a missing argument as ':' rather than '?' */
  for (size_t i = 0; i < n; i++) {
    longs[i].name = cli->opts[i].name;
    longs[i].has_arg = cli->opts[i].type == PS_CLI_FLAG ? no_argument : required_argument;
    longs[i].val = 1000 + (int)i;
    if (cli->opts[i].short_name && sp + 3 < sizeof shorts) {
      shorts[sp++] = cli->opts[i].short_name;
      if (cli->opts[i].type != PS_CLI_FLAG) shorts[sp++] = ':';
    }
  }
  longs[n].name = "help";
  longs[n].val = 'h';
  shorts[sp++] = 'h';
  shorts[sp] = '\0';

  optind = 0; /* glibc: 0 re-initializes getopt completely */
  opterr = 0;
  for (;;) {
    int li = -1;
    int c = getopt_long(argc, argv, shorts, longs, &li);
    if (c == -1) break;
    if (c == 'h') {
      cli_usage(cli, stdout);
      *help = true;
      goto out;
    }
    if (c == '?' || c == ':') {
      const char *bad = argv[optind - 1] ? argv[optind - 1] : "?";
      if (c == ':')
        st = ps_error_set(err, PS_ERR_INVALID, "option '%s' needs a value (see --help)", bad);
      else if (optopt && optopt < 256)
        st = ps_error_set(err, PS_ERR_INVALID, "unknown option '-%c' (see --help)", optopt);
      else st = ps_error_set(err, PS_ERR_INVALID, "unknown option '%s' (see --help)", bad);
      goto out;
    }
    size_t idx = n;
    if (c >= 1000) idx = (size_t)(c - 1000);
    else
      for (size_t i = 0; i < n; i++)
        if (cli->opts[i].short_name == c) idx = i;
    if (idx >= n) {
      st = ps_error_set(err, PS_ERR_INTERNAL, "getopt returned an unknown option (%d)", c);
      goto out;
    }
    if ((st = set_value(&cli->opts[idx], optarg, err)) != PS_OK) goto out;
    seen[idx] = true;
  }
  for (size_t i = 0; i < n; i++) {
    if (cli->opts[i].required && !seen[i]) {
      st = ps_error_set(err, PS_ERR_INVALID, "missing required option --%s (see --help)",
                        cli->opts[i].name);
      goto out;
    }
  }
  if (first_arg) *first_arg = optind;
  else if (optind < argc)
    st = ps_error_set(err, PS_ERR_INVALID, "unexpected argument '%s' (see --help)",
                      argv[optind]);
out:
  free(longs);
  free(seen);
  return st;
}

int ps_cli_run(const ps_cli *cli, int argc, char **argv, int *first_arg) {
  bool help;
  ps_error err;
  if (ps_cli_parse(cli, argc, argv, first_arg, &help, &err) != PS_OK) {
    fprintf(stderr, "%s: %s\n", cli->prog, ps_error_str(&err));
    return 2;
  }
  return help ? 0 : -1;
}

int ps_cli_run_logged(const ps_cli *cli, int argc, char **argv, int *first_arg,
                      const char *const *level) {
  int rc = ps_cli_run(cli, argc, argv, first_arg);
  if (rc >= 0) return rc;
  return ps_log_apply_level(cli->prog, *level) != 0 ? 2 : -1;
}
