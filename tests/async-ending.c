/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-ending.c: how a redis_lock_lock_async() call ends other than by taking the lock:
 * cancelled before, during and after; the registry closed with calls pending; the
 * deadline; redis_lock_unlock_async(); the lease cancellable reaching the loop through
 * a cancellable source; a frozen server, which must never delay a call on another
 * registry, and a call that never reached Redis completing with an error. Part of the
 * async test program (async.c adds these tests).
 */
#include "async-helpers.h"

/* Cancelled before the call: nothing is taken. */
static void
test_cancel_before (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Pending p = { 0 };

  g_test_summary ("lock_async with a cancelled cancellable completes with CANCELLED and takes nothing.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  p.cancellable = g_cancellable_new ();
  g_cancellable_cancel (p.cancellable);
  lock_async (&p, lock, -1);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_error (p.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_false (p.result);
  g_assert_false (p.held);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  test_assert_free (fx, "a");
  pending_clear (&p);
}

/* Cancelled while queued behind a thread of the registry, and while waiting for a
 * lease another registry holds: CANCELLED, in the caller's context, and the lock's
 * queue goes on without it. */
static void
test_cancel_during (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  Pending first = { 0 }, queued = { 0 }, next = { 0 }, remote = { 0 };
  Holder h = { 0 };

  g_test_summary ("Cancelling a queued or lease-waiting lock_async completes it with CANCELLED in its context; the queue goes on.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");

  /* Queued locally: the one in the middle is cancelled. */
  holder_start (&h, lock);
  first.unlock = TRUE;
  lock_async (&first, lock, -1);
  queued.cancellable = g_cancellable_new ();
  lock_async (&queued, lock, -1);
  next.unlock = TRUE;
  lock_async (&next, lock, -1);
  g_cancellable_cancel (queued.cancellable);
  ITERATE_UNTIL (queued.done, 10000);
  g_assert_error (queued.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_true (queued.thread == g_thread_self ());
  g_assert_false (queued.held);
  g_assert_false (first.done);
  holder_release (&h);
  ITERATE_UNTIL (first.done && next.done, 10000);
  g_assert_true (first.result);
  g_assert_true (next.result);
  g_assert_cmpint (next.done_ms, >=, first.done_ms);
  test_assert_free (fx, "a");

  /* Waiting for the lease held by another registry. */
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  g_assert_true (redis_lock_try_lock_full (other_lock, 0, 60000, NULL, NULL));
  remote.cancellable = g_cancellable_new ();
  lock_async (&remote, lock, -1);
  ITERATE_UNTIL (test_stats (fx->registry).contended_attempts >= 1, 10000);
  g_cancellable_cancel (remote.cancellable);
  ITERATE_UNTIL (remote.done, 10000);
  g_assert_error (remote.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  test_unlock_ok (other_lock);
  /* And the lock is usable. */
  g_assert_true (redis_lock_try_lock (lock, NULL));
  test_unlock_ok (lock);
  pending_clear (&first);
  pending_clear (&queued);
  pending_clear (&next);
  pending_clear (&remote);
}

/* Cancelled after it completed: the result stands, and the lock is held. */
static void
test_cancel_after (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Pending p = { 0 };

  g_test_summary ("Cancelling after lock_async completed leaves its TRUE result and the hold.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  p.cancellable = g_cancellable_new ();
  p.cancel_first = TRUE; /* cancelled in the callback, before the finish */
  lock_async (&p, lock, -1);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_true (p.held);
  g_assert_true (g_cancellable_is_cancelled (p.cancellable));
  test_assert_held_by (fx, "a", fx->registry, 60000);
  test_unlock_ok (lock);
  test_assert_free (fx, "a");
  pending_clear (&p);
}

/* Close with calls pending, one waiting for the lease another registry holds and the
 * others queued behind it: each completes with CLOSED. */
#define CLOSE_PENDING 5

static void
test_close_pending (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  Pending p[CLOSE_PENDING] = { { 0 } };

  g_test_summary ("Closing the registry completes every pending lock_async call with CLOSED in its context.");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  lock = test_obtain (fx->registry, "a");
  g_assert_true (redis_lock_try_lock_full (other_lock, 0, 60000, NULL, NULL));
  for (guint i = 0; i < CLOSE_PENDING; i++)
    lock_async (&p[i], lock, -1);
  ITERATE_UNTIL (test_stats (fx->registry).contended_attempts >= 1, 10000);
  redis_lock_registry_close (fx->registry);
  for (guint i = 0; i < CLOSE_PENDING; i++)
    {
      ITERATE_UNTIL (p[i].done, 10000);
      g_assert_error (p[i].error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
      g_assert_false (p[i].result);
      g_assert_true (p[i].thread == g_thread_self ());
      pending_clear (&p[i]);
    }
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  test_unlock_ok (other_lock);
}

/* wait_ms is total: FALSE without an error once it has passed, whether the lease is
 * held elsewhere or the lock by a thread of this registry; 0 never waits. */
static void
test_deadline (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  Pending remote = { 0 }, local = { 0 }, now = { 0 };
  Holder h = { 0 };
  gint64 start;

  g_test_summary ("wait_ms bounds lock_async in total (remote or local holder); 0 never waits.");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  lock = test_obtain (fx->registry, "a");
  g_assert_true (redis_lock_try_lock_full (other_lock, 0, 60000, NULL, NULL));
  start = test_now_ms ();
  lock_async (&remote, lock, 300);
  ITERATE_UNTIL (remote.done, 20000);
  g_assert_no_error (remote.error);
  g_assert_false (remote.result);
  g_assert_cmpint (remote.done_ms - start, >=, 300);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  test_unlock_ok (other_lock);

  holder_start (&h, lock);
  lock_async (&now, lock, 0);
  ITERATE_UNTIL (now.done, 10000);
  g_assert_no_error (now.error);
  g_assert_false (now.result);
  start = test_now_ms ();
  lock_async (&local, lock, 300);
  ITERATE_UNTIL (local.done, 20000);
  g_assert_no_error (local.error);
  g_assert_false (local.result);
  g_assert_cmpint (local.done_ms - start, >=, 300);
  holder_release (&h);
  test_assert_free (fx, "a");
  pending_clear (&remote);
  pending_clear (&local);
  pending_clear (&now);
}

/* unlock_async: inner and outermost, by a non-holder, and cancelled before. */
static void
test_unlock_async (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GCancellable) cancelled = g_cancellable_new ();
  Pending p = { 0 }, u = { 0 };

  g_test_summary ("unlock_async: not owner, cancelled before, inner and outermost unlock.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  u.lock = lock;
  redis_lock_unlock_async (lock, NULL, on_unlocked, &u);
  ITERATE_UNTIL (u.done, 10000);
  g_assert_error (u.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  pending_clear (&u);

  lock_async (&p, lock, -1);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_true (p.result);
  test_lock_ok (lock);

  memset (&u, 0, sizeof u);
  u.lock = lock;
  g_cancellable_cancel (cancelled);
  redis_lock_unlock_async (lock, cancelled, on_unlocked, &u);
  ITERATE_UNTIL (u.done, 10000);
  g_assert_error (u.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 2);
  pending_clear (&u);

  memset (&u, 0, sizeof u);
  u.lock = lock;
  redis_lock_unlock_async (lock, NULL, on_unlocked, &u);
  ITERATE_UNTIL (u.done, 10000);
  g_assert_no_error (u.error);
  g_assert_true (u.result);
  g_assert_true (u.held);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);

  memset (&u, 0, sizeof u);
  u.lock = lock;
  redis_lock_unlock_async (lock, NULL, on_unlocked, &u);
  /* The thread holds it no more as soon as the call returns. */
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  ITERATE_UNTIL (u.done, 10000);
  g_assert_no_error (u.error);
  g_assert_true (u.result);
  g_assert_true (u.thread == g_thread_self ());
  test_assert_free (fx, "a");
  pending_clear (&p);
}

/* The lease cancellable of a hold taken with lock_async reaches the loop through
 * g_cancellable_source_new() when the lease is lost. */
static gboolean
on_lease_lost (GCancellable *cancellable, gpointer data)
{
  gboolean *lost = data;
  *lost = TRUE;
  return G_SOURCE_REMOVE;
}

static void
test_lease_lost_source (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *key = NULL;
  GSource *source;
  Pending p = { 0 };
  gboolean lost = FALSE;

  g_test_summary ("The lease cancellable of an async hold reaches the loop through g_cancellable_source_new() on loss.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  key = test_lock_key ("a");
  p.lock = lock;
  redis_lock_lock_async (lock, -1, 600, NULL, on_locked, &p);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_true (p.result);
  source = g_cancellable_source_new (redis_lock_get_lease_cancellable (lock));
  g_source_set_callback (source, G_SOURCE_FUNC (on_lease_lost), &lost, NULL);
  g_source_attach (source, NULL);
  g_assert_true (test_store_delete (fx, key));
  ITERATE_UNTIL (lost, 10000);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_source_destroy (source);
  g_source_unref (source);
  test_unlock_lease_lost (lock);
  pending_clear (&p);
}

/* Calls on the fixture's server, frozen with SIGSTOP: @n calls, on @n names, each
 * waiting up to @wait_ms, on @registry (whose command timeout bounds them). */
static Pending *
frozen_calls (RedisLockRegistry *registry, guint n, gint64 wait_ms, RedisLock ***locks)
{
  Pending *p = g_new0 (Pending, n);

  *locks = g_new0 (RedisLock *, n);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *name = g_strdup_printf ("frozen-%u", i);
      (*locks)[i] = test_obtain (registry, name);
      p[i].unlock = TRUE;
      lock_async (&p[i], (*locks)[i], wait_ms);
    }
  return p;
}

static void
frozen_calls_free (Pending *p, RedisLock **locks, guint n)
{
  ITERATE_UNTIL (({
                   gboolean all = TRUE;
                   for (guint i = 0; i < n; i++)
                     all = all && p[i].done;
                   all;
                 }),
                 30000);
  for (guint i = 0; i < n; i++)
    {
      pending_clear (&p[i]);
      redis_lock_unref (locks[i]);
    }
  g_free (p);
  g_free (locks);
}

static void
test_frozen_server_isolated (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockTestServer) other = NULL;
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisLock) free_lock = NULL;
  g_autoptr (GError) error = NULL;
  RedisLock **locks;
  Pending *stuck, p = { 0 };
  const guint n = 2 * POOL_THREADS + 1;
  gint64 t0;

  g_test_summary ("With one registry's server frozen and more calls queued on it than a pool "
                  "has workers, lock_async (wait 2000 ms) on a free lock of a registry on "
                  "another server completes TRUE within its wait: a frozen server ties up the "
                  "workers of its own registry only");
  TEST_SKIP_IF_NO_SERVER (fx);

  other = redis_lock_test_server_new (NULL, &error);
  g_assert_no_error (error);
  rb = test_registry_new_on (redis_lock_test_server_get_url (other));
  free_lock = test_obtain (rb, "free");
  redis_lock_registry_set_command_timeout_ms (fx->registry, 5000);

  redis_lock_test_server_pause (fx->server);
  stuck = frozen_calls (fx->registry, n, 8000, &locks);
  t0 = test_now_ms ();
  lock_async (&p, free_lock, 2000);
  ITERATE_UNTIL (p.done, 10000);
  g_test_message ("the call on the other server completed after %" G_GINT64_FORMAT " ms",
                  p.done_ms - t0);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_cmpint (p.done_ms - t0, <, 2000);
  test_unlock_ok (free_lock);

  redis_lock_test_server_resume (fx->server);
  frozen_calls_free (stuck, locks, n);
  pending_clear (&p);
}

static void
test_never_reached_redis (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) late = NULL;
  g_autoptr (GError) error = NULL;
  RedisLock **locks;
  Pending *stuck, p = { 0 };
  const guint n = POOL_THREADS;

  g_test_summary ("A call whose request could not even be sent within its wait (every worker "
                  "of its registry blocked on a frozen server) completes with CONNECTION, "
                  "not with \"not acquired\": it never learned that the lock was held");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_command_timeout_ms (fx->registry, 1500);
  late = test_obtain (fx->registry, "late");
  redis_lock_test_server_pause (fx->server);
  stuck = frozen_calls (fx->registry, n, 8000, &locks);
  lock_async (&p, late, 300);
  ITERATE_UNTIL (p.done, 20000);
  redis_lock_test_server_resume (fx->server);
  g_assert_false (p.result);
  g_assert_error (p.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_test_message ("%s", p.error->message);
  frozen_calls_free (stuck, locks, n);
  pending_clear (&p);
}

void
async_add_ending_tests (void)
{
  test_add_stores ("/async/cancel/before", NULL, test_cancel_before);
  test_add_stores ("/async/cancel/during", NULL, test_cancel_during);
  test_add_stores ("/async/cancel/after", NULL, test_cancel_after);
  test_add_stores ("/async/close-pending", NULL, test_close_pending);
  test_add_stores ("/async/deadline", NULL, test_deadline);
  test_add_stores ("/async/unlock-async", NULL, test_unlock_async);
  test_add_redis ("/async/lease-lost-source", NULL, test_lease_lost_source);
  test_add_redis ("/async/frozen-server/other-registry-unaffected", NULL,
                  test_frozen_server_isolated);
  test_add_redis ("/async/frozen-server/never-reached-redis", NULL, test_never_reached_redis);
}
