/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* handoff.c: lease retention for threads of one registry.
 *
 * When the outermost holder unlocks while other threads of the same registry wait,
 * the lease is handed to the next of them instead of being released and taken again,
 * up to max_local_handoffs times in a row; then it is released so other processes get
 * their turn, or, when no other client listens for the release, kept for one more
 * streak. These tests check the saving (Redis commands per critical section, with
 * and without another registry listening), that a remote waiter is not starved (by
 * threads handing the lease around, or by one thread that had to wait for the lock
 * and then locks in a loop: it yields every few holds), that
 * a local waiter is not starved by a thread locking in a loop, that mutual exclusion
 * holds, that the hand-off can be disabled, and that without the watchdog a hand-off
 * refreshes the TTL. Every test runs on both stores from this one source: a private
 * redis-server (`/redis/...`) and a `memory://` store of its own (`/memory/...`), which
 * counts commands and round trips as Redis does.
 */
#include "common.h"

#define SECTIONS_PER_THREAD 500
#define THREADS 8

typedef struct
{
  RedisLock *lock;
  gint inside; /* threads inside the critical section: must never exceed 1 */
  gint overlaps;
  gint failures;
  guint sections; /* sections per thread; 0: see total, then stop */
  gint total;     /* sections shared by all threads, taken by ticket */
  gint tickets;
  gulong hold_us; /* time spent inside each section */
  volatile gint stop;
  gint tids[THREADS]; /* each thread's kernel id, set (atomically) as it starts */
} Hammer;

static void
hammer_thread (guint index, gpointer data)
{
  Hammer *h = data;

  if (index < THREADS)
    g_atomic_int_set (&h->tids[index], test_thread_id ());
  for (guint i = 0;; i++)
    {
      GError *error = NULL;

      if (h->sections > 0 ? i >= h->sections
          : h->total > 0  ? g_atomic_int_add (&h->tickets, 1) >= h->total
                          : g_atomic_int_get (&h->stop))
        break;
      if (!redis_lock_lock (h->lock, &error))
        {
          g_printerr ("lock: %s\n", error->message);
          g_clear_error (&error);
          g_atomic_int_inc (&h->failures);
          continue;
        }
      if (g_atomic_int_add (&h->inside, 1) != 0)
        g_atomic_int_inc (&h->overlaps);
      if (h->hold_us > 0)
        g_usleep (h->hold_us);
      g_atomic_int_add (&h->inside, -1);
      if (!redis_lock_unlock (h->lock, &error))
        {
          g_printerr ("unlock: %s\n", error->message);
          g_clear_error (&error);
          g_atomic_int_inc (&h->failures);
        }
    }
}

/* Runs THREADS threads of one registry over THREADS * SECTIONS_PER_THREAD sections of
 * one lock and returns the commands the store saw (*handoffs: the local hand-offs).
 * With @listener, a second registry waits for that lock first (and gives up), so it
 * listens for its releases from then on, as a process that waited once does. */
static guint64
commands_for_sections (TestFixture *fx, guint max_handoffs, gboolean listener, guint64 *handoffs)
{
  g_autoptr (RedisLockRegistry) r = test_registry_new (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "hot");
  g_autoptr (RedisLockRegistry) other = NULL;
  RedisLockRegistryStats before, after;
  Hammer h = { 0 };
  GThread *hammers;

  redis_lock_registry_set_max_local_handoffs (r, max_handoffs);
  h.lock = lock;
  /* Tickets rather than a quota per thread: all threads keep contending until the
   * end, instead of a last thread finishing its share alone. */
  h.total = THREADS * SECTIONS_PER_THREAD;
  /* And all of them contend from the start: this thread holds the lock until every
   * one waits for it. Otherwise the first one started can run alone for a whole time
   * slice while the others are runnable but not yet in lock(), and against a store
   * that answers without blocking (memory://) every one of its sections then takes and
   * releases the lease. */
  g_assert_true (redis_lock_lock (lock, NULL));
  if (listener)
    {
      g_autoptr (RedisLock) other_lock = NULL;
      other = test_registry_new (fx);
      other_lock = test_obtain (other, "hot");
      g_assert_false (redis_lock_try_lock_for (other_lock, 50, NULL, NULL));
    }
  hammers = test_run_threads_in_background (THREADS, hammer_thread, &h);
  test_wait_threads_blocked (h.tids, THREADS, 10000);
  /* Count from before this thread's unlock (the threads start running at once), and
   * leave out what that unlock itself did: a hand-off (no command) when hand-offs are
   * on, a release (one command) when they are off. */
  redis_lock_registry_get_stats (r, &before);
  g_assert_true (redis_lock_unlock (lock, NULL));
  g_thread_join (hammers);
  redis_lock_registry_get_stats (r, &after);
  g_assert_cmpint (h.overlaps, ==, 0);
  g_assert_cmpint (h.failures, ==, 0);
  *handoffs = after.local_handoffs - before.local_handoffs - (max_handoffs > 0 ? 1 : 0);
  return after.commands - before.commands - (max_handoffs > 0 ? 0 : 1);
}

static void
test_fewer_commands (TestFixture *fx, gconstpointer data)
{
  guint64 plain, retained, handoffs_plain, handoffs;
  guint sections = THREADS * SECTIONS_PER_THREAD;

  g_test_summary ("8 threads on one name: with hand-offs (bound 16) the store sees at most 1/16 "
                  "of the commands it sees without them, and exclusion holds in both. With no "
                  "other client listening, every other streak keeps the lease: at most 0.1 "
                  "command per critical section (0.12 on a Cluster, where every streak "
                  "releases).");
  TEST_SKIP_IF_NO_STORE (fx);

  plain = commands_for_sections (fx, 0, FALSE, &handoffs_plain);
  retained = commands_for_sections (fx, 16, FALSE, &handoffs);
  g_test_message ("%u sections: %" G_GUINT64_FORMAT
                  " commands without hand-offs, %" G_GUINT64_FORMAT " with (%" G_GUINT64_FORMAT
                  " hand-offs)",
                  sections, plain, retained, handoffs);
  g_assert_cmpuint (handoffs_plain, ==, 0);
  g_assert_cmpuint (plain, >=, 2 * sections);
  g_assert_cmpuint (handoffs, >, 0);
  g_assert_cmpuint (retained * 16, <=, plain);
  /* A Cluster cannot tell that nobody else listens (PUBLISH counts one node's
   * subscribers): every streak ends with a release, 2 commands per 17 sections. */
  if (fx->store == TEST_STORE_CLUSTER)
    g_assert_cmpuint (retained * 100, <=, sections * 12);
  else if (fx->store == TEST_STORE_QUORUM)
    g_test_message ("a quorum registry never keeps a lease: every streak ends with a release");
  else
    g_assert_cmpuint (retained * 10, <=, sections);
}

static void
test_released_when_others_listen (TestFixture *fx, gconstpointer data)
{
  guint64 retained, handoffs;
  guint sections = THREADS * SECTIONS_PER_THREAD;

  g_test_summary ("8 threads on one name while another registry listens for its releases: "
                  "every streak of 16 hand-offs ends with a release (2 commands per 17 "
                  "sections), none keeps the lease.");
  TEST_SKIP_IF_NO_STORE (fx);

  retained = commands_for_sections (fx, 16, TRUE, &handoffs);
  g_test_message ("%u sections: %" G_GUINT64_FORMAT " commands (%" G_GUINT64_FORMAT
                  " hand-offs)",
                  sections, retained, handoffs);
  g_assert_cmpuint (handoffs, >, 0);
  /* Released streaks cost 2 commands per 17 sections (0.118 per section); keeping
   * every other one would bring it to 3 per 34 (0.088). */
  g_assert_cmpuint (retained * 10, >, sections);
}

typedef struct
{
  RedisLock *lock;
  gint tid;
  gint got; /* set while holding the lock */
} Waiter;

static gpointer
waiter_thread (gpointer data)
{
  Waiter *w = data;

  g_atomic_int_set (&w->tid, test_thread_id ());
  g_assert_true (redis_lock_lock (w->lock, NULL));
  g_atomic_int_set (&w->got, 1);
  g_assert_true (redis_lock_unlock (w->lock, NULL));
  return NULL;
}

static gboolean
waiter_started (gpointer data)
{
  return g_atomic_int_get (&((Waiter *) data)->tid) != 0;
}

static void
test_local_waiter_gets_turn (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  Waiter w = { 0 };
  GThread *thread;
  guint rounds = 0;

  g_test_summary ("A thread that unlocks and at once locks again, in a loop, takes the lock "
                  "back before the woken waiter runs only a few times in a row: the waiter "
                  "gets it within 8 rounds.");
  TEST_SKIP_IF_NO_STORE (fx);

  r = test_registry_new (fx);
  lock = test_obtain (r, "turns");
  w.lock = lock;
  test_lock_ok (lock);
  thread = g_thread_new ("waiter", waiter_thread, &w);
  g_assert_true (test_wait_until (waiter_started, &w, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&w.tid), 10000));
  /* The waiter sets got while it holds the lock, so once lock() returns here after
   * the waiter's turn, got is visible. */
  while (!g_atomic_int_get (&w.got) && rounds < 1000)
    {
      test_unlock_ok (lock);
      test_lock_ok (lock);
      rounds++;
    }
  test_unlock_ok (lock);
  g_thread_join (thread);
  g_test_message ("the waiter got the lock after %u rounds", rounds);
  g_assert_cmpint (g_atomic_int_get (&w.got), ==, 1);
  g_assert_cmpuint (rounds, <=, 8);
}

static void
test_remote_waiter_gets_turn (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) local = NULL;
  g_autoptr (RedisLockRegistry) remote = NULL;
  g_autoptr (RedisLock) local_lock = NULL;
  g_autoptr (RedisLock) remote_lock = NULL;
  RedisLockRegistryStats before, after;
  TestTaker w = { 0 };
  Hammer h = { 0 };
  GThread *hammers, *waiter;

  g_test_summary ("Four threads of one registry keep a lock busy with hand-offs; a waiter in "
                  "another registry still gets it within a few hand-off streaks.");
  TEST_SKIP_IF_NO_STORE (fx);

  local = test_registry_new (fx);
  remote = test_registry_new (fx);
  local_lock = test_obtain (local, "shared");
  remote_lock = test_obtain (remote, "shared");

  h.lock = local_lock;
  h.sections = 0; /* until stopped */
  h.total = 0;
  h.hold_us = 100;
  hammers = test_run_threads_in_background (4, hammer_thread, &h);
  /* The local threads are handing the lease around before the remote one arrives. */
  TEST_WAIT_UNTIL (test_stats (local).local_handoffs >= 20, 10000);

  redis_lock_registry_get_stats (local, &before);
  waiter = test_taker_start (&w, remote_lock, 10000);
  g_thread_join (waiter);
  redis_lock_registry_get_stats (local, &after);
  g_atomic_int_set (&h.stop, 1);
  g_thread_join (hammers);

  g_test_message ("remote waited %" G_GINT64_FORMAT
                  " ms; local acquisitions meanwhile %" G_GUINT64_FORMAT,
                  w.returned_ms - w.called_ms, after.acquisitions - before.acquisitions);
  g_assert_no_error (w.error);
  g_assert_true (w.result);
  /* Each streak ends with a release; the remote waiter must win one of the first few
   * races, not wait for the local threads to run out of work. */
  g_assert_cmpuint (after.acquisitions - before.acquisitions, <=, 10);
  g_assert_cmpint (h.overlaps, ==, 0);
  g_assert_cmpint (h.failures, ==, 0);
}

/* One hold of @lock, taken without waiting. */
static void
hold_once (RedisLock *lock)
{
  g_assert_true (redis_lock_lock (lock, NULL));
  g_assert_true (redis_lock_unlock (lock, NULL));
}

static void
test_holder_yields_after_contention (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) looper = NULL;
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) other_lock = NULL;
  TestTaker t = { 0 };
  GThread *taker;
  guint64 contended;

  g_test_summary ("A single thread locking in a loop while another registry listens: it "
                  "never yields while nobody contends; after it had to wait for the other "
                  "registry, every fourth hold in a row ends with a yield, and after four "
                  "yields nobody used, it stops.");
  TEST_SKIP_IF_NO_STORE (fx);

  looper = test_registry_new (fx);
  other = test_registry_new (fx);
  lock = test_obtain (looper, "loop");
  other_lock = test_obtain (other, "loop");

  /* The other registry waits once, so it listens for releases from then on. */
  g_assert_true (redis_lock_lock (lock, NULL));
  g_assert_false (redis_lock_try_lock_for (other_lock, 50, NULL, NULL));
  g_assert_true (redis_lock_unlock (lock, NULL));
  for (guint i = 0; i < 10; i++)
    hold_once (lock);
  g_assert_cmpuint (test_stats (looper).yields, ==, 0);

  /* The looper has to wait for the other registry: its first hold after that. */
  g_assert_true (redis_lock_lock (other_lock, NULL));
  contended = test_stats (looper).contended_attempts;
  taker = test_taker_start (&t, lock, 10000);
  TEST_WAIT_UNTIL (test_stats (looper).contended_attempts > contended, 10000);
  g_assert_true (redis_lock_unlock (other_lock, NULL));
  test_taker_join (&t, taker, 10000);
  g_assert_no_error (t.error);
  g_assert_true (t.result);
  test_taker_clear (&t);

  /* That was hold 1. The release of hold 4 tells the next acquisition to yield;
   * nobody takes the lock meanwhile, which may mean a slow waiter, so the count goes
   * on: holds 5, 9, 13 and 17 each begin with a yield (each twice as long). After
   * four unused yields in a row, no more without a new wait. */
  for (guint hold = 2; hold <= 30; hold++)
    {
      hold_once (lock);
      g_assert_cmpuint (test_stats (looper).yields, ==, MIN ((hold - 1) / 4, 4));
    }
}

static void
test_spin_waiter_gets_turn (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) local = NULL;
  g_autoptr (RedisLockRegistry) remote = NULL;
  g_autoptr (RedisLock) local_lock = NULL;
  g_autoptr (RedisLock) remote_lock = NULL;
  TestTaker w = { 0 };
  Hammer h = { 0 };
  GThread *hammers, *waiter;

  g_test_summary ("Four threads of one registry keep a lock busy with hand-offs while nobody "
                  "listens for its releases, so streaks alternately keep and release the "
                  "lease; a SPIN-mode waiter in another registry, which polls and never "
                  "listens, still finds the key free at one of those releases.");
  TEST_SKIP_IF_NO_STORE (fx);

  local = test_registry_new (fx);
  remote = test_registry_new (fx);
  redis_lock_registry_set_wait_mode (remote, REDIS_LOCK_WAIT_SPIN);
  redis_lock_registry_set_idle_between_tries_ms (remote, 1);
  local_lock = test_obtain (local, "shared");
  remote_lock = test_obtain (remote, "shared");

  h.lock = local_lock;
  h.hold_us = 100;
  hammers = test_run_threads_in_background (4, hammer_thread, &h);
  TEST_WAIT_UNTIL (test_stats (local).local_handoffs >= 40, 10000);

  waiter = test_taker_start (&w, remote_lock, 20000);
  g_thread_join (waiter);
  g_atomic_int_set (&h.stop, 1);
  g_thread_join (hammers);

  g_test_message ("remote waited %" G_GINT64_FORMAT " ms", w.returned_ms - w.called_ms);
  g_assert_no_error (w.error);
  g_assert_true (w.result);
  g_assert_cmpint (h.overlaps, ==, 0);
  g_assert_cmpint (h.failures, ==, 0);
}

typedef struct
{
  TestFixture *fx;
  RedisLock *locks[2];
  gint inside;
  gint overlaps;
  gint tids[8]; /* each thread's kernel id, set (atomically) once it is ready to start */
} Exclusion;

static void
exclusion_thread (guint index, gpointer data)
{
  Exclusion *x = data;
  RedisLock *lock = x->locks[index % 2];
  g_autoptr (TestCounter) counter = test_counter_open (x->fx, "handoff-counter");

  g_atomic_int_set (&x->tids[index], test_thread_id ());
  for (int i = 0; i < 150; i++)
    {
      gint64 value;
      g_assert_true (redis_lock_lock (lock, NULL));
      if (g_atomic_int_add (&x->inside, 1) != 0)
        g_atomic_int_inc (&x->overlaps);
      value = test_counter_get (counter);
      test_counter_set (counter, value + 1);
      g_atomic_int_add (&x->inside, -1);
      g_assert_true (redis_lock_unlock (lock, NULL));
    }
}

static void
test_mutual_exclusion (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (TestCounter) total = NULL;
  Exclusion x = { fx, { NULL, NULL }, 0, 0, { 0 } };
  RedisLockRegistryStats sa0, sb0, sa, sb;
  GThread *runner;

  g_test_summary ("Two registries x 4 threads with hand-offs on: a non-atomic shared counter "
                  "ends exact and no two threads are ever inside together.");
  TEST_SKIP_IF_NO_STORE (fx);

  a = test_registry_new (fx);
  b = test_registry_new (fx);
  x.locks[0] = test_obtain (a, "counter");
  x.locks[1] = test_obtain (b, "counter");
  /* All eight contend from the start: this thread holds the lock (through registry a)
   * until every one of them waits, so that a's threads queue for each other and the
   * first unlock already has someone to hand the lease to, however the threads
   * happen to be scheduled. */
  g_assert_true (redis_lock_lock (x.locks[0], NULL));
  runner = test_run_threads_in_background (G_N_ELEMENTS (x.tids), exclusion_thread, &x);
  test_wait_threads_blocked (x.tids, G_N_ELEMENTS (x.tids), 10000);
  g_assert_true (redis_lock_unlock (x.locks[0], NULL));
  /* That unlock handed the lease to one of them: count only theirs. */
  redis_lock_registry_get_stats (a, &sa0);
  redis_lock_registry_get_stats (b, &sb0);
  g_thread_join (runner);
  redis_lock_registry_get_stats (a, &sa);
  redis_lock_registry_get_stats (b, &sb);
  g_assert_cmpint (x.overlaps, ==, 0);
  total = test_counter_open (fx, "handoff-counter");
  g_assert_cmpint (test_counter_get (total), ==, 8 * 150);
  g_assert_cmpuint (sa.local_handoffs - sa0.local_handoffs + sb.local_handoffs - sb0.local_handoffs,
                    >, 0);
  redis_lock_unref (x.locks[0]);
  redis_lock_unref (x.locks[1]);
}

static void
test_ttl_refreshed_without_watchdog (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats stats;
  Hammer h = { 0 };

  g_test_summary ("Watchdog off, TTL 300 ms: two threads holding 60 ms each hand the lease "
                  "back and forth for about 1.2 s; every hand-off refreshes the TTL, so no "
                  "unlock reports a lost lease.");
  TEST_SKIP_IF_NO_STORE (fx);

  r = test_registry_new (fx);
  lock = test_obtain (r, "slow");
  redis_lock_registry_set_watchdog (r, FALSE);
  redis_lock_registry_set_expire_after_ms (r, 300);
  h.lock = lock;
  h.sections = 10;
  h.hold_us = 60000;
  test_run_threads (2, hammer_thread, &h);
  redis_lock_registry_get_stats (r, &stats);
  g_assert_cmpuint (stats.local_handoffs, >=, 10);
  g_assert_cmpint (h.failures, ==, 0);
  g_assert_cmpint (h.overlaps, ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  test_add_stores ("/handoff/commands/fewer-with-retention", NULL, test_fewer_commands);
  test_add_stores ("/handoff/commands/released-when-others-listen", NULL,
                   test_released_when_others_listen);
  test_add_stores ("/handoff/fairness/remote-waiter-gets-turn", NULL, test_remote_waiter_gets_turn);
  test_add_stores ("/handoff/fairness/spin-waiter-gets-turn", NULL, test_spin_waiter_gets_turn);
  test_add_stores ("/handoff/fairness/holder-yields-after-contention", NULL,
                   test_holder_yields_after_contention);
  test_add_stores ("/handoff/fairness/local-waiter-gets-turn", NULL,
                   test_local_waiter_gets_turn);
  test_add_stores ("/handoff/exclusion/two-registries", NULL, test_mutual_exclusion);
  test_add_stores ("/handoff/ttl/refreshed-without-watchdog", NULL,
                   test_ttl_refreshed_without_watchdog);
  return g_test_run ();
}
