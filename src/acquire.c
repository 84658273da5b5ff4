/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* acquire.c: the acquisition machine and the yield policy (see acquire.h).
 *
 * The machine is the one copy of the rules every acquisition follows, whoever drives
 * it: lock.c's blocking calls wait on a condition variable between its steps,
 * lock-async.c's calls on a timer and the pokes of notifications, multilock.c on the
 * first lock of its set that was found held. It knows time only as the driver tells
 * it and performs no I/O, so each rule is a few lines of arithmetic on one struct:
 *
 *   state       | event                          | next
 *   ------------+--------------------------------+---------------------------------
 *   start       | a yield is due before deadline | yielding: SLEEP (notifications
 *               |                                | do not end it)
 *               | otherwise                      | attempting: ATTEMPT
 *   yielding    | its end passed                 | attempting: ATTEMPT
 *   attempting  | taken / failed                 | done: DONE
 *               | held, deadline passed          | done (not acquired): DONE
 *               | held, notifications down       | watching: WATCH
 *               | held, otherwise                | sleeping: SLEEP until the
 *               |                                | holder's TTL (notifications
 *               |                                | confirmed) or the spin interval,
 *               |                                | the deadline at most
 *   watching    | up                             | attempting: ATTEMPT (the last
 *               |                                | one did not count)
 *               | still down                     | sleeping, on the spin interval
 *   sleeping    | notified, or wake_at passed    | attempting: ATTEMPT
 *               | an attempt sent for it by the  | as attempting's (the driver's
 *               | notification side answered     | other way out of a sleep)
 *               | a planned check is due         | sleeping: CHECK (the driver
 *               |                                | checks for a cycle of waits)
 *
 * A sleep ended by its end time, even at the deadline, leads to one more attempt: the
 * holder may have gone quietly. Only an attempt's verdict ends an acquisition.
 *
 * The yield policy is the other half of fairness between processes: a process that
 * locks in a loop would otherwise take the lease back every time it releases it,
 * before the others' notifications arrive. It is a plan made from a record the lock
 * keeps (rl_yield_plan()), applied by the lock at the end of a hold.
 */
#include "config.h"

#include "debug.h"
#include "acquire.h"
#include "sync.h"

/* Other processes get the same protection from a process that locks in a loop: after
 * this many holds of the lease in a row since it last had to wait for another owner
 * (the only sign it has that others want the lock), and a release other clients
 * heard, it lets them try first. Each such yield costs the lock two release round
 * trips of idle time when nobody takes it; in the bench's 4-process contention it
 * bounds the longest run of one process to about a dozen sections. */
#define RL_REMOTE_BARGE_MAX 4
/* A yield nobody used (the next attempt found the lock free) may mean waiters slower
 * than it: the count goes on, the next yield lasting twice as long, up to this many
 * unused yields in a row; then the process stops yielding until it waits again. */
#define RL_LOST_YIELDS_MAX 3
/* A yield lasts twice the release's round trip (doubled for each unused yield before
 * it), within these bounds (µs). */
#define RL_YIELD_MIN_US 50
#define RL_YIELD_MAX_US 5000

static const char *const state_names[] = {
  [RL_ACQ_START] = "start",    [RL_ACQ_YIELDING] = "yielding", [RL_ACQ_ATTEMPTING] = "attempt",
  [RL_ACQ_WATCHING] = "watch", [RL_ACQ_SLEEPING] = "sleep",    [RL_ACQ_DONE] = "done",
};


/* Whether the change to @state is part of the fast path, which is not logged: the first
 * attempt, and its taking the lock. An uncontended acquisition logs nothing (the
 * unlock's plan logs each hold already), so that the log of a busy process stays
 * readable and a hold with debug output on lasts no longer than it did. */
static gboolean
fast_path (const RlAcquire *acq, RlAcquireState state)
{
  if (state == RL_ACQ_ATTEMPTING)
    return acq->state == RL_ACQ_START;
  return state == RL_ACQ_DONE && acq->attempts == 1 && acq->outcome == RL_ACQUIRE_TAKEN;
}

/* The one place the state changes, logged. */
static void
set_state (RlAcquire *acq, RlAcquireState state)
{
  if (G_UNLIKELY (rl_debug_on ()) && !fast_path (acq, state))
    rl_debug ("acquire %s: %s -> %s (%u attempts, holder's TTL %" G_GINT64_FORMAT " ms)", acq->name,
             state_names[acq->state], state_names[state], acq->attempts, acq->last.pttl_ms);
  acq->state = state;
}

/* Ends the acquisition with @outcome. */
static RlAcquireAction
finish (RlAcquire *acq, RlAcquireOutcome outcome)
{
  acq->outcome = outcome;
  set_state (acq, RL_ACQ_DONE);
  return RL_ACQUIRE_DONE;
}

/* When an attempt at @now that found it held is followed by the next, at the
 * deadline at the latest: at the end of the holder's TTL when notifications are
 * confirmed; after the spin interval when they are not, or when the TTL is unknown or
 * the key has no expiry (a foreign client's SET without PX), so that a key deleted
 * without a notification never leaves a waiter asleep for good. */
static gint64
plan_wake_at (const RlAcquire *acq, gint64 now, gboolean confirmed)
{
  const RlAttemptReport *r = &acq->last;

  if (!confirmed || r->pttl_ms < 0)
    return MIN (acq->deadline, rl_deadline_after (now, r->spin_ms));
  return MIN (acq->deadline, rl_deadline_after (now, r->pttl_ms + 1));
}

/* Sleeps between two attempts until @wake_at, or until the notification number moves
 * past the one read before the last attempt (a release since then ends the sleep at
 * once, so none is missed). */
static RlAcquireAction
sleep_until (RlAcquire *acq, gint64 wake_at)
{
  acq->wake_at = wake_at;
  acq->watch_seq = TRUE;
  acq->seq = acq->last.seq;
  set_state (acq, RL_ACQ_SLEEPING);
  return RL_ACQUIRE_SLEEP;
}

void
rl_acquire_init (RlAcquire *acq, const char *name, gint64 deadline, gint64 yield_until)
{
  *acq = (RlAcquire){
    .name = name, .state = RL_ACQ_START, .deadline = deadline, .yield_until = yield_until,
    .check_at = RL_FOREVER
  };
}

RlAcquireAction
rl_acquire_step (RlAcquire *acq, gint64 now, guint16 seq)
{
  switch (acq->state)
    {
      case RL_ACQ_START:
        /* Other clients were told the lock is free and may want it: give them a few
         * round trips to take it before this process competes again. A notification
         * does not end the wait: the release that asked for it notifies this registry
         * too, and its echo usually arrives just now. */
        acq->wake_at = MIN (acq->yield_until, acq->deadline);
        if (acq->wake_at > now)
          {
            acq->watch_seq = FALSE;
            acq->seq = seq;
            set_state (acq, RL_ACQ_YIELDING);
            return RL_ACQUIRE_SLEEP;
          }
        break;
      case RL_ACQ_YIELDING:
        if (now < acq->wake_at)
          {
            acq->seq = seq;
            return RL_ACQUIRE_SLEEP;
          }
        break;
      case RL_ACQ_SLEEPING:
        if (now >= acq->check_at)
          return RL_ACQUIRE_CHECK;
        if (now < acq->wake_at && seq == acq->seq)
          return RL_ACQUIRE_SLEEP;
        break;
      case RL_ACQ_ATTEMPTING:
        return RL_ACQUIRE_ATTEMPT;
      case RL_ACQ_WATCHING:
        return RL_ACQUIRE_WATCH;
      case RL_ACQ_DONE:
      default:
        return RL_ACQUIRE_DONE;
    }
  set_state (acq, RL_ACQ_ATTEMPTING);
  return RL_ACQUIRE_ATTEMPT;
}

void
rl_acquire_check_at (RlAcquire *acq, gint64 at)
{
  acq->check_at = at;
}

RlAcquireAction
rl_acquire_checked (RlAcquire *acq, gint64 next_at, gint64 now, guint16 seq)
{
  acq->check_at = next_at;
  return rl_acquire_step (acq, now, seq);
}

RlAcquireAction
rl_acquire_attempted (RlAcquire *acq, const RlAttemptReport *report, gint64 now)
{
  g_return_val_if_fail (acq->state == RL_ACQ_ATTEMPTING, RL_ACQUIRE_DONE);
  acq->attempts++;
  acq->last = *report;
  acq->held_at = now;
  switch (report->result)
    {
      case RL_ATTEMPT_TAKEN:
        return finish (acq, RL_ACQUIRE_TAKEN);
      case RL_ATTEMPT_FAILED:
        return finish (acq, RL_ACQUIRE_FAILED);
      case RL_ATTEMPT_HELD:
      default:
        break;
    }
  if (now >= acq->deadline)
    return finish (acq, RL_ACQUIRE_NOT_ACQUIRED);
  if (report->notify == RL_NOTIFY_DOWN)
    {
      /* The attempt only counts once notifications are confirmed: retry at once if
       * they come up, or fall back to the spin interval while they are down. A driver
       * that waits for them waits one spin interval at most, the sleep that would
       * follow anyway: a subscription slow to come back (a reconnection, an answer
       * that is late) does not space the attempts out further. */
      acq->need_watch = TRUE;
      acq->watch_ms = MIN ((acq->deadline - now) / 1000 + 1, MAX (report->spin_ms, 0));
      set_state (acq, RL_ACQ_WATCHING);
      return RL_ACQUIRE_WATCH;
    }
  return sleep_until (acq, plan_wake_at (acq, now, report->notify == RL_NOTIFY_CONFIRMED));
}

RlAcquireAction
rl_acquire_handed (RlAcquire *acq, const RlAttemptReport *report, gint64 now)
{
  g_return_val_if_fail (acq->state == RL_ACQ_SLEEPING, RL_ACQUIRE_DONE);
  set_state (acq, RL_ACQ_ATTEMPTING);
  return rl_acquire_attempted (acq, report, now);
}

RlAcquireAction
rl_acquire_watched (RlAcquire *acq, gboolean up)
{
  g_return_val_if_fail (acq->state == RL_ACQ_WATCHING, RL_ACQUIRE_DONE);
  if (!up)
    return sleep_until (acq, plan_wake_at (acq, acq->held_at, FALSE));
  set_state (acq, RL_ACQ_ATTEMPTING);
  return RL_ACQUIRE_ATTEMPT;
}

/* The yield policy ---------------------------------------------------------------- */

static const char *const yield_reason_names[] = {
  [RL_YIELD_NONE] = "none",
  [RL_YIELD_STREAK_END] = "a hand-off streak ended",
  [RL_YIELD_BARGED] = "held too often in a row",
};

/* An acquisition right after a yield that did not have to wait means nobody took the
 * lock meanwhile: nobody wants it, or its waiters are slower than the yield. Up to
 * RL_LOST_YIELDS_MAX such yields in a row count as the latter (the next yield comes
 * after as many holds, twice as long). */
void
rl_yield_count_hold (RlYieldRecord *record, gboolean contended)
{
  gboolean after_yield = record->yielded;

  record->yielded = FALSE;
  if (contended)
    {
      record->contended_holds = 1;
      record->lost_yields = 0;
    }
  else if (after_yield && record->lost_yields < RL_LOST_YIELDS_MAX)
    {
      record->lost_yields++;
      record->contended_holds = 1;
    }
  else if (after_yield)
    record->lost_yields = 0; /* and contended_holds stays 0: no more yields */
  else if (record->contended_holds > 0 && record->contended_holds < RL_REMOTE_BARGE_MAX)
    record->contended_holds++;
}

/* A hold whose release a client outside this registry heard ends with a yield when it
 * ends a hand-off streak at its bound, or is the RL_REMOTE_BARGE_MAX-th hold in a row
 * since this process last had to wait for the lock. */
RlYieldPlan
rl_yield_plan (const RlYieldRecord *record, const RlHoldEnd *end)
{
  RlYieldPlan plan = { RL_YIELD_NONE, 0 };

  if (!end->others)
    return plan;
  if (end->max_handoffs > 0 && end->handoffs >= end->max_handoffs)
    plan.reason = RL_YIELD_STREAK_END;
  else if (record->contended_holds >= RL_REMOTE_BARGE_MAX)
    plan.reason = RL_YIELD_BARGED;
  else
    return plan;
  plan.duration_us
      = CLAMP ((2 * end->release_us) << record->lost_yields, RL_YIELD_MIN_US, RL_YIELD_MAX_US);
  return plan;
}

void
rl_yield_apply (RlYieldRecord *record, const RlYieldPlan *plan, const char *name)
{
  if (plan->reason == RL_YIELD_NONE)
    return;
  if (G_UNLIKELY (rl_debug_on ()))
    rl_debug ("unlock %s: the next acquisition yields %" G_GINT64_FORMAT " µs (%s; %u unused "
             "yields before)",
             name, plan->duration_us, yield_reason_names[plan->reason], (guint)record->lost_yields);
  /* The yield is timed from here, after the log: it is a few round trips at most. */
  record->yield_until = g_get_monotonic_time () + plan->duration_us;
  record->contended_holds = 0;
  record->yielded = TRUE;
}
