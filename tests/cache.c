/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cache.c: the registry's name -> lock cache.
 *
 * The cache must stay bounded (capacity, least recently used idle locks dropped first,
 * just enough to fit) without ever dropping a lock that is referenced, held or waited
 * on: two objects for one name would break exclusion inside the process. When every
 * cached lock is in use, obtain says CACHE_FULL instead of growing.
 *
 * A dropped lock is freed, so a test can never compare its old pointer with a new one.
 * Which names are still cached is therefore read from redis_lock_registry_expire_unused
 * _older_than(), whose count depends on the last-use time of exactly the cached locks:
 * names are used at instants a few hundred milliseconds apart, so time is part of the
 * subject in those tests. The cache is the registry's own, whatever the store: every
 * test runs on both stores from this one source, a private redis-server (`/redis/...`)
 * and a `memory://` store of its own (`/memory/...`).
 */
#include "config.h"

#include "common.h"

/* Gap between the "old" and "new" uses in the LRU tests: large against scheduling
 * noise, small against the test's run time. */
#define AGE_GAP_MS 250

static void
obtain_and_drop (RedisLockRegistry *registry, const char *name)
{
  RedisLock *lock = test_obtain (registry, name);

  redis_lock_unref (lock);
}

typedef struct
{
  RedisLockRegistry *registry;
  guint n_names;
  guint n_threads;
} Churn;

static void
churn (guint index, gpointer data)
{
  Churn *c = data;

  /* Each thread walks all names, from its own starting point. */
  for (guint i = 0; i < c->n_names; i++)
    {
      guint n = (i + index * (c->n_names / c->n_threads)) % c->n_names;
      g_autofree char *name = g_strdup_printf ("churn-%u", n);
      g_autoptr (RedisLock) lock = test_obtain (c->registry, name);

      test_lock_ok (lock);
      g_assert_cmpuint (redis_lock_registry_get_cache_size (c->registry), <=, 179);
      test_unlock_ok (lock);
    }
}

static void
test_capacity_under_threads (TestFixture *f, gconstpointer data)
{
  Churn c = { f->registry, 500, 4 };

  g_test_summary ("Capacity 179, 500 names obtained, locked, unlocked and dropped by 4 threads: "
                  "the cache ends with exactly 179 locks.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_cache_capacity (f->registry, 179);
  test_run_threads (c.n_threads, churn, &c);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 179);
  /* Every lease was released. */
  if (f->store == TEST_STORE_REDIS)
    g_assert_cmpint (test_redis_integer (f->redis, "DBSIZE"), ==, 0);
  for (guint i = 0; i < c.n_names; i++)
    {
      g_autofree char *name = g_strdup_printf ("churn-%u", i);
      g_autofree char *key = test_lock_key (name);

      g_assert_false (test_store_exists (f, key));
    }
}

static void
test_lru_order (TestFixture *f, gconstpointer data)
{
  g_test_summary ("Capacity 3: use a, b; later c; later a again, then d: b (least recently "
                  "used) is the one dropped, not a (first inserted) nor c.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_cache_capacity (f->registry, 3);
  obtain_and_drop (f->registry, "a");
  obtain_and_drop (f->registry, "b");
  g_usleep (AGE_GAP_MS * 1000);
  obtain_and_drop (f->registry, "c");
  g_usleep (AGE_GAP_MS * 1000);
  obtain_and_drop (f->registry, "a");
  obtain_and_drop (f->registry, "d");
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 3);

  /* Ages now: a, d ~0; c ~1 gap; b ~2 gaps, if it were still there. Nothing is 1.5 gaps
   * old, so b is gone: the cache is exactly {a, c, d}. */
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, AGE_GAP_MS * 3 / 2),
                    ==, 0);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 3);
  /* c is the only one older than half a gap. */
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, AGE_GAP_MS / 2), ==,
                    1);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 2);
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, -1), ==, 2);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 0);
}

static void
test_full_when_all_held (TestFixture *f, gconstpointer data)
{
  const char *names[] = { "h1", "h2", "h3" };
  RedisLock *locks[G_N_ELEMENTS (names)];
  g_autoptr (GError) error = NULL;
  RedisLock *extra;

  g_test_summary ("Capacity 3 with all three locks held (no references left): obtaining a "
                  "fourth name is CACHE_FULL; after one unlock it fits.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_cache_capacity (f->registry, 3);
  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    {
      locks[i] = test_obtain (f->registry, names[i]);
      g_assert_true (redis_lock_lock (locks[i], NULL));
    }
  /* Only the holds keep them now; a held lock is never dropped, so the pointers stay
   * valid for comparison below. */
  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    redis_lock_unref (locks[i]);

  extra = redis_lock_registry_obtain (f->registry, "h4", &error);
  g_assert_null (extra);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CACHE_FULL);
  g_clear_error (&error);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 3);

  /* A held lock is still found, even at capacity: take a reference again. */
  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    {
      RedisLock *again = test_obtain (f->registry, names[i]);

      g_assert_true (again == locks[i]);
      g_assert_true (redis_lock_is_held_by_current_thread (again));
    }

  g_assert_true (redis_lock_unlock (locks[0], NULL));
  redis_lock_unref (locks[0]);
  extra = redis_lock_registry_obtain (f->registry, "h4", &error);
  g_assert_no_error (error);
  g_assert_nonnull (extra);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 3);
  redis_lock_unref (extra);

  for (gsize i = 1; i < G_N_ELEMENTS (names); i++)
    {
      g_assert_true (redis_lock_unlock (locks[i], NULL));
      redis_lock_unref (locks[i]);
    }
}

static void
test_full_when_all_referenced (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) r1 = NULL;
  g_autoptr (RedisLock) r2 = NULL;
  g_autoptr (GError) error = NULL;
  RedisLock *extra;

  g_test_summary ("Capacity 2 with both cached locks referenced: a third name is CACHE_FULL.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_cache_capacity (f->registry, 2);
  r1 = test_obtain (f->registry, "r1");
  r2 = test_obtain (f->registry, "r2");
  extra = redis_lock_registry_obtain (f->registry, "r3", &error);
  g_assert_null (extra);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CACHE_FULL);
}

static void
test_referenced_never_dropped (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) kept = NULL;
  g_autoptr (RedisLock) again = NULL;

  g_test_summary ("Capacity 2: a referenced lock survives 50 other names passing through the "
                  "cache, and obtaining it again returns the same object.");
  TEST_SKIP_IF_NO_STORE (f);

  redis_lock_registry_set_cache_capacity (f->registry, 2);
  kept = test_obtain (f->registry, "kept");
  for (guint i = 0; i < 50; i++)
    {
      g_autofree char *name = g_strdup_printf ("passing-%u", i);

      obtain_and_drop (f->registry, name);
      g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), <=, 2);
    }
  again = test_obtain (f->registry, "kept");
  g_assert_true (again == kept);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 2);
  /* Expiring everything idle leaves the referenced one. */
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, -1), ==, 1);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 1);
}

static void
test_expire_unused (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) referenced = NULL;
  g_autoptr (RedisLock) held = NULL;
  RedisLock *lock;

  g_test_summary ("expire_unused_older_than drops only locks nobody references or holds, and "
                  "only those whose last use is at least the given age.");
  TEST_SKIP_IF_NO_STORE (f);

  obtain_and_drop (f->registry, "idle-1");
  obtain_and_drop (f->registry, "idle-2");
  referenced = test_obtain (f->registry, "referenced");
  held = test_obtain (f->registry, "held");
  g_assert_true (redis_lock_lock (held, NULL));
  lock = g_steal_pointer (&held);
  redis_lock_unref (lock); /* held, no reference */
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 4);

  /* Nothing is a minute old. */
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, 60000), ==, 0);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 4);

  g_usleep (AGE_GAP_MS * 1000);
  obtain_and_drop (f->registry, "idle-fresh");
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, AGE_GAP_MS / 2), ==,
                    2);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 3);
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (f->registry, -1), ==, 1);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (f->registry), ==, 2);

  /* The held lock is still the same object (this thread holds it, so it is alive). */
  held = test_obtain (f->registry, "held");
  g_assert_true (held == lock);
  g_assert_true (redis_lock_is_held_by_current_thread (held));
  g_assert_true (redis_lock_unlock (held, NULL));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/cache/capacity/threads", NULL, test_capacity_under_threads);
  test_add_stores ("/cache/lru/eviction-follows-last-use", NULL, test_lru_order);
  test_add_stores ("/cache/full/all-held", NULL, test_full_when_all_held);
  test_add_stores ("/cache/full/all-referenced", NULL, test_full_when_all_referenced);
  test_add_stores ("/cache/referenced/never-dropped", NULL, test_referenced_never_dropped);
  test_add_stores ("/cache/expire-unused/age-and-use", NULL, test_expire_unused);

  return g_test_run ();
}
