/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock.c: one named lock: a local recursive mutex in front of a Redis lease.
 *
 * The local mutex (owner thread, hold count, waiters; a mutex and two condition
 * variables, one set per lock, never pooled or striped) is taken first. Only the
 * thread that owns it talks to the store, and only for the outermost acquisition and
 * the outermost release, so threads of one process contend at mutex speed, re-entry
 * never sends a command, and the store sees at most one waiter per process per lock.
 *
 * Acquisition follows one deadline computed at the start: the local wait and the
 * store wait together never exceed wait_ms. The store phase is the acquisition machine
 * of acquire.c, which this file drives for a blocking call (acquire_lease(): a
 * condition wait between steps) and whose attempt step for one lease it provides to
 * lock-async.c (rl_lock_attempt_step()). In PUBSUB mode a waiter reads the lock's
 * notification sequence number, attempts, and on failure sleeps until the number
 * changes, the holder's remaining TTL runs out, the deadline passes or it is
 * cancelled; the attempt only counts once the store confirms that notifications are
 * flowing. While it so sleeps, the attempt the next release calls for is sent by the
 * thread that hears the release (the store's notification thread), which then wakes
 * it to read the reply (lock-pretake.c): the wake-up overlaps the round trip instead
 * of preceding it, and a lease so taken enters the lease table as the waiter's own
 * attempt's would; one taken for a waiter that left meanwhile is released. Not during
 * a yield, with fencing, in line, or on a store without stepwise requests. A plain
 * lock's blocking acquisition waits in line in the store's queue (lock-queue.c); a
 * release grants it the lease, the notification thread wakes it. In SPIN mode, and
 * while notifications are down, it sleeps idle_between_tries_ms between attempts.
 * When a hold ends, the yield policy (acquire.c's rl_yield_plan()) may have the next
 * acquisition let other processes go first.
 *
 * The owner field is written under lock->m but atomically, so the owning thread can
 * recognise itself without the mutex: re-entry and an inner unlock are an atomic load
 * and a change of the hold count, which only the owner touches while it owns the lock.
 *
 * The local mutex is not strictly fair: a thread that unlocks and locks again at once
 * (a loop) takes it back without a context switch while the woken waiter is still on
 * its way, which is what makes hand-offs cheap. After RL_LOCAL_BARGE_MAX such holds
 * in a row with threads waiting, the free mutex is reserved for a waiting thread, so
 * no thread of a busy process starves.
 *
 * Waiters that are not threads (the _async calls of lock-async.c) wait in a queue on
 * the lock, in order, counted with the waiting threads so the unlock's plan sees them.
 * Whoever frees the mutex grants it to the first of them at once (with the lease, on a
 * hand-off), taking turns with the threads when both wait; they are told of
 * notifications and close through their callbacks.
 *
 * The outermost unlock releases the store lease before the local mutex, so that the
 * next local owner can never find our key still present; and it releases the local
 * mutex in every case, so a lost lease or a Redis failure never wedges other threads.
 * What it does is one plan (plan_unlock() in unlock.c), made from one snapshot of the
 * lock, the lease and the settings, and carried out by one switch
 * (rl_lock_unlock_outermost()); the local mutex's granting rules are in lock-local.c:
 *
 *   threads of ours waiting | hand-offs in a row | lease     | plan
 *   ------------------------+--------------------+-----------+------------------------
 *   none, or hand-offs off  | -                  | -         | release
 *   yes                     | < max              | held, ok  | hand over (watchdog on)
 *                           |                    |           | refresh, hand over (off,
 *                           |                    |           | or not confirmed since
 *                           |                    |           | the store's connection
 *                           |                    |           | broke or came back)
 *   yes                     | = max, not kept    | held, ok  | release or keep
 *   yes                     | = max, kept once   | -         | release
 *   -                       | -                  | lost/gone | release (reports the loss)
 *
 * A hand-over that fails (the lease turned out stale, the waiters left, the refresh
 * failed) is followed by a release; a kept lease starts a new streak with the next
 * waiter, or is released if none is left. Each step is logged at debug level.
 */
#include "config.h"

#include <string.h>

#include "internal.h"
#include "lock-private.h"
#include "rwlock.h"
#include "waits.h"


G_STATIC_ASSERT (RL_LOCAL_BARGE_MAX < 8); /* lock->barged is 3 bits */

RedisLock *
rl_lock_new (RedisLockRegistry *registry, const char *name)
{
  gsize prefix_len = registry->key_prefix_len - 1;
  gsize name_len = strlen (name);
  RedisLock *lock = g_malloc0 (sizeof (RedisLock) + prefix_len + 1 + name_len + 1);

  lock->ref_count = 1;
  lock->registry = registry;
  memcpy (lock->key_data, registry->registry_key, prefix_len);
  lock->key_data[prefix_len] = ':';
  memcpy (lock->key_data + prefix_len + 1, name, name_len + 1);
  rl_mutex_init (&lock->m);
  return lock;
}

/* Whether the cache may drop @lock: nobody references, holds or waits on it, no call
 * has its memory in hand (redis_lock_registry_renew()), and the lease table has not
 * pinned it (the watchdog's batch, the queue of losses whose callback is due: a
 * callback may take a reference, which must find the lock still cached).
 * registry->cache_mutex held. */
gboolean
rl_lock_is_idle (RedisLock *lock)
{
  gboolean idle;

  if (lock->user_refs > 0 || g_atomic_int_get (&lock->ref_count) > 1
      || rl_leases_is_pinned (lock->registry->leases, lock))
    return FALSE;
  rl_mutex_lock (&lock->m);
  idle = lock->owner == NULL && lock->waiters == 0;
  rl_mutex_unlock (&lock->m);
  return idle;
}

/* Pokes the waiters that sleep for a notification, if any (each leaves the list).
 * lock->m held. */
static void
wake_sleeper_locked (RedisLock *lock)
{
  GList *link;

  rl_mutex_assert_held (&lock->m);
  while ((link = g_queue_pop_head_link (&lock->wait->sleepers)) != NULL)
    {
      RlLockWaiter *sleeper = link->data;
      sleeper->poke (sleeper);
    }
}

/* The condition variable is signalled after lock->m is unlocked: a thread woken while
 * the notifying thread still held it would only block again on the mutex (two more
 * futex calls and a context switch on the hand-off's critical path). No wake-up is
 * missed: a sleeper compares the number under lock->m, and lock->wait, once made,
 * lives as long as the lock's memory, which the caller's reference keeps. */
static gboolean
notify (RedisLock *lock, gboolean release)
{
  RlLockWait *wait;
  gboolean claimed = FALSE;

  rl_mutex_lock (&lock->m);
  lock->notify_seq++;
  wait = lock->wait;
  if (wait != NULL)
    {
      wake_sleeper_locked (lock);
      /* The owner's attempt is sent for it: it is woken once the request is under way
       * (rl_pretake_run()), not now to find it not sent yet. */
      claimed = release && rl_pretake_claim_locked (lock);
    }
  rl_mutex_unlock (&lock->m);
  if (wait != NULL && !claimed)
    rl_cond_broadcast (&wait->notify);
  return claimed;
}

void
rl_lock_notify (RedisLock *lock)
{
  notify (lock, FALSE);
}

gboolean
rl_lock_notify_release (RedisLock *lock)
{
  return notify (lock, TRUE);
}

void
rl_lock_wake_all (RedisLock *lock)
{
  rl_mutex_lock (&lock->m);
  if (lock->wait != NULL)
    {
      rl_cond_broadcast (&lock->wait->local);
      rl_cond_broadcast (&lock->wait->notify);
      wake_sleeper_locked (lock);
      for (GList *l = lock->wait->queue.head; l != NULL; l = l->next)
        ((RlLockWaiter *) l->data)->poke (l->data);
    }
  rl_mutex_unlock (&lock->m);
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  rl_lock_wake_all (data);
}

static void
release_local (RedisLock *lock)
{
  rl_mutex_lock (&lock->m);
  rl_lock_release_local_locked (lock);
  rl_mutex_unlock (&lock->m);
}

gboolean
rl_lock_wait_error (RedisLock *lock, GCancellable *cancellable, GError **error)
{
  if (rl_registry_is_closed (lock->registry))
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                           "The lock registry was closed while waiting");
      return TRUE;
    }
  return g_cancellable_set_error_if_cancelled (cancellable, error);
}



/* Counts a waiter (@self: a thread, or a queued waiter's marker) out of the wait for the
 * local mutex; @owned: it leaves owning the mutex. One that leaves without it may be
 * the last of the waiters a lease was handed over to: it then takes the mutex, and
 * TRUE tells the caller to release that lease (leave_wait_and_unlock()) once lock->m
 * is unlocked, so that it does not stay in Redis with nobody to release it. Otherwise it
 * may have swallowed a signal meant for another waiter, which goes on. lock->m held. */
static gboolean
leave_wait_locked (RedisLock *lock, gpointer self, gboolean owned)
{
  rl_mutex_assert_held (&lock->m);
  lock->waiters--;
  if (lock->waiters == 0)
    lock->barged = lock->reserved = 0;
  if (owned || lock->owner != NULL)
    return FALSE;
  if (lock->handed_over && lock->waiters == 0)
    {
      rl_lock_take_ownership_locked (lock, self, TRUE);
      return TRUE;
    }
  if (lock->waiters > 0)
    rl_lock_wake_local_waiter (lock);
  return FALSE;
}

/* leave_wait_locked(), then unlocks lock->m and releases the lease it took over from
 * waiters that all left, if it did. lock->m held on entry, not on return. */
static void
leave_wait_and_unlock (RedisLock *lock, gpointer self, gboolean owned)
{
  g_autoptr (GError) orphan_error = NULL;
  gboolean orphan = leave_wait_locked (lock, self, owned);

  rl_mutex_unlock (&lock->m);
  if (orphan && !rl_lock_unlock_outermost (lock, &orphan_error))
    g_message ("Releasing the lease of lock “%s”, handed over to waiters that all gave up: %s",
               rl_lock_name (lock), orphan_error->message);
}

/* Waits for the local mutex until @deadline. Returns TRUE when the calling thread
 * owns it (*kept: with the lease handed over; *reentered: an asynchronous call of this
 * thread was granted the lock meanwhile, and this is one more hold of it); FALSE with
 * @error on close or cancel, without on timeout. */
static gboolean
acquire_local (RedisLock *lock, gpointer self, gint64 deadline, GCancellable *cancellable,
               RlWaiting *waiting, gboolean *kept, gboolean *reentered, GError **error)
{
  gboolean owned = FALSE;
  gboolean waited = FALSE;
  gint64 now;

  rl_mutex_lock (&lock->m);
  lock->waiters++;
  for (;;)
    {
      if (rl_lock_wait_error (lock, cancellable, error))
        break;
      if (lock->owner == self)
        {
          /* rl_lock_set_owner() handed this thread the hold of its own _async call. */
          lock->count++;
          *reentered = owned = TRUE;
          break;
        }
      if (lock->owner == NULL && (waited || !lock->reserved))
        {
          *kept = rl_lock_take_ownership_locked (lock, self, waited);
          owned = TRUE;
          break;
        }
      now = g_get_monotonic_time ();
      if (now >= deadline)
        break;
      if (waiting != NULL && rl_waiting_due (waiting, now))
        {
          gboolean go_on;

          /* A wait for a thread of this process joins the waits-for graph too. */
          rl_mutex_unlock (&lock->m);
          go_on = rl_waiting_check (waiting, error);
          rl_mutex_lock (&lock->m);
          if (!go_on)
            break;
          continue;
        }
      rl_cond_wait_until (&rl_lock_wait_state (lock)->local, &lock->m,
                          waiting != NULL ? MIN (deadline, waiting->check_at) : deadline);
      lock->waking = FALSE;
      waited = TRUE;
    }
  leave_wait_and_unlock (lock, self, owned);
  return owned;
}

/* The lease handed over by the previous local owner is ours unless it was found lost
 * meanwhile, or has gone unconfirmed for so long that it may have expired (the process
 * was frozen, say); then it is forgotten quietly, as nobody held it (the previous
 * holder's unlock succeeded, and the caller has not got it yet): no loss is reported,
 * and the caller acquires afresh with a lease cancellable of its own. */
gboolean
rl_lock_accept_kept_lease (RedisLock *lock)
{
  RlLeases *leases = lock->registry->leases;
  RlLeaseView view = rl_leases_view (leases, lock);
  gboolean lost;

  if (view.held && !view.lost && g_get_monotonic_time () < view.lose_at)
    return TRUE;
  rl_leases_drop (leases, lock, &lost);
  rl_leases_forget_cancelled (leases, lock);
  rl_debug ("Lease of lock “%s” handed over stale; acquiring it afresh", lock->key_data);
  return FALSE;
}


/* rl_lock_sleep(); with @pretake (the owner of a plain lock, sleeping for a
 * notification), the next attempt is sent for it by the notification side when one
 * comes (lock-pretake.c): an attempt being sent is waited for, until the acquisition's
 * deadline at most, and *handed tells that it was handed over (rl_pretake_finish());
 * *granted, that a release granted it to the owner's place in line (lock-queue.c). */
static guint16
sleep_for (RedisLock *lock, const RlAcquire *acq, GCancellable *cancellable,
           const RlPretakeLease *pretake, gboolean bounded, gboolean *handed, gboolean *granted)
{
  guint16 seq;
  gint64 end = rl_acquire_sleep_end (acq);
  gboolean armed;

  *handed = *granted = FALSE;
  rl_mutex_lock (&lock->m);
  armed = pretake != NULL && rl_pretake_arm_locked (lock, pretake->ttl_ms, acq->deadline, bounded);
  while (!rl_registry_is_closed (lock->registry) && !g_cancellable_is_cancelled (cancellable))
    {
      RlPretakeWait found = armed ? rl_pretake_check_locked (lock) : RL_PRETAKE_NONE;
      gint64 until = end;

      if (rl_lock_grant_heard_locked (lock))
        {
          *granted = TRUE;
          break;
        }
      if (found == RL_PRETAKE_HANDED)
        {
          *handed = TRUE;
          break;
        }
      if (found == RL_PRETAKE_PENDING)
        until = acq->deadline;
      else if (acq->watch_seq && lock->notify_seq != acq->seq)
        break;
      if (g_get_monotonic_time () >= until)
        break;
      rl_cond_wait_until (&rl_lock_wait_state (lock)->notify, &lock->m, until);
    }
  /* Leaving for another reason (close, cancel, the deadline), it still takes an attempt
   * already handed to it, whose lease only it can release; one not yet under way is
   * finished, and released, by the notification side. */
  if (armed && !*handed)
    {
      if (rl_pretake_check_locked (lock) == RL_PRETAKE_HANDED)
        *handed = TRUE;
      else
        rl_pretake_disarm_locked (lock);
    }
  seq = lock->notify_seq;
  rl_mutex_unlock (&lock->m);
  return seq;
}

guint16
rl_lock_sleep (RedisLock *lock, const RlAcquire *acq, GCancellable *cancellable)
{
  gboolean handed, granted; /* neither: no pretake, not in line */
  return sleep_for (lock, acq, cancellable, NULL, FALSE, &handed, &granted);
}

/* One hold of the lease begins (@contended: the acquisition found the key held by
 * another owner first): the yield policy's record counts it (rl_yield_count_hold()).
 * A lock nobody ever waited for has no record, and needs none until it is contended.
 * lock->m held. */
static void
count_lease_hold_locked (RedisLock *lock, gboolean contended)
{
  RlLockWait *wait;

  rl_mutex_assert_held (&lock->m);
  wait = contended ? rl_lock_wait_state (lock) : lock->wait;
  if (wait != NULL)
    rl_yield_count_hold (&wait->yield, contended);
}

/* The lease @value (@serial), asked for at @sent for @ttl_ms, was taken for the owner
 * of @lock's local mutex: it enters the lease table (the watchdog renews it) and the
 * yield policy's record. OK, or ERROR with @error when the registry closed meanwhile
 * (the lease is released again). */
static RlLeaseResult
lease_taken (RedisLock *lock, guint64 serial, const char *value, gint64 ttl_ms, gint64 sent,
             guint64 token, gboolean contended, GError **error)
{
  RL_ATOMIC_ADD (lock->registry->stats.acquisitions, 1);
  if (!rl_leases_take (lock->registry->leases, lock, serial, ttl_ms, sent, token))
    {
      rl_lock_release_after_close (lock, value, error);
      return RL_LEASE_ERROR;
    }
  rl_mutex_lock (&lock->m);
  count_lease_hold_locked (lock, contended);
  rl_mutex_unlock (&lock->m);
  return RL_LEASE_OK;
}

/* One request for the lease of @lock, whose local mutex the caller owns. @contended:
 * an earlier attempt of the same acquisition found the key held. With @bounded, the
 * request is also cut short at @deadline. Returns OK (the lease is ours and in the
 * table), HELD (*pttl_ms: the holder's remaining TTL, -1 when unknown) or ERROR: with
 * @error, or without when the wait ran out during the request (not acquired in
 * time). */
static RlLeaseResult
attempt_lease (RedisLock *lock, gint64 deadline, gboolean bounded, gint64 ttl_ms,
               const char *fence_key, const RlLeaseRequest *request, gboolean contended,
               gboolean queue, gint64 *pttl_ms, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  RlStore *store = registry->store;
  RlLeases *leases = registry->leases;
  guint64 serial = rl_leases_next_serial (leases), token = 0;
  char value[RL_LEASE_VALUE_MAX];
  g_autoptr (GError) local_error = NULL;
  gint64 sent, request_deadline;
  RlLeaseResult result;

  *pttl_ms = -1;
  rl_leases_value (leases, serial, value);
  sent = g_get_monotonic_time ();
  request_deadline = rl_request_deadline (registry, deadline, bounded, sent);
  if (queue)
    result = rl_lock_attempt_queued (lock, value, serial, sent, ttl_ms, request_deadline, fence_key,
                             contended, &token, pttl_ms, &local_error);
  else
    result = request != NULL ? request->func (lock, value, ttl_ms, request_deadline, pttl_ms,
                                              request->data, &local_error)
                             : store->vt->acquire (store, lock->key_data, value, ttl_ms,
                                                   request_deadline, fence_key, &token, pttl_ms,
                                                   &local_error);
  if (result == RL_LEASE_OK)
    return lease_taken (lock, serial, value, ttl_ms, sent, token, contended, error);
  if (result != RL_LEASE_HELD)
    /* The request may have reached the store and taken the key after all: have it
     * released in the background, so that nobody waits for its TTL. */
    rl_leases_add_doubtful (leases, lock->key_data, value, ttl_ms);
  return rl_attempt_not_taken (registry, result, "", lock->key_data, request_deadline, sent,
                               deadline, &local_error, error);
}

/* rl_lock_attempt_step() with @request (NULL: the plain lock's acquire). */
static RlAcquireAction
attempt_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub, gboolean bounded, gint64 ttl_ms,
              const char *fence_key, const RlLeaseRequest *request, gboolean queue,
              GError **error)
{
  RlAttemptReport report = rl_attempt_report_begin (lock->registry, lock, pubsub, acq);

  report.result = rl_attempt_result_of (attempt_lease (lock, acq->deadline, bounded, ttl_ms,
                                                       fence_key, request,
                                                       rl_acquire_contended (acq), queue,
                                                       &report.pttl_ms, error));
  if (queue)
    rl_lock_queued_report (lock, acq, pubsub, &report);
  return rl_acquire_attempted (acq, &report, g_get_monotonic_time ());
}

RlAcquireAction
rl_lock_attempt_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub, gboolean bounded,
                      gint64 ttl_ms, const char *fence_key, GError **error)
{
  return attempt_step (lock, acq, pubsub, bounded, ttl_ms, fence_key, NULL, FALSE, error);
}

RlAcquireAction
rl_lock_attempt_request_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub,
                              gboolean bounded, gint64 ttl_ms, const RlLeaseRequest *request,
                              GError **error)
{
  return attempt_step (lock, acq, pubsub, bounded, ttl_ms, NULL, request, FALSE, error);
}

/* The attempt sent for the sleeping owner by the notification side took the lease
 * (@taken, @value), or a release granted it to its place in line (with @token): it is
 * the owner's as its own attempt's would be, and the acquisition ends. */
static RlAcquireAction
handed_step (RedisLock *lock, RlAcquire *acq, const RlPretakeLease *taken, const char *value,
             guint64 token, GError **error)
{
  RlAttemptReport report = { .pttl_ms = -1, .notify = acq->last.notify, .seq = acq->seq };

  report.result = rl_attempt_result_of (lease_taken (lock, taken->serial, value, taken->ttl_ms,
                                                     taken->sent, token, TRUE, error));
  return rl_acquire_handed (acq, &report, g_get_monotonic_time ());
}

/* The lease phase of a blocking acquisition, with the local mutex owned: the machine
 * driven by this thread, which sleeps on the lock's condition variable. Returns TRUE
 * when the lease is ours. With @bounded, each store call is cut short at @deadline too
 * (a try with a wait of 0 makes its one attempt within the command timeout). */
static gboolean
acquire_lease (RedisLock *lock, gint64 deadline, gboolean bounded, gint64 ttl_ms,
               const char *fence_key, const RlLeaseRequest *request, GCancellable *cancellable,
               RlWaiting *waiting, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  gboolean pubsub = rl_registry_pubsub (registry);
  gboolean queue = waiting != NULL && request == NULL && rl_lock_queue_wanted (lock);
  /* Not with fencing (its script moves the counter), nor in line (lock-queue.c). */
  gboolean pretake = pubsub && fence_key == NULL && request == NULL && !queue
                     && rl_pretake_possible (lock);
  RlPretakeLease arm = { 0 }, taken;
  gboolean handed, granted;
  RlAcquireAction action;
  g_auto (RlAcquire) acq = { 0 };
  guint16 seq;

  rl_lock_begin_acquire (lock, &acq, deadline);
  if (waiting != NULL)
    rl_acquire_check_at (&acq, waiting->check_at);
  action = rl_acquire_step (&acq, g_get_monotonic_time (), 0);
  for (;;)
    switch (action)
      {
      case RL_ACQUIRE_ATTEMPT:
        action = attempt_step (lock, &acq, pubsub, bounded, ttl_ms, fence_key, request, queue,
                               error);
        break;
      case RL_ACQUIRE_WATCH:
        action = rl_registry_watch (registry, &acq, TRUE);
        break;
      case RL_ACQUIRE_SLEEP:
        /* Asleep after an attempt that found it held, with notifications confirmed: the
         * attempt the next release calls for may be sent by the notification side. */
        arm.ttl_ms = ttl_ms;
        seq = sleep_for (lock, &acq, cancellable,
                         pretake && acq.state == RL_ACQ_SLEEPING
                                 && acq.last.notify == RL_NOTIFY_CONFIRMED
                             ? &arm
                             : NULL,
                         bounded, &handed, &granted);
        if (granted)
          {
            char value[RL_LEASE_VALUE_MAX];
            guint64 token;

            if (rl_lock_wait_error (lock, cancellable, error))
              return FALSE; /* rl_lock_leave_line() releases the grant */
            rl_lock_take_grant (lock, ttl_ms, &taken, value, &token);
            action = handed_step (lock, &acq, &taken, value, token, error);
            break;
          }
        if (handed && rl_pretake_finish (lock, &taken) == RL_LEASE_OK)
          {
            char value[RL_LEASE_VALUE_MAX];

            rl_leases_value (registry->leases, taken.serial, value);
            if (rl_lock_wait_error (lock, cancellable, error))
              {
                rl_pretake_release_unused (lock, value, taken.ttl_ms);
                return FALSE;
              }
            action = handed_step (lock, &acq, &taken, value, 0, error);
            break;
          }
        /* Otherwise (none sent, or it found the key held or failed) as woken by the
         * notification: the next attempt is this thread's, with its tracked read. */
        if (rl_lock_wait_error (lock, cancellable, error))
          return FALSE;
        action = rl_acquire_step (&acq, g_get_monotonic_time (), seq);
        break;
      case RL_ACQUIRE_CHECK:
        if (!rl_waiting_check (waiting, error))
          return FALSE;
        action = rl_acquire_checked (&acq, waiting->check_at, g_get_monotonic_time (),
                                     rl_lock_notify_seq (lock));
        break;
      case RL_ACQUIRE_DONE:
      default:
        return acq.outcome == RL_ACQUIRE_TAKEN;
      }
}

gboolean
rl_lock_acquire_lease (RedisLock *lock, gint64 deadline, gboolean bounded, gint64 ttl_ms,
                       const RlLeaseRequest *request, GCancellable *cancellable, GError **error)
{
  /* A permit's lease records no wait (a semaphore has no single holder to point to). */
  return acquire_lease (lock, deadline, bounded, ttl_ms, NULL, request, cancellable, NULL, error);
}

gboolean
rl_lock_acquire_lease_waiting (RedisLock *lock, gint64 deadline, gboolean bounded, gint64 ttl_ms,
                               const RlLeaseRequest *request, GCancellable *cancellable,
                               RlWaiting *waiting, GError **error)
{
  return acquire_lease (lock, deadline, bounded, ttl_ms, NULL, request, cancellable, waiting,
                        error);
}

/* With fencing on, the key of @lock's fencing counter in *fence_key (g_free()); NULL
 * with fencing off. FALSE with INVALID when the counter cannot share the lock key's
 * slot, on every store, so that code does not change meaning on a Cluster. */
gboolean
rl_lock_fence_key (RedisLock *lock, char **fence_key, GError **error)
{
  *fence_key = NULL;
  if (!g_atomic_int_get (&lock->registry->fencing))
    return TRUE;
  *fence_key = rl_store_fence_key (lock->key_data);
  if (*fence_key != NULL)
    return TRUE;
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
               "Lock “%s” cannot be taken with fencing: its key has a “}” but no hash tag, so "
               "its fencing counter could not share its Cluster slot; rename it or give its key "
               "a hash tag such as “{%s}”",
               rl_lock_name (lock), rl_lock_name (lock));
  return FALSE;
}

static gboolean
acquire (RedisLock *lock, gint64 wait_ms, gint64 ttl_ms, GCancellable *cancellable, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  gpointer self = rl_lock_current_thread ();
  g_autofree char *fence_key = NULL;
  gint64 deadline;
  gulong handler = 0;
  gboolean owned;
  gboolean kept = FALSE;
  gboolean reentered = FALSE;
  gboolean ok;
  RlWaiting waiting;

  if (!rl_registry_check (registry, error))
    return FALSE;
  if (cancellable != NULL && g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  /* Before any wait: a name that cannot be fenced fails at once (re-entry too, so the
   * rule does not depend on who holds the lock). */
  if (g_atomic_int_get (&registry->fencing) && !rl_lock_fence_key (lock, &fence_key, error))
    return FALSE;
  if (rl_lock_owned_by_caller (lock, self))
    {
      lock->count++;
      return TRUE;
    }
  deadline = wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms);
  rl_mutex_lock (&lock->m);
  owned = lock->owner == NULL && !lock->reserved;
  if (owned)
    kept = rl_lock_take_ownership_locked (lock, self, FALSE);
  rl_mutex_unlock (&lock->m);

  if (cancellable != NULL && wait_ms != 0)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), lock, NULL);
  rl_waiting_begin (&waiting, lock, deadline, wait_ms != 0);
  if (!owned
      && !acquire_local (lock, self, deadline, cancellable, &waiting, &kept, &reentered, error))
    {
      rl_waiting_end (&waiting);
      g_cancellable_disconnect (cancellable, handler);
      return FALSE;
    }
  if (reentered)
    {
      rl_waiting_end (&waiting);
      g_cancellable_disconnect (cancellable, handler);
      return TRUE;
    }

  if (ttl_ms == 0)
    ttl_ms = RL_ATOMIC_GET (registry->settings.expire_after_ms);
  if (!rl_registry_check (registry, error))
    /* Closed while waiting for the local mutex: a lease handed over went with close. */
    ok = FALSE;
  else
    ok = (kept && rl_lock_accept_kept_lease (lock))
         || acquire_lease (lock, deadline, wait_ms != 0, ttl_ms, fence_key, NULL, cancellable,
                           &waiting, error);
  rl_lock_leave_line (lock);
  rl_waiting_end (&waiting);
  g_cancellable_disconnect (cancellable, handler);
  if (!ok)
    release_local (lock);
  RL_ATOMIC_SET (lock->last_used, g_get_monotonic_time ());
  return ok;
}

/* The steps of an acquisition, for multilock.c ----------------------------------- */

RlLocalTake
rl_lock_take_local (RedisLock *lock, gint64 deadline, GCancellable *cancellable, GError **error)
{
  gpointer self = rl_lock_current_thread ();
  gboolean owned, kept = FALSE, reentered = FALSE;

  if (rl_lock_owned_by_caller (lock, self))
    {
      lock->count++;
      return RL_LOCAL_REENTERED;
    }
  rl_mutex_lock (&lock->m);
  owned = lock->owner == NULL && !lock->reserved;
  if (owned)
    kept = rl_lock_take_ownership_locked (lock, self, FALSE);
  rl_mutex_unlock (&lock->m);
  if (!owned
      && !acquire_local (lock, self, deadline, cancellable, NULL, &kept, &reentered, error))
    return RL_LOCAL_FAILED;
  if (reentered)
    return RL_LOCAL_REENTERED;
  if (!rl_registry_check (lock->registry, error))
    {
      /* Closed while waiting for the local mutex: a lease handed over went with close. */
      release_local (lock);
      return RL_LOCAL_FAILED;
    }
  return kept && rl_lock_accept_kept_lease (lock) ? RL_LOCAL_WITH_LEASE : RL_LOCAL_NEEDS_LEASE;
}

void
rl_lock_give_back_local (RedisLock *lock, RlLocalTake taken)
{
  g_autoptr (GError) error = NULL;

  switch (taken)
    {
    case RL_LOCAL_REENTERED:
      lock->count--;
      break;
    case RL_LOCAL_NEEDS_LEASE:
      release_local (lock);
      RL_ATOMIC_SET (lock->last_used, g_get_monotonic_time ());
      break;
    case RL_LOCAL_WITH_LEASE:
      /* The lease handed over goes on to the next local waiter, or is released. */
      if (!rl_lock_unlock_outermost (lock, &error))
        rl_debug ("giving back lock %s: %s", lock->key_data, error->message);
      break;
    case RL_LOCAL_FAILED:
    default:
      break;
    }
}

/* The queued waiters of lock-async.c ----------------------------------------------- */

RlQueueTake
rl_lock_take_or_queue (RedisLock *lock, gpointer thread, RlLockWaiter *waiter, gboolean may_queue)
{
  RlQueueTake taken;

  rl_mutex_lock (&lock->m);
  if (lock->owner == thread)
    {
      lock->count++;
      taken = RL_QUEUE_REENTERED;
    }
  else if (lock->owner == NULL && !lock->reserved
           && (lock->wait == NULL || lock->wait->queue.length == 0))
    taken = rl_lock_take_ownership_locked (lock, waiter, FALSE) ? RL_QUEUE_KEPT : RL_QUEUE_OWNED;
  else if (may_queue)
    {
      waiter->link.data = waiter;
      g_queue_push_tail_link (&rl_lock_wait_state (lock)->queue, &waiter->link);
      lock->waiters++;
      taken = RL_QUEUE_QUEUED;
    }
  else
    taken = RL_QUEUE_BUSY;
  rl_mutex_unlock (&lock->m);
  return taken;
}

/* As a thread leaving acquire_local() without the mutex: a lease handed over to
 * waiters that all left is released; otherwise the next waiter gets its turn. */
gboolean
rl_lock_leave_queue (RedisLock *lock, RlLockWaiter *waiter)
{
  rl_mutex_lock (&lock->m);
  if (lock->owner == waiter)
    {
      rl_mutex_unlock (&lock->m);
      return FALSE;
    }
  g_queue_unlink (&lock->wait->queue, &waiter->link);
  leave_wait_and_unlock (lock, waiter, FALSE);
  return TRUE;
}

gboolean
rl_lock_sleep_queued (RedisLock *lock, RlLockWaiter *waiter, guint16 seq)
{
  gboolean sleeps;

  rl_mutex_lock (&lock->m);
  sleeps = lock->notify_seq == seq && !rl_registry_is_closed (lock->registry);
  if (sleeps && g_queue_link_index (&rl_lock_wait_state (lock)->sleepers, &waiter->link) < 0)
    {
      waiter->link.data = waiter;
      g_queue_push_tail_link (&lock->wait->sleepers, &waiter->link);
    }
  rl_mutex_unlock (&lock->m);
  return sleeps;
}

void
rl_lock_wake_queued (RedisLock *lock, RlLockWaiter *waiter)
{
  rl_mutex_lock (&lock->m);
  if (lock->wait != NULL && g_queue_link_index (&lock->wait->sleepers, &waiter->link) >= 0)
    g_queue_unlink (&lock->wait->sleepers, &waiter->link);
  rl_mutex_unlock (&lock->m);
}

void
rl_lock_set_owner (RedisLock *lock, gpointer from, gpointer to)
{
  rl_mutex_lock (&lock->m);
  g_assert (lock->owner == from);
  g_atomic_pointer_set (&lock->owner, to);
  /* A thread receiving the hold may itself be waiting for the lock (a plain lock()
   * made while its _async call was pending): it takes the hold as a re-entry. */
  if (lock->wait != NULL && lock->waiters > 0)
    rl_cond_broadcast (&lock->wait->local);
  rl_mutex_unlock (&lock->m);
}

void
rl_lock_begin_acquire (RedisLock *lock, RlAcquire *acq, gint64 deadline)
{
  gint64 yield_until = 0;

  rl_mutex_lock (&lock->m);
  if (lock->wait != NULL)
    {
      yield_until = lock->wait->yield.yield_until;
      lock->wait->yield.yield_until = 0;
    }
  rl_mutex_unlock (&lock->m);
  if (yield_until > 0 && MIN (yield_until, deadline) > g_get_monotonic_time ())
    RL_ATOMIC_ADD (lock->registry->stats.yields, 1);
  rl_acquire_init (acq, lock->key_data, deadline, yield_until);
}

guint16
rl_lock_notify_seq (RedisLock *lock)
{
  guint16 seq;

  rl_mutex_read (&lock->m, &lock->notify_seq, &seq, sizeof seq);
  return seq;
}

gboolean
redis_lock_lock (RedisLock *lock, GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return acquire (lock, -1, 0, NULL, error);
}

gboolean
redis_lock_try_lock (RedisLock *lock, GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return acquire (lock, 0, 0, NULL, error);
}

gboolean
redis_lock_try_lock_for (RedisLock *lock, gint64 wait_ms, GCancellable *cancellable, GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return acquire (lock, wait_ms, 0, cancellable, error);
}

gboolean
redis_lock_try_lock_full (RedisLock *lock, gint64 wait_ms, gint64 ttl_ms, GCancellable *cancellable,
                          GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  if (!rl_check_ttl (ttl_ms, error))
    return FALSE;
  return acquire (lock, wait_ms, ttl_ms, cancellable, error);
}
