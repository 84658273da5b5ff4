/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async.c: redis_lock_lock_async() and redis_lock_unlock_async() from a main loop.
 *
 * Each test drives the default main context of the test's main thread, as a program
 * with a GMainLoop would, and checks what the calls promise: the hold belongs to the
 * calling thread when the callback runs; thousands of pending calls complete in order
 * with a bounded number of threads; cancellation before, during and after; close
 * with calls pending; a deadline; a release by another registry waking a pending call;
 * a local hand-off to a pending call without a Redis request; sync and async holders
 * of one lock excluding each other; the lease cancellable reaching the loop through a
 * cancellable source. Store-neutral tests run on every store (test_add_stores()).
 * Those of a call that ends without the lock (cancelled, closed, timed out, a frozen
 * server) are in async-ending.c, the helpers both use in async-helpers.c.
 */
#include "async-helpers.h"

/* The hold is the calling thread's: re-entry, the lease cancellable and a plain unlock
 * from it. */
static void
test_held_by_caller (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Pending p = { 0 }, again = { 0 };

  g_test_summary ("A lock taken with lock_async is held by the calling thread in its callback: hold count, lease cancellable, re-entry (sync and async) and plain unlock.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  lock_async (&p, lock, -1);
  g_assert_false (p.done); /* the callback runs from the main loop, never from the call */
  ITERATE_UNTIL (p.done, 10000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_true (p.thread == g_thread_self ());
  g_assert_true (p.held);
  g_assert_cmpuint (p.hold_count, ==, 1);
  test_assert_held_by (fx, "a", fx->registry, 60000);
  g_assert_nonnull (redis_lock_get_lease_cancellable (lock));
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);

  /* Re-entry, sync and async, without the store. */
  test_lock_ok (lock);
  lock_async (&again, lock, 0);
  ITERATE_UNTIL (again.done, 10000);
  g_assert_true (again.result);
  g_assert_cmpuint (again.hold_count, ==, 3);
  test_unlock_ok (lock);
  test_unlock_ok (lock);
  test_unlock_ok (lock);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  test_assert_free (fx, "a");
  pending_clear (&p);
  pending_clear (&again);
}

/* Another thread's hold: the call waits; the hold it gets is the calling thread's,
 * not the worker's nor the holder's. */
static void
test_waits_for_thread (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Holder h = { 0 };
  Pending p = { 0 };

  g_test_summary ("lock_async waits while another thread of the registry holds the lock, then the calling thread holds it.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  holder_start (&h, lock);
  lock_async (&p, lock, -1);
  /* Give it every chance to complete wrongly. */
  for (guint i = 0; i < 50; i++)
    g_main_context_iteration (NULL, FALSE);
  g_assert_false (p.done);
  holder_release (&h);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_true (p.held);
  test_unlock_ok (lock);
  test_assert_free (fx, "a");
  pending_clear (&p);
}

/* A thread with a context of its own: the callback runs there, in that thread, which
 * then holds the lock; the main context is never involved. */
typedef struct
{
  RedisLock *lock;
  Pending p;
  gboolean unlocked;
} OtherContext;

static gpointer
other_context_main (gpointer data)
{
  OtherContext *oc = data;
  GMainContext *context = g_main_context_new ();
  GError *error = NULL;
  gint64 deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;

  g_main_context_push_thread_default (context);
  lock_async (&oc->p, oc->lock, -1);
  while (!oc->p.done && g_get_monotonic_time () < deadline)
    g_main_context_iteration (context, TRUE);
  if (oc->p.done && oc->p.result)
    oc->unlocked = redis_lock_unlock (oc->lock, &error);
  g_assert_no_error (error);
  g_main_context_pop_thread_default (context);
  g_main_context_unref (context);
  return NULL;
}

static void
test_own_context (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  OtherContext oc = { 0 };
  GThread *thread;

  g_test_summary ("lock_async from a thread with its own thread-default context completes there, "
                  "and that thread holds the lock.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  test_lock_ok (lock);
  oc.lock = lock;
  thread = g_thread_new ("own-context", other_context_main, &oc);
  test_unlock_ok (lock);
  g_thread_join (thread); /* drops the reference: compared below as a pointer only */
  g_assert_true (oc.p.done);
  g_assert_no_error (oc.p.error);
  g_assert_true (oc.p.result);
  g_assert_true (oc.p.thread == thread);
  g_assert_true (oc.p.held);
  g_assert_true (oc.unlocked);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  pending_clear (&oc.p);
}

#define MANY 2000

/* Thousands of pending calls complete in the order they were made, as the holder and
 * then each of them releases, with the threads of the pool only. */
static void
test_many_in_order (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree Pending *p = g_new0 (Pending, MANY);
  struct Order order = { 0 };
  Holder h = { 0 };
  guint threads_before, threads_pending;

  g_test_summary ("2000 pending lock_async calls on one lock complete in the order made, with no more threads than the worker pool.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "many");
  holder_start (&h, lock);
  threads_before = test_thread_count ();
  order.indexes = g_new0 (guint, MANY);
  for (guint i = 0; i < MANY; i++)
    {
      p[i].index = i;
      p[i].order = &order;
      p[i].unlock = TRUE;
      lock_async (&p[i], lock, -1);
    }
  /* All pending: none has a thread of its own. */
  for (guint i = 0; i < 100; i++)
    g_main_context_iteration (NULL, FALSE);
  threads_pending = test_thread_count ();
  g_test_message ("threads: %u before, %u with %u calls pending", threads_before,
                  threads_pending, MANY);
  g_assert_cmpuint (threads_pending, <=, threads_before + POOL_THREADS);
  g_assert_cmpuint (order.n_done, ==, 0);

  holder_release (&h);
  ITERATE_UNTIL (order.n_done == MANY, 120000);
  g_test_message ("threads: at most %u while completing", order.max_threads);
  /* The pool, and a subscriber for notifications at most. */
  g_assert_cmpuint (order.max_threads, <=, threads_before + POOL_THREADS + 1);
  for (guint i = 0; i < MANY; i++)
    {
      g_assert_cmpuint (order.indexes[i], ==, i);
      g_assert_no_error (p[i].error);
      g_assert_true (p[i].result);
      g_assert_true (p[i].held);
    }
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  test_assert_free (fx, "many");
  g_free (order.indexes);
}

/* A holder thread's unlock hands the lease to a pending call as to a waiting thread:
 * no release and no acquisition in the store. */
static void
test_local_handoff (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats before, after;
  Holder h = { 0 };
  Pending p = { 0 };

  g_test_summary ("A thread's unlock hands the lease to a pending lock_async call without a release or an acquisition in the store.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  holder_start (&h, lock);
  lock_async (&p, lock, -1);
  for (guint i = 0; i < 20; i++)
    g_main_context_iteration (NULL, FALSE);
  before = test_stats (fx->registry);
  holder_release (&h);
  ITERATE_UNTIL (p.done, 10000);
  after = test_stats (fx->registry);
  g_assert_true (p.result);
  g_assert_cmpuint (after.local_handoffs, ==, before.local_handoffs + 1);
  g_assert_cmpuint (after.releases, ==, before.releases);
  g_assert_cmpuint (after.acquisitions, ==, before.acquisitions);
  test_assert_held_by (fx, "a", fx->registry, 60000);
  test_unlock_ok (lock);
  pending_clear (&p);
}

/* Another registry's release wakes the pending call, long before the lease's TTL. */
static void
test_remote_release_wakes (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  Pending p = { 0 };
  gint64 released_ms;

  g_test_summary ("Another registry's release wakes a pending lock_async call, long before the lease's TTL.");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  lock = test_obtain (fx->registry, "a");
  g_assert_true (redis_lock_try_lock_full (other_lock, 0, 60000, NULL, NULL));
  lock_async (&p, lock, -1);
  /* The call found the lease held and sleeps for the notification (the loop runs, so
   * that nothing but the release can be what completes it). */
  ITERATE_UNTIL (test_stats (fx->registry).contended_attempts >= 1, 10000);
  for (guint i = 0; i < 20; i++)
    g_main_context_iteration (NULL, FALSE);
  g_assert_false (p.done);
  released_ms = test_now_ms ();
  test_unlock_ok (other_lock);
  ITERATE_UNTIL (p.done, 20000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_true (p.held);
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the release", p.done_ms - released_ms);
  test_assert_held_by (fx, "a", fx->registry, 60000);
  test_unlock_ok (lock);
  pending_clear (&p);
}

/* A lease that expires without a release (no notification) wakes the pending call at
 * the holder's PTTL. */
static void
test_wakes_at_holder_ttl (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *key = test_lock_key ("a");
  Pending p = { 0 };
  gint64 start;

  g_test_summary ("A pending lock_async call wakes at the holder's PTTL when the lease runs out unreleased.");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  lock = test_obtain (fx->registry, "a");
  g_assert_true (redis_lock_try_lock_full (other_lock, 0, 60000, NULL, NULL));
  /* Another owner now, whose lease runs out in 400 ms and is never released. */
  test_store_set_owner (fx, key, "someone-else", 400);
  start = test_now_ms ();
  lock_async (&p, lock, -1);
  ITERATE_UNTIL (p.done, 20000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_cmpint (p.done_ms - start, >=, 300);
  test_assert_held_by (fx, "a", fx->registry, 60000);
  test_unlock_ok (lock);
  test_unlock_lease_lost (other_lock);
  pending_clear (&p);
}

/* A key without expiry deleted without a notification: the pending call rechecks at
 * the SPIN interval, so it has the lock soon after the delete. */
static void
test_no_expiry_silent_delete (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *key = test_lock_key ("a");
  Pending p = { 0 };
  gint64 deleted_ms;

  g_test_summary ("A pending lock_async call with no deadline, blocked on a key without "
                  "expiry (PTTL -1) that is deleted without a notification, has the lock "
                  "within 3 s of the delete.");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  lock = test_obtain (fx->registry, "a");
  test_lock_ok (other_lock);
  /* Another client's key now, set without PX. */
  test_store_set_owner (fx, key, "someone-else", -1);
  g_assert_cmpint (test_store_get_pttl (fx, key), ==, -1);
  lock_async (&p, lock, -1);
  /* The second failed attempt is the first with notifications confirmed: the sleep
   * after it is bounded by the PTTL it read. */
  ITERATE_UNTIL (test_stats (fx->registry).contended_attempts >= 2, 10000);
  for (guint i = 0; i < 20; i++)
    g_main_context_iteration (NULL, FALSE);
  g_assert_false (p.done);
  deleted_ms = test_now_ms ();
  g_assert_true (test_store_delete (fx, key));
  ITERATE_UNTIL (p.done, 3000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_true (p.held);
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the delete", p.done_ms - deleted_ms);
  test_assert_held_by (fx, "a", fx->registry, 60000);
  test_unlock_ok (lock);
  test_unlock_lease_lost (other_lock);
  pending_clear (&p);
}

/* Releases @h's lock once the thread @tid sleeps. */
typedef struct
{
  Holder *h;
  gint tid;
} Releaser;

static gpointer
releaser_main (gpointer data)
{
  Releaser *r = data;

  g_assert_true (test_wait_thread_blocked (r->tid, 10000));
  holder_release (r->h);
  return NULL;
}

static void
test_sync_while_own_call_pending (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  Holder h = { 0 };
  Releaser r = { &h, test_thread_id () };
  GThread *releaser;
  Pending p = { 0 };

  g_test_summary ("A thread whose own lock_async call is pending (another registry holds "
                  "the lease) and that then calls try_lock_for() itself gets the lock as a "
                  "re-entry when the release grants the call, instead of waiting for itself "
                  "until its deadline.");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "a");
  lock = test_obtain (fx->registry, "a");
  holder_start (&h, other_lock);
  lock_async (&p, lock, -1);
  ITERATE_UNTIL (test_stats (fx->registry).contended_attempts >= 1, 10000);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  /* The release comes once this thread sleeps in try_lock_for(). */
  releaser = g_thread_new ("releaser", releaser_main, &r);

  g_assert_true (redis_lock_try_lock_for (lock, 10000, NULL, &error));
  g_assert_no_error (error);
  g_thread_join (releaser);
  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 2);
  ITERATE_UNTIL (p.done, 20000);
  g_assert_no_error (p.error);
  g_assert_true (p.result);
  g_assert_true (p.held);
  g_assert_cmpuint (p.hold_count, ==, 2);
  test_unlock_ok (lock);
  test_assert_held_by (fx, "a", fx->registry, 60000);
  test_unlock_ok (lock);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  pending_clear (&p);
}

/* Queued calls and waiting threads take turns: a thread waiting behind many queued
 * calls gets the lock right after the first of them. */
#define TURN_CALLS 10

typedef struct
{
  RedisLock *lock;
  gint completed; /* atomic: calls that got the lock */
  gint tid;       /* atomic: the thread's kernel id, once it runs */
  gint seen;      /* completed, as the thread saw it while holding the lock */
} Turns;

static void
on_turn_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  Turns *t = data;

  g_assert_true (redis_lock_lock_finish (t->lock, result, NULL));
  g_atomic_int_inc (&t->completed);
  test_unlock_ok (t->lock);
}

static gpointer
turn_thread (gpointer data)
{
  Turns *t = data;

  g_atomic_int_set (&t->tid, test_thread_id ());
  test_lock_ok (t->lock);
  g_atomic_int_set (&t->seen, g_atomic_int_get (&t->completed));
  test_unlock_ok (t->lock);
  return NULL;
}

static void
test_turns_with_threads (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Turns t = { 0 };
  Holder h = { 0 };
  GThread *thread;

  g_test_summary ("A thread waiting behind queued lock_async calls gets the lock right after the "
                  "first of them: the two kinds of waiters take turns.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  t.lock = lock;
  holder_start (&h, lock);
  for (guint i = 0; i < TURN_CALLS; i++)
    redis_lock_lock_async (lock, -1, 0, NULL, on_turn_locked, &t);
  thread = g_thread_new ("turn", turn_thread, &t);
  test_wait_threads_blocked (&t.tid, 1, 10000);
  holder_release (&h);
  ITERATE_UNTIL (g_atomic_int_get (&t.completed) == TURN_CALLS, 20000);
  g_thread_join (thread);
  g_assert_cmpint (t.seen, ==, 1);
  test_assert_free (fx, "a");
}

/* Sync threads and async calls from the main loop take one lock in turns: never two
 * inside at once, and the shared counter is exact. */
#define MIXED_THREADS 3
#define MIXED_SECTIONS 60

typedef struct
{
  TestFixture *fx;
  RedisLock *lock;
  gint inside;
  gint overlaps;
  guint async_done;
  TestCounter *counter; /* the main loop's */
  Pending p;
} Mixed;

static void
mixed_section (Mixed *m, TestCounter *counter)
{
  if (g_atomic_int_add (&m->inside, 1) != 0)
    g_atomic_int_inc (&m->overlaps);
  test_counter_set (counter, test_counter_get (counter) + 1);
  g_atomic_int_add (&m->inside, -1);
}

static void
mixed_thread (guint index, gpointer data)
{
  Mixed *m = data;
  g_autoptr (TestCounter) counter = test_counter_open (m->fx, "mixed");

  for (guint i = 0; i < MIXED_SECTIONS; i++)
    {
      test_lock_ok (m->lock);
      mixed_section (m, counter);
      test_unlock_ok (m->lock);
    }
}

static void mixed_next (Mixed *m);

static void
on_mixed_unlocked (GObject *source, GAsyncResult *result, gpointer data)
{
  Mixed *m = data;
  GError *error = NULL;

  g_assert_true (redis_lock_unlock_finish (m->lock, result, &error));
  g_assert_no_error (error);
  m->async_done++;
  mixed_next (m);
}

static void
on_mixed_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  Mixed *m = data;
  GError *error = NULL;

  g_assert_true (redis_lock_lock_finish (m->lock, result, &error));
  g_assert_no_error (error);
  g_assert_true (redis_lock_is_held_by_current_thread (m->lock));
  mixed_section (m, m->counter);
  /* Both ways of giving it back. */
  if (m->async_done % 2 == 0)
    redis_lock_unlock_async (m->lock, NULL, on_mixed_unlocked, m);
  else
    {
      test_unlock_ok (m->lock);
      m->async_done++;
      mixed_next (m);
    }
}

static void
mixed_next (Mixed *m)
{
  if (m->async_done < MIXED_SECTIONS)
    redis_lock_lock_async (m->lock, -1, 0, NULL, on_mixed_locked, m);
}

static void
test_mixed_sync_async (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Mixed m = { 0 };
  GThread *threads;

  g_test_summary ("Sync threads and lock_async calls of one registry exclude each other; the shared counter is exact.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "mixed");
  m.fx = fx;
  m.lock = lock;
  m.counter = test_counter_open (fx, "mixed");
  threads = test_run_threads_in_background (MIXED_THREADS, mixed_thread, &m);
  mixed_next (&m);
  ITERATE_UNTIL (m.async_done == MIXED_SECTIONS, 120000);
  g_thread_join (threads);
  g_assert_cmpint (m.overlaps, ==, 0);
  g_assert_cmpint (test_counter_get (m.counter), ==, (MIXED_THREADS + 1) * MIXED_SECTIONS);
  test_assert_free (fx, "mixed");
  test_counter_free (m.counter);
}

/* A TTL that try_lock_full refuses is refused here too, through the callback. */
static void
test_invalid_ttl (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  Pending p = { 0 };

  g_test_summary ("lock_async with a negative TTL or one over 100 years completes with INVALID.");
  TEST_SKIP_IF_NO_STORE (fx);
  lock = test_obtain (fx->registry, "a");
  p.lock = lock;
  redis_lock_lock_async (lock, -1, -1, NULL, on_locked, &p);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_error (p.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_false (p.held);
  pending_clear (&p);
  memset (&p, 0, sizeof p);
  p.lock = lock;
  redis_lock_lock_async (lock, -1, G_MAXINT64, NULL, on_locked, &p);
  ITERATE_UNTIL (p.done, 10000);
  g_assert_error (p.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  test_assert_free (fx, "a");
  pending_clear (&p);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  test_add_stores ("/async/held-by-caller", NULL, test_held_by_caller);
  test_add_stores ("/async/waits-for-thread", NULL, test_waits_for_thread);
  test_add_stores ("/async/own-context", NULL, test_own_context);
  test_add_stores ("/async/many-in-order", NULL, test_many_in_order);
  test_add_stores ("/async/local-handoff", NULL, test_local_handoff);
  test_add_stores ("/async/remote-release-wakes", NULL, test_remote_release_wakes);
  test_add_stores ("/async/wakes-at-holder-ttl", NULL, test_wakes_at_holder_ttl);
  test_add_stores ("/async/no-expiry/silent-delete", NULL, test_no_expiry_silent_delete);
  test_add_stores ("/async/turns-with-threads", NULL, test_turns_with_threads);
  test_add_stores ("/async/mixed-sync-async", NULL, test_mixed_sync_async);
  test_add_stores ("/async/sync-while-own-call-pending", NULL,
                   test_sync_while_own_call_pending);
  test_add_redis ("/async/invalid-ttl", NULL, test_invalid_ttl);
  async_add_ending_tests ();
  return g_test_run ();
}
