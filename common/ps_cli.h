/* ps_cli: command-line parsing for every Ember binary, around getopt_long.
 *
 * A binary describes its options in a table; ps_cli_parse fills the destinations, prints
 * `--help` (generated from the table, so it never drifts from the code) and rejects bad
 * input with a one-line reason naming the option. Defaults are whatever the destinations
 * hold before the call, and --help shows them.
 *
 * Errors follow ps_status.h: ps_cli_parse returns the status and puts the reason in err,
 * without the program name; ps_cli_run is what a main calls, and adds the name and exit
 * codes every Ember binary shares (--help: 0, a bad flag: "PROG: reason" on stderr, 2). */
#ifndef PS_CLI_H
#define PS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ps_status.h"

typedef enum ps_cli_type {
  PS_CLI_FLAG,   /* bool*, set to true; takes no value */
  PS_CLI_STRING, /* const char**, points into argv */
  PS_CLI_INT,    /* int*, range-checked against [min, max] */
  PS_CLI_I64,    /* int64_t*, range-checked against [min, max] */
  PS_CLI_DOUBLE  /* double*, range-checked against [min, max] */
} ps_cli_type;

typedef struct ps_cli_opt {
  const char *name;    /* long name without "--" */
  char short_name;     /* 0 for none */
  ps_cli_type type;
  void *dest;
  const char *metavar; /* shown in --help, e.g. "URL" */
  const char *help;
  bool required;
  double min, max;     /* for numeric types; min == max == 0 means unbounded */
} ps_cli_opt;

typedef struct ps_cli {
  const char *prog;     /* "ps-server" */
  const char *summary;  /* one line under the usage */
  const char *args;     /* positional arguments in the usage line, or NULL */
  const ps_cli_opt *opts;
  size_t nopts;
} ps_cli;

/* A ps_cli's last two fields from its option array: the array and how many rows it has. */
#define PS_CLI_OPTS(opts) (opts), sizeof(opts) / sizeof *(opts)

/* The --log-level row (for ps_log_apply_level), worded once for the binaries that take it. */
#define PS_CLI_LOG_LEVEL_OPT(level) \
  {"log-level", 0, PS_CLI_STRING, (level), "L", "debug|info|warn|error|off", false, 0, 0}

/* Parses argv. PS_OK: options parsed, or (*help true) --help was printed to stdout and the
 * program should exit 0; *first_arg (may be NULL: then a positional argument is an error) is
 * the index of the first positional argument. Otherwise PS_ERR_INVALID (PS_ERR_NOMEM,
 * PS_ERR_INTERNAL for a bug) with a one-line reason in err, e.g. "--shard: 16 is outside
 * [0, 15]"; the program should print "PROG: reason" to stderr and exit 2. Resets getopt's
 * state, so it may be called more than once (tests do). */
ps_status ps_cli_parse(const ps_cli *cli, int argc, char **argv, int *first_arg, bool *help,
                       ps_error *err);
/* ps_cli_parse for a main: returns -1 to go on, else the exit status (0 after --help; 2 after
 * printing "PROG: reason" to stderr), so a main reads
 *   int rc = ps_cli_run(&cli, argc, argv, NULL);
 *   if (rc >= 0) return rc; */
int ps_cli_run(const ps_cli *cli, int argc, char **argv, int *first_arg);
/* ps_cli_run for a main with PS_CLI_LOG_LEVEL_OPT(level): then also applies *level
 * (ps_log_apply_level: a bad level is exit status 2). */
int ps_cli_run_logged(const ps_cli *cli, int argc, char **argv, int *first_arg,
                      const char *const *level);

/* Strict number parsing shared by binaries: the whole string, no overflow (and a finite
 * double). PS_ERR_INVALID with "'S' is not an integer" / "'S' is not a number" in err. */
ps_status ps_parse_i64(const char *s, int64_t *out, ps_error *err);
ps_status ps_parse_double(const char *s, double *out, ps_error *err);
/* Splits "a,b,c" into at most max items (pointers into a copy the caller frees with
 * free(items[0]) when n > 0). Returns the count, or -1 if there are more than max or an
 * item is empty. */
int ps_split_list(const char *s, char sep, char **items, int max);

#endif
