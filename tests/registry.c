/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* registry.c: what a registry promises about identity, naming and its own lifetime.
 *
 * The lock cache is only sound if one name maps to one object for as long as anyone
 * uses it, while two registries (two "processes") get separate objects that still
 * exclude each other through Redis. A registry's client id is what ownership in Redis
 * rests on, so its shape and uniqueness are checked. Closing must give back every lease
 * and refuse later calls cleanly; bad names, keys and settings must be refused with a
 * clear error (or a critical for setters) rather than reach Redis. Every test runs on
 * both stores, a private redis-server (`/redis/...`) and a `memory://` store of its own
 * (`/memory/...`), from this one source.
 */
#include "config.h"

#include "common.h"

#include <string.h>
#include <unistd.h>

static void
test_same_name_same_pointer (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) a1 = NULL;
  g_autoptr (RedisLock) a2 = NULL;
  g_autoptr (RedisLock) a3 = NULL;

  g_test_summary ("Obtaining a name twice, while referenced or held, yields the same object.");
  TEST_SKIP_IF_NO_STORE (f);

  a1 = test_obtain (f->registry, "same");
  a2 = test_obtain (f->registry, "same");
  g_assert_true (a1 == a2);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 1);

  /* Still the same object while held, after the extra reference is gone. */
  g_assert_true (redis_lock_lock (a1, NULL));
  g_clear_pointer (&a2, redis_lock_unref);
  a3 = test_obtain (f->registry, "same");
  g_assert_true (a3 == a1);
  g_assert_true (redis_lock_is_held_by_current_thread (a3));
  g_assert_true (redis_lock_unlock (a3, NULL));
}

static void
test_two_names_two_objects (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) a = NULL;
  g_autoptr (RedisLock) b = NULL;

  g_test_summary ("Two names give two objects, each with its own name and key.");
  TEST_SKIP_IF_NO_STORE (f);

  a = test_obtain (f->registry, "alpha");
  b = test_obtain (f->registry, "beta");
  g_assert_true (a != b);
  g_assert_cmpstr (redis_lock_get_name (a), ==, "alpha");
  g_assert_cmpstr (redis_lock_get_name (b), ==, "beta");
  g_assert_cmpstr (redis_lock_get_key (a), ==, TEST_REGISTRY_KEY ":alpha");
  g_assert_cmpstr (redis_lock_get_key (b), ==, TEST_REGISTRY_KEY ":beta");
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 2);

  /* Independent: holding one does not hold the other. */
  g_assert_true (redis_lock_lock (a, NULL));
  g_assert_false (redis_lock_is_held_by_current_thread (b));
  g_assert_true (redis_lock_try_lock (b, NULL));
  g_assert_true (redis_lock_unlock (b, NULL));
  g_assert_true (redis_lock_unlock (a, NULL));
}

static void
test_two_registries_exclude (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) mine = NULL;
  g_autoptr (RedisLock) theirs = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("Two registries on one registry key have separate lock objects for a name, "
                  "and those exclude each other through Redis.");
  TEST_SKIP_IF_NO_STORE (f);

  other = test_registry_new (f);
  g_assert_cmpstr (redis_lock_registry_get_registry_key (other), ==, TEST_REGISTRY_KEY);
  mine = test_obtain (f->registry, "shared");
  theirs = test_obtain (other, "shared");
  g_assert_true (mine != theirs);

  test_lock_ok (mine);
  g_assert_false (redis_lock_try_lock (theirs, &error));
  g_assert_no_error (error);
  g_assert_false (redis_lock_is_acquired_in_this_process (theirs));
  test_unlock_ok (mine);

  g_assert_true (redis_lock_try_lock (theirs, &error));
  g_assert_no_error (error);
  g_assert_false (redis_lock_try_lock (mine, &error));
  g_assert_no_error (error);
  test_unlock_ok (theirs);
}

static gboolean
is_hex_string (const char *s)
{
  for (; *s != '\0'; s++)
    if (!g_ascii_isxdigit (*s))
      return FALSE;
  return TRUE;
}

static void
test_client_id (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autofree char *prefix = NULL;
  const char *id;
  const char *other_id;

  g_test_summary ("The client id is hostname:pid: followed by at least 32 hex digits, and "
                  "differs between two registries of one process.");
  TEST_SKIP_IF_NO_STORE (f);

  other = test_registry_new (f);
  id = redis_lock_registry_get_client_id (f->registry);
  other_id = redis_lock_registry_get_client_id (other);
  g_assert_nonnull (id);
  g_assert_nonnull (other_id);

  prefix = g_strdup_printf ("%s:%d:", g_get_host_name (), (int)getpid ());
  g_assert_true (g_str_has_prefix (id, prefix));
  g_assert_true (g_str_has_prefix (other_id, prefix));
  g_assert_cmpuint (strlen (id + strlen (prefix)), >=, 32);
  g_assert_true (is_hex_string (id + strlen (prefix)));
  g_assert_true (is_hex_string (other_id + strlen (prefix)));
  g_assert_cmpstr (id, !=, other_id);
}

static void
test_close_during_acquisition (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  TestTaker t = { 0 };
  GThread *thread;

  g_test_summary ("close() while a lock() waits for Redis to answer its SET (the server "
                  "paused): when the answer comes, the lease, taken after close released the "
                  "ones it knew, is released too and lock() fails with CLOSED; no key is left.");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "late");
  /* A connection in the pool, so that the SET is the request left waiting. */
  test_lock_ok (lock);
  test_unlock_ok (lock);
  redis_lock_test_server_pause (f->server);
  thread = test_taker_start (&t, lock, G_MININT64);
  g_assert_true (test_wait_until (test_taker_started, &t, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  redis_lock_registry_close (f->registry);
  redis_lock_test_server_resume (f->server);
  test_taker_join (&t, thread, 10000);
  g_assert_false (t.result);
  g_assert_error (t.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  test_assert_free (f, "late");
  test_taker_clear (&t);
}

static void
test_close_releases_keys (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) nested = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;

  g_test_summary ("close releases every held lease (the keys are gone); an unlock afterwards "
                  "fails with CLOSED and drops the local hold.");
  TEST_SKIP_IF_NO_STORE (f);

  held = test_obtain (f->registry, "held");
  nested = test_obtain (f->registry, "nested");
  g_assert_true (redis_lock_lock (held, NULL));
  g_assert_true (redis_lock_lock (nested, NULL));
  g_assert_true (redis_lock_lock (nested, NULL));
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":held");
  test_assert_value_of (value, f->registry);
  g_clear_pointer (&value, g_free);

  redis_lock_registry_close (f->registry);

  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":held");
  g_assert_null (value);
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":nested");
  g_assert_null (value);

  g_assert_false (redis_lock_unlock (held, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (held));
  g_assert_cmpuint (redis_lock_get_hold_count (held), ==, 0);

  g_assert_false (redis_lock_unlock (nested, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  /* Idempotent. */
  redis_lock_registry_close (f->registry);
}

static void
test_calls_after_close (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) again = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockRegistryStats closed;
  RedisLockRegistryStats after;

  g_test_summary ("After close, obtain, lock, try_lock, try_lock_for, unlock and renew all fail "
                  "with CLOSED, and nothing reaches Redis.");
  TEST_SKIP_IF_NO_STORE (f);

  lock = test_obtain (f->registry, "after-close");
  redis_lock_registry_close (f->registry);
  redis_lock_registry_get_stats (f->registry, &closed);

  again = redis_lock_registry_obtain (f->registry, "after-close", &error);
  g_assert_null (again);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_false (redis_lock_lock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_false (redis_lock_try_lock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_false (redis_lock_try_lock_for (lock, 100, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_false (redis_lock_registry_renew (f->registry, "after-close", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":after-close"));
  redis_lock_registry_get_stats (f->registry, &after);
  g_assert_cmpuint (after.round_trips, ==, closed.round_trips);
  g_assert_cmpuint (after.commands, ==, closed.commands);
}

static void
test_last_unref_releases (TestFixture *f, gconstpointer data)
{
  RedisLockRegistry *other;
  RedisLock *lock;
  g_autofree char *value = NULL;

  g_test_summary ("Dropping the last reference to a registry (and its locks) closes it, "
                  "which releases the leases it still held.");
  TEST_SKIP_IF_NO_STORE (f);

  other = test_registry_new (f);
  lock = test_obtain (other, "dropped");
  g_assert_true (redis_lock_lock (lock, NULL));
  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":dropped");
  test_assert_value_of (value, other);
  g_clear_pointer (&value, g_free);

  redis_lock_unref (lock);
  redis_lock_registry_unref (other);

  value = test_store_get_owner (f, TEST_REGISTRY_KEY ":dropped");
  g_assert_null (value);
}

static void
test_invalid_names (TestFixture *f, gconstpointer data)
{
  const char *invalid[] = { NULL, "" };
  g_autofree char *longest = g_strnfill (REDIS_LOCK_NAME_MAX, 'n');
  g_autofree char *too_long = g_strnfill (REDIS_LOCK_NAME_MAX + 1, 'n');
  g_autoptr (GError) error = NULL;
  RedisLock *lock;

  g_test_summary ("Names must be 1..1024 bytes: NULL, empty and 1025-byte names are INVALID; "
                  "a 1024-byte name is fine.");
  TEST_SKIP_IF_NO_STORE (f);

  for (gsize i = 0; i < G_N_ELEMENTS (invalid); i++)
    {
      lock = redis_lock_registry_obtain (f->registry, invalid[i], &error);
      g_assert_null (lock);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_cmpstr (error->message, !=, "");
      g_clear_error (&error);
    }

  lock = redis_lock_registry_obtain (f->registry, too_long, &error);
  g_assert_null (lock);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);

  lock = redis_lock_registry_obtain (f->registry, longest, &error);
  g_assert_no_error (error);
  g_assert_nonnull (lock);
  g_assert_cmpuint (strlen (redis_lock_get_name (lock)), ==, REDIS_LOCK_NAME_MAX);
  redis_lock_unref (lock);

  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 1);
}

static void
test_invalid_registry_key (TestFixture *f, gconstpointer data)
{
  const char *url;
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;

  g_test_summary ("An empty or NULL registry key is INVALID.");
  TEST_SKIP_IF_NO_STORE (f);

  url = f->url;
  registry = redis_lock_registry_new (url, "", &error);
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);

  registry = redis_lock_registry_new (url, NULL, &error);
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
}

static void
test_invalid_settings (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  gint64 pttl;

  g_test_summary ("Setters refuse bad values (TTL <= 0, capacity 0, negative idle) with a "
                  "critical, and keep the previous value.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_expire_after_ms (f->registry, 20000);

  g_test_expect_message ("redislock", G_LOG_LEVEL_CRITICAL, "*assertion*failed*");
  redis_lock_registry_set_expire_after_ms (f->registry, 0);
  g_test_assert_expected_messages ();

  g_test_expect_message ("redislock", G_LOG_LEVEL_CRITICAL, "*assertion*failed*");
  redis_lock_registry_set_expire_after_ms (f->registry, -5);
  g_test_assert_expected_messages ();

  g_test_expect_message ("redislock", G_LOG_LEVEL_CRITICAL, "*assertion*failed*");
  redis_lock_registry_set_cache_capacity (f->registry, 0);
  g_test_assert_expected_messages ();

  g_test_expect_message ("redislock", G_LOG_LEVEL_CRITICAL, "*assertion*failed*");
  redis_lock_registry_set_idle_between_tries_ms (f->registry, -1);
  g_test_assert_expected_messages ();

  /* The TTL set before is still in force. */
  lock = test_obtain (f->registry, "settings");
  g_assert_true (redis_lock_lock (lock, NULL));
  pttl = test_store_get_pttl (f, TEST_REGISTRY_KEY ":settings");
  g_assert_cmpint (pttl, >, 15000);
  g_assert_cmpint (pttl, <=, 20000);
  g_assert_true (redis_lock_unlock (lock, NULL));

  /* The capacity is still the default: many locks fit. */
  for (guint i = 0; i < 10; i++)
    {
      g_autofree char *name = g_strdup_printf ("capacity-%u", i);
      RedisLock *other = test_obtain (f->registry, name);
      redis_lock_unref (other);
    }
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 11);
}

/* ---- inspection ---- */

static RedisLockLeaseInfo *
find_lease (GPtrArray *leases, const char *name)
{
  for (guint i = 0; i < leases->len; i++)
    {
      RedisLockLeaseInfo *info = g_ptr_array_index (leases, i);
      if (g_str_equal (info->name, name))
        return info;
    }
  return NULL;
}

static void
test_inspect_leases (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLockRegistry) elsewhere = NULL;
  g_autoptr (RedisLock) mine = NULL;
  g_autoptr (RedisLock) theirs = NULL;
  g_autoptr (RedisLock) unrelated = NULL;
  g_autoptr (RedisLockLeaseInfo) info = NULL;
  g_autoptr (GPtrArray) leases = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;

  g_test_summary ("get_lease_info() reads one lease from the store, whoever holds it (owner "
                  "value and PTTL), NULL without an error for a free lock; list_leases() "
                  "returns every lease of the registry key and no other");
  TEST_SKIP_IF_NO_STORE (f);

  other = test_registry_new (f);
  elsewhere = test_registry_new (f);
  mine = test_obtain (f->registry, "mine");
  theirs = test_obtain (other, "theirs:with:colons");
  test_lock_ok (mine);
  test_lock_ok (theirs);
  value = redis_lock_dup_lease_value (mine);

  info = redis_lock_registry_get_lease_info (f->registry, "mine", &error);
  g_assert_no_error (error);
  g_assert_nonnull (info);
  g_assert_cmpstr (info->name, ==, "mine");
  g_assert_cmpstr (info->owner, ==, value);
  g_assert_cmpint (info->pttl_ms, >, 0);
  g_assert_cmpint (info->pttl_ms, <=, 60000);
  g_clear_pointer (&info, redis_lock_lease_info_free);

  /* A lease of another registry, read through this one. */
  info = redis_lock_registry_get_lease_info (f->registry, "theirs:with:colons", &error);
  g_assert_no_error (error);
  g_assert_nonnull (info);
  test_assert_value_of (info->owner, other);
  g_clear_pointer (&info, redis_lock_lease_info_free);

  g_assert_null (redis_lock_registry_get_lease_info (f->registry, "free", &error));
  g_assert_no_error (error);
  g_assert_null (redis_lock_registry_get_lease_info (f->registry, "", &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);

  if (f->redis != NULL && f->store != TEST_STORE_QUORUM)
    {
      /* A key of another type under the registry key is no lease (on a quorum, one
       * node's key of another type is outvoted by the others). */
      redisReply *reply = test_redis_command (f->redis, "RPUSH %s x", TEST_REGISTRY_KEY ":alist");
      freeReplyObject (reply);
      g_assert_null (redis_lock_registry_get_lease_info (f->registry, "alist", &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS);
      g_clear_error (&error);
    }
  leases = redis_lock_registry_list_leases (f->registry, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (leases->len, ==, 2);
  {
    RedisLockLeaseInfo *a = find_lease (leases, "mine");
    RedisLockLeaseInfo *b = find_lease (leases, "theirs:with:colons");

    g_assert_true (a != NULL && b != NULL);
    if (a == NULL || b == NULL)
      return;
    g_assert_cmpstr (a->owner, ==, value);
    test_assert_value_of (b->owner, other);
    g_assert_cmpint (b->pttl_ms, >, 0);
  }
  g_clear_pointer (&leases, g_ptr_array_unref);

  test_unlock_ok (mine);
  test_unlock_ok (theirs);
  leases = redis_lock_registry_list_leases (f->registry, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (leases->len, ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/registry/obtain/same-name-same-pointer", NULL, test_same_name_same_pointer);
  test_add_stores ("/registry/obtain/two-names-two-objects", NULL, test_two_names_two_objects);
  test_add_stores ("/registry/obtain/two-registries-exclude-each-other", NULL,
                   test_two_registries_exclude);
  test_add_stores ("/registry/client-id/format-and-unique", NULL, test_client_id);
  test_add_stores ("/registry/close/releases-held-keys", NULL, test_close_releases_keys);
  test_add_stores ("/registry/close/later-calls-fail", NULL, test_calls_after_close);
  test_add_redis ("/registry/close/during-acquisition", NULL, test_close_during_acquisition);
  test_add_stores ("/registry/unref/last-reference-releases-keys", NULL, test_last_unref_releases);
  test_add_stores ("/registry/invalid/names", NULL, test_invalid_names);
  test_add_stores ("/registry/invalid/registry-key", NULL, test_invalid_registry_key);
  test_add_stores ("/registry/invalid/settings", NULL, test_invalid_settings);
  test_add_stores ("/registry/inspect/lease-info-and-list", NULL, test_inspect_leases);

  return g_test_run ();
}
