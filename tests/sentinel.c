/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* sentinel.c: locks on a master watched by Sentinels (redis-sentinel:// URLs), and
 * replica acknowledgement (redis_lock_registry_set_min_replicas()).
 *
 * Every test runs against real redis-server and redis-sentinel processes on loopback
 * ports, started by the public test helper: discovery, a forced failover while idle,
 * a failover that loses a lease (the replica forgot it: the registry must say so
 * within about a second, long before any watchdog tick would), a failover under load
 * with every write acknowledged by the replica, a failover to a replica whose fencing
 * counter fell behind (tokens must still rise), WAIT against a paused replica, and
 * the errors of unreachable Sentinels and unknown master names, and a waiter woken
 * by a key deleted on the master without an unlock notification (key tracking).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY

static int
node_port (RedisLockTestSentinel *s, guint node)
{
  const char *url = redis_lock_test_sentinel_get_node_url (s, node);
  const char *colon = strrchr (url, ':');

  g_assert_nonnull (colon);
  return atoi (colon + 1);
}

static redisContext *
node_connect (RedisLockTestSentinel *s, guint node)
{
  struct timeval tv = { 5, 0 };
  redisContext *c = redisConnectWithTimeout ("127.0.0.1", node_port (s, node), tv);

  g_assert_nonnull (c);
  g_assert_cmpint (c->err, ==, 0);
  redisSetTimeout (c, tv);
  return c;
}

static char *
node_get (RedisLockTestSentinel *s, guint node, const char *key)
{
  redisContext *c = node_connect (s, node);
  char *value = test_redis_get (c, key);

  redisFree (c);
  return value;
}

static void
wait_replicated (RedisLockTestSentinel *s, guint node, const char *key, const char *value)
{
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  for (;;)
    {
      g_autofree char *got = node_get (s, node, key);
      if (g_strcmp0 (got, value) == 0)
        return;
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (2000);
    }
}

/* --- Discovery and failover --------------------------------------------------------- */

static void
test_basic (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *value = NULL;
  int master;

  g_test_summary ("Through a Sentinel URL the registry finds the master: the key is written "
                  "there, and unlock deletes it");
  if (s == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  lock = test_obtain (registry, "basic");
  test_lock_ok (lock);
  master = redis_lock_test_sentinel_get_master (s);
  g_assert_cmpint (master, ==, 0);
  value = node_get (s, 0, redis_lock_get_key (lock));
  test_assert_value_of (value, registry);
  test_unlock_ok (lock);
  g_assert_null (node_get (s, 0, redis_lock_get_key (lock)));
}

static void
test_silent_delete (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockRegistryStats stats;
  TestTaker taker = { 0 };
  GThread *thread;
  redisContext *master;
  gint64 deleted_at;

  g_test_summary ("Through a Sentinel URL, a lock() blocked on a key that a client outside the "
                  "library holds (30 s TTL) proceeds soon after that client deletes the key "
                  "without publishing: key tracking runs on the master");
  if (s == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  redis_lock_registry_set_key_tracking (registry, TRUE);
  lock = test_obtain (registry, "silent");
  master = node_connect (s, redis_lock_test_sentinel_get_master (s));
  freeReplyObject (test_redis_command (master, "SET %s foreign-holder PX 30000",
                                       redis_lock_get_key (lock)));
  /* Wait once first, so the subscription and its key tracking are up. */
  g_assert_false (redis_lock_try_lock_for (lock, 300, NULL, &error));
  g_assert_no_error (error);
  redis_lock_registry_get_stats (registry, &stats);
  thread = test_taker_start (&taker, lock, G_MININT64);
  g_assert_true (test_wait_contended (registry, stats.contended_attempts + 1, 10000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&taker.tid), 10000));
  deleted_at = test_now_ms ();
  g_assert_cmpint (test_redis_integer (master, "DEL %s", redis_lock_get_key (lock)), ==, 1);
  redisFree (master);
  test_taker_join (&taker, thread, 5000);
  g_assert_no_error (taker.error);
  g_assert_true (taker.result);
  g_test_message ("the waiter proceeded %" G_GINT64_FORMAT " ms after the DEL",
                  taker.returned_ms - deleted_at);
  g_assert_cmpint (taker.returned_ms - deleted_at, <, 1000);
  test_taker_clear (&taker);
}

static void
test_failover_idle (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  int master;
  gboolean acquired = FALSE;
  gint64 t0;

  g_test_summary ("After a forced failover while idle, the next acquisitions go to the new "
                  "master");
  if (s == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  lock = test_obtain (registry, "idle");
  test_lock_ok (lock);
  test_unlock_ok (lock);

  master = redis_lock_test_sentinel_failover (s, 30000, &error);
  g_assert_no_error (error);
  g_assert_cmpint (master, ==, 1);
  /* The old master keeps answering as master for seconds after the Sentinels
   * switched: the registry follows the Sentinels' +switch-master event, which reaches
   * it a moment after they agreed. From then on, every acquisition goes to the new
   * master. */
  t0 = test_now_ms ();
  while (!acquired && test_now_ms () - t0 < 3000)
    {
      g_autofree char *there = NULL;
      g_clear_error (&error);
      if (!redis_lock_try_lock (lock, &error))
        continue;
      there = node_get (s, 1, redis_lock_get_key (lock));
      acquired = there != NULL;
      /* Taken on the old master just before the switch: lost with it. */
      if (!redis_lock_unlock (lock, &error))
        g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
    }
  g_clear_error (&error);
  g_test_message ("acquisitions reach the new master %" G_GINT64_FORMAT " ms after the switch",
                  test_now_ms () - t0);
  g_assert_true (acquired);
  for (int i = 0; i < 20; i++)
    {
      g_autofree char *there = NULL;
      test_lock_ok (lock);
      there = node_get (s, 1, redis_lock_get_key (lock));
      test_assert_value_of (there, registry);
      test_unlock_ok (lock);
    }
  test_lock_ok (lock);
  value = node_get (s, 1, redis_lock_get_key (lock));
  test_assert_value_of (value, registry);
  test_unlock_ok (lock);
}

static gboolean
doubtful_counted (gpointer registry)
{
  return test_stats (registry).doubtful_releases >= 1;
}

static void
test_failover_doubtful_release (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A release made on the old master right before the registry learns of a "
                  "failover may have come after the promotion (another holder could then "
                  "have had the lock on the new master): it is counted as doubtful "
                  "(stats.doubtful_releases) and logged");
  if (s == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  lock = test_obtain (registry, "doubt");
  test_lock_ok (lock);
  test_unlock_ok (lock);
  g_assert_cmpuint (test_stats (registry).doubtful_releases, ==, 0);

  g_assert_cmpint (redis_lock_test_sentinel_failover (s, 30000, &error), ==, 1);
  g_assert_no_error (error);
  g_assert_true (test_wait_until (doubtful_counted, registry, 10000));
  g_assert_cmpuint (test_stats (registry).doubtful_releases, ==, 1);
}

static void
test_failover_audit (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) kept = NULL;
  g_autoptr (RedisLock) dropped = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *kept_value = NULL, *dropped_value = NULL;
  TestLeaseLost lost;
  redisContext *replica;
  gint64 switched;

  g_test_summary ("A lease the new master does not have after a failover is reported lost "
                  "within about a second of the switch, with a 30 s TTL whose watchdog tick "
                  "cannot explain it; a lease that did replicate survives and unlocks cleanly");
  if (s == NULL)
    return;
  test_lease_lost_init (&lost);
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  redis_lock_registry_set_expire_after_ms (registry, 30000);
  redis_lock_registry_set_lease_lost_callback (registry, test_lease_lost_cb, &lost, NULL);
  kept = test_obtain (registry, "kept");
  dropped = test_obtain (registry, "dropped");
  test_lock_ok (kept);
  test_lock_ok (dropped);
  kept_value = redis_lock_dup_lease_value (kept);
  dropped_value = redis_lock_dup_lease_value (dropped);
  wait_replicated (s, 1, redis_lock_get_key (kept), kept_value);
  wait_replicated (s, 1, redis_lock_get_key (dropped), dropped_value);
  /* As if replication had not delivered it yet. */
  replica = node_connect (s, 1);
  freeReplyObject (test_redis_command (replica, "CONFIG SET replica-read-only no"));
  g_assert_cmpint (test_redis_integer (replica, "DEL %s", redis_lock_get_key (dropped)), ==, 1);
  redisFree (replica);
  /* The leases were taken a moment ago: the watchdog's next tick is 10 s away (a third
   * of the TTL), far beyond the failover. */

  g_assert_cmpint (redis_lock_test_sentinel_failover (s, 30000, &error), ==, 1);
  g_assert_no_error (error);
  switched = test_now_ms ();
  g_assert_cmpuint (test_lease_lost_wait (&lost, 5000), ==, 1);
  g_test_message ("lost reported %" G_GINT64_FORMAT " ms after the Sentinels agreed",
                  lost.at_ms - switched);
  g_assert_cmpint (lost.at_ms - switched, <, 2000);
  g_assert_true (lost.lock == dropped);
  g_assert_true (redis_lock_is_lease_lost (dropped));
  g_assert_false (redis_lock_is_lease_lost (kept));
  test_unlock_lease_lost (dropped);
  test_unlock_ok (kept);
  g_assert_null (node_get (s, 1, redis_lock_get_key (kept)));
  redis_lock_registry_close (registry);
  test_lease_lost_clear (&lost);
}

static void
test_failover_fencing (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *fence_key = NULL, *stale = NULL, *last = NULL, *on_replica = NULL;
  redisContext *replica;
  guint64 highest = 0, first_on_new = 0;
  gint64 t0;

  g_test_summary ("A failover to a replica whose fencing counter is behind the master's (the "
                  "last increments never reached it): the first token the new master hands "
                  "out, and every token after the switch wherever it is taken, is higher than "
                  "every token before");
  if (s == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  redis_lock_registry_set_fencing (registry, TRUE);
  lock = test_obtain (registry, "fenced");
  fence_key = g_strdup_printf ("fence:{%s}", redis_lock_get_key (lock));
  for (int i = 0; i < 10; i++)
    {
      test_lock_ok (lock);
      g_assert_cmpuint (redis_lock_get_fencing_token (lock), >, highest);
      highest = redis_lock_get_fencing_token (lock);
      if (i == 0)
        stale = g_strdup_printf ("%" G_GUINT64_FORMAT, highest);
      test_unlock_ok (lock);
    }
  last = g_strdup_printf ("%" G_GUINT64_FORMAT, highest);
  wait_replicated (s, 1, fence_key, last);
  /* As if the master had failed before the last nine increments reached the replica. */
  replica = node_connect (s, 1);
  freeReplyObject (test_redis_command (replica, "CONFIG SET replica-read-only no"));
  freeReplyObject (test_redis_command (replica, "SET %s %s", fence_key, stale));
  redisFree (replica);
  on_replica = node_get (s, 1, fence_key);
  g_assert_cmpstr (on_replica, ==, stale);

  g_assert_cmpint (redis_lock_test_sentinel_failover (s, 30000, &error), ==, 1);
  g_assert_no_error (error);
  /* Until the registry hears of the switch, acquisitions may still reach the old
   * master, which goes on taking writes: their tokens must rise too. */
  t0 = test_now_ms ();
  while (first_on_new == 0 && test_now_ms () - t0 < 3000)
    {
      g_autofree char *there = NULL;
      guint64 token;

      g_clear_error (&error);
      if (!redis_lock_try_lock (lock, &error))
        continue;
      token = redis_lock_get_fencing_token (lock);
      g_assert_cmpuint (token, >, highest);
      highest = token;
      there = node_get (s, 1, redis_lock_get_key (lock));
      if (test_value_is_of (there, registry))
        first_on_new = token;
      if (!redis_lock_unlock (lock, &error))
        g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
    }
  g_clear_error (&error);
  g_assert_cmpuint (first_on_new, >, 0);
  g_test_message ("first token on the new master %" G_GUINT64_FORMAT
                  " (the replica's counter was %s, the highest token before the switch %s)",
                  first_on_new, stale, last);
  for (int i = 0; i < 10; i++)
    {
      test_lock_ok (lock);
      g_assert_cmpuint (redis_lock_get_fencing_token (lock), >, highest);
      highest = redis_lock_get_fencing_token (lock);
      test_unlock_ok (lock);
    }
}

/* Threads of two registries take one lock in turns during a failover. Each section has
 * a number; a section that finds another inside (on entry, or still there on exit)
 * records the pair, and each section records whether its lease was reported lost
 * (unlock said LEASE_LOST). Two holders inside together are acceptable only when one of
 * them was told its lease was lost. */
#define LOAD_MAX_SECTIONS 100000
#define LOAD_THREADS 4

typedef struct
{
  gint a, b;
} SectionPair;

typedef struct
{
  RedisLock *locks[2];
  gint inside;
  gint current[LOAD_THREADS]; /* the section each thread is in, 0 outside */
  gint next_section;
  guint8 *lost_in; /* per section: its lease was reported lost */
  GMutex pairs_mutex;
  GArray *pairs; /* SectionPair: sections that were inside together */
  gint sections;
  gint failures;
  gint lost;
  gint stop;
} LoadRun;

static void
record_overlaps (LoadRun *run, guint me, gint section)
{
  g_mutex_lock (&run->pairs_mutex);
  for (guint t = 0; t < LOAD_THREADS; t++)
    {
      gint other = g_atomic_int_get (&run->current[t]);
      if (t != me && other != 0)
        {
          SectionPair pair = { section, other };
          g_array_append_val (run->pairs, pair);
        }
    }
  g_mutex_unlock (&run->pairs_mutex);
}

static void
load_worker (guint index, gpointer data)
{
  LoadRun *run = data;
  RedisLock *lock = run->locks[index % 2];

  while (!g_atomic_int_get (&run->stop))
    {
      g_autoptr (GError) error = NULL;
      gint section;

      if (!redis_lock_try_lock_for (lock, 2000, NULL, &error))
        {
          g_atomic_int_inc (&run->failures);
          g_usleep (1000);
          continue;
        }
      section = g_atomic_int_add (&run->next_section, 1) + 1;
      g_assert_cmpint (section, <, LOAD_MAX_SECTIONS);
      g_atomic_int_set (&run->current[index], section);
      if (g_atomic_int_add (&run->inside, 1) != 0)
        record_overlaps (run, index, section);
      g_thread_yield ();
      if (g_atomic_int_add (&run->inside, -1) != 1)
        record_overlaps (run, index, section);
      g_atomic_int_set (&run->current[index], 0);
      g_atomic_int_inc (&run->sections);
      if (!redis_lock_unlock (lock, &error))
        {
          if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
            {
              run->lost_in[section] = 1;
              g_atomic_int_inc (&run->lost);
            }
          else
            g_atomic_int_inc (&run->failures);
        }
    }
}

static void
test_failover_under_load (gconstpointer data)
{
  gboolean replicated = GPOINTER_TO_INT (data);
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (2, 1);
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (GError) error = NULL;
  LoadRun run = { 0 };
  GThread *workers;
  gint before;
  guint unreported = 0;

  if (replicated)
    g_test_summary ("Under load from two registries, with every write acknowledged by a "
                    "replica, a failover loses no lease and never lets two holders in");
  else
    g_test_summary ("Under load from two registries without replica acknowledgement, a "
                    "failover may lose leases, but two holders are inside together only when "
                    "one of them is told its lease was lost");
  if (s == NULL)
    return;
  run.lost_in = g_new0 (guint8, LOAD_MAX_SECTIONS);
  run.pairs = g_array_new (FALSE, FALSE, sizeof (SectionPair));
  g_mutex_init (&run.pairs_mutex);
  a = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  b = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  for (guint i = 0; i < 2; i++)
    {
      RedisLockRegistry *r = i == 0 ? a : b;
      if (replicated)
        redis_lock_registry_set_min_replicas (r, 1, 1000);
      redis_lock_registry_set_max_local_handoffs (r, 0);
    }
  run.locks[0] = test_obtain (a, "load");
  run.locks[1] = test_obtain (b, "load");
  workers = test_run_threads_in_background (LOAD_THREADS, load_worker, &run);
  TEST_WAIT_UNTIL (g_atomic_int_get (&run.sections) >= 20, 60000);

  g_assert_cmpint (redis_lock_test_sentinel_failover (s, 30000, &error), >, 0);
  g_assert_no_error (error);
  before = g_atomic_int_get (&run.sections);
  /* Generous: under valgrind a section takes milliseconds. */
  TEST_WAIT_UNTIL (g_atomic_int_get (&run.sections) >= before + 20, 60000);
  g_atomic_int_set (&run.stop, 1);
  g_thread_join (workers);

  for (guint i = 0; i < run.pairs->len; i++)
    {
      SectionPair *pair = &g_array_index (run.pairs, SectionPair, i);
      if (!run.lost_in[pair->a] && !run.lost_in[pair->b])
        unreported++;
    }
  g_test_message ("%d sections, %d failed attempts, %d leases lost, %u overlapping pairs",
                  run.sections, run.failures, run.lost, run.pairs->len);
  g_assert_cmpuint (unreported, ==, 0);
  if (replicated)
    {
      g_assert_cmpuint (run.pairs->len, ==, 0);
      g_assert_cmpint (run.lost, ==, 0);
    }
  redis_lock_unref (run.locks[0]);
  redis_lock_unref (run.locks[1]);
  g_array_unref (run.pairs);
  g_mutex_clear (&run.pairs_mutex);
  g_free (run.lost_in);
}

static void
test_subscription_moves (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 3);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) dropped = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  TestLeaseLost lost;
  redisContext *replica;
  gint64 switched;

  g_test_summary ("With the Sentinel the registry listened to down, the +switch-master event "
                  "still reaches it through another Sentinel: a lease the failover lost is "
                  "reported within about a second, with no call failing to give it away");
  if (s == NULL)
    return;
  test_lease_lost_init (&lost);
  registry = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  redis_lock_registry_set_expire_after_ms (registry, 30000);
  redis_lock_registry_set_lease_lost_callback (registry, test_lease_lost_cb, &lost, NULL);
  dropped = test_obtain (registry, "dropped");
  test_lock_ok (dropped);
  value = redis_lock_dup_lease_value (dropped);
  wait_replicated (s, 1, redis_lock_get_key (dropped), value);
  replica = node_connect (s, 1);
  freeReplyObject (test_redis_command (replica, "CONFIG SET replica-read-only no"));
  g_assert_cmpint (test_redis_integer (replica, "DEL %s", redis_lock_get_key (dropped)), ==, 1);
  redisFree (replica);

  /* The registry subscribes to the first Sentinel of the URL first. */
  redis_lock_test_sentinel_stop_sentinel (s, 0);
  g_assert_cmpint (redis_lock_test_sentinel_failover (s, 30000, &error), ==, 1);
  g_assert_no_error (error);
  switched = test_now_ms ();
  g_assert_cmpuint (test_lease_lost_wait (&lost, 5000), ==, 1);
  g_test_message ("lost reported %" G_GINT64_FORMAT " ms after the Sentinels agreed",
                  lost.at_ms - switched);
  g_assert_cmpint (lost.at_ms - switched, <, 2000);
  test_unlock_lease_lost (dropped);
  redis_lock_registry_close (registry);
  test_lease_lost_clear (&lost);
}

static void
test_tool (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autofree char *tool = NULL, *out = NULL;
  g_autoptr (GError) error = NULL;
  const char *argv[] = { NULL, "run", "--url", NULL, "--min-replicas", "1", "tool", "--",
                         "sh", "-c", "echo \"$REDIS_LOCK_KEY\"", NULL };
  int status = 0;

  g_test_summary ("redislock run works through a Sentinel URL with --min-replicas");
  if (s == NULL)
    return;
  tool = g_test_build_filename (G_TEST_BUILT, "..", "tools", "redislock", NULL);
  argv[0] = tool;
  argv[3] = redis_lock_test_sentinel_get_url (s);
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                               NULL, &status, &error));
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  g_assert_cmpstr (out, ==, "redislock:tool\n");
}

/* --- Replica acknowledgement -------------------------------------------------------- */

static void
test_min_replicas_paused_replica (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) first = NULL;
  g_autoptr (RedisLock) second = NULL;
  g_autoptr (GError) error = NULL;
  redisContext *master;
  gint64 t0;

  g_test_summary ("With min_replicas 1 on a single server whose replica is paused, an "
                  "acquisition fails NOT_REPLICATED within the timeout and leaves no key; with "
                  "the replica back, acquisitions succeed again");
  if (s == NULL)
    return;
  /* The master alone, by its own URL: a single server with a replica. */
  registry = test_registry_new_on (redis_lock_test_sentinel_get_node_url (s, 0));
  redis_lock_registry_set_min_replicas (registry, 1, 300);
  first = test_obtain (registry, "first");
  second = test_obtain (registry, "second");
  test_lock_ok (first);
  test_unlock_ok (first);

  redis_lock_test_sentinel_pause_node (s, 1);
  t0 = test_now_ms ();
  g_assert_false (redis_lock_try_lock (second, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_REPLICATED);
  g_assert_cmpint (test_now_ms () - t0, >=, 300);
  g_assert_cmpint (test_now_ms () - t0, <, 300 + 2000);
  g_assert_false (redis_lock_is_held_by_current_thread (second));
  master = node_connect (s, 0);
  g_assert_cmpint (test_redis_integer (master, "EXISTS %s", redis_lock_get_key (second)), ==, 0);
  redisFree (master);
  g_clear_error (&error);

  redis_lock_test_sentinel_resume_node (s, 1);
  test_lock_ok (second);
  test_unlock_ok (second);
}

static void
test_min_replicas_renewal (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("With min_replicas on, a renewal the paused replica does not acknowledge "
                  "fails NOT_REPLICATED; with it back, renewals succeed");
  if (s == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_sentinel_get_node_url (s, 0));
  redis_lock_registry_set_watchdog (registry, FALSE);
  redis_lock_registry_set_min_replicas (registry, 1, 200);
  lock = test_obtain (registry, "renewed");
  test_lock_ok (lock);
  redis_lock_test_sentinel_pause_node (s, 1);
  g_assert_false (redis_lock_registry_renew (registry, "renewed", 60000, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_REPLICATED);
  g_clear_error (&error);
  redis_lock_test_sentinel_resume_node (s, 1);
  g_assert_true (redis_lock_registry_renew (registry, "renewed", 60000, &error));
  g_assert_no_error (error);
  test_unlock_ok (lock);
}

/* --- Bad input ---------------------------------------------------------------------- */

static void
test_sentinels_down (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *url = g_strdup_printf ("redis-sentinel://127.0.0.1:%d,127.0.0.1:%d#mymaster",
                                          test_free_tcp_port (), test_free_tcp_port ());
  RedisLockRegistry *registry;
  gint64 t0 = test_now_ms ();

  g_test_summary ("When no Sentinel answers, redis_lock_registry_new() fails with CONNECTION "
                  "within the connect timeout");
  registry = redis_lock_registry_new (url, REGISTRY_KEY, &error);
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_cmpint (test_now_ms () - t0, <, 3000 + 2000);
}

static void
test_unknown_master (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (0, 1);
  g_autoptr (GError) error = NULL;
  g_autofree char *url = NULL;
  g_autofree char *sentinels = NULL;
  const char *good;

  g_test_summary ("A master name no Sentinel knows fails at once with CONNECTION naming it");
  if (s == NULL)
    return;
  good = redis_lock_test_sentinel_get_url (s);
  sentinels = g_strndup (good, (gsize) (strchr (good, '#') - good));
  url = g_strconcat (sentinels, "#no-such-master", NULL);
  g_assert_null (redis_lock_registry_new (url, REGISTRY_KEY, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_nonnull (strstr (error->message, "no-such-master"));
}

/* --- The lock family ------------------------------------------------------------------ */

static void
test_family (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisRWLock) reader = NULL;
  g_autoptr (RedisRWLock) writer = NULL;
  g_autoptr (RedisSemaphore) pool = NULL;
  g_autoptr (GError) error = NULL;
  RedisPermit *p1, *p2, *p3 = NULL;
  gint64 t0;

  g_test_summary ("A read-write lock and a semaphore work through a Sentinel URL: a reader "
                  "of one registry keeps a writer of another out until it unlocks, a "
                  "semaphore of 2 gives two permits and not a third, and after a forced "
                  "failover permits are taken on the new master");
  if (s == NULL)
    return;
  a = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  b = test_registry_new_on (redis_lock_test_sentinel_get_url (s));

  reader = redis_lock_registry_obtain_rw (a, "doc", &error);
  g_assert_no_error (error);
  writer = redis_lock_registry_obtain_rw (b, "doc", &error);
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_try_read_lock_for (reader, 0, NULL, &error));
  g_assert_no_error (error);
  g_assert_false (redis_rw_lock_try_write_lock_for (writer, 100, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_read_unlock (reader, &error));
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_try_write_lock_for (writer, 5000, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_write_unlock (writer, &error));
  g_assert_no_error (error);

  pool = redis_lock_registry_obtain_semaphore (a, "pool", 2, &error);
  g_assert_no_error (error);
  p1 = redis_semaphore_try_acquire_for (pool, 0, NULL, &error);
  g_assert_no_error (error);
  p2 = redis_semaphore_try_acquire_for (pool, 0, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (p1);
  g_assert_nonnull (p2);
  g_assert_null (redis_semaphore_try_acquire_for (pool, 100, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (redis_permit_release (p1, &error));
  g_assert_no_error (error);
  g_assert_true (redis_permit_release (p2, &error));
  g_assert_no_error (error);

  g_assert_cmpint (redis_lock_test_sentinel_failover (s, 30000, &error), ==, 1);
  g_assert_no_error (error);
  /* As for a lock (failover/idle): once the registry follows the switch, every permit
   * is taken on the new master. */
  t0 = test_now_ms ();
  while (test_now_ms () - t0 < 5000)
    {
      g_autofree char *there = NULL;

      g_clear_error (&error);
      p3 = redis_semaphore_try_acquire_for (pool, 0, NULL, &error);
      if (p3 == NULL)
        continue;
      there = node_get (s, 1, redis_permit_get_key (p3));
      if (there != NULL)
        break;
      /* Taken on the old master just before the switch. */
      redis_permit_release (p3, NULL);
      p3 = NULL;
    }
  g_assert_nonnull (p3);
  g_assert_true (redis_permit_release (p3, &error));
  g_assert_no_error (error);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/sentinel/basic", test_basic);
  g_test_add_func ("/sentinel/silent-delete", test_silent_delete);
  g_test_add_func ("/sentinel/failover/idle", test_failover_idle);
  g_test_add_func ("/sentinel/failover/audit-held-leases", test_failover_audit);
  g_test_add_func ("/sentinel/failover/doubtful-release", test_failover_doubtful_release);
  g_test_add_func ("/sentinel/failover/fencing-stale-counter", test_failover_fencing);
  g_test_add_data_func ("/sentinel/failover/under-load/min-replicas", GINT_TO_POINTER (TRUE),
                        test_failover_under_load);
  g_test_add_data_func ("/sentinel/failover/under-load/unreplicated", GINT_TO_POINTER (FALSE),
                        test_failover_under_load);
  g_test_add_func ("/sentinel/failover/subscription-moves", test_subscription_moves);
  g_test_add_func ("/sentinel/tool/run", test_tool);
  g_test_add_func ("/sentinel/min-replicas/paused-replica", test_min_replicas_paused_replica);
  g_test_add_func ("/sentinel/min-replicas/renewal", test_min_replicas_renewal);
  g_test_add_func ("/sentinel/family/rw-and-semaphore", test_family);
  g_test_add_func ("/sentinel/bad-input/sentinels-down", test_sentinels_down);
  g_test_add_func ("/sentinel/bad-input/unknown-master", test_unknown_master);
  return g_test_run ();
}
