/* ps_time: CLOCK_MONOTONIC in nanoseconds, and sleeps to an absolute deadline that survive
 * EINTR (so an open-loop schedule does not drift). */
#include "ps_time.h"

#include <errno.h>
#include <time.h>

uint64_t ps_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ps_sleep_until_ns(uint64_t deadline_ns) {
  struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                        .tv_nsec = (long)(deadline_ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

void ps_sleep_ns(uint64_t ns) { ps_sleep_until_ns(ps_now_ns() + ns); }
