/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* wait.c: waiting for a lock someone else holds.
 *
 * A waiter may be another registry (another process, waiting in Redis) or another
 * thread of the same registry (waiting on the local mutex). Either way `try_lock_for`
 * must give up at its deadline, not before and not much after (local and Redis waits
 * together); a blocked `lock` must proceed soon after the holder unlocks (the unlock
 * notification in PUBSUB mode, the next retry in SPIN mode); a cancellable or a close
 * must end the wait promptly; and waiting must never touch the holder's TTL. Threads
 * are coordinated with the registry's statistics, atomics and a kernel view of the
 * waiting thread, never with sleeps; only the total-deadline test sleeps, because how
 * long the local part of a wait lasts is its subject. Every test runs on both stores
 * from this one source, a private redis-server (`/redis/...`) and a `memory://` store
 * of its own (`/memory/...`), where wake-ups come from the store instead of a
 * subscription; the tests about how a registry waits in Redis also run once per wait
 * mode. A key without expiry (another client's SET without PX) deleted without an
 * unlock notification must not leave lock() or try_lock_for(-1) asleep for good: with
 * default settings the waiter rechecks at the SPIN interval, on every store. The last
 * ones are Redis's alone: a key deleted or expired without an unlock notification,
 * which the server reports through key tracking.
 */
#include "config.h"

#include "common.h"

/* The tests that depend on how a registry waits in Redis run once per mode. */
static const RedisLockWaitMode pubsub_mode = REDIS_LOCK_WAIT_PUBSUB;
static const RedisLockWaitMode spin_mode = REDIS_LOCK_WAIT_SPIN;

/* How a taker waits: lock(), or try_lock_for with no deadline. */
static const gint64 wait_lock = G_MININT64;
static const gint64 wait_forever = -1;

static RedisLockRegistry *
waiter_registry_new (TestFixture *f, gconstpointer mode)
{
  RedisLockRegistry *waiter = test_registry_new (f);

  redis_lock_registry_set_wait_mode (waiter, *(const RedisLockWaitMode *)mode);
  redis_lock_registry_set_idle_between_tries_ms (waiter, 50);
  return waiter;
}

static void
assert_timed_out_in_window (gint64 start_ms, gint64 end_ms, gint64 wait_ms)
{
  gint64 elapsed = end_ms - start_ms;

  g_test_message ("try_lock_for(%" G_GINT64_FORMAT ") returned after %" G_GINT64_FORMAT " ms",
                  wait_ms, elapsed);
  g_assert_cmpint (elapsed, >=, wait_ms);
  g_assert_cmpint (elapsed, <, 2 * wait_ms);
}

static void
test_try_lock_for_other_registry (TestFixture *f, gconstpointer mode)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  g_autoptr (GError) error = NULL;
  gint64 start;
  gint64 end;

  g_test_summary ("try_lock_for(300) on a lock another registry holds returns FALSE without "
                  "error, no sooner than 300 ms and well before 600 ms.");
  TEST_SKIP_IF_NO_STORE (f);

  held = test_obtain (f->registry, "timed");
  g_assert_true (redis_lock_lock (held, NULL));
  waiter = waiter_registry_new (f, mode);
  wanted = test_obtain (waiter, "timed");

  start = g_get_monotonic_time ();
  g_assert_false (redis_lock_try_lock_for (wanted, 300, NULL, &error));
  end = g_get_monotonic_time ();
  g_assert_no_error (error);
  /* In microseconds: "no sooner than 300 ms" is exact. */
  assert_timed_out_in_window (start / 1000, end / 1000, 300);
  g_assert_cmpint (end - start, >=, 300 * 1000);
  g_assert_false (redis_lock_is_held_by_current_thread (wanted));
  g_assert_true (redis_lock_is_held_by_current_thread (held));
  g_assert_true (redis_lock_unlock (held, NULL));
}

static void
test_try_lock_for_other_thread (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  TestTaker t = { 0 };
  gint64 start;

  g_test_summary ("try_lock_for(300) on a lock another thread of the same registry holds "
                  "returns FALSE without error, no sooner than 300 ms and well before 600 ms.");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "timed-local");
  g_assert_true (redis_lock_lock (lock, NULL));

  start = test_now_ms ();
  test_taker_join (&t, test_taker_start (&t, lock, 300), 5000);
  g_assert_false (t.result);
  g_assert_no_error (t.error);
  assert_timed_out_in_window (start, t.returned_ms, 300);
  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  g_assert_true (redis_lock_unlock (lock, NULL));
  test_taker_clear (&t);
}

static void
test_total_deadline (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) theirs = NULL;
  g_autoptr (GError) error = NULL;
  GThread *thread;
  TestTaker t = { 0 };

  g_test_summary ("try_lock_for(600) that waits 400 ms on another thread, then finds the key "
                  "held by another registry, gives up 600 ms after the call, not 400 + 600.");
  TEST_SKIP_IF_NO_STORE (f);

  /* The main thread holds the lock locally while another registry holds the key: its
   * own lease (100 ms, no watchdog) ran out and the other registry took the key. */
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, 100);
  lock = test_obtain (f->registry, "total");
  g_assert_true (redis_lock_lock (lock, NULL));
  g_usleep (300 * 1000);
  other = test_registry_new (f);
  theirs = test_obtain (other, "total");
  g_assert_true (redis_lock_try_lock (theirs, &error));
  g_assert_no_error (error);

  thread = test_taker_start (&t, lock, 600);
  g_assert_true (test_wait_until (test_taker_started, &t, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  /* How long the local part lasts is the subject: hand over after 400 ms. */
  g_usleep (400 * 1000);
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);

  test_taker_join (&t, thread, 5000);
  g_assert_false (t.result);
  g_assert_no_error (t.error);
  g_test_message ("try_lock_for(600) returned after %" G_GINT64_FORMAT " ms",
                  t.returned_ms - t.called_ms);
  g_assert_cmpint (t.returned_ms - t.called_ms, >=, 600);
  g_assert_cmpint (t.returned_ms - t.called_ms, <, 850);
  g_assert_true (redis_lock_unlock (theirs, NULL));
  test_taker_clear (&t);
}

static void
test_lock_proceeds_after_unlock (TestFixture *f, gconstpointer mode)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  g_autofree char *value = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockRegistryStats stats;
  GThread *thread;
  TestTaker t = { 0 };
  gint64 unlocked_at;

  g_test_summary ("A lock() blocked in another registry proceeds within a second after the "
                  "holder unlocks (the holder's TTL is a minute, so only a wake-up explains it).");
  TEST_SKIP_IF_NO_STORE (f);

  held = test_obtain (f->registry, "handover");
  g_assert_true (redis_lock_lock (held, NULL));
  waiter = waiter_registry_new (f, mode);
  wanted = test_obtain (waiter, "handover");

  /* Let the waiter's registry wait once first, so that its notification subscription
   * is up and the lock() below goes straight to sleep instead of still setting it up
   * (and retrying) when the holder unlocks. */
  g_assert_false (redis_lock_try_lock_for (wanted, 300, NULL, &error));
  g_assert_no_error (error);
  redis_lock_registry_get_stats (waiter, &stats);

  t.fixture = f;
  thread = test_taker_start (&t, wanted, G_MININT64);

  /* The waiter has found the key held in Redis and is asleep. */
  g_assert_true (test_wait_contended (waiter, stats.contended_attempts + 1, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  g_assert_cmpint (g_atomic_int_get (&t.done), ==, 0);
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":handover");
  test_assert_value_of (value, f->registry);

  unlocked_at = test_now_ms ();
  g_assert_true (redis_lock_unlock (held, NULL));
  test_taker_join (&t, thread, 5000);

  g_assert_no_error (t.error);
  g_assert_true (t.result);
  g_test_message ("the waiter proceeded %" G_GINT64_FORMAT " ms after the unlock",
                  t.returned_ms - unlocked_at);
  g_assert_cmpint (t.returned_ms - unlocked_at, <, 1000);
  test_assert_value_of (t.value_while_held, waiter);
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":handover"));
  test_taker_clear (&t);
}

static void
test_waiter_keeps_ttl (TestFixture *f, gconstpointer mode)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  RedisLockRegistryStats stats;
  GThread *thread;
  TestTaker t = { 0 };
  gint64 previous;
  gint64 locked_at;
  guint samples = 0;

  g_test_summary ("A waiter in another registry retrying for a while never extends the holder's "
                  "TTL: sampled PTTL only decreases.");
  TEST_SKIP_IF_NO_STORE (f);

  /* Holder: 10 s TTL, no renewal, so the key's TTL can only go down on its own. */
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, 10000);
  held = test_obtain (f->registry, "ttl");
  g_assert_true (redis_lock_lock (held, NULL));
  locked_at = test_now_ms ();
  previous = test_store_get_pttl (f, TEST_REGISTRY_KEY ":ttl");
  g_assert_cmpint (previous, >, 0);
  g_assert_cmpint (previous, <=, 10000);

  waiter = waiter_registry_new (f, mode);
  redis_lock_registry_set_idle_between_tries_ms (waiter, 10);
  wanted = test_obtain (waiter, "ttl");
  thread = test_taker_start (&t, wanted, 600);

  /* Sample the TTL while the waiter tries (polling is the point here). */
  while (!g_atomic_int_get (&t.done))
    {
      gint64 pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":ttl");

      g_assert_cmpint (pttl, >, 0);
      g_assert_cmpint (pttl, <=, previous);
      previous = pttl;
      samples++;
      g_usleep (5000);
    }
  g_thread_join (thread);
  g_assert_false (t.result);
  g_assert_no_error (t.error);

  redis_lock_registry_get_stats (waiter, &stats);
  g_test_message ("%u samples, %" G_GUINT64_FORMAT " contended attempts", samples,
                  stats.contended_attempts);
  g_assert_cmpuint (stats.contended_attempts, >=, 1);
  if (*(const RedisLockWaitMode *)mode == REDIS_LOCK_WAIT_SPIN)
    g_assert_cmpuint (stats.contended_attempts, >=, 5);
  g_assert_cmpuint (samples, >=, 2);
  /* At least the waiter's 600 ms have run off the TTL. */
  previous = test_store_get_pttl (f, TEST_REGISTRY_KEY ":ttl");
  g_assert_cmpint (previous, <=, 10000 - (test_now_ms () - locked_at) + 5);
  g_assert_cmpint (previous, <=, 10000 - 590);
  g_assert_true (redis_lock_unlock (held, NULL));
  test_taker_clear (&t);
}

static void
check_cancelled_promptly (TestTaker *t, GThread *thread)
{
  gint64 cancelled_at = test_now_ms ();

  g_cancellable_cancel (t->cancellable);
  test_taker_join (t, thread, 5000);
  g_test_message ("the wait ended %" G_GINT64_FORMAT " ms after the cancel",
                  t->returned_ms - cancelled_at);
  g_assert_false (t->result);
  g_assert_error (t->error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (t->returned_ms - cancelled_at, <, 1000);
}

static void
test_cancel_other_registry (TestFixture *f, gconstpointer mode)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  g_autofree char *value = NULL;
  GThread *thread;
  TestTaker t = { 0 };

  g_test_summary ("try_lock_for(-1) waiting on another registry's lock returns CANCELLED within "
                  "a second of g_cancellable_cancel() from another thread.");
  TEST_SKIP_IF_NO_STORE (f);

  held = test_obtain (f->registry, "cancel");
  g_assert_true (redis_lock_lock (held, NULL));
  waiter = waiter_registry_new (f, mode);
  /* Long SPIN sleeps: only a reaction to the cancellable can be prompt. */
  redis_lock_registry_set_idle_between_tries_ms (waiter, 5000);
  wanted = test_obtain (waiter, "cancel");

  t.cancellable = cancellable;
  thread = test_taker_start (&t, wanted, -1);
  g_assert_true (test_wait_contended (waiter, 1, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  g_assert_cmpint (g_atomic_int_get (&t.done), ==, 0);

  check_cancelled_promptly (&t, thread);
  g_assert_false (redis_lock_is_held_by_current_thread (wanted));
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":cancel");
  test_assert_value_of (value, f->registry);
  g_assert_true (redis_lock_unlock (held, NULL));
  test_taker_clear (&t);
}

static void
test_cancel_other_thread (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  GThread *thread;
  TestTaker t = { 0 };

  g_test_summary ("try_lock_for(-1) waiting on a lock another thread of the same registry holds "
                  "returns CANCELLED within a second of g_cancellable_cancel().");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "cancel-local");
  g_assert_true (redis_lock_lock (lock, NULL));

  t.cancellable = cancellable;
  thread = test_taker_start (&t, lock, -1);
  g_assert_true (test_wait_until (test_taker_started, &t, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  g_assert_cmpint (g_atomic_int_get (&t.done), ==, 0);

  check_cancelled_promptly (&t, thread);
  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);
  g_assert_true (redis_lock_unlock (lock, NULL));
  test_taker_clear (&t);
}

static void
test_close_wakes_remote_waiter (TestFixture *f, gconstpointer mode)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  GThread *thread;
  TestTaker t = { 0 };
  gint64 closed_at;

  g_test_summary ("Closing a registry wakes its thread blocked in lock() on another registry's "
                  "lock with CLOSED.");
  TEST_SKIP_IF_NO_STORE (f);

  held = test_obtain (f->registry, "close-remote");
  g_assert_true (redis_lock_lock (held, NULL));
  waiter = waiter_registry_new (f, mode);
  redis_lock_registry_set_idle_between_tries_ms (waiter, 5000);
  wanted = test_obtain (waiter, "close-remote");

  thread = test_taker_start (&t, wanted, G_MININT64);
  g_assert_true (test_wait_contended (waiter, 1, 10000));

  closed_at = test_now_ms ();
  redis_lock_registry_close (waiter);
  test_taker_join (&t, thread, 5000);
  g_assert_false (t.result);
  g_assert_error (t.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_cmpint (t.returned_ms - closed_at, <, 1000);
  /* The holder is unaffected. */
  g_assert_true (redis_lock_unlock (held, NULL));
  test_taker_clear (&t);
}

static void
test_close_wakes_local_waiter (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  GThread *thread;
  TestTaker t = { 0 };
  gint64 closed_at;

  g_test_summary ("Closing a registry wakes a thread waiting on the local mutex of a lock "
                  "another thread holds, with CLOSED.");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "close-local");
  g_assert_true (redis_lock_lock (lock, NULL));

  thread = test_taker_start (&t, lock, G_MININT64);
  g_assert_true (test_wait_until (test_taker_started, &t, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));

  closed_at = test_now_ms ();
  redis_lock_registry_close (f->registry);
  test_taker_join (&t, thread, 5000);
  g_assert_false (t.result);
  g_assert_error (t.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_cmpint (t.returned_ms - closed_at, <, 1000);

  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":close-local"));
  test_taker_clear (&t);
}

/* ---- a foreign key with no expiry, deleted without a notification ---- */

/* A lock() (@data: G_MININT64) or a try_lock_for (@data: its wait, -1: forever) of a
 * registry with default settings (PUBSUB, key tracking off) blocked on a key that has
 * no TTL (redis-py's default Lock, an operator's SET), which is then deleted without a
 * notification. */
static void
test_no_expiry_silent_delete (TestFixture *f, gconstpointer data)
{
  g_autofree char *key = test_lock_key ("no-expiry");
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  TestTaker t = { 0 };
  GThread *thread;
  gint64 deleted_at;

  g_test_summary ("A waiter with key tracking off, blocked on a key without expiry (PTTL -1) "
                  "that is then deleted without a notification, gets the lock within 3 s of "
                  "the delete: it rechecks at the SPIN interval instead of sleeping until its "
                  "deadline, which lock() and try_lock_for(-1) do not have.");
  TEST_SKIP_IF_NO_STORE (f);

  /* Another client's key without expiry: taken, then overwritten by a plain SET
   * without PX (on memory://, the steal hook with a negative TTL). */
  held = test_obtain (f->registry, "no-expiry");
  test_lock_ok (held);
  test_store_set_owner (f, key, "foreign-holder", -1);
  g_assert_cmpint (test_store_get_pttl (f, key), ==, -1);

  waiter = test_registry_new (f);
  redis_lock_registry_set_key_tracking (waiter, FALSE);
  wanted = test_obtain (waiter, "no-expiry");
  t.fixture = f;
  thread = test_taker_start (&t, wanted, *(const gint64 *)data);
  /* Two failed attempts: the first one only starts the subscription, the second counts
   * with notifications confirmed, and its PTTL (-1) bounds the sleep that follows. */
  g_assert_true (test_wait_contended (waiter, 2, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  g_assert_cmpint (g_atomic_int_get (&t.done), ==, 0);

  deleted_at = test_now_ms ();
  g_assert_true (test_store_delete (f, key));
  test_taker_join (&t, thread, 3000);
  g_assert_no_error (t.error);
  g_assert_true (t.result);
  g_test_message ("the waiter proceeded %" G_GINT64_FORMAT " ms after the DEL",
                  t.returned_ms - deleted_at);
  g_assert_cmpint (t.returned_ms - deleted_at, <, 3000);
  test_assert_value_of (t.value_while_held, waiter);
  test_assert_free (f, "no-expiry");
  test_unlock_lease_lost (held);
  test_taker_clear (&t);
}

/* ---- keys that change without an unlock notification (Redis key tracking) ---- */

/* Starts a lock() of @name in a PUBSUB registry of its own with key tracking on (the
 * default) while the key is held by a client outside the library (a raw SET with a 30 s
 * TTL), and returns once the waiter has found it held and sleeps. With @late, tracking
 * is turned off first and back on only after the subscription is up. */
static GThread *
start_silent_waiter (TestFixture *f, const char *name, gboolean late, RedisLockRegistry **waiter,
                     RedisLock **wanted, TestTaker *t)
{
  g_autofree char *key = g_strconcat (TEST_REGISTRY_KEY ":", name, NULL);
  g_autoptr (GError) error = NULL;
  RedisLockRegistryStats stats;
  redisReply *reply;
  GThread *thread;

  reply = test_redis_command (f->redis, "SET %s foreign-holder PX 30000", key);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  freeReplyObject (reply);
  *waiter = waiter_registry_new (f, &pubsub_mode);
  /* Key tracking wakes a waiter that is not in line (one in line finds a silent
   * release with its next refresh, within a second). */
  redis_lock_registry_set_wait_queue (*waiter, FALSE);
  g_assert_true (redis_lock_registry_get_key_tracking (*waiter));
  if (late)
    redis_lock_registry_set_key_tracking (*waiter, FALSE);
  *wanted = test_obtain (*waiter, name);
  /* Wait once first, so the subscription (and the key tracking) is up. */
  g_assert_false (redis_lock_try_lock_for (*wanted, 300, NULL, &error));
  g_assert_no_error (error);
  if (late)
    redis_lock_registry_set_key_tracking (*waiter, TRUE);
  g_assert_true (redis_lock_registry_get_key_tracking (*waiter));
  redis_lock_registry_get_stats (*waiter, &stats);
  t->fixture = f;
  thread = test_taker_start (t, *wanted, G_MININT64);
  g_assert_true (test_wait_contended (*waiter, stats.contended_attempts + 1, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t->tid), 10000));
  g_assert_cmpint (g_atomic_int_get (&t->done), ==, 0);
  return thread;
}

static void
test_wakes_on_silent_delete (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  TestTaker t = { 0 };
  GThread *thread;
  gint64 deleted_at;

  g_test_summary ("A lock() blocked on a key held by a client that releases it without "
                  "publishing (a DEL, as Spring's registry in spin mode does) proceeds soon "
                  "after the DEL: the holder's TTL is 30 s, so only Redis key tracking "
                  "explains it.");
  TEST_SKIP_IF_NO_SERVER (f);

  thread = start_silent_waiter (f, "silent-delete", GPOINTER_TO_INT (data), &waiter, &wanted, &t);
  deleted_at = test_now_ms ();
  g_assert_true (test_store_delete (f, TEST_REGISTRY_KEY ":silent-delete"));
  test_taker_join (&t, thread, 5000);

  g_assert_no_error (t.error);
  g_assert_true (t.result);
  g_test_message ("the waiter proceeded %" G_GINT64_FORMAT " ms after the DEL",
                  t.returned_ms - deleted_at);
  g_assert_cmpint (t.returned_ms - deleted_at, <, 1000);
  test_assert_value_of (t.value_while_held, waiter);
  test_taker_clear (&t);
}

static void
test_wakes_on_silent_expiry (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  TestTaker t = { 0 };
  GThread *thread;
  gint64 shortened_at;

  g_test_summary ("A lock() blocked on a key whose holder's TTL is cut to 300 ms behind the "
                  "waiter's back (it was told 30 s) gets the lock soon after the key expires, "
                  "and not before.");
  TEST_SKIP_IF_NO_SERVER (f);

  thread = start_silent_waiter (f, "silent-expiry", FALSE, &waiter, &wanted, &t);
  shortened_at = test_now_ms ();
  test_store_set_owner (f, TEST_REGISTRY_KEY ":silent-expiry", "foreign-holder", 300);
  test_taker_join (&t, thread, 5000);

  g_assert_no_error (t.error);
  g_assert_true (t.result);
  g_test_message ("the waiter proceeded %" G_GINT64_FORMAT " ms after the TTL was cut to 300 ms",
                  t.returned_ms - shortened_at);
  g_assert_cmpint (t.returned_ms - shortened_at, >=, 290);
  g_assert_cmpint (t.returned_ms - shortened_at, <, 1300);
  test_assert_value_of (t.value_while_held, waiter);
  test_taker_clear (&t);
}

static guint64
notifications_of (RedisLockRegistry *registry)
{
  RedisLockRegistryStats stats;

  redis_lock_registry_get_stats (registry, &stats);
  return stats.notifications;
}

static void
test_wakes_on_silent_delete_after_unlock (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockRegistryStats stats;
  TestTaker t = { 0 };
  GThread *thread;
  redisReply *reply;
  gint64 deleted_at;

  g_test_summary ("After an unlock the waiter's registry heard of, a client outside the "
                  "library takes the key and deletes it without publishing: the waiter "
                  "blocked on it proceeds soon after the DEL (the taking, which wakes "
                  "nobody, must not hide the deletion).");
  TEST_SKIP_IF_NO_SERVER (f);

  held = test_obtain (f->registry, "silent-after-unlock");
  g_assert_true (redis_lock_lock (held, NULL));
  waiter = waiter_registry_new (f, &pubsub_mode);
  /* Key tracking wakes a waiter that is not in line (see start_silent_waiter()). */
  redis_lock_registry_set_wait_queue (waiter, FALSE);
  wanted = test_obtain (waiter, "silent-after-unlock");
  g_assert_false (redis_lock_try_lock_for (wanted, 300, NULL, &error));
  g_assert_no_error (error);
  redis_lock_registry_get_stats (waiter, &stats);
  g_assert_true (redis_lock_unlock (held, NULL));
  /* The waiter's registry has heard of the unlock (its key's deletion follows it on
   * the same connection, before anything the foreign client does next). */
  TEST_WAIT_UNTIL (notifications_of (waiter) > stats.notifications, 5000);

  reply = test_redis_command (f->redis, "SET %s foreign-holder PX 30000",
                              TEST_REGISTRY_KEY ":silent-after-unlock");
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  freeReplyObject (reply);
  redis_lock_registry_get_stats (waiter, &stats);
  t.fixture = f;
  thread = test_taker_start (&t, wanted, G_MININT64);
  g_assert_true (test_wait_contended (waiter, stats.contended_attempts + 1, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  g_assert_cmpint (g_atomic_int_get (&t.done), ==, 0);

  deleted_at = test_now_ms ();
  g_assert_true (test_store_delete (f, TEST_REGISTRY_KEY ":silent-after-unlock"));
  test_taker_join (&t, thread, 5000);
  g_assert_no_error (t.error);
  g_assert_true (t.result);
  g_test_message ("the waiter proceeded %" G_GINT64_FORMAT " ms after the DEL",
                  t.returned_ms - deleted_at);
  g_assert_cmpint (t.returned_ms - deleted_at, <, 1000);
  test_assert_value_of (t.value_while_held, waiter);
  test_taker_clear (&t);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/wait/try-lock-for/other-registry/pubsub", &pubsub_mode,
                   test_try_lock_for_other_registry);
  test_add_stores ("/wait/try-lock-for/other-registry/spin", &spin_mode,
                   test_try_lock_for_other_registry);
  test_add_stores ("/wait/try-lock-for/other-thread", NULL, test_try_lock_for_other_thread);
  test_add_stores ("/wait/try-lock-for/total-deadline", NULL, test_total_deadline);
  test_add_stores ("/wait/lock/proceeds-after-unlock/pubsub", &pubsub_mode,
                   test_lock_proceeds_after_unlock);
  test_add_stores ("/wait/lock/proceeds-after-unlock/spin", &spin_mode,
                   test_lock_proceeds_after_unlock);
  test_add_stores ("/wait/waiter-keeps-holder-ttl/pubsub", &pubsub_mode, test_waiter_keeps_ttl);
  test_add_stores ("/wait/waiter-keeps-holder-ttl/spin", &spin_mode, test_waiter_keeps_ttl);
  test_add_stores ("/wait/cancel/other-registry/pubsub", &pubsub_mode, test_cancel_other_registry);
  test_add_stores ("/wait/cancel/other-registry/spin", &spin_mode, test_cancel_other_registry);
  test_add_stores ("/wait/cancel/other-thread", NULL, test_cancel_other_thread);
  test_add_stores ("/wait/close/wakes-remote-waiter/pubsub", &pubsub_mode,
                   test_close_wakes_remote_waiter);
  test_add_stores ("/wait/close/wakes-remote-waiter/spin", &spin_mode,
                   test_close_wakes_remote_waiter);
  test_add_stores ("/wait/close/wakes-local-waiter", NULL, test_close_wakes_local_waiter);

  test_add_stores ("/wait/no-expiry/silent-delete/lock", &wait_lock, test_no_expiry_silent_delete);
  test_add_stores ("/wait/no-expiry/silent-delete/try-lock-for-forever", &wait_forever,
                   test_no_expiry_silent_delete);

  test_add_redis ("/wait/silent-release/delete", GINT_TO_POINTER (FALSE),
                  test_wakes_on_silent_delete);
  test_add_redis ("/wait/silent-release/delete-tracking-turned-on-later", GINT_TO_POINTER (TRUE),
                  test_wakes_on_silent_delete);
  test_add_redis ("/wait/silent-release/expiry", NULL, test_wakes_on_silent_expiry);
  test_add_redis ("/wait/silent-release/delete-after-unlock", NULL,
                  test_wakes_on_silent_delete_after_unlock);

  return g_test_run ();
}
