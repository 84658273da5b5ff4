/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* multilock.c: holding several locks at once (redis_lock_try_lock_all(),
 * redis_lock_unlock_all()).
 *
 * All or none is the promise, so most tests look at what is left after a failure:
 * with one lock of a set held elsewhere the call returns FALSE within its deadline, and
 * then no lock of the set is held here nor left in the store (the leases it took for a
 * moment were released), and holds the thread had before are back to their count. Two
 * threads (of one registry, and of two, as two processes would be) taking {a,b} and
 * {b,a} thousands of times never deadlock and never overlap. The leases of one registry
 * go in one round trip, and their release too. Duplicates are taken once, locks of
 * different registries together, fenced locks get a token each; a closed registry's
 * lock, a name that cannot be fenced, cancellation and programming errors (NULL or
 * empty arrays, NULL elements: criticals, checked in a subprocess) fail cleanly.
 * Store-neutral tests run on /redis, /memory and /cluster from this one source.
 */
#include "common.h"

#include <string.h>

/* Obtains @n locks named @prefix0 … of @registry into @locks. */
static void
obtain_set (RedisLockRegistry *registry, const char *prefix, RedisLock **locks, guint n)
{
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *name = g_strdup_printf ("%s%u", prefix, i);
      locks[i] = test_obtain (registry, name);
    }
}

static void
unref_set (RedisLock **locks, guint n)
{
  for (guint i = 0; i < n; i++)
    redis_lock_unref (locks[i]);
}

static void
assert_all_held (RedisLock **locks, guint n, guint count)
{
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (redis_lock_get_hold_count (locks[i]), ==, count);
}

/* Asserts that the key of @lock is not in the store: at once, or, when a request was cut
 * short by the caller's deadline (its outcome unknown, as under valgrind), once the
 * registry's background release has run; well before the 60 s TTL could remove it. */
static void
assert_gone (TestFixture *fx, RedisLock *lock)
{
  TEST_WAIT_UNTIL (!test_store_exists (fx, redis_lock_get_key (lock)), 10000);
}

/* Asserts that no lock of @locks is held in this process nor left in the store. */
static void
assert_none_anywhere (TestFixture *fx, RedisLock **locks, guint n)
{
  for (guint i = 0; i < n; i++)
    {
      g_assert_false (redis_lock_is_acquired_in_this_process (locks[i]));
      assert_gone (fx, locks[i]);
    }
}

static void
test_all_and_back (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[3];
  GError *error = NULL;

  g_test_summary ("try_lock_all of three free locks holds each once with this registry's "
                  "value in the store; unlock_all frees them all.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "set", locks, 3);
  g_assert_true (redis_lock_try_lock_all (locks, 3, 0, NULL, &error));
  g_assert_no_error (error);
  assert_all_held (locks, 3, 1);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *owner = test_store_get_owner (fx, redis_lock_get_key (locks[i]));
      g_autofree char *value = redis_lock_dup_lease_value (locks[i]);
      test_assert_value_of (owner, fx->registry);
      g_assert_cmpstr (owner, ==, value);
    }
  g_assert_true (redis_lock_unlock_all (locks, 3, &error));
  g_assert_no_error (error);
  assert_none_anywhere (fx, locks, 3);
  unref_set (locks, 3);
}

static void
test_one_held_elsewhere (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisLock) blocker = test_obtain (other, "set2");
  RedisLock *locks[4];
  GError *error = NULL;
  gint64 start, took;

  g_test_summary ("With one lock of a set held by another registry, try_lock_all returns FALSE "
                  "without an error within its deadline (200 ms, and 0), and afterwards no lock "
                  "of the set is held here nor present in the store but the other's.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "set", locks, 4);
  test_lock_ok (blocker);

  start = test_now_ms ();
  g_assert_false (redis_lock_try_lock_all (locks, 4, 200, NULL, &error));
  took = test_now_ms () - start;
  g_assert_no_error (error);
  g_assert_cmpint (took, >=, 190);
  g_assert_cmpint (took, <, 2500);
  for (guint i = 0; i < 4; i++)
    {
      g_assert_false (redis_lock_is_acquired_in_this_process (locks[i]));
      if (i != 2)
        assert_gone (fx, locks[i]);
    }
  test_assert_held_by (fx, "set2", other, 60000);

  g_assert_false (redis_lock_try_lock_all (locks, 4, 0, NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 4; i++)
    if (i != 2)
      assert_gone (fx, locks[i]);
  g_assert_false (redis_lock_is_acquired_in_this_process (locks[0]));

  test_unlock_ok (blocker);
  unref_set (locks, 4);
}

/* A thread that takes a lock, holds it until told (or for @hold_ms), and unlocks: a
 * holder elsewhere, since only the holding thread may unlock. */
typedef struct
{
  RedisLock *lock;
  gint64 hold_ms; /* > 0: unlock after this long; 0: when release is set */
  TestSync sync;
  gboolean holding;
  gboolean release;
  GThread *thread;
} Holder;

static gpointer
holder_main (gpointer data)
{
  Holder *h = data;

  test_lock_ok (h->lock);
  test_sync_lock (&h->sync);
  h->holding = TRUE;
  test_sync_broadcast (&h->sync);
  if (h->hold_ms > 0)
    test_sync_wait_until (&h->sync, g_get_monotonic_time () + h->hold_ms * 1000);
  else
    while (!h->release)
      test_sync_wait (&h->sync);
  test_sync_unlock (&h->sync);
  test_unlock_ok (h->lock);
  return NULL;
}

/* Starts a holder of @lock and returns once it holds it. */
static void
holder_start (Holder *h, RedisLock *lock, gint64 hold_ms)
{
  h->lock = lock;
  h->hold_ms = hold_ms;
  test_sync_init (&h->sync);
  h->thread = g_thread_new ("holder", holder_main, h);
  g_assert_true (test_sync_wait_flag (&h->sync, &h->holding, 10000));
}

static void
holder_finish (Holder *h)
{
  test_sync_lock (&h->sync);
  h->release = TRUE;
  test_sync_broadcast (&h->sync);
  test_sync_unlock (&h->sync);
  g_thread_join (h->thread);
  test_sync_clear (&h->sync);
}

static void
test_waits_for_release (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisLock) blocker = test_obtain (other, "set1");
  RedisLock *locks[3];
  GError *error = NULL;
  Holder h = { 0 };
  gint64 start, took;

  g_test_summary ("try_lock_all waits for a lock of the set held elsewhere and has the whole set "
                  "soon after its release (woken by the unlock notification, not at the end "
                  "of the holder's 60 s TTL).");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "set", locks, 3);
  holder_start (&h, blocker, 150);
  start = test_now_ms ();
  g_assert_true (redis_lock_try_lock_all (locks, 3, 10000, NULL, &error));
  took = test_now_ms () - start;
  g_assert_no_error (error);
  g_assert_cmpint (took, >=, 100);
  g_assert_cmpint (took, <, 5000);
  assert_all_held (locks, 3, 1);
  g_assert_true (redis_lock_unlock_all (locks, 3, &error));
  g_assert_no_error (error);
  holder_finish (&h);
  assert_none_anywhere (fx, locks, 3);
  unref_set (locks, 3);
}

/* A thread in try_lock_all with no deadline, which unlocks the set when it got it. */
typedef struct
{
  RedisLock **locks;
  guint n;
  gint tid;  /* atomic: set just before the call */
  gint done; /* atomic: set after it */
  gboolean result;
  GError *error;
  gint64 returned_ms;
} AllTaker;

static gpointer
all_taker_main (gpointer data)
{
  AllTaker *t = data;

  g_atomic_int_set (&t->tid, test_thread_id ());
  t->result = redis_lock_try_lock_all (t->locks, t->n, -1, NULL, &t->error);
  t->returned_ms = test_now_ms ();
  if (t->result)
    g_assert_true (redis_lock_unlock_all (t->locks, t->n, NULL));
  g_atomic_int_set (&t->done, 1);
  return NULL;
}

static gboolean
all_taker_done (gpointer data)
{
  return g_atomic_int_get (&((AllTaker *)data)->done) != 0;
}

static void
test_no_expiry_silent_delete (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisLock) blocker = test_obtain (other, "forever1");
  const char *key = redis_lock_get_key (blocker);
  RedisLock *locks[2];
  AllTaker t = { .locks = locks, .n = G_N_ELEMENTS (locks) };
  GThread *thread;
  gint64 deleted_at;

  g_test_summary ("try_lock_all with no deadline, blocked on a key of the set that has no "
                  "expiry (PTTL -1) and is deleted without a notification, has the whole set "
                  "within 3 s of the delete.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "forever", locks, 2);
  test_lock_ok (blocker);
  /* Another client's key now, set without PX. */
  test_store_set_owner (fx, key, "someone-else", -1);
  g_assert_cmpint (test_store_get_pttl (fx, key), ==, -1);

  thread = g_thread_new ("all-taker", all_taker_main, &t);
  /* The second failed attempt is the first with notifications confirmed: the sleep
   * after it is bounded by the PTTL it read. */
  g_assert_true (test_wait_contended (fx->registry, 2, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t.tid), 10000));
  g_assert_false (all_taker_done (&t));

  deleted_at = test_now_ms ();
  g_assert_true (test_store_delete (fx, key));
  g_assert_true (test_wait_until (all_taker_done, &t, 3000));
  g_thread_join (thread);
  g_assert_no_error (t.error);
  g_assert_true (t.result);
  g_test_message ("the set was taken %" G_GINT64_FORMAT " ms after the delete",
                  t.returned_ms - deleted_at);
  g_assert_cmpint (t.returned_ms - deleted_at, <, 3000);
  assert_none_anywhere (fx, locks, 2);
  test_unlock_lease_lost (blocker);
  unref_set (locks, 2);
}

static void
test_local_holder (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[3];
  GError *error = NULL;
  Holder h = { 0 };
  gint64 start;

  g_test_summary ("A lock of the set held by another thread of the same registry: FALSE within "
                  "the deadline, the other locks free again; once it is released the set is "
                  "had.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "set", locks, 3);
  holder_start (&h, locks[2], 0);
  start = test_now_ms ();
  g_assert_false (redis_lock_try_lock_all (locks, 3, 100, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (test_now_ms () - start, <, 2500);
  g_assert_false (redis_lock_is_held_by_current_thread (locks[0]));
  g_assert_false (redis_lock_is_acquired_in_this_process (locks[0]));
  g_assert_false (redis_lock_is_acquired_in_this_process (locks[1]));
  assert_gone (fx, locks[0]);
  holder_finish (&h);
  g_assert_true (redis_lock_try_lock_all (locks, 3, 1000, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (redis_lock_unlock_all (locks, 3, &error));
  assert_none_anywhere (fx, locks, 3);
  unref_set (locks, 3);
}

/* --- No deadlock -------------------------------------------------------------------- */

#define CROSS_ROUNDS 1500

typedef struct
{
  TestFixture *fx;
  RedisLock *sets[2][2]; /* each thread's {a, b}, in the order it lists them */
  gint inside;
  gint overlaps;
  gint failures;
} Cross;

static void
cross_thread (guint index, gpointer data)
{
  Cross *c = data;
  g_autoptr (TestCounter) counter = test_counter_open (c->fx, "cross-counter");

  for (guint i = 0; i < CROSS_ROUNDS; i++)
    {
      GError *error = NULL;

      if (!redis_lock_try_lock_all (c->sets[index], 2, -1, NULL, &error))
        {
          g_printerr ("try_lock_all: %s\n", error ? error->message : "timeout");
          g_clear_error (&error);
          g_atomic_int_inc (&c->failures);
          continue;
        }
      if (g_atomic_int_add (&c->inside, 1) != 0)
        g_atomic_int_inc (&c->overlaps);
      test_counter_set (counter, test_counter_get (counter) + 1);
      g_atomic_int_add (&c->inside, -1);
      if (!redis_lock_unlock_all (c->sets[index], 2, &error))
        {
          g_printerr ("unlock_all: %s\n", error->message);
          g_clear_error (&error);
          g_atomic_int_inc (&c->failures);
        }
    }
}

/* Two threads take {a, b} and {b, a}; with @two_registries each thread has a registry of
 * its own, so the locks contend in the store as between two processes. */
static void
run_cross (TestFixture *fx, gboolean two_registries)
{
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r2 = two_registries ? test_registry_new (fx) : NULL;
  RedisLockRegistry *regs[2] = { r1, two_registries ? r2 : r1 };
  g_autoptr (TestCounter) counter = NULL;
  Cross c = { .fx = fx };

  for (guint t = 0; t < 2; t++)
    {
      c.sets[t][t] = test_obtain (regs[t], "cross-a");
      c.sets[t][1 - t] = test_obtain (regs[t], "cross-b");
    }
  test_run_threads (2, cross_thread, &c);
  g_assert_cmpint (c.failures, ==, 0);
  g_assert_cmpint (c.overlaps, ==, 0);
  counter = test_counter_open (fx, "cross-counter");
  g_assert_cmpint (test_counter_get (counter), ==, 2 * CROSS_ROUNDS);
  for (guint t = 0; t < 2; t++)
    unref_set (c.sets[t], 2);
}

static void
test_cross_one_registry (TestFixture *fx, gconstpointer data)
{
  g_test_summary ("Two threads of one registry take {a,b} and {b,a} 1500 times each, waiting "
                  "forever: no deadlock, never inside together, the shared counter exact.");
  TEST_SKIP_IF_NO_STORE (fx);
  run_cross (fx, FALSE);
}

static void
test_cross_two_registries (TestFixture *fx, gconstpointer data)
{
  g_test_summary ("The same with one registry per thread, so the sets contend in the store as "
                  "between two processes: no deadlock, counter exact.");
  TEST_SKIP_IF_NO_STORE (fx);
  run_cross (fx, TRUE);
}

/* --- Round trips ------------------------------------------------------------------- */

static void
test_one_round_trip (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[10];
  RedisLockRegistryStats before, after;
  GError *error = NULL;

  g_test_summary ("Ten free locks of one registry are taken in one round trip, and released in "
                  "one; on a Redis server, free leases are taken by plain SET NX, no script.");
  TEST_SKIP_IF_NO_STORE (fx);
  if (fx->store == TEST_STORE_QUORUM)
    {
      g_test_skip ("a quorum registry takes the locks of a set one at a time");
      return;
    }

  obtain_set (fx->registry, "ten", locks, 10);
  /* The first ones load the scripts (NOSCRIPT, then EVAL). */
  g_assert_true (redis_lock_try_lock_all (locks, 10, 0, NULL, &error));
  g_assert_true (redis_lock_unlock_all (locks, 10, &error));
  g_assert_no_error (error);

  if (fx->store == TEST_STORE_REDIS)
    test_redis_reset_stats (fx->redis);
  redis_lock_registry_get_stats (fx->registry, &before);
  g_assert_true (redis_lock_try_lock_all (locks, 10, 0, NULL, &error));
  g_assert_no_error (error);
  redis_lock_registry_get_stats (fx->registry, &after);
  g_assert_cmpuint (after.round_trips - before.round_trips, ==, 1);
  g_assert_cmpuint (after.acquisitions - before.acquisitions, ==, 10);
  if (fx->store == TEST_STORE_REDIS)
    {
      /* Free leases go the cheap way, as a single one does: a plain SET NX each, no
       * script. */
      g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 0);
      g_assert_cmpint (test_redis_command_calls (fx->redis, "set"), ==, 10);
    }

  redis_lock_registry_get_stats (fx->registry, &before);
  g_assert_true (redis_lock_unlock_all (locks, 10, &error));
  g_assert_no_error (error);
  redis_lock_registry_get_stats (fx->registry, &after);
  g_assert_cmpuint (after.round_trips - before.round_trips, ==, 1);
  g_assert_cmpuint (after.releases - before.releases, ==, 10);
  assert_none_anywhere (fx, locks, 10);
  unref_set (locks, 10);
}

/* --- Re-entry, duplicates, several registries ---------------------------------------- */

static void
test_reentrant (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisLock) blocker = test_obtain (other, "re2");
  RedisLock *locks[3];
  RedisLockRegistryStats before, after;
  GError *error = NULL;

  g_test_summary ("A lock the thread holds already counts one more hold (no store request for "
                  "it) and loses it again when the set cannot be had; unlock_all drops one hold "
                  "of each.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "re", locks, 3);
  test_lock_ok (locks[0]);
  redis_lock_registry_get_stats (fx->registry, &before);
  g_assert_true (redis_lock_try_lock_all (locks, 2, 0, NULL, &error));
  redis_lock_registry_get_stats (fx->registry, &after);
  g_assert_no_error (error);
  g_assert_cmpuint (after.acquisitions - before.acquisitions, ==, 1);
  g_assert_cmpuint (redis_lock_get_hold_count (locks[0]), ==, 2);
  g_assert_cmpuint (redis_lock_get_hold_count (locks[1]), ==, 1);
  g_assert_true (redis_lock_unlock_all (locks, 2, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (redis_lock_get_hold_count (locks[0]), ==, 1);
  g_assert_false (redis_lock_is_acquired_in_this_process (locks[1]));
  g_assert_true (test_store_exists (fx, redis_lock_get_key (locks[0])));
  assert_gone (fx, locks[1]);

  /* The set cannot be had: the extra hold goes again, the first one stays. */
  test_lock_ok (blocker);
  g_assert_false (redis_lock_try_lock_all (locks, 3, 50, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (redis_lock_get_hold_count (locks[0]), ==, 1);
  g_assert_false (redis_lock_is_acquired_in_this_process (locks[1]));
  g_assert_true (test_store_exists (fx, redis_lock_get_key (locks[0])));
  assert_gone (fx, locks[1]);
  test_unlock_ok (blocker);
  test_unlock_ok (locks[0]);
  assert_none_anywhere (fx, locks, 3);
  unref_set (locks, 3);
}

static void
test_duplicates (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[2];
  GError *error = NULL;

  g_test_summary ("A lock listed twice is taken once (one hold) and released once.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "dup", locks, 2);
  {
    RedisLock *listed[] = { locks[0], locks[1], locks[0], locks[1], locks[0] };
    g_assert_true (redis_lock_try_lock_all (listed, 5, 0, NULL, &error));
    g_assert_no_error (error);
    assert_all_held (locks, 2, 1);
    g_assert_true (redis_lock_unlock_all (listed, 5, &error));
    g_assert_no_error (error);
  }
  assert_none_anywhere (fx, locks, 2);
  unref_set (locks, 2);
}

static void
test_several_registries (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r2 = redis_lock_registry_new (fx->url, "rltest-other", NULL);
  g_autoptr (RedisLockRegistry) stranger = NULL;
  g_autoptr (RedisLock) blocker = NULL;
  RedisLock *locks[4];
  GError *error = NULL;

  g_test_summary ("Locks of two registries (two registry keys) in one set: all had together; "
                  "with one of the second registry's held elsewhere, none of either is held or "
                  "left in the store.");
  TEST_SKIP_IF_NO_STORE (fx);
  g_assert_nonnull (r2);

  obtain_set (fx->registry, "multi", locks, 2);
  obtain_set (r2, "multi", locks + 2, 2);
  g_assert_true (redis_lock_try_lock_all (locks, 4, 0, NULL, &error));
  g_assert_no_error (error);
  assert_all_held (locks, 4, 1);
  g_assert_true (redis_lock_unlock_all (locks, 4, &error));
  g_assert_no_error (error);
  assert_none_anywhere (fx, locks, 4);

  stranger = redis_lock_registry_new (fx->url, "rltest-other", NULL);
  blocker = test_obtain (stranger, "multi1");
  test_lock_ok (blocker);
  g_assert_false (redis_lock_try_lock_all (locks, 4, 100, NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 3; i++)
    {
      g_assert_false (redis_lock_is_acquired_in_this_process (locks[i]));
      assert_gone (fx, locks[i]);
    }
  test_unlock_ok (blocker);
  unref_set (locks, 4);
}

static void
test_fenced_set (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[3];
  guint64 first[3];
  GError *error = NULL;

  guint64 held;

  g_test_summary ("With fencing on, each lock of a set gets its own token, higher on the next "
                  "acquisition; re-entered locks keep theirs.");
  TEST_SKIP_IF_NO_STORE (fx);

  redis_lock_registry_set_fencing (fx->registry, TRUE);
  obtain_set (fx->registry, "fenced", locks, 3);
  test_lock_ok (locks[0]);
  held = redis_lock_get_fencing_token (locks[0]);
  g_assert_cmpuint (held, >, 0);
  g_assert_true (redis_lock_try_lock_all (locks, 3, 0, NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 3; i++)
    {
      first[i] = redis_lock_get_fencing_token (locks[i]);
      g_assert_cmpuint (first[i], >, 0);
    }
  g_assert_cmpuint (first[0], ==, held);
  g_assert_true (redis_lock_unlock_all (locks, 3, &error));
  test_unlock_ok (locks[0]);
  g_assert_true (redis_lock_try_lock_all (locks, 3, 0, NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpuint (redis_lock_get_fencing_token (locks[i]), >, first[i]);
  g_assert_true (redis_lock_unlock_all (locks, 3, &error));
  unref_set (locks, 3);
}

/* --- Failures -------------------------------------------------------------------------- */

static void
test_closed_registry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) doomed = test_registry_new (fx);
  RedisLock *locks[3];
  GError *error = NULL;

  g_test_summary ("A set with a lock of a closed registry fails with CLOSED and takes none of "
                  "the others.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "open", locks, 2);
  locks[2] = test_obtain (doomed, "closed");
  redis_lock_registry_close (doomed);
  g_assert_false (redis_lock_try_lock_all (locks, 3, 100, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);
  assert_none_anywhere (fx, locks, 2);
  /* Not held here, and of a closed registry: the first error met (in the reverse of the
   * canonical order, which depends on the registries' addresses) is either. */
  g_assert_false (redis_lock_unlock_all (locks, 3, &error));
  g_assert_true (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER)
                 || g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED));
  g_clear_error (&error);
  unref_set (locks, 3);
}

static void
test_invalid_fenced_name (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[2];
  GError *error = NULL;

  g_test_summary ("With fencing on, a set with a name that cannot be fenced fails with INVALID "
                  "before anything is taken.");
  TEST_SKIP_IF_NO_STORE (fx);

  redis_lock_registry_set_fencing (fx->registry, TRUE);
  locks[0] = test_obtain (fx->registry, "fine");
  locks[1] = test_obtain (fx->registry, "not}fine");
  g_assert_false (redis_lock_try_lock_all (locks, 2, 100, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
  assert_none_anywhere (fx, locks, 2);
  unref_set (locks, 2);
}

static gpointer
cancel_later (gpointer cancellable)
{
  g_usleep (100000);
  g_cancellable_cancel (cancellable);
  return NULL;
}

static void
test_cancelled (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisLock) blocker = test_obtain (other, "cancel1");
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  RedisLock *locks[2];
  GError *error = NULL;
  Holder h = { 0 };
  GThread *canceller;
  gint64 start;

  g_test_summary ("Cancelled while waiting for the store (a lock held elsewhere) or for a local "
                  "mutex: G_IO_ERROR_CANCELLED at once, nothing held.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "cancel", locks, 2);
  test_lock_ok (blocker);
  canceller = g_thread_new ("canceller", cancel_later, cancellable);
  start = test_now_ms ();
  g_assert_false (redis_lock_try_lock_all (locks, 2, 20000, cancellable, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  g_assert_cmpint (test_now_ms () - start, <, 5000);
  g_thread_join (canceller);
  assert_none_anywhere (fx, locks, 1);
  test_unlock_ok (blocker);

  g_cancellable_reset (cancellable);
  holder_start (&h, locks[1], 0);
  canceller = g_thread_new ("canceller", cancel_later, cancellable);
  g_assert_false (redis_lock_try_lock_all (locks, 2, 20000, cancellable, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  g_thread_join (canceller);
  g_assert_false (redis_lock_is_acquired_in_this_process (locks[0]));
  holder_finish (&h);
  assert_none_anywhere (fx, locks, 2);
  unref_set (locks, 2);
}

static void
test_unlock_all_errors (TestFixture *fx, gconstpointer data)
{
  RedisLock *locks[3];
  GError *error = NULL;

  g_test_summary ("unlock_all reports the first error (a lock not held: NOT_OWNER; a lost "
                  "lease: LEASE_LOST) and still releases every other lock.");
  TEST_SKIP_IF_NO_STORE (fx);

  obtain_set (fx->registry, "un", locks, 3);
  g_assert_true (redis_lock_try_lock_all (locks, 2, 0, NULL, &error));
  g_assert_false (redis_lock_unlock_all (locks, 3, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);
  assert_none_anywhere (fx, locks, 3);

  g_assert_true (redis_lock_try_lock_all (locks, 3, 0, NULL, &error));
  g_assert_true (test_store_delete (fx, redis_lock_get_key (locks[1])));
  g_assert_false (redis_lock_unlock_all (locks, 3, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  assert_none_anywhere (fx, locks, 3);
  unref_set (locks, 3);
}

/* --- Programming errors --------------------------------------------------------------- */

static void
test_bad_array (gconstpointer data)
{
  const char *which = data;

  g_test_summary ("A NULL array, n == 0 or a NULL element is a critical for try_lock_all and "
                  "unlock_all, which then take and release nothing.");
  if (g_test_subprocess ())
    {
      g_autoptr (RedisLockRegistry) r = redis_lock_registry_new ("memory://multilock-bad",
                                                                 TEST_REGISTRY_KEY, NULL);
      g_autoptr (RedisLock) lock = test_obtain (r, "x");
      RedisLock *with_null[] = { lock, NULL };
      gboolean ok = TRUE;

      if (strcmp (which, "try-null-array") == 0)
        ok = redis_lock_try_lock_all (NULL, 1, 0, NULL, NULL);
      else if (strcmp (which, "try-zero") == 0)
        ok = redis_lock_try_lock_all (&lock, 0, 0, NULL, NULL);
      else if (strcmp (which, "try-null-element") == 0)
        ok = redis_lock_try_lock_all (with_null, 2, 0, NULL, NULL);
      else if (strcmp (which, "unlock-null-array") == 0)
        ok = redis_lock_unlock_all (NULL, 1, NULL);
      else if (strcmp (which, "unlock-zero") == 0)
        ok = redis_lock_unlock_all (&lock, 0, NULL);
      else if (strcmp (which, "unlock-null-element") == 0)
        ok = redis_lock_unlock_all (with_null, 2, NULL);
      g_assert_false (ok);
      g_assert_false (redis_lock_is_acquired_in_this_process (lock));
      return;
    }
  g_test_trap_subprocess (NULL, 20 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*CRITICAL*redis_lock_*_all*");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  test_add_stores ("/multilock/basic/all-and-back", NULL, test_all_and_back);
  test_add_stores ("/multilock/none/one-held-elsewhere", NULL, test_one_held_elsewhere);
  test_add_stores ("/multilock/none/local-holder", NULL, test_local_holder);
  test_add_stores ("/multilock/wait/for-release", NULL, test_waits_for_release);
  test_add_stores ("/multilock/wait/no-expiry-silent-delete", NULL, test_no_expiry_silent_delete);
  test_add_stores ("/multilock/deadlock/one-registry", NULL, test_cross_one_registry);
  test_add_stores ("/multilock/deadlock/two-registries", NULL, test_cross_two_registries);
  test_add_stores ("/multilock/round-trips/one-per-group", NULL, test_one_round_trip);
  test_add_stores ("/multilock/holds/reentrant", NULL, test_reentrant);
  test_add_stores ("/multilock/holds/duplicates", NULL, test_duplicates);
  test_add_stores ("/multilock/holds/several-registries", NULL, test_several_registries);
  test_add_stores_but_quorum ("/multilock/fencing/token-each", NULL, test_fenced_set);
  test_add_stores ("/multilock/errors/closed-registry", NULL, test_closed_registry);
  test_add_stores_but_quorum ("/multilock/errors/invalid-fenced-name", NULL,
                              test_invalid_fenced_name);
  test_add_stores ("/multilock/errors/cancelled", NULL, test_cancelled);
  test_add_stores ("/multilock/errors/unlock-all-reports-first", NULL, test_unlock_all_errors);
  g_test_add_data_func ("/multilock/bad-input/try-null-array", "try-null-array", test_bad_array);
  g_test_add_data_func ("/multilock/bad-input/try-zero", "try-zero", test_bad_array);
  g_test_add_data_func ("/multilock/bad-input/try-null-element", "try-null-element",
                        test_bad_array);
  g_test_add_data_func ("/multilock/bad-input/unlock-null-array", "unlock-null-array",
                        test_bad_array);
  g_test_add_data_func ("/multilock/bad-input/unlock-zero", "unlock-zero", test_bad_array);
  g_test_add_data_func ("/multilock/bad-input/unlock-null-element", "unlock-null-element",
                        test_bad_array);
  return g_test_run ();
}
