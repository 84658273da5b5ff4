/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-local.c: the local mutex's rules, which the taking half (lock.c) and the
 * releasing half (unlock.c) of a lock both apply: who is granted the mutex when it
 * comes free (a queued asynchronous waiter or a thread, in turns; a reserved mutex after
 * too many barging holds), the condition variables made on first need, and a lease
 * given back when the registry closed during a call. It calls neither half, so the two
 * can call it and unlock.c can sit above lock.c with no cycle between them.
 */
#include "config.h"

#include "lock-private.h"

RlLockWait *
rl_lock_wait_state (RedisLock *lock)
{
  if (lock->wait == NULL)
    {
      lock->wait = g_new0 (RlLockWait, 1);
      rl_cond_init (&lock->wait->local);
      rl_cond_init (&lock->wait->notify);
    }
  return lock->wait;
}



/* Grants the free mutex to the first queued waiter, unless threads wait too and the
 * mutex went to the queue last time: the two kinds then take turns. lock->m held. */
static gboolean
grant_queued_locked (RedisLock *lock)
{
  RlLockWait *wait = lock->wait;
  RlLockWaiter *waiter;
  gboolean threads_wait;

  rl_mutex_assert_held (&lock->m);
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
  waiter->granted (waiter, rl_lock_take_ownership_locked (lock, waiter, TRUE));
  return TRUE;
}

/* Wakes one waiter for the local mutex, unless one was woken and has not run yet:
 * it will look at the mutex anyway, and a thread that unlocks and locks again at once
 * (as in a loop) then costs no system call and no context switch. A queued waiter is
 * granted the mutex at once instead, when it is its turn. lock->m held. */
void
rl_lock_wake_local_waiter (RedisLock *lock)
{
  if (grant_queued_locked (lock))
    return;
  if (lock->waiters > 0 && !lock->waking)
    {
      lock->waking = TRUE;
      rl_cond_signal (&rl_lock_wait_state (lock)->local);
    }
}

void
rl_lock_release_local_locked (RedisLock *lock)
{
  rl_mutex_assert_held (&lock->m);
  g_atomic_pointer_set (&lock->owner, NULL);
  lock->count = 0;
  if (lock->waiters > 0 && lock->barged < RL_LOCAL_BARGE_MAX
      && ++lock->barged == RL_LOCAL_BARGE_MAX)
    lock->reserved = TRUE;
  rl_lock_wake_local_waiter (lock);
}


/* Makes the calling thread the owner; @waited: it comes out of the wait for the local
 * mutex (and may take a reserved one). lock->m held. Returns whether the previous
 * owner left the lease for it (a local hand-off). */
gboolean
rl_lock_take_ownership_locked (RedisLock *lock, gpointer self, gboolean waited)
{
  gboolean kept;

  rl_mutex_assert_held (&lock->m);
  kept = lock->handed_over;
  if (waited)
    lock->barged = lock->reserved = 0;
  g_atomic_pointer_set (&lock->owner, self);
  lock->count = 1;
  lock->handed_over = FALSE;
  return kept;
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
