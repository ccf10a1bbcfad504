/* pt_cluster: helpers for the server integration tests: free loopback ports, temp dirs,
 * starting ps-server processes (fork/exec) and stopping them by PID, with bounded waits, and
 * the in-process reference store their results are compared with. */
#ifndef PT_CLUSTER_H
#define PT_CLUSTER_H

#include <stdbool.h>
#include <sys/types.h>

#include "ps_client.h"
#include "ps_store.h"

typedef struct pt_server {
  pid_t pid;
  int port;
  int shard, shards, threads;
  char url[64];
  char dir[512];
} pt_server;

/* CURVE keys (Z85) that pt_start's ping and every client made here use from now on: this
 * process's secret and the server's public key; NULL: none (the default). */
void pt_set_curve(const char *sec, const char *srv);
/* ps_client's defaults with timeout_ms and the keys of pt_set_curve. */
void pt_client_options(ps_client_options *o, uint32_t timeout_ms);
/* A port that was free a moment ago on 127.0.0.1. */
int pt_free_port(void);
/* mkdtemp under /tmp; out must hold 512 bytes. */
void pt_tmpdir(const char *tag, char *out);
/* pt_tmpdir(tag, dir), and in d0 (600 bytes) the data dir of its first shard, dir/s0. */
void pt_tmpdir_s0(const char *tag, char *dir, char *d0);
/* pt_tmpdir_s0, then pt_start of shard 0 of `shards` on d0 (a free port, `threads` partition
 * threads). */
bool pt_start_s0(pt_server *s, const char *tag, char *dir, char *d0, int shards, int threads);
void pt_rmrf(const char *dir);
/* Starts ps-server ($EMBER_BIN/ps-server) and waits (<= 15 s) until it answers a ping.
 * port 0 picks one; dir is the data dir. Returns false on failure. */
bool pt_start(pt_server *s, int shard, int shards, const char *dir, int port, int threads);
/* pt_start with more ps-server arguments (a NULL-terminated list, at most 16; NULL = none). */
bool pt_start_args(pt_server *s, int shard, int shards, const char *dir, int port, int threads,
                   const char *const *extra);
/* One shard (shard 0 of 1, 2 partition threads) in a fresh pt_tmpdir(tag) → dir, whose ps-server
 * drops every `every`-th reply (EMBER_TEST_DROP_REPLY; 0: none), with pt_start_args' extra. */
bool pt_start_dropping(pt_server *s, const char *tag, char *dir, int every,
                       const char *const *extra);
/* SIGKILLs that shard (bounded wait) and removes its data dir and its log, dir.log. */
void pt_stop_clean(pt_server *s, const char *dir);
/* Sends sig and waits up to timeout_ms for exit; returns the exit status (or -1). */
int pt_stop(pt_server *s, int sig, int timeout_ms);
/* n shards of one cluster in dir/s0 .. dir/s{n-1} (dir from pt_tmpdir(tag)), each with
 * `threads` partition threads; false if any did not start. */
bool pt_start_all(pt_server *srv, int n, const char *tag, char *dir, int threads);
/* SIGKILLs every server of pt_start_all (bounded wait) and removes dir. */
void pt_stop_all(pt_server *srv, int n, const char *dir);
/* A client of those n servers (shard order) as `rank`, requests bounded by timeout_ms;
 * NULL if it cannot be created. */
ps_client *pt_client(const pt_server *srv, int n, uint32_t rank, uint32_t timeout_ms);
/* A TCP connection from src (an IPv4 literal; NULL = any) to dst:port, the connect and every
 * later read and write bounded by timeout_ms; -1 with errno set on failure. */
int pt_tcp_connect(const char *src, const char *dst, int port, long timeout_ms);
/* GET http://127.0.0.1:port/path (HTTP/1.1, Connection: close), every read and write bounded by
 * 5 s: the body of a 200 answer, malloc'd and NUL-terminated; NULL otherwise. */
char *pt_http_get(int port, const char *path);
/* A cluster that a cmocka test group shares: n shards in a temp dir named for tag, shard i with
 * threads[i] partition threads, started before the group's tests and SIGKILLed after them. */
typedef struct pt_group {
  int n;               /* shards, at most 4 */
  const char *tag;     /* of the temp dir (and the group's name) */
  int threads[4];      /* partition threads of each shard */
  uint32_t timeout_ms; /* of the clients pt_group_client makes */
  pt_server srv[4];
  char dir[512];
} pt_group;
struct CMUnitTest;
/* Runs the tests as one cmocka group around g's cluster; the test program's exit status. */
int pt_group_run(pt_group *g, const struct CMUnitTest *tests, size_t n);
/* int main(void) running the cmocka tests given (cmocka_unit_test(...), ...) with pt_group_run
 * around the group g (a pt_group variable): the main of a file whose tests share a cluster. */
#define PT_GROUP_MAIN(g, ...)                                      \
  int main(void) {                                                 \
    const struct CMUnitTest tests[] = {__VA_ARGS__};               \
    return pt_group_run(&(g), tests, sizeof tests / sizeof *tests); \
  }
/* A client of g's servers as rank; ends the test program if it cannot be created. */
ps_client *pt_group_client(const pt_group *g, uint32_t rank);
/* The in-process reference a test replays the servers' traffic on: a store in dir/name (one
 * partition, cache_bytes of hot tier) with t declared. NULL, with the reason on stderr, if it
 * cannot be opened or t declared. */
ps_store *pt_ref_store(const char *dir, const char *name, size_t cache_bytes,
                       const ps_table_spec *t);
/* An Adagrad table of zero rows (the exactly-once and replication tests' hand reference):
 * id, name, dim, lr, eps, initial accumulator, stepping. */
ps_table_spec pt_adagrad_spec(uint32_t id, const char *name, uint32_t dim, double lr, double eps,
                              double a0, ps_consistency cons, uint32_t workers);
/* The path of a binary in EMBER_BIN. */
const char *pt_bin(const char *name);

#endif
