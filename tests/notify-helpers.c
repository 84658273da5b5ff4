/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify-helpers.c: the helpers of the notify test program; see notify-helpers.h. */
#include "notify-helpers.h"

/* ---- a thread that waits for a lock ---- */


static gpointer
waiter_thread (gpointer data)
{
  Waiter *w = data;
  GError *error = NULL;
  gboolean ok;

  if (w->use_lock)
    ok = redis_lock_lock (w->lock, &error);
  else
    ok = redis_lock_try_lock_for (w->lock, w->wait_ms, w->cancellable, &error);

  test_sync_lock (&w->sync);
  w->returned = TRUE;
  w->returned_at_ms = test_now_ms ();
  w->acquired = ok;
  w->error = error;
  test_sync_broadcast (&w->sync);
  if (ok)
    {
      while (w->hold && !w->release)
        test_sync_wait (&w->sync);
      test_sync_unlock (&w->sync);
      error = NULL;
      ok = redis_lock_unlock (w->lock, &error);
      test_sync_lock (&w->sync);
      w->unlocked = ok;
      w->unlock_error = error;
    }
  test_sync_unlock (&w->sync);
  return NULL;
}

/* Starts a thread that calls redis_lock_lock () (@use_lock) or redis_lock_try_lock_for
 * (@wait_ms, @cancellable) on @lock. Takes ownership of @cancellable. */
Waiter *
waiter_start_full (RedisLock *lock, gboolean use_lock, gint64 wait_ms, GCancellable *cancellable,
                   gboolean hold)
{
  Waiter *w = g_new0 (Waiter, 1);

  w->lock = redis_lock_ref (lock);
  w->use_lock = use_lock;
  w->wait_ms = wait_ms;
  w->cancellable = cancellable;
  w->hold = hold;
  test_sync_init (&w->sync);
  w->thread = g_thread_new ("waiter", waiter_thread, w);
  return w;
}

Waiter *
waiter_start (RedisLock *lock, gboolean use_lock, gint64 wait_ms, gboolean hold)
{
  return waiter_start_full (lock, use_lock, wait_ms, NULL, hold);
}

/* Waits up to @timeout_ms for the waiter's acquisition call to return; returns whether it did. */
gboolean
waiter_wait_returned (Waiter *w, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean returned;

  test_sync_lock (&w->sync);
  while (!w->returned && test_sync_wait_until (&w->sync, deadline))
    ;
  returned = w->returned;
  test_sync_unlock (&w->sync);
  return returned;
}

gboolean
waiter_has_returned (Waiter *w)
{
  gboolean returned;

  test_sync_lock (&w->sync);
  returned = w->returned;
  test_sync_unlock (&w->sync);
  return returned;
}

/* Lets a holding waiter unlock, joins it, checks its unlock succeeded, and frees it. */
void
waiter_finish (Waiter *w)
{
  test_sync_lock (&w->sync);
  w->release = TRUE;
  test_sync_broadcast (&w->sync);
  test_sync_unlock (&w->sync);
  g_thread_join (w->thread);

  if (w->acquired)
    {
      g_assert_no_error (w->unlock_error);
      g_assert_true (w->unlocked);
    }
  g_clear_error (&w->error);
  g_clear_error (&w->unlock_error);
  g_clear_object (&w->cancellable);
  redis_lock_unref (w->lock);
  test_sync_clear (&w->sync);
  g_free (w);
}

/* Asserts that the waiter's call returns within @timeout_ms, having acquired the lock
 * without an error. */
void
waiter_assert_acquired (Waiter *w, gint64 timeout_ms)
{
  g_assert_true (waiter_wait_returned (w, timeout_ms));
  g_assert_no_error (w->error);
  g_assert_true (w->acquired);
}

/* ---- registries and locks ---- */

/* A registry whose waiters could only be woken by a notification or an expiry: a SPIN
 * retry would come after a minute, the leases it takes last a minute, and its waiters
 * do not wait in line (whose places they would refresh every second). */
RedisLockRegistry *
registry_new_slow_spin (TestFixture *fx)
{
  RedisLockRegistry *r = test_registry_new (fx);

  redis_lock_registry_set_idle_between_tries_ms (r, MINUTE_MS);
  redis_lock_registry_set_expire_after_ms (r, MINUTE_MS);
  redis_lock_registry_set_wait_queue (r, FALSE);
  return r;
}

/* Starts a waiter on @lock and returns once it has found the lock held in Redis at least
 * once, i.e. it is now (or about to be) asleep waiting for the holder. */
Waiter *
waiter_start_contended_full (RedisLockRegistry *r, RedisLock *lock, gboolean use_lock,
                             gint64 wait_ms, GCancellable *cancellable, gboolean hold)
{
  guint64 before = test_stats (r).contended_attempts;
  Waiter *w = waiter_start_full (lock, use_lock, wait_ms, cancellable, hold);

  TEST_WAIT_UNTIL (test_stats (r).contended_attempts > before || waiter_has_returned (w), 10000);
  g_assert_false (waiter_has_returned (w));
  return w;
}

Waiter *
waiter_start_contended (RedisLockRegistry *r, RedisLock *lock, gboolean use_lock, gint64 wait_ms,
                        gboolean hold)
{
  return waiter_start_contended_full (r, lock, use_lock, wait_ms, NULL, hold);
}
