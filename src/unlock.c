/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* unlock.c: the end of a hold, redis_lock_unlock() and the release half of the
 * asynchronous and set calls.
 *
 * An outermost unlock is planned before anything is done: plan_unlock() looks at a
 * snapshot of the lock (local waiters, the lease's state, the hand-off streak, whether
 * the lease is confirmed since the latest reset) and names one of a few plans (keep the
 * lease for a waiting thread, confirm it first and then hand it over, release it, or
 * release it keeping it for a moment when nobody outside listened), which one switch
 * carries out. Kept apart from lock.c, the taking half, which owns the local mutex's
 * rules: this file gives the mutex up only through rl_lock_release_local_locked().
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "lock-private.h"
#include "waits.h"

/* Ends the hold after the lease is settled: local mutex free, a cancelled lease
 * cancellable dropped (an uncancelled one is kept for the next hold). @others: a
 * client outside this registry was told of the release. When the yield policy says
 * so (rl_yield_plan(): the hold ends a hand-off streak of @max hand-offs, or ends too
 * long a run of holds since this process last had to wait for the lock), the next
 * local acquisition waits a little (about twice the release's round trip, whatever
 * notifications come meanwhile) so that client can take it. */
static void
end_hold (RedisLock *lock, guint max, gint64 release_us, gboolean others)
{
  RedisLockRegistry *registry = lock->registry;

  RlHoldEnd end = { .others = others, .max_handoffs = max, .release_us = release_us };
  static const RlYieldRecord none = { 0 };
  RlYieldPlan plan;

  rl_leases_forget_cancelled (registry->leases, lock);
  rl_mutex_lock (&lock->m);
  end.handoffs = lock->handoffs;
  plan = rl_yield_plan (lock->wait != NULL ? &lock->wait->yield : &none, &end);
  if (plan.reason != RL_YIELD_NONE)
    rl_yield_apply (&rl_lock_wait_state (lock)->yield, &plan, lock->key_data);
  lock->handoffs = 0;
  lock->streak_extended = FALSE;
  rl_lock_release_local_locked (lock);
  rl_mutex_unlock (&lock->m);
  RL_ATOMIC_SET (lock->last_used, g_get_monotonic_time ());
}

/* Hands the local mutex, with the lease, to a waiting thread of this registry, if one
 * still waits; @new_streak: the lease was just kept at the end of a streak, so the
 * count of hand-offs in a row starts again. Returns whether it was handed over. */
static gboolean
hand_over (RedisLock *lock, gboolean new_streak)
{
  gboolean handed;

  rl_mutex_lock (&lock->m);
  if (new_streak)
    lock->streak_extended = TRUE;
  handed = lock->waiters > 0;
  if (handed)
    {
      lock->handed_over = TRUE;
      lock->handoffs = new_streak ? 0 : lock->handoffs + 1;
      rl_lock_release_local_locked (lock);
    }
  rl_mutex_unlock (&lock->m);
  if (handed)
    {
      RL_ATOMIC_ADD (lock->registry->stats.local_handoffs, 1);
      RL_ATOMIC_SET (lock->last_used, g_get_monotonic_time ());
    }
  return handed;
}

/* The outermost unlock as a plan ------------------------------------------------ */

/* What the outermost unlock does, decided by plan_unlock() from one snapshot. */
typedef enum
{
  UNLOCK_HAND_OVER,         /* give the lease to a waiting thread of this registry */
  UNLOCK_REFRESH_HAND_OVER, /* the same, after renewing it (nobody else renews it) */
  UNLOCK_RELEASE_OR_KEEP,   /* streak at its bound: release, or keep it for one more
                               streak when no other client listens */
  UNLOCK_RELEASE,           /* release it */
} UnlockPlan;

static const char *const unlock_plan_names[] = {
  [UNLOCK_HAND_OVER] = "hand over",
  [UNLOCK_REFRESH_HAND_OVER] = "refresh, then hand over",
  [UNLOCK_RELEASE_OR_KEEP] = "release or keep",
  [UNLOCK_RELEASE] = "release",
};

/* The state the plan is made from: the settings, read once per unlock, and the lock's
 * state, read under lock->m and from the lease table at one moment. */
typedef struct
{
  guint max;         /* max_local_handoffs */
  gboolean watchdog; /* leases are renewed in the background */
  guint waiters;
  guint handoffs;
  gboolean streak_extended;
  RlLeaseView lease;       /* the lease table's view of the hold */
  gboolean lease_ok;       /* in the table and not found lost */
  gboolean handover_tried; /* a hand-over of this unlock failed: release instead */
} UnlockState;

static UnlockPlan
plan_unlock (const UnlockState *s)
{
  if (s->max == 0 || s->waiters == 0 || !s->lease_ok || s->handover_tried)
    return UNLOCK_RELEASE;
  if (s->handoffs < s->max)
    /* A lease nobody renews, or one last confirmed before the store's connection
     * broke or came back (the server may have restarted empty since), is confirmed
     * first: never hand another thread a lease that may be gone. */
    return s->watchdog && !s->lease.unconfirmed ? UNLOCK_HAND_OVER : UNLOCK_REFRESH_HAND_OVER;
  if (!s->streak_extended)
    return UNLOCK_RELEASE_OR_KEEP;
  return UNLOCK_RELEASE;
}

static void
snapshot (RedisLock *lock, UnlockState *s)
{
  s->lease = rl_leases_view (lock->registry->leases, lock);
  rl_mutex_lock (&lock->m);
  s->waiters = lock->waiters;
  s->handoffs = lock->handoffs;
  s->streak_extended = lock->streak_extended;
  rl_mutex_unlock (&lock->m);
  s->lease_ok = s->lease.held && !s->lease.lost;
}

/* The first half of a release: the value of the hold of @view, and the lease dropped
 * from the table (*lost: it had been found lost). FALSE when close() released it
 * between our check and now: the hold is ended and @error says CLOSED. */
gboolean
rl_lock_release_begin (RedisLock *lock, const RlLeaseView *view, guint max,
                       char value[RL_LEASE_VALUE_MAX], gboolean *lost, GError **error)
{
  RedisLockRegistry *registry = lock->registry;

  rl_leases_value (registry->leases, view->serial, value);
  if (rl_leases_drop (registry->leases, lock, lost))
    return TRUE;
  end_hold (lock, max, 0, FALSE);
  g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                       "The lock registry is closed");
  return FALSE;
}

RlLeaseResult
rl_lock_release_store (RedisLock *lock, const char *value, gboolean lost, gint64 keep_ttl_ms,
                       gboolean *others, GError **error)
{
  RlStore *store = lock->registry->store;

  *others = FALSE;
  /* Found lost already: the unlock reports LEASE_LOST whatever the store says, so it
   * does not wait for the store, which may be what lost it (a frozen server would hold
   * the caller, a leader's main context say, for the command timeout). The key, in
   * case it is still this hold's, is released in the background by
   * rl_lock_release_end(), on this hold's value only, as after a release that failed. */
  if (lost)
    return RL_LEASE_ERROR;
  return store->vt->release (store, lock->key_data, value, keep_ttl_ms, others, error);
}

/* The second half, once the store answered @result (not KEPT), @others and
 * @store_error (taken) to the release of @value sent at @start_us (RL_LEASE_ERROR
 * without an error: not asked, the lease being @lost): ends the hold and reports. */
RlLeaseResult
rl_lock_release_end (RedisLock *lock, const RlLeaseView *view, guint max, const char *value,
                     gboolean lost, RlLeaseResult result, gboolean others, gint64 start_us,
                     GError *store_error, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  g_autoptr (GError) local_error = store_error;

  RL_ATOMIC_ADD (registry->stats.releases, 1);
  end_hold (lock, max, g_get_monotonic_time () - start_us, others);
  if (result == RL_LEASE_ERROR)
    /* The release may not have reached Redis: the key would stay until its TTL, and
     * this registry's next acquisition, with another value, would wait for it. It is
     * released in the background (on this hold's value only, so never a later hold). */
    rl_leases_add_doubtful (registry->leases, lock->key_data, value, view->ttl_ms);

  /* The release failed, but the lease had gone unconfirmed past its TTL already: it
   * is lost whatever the release would have said. */
  if (result == RL_LEASE_ERROR && !lost && g_get_monotonic_time () >= view->lose_at)
    {
      rl_debug ("release of %s failed after its lease ran out: %s", lock->key_data,
               local_error->message);
      result = RL_LEASE_LOST;
    }
  if (result == RL_LEASE_LOST && !lost)
    RL_ATOMIC_ADD (registry->stats.leases_lost, 1);
  if (lost || result == RL_LEASE_LOST)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                   "The lease of lock “%s” was lost before unlock: it expired or another owner "
                   "took it; the data it protected may have been changed concurrently",
                   rl_lock_name (lock));
      return RL_LEASE_LOST;
    }
  if (result == RL_LEASE_ERROR)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return RL_LEASE_ERROR;
    }
  return RL_LEASE_OK;
}

/* Releases the lease of @view (the hold's, just read) in the store (@keep: unless no
 * other client listens, then keeps it with its TTL reset, and the result is
 * RL_LEASE_KEPT with the lease held again); otherwise ends the hold and reports: TRUE,
 * or FALSE with @error. Only the holding thread changes the hold's serial and TTL, so
 * the view is current for them; whether the lease was lost is read as it is dropped. */
static RlLeaseResult
release_lease (RedisLock *lock, const RlLeaseView *view, guint max, gboolean keep,
               GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  GError *store_error = NULL;
  char value[RL_LEASE_VALUE_MAX];
  RlLeaseResult result;
  gboolean lost, others = FALSE;
  gint64 start;

  if (!rl_lock_release_begin (lock, view, max, value, &lost, error))
    return RL_LEASE_ERROR;
  start = g_get_monotonic_time ();
  result = rl_lock_release_store (lock, value, lost, keep ? view->ttl_ms : 0, &others,
                                  &store_error);
  if (result == RL_LEASE_KEPT)
    {
      if (rl_leases_take (registry->leases, lock, view->serial, view->ttl_ms, start,
                          view->token))
        return RL_LEASE_KEPT;
      /* Closed meanwhile: close() did not see this lease. */
      rl_lock_release_after_close (lock, value, error);
      end_hold (lock, max, 0, FALSE);
      return RL_LEASE_ERROR;
    }
  return rl_lock_release_end (lock, view, max, value, lost, result, others, start, store_error,
                              error);
}

gboolean
rl_lock_plans_release (RedisLock *lock, RlLeaseView *view, guint *max)
{
  RedisLockRegistry *registry = lock->registry;
  UnlockState s = { 0 };

  s.max = g_atomic_int_get (&registry->settings.max_local_handoffs);
  s.watchdog = g_atomic_int_get (&registry->settings.watchdog_enabled) != 0;
  snapshot (lock, &s);
  *view = s.lease;
  *max = s.max;
  return s.lease_ok && plan_unlock (&s) == UNLOCK_RELEASE;
}

/* The outermost unlock: the caller owns the lock with a hold count of 1. Plans, carries
 * the plan out, and plans again when a step changed the state (a hand-over found no
 * waiter or a stale lease, a streak was kept): each pass either ends the hold or makes
 * the next plan a release, so it ends within three passes. */
static gboolean
unlock_outermost (RedisLock *lock, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  UnlockState s = { 0 };

  s.max = g_atomic_int_get (&registry->settings.max_local_handoffs);
  s.watchdog = g_atomic_int_get (&registry->settings.watchdog_enabled) != 0;
  for (;;)
    {
      UnlockPlan plan;

      snapshot (lock, &s);
      plan = plan_unlock (&s);
      rl_debug ("unlock %s: %s (%u waiting, %u hand-offs in a row)", lock->key_data,
               unlock_plan_names[plan], s.waiters, s.handoffs);
      switch (plan)
        {
        case UNLOCK_HAND_OVER:
          /* Only a lease confirmed recently enough is handed on; one that may have
           * expired (this process was frozen) is released instead, which reports it
           * lost. */
          if (!rl_leases_check_time (registry->leases, lock) && hand_over (lock, FALSE))
            return TRUE;
          s.handover_tried = TRUE;
          break;
        case UNLOCK_REFRESH_HAND_OVER:
          if (rl_leases_refresh (registry->leases, lock) && hand_over (lock, FALSE))
            return TRUE;
          s.handover_tried = TRUE;
          break;
        case UNLOCK_RELEASE_OR_KEEP:
        case UNLOCK_RELEASE:
          switch (release_lease (lock, &s.lease, s.max, plan == UNLOCK_RELEASE_OR_KEEP, error))
            {
            case RL_LEASE_KEPT:
              /* Nobody else listened: the lease starts a new streak with the next
               * waiter, or, if all left meanwhile, is released on the next pass. */
              if (hand_over (lock, TRUE))
                return TRUE;
              break;
            case RL_LEASE_OK:
              return TRUE;
            default:
              return FALSE;
            }
          break;
        }
    }
}

RlUnlockStep
rl_lock_unlock_local (RedisLock *lock, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  gpointer self = rl_lock_current_thread ();
  g_autoptr (GError) local_error = NULL;
  gboolean owner;

  if (!rl_registry_check (registry, &local_error))
    {
      if (local_error->code == REDIS_LOCK_ERROR_CLOSED)
        {
          /* The lease went with close; the local hold goes now. */
          rl_mutex_lock (&lock->m);
          if (lock->owner == self)
            rl_lock_release_local_locked (lock);
          rl_mutex_unlock (&lock->m);
        }
      g_propagate_error (error, g_steal_pointer (&local_error));
      return RL_UNLOCK_FAILED;
    }

  owner = rl_lock_owned_by_caller (lock, self);
  if (owner && lock->count > 1)
    {
      lock->count--;
      return RL_UNLOCK_INNER;
    }
  if (!owner)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER,
                   "The calling thread does not hold lock “%s”", rl_lock_name (lock));
      return RL_UNLOCK_FAILED;
    }
  return RL_UNLOCK_OUTERMOST;
}

gboolean
rl_lock_unlock_outermost (RedisLock *lock, GError **error)
{
  return unlock_outermost (lock, error);
}

gboolean
redis_lock_unlock (RedisLock *lock, GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  switch (rl_lock_unlock_local (lock, error))
    {
    case RL_UNLOCK_INNER:
      return TRUE;
    case RL_UNLOCK_OUTERMOST:
      return unlock_outermost (lock, error);
    case RL_UNLOCK_FAILED:
    default:
      return FALSE;
    }
}
