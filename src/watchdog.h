/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* watchdog.h: a thread that runs a periodic task with a backoff (see watchdog.c). */
#ifndef RL_WATCHDOG_H
#define RL_WATCHDOG_H

#include <glib.h>

typedef struct _RlWatchdog RlWatchdog;

typedef enum
{
  RL_TICK_DONE,   /* done, or nothing to do */
  RL_TICK_AGAIN,  /* run again at once */
  RL_TICK_FAILED, /* failed as a whole: again after the backoff */
} RlTickResult;

/* What the thread runs, all called from it with no mutex of its own held. */
typedef struct
{
  /* Work for every wake-up, before planning; returns TRUE when some is left to retry
   * after the backoff. */
  gboolean (*chores) (gpointer data);
  /* When the next tick is due (RL_FOREVER: none), in *deadline_us the latest a retry
   * after a failure may come (RL_FOREVER: none), and in *chores_us when the chores
   * want to run again without a tick (RL_FOREVER: not before the tick). */
  gint64 (*plan) (gpointer data, gint64 *deadline_us, gint64 *chores_us);
  RlTickResult (*tick) (gpointer data);
} RlWatchdogFuncs;

/* Starts the thread (named redislock-wd). */
RlWatchdog *rl_watchdog_new (const RlWatchdogFuncs *funcs, gpointer data);
/* Plans changed: the thread calls plan() again. */
void rl_watchdog_kick (RlWatchdog *watchdog);
/* The thread ticks at once. */
void rl_watchdog_tick_now (RlWatchdog *watchdog);
/* Stops and joins the thread. NULL is ignored. */
void rl_watchdog_free (RlWatchdog *watchdog);

#endif /* RL_WATCHDOG_H */
