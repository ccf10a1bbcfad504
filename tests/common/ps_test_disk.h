/* ps_test_disk: a small file system a test can fill and empty — a tmpfs mounted on a scratch
 * directory (needs root: a test reports SKIPPED, exit 77, where mounting is not permitted)
 * and a filler file that takes every byte left. For the full-disk tests of the store
 * (tests/embedding/test_store_disk_full.c) and of ps-server (tests/server/test_disk_full.c). */
#ifndef PS_TEST_DISK_H
#define PS_TEST_DISK_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_table.h"

/* Creates dir and mounts a tmpfs of `size` ("32m") on it; false (errno set) if not permitted. */
static inline bool ps_test_tmpfs(const char *dir, const char *size) {
  char opt[64];
  (void)mkdir(dir, 0700);
  snprintf(opt, sizeof opt, "size=%s", size);
  return mount("tmpfs", dir, "tmpfs", 0, opt) == 0;
}

/* Unmounts (lazily) and removes dir. */
static inline void ps_test_tmpfs_drop(const char *dir) {
  (void)umount2(dir, MNT_DETACH);
  (void)rmdir(dir);
}

/* Writes file until the file system has not one 512-byte block left; true if it ended on
 * ENOSPC. Deleting the file gives the space back. */
static inline bool ps_test_fill(const char *file) {
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  static char buf[1 << 16];
  memset(buf, 0x5a, sizeof buf);
  for (size_t chunk = sizeof buf; chunk >= 512; chunk /= 2)
    while (write(fd, buf, chunk) == (ssize_t)chunk) {
    }
  bool full = errno == ENOSPC;
  close(fd);
  return full;
}

/* The table of the full-disk tests (id 1): SGD with lr 1 from zero rows, so a row is minus
 * the sum of the gradients pushed to it, which the tests add up on their own. */
static inline void ps_test_sgd_spec(ps_table_spec *t, uint32_t dim) {
  ps_table_spec_default(t, 1, "emb", dim);
  t->optimizer = PS_OPT_SGD;
  t->init = PS_INIT_ZERO;
  t->lr = 1.0f;
}

/* Whether the n rows of keys k read are what expect (dim floats per key) says; keys from
 * nkeys on were never pushed and read zero. The first difference goes to stderr. */
static inline bool ps_test_rows_match(const uint64_t *k, size_t n, uint32_t dim, const float *row,
                                      const float *expect, uint64_t nkeys) {
  for (size_t i = 0; i < n; i++)
    for (uint32_t d = 0; d < dim; d++) {
      float want = k[i] < nkeys ? expect[k[i] * dim + d] : 0.0f;
      if (row[i * dim + d] != want) {
        fprintf(stderr, "key %llu dim %u reads %g, expected %g\n", (unsigned long long)k[i], d,
                (double)row[i * dim + d], (double)want);
        return false;
      }
    }
  return true;
}

#endif
