/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lease-forced.c: what a forced unlock may delete and what its holder's registry does
 * once it has heard of it: the names of the lock family's keys that are no leases are
 * refused (a plain lock so named is still forced), and a lease heard forced open is
 * never handed to the next local thread as if it were good. Part of the lease test
 * program (lease.c adds these tests; its own /lease/force-unlock cases check the
 * waking and the telling).
 */
#include <string.h>

#include "common.h"

/* Adds this file's tests; called by lease.c's main(). */
void lease_add_forced_tests (void);

/* The names of a read-write lock's readers set and waiting writer's mark, and of a
 * semaphore's size and size record, for the member @member. */
static char *
shape_name (guint i, const char *member)
{
  static const char *const suffixes[] = { "rw:readers", "rw:ww", "sem", "sem:size" };

  g_assert_cmpuint (i, <, G_N_ELEMENTS (suffixes));
  return g_strdup_printf ("{%s}:%s", member, suffixes[i]);
}

#define N_SHAPES 4

static void
test_force_unlock_shapes (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *size_key = g_strdup (TEST_REGISTRY_KEY ":{pool}:sem");
  RedisPermit *permit = NULL;

  g_test_summary ("force_unlock refuses the names of a read-write lock's readers set and "
                  "waiting mark and of a semaphore's size and size record (INVALID, naming "
                  "what the key is), with the semaphore's keys in the store and with nothing "
                  "there, and deletes nothing; a plain lock held under such a name is a lease "
                  "and is forced, its holder told");
  TEST_SKIP_IF_NO_STORE (fx);

  holder = test_registry_new (fx);
  /* A semaphore of one permit, held: its size key (and on Redis its size record). */
  if (fx->store != TEST_STORE_QUORUM)
    {
      sem = redis_lock_registry_obtain_semaphore (holder, "pool", 1, &error);
      g_assert_no_error (error);
      permit = redis_semaphore_try_acquire_for (sem, 0, NULL, &error);
      g_assert_no_error (error);
      g_assert_nonnull (permit);
      g_assert_true (test_store_exists (fx, size_key));
    }
  for (guint i = 0; i < N_SHAPES; i++)
    {
      const char *members[] = { "pool", "doc" };
      for (guint m = 0; m < G_N_ELEMENTS (members); m++)
        {
          g_autofree char *name = shape_name (i, members[m]);

          g_assert_false (redis_lock_registry_force_unlock (fx->registry, name, &error));
          g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
          g_assert_nonnull (strstr (error->message, "no lease"));
          g_assert_nonnull (strstr (error->message, name));
          g_test_message ("%s", error->message);
          g_clear_error (&error);
        }
    }
  if (permit != NULL)
    {
      g_assert_true (test_store_exists (fx, size_key));
      g_assert_false (redis_permit_is_lease_lost (permit));
      g_assert_cmpuint (redis_semaphore_get_available (sem, &error), ==, 0);
      g_assert_no_error (error);
      g_assert_true (redis_permit_release (permit, &error));
      g_assert_no_error (error);
    }

  /* A plain lock under each such name holds a lease: forced, its holder told. */
  for (guint i = 0; i < N_SHAPES; i++)
    {
      g_autofree char *name = shape_name (i, "odd");
      g_autoptr (RedisLock) lock = test_obtain (holder, name);

      test_lock_ok (lock);
      if (fx->store != TEST_STORE_MEMORY)
        TEST_WAIT_UNTIL (test_stats (holder).subscriber_connections >= test_store_nodes (fx),
                         10000);
      g_assert_true (redis_lock_registry_force_unlock (fx->registry, name, &error));
      g_assert_no_error (error);
      TEST_WAIT_UNTIL (redis_lock_is_lease_lost (lock), 5000);
      test_unlock_lease_lost (lock);
    }
}

static void
test_force_unlock_no_handoff (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) b = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (a, "handed");
  g_autoptr (RedisLock) other = test_obtain (b, "handed");
  g_autoptr (GError) error = NULL;
  TestTaker t2 = { 0 };
  GThread *thread;
  guint64 before;

  g_test_summary ("A lease heard forced open is not handed to the next thread of its "
                  "registry: T1 holds, T2 of the same registry waits, the lock is forced "
                  "open and its holder's registry hears it, another registry takes it; T1's "
                  "unlock reports LEASE_LOST and T2 gets the lock only after the other "
                  "registry has released it, with a lease of its own");
  TEST_SKIP_IF_NO_STORE (fx);

  /* A renewal (every 10 s) does not find the loss first. */
  redis_lock_registry_set_expire_after_ms (a, 30000);
  test_lock_ok (held);
  if (fx->store != TEST_STORE_MEMORY)
    TEST_WAIT_UNTIL (test_stats (a).subscriber_connections >= test_store_nodes (fx), 10000);
  t2.fixture = fx;
  thread = test_taker_start (&t2, held, 20000);
  g_assert_true (test_wait_until (test_taker_started, &t2, 5000));
  g_assert_true (test_wait_thread_blocked (t2.tid, 5000));

  before = test_stats (a).notifications;
  g_assert_true (redis_lock_registry_force_unlock (fx->registry, "handed", &error));
  g_assert_no_error (error);
  g_assert_true (test_wait_heard (a, before, 5000));
  g_assert_true (redis_lock_try_lock (other, &error));
  g_assert_no_error (error);

  g_assert_false (redis_lock_unlock (held, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  /* T2 asks the store and finds the other registry there. */
  g_assert_true (test_wait_contended (a, 1, 10000));
  g_assert_false (test_taker_done (&t2));
  test_unlock_ok (other);
  test_taker_join (&t2, thread, 15000);
  g_assert_no_error (t2.error);
  g_assert_true (t2.result);
  g_assert_true (test_value_is_of (t2.value_while_held, a));
  test_taker_clear (&t2);
}

void
lease_add_forced_tests (void)
{
  test_add_stores ("/lease/force-unlock/non-lease-refused", NULL, test_force_unlock_shapes);
  test_add_stores ("/lease/force-unlock/no-local-handoff", NULL, test_force_unlock_no_handoff);
}
