/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* watchdog.c: the thread that keeps a registry's leases alive, as a periodic task.
 *
 * The thread knows nothing of leases: leases.c gives it three functions, one that does
 * the chores of every wake-up (reporting losses, releasing acquisitions whose outcome
 * was unknown), one that says when the next tick is due, and the tick itself (one
 * renewal batch). What lives here is the timing: sleeping until the plan says, waking
 * early when kicked (the plan changed) or told to tick now (the store's connection
 * broke), waking for chores alone when they are due before the tick, and backing off
 * after a failure.
 *
 * A tick that fails as a whole (Redis unreachable) is tried again after a backoff,
 * 100 ms doubling to 1 s, never later than the deadline the plan gives (when a lease
 * would count as lost): retrying at once would spin a core and flood the server with
 * connections as it comes back. Chores left undone are retried on the same backoff.
 */
#include "config.h"

#include <pthread.h>

#include "sync.h"
#include "watchdog.h"

#define RL_BACKOFF_MIN_US (100 * 1000)
#define RL_BACKOFF_MAX_US (1000 * 1000)

struct _RlWatchdog
{
  RlWatchdogFuncs funcs;
  gpointer data;
  pthread_t thread;
  RlMutex mutex; /* guards the flags */
  RlCond cond;
  gboolean stop;
  gboolean kicked;
  gboolean now;
};

static void *
watchdog_thread (void *arg)
{
  RlWatchdog *self = arg;
  RlTickResult last = RL_TICK_DONE;
  gint64 backoff = 0;

  rl_thread_set_name ("redislock-wd");
  for (;;)
    {
      gboolean chores_left = self->funcs.chores (self->data);
      gint64 now = g_get_monotonic_time ();
      gint64 deadline, wake, chores_at, tick_at;
      gboolean asked;

      if (last == RL_TICK_FAILED || chores_left)
        backoff = backoff == 0 ? RL_BACKOFF_MIN_US : MIN (backoff * 2, RL_BACKOFF_MAX_US);
      else
        backoff = 0;
      wake = self->funcs.plan (self->data, &deadline, &chores_at);
      if (last == RL_TICK_AGAIN)
        wake = now;
      else if (last == RL_TICK_FAILED)
        /* Nothing was confirmed: again after the backoff, and not after the deadline. */
        wake = MIN (now + backoff, deadline);
      if (chores_left)
        wake = MIN (wake, now + backoff);
      /* Chores due before the tick wake the thread for them alone. */
      tick_at = wake;
      wake = MIN (wake, chores_at);

      rl_mutex_lock (&self->mutex);
      while (!self->stop && !self->kicked && !self->now && g_get_monotonic_time () < wake)
        rl_cond_wait_until (&self->cond, &self->mutex, wake);
      if (self->stop)
        {
          rl_mutex_unlock (&self->mutex);
          break;
        }
      if (self->kicked && !self->now)
        {
          /* Plans changed (a new or renewed lease): compute the wake-up again. */
          self->kicked = FALSE;
          rl_mutex_unlock (&self->mutex);
          continue;
        }
      asked = self->now;
      self->kicked = self->now = FALSE;
      rl_mutex_unlock (&self->mutex);
      if (!asked && g_get_monotonic_time () < tick_at)
        continue;
      last = self->funcs.tick (self->data);
    }
  return NULL;
}

RlWatchdog *
rl_watchdog_new (const RlWatchdogFuncs *funcs, gpointer data)
{
  RlWatchdog *self = g_new0 (RlWatchdog, 1);
  int rc;

  self->funcs = *funcs;
  self->data = data;
  rl_mutex_init (&self->mutex);
  rl_cond_init (&self->cond);
  rc = pthread_create (&self->thread, NULL, watchdog_thread, self);
  if (rc != 0)
    g_error ("Cannot start the lock watchdog thread: %s", g_strerror (rc));
  return self;
}

/* Sets @flag, one of @self's requests (stop, kicked, now), and wakes the thread. */
static void
request (RlWatchdog *self, gboolean *flag)
{
  rl_mutex_lock (&self->mutex);
  *flag = TRUE;
  rl_cond_signal (&self->cond);
  rl_mutex_unlock (&self->mutex);
}

void
rl_watchdog_kick (RlWatchdog *self)
{
  request (self, &self->kicked);
}

void
rl_watchdog_tick_now (RlWatchdog *self)
{
  request (self, &self->now);
}

void
rl_watchdog_free (RlWatchdog *self)
{
  if (self == NULL)
    return;
  request (self, &self->stop);
  pthread_join (self->thread, NULL);
  rl_cond_clear (&self->cond);
  rl_mutex_clear (&self->mutex);
  g_free (self);
}
