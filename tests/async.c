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
 */
#include "common.h"

/* The worker threads of the library's pool for asynchronous calls, at most. */
#define POOL_THREADS 4

/* Iterates the default main context until @expr holds, failing after @timeout_ms. A
 * tick source makes each iteration return, so the condition is seen promptly. */
#define ITERATE_UNTIL(expr, timeout_ms)                                                            \
  G_STMT_START                                                                                     \
  {                                                                                                \
    gint64 iterate_deadline_ = g_get_monotonic_time () + (gint64)(timeout_ms)*1000;                \
    guint iterate_tick_ = g_timeout_add (5, tick, NULL);                                           \
    while (!(expr))                                                                                \
      {                                                                                            \
        if (g_get_monotonic_time () >= iterate_deadline_)                                          \
          g_error ("%s:%d: still not true after %d ms: %s", __FILE__, __LINE__, (int)(timeout_ms), \
                   #expr);                                                                         \
        g_main_context_iteration (NULL, TRUE);                                                     \
      }                                                                                            \
    g_source_remove (iterate_tick_);                                                               \
  }                                                                                                \
  G_STMT_END

static gboolean
tick (gpointer data)
{
  return G_SOURCE_CONTINUE;
}

/* What one call's callback saw. */
typedef struct
{
  RedisLock *lock;
  guint index;
  gboolean done;
  gboolean result;
  GError *error;
  GThread *thread;   /* the thread the callback ran in */
  gboolean held;     /* redis_lock_is_held_by_current_thread() in the callback */
  guint hold_count;  /* redis_lock_get_hold_count() in the callback */
  gboolean cancel_first; /* cancel this before finishing */
  GCancellable *cancellable;
  gboolean unlock;   /* unlock (redis_lock_unlock) in the callback when held */
  gint64 done_ms;
  struct Order *order; /* records the order of completions, when set */
} Pending;

struct Order
{
  guint *indexes;
  guint n_done;
  guint max_threads; /* the most threads the process had in a callback */
};

static void
on_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  Pending *p = data;

  g_assert_null (source);
  if (p->cancel_first)
    g_cancellable_cancel (p->cancellable);
  p->result = redis_lock_lock_finish (p->lock, result, &p->error);
  p->thread = g_thread_self ();
  p->held = redis_lock_is_held_by_current_thread (p->lock);
  p->hold_count = redis_lock_get_hold_count (p->lock);
  p->done_ms = test_now_ms ();
  if (p->order != NULL)
    {
      p->order->indexes[p->order->n_done++] = p->index;
      if (p->order->n_done % 100 == 1)
        p->order->max_threads = MAX (p->order->max_threads, test_thread_count ());
    }
  if (p->unlock && p->result)
    test_unlock_ok (p->lock);
  p->done = TRUE;
}

static void
on_unlocked (GObject *source, GAsyncResult *result, gpointer data)
{
  Pending *p = data;

  p->result = redis_lock_unlock_finish (p->lock, result, &p->error);
  p->thread = g_thread_self ();
  p->held = redis_lock_is_held_by_current_thread (p->lock);
  p->done = TRUE;
}

static void
pending_clear (Pending *p)
{
  g_clear_error (&p->error);
  g_clear_object (&p->cancellable);
}

static void
lock_async (Pending *p, RedisLock *lock, gint64 wait_ms)
{
  p->lock = lock;
  redis_lock_lock_async (lock, wait_ms, 0, p->cancellable, on_locked, p);
}

/* A thread of the test that holds a lock until told to release it. */
typedef struct
{
  RedisLock *lock;
  TestSync sync;
  gboolean held;
  gboolean release;
  GThread *thread;
} Holder;

static gpointer
holder_main (gpointer data)
{
  Holder *h = data;

  test_lock_ok (h->lock);
  test_sync_lock (&h->sync);
  h->held = TRUE;
  test_sync_broadcast (&h->sync);
  while (!h->release)
    test_sync_wait (&h->sync);
  test_sync_unlock (&h->sync);
  test_unlock_ok (h->lock);
  return NULL;
}

static void
holder_start (Holder *h, RedisLock *lock)
{
  h->lock = lock;
  test_sync_init (&h->sync);
  h->thread = g_thread_new ("holder", holder_main, h);
  g_assert_true (test_sync_wait_flag (&h->sync, &h->held, 10000));
}

static void
holder_release (Holder *h)
{
  test_sync_lock (&h->sync);
  h->release = TRUE;
  test_sync_broadcast (&h->sync);
  test_sync_unlock (&h->sync);
  g_thread_join (h->thread);
  test_sync_clear (&h->sync);
}

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
  return g_test_run ();
}
