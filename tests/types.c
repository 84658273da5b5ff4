/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* types.c: the GTypes of the public types (src/types.c, and testing/testtypes.c for
 * the test server), as GValues and bindings use them.
 *
 * A binding holds a registry or a lock through g_boxed_copy()/g_boxed_free(), so a copy
 * must be a reference to the same object that keeps it alive after the caller's own
 * reference is gone, and the free must drop exactly that reference. The plain
 * structures are copied by value; the enumerations carry every code with a nick.
 * These run in C, under the sanitizers too, where the Python test of the typelib
 * (introspection.py) does not. The registries use the in-process memory:// store; the
 * test server's reference count needs a real redis-server.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "common.h"

static void
test_boxed_registry (void)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;
  RedisLockRegistry *copy;
  g_autoptr (RedisLock) lock = NULL;
  GValue value = G_VALUE_INIT;

  g_test_summary ("A copy of the boxed registry is a reference to the same registry, "
                  "which it keeps open after the creator's reference is dropped.");
  g_assert_true (G_TYPE_IS_BOXED (REDIS_LOCK_TYPE_REGISTRY));
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_REGISTRY), ==, "RedisLockRegistry");
  registry = redis_lock_registry_new ("memory://types-registry", TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  copy = g_boxed_copy (REDIS_LOCK_TYPE_REGISTRY, registry);
  g_assert_true (copy == registry);
  redis_lock_registry_unref (registry);

  lock = redis_lock_registry_obtain (copy, "a", &error);
  g_assert_no_error (error);
  g_assert_true (redis_lock_try_lock (lock, &error));
  g_assert_no_error (error);
  g_assert_true (redis_lock_unlock (lock, &error));
  g_assert_no_error (error);

  g_value_init (&value, REDIS_LOCK_TYPE_REGISTRY);
  g_value_set_boxed (&value, copy);
  g_assert_true (g_value_get_boxed (&value) == copy);
  g_boxed_free (REDIS_LOCK_TYPE_REGISTRY, copy);
  /* The GValue's reference keeps it open still. */
  g_assert_cmpstr (redis_lock_registry_get_registry_key (g_value_get_boxed (&value)), ==,
                   TEST_REGISTRY_KEY);
  g_value_unset (&value);
}

static void
test_boxed_lock (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  RedisLock *lock;
  RedisLock *copy;
  g_autoptr (RedisLock) again = NULL;

  g_test_summary ("A copy of the boxed lock is a reference to the same cached lock: it "
                  "stays the one obtain returns after the creator's reference is dropped.");
  g_assert_true (G_TYPE_IS_BOXED (REDIS_LOCK_TYPE_LOCK));
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_LOCK), ==, "RedisLock");
  registry = redis_lock_registry_new ("memory://types-lock", TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  lock = redis_lock_registry_obtain (registry, "a", &error);
  g_assert_no_error (error);
  copy = g_boxed_copy (REDIS_LOCK_TYPE_LOCK, lock);
  g_assert_true (copy == lock);
  redis_lock_unref (lock);
  /* Only the copy references it now: an expiry of every unreferenced lock keeps it. */
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (registry, -1), ==, 0);
  again = redis_lock_registry_obtain (registry, "a", &error);
  g_assert_no_error (error);
  g_assert_true (again == copy);
  g_boxed_free (REDIS_LOCK_TYPE_LOCK, copy);
}

static void
test_boxed_structs (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats stats;
  RedisLockRegistryStats *stats_copy;
  g_autoptr (RedisLockLeaseInfo) info = NULL;
  RedisLockLeaseInfo *info_copy;

  g_test_summary ("The stats and the lease info are boxed types copied by value, the "
                  "lease info with strings of its own.");
  registry = redis_lock_registry_new ("memory://types-structs", TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  lock = redis_lock_registry_obtain (registry, "a", &error);
  g_assert_no_error (error);
  g_assert_true (redis_lock_try_lock (lock, &error));
  g_assert_no_error (error);

  redis_lock_registry_get_stats (registry, &stats);
  g_assert_cmpuint (stats.acquisitions, ==, 1);
  stats_copy = g_boxed_copy (REDIS_LOCK_TYPE_REGISTRY_STATS, &stats);
  g_assert_true (stats_copy != &stats);
  g_assert_cmpmem (stats_copy, sizeof *stats_copy, &stats, sizeof stats);
  g_boxed_free (REDIS_LOCK_TYPE_REGISTRY_STATS, stats_copy);

  info = redis_lock_registry_get_lease_info (registry, "a", &error);
  g_assert_no_error (error);
  g_assert_nonnull (info);
  info_copy = g_boxed_copy (REDIS_LOCK_TYPE_LEASE_INFO, info);
  g_assert_true (info_copy->name != info->name && info_copy->owner != info->owner);
  g_assert_cmpstr (info_copy->name, ==, "a");
  g_assert_cmpstr (info_copy->owner, ==, info->owner);
  g_assert_cmpint (info_copy->pttl_ms, ==, info->pttl_ms);
  g_boxed_free (REDIS_LOCK_TYPE_LEASE_INFO, info_copy);
  g_assert_true (redis_lock_unlock (lock, &error));
  g_assert_no_error (error);
}

static void
test_boxed_waiter_info (void)
{
  RedisLockWaiterInfo info = { (char *) "a", (char *) "id:1", (char *) "host", 42, 1234 };
  g_autoptr (RedisLockWaiterInfo) copy = NULL;

  g_test_summary ("The waiter info is a boxed type copied with strings of its own.");
  copy = g_boxed_copy (REDIS_LOCK_TYPE_WAITER_INFO, &info);
  g_assert_true (copy->name != info.name && copy->waiter != info.waiter && copy->host != info.host);
  g_assert_cmpstr (copy->name, ==, "a");
  g_assert_cmpstr (copy->waiter, ==, "id:1");
  g_assert_cmpstr (copy->host, ==, "host");
  g_assert_cmpint (copy->pid, ==, 42);
  g_assert_cmpint (copy->since_us, ==, 1234);
}

/* Asserts that @type is a GEnum (or GFlags) whose values are exactly @values, named
 * as in C, with the nicks @nicks. */
static void
assert_enum (GType type, const char *const *names, const char *const *nicks, const int *values,
             guint n)
{
  g_autoptr (GTypeClass) klass = g_type_class_ref (type);

  if (G_TYPE_IS_ENUM (type))
    {
      GEnumClass *enum_class = G_ENUM_CLASS (klass);

      g_assert_cmpuint (enum_class->n_values, ==, n);
      for (guint i = 0; i < n; i++)
        {
          GEnumValue *v = g_enum_get_value (enum_class, values[i]);

          g_assert_nonnull (v);
          g_assert_cmpstr (v->value_name, ==, names[i]);
          g_assert_cmpstr (v->value_nick, ==, nicks[i]);
        }
    }
  else
    {
      GFlagsClass *flags_class = G_FLAGS_CLASS (klass);

      g_assert_true (G_TYPE_IS_FLAGS (type));
      g_assert_cmpuint (flags_class->n_values, ==, n);
      for (guint i = 0; i < n; i++)
        {
          GFlagsValue *v = g_flags_get_first_value (flags_class, values[i]);

          g_assert_nonnull (v);
          g_assert_cmpint (v->value, ==, values[i]);
          g_assert_cmpstr (v->value_name, ==, names[i]);
          g_assert_cmpstr (v->value_nick, ==, nicks[i]);
        }
    }
}

#define N(a) G_N_ELEMENTS (a)

static void
test_enums (void)
{
  static const char *const error_names[] = {
    "REDIS_LOCK_ERROR_INVALID",   "REDIS_LOCK_ERROR_CONNECTION", "REDIS_LOCK_ERROR_REDIS",
    "REDIS_LOCK_ERROR_NOT_OWNER", "REDIS_LOCK_ERROR_LEASE_LOST", "REDIS_LOCK_ERROR_CACHE_FULL",
    "REDIS_LOCK_ERROR_FORKED",    "REDIS_LOCK_ERROR_CLOSED",     "REDIS_LOCK_ERROR_NOT_REPLICATED",
    "REDIS_LOCK_ERROR_DEADLOCK"
  };
  static const char *const error_nicks[]
      = { "invalid",    "connection", "redis",  "not-owner",     "lease-lost",
          "cache-full", "forked",     "closed", "not-replicated", "deadlock" };
  static const int error_values[] = { REDIS_LOCK_ERROR_INVALID,       REDIS_LOCK_ERROR_CONNECTION,
                                      REDIS_LOCK_ERROR_REDIS,         REDIS_LOCK_ERROR_NOT_OWNER,
                                      REDIS_LOCK_ERROR_LEASE_LOST,    REDIS_LOCK_ERROR_CACHE_FULL,
                                      REDIS_LOCK_ERROR_FORKED,        REDIS_LOCK_ERROR_CLOSED,
                                      REDIS_LOCK_ERROR_NOT_REPLICATED, REDIS_LOCK_ERROR_DEADLOCK };
  static const char *const wait_names[] = { "REDIS_LOCK_WAIT_PUBSUB", "REDIS_LOCK_WAIT_SPIN" };
  static const char *const wait_nicks[] = { "pubsub", "spin" };
  static const int wait_values[] = { REDIS_LOCK_WAIT_PUBSUB, REDIS_LOCK_WAIT_SPIN };
  static const char *const flag_names[]
      = { "REDIS_LOCK_TEST_TLS_DEFAULT", "REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT",
          "REDIS_LOCK_TEST_TLS_EXPIRED" };
  static const char *const flag_nicks[] = { "default", "require-client-cert", "expired" };
  static const int flag_values[]
      = { REDIS_LOCK_TEST_TLS_DEFAULT, REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT,
          REDIS_LOCK_TEST_TLS_EXPIRED };
  static const char *const file_names[]
      = { "REDIS_LOCK_TEST_TLS_CA", "REDIS_LOCK_TEST_TLS_CLIENT_CERT",
          "REDIS_LOCK_TEST_TLS_CLIENT_KEY", "REDIS_LOCK_TEST_TLS_OTHER_CA" };
  static const char *const file_nicks[] = { "ca", "client-cert", "client-key", "other-ca" };
  static const int file_values[] = { REDIS_LOCK_TEST_TLS_CA, REDIS_LOCK_TEST_TLS_CLIENT_CERT,
                                     REDIS_LOCK_TEST_TLS_CLIENT_KEY, REDIS_LOCK_TEST_TLS_OTHER_CA };

  g_test_summary ("Every public enumeration is a GEnum (the test TLS options a GFlags) "
                  "with every value, named as in C; the error codes' type is named after "
                  "the error domain.");
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_ERROR), ==, "RedisLockErrorCode");
  assert_enum (REDIS_LOCK_TYPE_ERROR, error_names, error_nicks, error_values, N (error_values));
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_WAIT_MODE), ==, "RedisLockWaitMode");
  assert_enum (REDIS_LOCK_TYPE_WAIT_MODE, wait_names, wait_nicks, wait_values, N (wait_values));
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_TEST_TLS_FLAGS), ==, "RedisLockTestTlsFlags");
  assert_enum (REDIS_LOCK_TYPE_TEST_TLS_FLAGS, flag_names, flag_nicks, flag_values,
               N (flag_values));
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_TEST_TLS_FILE), ==, "RedisLockTestTlsFile");
  assert_enum (REDIS_LOCK_TYPE_TEST_TLS_FILE, file_names, file_nicks, file_values, N (file_values));
}

static void
test_test_server_ref (void)
{
  g_autoptr (GError) error = NULL;
  RedisLockTestServer *server;
  RedisLockTestServer *copy;
  g_autoptr (RedisLockRegistry) registry = NULL;
  GPid pid;

  g_test_summary ("The test server is reference-counted: its boxed copy is a reference, "
                  "a free that is not the last leaves it running, the last one stops it.");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;
  g_assert_true (G_TYPE_IS_BOXED (REDIS_LOCK_TYPE_TEST_SERVER));
  pid = redis_lock_test_server_get_pid (server);
  g_assert_cmpint (pid, >, 0);
  copy = g_boxed_copy (REDIS_LOCK_TYPE_TEST_SERVER, server);
  g_assert_true (copy == server);
  g_assert_true (redis_lock_test_server_ref (server) == server);
  redis_lock_test_server_free (server);
  g_boxed_free (REDIS_LOCK_TYPE_TEST_SERVER, copy);

  /* One reference left: still running and answering. */
  g_assert_cmpint (redis_lock_test_server_get_pid (server), ==, pid);
  registry = redis_lock_registry_new (redis_lock_test_server_get_url (server), TEST_REGISTRY_KEY,
                                      &error);
  g_assert_no_error (error);
  g_clear_pointer (&registry, redis_lock_registry_unref);

  /* The last free stops it: the process is gone (and reaped) when free returns. */
  redis_lock_test_server_free (server);
  g_assert_cmpint (kill (pid, 0), ==, -1);
  g_assert_cmpint (errno, ==, ESRCH);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/types/boxed/registry", test_boxed_registry);
  g_test_add_func ("/types/boxed/lock", test_boxed_lock);
  g_test_add_func ("/types/boxed/structs", test_boxed_structs);
  g_test_add_func ("/types/boxed/waiter-info", test_boxed_waiter_info);
  g_test_add_func ("/types/enums", test_enums);
  g_test_add_func ("/types/test-server/ref", test_test_server_ref);
  return g_test_run ();
}
