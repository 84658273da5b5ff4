/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory.c: tests of the in-process `memory://NAME` store.
 *
 * The memory store exists so that applications can test their locking code without a
 * Redis server, so it must behave as Redis would: registries opened on one NAME are
 * two processes on one server (the same keys and values, TTL expiry, renewal, lease
 * loss, wake-up on unlock), registries on different NAMEs share nothing, and the
 * registry's statistics count requests as with Redis, so "re-entry sends nothing"
 * can be asserted on either store. The store's debugging hooks (redislock-test.h) play
 * the part a test plays with a raw Redis connection: read the owner and PTTL of a key,
 * expire it, hand it to another owner. No redis-server is started here. Threads are
 * coordinated with the registries' statistics, atomics, joins and the lease-lost
 * recorder of common.h; only the tests whose subject is time (expiry, renewal,
 * deadlines) sleep.
 */
#include "config.h"

#include <string.h>

#include "common.h"

#define REGISTRY_KEY "memtest"

/* Bound on anything that should happen "promptly": far above what it takes on a
 * loaded machine under a sanitizer, far below the 60 s the default TTL and the idle
 * time the waiters are given, so a missing wake-up still fails. */
#define PROMPT_MS 5000

typedef struct
{
  char *name; /* the store NAME, unique per test */
  char *url;  /* memory://NAME */
  RedisLockRegistry *registry;
} MemFixture;

static RedisLockRegistry *
registry_new (const char *url, const char *registry_key)
{
  GError *error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (url, registry_key, &error);

  g_assert_no_error (error);
  g_assert_nonnull (registry);
  return registry;
}

static void
fixture_setup (MemFixture *f, gconstpointer data)
{
  static gint counter;

  f->name = g_strdup_printf ("memtest-%d", g_atomic_int_add (&counter, 1));
  f->url = g_strconcat ("memory://", f->name, NULL);
  f->registry = registry_new (f->url, REGISTRY_KEY);
}

static void
fixture_teardown (MemFixture *f, gconstpointer data)
{
  g_clear_pointer (&f->registry, redis_lock_registry_unref);
  g_free (f->url);
  g_free (f->name);
}

/* Another registry on the fixture's store and key: another process, as far as the
 * locks can tell. */
static RedisLockRegistry *
other_registry_new (MemFixture *f)
{
  return registry_new (f->url, REGISTRY_KEY);
}

static char *
key_of (const char *name)
{
  return g_strconcat (REGISTRY_KEY ":", name, NULL);
}

static char *
owner_of (MemFixture *f, const char *name)
{
  g_autofree char *key = key_of (name);

  return redis_lock_memory_store_get_owner (f->name, key);
}

static gint64
pttl_of (MemFixture *f, const char *name)
{
  g_autofree char *key = key_of (name);

  return redis_lock_memory_store_get_pttl (f->name, key);
}

static void
try_lock_busy (RedisLock *lock)
{
  GError *error = NULL;

  g_assert_false (redis_lock_try_lock (lock, &error));
  g_assert_no_error (error);
}

/* ---- keys and values ---- */

static void
test_key_and_value (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *owner = NULL;
  gint64 pttl;

  g_test_summary ("A held lock is the key registry_key:name holding the registry's client id "
                  "with the registry's TTL; unlock deletes it.");
  redis_lock_registry_set_expire_after_ms (f->registry, 30000);
  lock = test_obtain (f->registry, "orders");
  g_assert_cmpstr (redis_lock_get_key (lock), ==, REGISTRY_KEY ":orders");
  g_assert_null (owner_of (f, "orders"));
  g_assert_cmpint (pttl_of (f, "orders"), ==, -2);

  test_lock_ok (lock);
  owner = owner_of (f, "orders");
  test_assert_value_of (owner, f->registry);
  pttl = pttl_of (f, "orders");
  g_assert_cmpint (pttl, >, 25000);
  g_assert_cmpint (pttl, <=, 30000);

  test_unlock_ok (lock);
  g_assert_null (owner_of (f, "orders"));
  g_assert_cmpint (pttl_of (f, "orders"), ==, -2);
}

static void
test_try_lock_full_ttl (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "full");
  GError *error = NULL;
  gint64 pttl;

  g_test_summary ("try_lock_full with a TTL sets that TTL on the key, not the registry's.");
  g_assert_true (redis_lock_try_lock_full (lock, 0, 5000, NULL, &error));
  g_assert_no_error (error);
  pttl = pttl_of (f, "full");
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, 5000);
  test_unlock_ok (lock);
}

static void
test_reentry_sends_nothing (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "reentrant");
  RedisLockRegistryStats before, after;

  g_test_summary ("Outermost lock and unlock are one store request each, counted as round "
                  "trips and commands as with Redis; re-entry and inner unlocks send none.");
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  before = test_stats (f->registry);
  test_lock_ok (lock);
  after = test_stats (f->registry);
  g_assert_cmpuint (after.round_trips, ==, before.round_trips + 1);
  g_assert_cmpuint (after.commands, ==, before.commands + 1);
  g_assert_cmpuint (after.acquisitions, ==, before.acquisitions + 1);

  before = after;
  for (guint i = 0; i < 5; i++)
    test_lock_ok (lock);
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 6);
  for (guint i = 0; i < 5; i++)
    test_unlock_ok (lock);
  after = test_stats (f->registry);
  g_assert_cmpuint (after.round_trips, ==, before.round_trips);
  g_assert_cmpuint (after.commands, ==, before.commands);
  g_assert_true (redis_lock_is_held_by_current_thread (lock));

  test_unlock_ok (lock);
  after = test_stats (f->registry);
  g_assert_cmpuint (after.round_trips, ==, before.round_trips + 1);
  g_assert_cmpuint (after.releases, ==, before.releases + 1);
}

/* ---- exclusion ---- */

static void
test_two_registries_exclude (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = other_registry_new (f);
  g_autoptr (RedisLock) mine = test_obtain (f->registry, "shared");
  g_autoptr (RedisLock) theirs = test_obtain (other, "shared");
  g_autofree char *owner = NULL;

  g_test_summary ("Two registries on one memory store exclude each other like two processes "
                  "on one Redis: the second one finds the key held and cannot take it.");
  g_assert_cmpstr (redis_lock_registry_get_client_id (f->registry), !=,
                   redis_lock_registry_get_client_id (other));
  test_lock_ok (mine);
  try_lock_busy (theirs);
  g_assert_cmpuint (test_stats (other).contended_attempts, ==, 1);
  owner = owner_of (f, "shared");
  test_assert_value_of (owner, f->registry);
  g_assert_false (redis_lock_is_acquired_in_this_process (theirs));

  test_unlock_ok (mine);
  g_assert_true (redis_lock_try_lock (theirs, NULL));
  g_clear_pointer (&owner, g_free);
  owner = owner_of (f, "shared");
  test_assert_value_of (owner, other);
  try_lock_busy (mine);
  test_unlock_ok (theirs);
}

typedef struct
{
  RedisLockRegistry *registries[2];
  guint rounds;
  gint inside;
  gint overlaps;
  guint64 counter; /* plain: only the lock protects it */
} Contest;

static void
contender (guint index, gpointer data)
{
  Contest *c = data;
  g_autoptr (RedisLock) lock = test_obtain (c->registries[index % 2], "contended");

  for (guint round = 0; round < c->rounds; round++)
    {
      GError *error = NULL;

      g_assert_true (redis_lock_try_lock_for (lock, 20000, NULL, &error));
      g_assert_no_error (error);
      if (g_atomic_int_add (&c->inside, 1) != 0)
        g_atomic_int_inc (&c->overlaps);
      c->counter++;
      g_thread_yield ();
      g_atomic_int_add (&c->inside, -1);
      test_unlock_ok (lock);
    }
}

static void
test_contention (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = other_registry_new (f);
  Contest c = { { f->registry, other }, 200, 0, 0, 0 };

  g_test_summary ("Four threads in two registries on one store take one lock 200 times each: "
                  "nobody is ever inside together and no increment of a plain counter is lost.");
  test_run_threads (4, contender, &c);
  g_assert_cmpint (c.overlaps, ==, 0);
  g_assert_cmpuint (c.counter, ==, 4 * 200);
  g_assert_null (owner_of (f, "contended"));
}

static void
test_names_independent (MemFixture *f, gconstpointer data)
{
  g_autofree char *elsewhere_url = g_strconcat (f->url, "-elsewhere", NULL);
  g_autoptr (RedisLockRegistry) elsewhere = registry_new (elsewhere_url, REGISTRY_KEY);
  g_autoptr (RedisLockRegistry) other_key = registry_new (f->url, REGISTRY_KEY "-other");
  g_autoptr (RedisLock) mine = test_obtain (f->registry, "same");
  g_autoptr (RedisLock) theirs = test_obtain (elsewhere, "same");
  g_autoptr (RedisLock) other_keys = test_obtain (other_key, "same");
  g_autofree char *elsewhere_name = g_strconcat (f->name, "-elsewhere", NULL);
  g_autofree char *owner = NULL;
  guint64 notifications = test_stats (other_key).notifications;

  g_test_summary ("Stores with different NAMEs share nothing, and on one store different "
                  "registry keys are different keys: all three hold the same lock name at once.");
  test_lock_ok (mine);
  test_lock_ok (theirs);
  test_lock_ok (other_keys);
  owner = redis_lock_memory_store_get_owner (elsewhere_name, REGISTRY_KEY ":same");
  test_assert_value_of (owner, elsewhere);
  g_clear_pointer (&owner, g_free);
  owner = owner_of (f, "same");
  test_assert_value_of (owner, f->registry);
  g_clear_pointer (&owner, g_free);
  owner = redis_lock_memory_store_get_owner (f->name, REGISTRY_KEY "-other:same");
  test_assert_value_of (owner, other_key);

  test_unlock_ok (mine);
  test_unlock_ok (theirs);
  /* The release of memtest:same concerns registries keyed memtest only. */
  g_assert_cmpuint (test_stats (other_key).notifications, ==, notifications);
  test_unlock_ok (other_keys);
}

static void
test_store_freed_with_last_registry (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "forever");
  g_autoptr (RedisLockRegistry) again = NULL;
  g_autoptr (RedisLock) again_lock = NULL;
  g_autofree char *key = key_of ("forever");

  g_test_summary ("A memory store lives while a registry has it open: once the last one is "
                  "gone, even a key without expiry is gone, and a new registry starts empty.");
  test_lock_ok (lock);
  g_assert_true (redis_lock_memory_store_steal (f->name, key, "someone-else", -1));
  g_assert_cmpint (pttl_of (f, "forever"), ==, -1);
  test_unlock_lease_lost (lock);
  g_clear_pointer (&lock, redis_lock_unref);
  g_clear_pointer (&f->registry, redis_lock_registry_unref);

  g_assert_null (redis_lock_memory_store_get_owner (f->name, key));
  g_assert_cmpint (redis_lock_memory_store_get_pttl (f->name, key), ==, -2);
  g_assert_false (redis_lock_memory_store_expire (f->name, key));

  again = registry_new (f->url, REGISTRY_KEY);
  again_lock = test_obtain (again, "forever");
  g_assert_true (redis_lock_try_lock (again_lock, NULL));
  test_unlock_ok (again_lock);
}

/* ---- expiry and renewal ---- */

static void
test_expiry_takeover (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = other_registry_new (f);
  g_autoptr (RedisLock) mine = test_obtain (f->registry, "expiring");
  g_autoptr (RedisLock) theirs = test_obtain (other, "expiring");
  g_autofree char *owner = NULL;

  g_test_summary ("TTL 100 ms, held 300 ms, no watchdog: the key is gone, another registry "
                  "takes it and keeps it, and the first holder's unlock is LEASE_LOST without "
                  "touching the new owner's key.");
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, 100);
  test_lock_ok (mine);
  g_assert_cmpint (pttl_of (f, "expiring"), <=, 100);

  g_usleep (300 * 1000);
  g_assert_null (owner_of (f, "expiring"));
  g_assert_cmpint (pttl_of (f, "expiring"), ==, -2);

  g_assert_true (redis_lock_try_lock (theirs, NULL));
  test_unlock_lease_lost (mine);
  owner = owner_of (f, "expiring");
  test_assert_value_of (owner, other);
  try_lock_busy (mine);
  test_unlock_ok (theirs);
}

static void
test_watchdog_renews (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) a = test_obtain (f->registry, "renewed-a");
  g_autoptr (RedisLock) b = test_obtain (f->registry, "renewed-b");
  g_autoptr (RedisLock) c = test_obtain (f->registry, "renewed-c");
  g_autofree char *owner = NULL;
  RedisLockRegistryStats stats;

  g_test_summary ("With the watchdog on, three leases of TTL 300 ms held for 1 s stay alive, "
                  "renewed in batches that count one round trip each.");
  redis_lock_registry_set_expire_after_ms (f->registry, 300);
  test_lock_ok (a);
  test_lock_ok (b);
  test_lock_ok (c);
  g_usleep (1000 * 1000);

  owner = owner_of (f, "renewed-a");
  test_assert_value_of (owner, f->registry);
  g_assert_cmpint (pttl_of (f, "renewed-a"), >, 0);
  g_assert_cmpint (pttl_of (f, "renewed-c"), >, 0);
  stats = test_stats (f->registry);
  g_assert_cmpuint (stats.renewals, >=, 6);
  g_assert_cmpuint (stats.leases_lost, ==, 0);
  g_assert_cmpuint (stats.last_tick_round_trips, ==, 1);
  g_assert_cmpuint (stats.last_tick_leases, ==, 3);
  test_unlock_ok (c);
  test_unlock_ok (b);
  test_unlock_ok (a);
}

static void
test_registry_renew (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "renew-me");
  g_autofree char *key = key_of ("renew-me");
  GError *error = NULL;

  g_test_summary ("redis_lock_registry_renew sets the new TTL on the key, and reports "
                  "LEASE_LOST once the key belongs to another owner.");
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  test_lock_ok (lock);
  g_assert_cmpint (pttl_of (f, "renew-me"), >, 30000);
  g_assert_true (redis_lock_registry_renew (f->registry, "renew-me", 2000, &error));
  g_assert_no_error (error);
  g_assert_cmpint (pttl_of (f, "renew-me"), <=, 2000);

  g_assert_true (redis_lock_memory_store_steal (f->name, key, "intruder", 60000));
  g_assert_false (redis_lock_registry_renew (f->registry, "renew-me", 2000, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_true (redis_lock_is_lease_lost (lock));
  test_unlock_lease_lost (lock);
}

/* ---- the hooks: expire and steal behind the holder's back ---- */

static void
lease_lost_by_hook (MemFixture *f, gboolean steal)
{
  g_autoptr (RedisLockRegistry) other = other_registry_new (f);
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "victim");
  g_autoptr (RedisLock) theirs = test_obtain (other, "victim");
  g_autofree char *key = key_of ("victim");
  g_autofree char *owner = NULL;
  TestLeaseLost ll;
  GCancellable *cancellable;

  test_lease_lost_init (&ll);
  redis_lock_registry_set_lease_lost_callback (f->registry, test_lease_lost_cb, &ll, NULL);
  redis_lock_registry_set_expire_after_ms (f->registry, 600);
  test_lock_ok (lock);
  cancellable = redis_lock_get_lease_cancellable (lock);
  g_assert_nonnull (cancellable);
  g_assert_false (g_cancellable_is_cancelled (cancellable));

  if (steal)
    g_assert_true (redis_lock_memory_store_steal (f->name, key, "intruder", 60000));
  else
    g_assert_true (redis_lock_memory_store_expire (f->name, key));

  g_assert_cmpuint (test_lease_lost_wait (&ll, PROMPT_MS), ==, 1);
  g_assert_true (ll.lock == lock);
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_cmpuint (test_stats (f->registry).leases_lost, ==, 1);
  test_unlock_lease_lost (lock);
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 1);

  owner = owner_of (f, "victim");
  if (steal)
    {
      /* The unlock left the new owner's key alone. */
      g_assert_cmpstr (owner, ==, "intruder");
      g_assert_cmpint (pttl_of (f, "victim"), >, 0);
      try_lock_busy (theirs);
    }
  else
    {
      g_assert_null (owner);
      g_assert_true (redis_lock_try_lock (theirs, NULL));
      test_unlock_ok (theirs);
    }
  redis_lock_registry_set_lease_lost_callback (f->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
}

static void
test_hook_expire (MemFixture *f, gconstpointer data)
{
  g_test_summary ("redis_lock_memory_store_expire behind a holder's back (TTL 600 ms, "
                  "watchdog on): the lease-lost callback runs once, the lease cancellable is "
                  "cancelled, unlock is LEASE_LOST, and the key is free for others.");
  lease_lost_by_hook (f, FALSE);
}

static void
test_hook_steal (MemFixture *f, gconstpointer data)
{
  g_test_summary ("redis_lock_memory_store_steal behind a holder's back (TTL 600 ms, "
                  "watchdog on): the lease-lost callback runs once, the lease cancellable is "
                  "cancelled, unlock is LEASE_LOST and leaves the new owner's key alone.");
  lease_lost_by_hook (f, TRUE);
}

static void
test_hooks_absent (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "present");
  g_autofree char *key = key_of ("present");
  g_autofree char *missing = key_of ("missing");

  g_test_summary ("The hooks return FALSE, NULL or -2 for a key that is absent or a store "
                  "nobody has open, and change nothing then.");
  g_assert_false (redis_lock_memory_store_expire (f->name, missing));
  g_assert_false (redis_lock_memory_store_steal (f->name, missing, "x", 1000));
  g_assert_null (redis_lock_memory_store_get_owner (f->name, missing));
  g_assert_cmpint (redis_lock_memory_store_get_pttl (f->name, missing), ==, -2);

  test_lock_ok (lock);
  g_assert_false (redis_lock_memory_store_expire ("no-such-store", key));
  g_assert_false (redis_lock_memory_store_steal ("no-such-store", key, "x", 1000));
  g_assert_null (redis_lock_memory_store_get_owner ("no-such-store", key));
  g_assert_cmpint (redis_lock_memory_store_get_pttl ("no-such-store", key), ==, -2);
  g_assert_cmpint (pttl_of (f, "present"), >, 0);
  test_unlock_ok (lock);
  /* A released key is absent too. */
  g_assert_false (redis_lock_memory_store_expire (f->name, key));
}

/* ---- waiting ---- */

static void
test_wake_on_release (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = other_registry_new (f);
  g_autoptr (RedisLock) held = test_obtain (f->registry, "wake");
  g_autoptr (RedisLock) wanted = test_obtain (waiter, "wake");
  TestTaker t = { 0 };
  GThread *thread;
  gint64 unlocked_ms;

  g_test_summary ("A waiter in another registry (PUBSUB, 60 s between tries, holder's TTL "
                  "60 s) takes the lock promptly after the holder unlocks: the release wakes it.");
  redis_lock_registry_set_idle_between_tries_ms (waiter, 60000);
  test_lock_ok (held);
  thread = test_taker_start (&t, wanted, G_MININT64);
  g_assert_true (test_wait_contended (waiter, 1, PROMPT_MS));

  unlocked_ms = test_now_ms ();
  test_unlock_ok (held);
  test_taker_join (&t, thread, PROMPT_MS);
  g_assert_true (t.result);
  g_assert_no_error (t.error);
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the unlock", t.returned_ms - unlocked_ms);
  g_assert_cmpint (t.returned_ms - unlocked_ms, <, PROMPT_MS);
  g_assert_cmpuint (test_stats (waiter).notifications, >=, 1);
}

static void
test_waiter_bounded_by_pttl (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "foreign");
  g_autoptr (RedisLockRegistry) holder = other_registry_new (f);
  g_autoptr (RedisLock) held = test_obtain (holder, "foreign");
  g_autofree char *key = key_of ("foreign");
  g_autofree char *owner = NULL;
  GError *error = NULL;
  gint64 start, elapsed;

  g_test_summary ("A key held by a foreign owner with 300 ms left is taken soon after it "
                  "expires, with nobody releasing it: the waiter sleeps for the remaining TTL.");
  redis_lock_registry_set_idle_between_tries_ms (f->registry, 60000);
  test_lock_ok (held);
  g_assert_true (redis_lock_memory_store_steal (f->name, key, "gone-process", 300));

  start = test_now_ms ();
  g_assert_true (redis_lock_try_lock_for (lock, 20000, NULL, &error));
  g_assert_no_error (error);
  elapsed = test_now_ms () - start;
  g_test_message ("acquired after %" G_GINT64_FORMAT " ms", elapsed);
  g_assert_cmpint (elapsed, >=, 250);
  g_assert_cmpint (elapsed, <, PROMPT_MS);
  owner = owner_of (f, "foreign");
  test_assert_value_of (owner, f->registry);
  test_unlock_ok (lock);
  test_unlock_lease_lost (held);
}

static void
test_try_lock_for_deadline (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = other_registry_new (f);
  g_autoptr (RedisLock) held = test_obtain (f->registry, "deadline");
  g_autoptr (RedisLock) wanted = test_obtain (waiter, "deadline");
  GError *error = NULL;
  gint64 start, elapsed;

  g_test_summary ("try_lock_for(300) on a lock another registry holds returns FALSE without "
                  "error, no sooner than 300 ms and well before 600 ms.");
  test_lock_ok (held);
  start = g_get_monotonic_time ();
  g_assert_false (redis_lock_try_lock_for (wanted, 300, NULL, &error));
  elapsed = g_get_monotonic_time () - start;
  g_assert_no_error (error);
  g_test_message ("returned after %" G_GINT64_FORMAT " us", elapsed);
  g_assert_cmpint (elapsed, >=, 300 * 1000);
  g_assert_cmpint (elapsed, <, 600 * 1000);
  g_assert_false (redis_lock_is_held_by_current_thread (wanted));
  test_unlock_ok (held);
}

static void
test_cancel_wait (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = other_registry_new (f);
  g_autoptr (RedisLock) held = test_obtain (f->registry, "cancel");
  g_autoptr (RedisLock) wanted = test_obtain (waiter, "cancel");
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  TestTaker t = { 0 };
  GThread *thread;

  g_test_summary ("Cancelling a waiter (no deadline) in another registry ends its wait "
                  "promptly with G_IO_ERROR_CANCELLED; the holder keeps the lock.");
  test_lock_ok (held);
  t.cancellable = cancellable;
  thread = test_taker_start (&t, wanted, -1);
  g_assert_true (test_wait_contended (waiter, 1, PROMPT_MS));
  g_cancellable_cancel (cancellable);
  test_taker_join (&t, thread, PROMPT_MS);
  g_assert_false (t.result);
  g_assert_error (t.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&t.error);
  g_assert_true (redis_lock_is_held_by_current_thread (held));
  test_unlock_ok (held);
}

static void
test_close_wakes_waiters (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter = other_registry_new (f);
  g_autoptr (RedisLockRegistry) third = other_registry_new (f);
  g_autoptr (RedisLock) held = test_obtain (f->registry, "closing");
  g_autoptr (RedisLock) wanted = test_obtain (waiter, "closing");
  g_autoptr (RedisLock) later = test_obtain (third, "closing");
  GError *error = NULL;
  TestTaker t = { 0 }, t3 = { 0 };
  GThread *thread, *thread3;

  g_test_summary ("Closing a registry wakes its waiter with CLOSED; closing the holder's "
                  "registry releases its lease and wakes a waiter in a third registry.");
  test_lock_ok (held);
  thread = test_taker_start (&t, wanted, G_MININT64);
  redis_lock_registry_set_idle_between_tries_ms (third, 60000);
  thread3 = test_taker_start (&t3, later, G_MININT64);
  g_assert_true (test_wait_contended (waiter, 1, PROMPT_MS));
  g_assert_true (test_wait_contended (third, 1, PROMPT_MS));

  redis_lock_registry_close (waiter);
  test_taker_join (&t, thread, PROMPT_MS);
  g_assert_false (t.result);
  g_assert_error (t.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&t.error);

  redis_lock_registry_close (f->registry);
  test_taker_join (&t3, thread3, PROMPT_MS);
  g_assert_true (t3.result);
  g_assert_no_error (t3.error);

  g_assert_false (redis_lock_unlock (held, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (held));
}

/* ---- URLs ---- */

static void
test_invalid_urls (void)
{
  static const char *const bad[] = {
    "memory://",    "memory://a/b",  "memory://a b", "memory://caf\xc3\xa9",
    "memory://x?y", "memory:///abs", "memory://a:1", "memory://a@b",
  };
  static const char *const good[] = { "memory://A.b_c-9", "memory://0", "memory://-" };

  g_test_summary ("memory:// needs a name of ASCII letters, digits, '.', '_' and '-'; anything "
                  "else is REDIS_LOCK_ERROR_INVALID with a message saying so, which does not "
                  "repeat the URL (what follows the name may be a password).");
  for (gsize i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      GError *error = NULL;
      RedisLockRegistry *registry = redis_lock_registry_new (bad[i], REGISTRY_KEY, &error);

      g_assert_null (registry);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_nonnull (strstr (error->message, "memory store URL"));
      if (strlen (bad[i]) > strlen ("memory://"))
        g_assert_null (strstr (error->message, bad[i]));
      g_test_message ("%s: %s", bad[i], error->message);
      g_clear_error (&error);
    }
  for (gsize i = 0; i < G_N_ELEMENTS (good); i++)
    {
      g_autoptr (RedisLockRegistry) registry = registry_new (good[i], REGISTRY_KEY);
      g_autoptr (RedisLock) lock = test_obtain (registry, "x");

      test_lock_ok (lock);
      test_unlock_ok (lock);
    }
}

/* ---- fork ---- */

/* In the child: the parent's store is not there, and a new registry on the same NAME
 * starts empty and works. Returns the exit code: 0 when all held. */
static int
child_main (gpointer data)
{
  MemFixture *f = data;
  g_autofree char *key = key_of ("forked");
  RedisLockRegistry *registry;
  RedisLock *lock;
  char *owner;
  int code = 0;

  if ((owner = redis_lock_memory_store_get_owner (f->name, key)) != NULL)
    return 1;
  registry = redis_lock_registry_new (f->url, REGISTRY_KEY, NULL);
  if (registry == NULL)
    return 2;
  redis_lock_registry_set_watchdog (registry, FALSE);
  lock = redis_lock_registry_obtain (registry, "forked", NULL);
  if (lock == NULL || !redis_lock_try_lock (lock, NULL))
    return 3;
  owner = redis_lock_memory_store_get_owner (f->name, key);
  if (!test_value_is_of (owner, registry))
    code = 4;
  else if (!redis_lock_unlock (lock, NULL))
    code = 5;
  g_free (owner);
  redis_lock_unref (lock);
  redis_lock_registry_unref (registry);
  return code;
}

static void
test_fork_child_starts_empty (MemFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = test_obtain (f->registry, "forked");
  g_autofree char *owner = NULL;

  g_test_summary ("A child made by fork() is another process: it does not see the parent's "
                  "memory stores, and its own registry on the same NAME works on its own.");
  test_lock_ok (lock);
  test_run_child (child_main, f);

  owner = owner_of (f, "forked");
  test_assert_value_of (owner, f->registry);
  test_unlock_ok (lock);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

#define ADD(path, func) g_test_add (path, MemFixture, NULL, fixture_setup, func, fixture_teardown)
  ADD ("/memory/keys/value-and-ttl", test_key_and_value);
  ADD ("/memory/keys/try-lock-full-ttl", test_try_lock_full_ttl);
  ADD ("/memory/keys/reentry-sends-nothing", test_reentry_sends_nothing);
  ADD ("/memory/exclusion/two-registries", test_two_registries_exclude);
  ADD ("/memory/exclusion/threads-in-two-registries", test_contention);
  ADD ("/memory/exclusion/names-and-keys-independent", test_names_independent);
  ADD ("/memory/store/freed-with-last-registry", test_store_freed_with_last_registry);
  ADD ("/memory/expiry/takeover", test_expiry_takeover);
  ADD ("/memory/renewal/watchdog-keeps-lease", test_watchdog_renews);
  ADD ("/memory/renewal/registry-renew", test_registry_renew);
  ADD ("/memory/hooks/expire-loses-lease", test_hook_expire);
  ADD ("/memory/hooks/steal-loses-lease", test_hook_steal);
  ADD ("/memory/hooks/absent", test_hooks_absent);
  ADD ("/memory/wait/wake-on-release", test_wake_on_release);
  ADD ("/memory/wait/bounded-by-pttl", test_waiter_bounded_by_pttl);
  ADD ("/memory/wait/try-lock-for-deadline", test_try_lock_for_deadline);
  ADD ("/memory/wait/cancel", test_cancel_wait);
  ADD ("/memory/close/wakes-waiters", test_close_wakes_waiters);
  ADD ("/memory/fork/child-starts-empty", test_fork_child_starts_empty);
#undef ADD
  g_test_add_func ("/memory/url/invalid", test_invalid_urls);

  return g_test_run ();
}
