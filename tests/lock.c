/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock.c: one lock, seen from Redis and from the threads of one registry.
 *
 * The lock's whole contract with other processes is the key `registry_key:name`: it
 * must hold this registry's client id with a TTL while held and vanish on unlock, for
 * any name the API accepts. Inside the process the lock is a recursive mutex whose
 * re-entry must cost no Redis traffic at all, which `INFO commandstats` and the
 * registry's own counters prove. Another thread can neither take nor unlock a held
 * lock. Renewal, the scoped locker and the per-acquisition TTL are checked here too,
 * including what happens when the key was deleted or overwritten behind our back.
 * Every test runs on both stores from this one source: a private redis-server
 * (`/redis/...`) and a `memory://` store of its own (`/memory/...`), looked at through
 * the store-neutral helpers of common.h; what only Redis can show (the commands it
 * ran, DBSIZE) is checked on the Redis run.
 */
#include "config.h"

#include "common.h"

static void
test_key_value_and_pttl (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  gint64 pttl;

  g_test_summary ("While held, GET registry_key:name is the client id and 0 < PTTL <= TTL; "
                  "after unlock the key is gone.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_expire_after_ms (f->registry, 10000);
  lock = test_obtain (f->registry, "keyed");
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":keyed"));

  test_lock_ok (lock);
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":keyed");
  test_assert_value_of (value, f->registry);
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":keyed");
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, 10000);
  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  g_assert_true (redis_lock_is_acquired_in_this_process (lock));

  test_unlock_ok (lock);
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":keyed"));
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
}

static void
test_reentrant_no_redis_traffic (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) warmup = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockRegistryStats before;
  RedisLockRegistryStats outer;
  RedisLockRegistryStats now;
  gboolean redis = f->store == TEST_STORE_REDIS;
  guint nodes = test_store_nodes (f);

  g_test_summary ("Re-entry three deep sends one acquire and one release, one command and one "
                  "round trip each (on Redis: SET NX PX, then the release script: 1 EVALSHA, "
                  "1 UNLINK, 1 PUBLISH); inner lock/unlock leave round_trips unchanged.");
  TEST_SKIP_IF_NO_STORE (f);

  /* No renewals during the count; load the scripts once so no NOSCRIPT retry is counted. */
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  warmup = test_obtain (f->registry, "warmup");
  g_assert_true (redis_lock_lock (warmup, NULL));
  g_assert_true (redis_lock_unlock (warmup, NULL));
  lock = test_obtain (f->registry, "nest");
  if (redis)
    test_redis_reset_stats (f->redis);
  redis_lock_registry_get_stats (f->registry, &before);

  test_lock_ok (lock);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);
  redis_lock_registry_get_stats (f->registry, &outer);
  g_assert_cmpuint (outer.round_trips, ==, before.round_trips + nodes);
  g_assert_cmpuint (outer.commands, ==, before.commands + nodes);
  g_assert_cmpuint (outer.acquisitions, ==, before.acquisitions + 1);

  test_lock_ok (lock);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 2);
  g_assert_true (redis_lock_try_lock (lock, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 3);
  test_unlock_ok (lock);
  test_unlock_ok (lock);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);
  g_assert_true (redis_lock_is_held_by_current_thread (lock));

  /* Only the outermost acquisition so far. */
  redis_lock_registry_get_stats (f->registry, &now);
  g_assert_cmpuint (now.round_trips, ==, outer.round_trips);
  g_assert_cmpuint (now.commands, ==, outer.commands);
  if (redis)
    {
      /* The acquisition of a free key is one plain SET NX PX, no script. */
      g_assert_cmpint (test_redis_command_calls (f->redis, "evalsha"), ==, 0);
      g_assert_cmpint (test_redis_command_calls (f->redis, "set"), ==, 1);
      g_assert_cmpint (test_redis_command_calls (f->redis, "unlink"), ==, 0);
      g_assert_cmpint (test_redis_command_calls (f->redis, "publish"), ==, 0);
    }

  test_unlock_ok (lock);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 0);

  if (redis)
    {
      g_assert_cmpint (test_redis_command_calls (f->redis, "evalsha"), ==, 1);
      g_assert_cmpint (test_redis_command_calls (f->redis, "set"), ==, 1);
      g_assert_cmpint (test_redis_command_calls (f->redis, "unlink"), ==, 1);
      g_assert_cmpint (test_redis_command_calls (f->redis, "publish"), ==, 1);
    }
  redis_lock_registry_get_stats (f->registry, &now);
  g_assert_cmpuint (now.round_trips, ==, outer.round_trips + nodes);
  g_assert_cmpuint (now.commands, ==, outer.commands + nodes);
  g_assert_cmpuint (now.acquisitions, ==, outer.acquisitions);
  g_assert_cmpuint (now.releases, ==, outer.releases + 1);
}

typedef struct
{
  TestFixture *fixture;
  RedisLock *lock;
} OtherThread;

static gpointer
other_thread_main (gpointer user_data)
{
  OtherThread *t = user_data;
  GError *error = NULL;
  redisContext *redis = NULL;

  if (t->fixture->store == TEST_STORE_REDIS)
    {
      redis = test_redis_connect (t->fixture->server);
      test_redis_reset_stats (redis);
    }

  g_assert_false (redis_lock_is_held_by_current_thread (t->lock));
  g_assert_cmpuint (redis_lock_get_hold_count (t->lock), ==, 0);
  g_assert_true (redis_lock_is_acquired_in_this_process (t->lock));

  g_assert_false (redis_lock_try_lock (t->lock, &error));
  g_assert_no_error (error);
  g_assert_false (redis_lock_try_lock_for (t->lock, 0, NULL, &error));
  g_assert_no_error (error);

  g_assert_false (redis_lock_unlock (t->lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);

  /* Local contention never reaches Redis. */
  if (redis != NULL)
    {
      g_assert_cmpint (test_redis_command_calls (redis, "evalsha"), ==, 0);
      redisFree (redis);
    }
  return NULL;
}

static void
test_other_thread (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  RedisLockRegistryStats before;
  RedisLockRegistryStats after;
  OtherThread t;

  g_test_summary ("While one thread holds a lock, another thread's try_lock is FALSE without "
                  "error (and sends nothing to Redis), and its unlock is NOT_OWNER and changes "
                  "nothing.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  lock = test_obtain (f->registry, "owned");
  test_lock_ok (lock);

  t.fixture = f;
  t.lock = lock;
  redis_lock_registry_get_stats (f->registry, &before);
  g_thread_join (g_thread_new ("other", other_thread_main, &t));
  redis_lock_registry_get_stats (f->registry, &after);
  g_assert_cmpuint (after.round_trips, ==, before.round_trips);
  g_assert_cmpuint (after.commands, ==, before.commands);

  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":owned");
  test_assert_value_of (value, f->registry);
  test_unlock_ok (lock);
}

static void
test_unlock_not_held (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("unlock of a lock nobody holds is NOT_OWNER.");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "free");
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);

  g_assert_true (redis_lock_lock (lock, NULL));
  g_assert_true (redis_lock_unlock (lock, NULL));
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
}

static void
test_name_round_trip (TestFixture *f, gconstpointer data)
{
  g_autofree char *longest = g_strnfill (REDIS_LOCK_NAME_MAX, 'z');
  /* clang-format off */
  const char *names[] = {
    "with spaces in it",
    "a:b:c",
    ":",
    "ünïcødé ✓ 鍵",
    "line\r\nbreak",
    "glob*?[x]",
    "\"quoted\" \\backslash",
    longest,
  };
  /* clang-format on */

  g_test_summary ("Names with spaces, ':', UTF-8, CR/LF, glob characters and 1024 bytes map to "
                  "exactly registry_key:name in Redis.");
  TEST_SKIP_IF_NO_STORE (f);

  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_autoptr (RedisLock) lock = test_obtain (f->registry, names[i]);
      g_autofree char *key = test_lock_key (names[i]);
      g_autofree char *value = NULL;
      g_autoptr (GError) error = NULL;

      g_assert_cmpstr (redis_lock_get_name (lock), ==, names[i]);
      g_assert_cmpstr (redis_lock_get_key (lock), ==, key);

      test_lock_ok (lock);
      value = test_store_get_owner (f, key);
      test_assert_value_of (value, f->registry);
      /* Exactly one key: nothing else was written. (The memory store cannot list its
       * keys.) */
      if (f->store == TEST_STORE_REDIS)
        g_assert_cmpint (test_redis_integer (f->redis, "DBSIZE"), ==, 1);

      test_unlock_ok (lock);
      g_assert_false (test_store_exists (f, key));
    }
}

typedef struct
{
  RedisLockRegistry *registry;
  const char *name;
} RenewThread;

static gpointer
renew_thread_main (gpointer user_data)
{
  RenewThread *t = user_data;
  GError *error = NULL;
  gboolean ok = redis_lock_registry_renew (t->registry, t->name, 40000, &error);

  g_assert_no_error (error);
  return GINT_TO_POINTER (ok);
}

static void
test_renew_extends (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  gint64 pttl;
  RenewThread t;

  g_test_summary ("renew of a held lock sets its PTTL (explicit TTL, or the registry TTL for 0), "
                  "from any thread of the registry.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, 2000);
  lock = test_obtain (f->registry, "renewed");
  g_assert_true (redis_lock_lock (lock, NULL));
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":renewed");
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, 2000);

  g_assert_true (redis_lock_registry_renew (f->registry, "renewed", 30000, &error));
  g_assert_no_error (error);
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":renewed");
  g_assert_cmpint (pttl, >, 25000);
  g_assert_cmpint (pttl, <=, 30000);

  g_assert_true (redis_lock_registry_renew (f->registry, "renewed", 0, &error));
  g_assert_no_error (error);
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":renewed");
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, 2000);

  t.registry = f->registry;
  t.name = "renewed";
  g_assert_true (GPOINTER_TO_INT (g_thread_join (g_thread_new ("renew", renew_thread_main, &t))));
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":renewed");
  g_assert_cmpint (pttl, >, 35000);
  g_assert_cmpint (pttl, <=, 40000);

  test_unlock_ok (lock);
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":renewed"));
}

static void
test_renew_not_owner (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) theirs = NULL;
  g_autoptr (GError) error = NULL;
  gint64 pttl_before;

  g_test_summary ("renew of a lock no thread of the registry holds is NOT_OWNER, even when "
                  "another registry holds it, whose TTL stays untouched.");
  TEST_SKIP_IF_NO_STORE (f);

  g_assert_false (redis_lock_registry_renew (f->registry, "never-held", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);

  lock = test_obtain (f->registry, "was-held");
  g_assert_true (redis_lock_lock (lock, NULL));
  g_assert_true (redis_lock_unlock (lock, NULL));
  g_assert_false (redis_lock_registry_renew (f->registry, "was-held", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);

  other = test_registry_new (f);
  redis_lock_registry_set_expire_after_ms (other, 5000);
  redis_lock_registry_set_watchdog (other, FALSE);
  theirs = test_obtain (other, "theirs");
  g_assert_true (redis_lock_lock (theirs, NULL));
  pttl_before = test_store_get_pttl (f, TEST_REGISTRY_KEY ":theirs");
  g_assert_false (redis_lock_registry_renew (f->registry, "theirs", 60000, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_assert_cmpint (test_store_get_pttl (f, TEST_REGISTRY_KEY ":theirs"), <=, pttl_before);
  g_assert_true (redis_lock_unlock (theirs, NULL));
}

static void
test_lease_gone_behind_our_back (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;

  g_test_summary ("When the key is deleted while held, renew and unlock report LEASE_LOST; when "
                  "another owner wrote it, unlock reports LEASE_LOST and leaves that key alone.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  lock = test_obtain (f->registry, "stolen");

  /* Deleted: renew finds it gone and marks the lease lost. */
  g_assert_true (redis_lock_lock (lock, NULL));
  g_assert_false (redis_lock_is_lease_lost (lock));
  g_assert_true (test_store_delete (f, TEST_REGISTRY_KEY ":stolen"));
  g_assert_false (redis_lock_registry_renew (f->registry, "stolen", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  /* Overwritten by another owner: its key survives our unlock. */
  g_assert_true (redis_lock_lock (lock, NULL));
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_store_set_owner (f, TEST_REGISTRY_KEY ":stolen", "someone-else", -1);
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":stolen");
  g_assert_cmpstr (value, ==, "someone-else");
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
}

static void
test_locker (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A g_autoptr(RedisLockLocker) holds the lock for its scope and releases the "
                  "key when the scope ends.");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "scoped");
  {
    g_autoptr (RedisLockLocker) locker = redis_lock_locker_new (lock, &error);
    g_autofree char *value = NULL;

    g_assert_no_error (error);
    g_assert_nonnull (locker);
    g_assert_true (redis_lock_is_held_by_current_thread (lock));
    value = test_store_get_owner (f, TEST_REGISTRY_KEY ":scoped");
    test_assert_value_of (value, f->registry);
  }
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":scoped"));

  /* Failure: NULL and the error. */
  redis_lock_registry_close (f->registry);
  {
    g_autoptr (RedisLockLocker) locker = redis_lock_locker_new (lock, &error);

    g_assert_null (locker);
    g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  }
}

static void
test_locker_warns (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockLocker *locker;

  g_test_summary ("Freeing a locker whose lease was lost logs a warning and still releases the "
                  "local hold.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  lock = test_obtain (f->registry, "scoped-lost");
  locker = redis_lock_locker_new (lock, &error);
  g_assert_no_error (error);
  g_assert_nonnull (locker);
  g_assert_true (test_store_delete (f, TEST_REGISTRY_KEY ":scoped-lost"));

  g_test_expect_message ("redislock", G_LOG_LEVEL_WARNING, "*scoped-lost*");
  redis_lock_locker_free (locker);
  g_test_assert_expected_messages ();
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
}

static void
test_try_lock_full (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  gint64 pttl;

  g_test_summary ("try_lock_full refuses a negative TTL with INVALID and applies a positive one "
                  "to this acquisition only.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_expire_after_ms (f->registry, 60000);
  lock = test_obtain (f->registry, "full");

  g_assert_false (redis_lock_try_lock_full (lock, 0, -1, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":full"));

  g_assert_true (redis_lock_try_lock_full (lock, 0, 5000, NULL, &error));
  g_assert_no_error (error);
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":full");
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, 5000);
  test_unlock_ok (lock);

  /* The next acquisition uses the registry TTL again. */
  g_assert_true (redis_lock_try_lock_full (lock, 0, 0, NULL, &error));
  g_assert_no_error (error);
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":full");
  g_assert_cmpint (pttl, >, 50000);
  g_assert_cmpint (pttl, <=, 60000);
  test_unlock_ok (lock);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/lock/key/value-and-pttl", NULL, test_key_value_and_pttl);
  test_add_stores ("/lock/reentrant/no-redis-traffic", NULL, test_reentrant_no_redis_traffic);
  test_add_stores ("/lock/threads/other-thread-cannot-take-or-unlock", NULL, test_other_thread);
  test_add_stores ("/lock/unlock/not-held", NULL, test_unlock_not_held);
  test_add_stores ("/lock/name/round-trip", NULL, test_name_round_trip);
  test_add_stores ("/lock/renew/extends-pttl", NULL, test_renew_extends);
  test_add_stores ("/lock/renew/not-owner", NULL, test_renew_not_owner);
  test_add_stores ("/lock/lease/gone-behind-our-back", NULL, test_lease_gone_behind_our_back);
  test_add_stores ("/lock/locker/scoped", NULL, test_locker);
  test_add_stores ("/lock/locker/warns-on-lost-lease", NULL, test_locker_warns);
  test_add_stores ("/lock/try-lock-full/ttl", NULL, test_try_lock_full);

  return g_test_run ();
}
