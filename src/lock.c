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
 * flowing. In SPIN mode, and while notifications are down, it sleeps
 * idle_between_tries_ms between attempts. When a hold ends, the yield policy
 * (acquire.c's rl_yield_plan()) may have the next acquisition let other processes go
 * first.
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
 * What it does is one plan (plan_unlock()), made from one snapshot of the lock, the
 * lease and the settings, and carried out by one switch (unlock_outermost()):
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
#include "waits.h"

#define RL_LOCAL_BARGE_MAX 4

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

/* The lock's condition variables, made on first need. lock->m held. */
static RlLockWait *
lock_wait (RedisLock *lock)
{
  if (lock->wait == NULL)
    {
      lock->wait = g_new0 (RlLockWait, 1);
      rl_cond_init (&lock->wait->local);
      rl_cond_init (&lock->wait->notify);
    }
  return lock->wait;
}

/* Pokes the waiters that sleep for a notification, if any (each leaves the list).
 * lock->m held. */
static void
wake_sleeper_locked (RedisLock *lock)
{
  GList *link;

  while ((link = g_queue_pop_head_link (&lock->wait->sleepers)) != NULL)
    {
      RlLockWaiter *sleeper = link->data;
      sleeper->poke (sleeper);
    }
}

void
rl_lock_notify (RedisLock *lock)
{
  rl_mutex_lock (&lock->m);
  lock->notify_seq++;
  if (lock->wait != NULL)
    {
      rl_cond_broadcast (&lock->wait->notify);
      wake_sleeper_locked (lock);
    }
  rl_mutex_unlock (&lock->m);
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

/* The calling thread's GThread, which the owner field holds, kept in a thread-local
 * variable: g_thread_self() looks it up in a GPrivate on every call, a visible part
 * of a re-entry's few nanoseconds. */
static inline gpointer
current_thread (void)
{
  static __thread gpointer self;

  if (G_UNLIKELY (self == NULL))
    self = g_thread_self ();
  return self;
}

/* Whether the calling thread (@self) owns the local mutex, read without taking it:
 * only @self, or an asynchronous call of @self handing its hold over (rl_lock_set_owner(),
 * with the hold count already set), ever sets the owner to @self, and only the owner
 * clears it, so a TRUE answer cannot change under the caller's feet (a FALSE one turns
 * TRUE when the call is granted, which acquire_local() watches for). While a thread
 * owns the lock, it alone reads and changes the hold count, so re-entry and an inner
 * unlock need no lock->m either. */
static inline gboolean
owned_by_caller (RedisLock *lock, gpointer self)
{
  return g_atomic_pointer_get (&lock->owner) == self;
}

static gboolean take_ownership_locked (RedisLock *lock, gpointer self, gboolean waited);

/* Grants the free mutex to the first queued waiter, unless threads wait too and the
 * mutex went to the queue last time: the two kinds then take turns. lock->m held. */
static gboolean
grant_queued_locked (RedisLock *lock)
{
  RlLockWait *wait = lock->wait;
  RlLockWaiter *waiter;
  gboolean threads_wait;

  if (wait == NULL || wait->queue.length == 0)
    return FALSE;
  threads_wait = lock->waiters > wait->queue.length;
  if (threads_wait && wait->queue_went_last)
    {
      wait->queue_went_last = FALSE;
      return FALSE;
    }
  wait->queue_went_last = threads_wait;
  waiter = g_queue_pop_head_link (&wait->queue)->data;
  lock->waiters--;
  waiter->granted (waiter, take_ownership_locked (lock, waiter, TRUE));
  return TRUE;
}

/* Wakes one waiter for the local mutex, unless one was woken and has not run yet:
 * it will look at the mutex anyway, and a thread that unlocks and locks again at once
 * (as in a loop) then costs no system call and no context switch. A queued waiter is
 * granted the mutex at once instead, when it is its turn. lock->m held. */
static void
wake_local_waiter (RedisLock *lock)
{
  if (grant_queued_locked (lock))
    return;
  if (lock->waiters > 0 && !lock->waking)
    {
      lock->waking = TRUE;
      rl_cond_signal (&lock_wait (lock)->local);
    }
}

/* Gives up the local mutex. lock->m held. */
static void
release_local_locked (RedisLock *lock)
{
  g_atomic_pointer_set (&lock->owner, NULL);
  lock->count = 0;
  if (lock->waiters > 0 && lock->barged < RL_LOCAL_BARGE_MAX
      && ++lock->barged == RL_LOCAL_BARGE_MAX)
    lock->reserved = TRUE;
  wake_local_waiter (lock);
}

static void
release_local (RedisLock *lock)
{
  rl_mutex_lock (&lock->m);
  release_local_locked (lock);
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

/* Makes the calling thread the owner; @waited: it comes out of the wait for the local
 * mutex (and may take a reserved one). lock->m held. Returns whether the previous
 * owner left the lease for it (a local hand-off). */
static gboolean
take_ownership_locked (RedisLock *lock, gpointer self, gboolean waited)
{
  gboolean kept = lock->handed_over;

  if (waited)
    lock->barged = lock->reserved = 0;
  g_atomic_pointer_set (&lock->owner, self);
  lock->count = 1;
  lock->handed_over = FALSE;
  return kept;
}

static gboolean unlock_outermost (RedisLock *lock, GError **error);

/* Counts a waiter (@self: a thread, or a queued waiter's marker) out of the wait for the
 * local mutex; @owned: it leaves owning the mutex. One that leaves without it may be
 * the last of the waiters a lease was handed over to: it then takes the mutex, and
 * TRUE tells the caller to release that lease (release_orphan()) once lock->m is
 * unlocked, so that it does not stay in Redis with nobody to release it. Otherwise it
 * may have swallowed a signal meant for another waiter, which goes on. lock->m held. */
static gboolean
leave_wait_locked (RedisLock *lock, gpointer self, gboolean owned)
{
  lock->waiters--;
  if (lock->waiters == 0)
    lock->barged = lock->reserved = 0;
  if (owned || lock->owner != NULL)
    return FALSE;
  if (lock->handed_over && lock->waiters == 0)
    {
      take_ownership_locked (lock, self, TRUE);
      return TRUE;
    }
  if (lock->waiters > 0)
    wake_local_waiter (lock);
  return FALSE;
}

/* Releases the lease leave_wait_locked() took over from waiters that all left. */
static void
release_orphan (RedisLock *lock)
{
  g_autoptr (GError) orphan_error = NULL;

  if (!unlock_outermost (lock, &orphan_error))
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
  gboolean orphan = FALSE;
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
          *kept = take_ownership_locked (lock, self, waited);
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
      rl_cond_wait_until (&lock_wait (lock)->local, &lock->m,
                          waiting != NULL ? MIN (deadline, waiting->check_at) : deadline);
      lock->waking = FALSE;
      waited = TRUE;
    }
  orphan = leave_wait_locked (lock, self, owned);
  rl_mutex_unlock (&lock->m);
  if (orphan)
    release_orphan (lock);
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
  g_debug ("Lease of lock “%s” handed over stale; acquiring it afresh", lock->key_data);
  return FALSE;
}

/* The registry was closed while @lock's lease (@value) was being taken or kept, after
 * close() released the leases it knew of: release this one too, and fail with CLOSED. */
void
rl_lock_release_after_close (RedisLock *lock, const char *value, GError **error)
{
  RlStore *store = lock->registry->store;
  gboolean others;

  if (store->vt->release (store, lock->key_data, value, 0, &others, NULL) == RL_LEASE_OK)
    RL_ATOMIC_ADD (lock->registry->stats.releases, 1);
  g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                       "The lock registry was closed during this call; the lease it had just taken "
                       "was released");
}

guint16
rl_lock_sleep (RedisLock *lock, const RlAcquire *acq, GCancellable *cancellable)
{
  guint16 seq;

  gint64 end = rl_acquire_sleep_end (acq);

  rl_mutex_lock (&lock->m);
  while ((!acq->watch_seq || lock->notify_seq == acq->seq)
         && !rl_registry_is_closed (lock->registry) && !g_cancellable_is_cancelled (cancellable)
         && g_get_monotonic_time () < end)
    rl_cond_wait_until (&lock_wait (lock)->notify, &lock->m, end);
  seq = lock->notify_seq;
  rl_mutex_unlock (&lock->m);
  return seq;
}

/* One hold of the lease begins (@contended: the acquisition found the key held by
 * another owner first): the yield policy's record counts it (rl_yield_count_hold()).
 * A lock nobody ever waited for has no record, and needs none until it is contended.
 * lock->m held. */
static void
count_lease_hold_locked (RedisLock *lock, gboolean contended)
{
  RlLockWait *wait = contended ? lock_wait (lock) : lock->wait;

  if (wait != NULL)
    rl_yield_count_hold (&wait->yield, contended);
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
               gint64 *pttl_ms, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  RlStore *store = registry->store;
  RlLeases *leases = registry->leases;
  guint64 serial = rl_leases_next_serial (leases), token = 0;
  char value[RL_LEASE_VALUE_MAX];
  g_autoptr (GError) local_error = NULL;
  gint64 sent, bound_ms;

  *pttl_ms = -1;
  rl_leases_value (leases, serial, value);
  sent = g_get_monotonic_time ();
  bound_ms = rl_request_bound_ms (registry, deadline, bounded, sent);
  switch (request != NULL
              ? request->func (lock, value, ttl_ms, bound_ms, pttl_ms, request->data, &local_error)
              : store->vt->acquire (store, lock->key_data, value, ttl_ms, bound_ms, fence_key,
                                    &token, pttl_ms, &local_error))
    {
    case RL_LEASE_OK:
      RL_ATOMIC_ADD (registry->stats.acquisitions, 1);
      if (!rl_leases_take (leases, lock, serial, ttl_ms, sent, token))
        {
          rl_lock_release_after_close (lock, value, error);
          return RL_LEASE_ERROR;
        }
      rl_mutex_lock (&lock->m);
      count_lease_hold_locked (lock, contended);
      rl_mutex_unlock (&lock->m);
      return RL_LEASE_OK;
    case RL_LEASE_HELD:
      RL_ATOMIC_ADD (registry->stats.contended_attempts, 1);
      return RL_LEASE_HELD;
    case RL_LEASE_LOST:
    case RL_LEASE_ERROR:
    default:
      /* The request may have reached the store and taken the key after all: have it
       * released in the background, so that nobody waits for its TTL. */
      rl_leases_add_doubtful (leases, lock->key_data, value, ttl_ms);
      if (rl_request_ran_out (bound_ms, deadline, local_error))
        {
          /* The wait ran out with a sliver of it left for the request: not acquired in
           * time, not a verdict on the store. */
          g_debug ("acquiring %s: the wait ended during the request: %s", lock->key_data,
                   local_error->message);
          return RL_LEASE_ERROR;
        }
      g_propagate_error (error, g_steal_pointer (&local_error));
      return RL_LEASE_ERROR;
    }
}

/* rl_lock_attempt_step() with @request (NULL: the plain lock's acquire). */
static RlAcquireAction
attempt_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub, gboolean bounded, gint64 ttl_ms,
              const char *fence_key, const RlLeaseRequest *request, GError **error)
{
  RlAttemptReport report = rl_attempt_report_begin (lock->registry, lock, pubsub, acq);

  report.result = rl_attempt_result_of (attempt_lease (lock, acq->deadline, bounded, ttl_ms,
                                                       fence_key, request,
                                                       rl_acquire_contended (acq),
                                                       &report.pttl_ms, error));
  return rl_acquire_attempted (acq, &report, g_get_monotonic_time ());
}

RlAcquireAction
rl_lock_attempt_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub, gboolean bounded,
                      gint64 ttl_ms, const char *fence_key, GError **error)
{
  return attempt_step (lock, acq, pubsub, bounded, ttl_ms, fence_key, NULL, error);
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
  RlAcquireAction action;
  RlAcquire acq;
  guint16 seq;

  rl_lock_begin_acquire (lock, &acq, deadline);
  if (waiting != NULL)
    rl_acquire_check_at (&acq, waiting->check_at);
  action = rl_acquire_step (&acq, g_get_monotonic_time (), 0);
  for (;;)
    switch (action)
      {
      case RL_ACQUIRE_ATTEMPT:
        action = attempt_step (lock, &acq, pubsub, bounded, ttl_ms, fence_key, request, error);
        break;
      case RL_ACQUIRE_WATCH:
        action = rl_registry_watch (registry, &acq, TRUE);
        break;
      case RL_ACQUIRE_SLEEP:
        seq = rl_lock_sleep (lock, &acq, cancellable);
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
  /* A member's lease records no wait (waits.c knows the plain lock's holds only). */
  return acquire_lease (lock, deadline, bounded, ttl_ms, NULL, request, cancellable, NULL, error);
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
  gpointer self = current_thread ();
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
  if (owned_by_caller (lock, self))
    {
      lock->count++;
      return TRUE;
    }
  deadline = wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms);
  rl_mutex_lock (&lock->m);
  owned = lock->owner == NULL && !lock->reserved;
  if (owned)
    kept = take_ownership_locked (lock, self, FALSE);
  rl_mutex_unlock (&lock->m);

  if (cancellable != NULL && wait_ms != 0)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), lock, NULL);
  rl_waiting_begin (&waiting, lock);
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
  gpointer self = current_thread ();
  gboolean owned, kept = FALSE, reentered = FALSE;

  if (owned_by_caller (lock, self))
    {
      lock->count++;
      return RL_LOCAL_REENTERED;
    }
  rl_mutex_lock (&lock->m);
  owned = lock->owner == NULL && !lock->reserved;
  if (owned)
    kept = take_ownership_locked (lock, self, FALSE);
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
      if (!unlock_outermost (lock, &error))
        g_debug ("giving back lock %s: %s", lock->key_data, error->message);
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
    taken = take_ownership_locked (lock, waiter, FALSE) ? RL_QUEUE_KEPT : RL_QUEUE_OWNED;
  else if (may_queue)
    {
      waiter->link.data = waiter;
      g_queue_push_tail_link (&lock_wait (lock)->queue, &waiter->link);
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
  gboolean orphan = FALSE;

  rl_mutex_lock (&lock->m);
  if (lock->owner == waiter)
    {
      rl_mutex_unlock (&lock->m);
      return FALSE;
    }
  g_queue_unlink (&lock->wait->queue, &waiter->link);
  orphan = leave_wait_locked (lock, waiter, FALSE);
  rl_mutex_unlock (&lock->m);
  if (orphan)
    release_orphan (lock);
  return TRUE;
}

gboolean
rl_lock_sleep_queued (RedisLock *lock, RlLockWaiter *waiter, guint16 seq)
{
  gboolean sleeps;

  rl_mutex_lock (&lock->m);
  sleeps = lock->notify_seq == seq && !rl_registry_is_closed (lock->registry);
  if (sleeps && g_queue_link_index (&lock_wait (lock)->sleepers, &waiter->link) < 0)
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

  rl_mutex_lock (&lock->m);
  seq = lock->notify_seq;
  rl_mutex_unlock (&lock->m);
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
  if (ttl_ms < 0 || ttl_ms > RL_TTL_MAX_MS)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Invalid lease TTL %" G_GINT64_FORMAT " ms: it must be 1 to %" G_GINT64_FORMAT
                   " ms, or 0 for the registry's TTL",
                   ttl_ms, RL_TTL_MAX_MS);
      return FALSE;
    }
  return acquire (lock, wait_ms, ttl_ms, cancellable, error);
}

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
    rl_yield_apply (&lock_wait (lock)->yield, &plan, lock->key_data);
  lock->handoffs = 0;
  lock->streak_extended = FALSE;
  release_local_locked (lock);
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
      release_local_locked (lock);
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

/* The second half, once the store answered @result (not KEPT), @others and
 * @store_error (taken) to the release of @value sent at @start_us: ends the hold and
 * reports. */
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
      g_debug ("release of %s failed after its lease ran out: %s", lock->key_data,
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
  result = registry->store->vt->release (registry->store, lock->key_data, value,
                                         keep && !lost ? view->ttl_ms : 0, &others, &store_error);
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
      g_debug ("unlock %s: %s (%u waiting, %u hand-offs in a row)", lock->key_data,
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
  gpointer self = current_thread ();
  g_autoptr (GError) local_error = NULL;
  gboolean owner;

  if (!rl_registry_check (registry, &local_error))
    {
      if (local_error->code == REDIS_LOCK_ERROR_CLOSED)
        {
          /* The lease went with close; the local hold goes now. */
          rl_mutex_lock (&lock->m);
          if (lock->owner == self)
            release_local_locked (lock);
          rl_mutex_unlock (&lock->m);
        }
      g_propagate_error (error, g_steal_pointer (&local_error));
      return RL_UNLOCK_FAILED;
    }

  owner = owned_by_caller (lock, self);
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

const char *
redis_lock_get_name (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  return rl_lock_name (lock);
}

const char *
redis_lock_get_key (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  return lock->key_data;
}

gboolean
redis_lock_is_held_by_current_thread (RedisLock *lock)
{
  gboolean held;

  g_return_val_if_fail (lock != NULL, FALSE);
  if (rl_registry_is_forked (lock->registry))
    return FALSE;
  held = owned_by_caller (lock, current_thread ());
  return held;
}

guint
redis_lock_get_hold_count (RedisLock *lock)
{
  guint count;

  g_return_val_if_fail (lock != NULL, 0);
  if (rl_registry_is_forked (lock->registry))
    return 0;
  count = owned_by_caller (lock, current_thread ()) ? lock->count : 0;
  return count;
}

gboolean
redis_lock_is_acquired_in_this_process (RedisLock *lock)
{
  gboolean acquired;

  g_return_val_if_fail (lock != NULL, FALSE);
  if (rl_registry_is_forked (lock->registry))
    return FALSE;
  rl_mutex_lock (&lock->m);
  acquired = lock->owner != NULL;
  rl_mutex_unlock (&lock->m);
  return acquired;
}

gboolean
redis_lock_is_lease_lost (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  if (!redis_lock_is_held_by_current_thread (lock))
    return FALSE;
  return rl_leases_is_lost (lock->registry->leases, lock);
}

GCancellable *
redis_lock_get_lease_cancellable (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  if (!redis_lock_is_held_by_current_thread (lock))
    return NULL;
  return rl_leases_get_cancellable (lock->registry->leases, lock);
}

char *
redis_lock_dup_lease_value (RedisLock *lock)
{
  RlLeases *leases;
  char value[RL_LEASE_VALUE_MAX];

  g_return_val_if_fail (lock != NULL, NULL);
  if (!redis_lock_is_held_by_current_thread (lock))
    return NULL;
  leases = lock->registry->leases;
  rl_leases_value (leases, rl_leases_view (leases, lock).serial, value);
  return g_strdup (value);
}

guint64
redis_lock_get_fencing_token (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, 0);
  if (!redis_lock_is_held_by_current_thread (lock))
    return 0;
  return rl_leases_get_token (lock->registry->leases, lock);
}
