/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory.c: tests of what only the in-process `memory://NAME` store has.
 *
 * The behaviour both stores promise (keys and values, exclusion, expiry, renewal,
 * waiting, close) is checked on both by the concept programs (their `/memory/...`
 * paths, registered by test_add_stores()); this program keeps what is the memory
 * store's own, under `/memory-store/...`: stores of different NAMEs share nothing, a
 * store lives while a registry has it open, its debugging hooks, fork, and its URLs.
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

/* ---- exclusion ---- */

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

/* The hooks live in libredislock-testing and reach the memory store of libredislock
 * through the table the store hands out when the first one opens (src/memory-hooks.h).
 * This runs in a fresh process, where no memory store was opened before it. */
static void
hooks_before_any_store_child (void)
{
  g_autofree char *key = key_of ("early");
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *owner = NULL;

  g_assert_false (redis_lock_memory_store_expire ("memtest-early", key));
  g_assert_false (redis_lock_memory_store_steal ("memtest-early", key, "x", 1000));
  g_assert_null (redis_lock_memory_store_get_owner ("memtest-early", key));
  g_assert_cmpint (redis_lock_memory_store_get_pttl ("memtest-early", key), ==, -2);

  registry = registry_new ("memory://memtest-early", REGISTRY_KEY);
  lock = test_obtain (registry, "early");
  test_lock_ok (lock);
  owner = redis_lock_memory_store_get_owner ("memtest-early", key);
  test_assert_value_of (owner, registry);
  g_assert_cmpint (redis_lock_memory_store_get_pttl ("memtest-early", key), >, 0);
  g_assert_true (redis_lock_memory_store_expire ("memtest-early", key));
  g_assert_null (redis_lock_memory_store_get_owner ("memtest-early", key));
  test_unlock_lease_lost (lock);
}

static void
test_hooks_before_any_store (void)
{
  g_test_summary ("In a process that never opened a memory store the hooks answer absent "
                  "(FALSE, NULL, -2); once a registry opens one they see and change its "
                  "leases.");
  if (g_test_subprocess ())
    {
      hooks_before_any_store_child ();
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* ---- waiting ---- */

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
  ADD ("/memory-store/exclusion/names-and-keys-independent", test_names_independent);
  ADD ("/memory-store/store/freed-with-last-registry", test_store_freed_with_last_registry);
  ADD ("/memory-store/hooks/expire-loses-lease", test_hook_expire);
  ADD ("/memory-store/hooks/steal-loses-lease", test_hook_steal);
  ADD ("/memory-store/hooks/absent", test_hooks_absent);
  ADD ("/memory-store/fork/child-starts-empty", test_fork_child_starts_empty);
#undef ADD
  g_test_add_func ("/memory-store/hooks/before-any-store", test_hooks_before_any_store);
  g_test_add_func ("/memory-store/url/invalid", test_invalid_urls);

  return g_test_run ();
}
