/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* expiry.c: a lease that runs out while its holder still thinks it holds the lock.
 *
 * With the watchdog off, nothing renews a lease, so a holder that keeps a lock past its
 * TTL has lost it: the outermost unlock must say LEASE_LOST, must still release the
 * local hold (a lost lease must never wedge the other threads), and must not delete the
 * key if another registry has taken the lock over in the meantime. Time itself is the
 * subject here, so these tests sleep past short TTLs (100 ms TTL, 300 ms held). Every
 * test runs on both stores from this one source: a private redis-server (`/redis/...`)
 * and a `memory://` store of its own (`/memory/...`), whose TTLs run on the monotonic
 * clock.
 */
#include "config.h"

#include "common.h"

#define SHORT_TTL_MS 100
#define HELD_MS 300

static void
sleep_past_ttl (void)
{
  g_usleep (HELD_MS * 1000);
}

typedef struct
{
  RedisLock *lock;
  gboolean took;
  gboolean released;
} Taker;

static gpointer
take_and_release (gpointer user_data)
{
  Taker *t = user_data;
  GError *error = NULL;

  t->took = redis_lock_try_lock (t->lock, &error);
  g_assert_no_error (error);
  if (t->took)
    {
      t->released = redis_lock_unlock (t->lock, &error);
      g_assert_no_error (error);
    }
  return NULL;
}

static void
test_unlock_after_ttl (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  Taker t = { 0 };

  g_test_summary ("TTL 100 ms, held 300 ms, no watchdog: unlock is LEASE_LOST, drops the local "
                  "hold, and another thread can take the lock at once.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, SHORT_TTL_MS);
  lock = test_obtain (f->registry, "expired");
  test_lock_ok (lock);
  g_assert_cmpint (test_store_get_pttl (f, TEST_REGISTRY_KEY ":expired"), <=, SHORT_TTL_MS);

  sleep_past_ttl ();
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":expired"));

  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 0);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));

  t.lock = lock;
  g_thread_join (g_thread_new ("taker", take_and_release, &t));
  g_assert_true (t.took);
  g_assert_true (t.released);
}

static void
test_takeover_keeps_other_key (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) lost = NULL;
  g_autoptr (RedisLock) taken = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;

  g_test_summary ("After the lease expired and another registry took the lock, the late unlock "
                  "is LEASE_LOST and leaves the new owner's key (value and TTL) in place.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, SHORT_TTL_MS);
  lost = test_obtain (f->registry, "takeover");
  g_assert_true (redis_lock_lock (lost, NULL));

  other = test_registry_new (f);
  taken = test_obtain (other, "takeover");
  sleep_past_ttl ();
  g_assert_true (redis_lock_try_lock (taken, &error));
  g_assert_no_error (error);

  g_assert_false (redis_lock_unlock (lost, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (lost));

  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":takeover");
  test_assert_value_of (value, other);
  g_assert_cmpint (test_store_get_pttl (f, TEST_REGISTRY_KEY ":takeover"), >, SHORT_TTL_MS);

  /* The new owner is undisturbed: its own unlock works and removes the key. */
  g_assert_true (redis_lock_is_held_by_current_thread (taken));
  test_unlock_ok (taken);
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":takeover"));
}

static void
test_try_lock_full_ttl_expires (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A TTL given to try_lock_full applies: 100 ms, held 300 ms without the "
                  "watchdog, the lease is gone and unlock is LEASE_LOST.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  lock = test_obtain (f->registry, "full-ttl");
  g_assert_true (redis_lock_try_lock_full (lock, 0, SHORT_TTL_MS, NULL, &error));
  g_assert_no_error (error);
  sleep_past_ttl ();
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":full-ttl"));
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
}

static void
test_renew_after_expiry (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("renew after the lease expired is LEASE_LOST, marks the lease lost, and does "
                  "not bring the key back.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, SHORT_TTL_MS);
  lock = test_obtain (f->registry, "renew-late");
  g_assert_true (redis_lock_lock (lock, NULL));
  sleep_past_ttl ();

  g_assert_false (redis_lock_registry_renew (f->registry, "renew-late", 60000, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":renew-late"));

  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_false (redis_lock_is_lease_lost (lock));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/expiry/unlock-after-ttl/lease-lost", NULL, test_unlock_after_ttl);
  test_add_stores ("/expiry/takeover/other-owner-key-untouched", NULL,
                   test_takeover_keeps_other_key);
  test_add_stores ("/expiry/try-lock-full/ttl-expires", NULL, test_try_lock_full_ttl_expires);
  test_add_stores ("/expiry/renew/after-expiry-lease-lost", NULL, test_renew_after_expiry);

  return g_test_run ();
}
