/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* exclusion.c: mutual exclusion under real contention, the property everything else
 * serves.
 *
 * Each critical section does a non-atomic read-modify-write of a shared counter (on
 * Redis: GET, then SET to the value plus one, on the thread's own raw connection; on
 * the memory store: an atomic load, then an atomic store of the value plus one; see
 * TestCounter), so any overlap between two holders loses an increment and the final
 * total comes out short. An atomic "inside" counter also catches overlap directly. The
 * registries stand in for separate processes (they exclude each other only through the
 * store); threads inside one registry exclude each other through the local mutex
 * first. The shared state is in Redis or atomic on purpose: the registries' exclusion
 * goes through a socket that ThreadSanitizer cannot see. Every test runs on both
 * stores from this one source: a private redis-server (`/redis/...`) and a `memory://`
 * store of its own (`/memory/...`).
 */
#include "config.h"

#include "common.h"

#define COUNTER_KEY "exclusion-counter"

typedef struct
{
  TestFixture *fixture;
  RedisLockRegistry **registries;
  guint n_registries;
  guint threads_per_registry;
  guint rounds;
  const char *name;
  gint inside;   /* threads in the critical section right now */
  gint overlaps; /* times a thread found another one inside */
} Contest;

static void
critical_section (Contest *contest, TestCounter *counter)
{
  gint64 value;

  if (g_atomic_int_add (&contest->inside, 1) != 0)
    g_atomic_int_inc (&contest->overlaps);
  value = test_counter_get (counter);
  g_thread_yield ();
  test_counter_set (counter, value + 1);
  g_atomic_int_add (&contest->inside, -1);
}

static void
contender (guint index, gpointer data)
{
  Contest *contest = data;
  RedisLockRegistry *registry = contest->registries[index / contest->threads_per_registry];
  g_autoptr (TestCounter) counter = test_counter_open (contest->fixture, COUNTER_KEY);
  g_autoptr (RedisLock) lock = test_obtain (registry, contest->name);

  for (guint round = 0; round < contest->rounds; round++)
    {
      test_lock_ok (lock);
      critical_section (contest, counter);
      test_unlock_ok (lock);
    }
}

static void
run_contest (TestFixture *f, guint n_registries, guint threads_per_registry, guint rounds)
{
  g_autofree RedisLockRegistry **registries = g_new0 (RedisLockRegistry *, n_registries);
  g_autoptr (TestCounter) total = test_counter_open (f, COUNTER_KEY);
  Contest contest = { 0 };
  gint64 start = test_now_ms ();

  registries[0] = redis_lock_registry_ref (f->registry);
  for (guint i = 1; i < n_registries; i++)
    registries[i] = test_registry_new (f);

  contest.fixture = f;
  contest.registries = registries;
  contest.n_registries = n_registries;
  contest.threads_per_registry = threads_per_registry;
  contest.rounds = rounds;
  contest.name = "contested";
  test_run_threads (n_registries * threads_per_registry, contender, &contest);

  g_test_message ("%u sections in %" G_GINT64_FORMAT " ms",
                  n_registries * threads_per_registry * rounds, test_now_ms () - start);
  g_assert_cmpint (test_counter_get (total), ==,
                   (gint64)n_registries * threads_per_registry * rounds);
  g_assert_cmpint (contest.overlaps, ==, 0);
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":contested"));

  for (guint i = 0; i < n_registries; i++)
    redis_lock_registry_unref (registries[i]);
}

static void
test_registries (TestFixture *f, gconstpointer data)
{
  g_test_summary ("10 registries x 3 rounds of lock / increment / unlock give exactly 30.");
  TEST_SKIP_IF_NO_STORE (f);

  run_contest (f, 10, 1, 3);
}

static void
test_threads_and_registries (TestFixture *f, gconstpointer data)
{
  g_test_summary ("2 registries x 4 threads x 500 sections of read / +1 / write on a shared "
                  "counter give exactly 4000.");
  TEST_SKIP_IF_NO_STORE (f);

  run_contest (f, 2, 4, 500);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/exclusion/registries/counter", NULL, test_registries);
  test_add_stores ("/exclusion/threads-and-registries/counter", NULL, test_threads_and_registries);

  return g_test_run ();
}
