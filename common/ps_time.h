/* ps_time: monotonic clock helpers. All durations in Ember are nanoseconds (uint64_t)
 * unless a name says otherwise. */
#ifndef PS_TIME_H
#define PS_TIME_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t ps_now_ns(void);
static inline double ps_ns_to_s(uint64_t ns) { return (double)ns * 1e-9; }
/* Sleeps until the monotonic time `deadline_ns` (returns at once if past). */
void ps_sleep_until_ns(uint64_t deadline_ns);
void ps_sleep_ns(uint64_t ns);

#endif
