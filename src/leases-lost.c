/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leases-lost.c: how a registry reports lost leases: the lease cancellable of a
 * lost hold is cancelled, then the lease-lost callback is called with no mutex held,
 * once per lost lease, from the watchdog thread; the pins that keep a lock in hand
 * (and in the cache) while a library thread holds it for that; and the callback
 * itself, reference counted so that it can be replaced from inside itself. Cut from
 * leases.c because it is the one part of the lease table that runs application code;
 * leases.c finds the losses (renewal, release, the audits and the watchdog's tick) and
 * calls this file to report them, never the other way.
 */
#include "config.h"

#include "debug.h"
#include "internal.h"
#include "leases.h"
#include "leases-private.h"

/* Reporting losses ------------------------------------------------------------- */

void
rl_leases_callback_unref (RlLostCallback *callback)
{
  if (callback == NULL || !g_atomic_int_dec_and_test (&callback->ref_count))
    return;
  if (callback->destroy != NULL)
    callback->destroy (callback->data);
  g_free (callback);
}

/* Counts a loss and cancels the lease cancellable of its hold. */
void
rl_leases_cancel_lease (RlLeases *self, RedisLock *lock)
{
  GCancellable *cancellable;

  RL_ATOMIC_ADD (self->stats->leases_lost, 1);
  rl_mutex_lock (&self->mutex);
  cancellable = lock->lease.cancellable ? g_object_ref (lock->lease.cancellable) : NULL;
  rl_mutex_unlock (&self->mutex);
  if (cancellable != NULL)
    {
      g_cancellable_cancel (cancellable);
      g_object_unref (cancellable);
    }
  rl_debug ("Lease of lock “%s” lost: the key expired or belongs to another owner",
           lock->key_data);
}

/* Calls the lease-lost callback with no mutex held, so that it may call any function
 * of the library, rl_leases_set_callback() included. */
void
rl_leases_call_callback (RlLeases *self, RedisLock *lock)
{
  RlLostCallback *callback;

  /* A lock-family member's lease is not a RedisLock the application knows: the
   * callback gets NULL, and the log names the lease. */
  if (lock->member != RL_MEMBER_LOCK)
    g_message ("The lease of “%s” was lost: the key expired or belongs to another owner",
               lock->key_data);
  rl_mutex_lock (&self->callback_mutex);
  callback = self->callback;
  if (callback != NULL)
    g_atomic_int_inc (&callback->ref_count);
  rl_mutex_unlock (&self->callback_mutex);
  if (callback == NULL)
    return;
  if (callback->func != NULL)
    callback->func (lock->member != RL_MEMBER_LOCK ? NULL : lock, callback->data);
  rl_leases_callback_unref (callback);
}

/* A library thread takes @lock in hand: the cache must not drop it, and its memory stays
 * (a pin holds a reference: a permit's lease object, which no cache keeps, may be
 * released and dropped by its holder meanwhile). self->mutex held. */
void
rl_leases_pin (RedisLock *lock)
{
  g_assert (lock->lease_flags.pins < 15);
  lock->lease_flags.pins++;
  g_atomic_int_inc (&lock->ref_count);
}

/* Ends a pin with self->mutex held; the caller drops the pin's memory reference with
 * rl_lock_unref_memory() once the mutex is released (it may be the last). */
void
rl_leases_unpin_locked (RlLeases *self, RedisLock *lock)
{
  rl_mutex_assert_held (&self->mutex);
  g_assert (lock->lease_flags.pins > 0);
  lock->lease_flags.pins--;
}

void
rl_leases_unpin (RlLeases *self, RedisLock *lock)
{
  rl_mutex_lock (&self->mutex);
  rl_leases_unpin_locked (self, lock);
  rl_mutex_unlock (&self->mutex);
  rl_lock_unref_memory (lock);
}

/* Drops the memory references of the pins ended in @locks. No mutex held. */
void
rl_leases_unref_unpinned (GPtrArray *locks)
{
  for (guint i = 0; i < locks->len; i++)
    rl_lock_unref_memory (g_ptr_array_index (locks, i));
  g_ptr_array_set_size (locks, 0);
}

/* The watchdog found the pinned locks of @lost lost (their flag just set): cancel,
 * call back, unpin. */
void
rl_leases_report_lost (RlLeases *self, GPtrArray *lost)
{
  for (guint i = 0; i < lost->len; i++)
    {
      RedisLock *lock = g_ptr_array_index (lost, i);
      rl_leases_cancel_lease (self, lock);
      rl_leases_call_callback (self, lock);
      rl_leases_unpin (self, lock);
    }
}

/* Calls the callback for the losses queued by lost_found(). */
void
rl_leases_report_pending (RlLeases *self)
{
  GPtrArray *pending;

  rl_mutex_lock (&self->mutex);
  if (self->lost_pending->len == 0)
    {
      rl_mutex_unlock (&self->mutex);
      return;
    }
  pending = self->lost_pending;
  self->lost_pending = g_ptr_array_new ();
  rl_mutex_unlock (&self->mutex);
  for (guint i = 0; i < pending->len; i++)
    {
      rl_leases_call_callback (self, g_ptr_array_index (pending, i));
      rl_leases_unpin (self, g_ptr_array_index (pending, i));
    }
  g_ptr_array_unref (pending);
}

void
rl_leases_set_callback (RlLeases *self, RedisLockLeaseLostFunc func, gpointer user_data,
                        GDestroyNotify destroy)
{
  RlLostCallback *callback = NULL, *old;

  if (func != NULL || destroy != NULL)
    {
      callback = g_new (RlLostCallback, 1);
      callback->ref_count = 1;
      callback->func = func;
      callback->data = user_data;
      callback->destroy = destroy;
    }
  rl_mutex_lock (&self->callback_mutex);
  old = self->callback;
  self->callback = callback;
  rl_mutex_unlock (&self->callback_mutex);
  /* A call in flight keeps the old one until it returns; its destroy runs then. */
  rl_leases_callback_unref (old);
}
