/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* sync.h: the mutex and condition variable every part of the library uses, and the
 * one wait on sockets until a deadline.
 *
 * GLib 2.74's GMutex and GCond are futex-based on Linux and invisible to
 * ThreadSanitizer, so a TSan build would report races on state that is correctly
 * guarded. These thin wrappers over pthread_mutex_t / pthread_cond_t are what TSan
 * understands; the condition variable uses CLOCK_MONOTONIC, so deadlines are
 * g_get_monotonic_time() values (microseconds) exactly as with g_cond_wait_until().
 *
 * Lock order. Every mutex of the library, outermost first; a thread holding one may
 * take only those listed after it on its line, never one before (ThreadSanitizer's
 * lock-order checking in the TSan build holds the code to it):
 *
 *   quorum-store.c opener_mutex -> registry cache_mutex (internal.h) -> lock->m
 *   registry cache_mutex -> rw->m (rwlock.h) -> lock->m of its carriers
 *   registry cache_mutex -> leases.c mutex
 *   rw->m -> leases.c mutex
 *   leases.c renew_mutex -> leases.c mutex -> watchdog.c mutex
 *   waits.c list_mutex -> leases.c mutex
 *
 * and these leaves, under which nothing of the library is called: leases.c
 * callback_mutex, notify.c mutex, cluster.c mutex, sentinel.c mutex, the connection
 * pool's mutex (connection.c), memory-store.c rl_memory_mutex, quorum-store.c
 * lease_mutex, the async worker pool's mutex (async-pool.c), lock-async.c's and
 * rwlock-async.c's result_mutex, the Redis store's recent_mutex (redis-lease.c), a
 * leader's mutex (leader.c). Callbacks up the layers (a store's released(), a
 * topology's changed(), the lease-lost callback) are made with none of a layer's own
 * mutexes held, except the quorum opener's, which is outermost for that reason.
 */
#ifndef RL_SYNC_H
#define RL_SYNC_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <glib.h>
#ifdef HAVE_SYS_PRCTL_H
#include <sys/prctl.h>
#endif

typedef struct
{
  pthread_mutex_t m;
} RlMutex;

typedef struct
{
  pthread_cond_t c;
} RlCond;

/* Names the calling thread (at most 15 bytes), so that it can be told apart in a
 * debugger, `top -H` or /proc/PID/task/TID/comm. */
static inline void
rl_thread_set_name (const char *name)
{
#ifdef HAVE_SYS_PRCTL_H
  prctl (PR_SET_NAME, name, 0, 0, 0);
#else
  (void) name;
#endif
}

/* A deadline that never comes. */
#define RL_FOREVER G_MAXINT64

/* @now_us + @ms milliseconds, saturated at RL_FOREVER; @ms < 0 is RL_FOREVER too. */
static inline gint64
rl_deadline_after (gint64 now_us, gint64 ms)
{
  if (ms < 0 || ms >= (RL_FOREVER - now_us) / 1000)
    return RL_FOREVER;
  return now_us + ms * 1000;
}

static inline void
rl_mutex_init (RlMutex *mutex)
{
  pthread_mutex_init (&mutex->m, NULL);
}

static inline void
rl_mutex_clear (RlMutex *mutex)
{
  pthread_mutex_destroy (&mutex->m);
}

static inline void
rl_mutex_lock (RlMutex *mutex)
{
  int rc = pthread_mutex_lock (&mutex->m);
  if (G_UNLIKELY (rc != 0))
    g_error ("pthread_mutex_lock: %s", g_strerror (rc));
}

static inline void
rl_mutex_unlock (RlMutex *mutex)
{
  pthread_mutex_unlock (&mutex->m);
}

/* Asserts that @mutex is held (by the calling thread, in every use), as the kernel's
 * lockdep_assert_held() and SQLite's sqlite3_mutex_held() do: the `_locked` functions
 * begin with it, so "caller holds the mutex" is checked, not just said. A mutex held
 * by the caller cannot be taken again: trylock fails. Compiled out with
 * G_DISABLE_ASSERT. */
static inline void
rl_mutex_assert_held (RlMutex *mutex)
{
#ifndef G_DISABLE_ASSERT
  if (G_UNLIKELY (pthread_mutex_trylock (&mutex->m) == 0))
    {
      pthread_mutex_unlock (&mutex->m);
      g_error ("A mutex the caller must hold is not held");
    }
#else
  (void) mutex;
#endif
}

/* Copies @field, state that @mutex guards, to @value (@size bytes each) with @mutex
 * held: the body of a getter of such a field. */
static inline void
rl_mutex_read (RlMutex *mutex, const void *field, void *value, gsize size)
{
  rl_mutex_lock (mutex);
  memcpy (value, field, size);
  rl_mutex_unlock (mutex);
}

static inline void
rl_cond_init (RlCond *cond)
{
  pthread_condattr_t attr;
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&cond->c, &attr);
  pthread_condattr_destroy (&attr);
}

static inline void
rl_cond_clear (RlCond *cond)
{
  pthread_cond_destroy (&cond->c);
}

static inline void
rl_cond_signal (RlCond *cond)
{
  pthread_cond_signal (&cond->c);
}

static inline void
rl_cond_broadcast (RlCond *cond)
{
  pthread_cond_broadcast (&cond->c);
}

/* Sets *@flag, state that @mutex guards, and wakes every waiter on @cond: how a thread
 * tells the threads waiting on @cond to stop, or to look again. */
static inline void
rl_mutex_raise (RlMutex *mutex, RlCond *cond, gboolean *flag)
{
  rl_mutex_lock (mutex);
  *flag = TRUE;
  rl_cond_broadcast (cond);
  rl_mutex_unlock (mutex);
}

/* Waits until signalled or until the monotonic time @end_us (RL_FOREVER: no bound).
 * Returns FALSE when the deadline passed. Callers re-check their predicate in a loop. */
static inline gboolean
rl_cond_wait_until (RlCond *cond, RlMutex *mutex, gint64 end_us)
{
  struct timespec ts;
  int rc;

  if (end_us == RL_FOREVER)
    {
      pthread_cond_wait (&cond->c, &mutex->m);
      return TRUE;
    }
  ts.tv_sec = end_us / G_USEC_PER_SEC;
  ts.tv_nsec = (end_us % G_USEC_PER_SEC) * 1000;
  rc = pthread_cond_timedwait (&cond->c, &mutex->m, &ts);
  return rc != ETIMEDOUT;
}

/* Waits until one of @pfds is ready or the monotonic time @end_us passes (RL_FOREVER:
 * no bound), again after a signal. Past @end_us it still looks once without waiting:
 * what arrived while the thread was not running (its process stopped, or not
 * scheduled) is then read instead of being taken for a timeout. A deadline already
 * gone (0, say) asks for that look only. A caller goes on past @end_us only while what
 * it waits for is already there, which the replies it expects bound. Every wait of the library on its sockets goes
 * through here, where the absolute deadline becomes poll()'s relative timeout. Returns
 * poll()'s count: 0 when nothing was ready by @end_us, -1 with errno (never EINTR). */
static inline int
rl_poll_until (struct pollfd *pfds, nfds_t n, gint64 end_us)
{
  for (;;)
    {
      gint64 left_ms = end_us == RL_FOREVER ? -1
                                            : MAX ((end_us - g_get_monotonic_time () + 999) / 1000, 0);
      int rc = poll (pfds, n, (int) MIN (left_ms, G_MAXINT));

      if (rc >= 0 || errno != EINTR)
        return rc;
    }
}

#endif /* RL_SYNC_H */
