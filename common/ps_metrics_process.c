/* ps_metrics_process: the standard process_* metrics, read from /proc/self at scrape time.
 *
 * Each is a label-less family with a collect callback, so nothing is sampled between scrapes
 * and a registry that never adds them pays nothing. Names and help texts are those of the
 * official Prometheus client libraries, so that stock dashboards work unchanged. Linux only:
 * where a /proc file cannot be read the metric is simply not emitted. */
#include "ps_metrics_int.h"

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct proc_stat {
  double utime_s, stime_s, start_s;
  long threads;
  bool ok;
} proc_stat;

static double boot_time_s(void) {
  FILE *fp = fopen("/proc/stat", "r");
  if (!fp) return 0;
  char line[256];
  double bt = 0;
  while (fgets(line, sizeof line, fp)) {
    unsigned long long v;
    if (sscanf(line, "btime %llu", &v) == 1) {
      bt = (double)v;
      break;
    }
  }
  fclose(fp);
  return bt;
}

static proc_stat read_proc_stat(void) {
  proc_stat ps = {0};
  FILE *fp = fopen("/proc/self/stat", "r");
  if (!fp) return ps;
  char line[1024];
  char *got = fgets(line, sizeof line, fp);
  fclose(fp);
  if (!got) return ps;
  /* The command name (field 2) may hold spaces and parentheses: parse after the last ')'. */
  char *p = strrchr(line, ')');
  if (!p) return ps;
  p++;
  unsigned long long utime = 0, stime = 0, start = 0;
  long threads = 0;
  /* fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
   * utime(14) stime(15) cutime cstime priority nice num_threads(20) itrealvalue starttime(22) */
  int n = sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld %*d %llu",
                 &utime, &stime, &threads, &start);
  if (n != 4) return ps;
  double tick = (double)sysconf(_SC_CLK_TCK);
  if (tick <= 0) tick = 100;
  ps.utime_s = (double)utime / tick;
  ps.stime_s = (double)stime / tick;
  ps.threads = threads;
  ps.start_s = boot_time_s() + (double)start / tick;
  ps.ok = true;
  return ps;
}

static void collect_memory(ps_metrics_sink *sink, void *ud) {
  bool resident = ud != NULL;
  FILE *fp = fopen("/proc/self/statm", "r");
  if (!fp) return;
  unsigned long long size = 0, rss = 0;
  int n = fscanf(fp, "%llu %llu", &size, &rss);
  fclose(fp);
  if (n != 2) return;
  double page = (double)sysconf(_SC_PAGESIZE);
  ps_metrics_emit(sink, NULL, (double)(resident ? rss : size) * page);
}

static void collect_cpu(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  proc_stat ps = read_proc_stat();
  if (ps.ok) ps_metrics_emit(sink, NULL, ps.utime_s + ps.stime_s);
}

static void collect_threads(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  proc_stat ps = read_proc_stat();
  if (ps.ok) ps_metrics_emit(sink, NULL, (double)ps.threads);
}

static void collect_start(ps_metrics_sink *sink, void *ud) {
  proc_stat ps = read_proc_stat();
  (void)ud;
  if (ps.ok) ps_metrics_emit(sink, NULL, ps.start_s);
}

static void collect_fds(ps_metrics_sink *sink, void *ud) {
  (void)ud;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  ps_metrics_emit(sink, NULL, (double)(n > 0 ? n - 1 : 0)); /* minus opendir's own fd */
}

ps_status ps_metrics_add_process(ps_metrics *m) {
  if (!m) return PS_ERR_INVALID;
  pthread_mutex_lock(&m->lock);
  bool done = m->process_added;
  m->process_added = true;
  pthread_mutex_unlock(&m->lock);
  if (done) return PS_OK;
  static const struct {
    ps_metric_type type;
    const char *name, *help;
    ps_metrics_collect_fn fn;
    void *ud;
  } defs[] = {
      {PS_METRIC_GAUGE, "process_resident_memory_bytes", "Resident memory size in bytes.",
       collect_memory, (void *)1},
      {PS_METRIC_GAUGE, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
       collect_memory, NULL},
      {PS_METRIC_COUNTER, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
       collect_cpu, NULL},
      {PS_METRIC_GAUGE, "process_open_fds", "Number of open file descriptors.", collect_fds, NULL},
      {PS_METRIC_GAUGE, "process_threads", "Number of OS threads in the process.", collect_threads,
       NULL},
      {PS_METRIC_GAUGE, "process_start_time_seconds",
       "Start time of the process since unix epoch in seconds.", collect_start, NULL},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    ps_metric *f = NULL;
    ps_status st = ps_metrics_family_register(m, defs[i].type, defs[i].name, defs[i].help, NULL,
                                              0, NULL, 0, &f);
    if (st != PS_OK) return st;
    ps_metric_set_collect(f, defs[i].fn, defs[i].ud);
  }
  return PS_OK;
}
