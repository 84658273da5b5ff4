/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* acquire.h: the acquisition machine, one waiter's way from "I want it" to "taken",
 * "not acquired in time" or "failed", and the yield policy that spaces a process's
 * holds out when others want the lock.
 *
 * Every acquisition of the library (a blocking lock, an asynchronous one, a set of
 * locks) follows the same rules: maybe yield first, attempt, and after an attempt that
 * found the key held either confirm notifications, retry at once, or sleep until a
 * notification, the holder's TTL or the deadline, then attempt again. Those rules live
 * here once, in a machine that performs no I/O and takes no mutex: the driver asks it
 * what to do next (rl_acquire_step()), does it (an attempt in the store, a wait for
 * notifications, a sleep: a condition wait, a timer, a worker's poke), and reports
 * what came of it (rl_acquire_attempted(), rl_acquire_watched()). What an attempt is,
 * the machine does not know: one lease, a set of leases, a permit; it only sees the
 * verdict (taken, held with a TTL, failed), which is what lets the lock family share it.
 *
 * The states are named in one enum and changed through one function, which logs each
 * transition at debug level, as curl's multi interface does with mstate().
 */
#ifndef RL_ACQUIRE_H
#define RL_ACQUIRE_H

#include <glib.h>

/* What the driver does next. */
typedef enum
{
  RL_ACQUIRE_ATTEMPT, /* one attempt now, then rl_acquire_attempted() */
  RL_ACQUIRE_WATCH,   /* confirm notifications (waiting up to watch_ms when the driver
                         may block), then rl_acquire_watched() */
  RL_ACQUIRE_SLEEP,   /* sleep until wake_at, or until the notification number moves
                         past seq when watch_seq; then step again */
  RL_ACQUIRE_DONE,    /* finished: see outcome */
  RL_ACQUIRE_CHECK,   /* during a sleep: the check for a cycle of waits the driver planned
                         (rl_acquire_check_at()) is due; make it, then
                         rl_acquire_checked() */
} RlAcquireAction;

/* How an acquisition ended. */
typedef enum
{
  RL_ACQUIRE_TAKEN,        /* the attempt took what it asked for */
  RL_ACQUIRE_NOT_ACQUIRED, /* the deadline passed with it held by others */
  RL_ACQUIRE_FAILED,       /* an attempt failed: the driver has the error (or, without
                              one, the wait ran out during the request) */
} RlAcquireOutcome;

/* The verdict of one attempt. */
typedef enum
{
  RL_ATTEMPT_TAKEN,
  RL_ATTEMPT_HELD,
  RL_ATTEMPT_FAILED,
} RlAttemptResult;

/* How the driver would learn that what an attempt found held was released. */
typedef enum
{
  RL_NOTIFY_OFF,       /* SPIN mode: never; retry every spin_ms */
  RL_NOTIFY_DOWN,      /* PUBSUB mode, notifications not confirmed (yet) */
  RL_NOTIFY_CONFIRMED, /* PUBSUB mode, notifications confirmed before the attempt */
} RlNotifyState;

/* What the driver reports after an attempt. */
typedef struct
{
  RlAttemptResult result;
  gint64 pttl_ms;       /* HELD: the holder's remaining TTL; -1 unknown or no expiry */
  RlNotifyState notify; /* as it stood when the attempt was sent */
  guint16 seq;          /* the notification number read before the attempt */
  gint64 spin_ms;       /* the interval between attempts when notifications cannot
                           bound the sleep (idle_between_tries_ms) */
} RlAttemptReport;

/* The machine's states (the table at the top of acquire.c). */
typedef enum
{
  RL_ACQ_START,      /* nothing done yet: a yield first, perhaps */
  RL_ACQ_YIELDING,   /* sleeping so that others may take it first */
  RL_ACQ_ATTEMPTING, /* the driver makes an attempt */
  RL_ACQ_WATCHING,   /* the driver confirms notifications */
  RL_ACQ_SLEEPING,   /* between two attempts */
  RL_ACQ_DONE,
} RlAcquireState;

/* One acquisition. The driver reads the fields; only acquire.c writes them. */
typedef struct
{
  const char *name; /* for the log */
  RlAcquireState state;
  RlAcquireOutcome outcome; /* DONE */
  gint64 deadline;          /* monotonic µs, RL_FOREVER */
  gint64 yield_until;       /* the first attempt not before this (0: at once) */
  guint attempts;           /* made so far; > 0: the next one is contended */
  gboolean need_watch;      /* an attempt found it held: notifications are wanted, so the
                               driver confirms them (without waiting) before each attempt */
  gboolean watch_seq;       /* SLEEP: a change of the notification number ends it */
  guint16 seq;              /* SLEEP: the notification number it sleeps past */
  gint64 wake_at;           /* SLEEP: monotonic µs */
  gint64 watch_ms;          /* WATCH: the most a blocking driver may wait for them: the
                               spin interval, the deadline at most */
  gint64 held_at;           /* when the last attempt was found held (monotonic µs) */
  gint64 check_at;          /* the next check for a cycle of waits, a sleep ending for it
                               (monotonic µs); RL_FOREVER: none */
  RlAttemptReport last;     /* the last attempt's report */
  gpointer joined;          /* the store (RlStore) whose waiters of @name the acquisition
                               joined at its first watch, to leave when it ends; NULL:
                               none. Written by the registry's helpers (internal.h:
                               rl_registry_watch(), rl_registry_leave()), not here */
} RlAcquire;

/* Starts an acquisition that ends at @deadline (monotonic µs, RL_FOREVER) and makes
 * its first attempt not before @yield_until (0: at once). @name is kept for the log. */
void rl_acquire_init (RlAcquire *acq, const char *name, gint64 deadline, gint64 yield_until);
/* What to do next, at @now (monotonic µs), with the notification number of what the
 * acquisition waits for at @seq: at the start (any @seq), and whenever a sleep ended or
 * was interrupted (a notification, a timer, for nothing: the machine then says to sleep
 * on). */
RlAcquireAction rl_acquire_step (RlAcquire *acq, gint64 now, guint16 seq);
/* The attempt asked for was made, found held or not at @now: what came of it, and what
 * to do next (a sleep it asks for begins now, whatever the number is meanwhile: the
 * sleep itself ends at once if it moved past the report's seq). */
RlAcquireAction rl_acquire_attempted (RlAcquire *acq, const RlAttemptReport *report, gint64 now);
/* During a sleep, an attempt sent for the acquisition by whoever heard the release
 * (the notification side, lock-pretake.c) was answered at @now as @report says (taken,
 * or failed when the lease could not be registered): what came of it, as
 * rl_acquire_attempted() says. */
RlAcquireAction rl_acquire_handed (RlAcquire *acq, const RlAttemptReport *report, gint64 now);
/* The confirmation asked for was made: notifications are @up. What to do next. */
RlAcquireAction rl_acquire_watched (RlAcquire *acq, gboolean up);
/* Has the sleeps between attempts end at @at for a check for a cycle of waits
 * (RL_ACQUIRE_CHECK), which only a driver that can make one asks for; RL_FOREVER: no
 * check (the default). */
void rl_acquire_check_at (RlAcquire *acq, gint64 at);
/* The check asked for was made; the next one is due at @next_at. What to do next, as
 * rl_acquire_step() says with @now and @seq (the sleep goes on, or ends at once when
 * the notification number moved meanwhile). */
RlAcquireAction rl_acquire_checked (RlAcquire *acq, gint64 next_at, gint64 now, guint16 seq);
/* When the sleep asked for (RL_ACQUIRE_SLEEP) ends at the latest: its wake_at, or a
 * check due earlier. */
static inline gint64
rl_acquire_sleep_end (const RlAcquire *acq)
{
  return acq->state == RL_ACQ_SLEEPING ? MIN (acq->wake_at, acq->check_at) : acq->wake_at;
}
/* Whether the next attempt follows one that found it held. */
static inline gboolean
rl_acquire_contended (const RlAcquire *acq)
{
  return acq->attempts > 0;
}

/* The yield policy ---------------------------------------------------------------- */

/* A lock's record of its holds, for the yield policy (kept with the lock's waiting
 * state; written under the lock's mutex). */
typedef struct
{
  gint64 yield_until;     /* the next acquisition's first attempt not before this (0:
                             none); read and cleared by that acquisition */
  guint8 contended_holds; /* holds of the lease in a row since an acquisition that found
                             it held (1), up to the bound; 0: none since the last yield */
  guint8 lost_yields;     /* yields in a row after which nobody had taken the lock */
  gboolean yielded;       /* yield_until was set for the next acquisition */
} RlYieldRecord;

/* Why a hold ends with a yield. */
typedef enum
{
  RL_YIELD_NONE,
  RL_YIELD_STREAK_END, /* a streak of local hand-offs reached its bound */
  RL_YIELD_BARGED,     /* the process took the lease too many times in a row since it
                          last had to wait for it */
} RlYieldReason;

/* What the end of a hold knows. */
typedef struct
{
  gboolean others;    /* a client outside this registry was told of the release */
  guint max_handoffs; /* the hand-off bound (0: hand-offs off) */
  guint handoffs;     /* hand-offs in a row that ended with this hold */
  gint64 release_us;  /* the release's round trip */
} RlHoldEnd;

typedef struct
{
  RlYieldReason reason;
  gint64 duration_us; /* RL_YIELD_NONE: 0 */
} RlYieldPlan;

/* A hold of the lease begins (@contended: its acquisition found the key held by
 * another owner first): the record is brought up to date. */
void rl_yield_count_hold (RlYieldRecord *record, gboolean contended);
/* Whether the next acquisition yields, and for how long, when a hold ends as @end says.
 * Pure: the caller applies it with rl_yield_apply(). */
RlYieldPlan rl_yield_plan (const RlYieldRecord *record, const RlHoldEnd *end);
/* Applies @plan to @record, the yield starting now; @name for the log. */
void rl_yield_apply (RlYieldRecord *record, const RlYieldPlan *plan, const char *name);

#endif /* RL_ACQUIRE_H */
