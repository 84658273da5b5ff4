/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* watchdog.c: tests of lease renewal and lease-loss reporting.
 *
 * A lease is a key with a TTL; the holder keeps it only as long as someone renews it.
 * With the watchdog on (the default) one thread per registry renews every held lease
 * in one pipelined batch per tick, at a third of the shortest held TTL, and with the
 * TTL each acquisition asked for. When renewal finds the key gone or foreign, or cannot
 * confirm it for longer than the TTL (a hung server), the lease is lost: the holder's
 * lease cancellable is cancelled, the lease-lost callback runs once, and the outermost
 * unlock reports REDIS_LOCK_ERROR_LEASE_LOST without touching the new owner's key.
 * These tests hold leases far longer than their TTL, delete keys behind the holder's
 * back, freeze the server with SIGSTOP, hold a thousand leases to see the batching in
 * the registry's statistics (and, on Redis, in INFO commandstats), and close a registry
 * with the watchdog running. Timings are given generous slack, but each bound is tight
 * enough that a missing behaviour fails it. The tests run on both stores from this one
 * source, a private redis-server (`/redis/...`) and a `memory://` store of their own
 * (`/memory/...`); freezing the server is a Redis test only, and the checks of what
 * the server saw stay on the Redis run.
 */
#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY

/* Asserts that @lock's key holds @registry's client id, with a PTTL in (0, @max_pttl]. */
static void
assert_lease (TestFixture *fx, RedisLockRegistry *registry, RedisLock *lock, gint64 max_pttl)
{
  test_assert_held_by (fx, redis_lock_get_name (lock), registry, max_pttl);
}

static void
assert_no_key (TestFixture *fx, RedisLock *lock)
{
  test_assert_free (fx, redis_lock_get_name (lock));
}

/* ---- tests ---- */

static void
test_renewal_keeps_lease (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;

  g_test_summary ("With the watchdog on, a 300 ms lease held for 1.2 s is renewed all along "
                  "and its unlock succeeds");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  redis_lock_registry_set_expire_after_ms (r, 300);
  lock = test_obtain (r, "kept");
  test_lock_ok (lock);
  /* Time is the subject: four TTLs. */
  g_usleep (1200 * 1000);
  assert_lease (fx, r, lock, 300);
  g_assert_false (redis_lock_is_lease_lost (lock));
  g_assert_cmpuint (test_stats (r).renewals, >=, 3);
  test_unlock_ok (lock);
  assert_no_key (fx, lock);
}

static gboolean
watchdog_started (gpointer data)
{
  return test_find_thread ("redislock-wd") != 0;
}

static void
test_idle_loop_no_wakeups (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  guint64 before, after;
  gint tid;

  g_test_summary ("A lock taken and released 300 times in a row never wakes the watchdog "
                  "thread: with nothing held it plans its next tick a third of the "
                  "registry's TTL ahead, and a lease taken with that TTL is due later.");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  lock = test_obtain (r, "loop");
  test_lock_ok (lock);
  test_unlock_ok (lock);
  g_assert_true (test_wait_until (watchdog_started, NULL, 10000));
  tid = test_find_thread ("redislock-wd");
  /* Make it plan again with nothing held, then let it sleep. */
  redis_lock_registry_set_watchdog (r, TRUE);
  g_assert_true (test_wait_thread_blocked (tid, 10000));
  before = test_thread_sleeps (tid);
  for (int i = 0; i < 300; i++)
    {
      test_lock_ok (lock);
      test_unlock_ok (lock);
    }
  after = test_thread_sleeps (tid);
  g_test_message ("watchdog slept %" G_GUINT64_FORMAT " times during the loop", after - before);
  /* The one wake-up allowed is the kick above, if it had not been taken yet. */
  g_assert_cmpuint (after - before, <=, 1);
}

static void
test_renewal_off_loses_lease (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;

  g_test_summary ("With the watchdog off, a 300 ms lease held for 1.2 s expires, and the "
                  "unlock reports REDIS_LOCK_ERROR_LEASE_LOST but still frees the lock");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  redis_lock_registry_set_expire_after_ms (r, 300);
  redis_lock_registry_set_watchdog (r, FALSE);
  lock = test_obtain (r, "expired");
  test_lock_ok (lock);
  g_usleep (1200 * 1000);
  assert_no_key (fx, lock);
  g_assert_cmpuint (test_stats (r).renewals, ==, 0);
  test_unlock_lease_lost (lock);

  /* The lock stays usable. */
  test_lock_ok (lock);
  assert_lease (fx, r, lock, 300);
  test_unlock_ok (lock);
}

static void
test_lease_lost_key_deleted (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r, *other;
  RedisLock *lock, *other_lock, *bystander;
  TestLeaseLost first, ll;
  guint64 k;
  GCancellable *cancellable;
  g_autofree char *key = NULL;
  g_autofree char *value = NULL;
  gint64 t0;
  GError *error = NULL;

  g_test_summary ("A key deleted behind the holder's back is reported within a watchdog "
                  "tick: the lease cancellable is cancelled, then the callback runs once from "
                  "a library thread; the unlock reports the loss and leaves the new owner's key "
                  "alone; the callback's destroy notify runs on replacement and at free");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&first);
  test_lease_lost_init (&ll);
  r = test_registry_new (fx);
  redis_lock_registry_set_expire_after_ms (r, 600);
  redis_lock_registry_set_lease_lost_callback (r, test_lease_lost_cb, &first,
                                               test_lease_lost_destroy);
  redis_lock_registry_set_lease_lost_callback (r, test_lease_lost_cb, &ll, test_lease_lost_destroy);
  g_assert_cmpint (g_atomic_int_get (&first.destroyed), ==, 1);
  g_assert_cmpint (g_atomic_int_get (&ll.destroyed), ==, 0);

  /* Another lease of the same registry keeps the watchdog ticking throughout. */
  bystander = test_obtain (r, "bystander");
  test_lock_ok (bystander);
  lock = test_obtain (r, "victim");
  key = test_lock_key (redis_lock_get_name (lock));
  g_assert_null (redis_lock_get_lease_cancellable (lock));
  test_lock_ok (lock);
  cancellable = redis_lock_get_lease_cancellable (lock);
  g_assert_true (G_IS_CANCELLABLE (cancellable));
  g_assert_false (g_cancellable_is_cancelled (cancellable));
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_lease_lost_set_cancellable (&ll, cancellable);
  test_wait_full_tick (r); /* renewal works while the key is there */
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 0);

  t0 = test_now_ms ();
  g_assert_true (test_store_delete (fx, key));
  g_assert_cmpuint (test_lease_lost_wait (&ll, 5000), ==, 1);
  g_test_message ("lease loss reported %" G_GINT64_FORMAT " ms after the delete", ll.at_ms - t0);
  g_assert_cmpint (ll.at_ms - t0, <, 600 / 3 + 300);
  g_assert_true (ll.lock == lock);
  g_assert_true (ll.thread != g_thread_self ());
  g_assert_true (ll.cancelled_first);
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_cmpuint (test_lease_lost_calls (&first), ==, 0);
  g_assert_cmpuint (test_stats (r).leases_lost, ==, 1);

  /* Meanwhile another registry takes the lock. */
  other = test_registry_new (fx);
  other_lock = test_obtain (other, "victim");
  g_assert_true (redis_lock_try_lock (other_lock, &error));
  g_assert_no_error (error);

  /* Several more ticks (renewing the bystander), and still one call. */
  k = test_stats (r).watchdog_ticks;
  TEST_WAIT_UNTIL (test_stats (r).watchdog_ticks >= k + 3, 10000);
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 1);
  g_assert_cmpuint (test_stats (r).leases_lost, ==, 1);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_false (redis_lock_is_lease_lost (bystander));
  assert_lease (fx, r, bystander, 600);

  test_unlock_lease_lost (lock);
  g_assert_false (redis_lock_is_lease_lost (lock));
  g_assert_null (redis_lock_get_lease_cancellable (lock));
  value = test_store_get_owner (fx, key);
  test_assert_value_of (value, other);

  /* A new hold has a fresh lease and a fresh cancellable. */
  test_unlock_ok (other_lock);
  test_lock_ok (lock);
  cancellable = redis_lock_get_lease_cancellable (lock);
  g_assert_true (G_IS_CANCELLABLE (cancellable));
  g_assert_false (g_cancellable_is_cancelled (cancellable));
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_wait_full_tick (r);
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_unlock_ok (lock);
  test_unlock_ok (bystander);
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 1);

  redis_lock_unref (bystander);
  redis_lock_unref (other_lock);
  redis_lock_registry_unref (other);
  redis_lock_unref (lock);
  g_assert_cmpint (g_atomic_int_get (&ll.destroyed), ==, 0);
  redis_lock_registry_unref (r);
  g_assert_cmpint (g_atomic_int_get (&ll.destroyed), ==, 1);
  g_assert_cmpint (g_atomic_int_get (&first.destroyed), ==, 1);
  test_lease_lost_clear (&first);
  test_lease_lost_clear (&ll);
}

static void
test_lease_lost_server_paused (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *lock;
  TestLeaseLost ll;
  GCancellable *cancellable;
  gint64 t0;
  guint calls;

  g_test_summary ("When the server hangs (SIGSTOP) for longer than the TTL, the lease is "
                  "reported lost by the TTL's end, before the server answers again, although a "
                  "command may take 5 s to time out; after the server resumes, the unlock "
                  "reports the loss, and no key is left behind");
  TEST_SKIP_IF_NO_SERVER (fx);

  test_lease_lost_init (&ll);
  r = test_registry_new (fx);
  redis_lock_registry_set_expire_after_ms (r, 500);
  redis_lock_registry_set_command_timeout_ms (r, 5000);
  redis_lock_registry_set_lease_lost_callback (r, test_lease_lost_cb, &ll, NULL);
  lock = test_obtain (r, "frozen");
  test_lock_ok (lock);
  cancellable = redis_lock_get_lease_cancellable (lock);
  g_assert_nonnull (cancellable);
  test_lease_lost_set_cancellable (&ll, cancellable);
  test_wait_full_tick (r);

  t0 = test_now_ms ();
  redis_lock_test_server_pause (fx->server);
  calls = test_lease_lost_wait (&ll, 3000);
  redis_lock_test_server_resume (fx->server);
  g_assert_cmpuint (calls, ==, 1);
  g_test_message ("lease loss reported %" G_GINT64_FORMAT " ms after the pause", ll.at_ms - t0);
  g_assert_cmpint (ll.at_ms - t0, <, 500 + 300);
  g_assert_true (ll.cancelled_first);
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_true (redis_lock_is_lease_lost (lock));

  /* The unlock reports the loss at once, without asking the server; the key, in case
   * the server's clock had not yet expired it, is deleted in the background. */
  test_unlock_lease_lost (lock);
  TEST_WAIT_UNTIL (!test_store_exists (fx, redis_lock_get_key (lock)), 5000);
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 1);

  redis_lock_unref (lock);
  redis_lock_registry_unref (r);
  test_lease_lost_clear (&ll);
}

static void
test_batch_thousand_leases (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *locks[1000];
  RedisLockRegistryStats st;
  guint64 k, commands_before, commands_after;
  long long before = 0, after = 0;
  gint64 first_lock_at;
  char name[32];
  guint i;

  g_test_summary ("One watchdog tick renews the 1000 leases of a registry in one pipelined "
                  "batch: one or two round trips, about one command (on Redis one EVALSHA) per "
                  "lease, and every lease outlives its TTL");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  redis_lock_registry_set_expire_after_ms (r, 1500);
  first_lock_at = test_now_ms ();
  for (i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      g_snprintf (name, sizeof name, "batch-%u", i);
      locks[i] = test_obtain (r, name);
      test_lock_ok (locks[i]);
    }
  g_test_message ("1000 locks taken in %" G_GINT64_FORMAT " ms", test_now_ms () - first_lock_at);

  test_wait_full_tick (r);
  st = test_stats (r);
  g_assert_cmpuint (st.last_tick_leases, ==, 1000);
  g_assert_cmpuint (st.last_tick_round_trips, >=, 1);
  g_assert_cmpuint (st.last_tick_round_trips, <=, 2);
  g_test_message ("last tick: %" G_GUINT64_FORMAT " leases, %" G_GUINT64_FORMAT
                  " round trips, %" G_GINT64_FORMAT " us",
                  st.last_tick_leases, st.last_tick_round_trips, st.last_tick_us);

  /* What the registry sent, and what Redis saw, over exactly one tick. */
  k = test_stats (r).watchdog_ticks;
  TEST_WAIT_UNTIL (test_stats (r).watchdog_ticks > k, 10000);
  k = test_stats (r).watchdog_ticks;
  commands_before = test_stats (r).commands;
  if (fx->store == TEST_STORE_REDIS)
    before = test_redis_command_calls (fx->redis, "evalsha")
             + test_redis_command_calls (fx->redis, "eval");
  TEST_WAIT_UNTIL (test_stats (r).watchdog_ticks > k, 10000);
  commands_after = test_stats (r).commands;
  if (fx->store == TEST_STORE_REDIS)
    after = test_redis_command_calls (fx->redis, "evalsha")
            + test_redis_command_calls (fx->redis, "eval");
  g_assert_cmpuint (test_stats (r).watchdog_ticks, ==, k + 1);
  g_test_message ("commands sent by one tick: %" G_GUINT64_FORMAT,
                  commands_after - commands_before);
  g_assert_cmpuint (commands_after - commands_before, >=, 1000 * test_store_nodes (fx));
  g_assert_cmpuint (commands_after - commands_before, <=, 1100 * test_store_nodes (fx));
  if (fx->store == TEST_STORE_REDIS)
    {
      g_test_message ("scripts run by one tick: %lld", after - before);
      g_assert_cmpint (after - before, >=, 1000);
      g_assert_cmpint (after - before, <=, 1100);
    }

  /* Time is the subject: well past the TTL, every lease is still there. */
  TEST_WAIT_UNTIL (test_now_ms () - first_lock_at > 2500, 10000);
  if (fx->store == TEST_STORE_REDIS)
    g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 1000);
  for (i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      g_assert_false (redis_lock_is_lease_lost (locks[i]));
      assert_lease (fx, r, locks[i], 1500);
    }

  for (i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      test_unlock_ok (locks[i]);
      assert_no_key (fx, locks[i]);
      redis_lock_unref (locks[i]);
    }
  if (fx->store == TEST_STORE_REDIS)
    g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 0);
}

static void
test_per_acquisition_ttl (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  GError *error = NULL;
  gint64 t0;

  g_test_summary ("A lease taken with try_lock_full (ttl 2 s) on a registry whose TTL is a "
                  "minute is renewed with 2 s, not a minute, and outlives 2 s");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  g_assert_cmpint (redis_lock_registry_get_expire_after_ms (r), ==, 60000);
  lock = test_obtain (r, "own-ttl");
  t0 = test_now_ms ();
  g_assert_true (redis_lock_try_lock_full (lock, 0, 2000, NULL, &error));
  g_assert_no_error (error);
  assert_lease (fx, r, lock, 2000);

  test_wait_full_tick (r);
  g_assert_cmpuint (test_stats (r).renewals, >=, 1);
  assert_lease (fx, r, lock, 2000);

  /* Time is the subject: past the 2 s TTL. */
  TEST_WAIT_UNTIL (test_now_ms () - t0 > 2600, 10000);
  assert_lease (fx, r, lock, 2000);
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_unlock_ok (lock);
  assert_no_key (fx, lock);
}

typedef struct
{
  RedisLockRegistry *registry;
  const char *name;
  gboolean ok;
  GError *error;
} RenewCall;

static gpointer
renew_thread (gpointer data)
{
  RenewCall *call = data;

  call->ok = redis_lock_registry_renew (call->registry, call->name, 4000, &call->error);
  return NULL;
}

static void
test_renew_extends (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) idle = NULL;
  RenewCall call = { 0 };
  GError *error = NULL;
  gint64 pttl;

  g_test_summary ("redis_lock_registry_renew () of a held lease sets its PTTL to the TTL "
                  "asked for (0: the registry TTL), from any thread of the registry; of a lock "
                  "nobody here holds it is REDIS_LOCK_ERROR_NOT_OWNER");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  redis_lock_registry_set_watchdog (r, FALSE); /* only renew () moves the PTTL */
  redis_lock_registry_set_expire_after_ms (r, 1000);
  lock = test_obtain (r, "renewed");
  test_lock_ok (lock);
  assert_lease (fx, r, lock, 1000);

  g_assert_true (redis_lock_registry_renew (r, "renewed", 5000, &error));
  g_assert_no_error (error);
  pttl = test_store_get_pttl (fx, REGISTRY_KEY ":renewed");
  g_assert_cmpint (pttl, >, 4000);
  g_assert_cmpint (pttl, <=, 5000);

  g_assert_true (redis_lock_registry_renew (r, "renewed", 0, &error));
  g_assert_no_error (error);
  assert_lease (fx, r, lock, 1000);

  call.registry = r;
  call.name = "renewed";
  g_thread_join (g_thread_new ("renew", renew_thread, &call));
  g_assert_no_error (call.error);
  g_assert_true (call.ok);
  pttl = test_store_get_pttl (fx, REGISTRY_KEY ":renewed");
  g_assert_cmpint (pttl, >, 3000);
  g_assert_cmpint (pttl, <=, 4000);
  g_assert_cmpuint (test_stats (r).renewals, ==, 3);

  idle = test_obtain (r, "idle");
  g_assert_false (redis_lock_registry_renew (r, "idle", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);
  g_assert_false (redis_lock_registry_renew (r, "never-obtained", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);

  test_unlock_ok (lock);
  g_assert_false (redis_lock_registry_renew (r, "renewed", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);
}

static void
test_renew_deleted_key (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  GCancellable *cancellable;
  GError *error = NULL;

  g_test_summary ("redis_lock_registry_renew () of a lease whose key was deleted reports "
                  "REDIS_LOCK_ERROR_LEASE_LOST and marks the lease lost: is_lease_lost, the "
                  "cancellable and the unlock all say so");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  redis_lock_registry_set_watchdog (r, FALSE);
  lock = test_obtain (r, "deleted");
  test_lock_ok (lock);
  cancellable = redis_lock_get_lease_cancellable (lock);
  g_assert_nonnull (cancellable);
  g_assert_true (test_store_delete (fx, REGISTRY_KEY ":deleted"));
  g_assert_false (redis_lock_is_lease_lost (lock)); /* nobody has looked yet */

  g_assert_false (redis_lock_registry_renew (r, "deleted", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  assert_no_key (fx, lock); /* renew never recreates a lost key */

  g_assert_false (redis_lock_registry_renew (r, "deleted", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  test_unlock_lease_lost (lock);
}

static void
test_renew_sets_watchdog_ttl (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  GError *error = NULL;
  gint64 t0;

  g_test_summary ("After redis_lock_registry_renew (name, 1500), the watchdog keeps renewing "
                  "that lease with 1500 ms instead of the registry's minute");
  TEST_SKIP_IF_NO_STORE (fx);

  r = fx->registry;
  lock = test_obtain (r, "retuned");
  test_lock_ok (lock);
  assert_lease (fx, r, lock, 60000);
  t0 = test_now_ms ();
  g_assert_true (redis_lock_registry_renew (r, "retuned", 1500, &error));
  g_assert_no_error (error);
  assert_lease (fx, r, lock, 1500);

  test_wait_full_tick (r);
  assert_lease (fx, r, lock, 1500);
  TEST_WAIT_UNTIL (test_now_ms () - t0 > 2000, 10000);
  assert_lease (fx, r, lock, 1500);
  test_unlock_ok (lock);
}

typedef struct
{
  RedisLock *lock;
  TestSync sync;
  gboolean held;
  gboolean release;
  GError *unlock_error;
} Holder;

static gpointer
holder_thread (gpointer data)
{
  Holder *h = data;
  GError *error = NULL;

  test_lock_ok (h->lock);
  test_sync_lock (&h->sync);
  h->held = TRUE;
  test_sync_broadcast (&h->sync);
  while (!h->release)
    test_sync_wait (&h->sync);
  test_sync_unlock (&h->sync);
  g_assert_false (redis_lock_unlock (h->lock, &error));
  h->unlock_error = error;
  return NULL;
}

static void
test_close_releases_and_joins (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *l1, *l2, *l3;
  Holder h = { 0 };
  GThread *thread;
  guint baseline;
  gint64 t0;
  GError *error = NULL;

  g_test_summary ("Closing a registry whose watchdog runs stops and joins the watchdog "
                  "thread and deletes every key it held, whichever thread held it; the holders' "
                  "unlocks then report REDIS_LOCK_ERROR_CLOSED");
  TEST_SKIP_IF_NO_STORE (fx);

  baseline = test_thread_count ();
  r = test_registry_new (fx);
  redis_lock_registry_set_expire_after_ms (r, 600);
  l1 = test_obtain (r, "closing-1");
  l2 = test_obtain (r, "closing-2");
  l3 = test_obtain (r, "closing-3");
  test_lock_ok (l1);
  test_lock_ok (l2);

  h.lock = l3;
  test_sync_init (&h.sync);
  thread = g_thread_new ("holder", holder_thread, &h);
  test_sync_lock (&h.sync);
  while (!h.held)
    test_sync_wait (&h.sync);
  test_sync_unlock (&h.sync);

  test_wait_full_tick (r);
  g_assert_cmpuint (test_stats (r).last_tick_leases, ==, 3);
  assert_lease (fx, r, l1, 600);
  assert_lease (fx, r, l2, 600);
  assert_lease (fx, r, l3, 600);
  if (fx->store == TEST_STORE_REDIS)
    g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 3);

  t0 = test_now_ms ();
  redis_lock_registry_close (r);
  g_assert_cmpint (test_now_ms () - t0, <, 2000);
  assert_no_key (fx, l1);
  assert_no_key (fx, l2);
  assert_no_key (fx, l3);
  if (fx->store == TEST_STORE_REDIS)
    g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 0);

  test_sync_lock (&h.sync);
  h.release = TRUE;
  test_sync_broadcast (&h.sync);
  test_sync_unlock (&h.sync);
  g_thread_join (thread);
  g_assert_error (h.unlock_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&h.unlock_error);

  /* The watchdog thread (and any other the registry started) is gone. */
  /* A joined thread can linger in /proc for an instant after pthread_join () returns;
   * the short bound tolerates that, not a thread left running. The count may also end
   * below the baseline: a thread of an earlier test may still have been in /proc when
   * it was taken. */
  TEST_WAIT_UNTIL (test_thread_count () <= baseline, 200);

  g_assert_false (redis_lock_unlock (l1, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (l1));
  g_assert_false (redis_lock_unlock (l2, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  /* Nothing renews or recreates the keys afterwards. */
  g_usleep (400 * 1000);
  assert_no_key (fx, l1);
  assert_no_key (fx, l2);
  assert_no_key (fx, l3);
  if (fx->store == TEST_STORE_REDIS)
    g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 0);

  redis_lock_unref (l1);
  redis_lock_unref (l2);
  redis_lock_unref (l3);
  redis_lock_registry_unref (r);
  test_sync_clear (&h.sync);
}

/* Losses found outside the watchdog (here by renew, with renewal off) still reach the
 * callback from a library thread, never the caller's, and only once. */
static void
test_callback_thread_for_renew (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  TestLeaseLost ll;
  GCancellable *cancellable;

  g_test_summary ("With renewal off, renew finding the key gone reports LEASE_LOST, cancels "
                  "the lease cancellable at once, and the callback runs once on a library "
                  "thread, not in the thread that called renew and holds the lock.");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&ll);
  r = test_registry_new (fx);
  redis_lock_registry_set_watchdog (r, FALSE);
  redis_lock_registry_set_lease_lost_callback (r, test_lease_lost_cb, &ll, NULL);
  lock = test_obtain (r, "renew-thread");
  test_lock_ok (lock);
  cancellable = redis_lock_get_lease_cancellable (lock);
  test_lease_lost_set_cancellable (&ll, cancellable);
  test_store_delete (fx, TEST_REGISTRY_KEY ":renew-thread");

  g_assert_false (redis_lock_registry_renew (r, "renew-thread", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_cmpuint (test_lease_lost_wait (&ll, 5000), ==, 1);
  test_sync_lock (&ll.sync);
  g_assert_true (ll.thread != g_thread_self ());
  g_assert_true (ll.lock == lock);
  g_assert_true (ll.cancelled_first);
  test_sync_unlock (&ll.sync);
  test_unlock_lease_lost (lock);
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 1);
  redis_lock_registry_set_lease_lost_callback (r, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/watchdog/renewal/keeps-short-lease", NULL, test_renewal_keeps_lease);
  test_add_stores ("/watchdog/renewal/off-lease-expires", NULL, test_renewal_off_loses_lease);
  test_add_stores ("/watchdog/idle/lock-loop-no-wakeups", NULL, test_idle_loop_no_wakeups);
  test_add_stores ("/watchdog/lease-lost/key-deleted", NULL, test_lease_lost_key_deleted);
  test_add_redis ("/watchdog/lease-lost/server-paused", NULL, test_lease_lost_server_paused);
  test_add_stores ("/watchdog/batch/thousand-leases-one-pipeline", NULL,
                   test_batch_thousand_leases);
  test_add_stores ("/watchdog/ttl/per-acquisition", NULL, test_per_acquisition_ttl);
  test_add_stores ("/watchdog/renew/extends", NULL, test_renew_extends);
  test_add_stores ("/watchdog/renew/deleted-key", NULL, test_renew_deleted_key);
  test_add_stores ("/watchdog/lease-lost/callback-thread-for-renew", NULL,
                   test_callback_thread_for_renew);
  test_add_stores ("/watchdog/renew/sets-watchdog-ttl", NULL, test_renew_sets_watchdog_ttl);
  test_add_stores ("/watchdog/close/releases-and-joins", NULL, test_close_releases_and_joins);
  return g_test_run ();
}
