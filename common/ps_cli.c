#include "ps_cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ps_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || *end != '\0') return -1;
  *out = (int64_t)v;
  return 0;
}

int ps_parse_double(const char *s, double *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (errno || *end != '\0' || !isfinite(v)) return -1;
  *out = v;
  return 0;
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

void ps_cli_usage(const ps_cli *cli, FILE *out) {
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

static int set_value(const ps_cli *cli, const ps_cli_opt *o, const char *arg, FILE *err) {
  switch (o->type) {
    case PS_CLI_FLAG: *(bool *)o->dest = true; return 0;
    case PS_CLI_STRING: *(const char **)o->dest = arg; return 0;
    case PS_CLI_INT:
    case PS_CLI_I64: {
      int64_t v;
      if (ps_parse_i64(arg, &v) != 0) {
        fprintf(err, "%s: --%s: '%s' is not an integer\n", cli->prog, o->name, arg);
        return -1;
      }
      if (o->type == PS_CLI_INT && (v < -2147483647 - 1 || v > 2147483647)) {
        fprintf(err, "%s: --%s: '%s' is out of range\n", cli->prog, o->name, arg);
        return -1;
      }
      if (bounded(o) && ((double)v < o->min || (double)v > o->max)) {
        fprintf(err, "%s: --%s: %s is outside [%.0f, %.0f]\n", cli->prog, o->name, arg,
                o->min, o->max);
        return -1;
      }
      if (o->type == PS_CLI_INT) *(int *)o->dest = (int)v;
      else *(int64_t *)o->dest = v;
      return 0;
    }
    case PS_CLI_DOUBLE: {
      double v;
      if (ps_parse_double(arg, &v) != 0) {
        fprintf(err, "%s: --%s: '%s' is not a number\n", cli->prog, o->name, arg);
        return -1;
      }
      if (bounded(o) && (v < o->min || v > o->max)) {
        fprintf(err, "%s: --%s: %s is outside [%g, %g]\n", cli->prog, o->name, arg, o->min,
                o->max);
        return -1;
      }
      *(double *)o->dest = v;
      return 0;
    }
  }
  return -1;
}

int ps_cli_parse(const ps_cli *cli, int argc, char **argv, int *first_arg, FILE *err) {
  if (!err) err = stderr;
  size_t n = cli->nopts;
  struct option *longs = calloc(n + 2, sizeof *longs);
  bool *seen = calloc(n + 1, sizeof *seen);
  char shorts[256];
  size_t sp = 0;
  int rc = PS_CLI_OK;
  if (!longs || !seen) {
    fprintf(err, "%s: out of memory\n", cli->prog);
    rc = PS_CLI_ERROR;
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
      ps_cli_usage(cli, stdout);
      rc = PS_CLI_HELP;
      goto out;
    }
    if (c == '?' || c == ':') {
      const char *bad = argv[optind - 1] ? argv[optind - 1] : "?";
      if (c == ':') fprintf(err, "%s: option '%s' needs a value (see --help)\n", cli->prog, bad);
      else if (optopt && optopt < 256) fprintf(err, "%s: unknown option '-%c' (see --help)\n", cli->prog, optopt);
      else fprintf(err, "%s: unknown option '%s' (see --help)\n", cli->prog, bad);
      rc = PS_CLI_ERROR;
      goto out;
    }
    size_t idx = n;
    if (c >= 1000) idx = (size_t)(c - 1000);
    else
      for (size_t i = 0; i < n; i++)
        if (cli->opts[i].short_name == c) idx = i;
    if (idx >= n) {
      rc = PS_CLI_ERROR;
      goto out;
    }
    if (set_value(cli, &cli->opts[idx], optarg, err) != 0) {
      rc = PS_CLI_ERROR;
      goto out;
    }
    seen[idx] = true;
  }
  for (size_t i = 0; i < n; i++) {
    if (cli->opts[i].required && !seen[i]) {
      fprintf(err, "%s: missing required option --%s (see --help)\n", cli->prog, cli->opts[i].name);
      rc = PS_CLI_ERROR;
      goto out;
    }
  }
  if (first_arg) *first_arg = optind;
  else if (optind < argc) {
    fprintf(err, "%s: unexpected argument '%s' (see --help)\n", cli->prog, argv[optind]);
    rc = PS_CLI_ERROR;
  }
out:
  free(longs);
  free(seen);
  return rc;
}
