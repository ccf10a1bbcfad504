/* ps_thread: stopping a background thread that sleeps on a condition variable.
 *
 * The metrics endpoint's reaper and the server's checkpoint watcher (--follow) both wait on a
 * condition variable between rounds and leave when a stop flag is set under its mutex; the
 * flag must be set and signalled under the lock, or a wake-up between the thread's check and
 * its wait is lost and the join waits a whole round. Written once here. */
#ifndef PS_THREAD_H
#define PS_THREAD_H

#include <pthread.h>
#include <stdbool.h>

/* Sets *stop under mu, wakes the thread waiting on cv, and joins it. */
static inline void ps_thread_stop(pthread_t th, pthread_mutex_t *mu, pthread_cond_t *cv,
                                  bool *stop) {
  pthread_mutex_lock(mu);
  *stop = true;
  pthread_cond_signal(cv);
  pthread_mutex_unlock(mu);
  pthread_join(th, NULL);
}

#endif
